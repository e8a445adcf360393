//! How a parallel run ends: its outcome and reason (every worker branch
//! merged or listed), the handoff of unmerged branches, `run_ended`, and
//! the morning report with a lane per worker.

use super::{Coordinator, Stop, read_plan};
use crate::error::Result;
use crate::events::Event;
use crate::hooks::Facts;
use crate::workers::assign::{self, UnitState};
use crate::workers::worktree;

impl Coordinator {
    pub(super) fn end(&mut self) -> Result<i32> {
        // Loops a dead coordinator left that this one did not resume (it
        // was stopped first): what they did counts too.
        let idle: Vec<String> = (self.ledger.assignments.iter())
            .filter(|a| !crate::workers::child::project_busy(&a.project_dir))
            .map(|a| a.worker.clone())
            .collect();
        for worker in idle {
            self.catch_up(&worker);
        }
        let text = read_plan(&self.plan_path).unwrap_or_default();
        let units = assign::units(&text).unwrap_or_default();
        let keys = |state: UnitState| -> Vec<String> {
            (units.iter().filter(|u| u.state == state))
                .map(|u| u.key.clone())
                .collect()
        };
        let open = keys(UnitState::Open).len();
        let left: Vec<String> = self
            .ledger
            .assignments
            .iter()
            .map(|a| {
                let commits =
                    worktree::commits_ahead(&self.git, &a.branch, &self.ledger.run_branch)
                        .map(|c| c.len())
                        .unwrap_or(0);
                format!("{} ({}, {commits} commit(s) not merged)", a.branch, a.item)
            })
            .collect();
        let (outcome, code, mut reason) = match self.stop {
            Some(Stop::Interrupted) => ("interrupted", 130, "interrupted".to_string()),
            Some(Stop::Stopped) => ("stopped", 6, "stopped by `ralph stop`".to_string()),
            Some(Stop::Budget) => ("budget_spent", 5, "a shared budget is spent".to_string()),
            Some(Stop::Iterations) => (
                "iteration_limit",
                4,
                format!("{} iterations over all workers", self.ledger.iterations),
            ),
            None if open == 0 && left.is_empty() => (
                "completed",
                0,
                "every item is merged and checked off".to_string(),
            ),
            None => (
                "incomplete",
                4,
                format!("{open} item(s) open; left to a person: {}", left.join("; ")),
            ),
        };
        if code == 0 {
            self.ledger.ended = Some(crate::state::now_rfc3339());
        }
        // The run's folder of worktrees, once the last is removed (a kept
        // one keeps it: `remove_dir` leaves a folder with anything in it).
        let _ = std::fs::remove_dir(&self.worktrees);
        self.ledger.outcome = Some(outcome.into());
        self.save()?;
        // Every worker branch is merged or listed: here, in the report's
        // reason, and in `ralph status`.
        if !left.is_empty() && outcome != "incomplete" {
            reason = format!("{reason}; not merged yet: {}", left.join("; "));
        }
        if let Some(full) = &self.worktrees_full
            && outcome == "incomplete"
        {
            reason = format!("{reason}; {full}");
        }
        let handoff = if left.is_empty() {
            None
        } else {
            self.handoff_of_unmerged()
        };
        if let Some(path) = &handoff {
            reason = format!("{reason} (listed with their commits in {path})");
        }
        let reason_for_report = reason.clone();
        let ended = Event::RunEnded {
            outcome: outcome.into(),
            exit_code: code,
            reason,
            iterations: self.ledger.iterations,
            cost_usd: self.ledger.cost_usd,
            report: None,
        };
        let facts = Facts {
            iteration: self.ledger.iterations,
            run_id: self.ledger.run_id.clone(),
            handoff,
            ..Facts::default()
        };
        self.hooks.emit(&mut self.bus, ended, || facts);
        // The morning report, with a lane per worker and the merge queue
        // (after run_ended, which it reads): the run's own figures are its
        // workers' iterations in the log, what it changed the run branch
        // from its start to now, ralph's commits the ledger's.
        let state = crate::state::RunState {
            run_id: self.ledger.run_id.clone(),
            plan: self.ledger.plan.clone(),
            started_at: self.ledger.started_at.clone(),
            status: outcome.into(),
            exit_reason: Some(reason_for_report),
            completed_items: keys(UnitState::Done),
            todo_items: keys(UnitState::Open),
            cost_usd: self.ledger.cost_usd,
            start_commit: self.ledger.start_commit.clone(),
            end_commit: (self.git.head().ok())
                .and_then(|h| h.target())
                .map(|id| id.to_string()),
            ended_at: Some(crate::state::now_rfc3339()),
            ..Default::default()
        };
        let layout = crate::state::Layout::new(&self.root);
        let kept = layout.run_dir(&self.ledger.run_id);
        let written = crate::state::create_dir_private(&kept)
            .and_then(|()| self.ledger.save(&kept))
            .and_then(|()| crate::report::write_after_run(&layout, &self.config, &state));
        if let Err(e) = written {
            tracing::warn!("cannot write the report: {e}");
        }
        Ok(code)
    }

    /// The handoff of a parallel run that ends with worker branches not
    /// merged: each with its item, why, worktree and commits, and how to go
    /// on. Its path, relative to the project.
    fn handoff_of_unmerged(&self) -> Option<String> {
        let view = crate::workers::WorkersView::load(&self.root)?;
        let stamp = jiff::Zoned::now().strftime("%Y-%m-%d-%H%M");
        let rel = format!(".ralph/handoffs/{stamp}-workers-{}.md", self.ledger.run_id);
        let text = format!(
            "# Worker branches not merged (parallel run {})\n\n{}\n\
             `ralph run --workers {}` resumes the paused ones in their worktrees and retries\n\
             nothing that was left to a person: merge such a branch into {} yourself\n\
             (its worktree holds its work), then run again; `ralph status` lists them.\n",
            self.ledger.run_id,
            view.human(),
            self.ledger.workers,
            self.ledger.run_branch
        );
        let path = self.root.join(&rel);
        std::fs::create_dir_all(path.parent()?).ok()?;
        crate::state::write_atomic(&path, text.as_bytes()).ok()?;
        Some(rel)
    }
}
