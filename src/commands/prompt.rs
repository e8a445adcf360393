//! The next iteration as it would start: its number, the plan, the
//! rendered PROMPT.md and the agent command line. `ralph prompt` prints the
//! prompt; `ralph run --dry-run` prints all of it.

use std::path::Path;

use crate::agent::AgentCommand;
use crate::cli::RunArgs;
use crate::config::Config;
use crate::error::Result;
use crate::plan::Plan;
use crate::prompt::{self, Templates};
use crate::state::{Layout, RunState};

pub struct NextIteration {
    pub iteration: u32,
    pub plan: Plan,
    /// The PROMPT.md text, sent as the first stream-json user message.
    pub prompt: String,
    pub command: AgentCommand,
}

impl NextIteration {
    /// Load and render what the next iteration would start with (of the
    /// recorded run, or of a new one when `fresh`); writes nothing.
    pub fn preview(root: &Path, config: &Config, fresh: bool) -> Result<NextIteration> {
        let templates = Templates::load(root)?;
        templates.check(&[prompt::PROMPT, prompt::CHECKPOINT_REQUEST])?;
        let plan = Plan::load(&root.join(&config.plan))?;
        let state = match RunState::load(&Layout::new(root).state())? {
            Some(s) if !fresh && !s.is_finished() => s,
            _ => RunState::default(),
        };
        let iteration = state.iteration + 1;
        let prompt = prompt::render_prompt(&templates, config, &state, &plan, iteration)?;
        Ok(NextIteration {
            iteration,
            plan,
            prompt,
            command: AgentCommand::from_config(config, iteration),
        })
    }
}

/// `ralph prompt [PLAN] [--fresh]`: the PROMPT.md the next iteration would get.
pub fn prompt(root: &Path, args: &RunArgs) -> Result<i32> {
    let config = super::load_config(root, args)?;
    let next = NextIteration::preview(root, &config, args.fresh)?;
    super::print(&next.prompt)?;
    Ok(0)
}
