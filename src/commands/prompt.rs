//! The next iteration as it would start: its number, the plan, the
//! rendered PROMPT.md and the agent command line. `ralph prompt` prints the
//! prompt; `ralph run --dry-run` prints all of it.

use std::path::Path;

use crate::agent::AgentCommand;
use crate::cli::RunArgs;
use crate::config::Config;
use crate::error::Result;
use crate::formats::{Layout, RunState};
use crate::plan::Plan;
use crate::project::Project;
use crate::prompt::Templates;
use crate::prompt::fit::{self, DocStats, Stats};
use crate::prompt::tiers;

pub(crate) struct NextIteration {
    pub(crate) iteration: u32,
    pub(crate) plan: Plan,
    /// The PROMPT.md text, given as the kind gives it (`AgentKind::prompt_via`).
    pub(crate) prompt: String,
    pub(crate) command: AgentCommand,
    /// What the prompt and the handoff it names cost against their budgets.
    pub(crate) stats: Stats,
}

impl NextIteration {
    /// Load and render what the next iteration would start with (of the
    /// recorded run, or of a new one when `fresh`); writes nothing.
    pub(crate) fn preview(root: &Path, config: &Config, fresh: bool) -> Result<NextIteration> {
        let templates = Templates::load(root)?;
        templates.check(&[
            crate::config::templates::PROMPT,
            crate::config::templates::CHECKPOINT_REQUEST,
        ])?;
        let plan = Project::at(root).plan(config)?;
        let mut state = match RunState::load(&Layout::new(root).state())? {
            Some(s) if !fresh && !s.is_finished() => s,
            _ => RunState::default(),
        };
        state.shard_request = crate::supervisor::next_shard(root, config, &state, &plan);
        let iteration = state.iteration + 1;
        let fitted = fit::render_prompt(root, &templates, config, &state, &plan, iteration)?;
        let stats = Stats::new(root, config, &state, &plan, &fitted, iteration);
        Ok(NextIteration {
            iteration,
            plan,
            prompt: fitted.text,
            command: AgentCommand::from_config(config, iteration, root),
            stats,
        })
    }
}

/// `ralph prompt [PLAN] [--fresh] [--stats] [--json]`: the PROMPT.md the
/// next iteration would get, or what its sections cost (`--stats`, `--json`).
pub(crate) fn prompt(project: &Project, args: &RunArgs, stats: bool, json: bool) -> Result<i32> {
    let root = project.root();
    let config = super::load_config(project, args)?;
    let next = NextIteration::preview(root, &config, args.fresh)?;
    if stats || json {
        super::print(&super::Report::render(&next.stats, json))?;
    } else {
        super::print(&next.prompt)?;
    }
    Ok(0)
}

impl super::Report for Stats {
    fn human(&self) -> String {
        let mut out = String::new();
        doc(
            &mut out,
            &format!("prompt of iteration {}", self.iteration),
            &self.prompt,
        );
        out.push_str(&format!(
            "  shows {} of {} open items, {} done items, {} earlier iterations in detail, {} decisions\n",
            self.open_items_shown,
            self.open_items,
            self.done_items_shown,
            self.iterations_in_detail,
            self.decisions_shown
        ));
        match &self.handoff {
            Some(h) => doc(&mut out, "handoff", h),
            None => out.push_str("handoff: none (no checkpoint to resume from)\n"),
        }
        out
    }
}

fn doc(out: &mut String, what: &str, d: &DocStats) {
    let verdict = if d.fits {
        "within budget"
    } else {
        "OVER BUDGET"
    };
    out.push_str(&format!(
        "{what} ({}): {} of {} tokens ({}%), {} bytes; {verdict}\n",
        d.file,
        tiers::thousands(d.tokens),
        tiers::thousands(d.budget),
        d.tokens * 100 / d.budget.max(1),
        tiers::thousands(d.bytes),
    ));
    let width = d
        .sections
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0);
    for s in &d.sections {
        let pad = width - s.name.chars().count();
        out.push_str(&format!(
            "  {}{:pad$}  {:>7}\n",
            s.name,
            "",
            tiers::thousands(s.tokens)
        ));
    }
}
