//! How a parallel run ends: its outcome and reason (every worker branch
//! merged or listed), the handoff of unmerged branches, the morning report
//! with a lane per worker, then `run_ended` and `on_exit`.

use super::Coordinator;
use super::machine::Stop;
use crate::error::Result;
use crate::formats::Event;
use crate::hooks::Facts;
use crate::plan::units::{self, UnitState};
use crate::repo::worktree;

impl Coordinator {
    pub(super) fn end(&mut self) -> Result<i32> {
        // Loops a dead coordinator left that this one did not resume (it
        // was stopped first): what they did counts too.
        self.catch_up_idle();
        if let Err(e) = self.git_write(Coordinator::recheck_merged) {
            self.bus.emit(Event::Warning {
                message: format!("cannot check merged items off again: {e}"),
            });
        }
        let text = self.plan_text().unwrap_or_default();
        let open = units::units(&text)
            .map(|u| u.iter().filter(|u| u.state == UnitState::Open).count())
            .unwrap_or(0);
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
        let (outcome, code, mut reason) = match self.machine.stop() {
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
            self.ledger.ended = Some(crate::formats::now_rfc3339());
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
        // What ralph acts on that changed during the run (an agent's edit
        // merged into the run branch): not obeyed, and the next start asks.
        let changed = self.trust.started.changed(&self.root);
        if !changed.is_empty() {
            self.bus.emit(Event::Trust {
                action: crate::formats::TrustAction::Ignored,
                message: format!(
                    "changed during the run: {}; not obeyed (the workers kept the configuration, templates and scripts the run started with)",
                    changed.join(", ")
                ),
                paths: changed.clone(),
            });
            reason = format!(
                "{reason}; changed during the run and not obeyed: {} (the next `ralph run` asks you to confirm them)",
                changed.join(", ")
            );
        }
        self.trust.end(&self.root);
        if let Err(e) = self.trust.save(&self.ralph_dir) {
            tracing::warn!("cannot save the trust record: {e}");
        }
        let handoff = if left.is_empty() {
            None
        } else {
            self.handoff_of_unmerged()
        };
        if let Some(path) = &handoff {
            reason = format!("{reason} (listed with their commits in {path})");
        }
        // The morning report first (for the user and `on_exit`, as a single
        // loop's): the run's figures are its workers' iterations in the
        // log; its outcome, items and what it changed on the run branch
        // are this state's; ralph's commits the ledger's, kept beside it.
        let head = (self.git)
            .refname_to_id(&format!("refs/heads/{}", self.ledger.run_branch))
            .ok()
            .map(|id| id.to_string());
        let mut state = self
            .ledger
            .state(&text, head, outcome.into(), Some(reason.clone()));
        state.ended_at = Some(crate::formats::now_rfc3339());
        let layout = crate::formats::Layout::new(&self.root);
        let kept = layout.run_dir(&self.ledger.run_id);
        if let Err(e) =
            crate::formats::create_dir_private(&kept).and_then(|()| self.ledger.save(&kept))
        {
            tracing::warn!("cannot keep the workers' ledger beside the report: {e}");
        }
        let report = crate::report::after_run(&layout, &self.config, &state, &mut self.bus);
        let ended = Event::RunEnded {
            outcome: outcome.into(),
            exit_code: code,
            reason,
            iterations: self.ledger.iterations,
            cost_usd: self.ledger.cost_usd,
            report,
        };
        let facts = Facts {
            iteration: self.ledger.iterations,
            run_id: self.ledger.run_id.clone(),
            handoff,
            ..Facts::default()
        };
        self.hooks.emit(&mut self.bus, ended, || facts);
        Ok(code)
    }

    /// The handoff of a parallel run that ends with worker branches not
    /// merged: each with its item, why, worktree and commits, and how to go
    /// on. Its path, relative to the project.
    fn handoff_of_unmerged(&self) -> Option<String> {
        let mut view = crate::report::WorkersView::load(&self.root)?;
        // How it ended, not `running`: this coordinator still holds the lock.
        view.outcome.clone_from(&self.ledger.outcome);
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
        crate::formats::write_atomic(&path, text.as_bytes()).ok()?;
        Some(rel)
    }
}
