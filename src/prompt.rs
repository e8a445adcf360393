//! The PROMPT.md of each iteration: config, state and plan rendered through
//! the `PROMPT.md.j2` template (see `templates`).

use crate::config::Config;
use crate::context::Level;
use crate::error::Result;
use crate::plan::Plan;
use crate::state::RunState;
pub use crate::templates::{CHECKPOINT_REQUEST, EMBEDDED, HANDOFF, PROMPT, Templates, render_str};

/// The PROMPT.md of iteration `iteration`: plan, progress so far, and the
/// resume block while a checkpoint is active.
pub fn render_prompt(
    templates: &Templates,
    config: &Config,
    state: &RunState,
    plan: &Plan,
    iteration: u32,
) -> Result<String> {
    let cp = &state.context_checkpoint;
    let resume = cp.active.then(|| {
        minijinja::context! {
            iteration => state.context_history.iter().rev().find(|h| h.checkpoint).map_or(iteration.saturating_sub(1), |h| h.iteration),
            level => cp.level.map_or("L2", Level::name),
            percent => cp.percent_at_checkpoint.round() as i64,
            handoff_file => cp.handoff_file.as_deref().unwrap_or("(no handoff was written)"),
            current_item => &cp.current_todo_item,
            progress => &cp.progress_on_item,
            files => &cp.files_in_progress,
            commit => cp.commit.as_deref().map(|c| &c[..c.len().min(10)]),
        }
    });
    let history: Vec<_> = state
        .history
        .iter()
        .rev()
        .take(10)
        .rev()
        .map(|h| {
            let ctx = state
                .context_history
                .iter()
                .find(|c| c.iteration == h.iteration);
            minijinja::context! {
                iteration => h.iteration,
                outcome => &h.outcome,
                checkpoint => ctx.is_some_and(|c| c.checkpoint),
                level => ctx.and_then(|c| c.level).map(Level::name),
                peak_percent => ctx.map_or(0.0, |c| c.peak_percent),
            }
        })
        .collect();
    let objective = plan
        .title
        .clone()
        .unwrap_or_else(|| format!("work through {}", config.plan.display()));
    templates.render(
        PROMPT,
        minijinja::context! {
            iteration => iteration,
            max_iterations => config.loop_.max_iterations,
            objective => objective,
            plan_file => config.plan.display().to_string(),
            plan => plan.view(),
            promise => config.loop_.completion_promise.trim(),
            history => history,
            resume => resume,
        },
    )
}
