//! The PROMPT.md of each iteration: config, state and plan rendered through
//! the `PROMPT.md.j2` template (see `templates`).

use std::path::Path;

use crate::config::Config;
pub(crate) use crate::config::templates::{CHECKPOINT_REQUEST, HANDOFF, PROMPT, render_str};
pub use crate::config::templates::{EMBEDDED, Templates};
use crate::error::Result;
use crate::formats::RunState;
use crate::plan::Plan;

/// The PROMPT.md of iteration `iteration`: plan, progress so far, the
/// decision log and the resume block while a checkpoint is active, tiered
/// to fit `[prompt] max_tokens` (`prompt_budget`).
pub(crate) fn render_prompt(
    root: &Path,
    templates: &Templates,
    config: &Config,
    state: &RunState,
    plan: &Plan,
    iteration: u32,
) -> Result<String> {
    crate::prompt::fit::render_prompt(root, templates, config, state, plan, iteration)
        .map(|f| f.text)
}
