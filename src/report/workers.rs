//! What `ralph status` shows of a parallel run: every worker, what it works
//! on, its own loop's state, and every branch not merged yet with its
//! commits (a worker branch is always merged or listed).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::formats::ledger::{Ledger, Status};
use crate::formats::{Layout, RunState};

/// Why a worker of a parallel run with no coordinator is paused.
const NO_COORDINATOR: &str =
    "no coordinator is running: `ralph run --workers N` resumes it in its worktree";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct WorkersView {
    pub(crate) run_id: String,
    pub(crate) run_branch: String,
    /// When the parallel run started (RFC 3339).
    pub(crate) started_at: String,
    pub(crate) workers: u32,
    /// `running` while a coordinator holds the lock, else how the last one ended.
    pub(crate) outcome: Option<String>,
    pub(crate) iterations: u32,
    pub(crate) cost_usd: f64,
    pub(crate) merged: Vec<String>,
    pub(crate) merges: usize,
    pub(crate) assignments: Vec<AssignmentView>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct AssignmentView {
    pub(crate) worker: String,
    pub(crate) item: String,
    /// `item` or `update`.
    pub(crate) task: &'static str,
    /// `running`, `paused` or `left`.
    pub(crate) status: &'static str,
    pub(crate) why: Option<String>,
    pub(crate) branch: String,
    pub(crate) worktree: String,
    /// Where its loop runs (the project inside the worktree).
    pub(crate) project_dir: String,
    /// Its own loop: iteration and cost so far.
    pub(crate) iteration: u32,
    pub(crate) cost_usd: f64,
    /// Its commits not on the run branch, newest first: (id, subject).
    pub(crate) unmerged: Vec<(String, String)>,
}

impl WorkersView {
    /// The parallel run recorded in the project's `.ralph/`, if any.
    pub(crate) fn load(root: &Path) -> Option<WorkersView> {
        let layout = Layout::new(root);
        let ledger = Ledger::load(&layout.dir).ok()??;
        let git = git2::Repository::discover(root).ok();
        let coordinating = crate::project::running_supervisor(&layout).is_some();
        // Iterations the workers ended that no coordinator took in (it was
        // killed): they count, as the next one will count them. A live one
        // takes them in itself; their logs are not read on every status.
        let unheard = if coordinating {
            Vec::new()
        } else {
            ledger.unheard()
        };
        let (unheard, unheard_cost) = (unheard.iter())
            .filter_map(|r| match &r.event {
                crate::formats::Event::IterationEnded { cost_usd, .. } => Some(*cost_usd),
                _ => None,
            })
            .fold((0, 0.0), |(n, c), cost| (n + 1, c + cost));
        let assignments = ledger
            .assignments
            .iter()
            .map(|a| {
                let state = RunState::load(&Layout::new(&a.project_dir).state())
                    .ok()
                    .flatten()
                    .unwrap_or_default();
                // The ledger says `running` for what a coordinator that
                // died (kill -9, a failed start) had running: without one,
                // a worker runs only while its own loop still holds its lock.
                let own_loop =
                    || crate::project::running_supervisor(&Layout::new(&a.project_dir)).is_some();
                let (status, why) = match &a.status {
                    Status::Left(why) => ("left", Some(why.clone())),
                    Status::Running if coordinating || own_loop() => ("running", None),
                    Status::Paused if coordinating => ("paused", None),
                    Status::Running | Status::Paused => {
                        ("paused", Some(NO_COORDINATOR.to_string()))
                    }
                };
                AssignmentView {
                    worker: a.worker.clone(),
                    item: a.item.clone(),
                    task: a.task.name(),
                    status,
                    why,
                    branch: a.branch.clone(),
                    worktree: a.worktree.display().to_string(),
                    project_dir: a.project_dir.display().to_string(),
                    iteration: state.iteration,
                    cost_usd: state.cost_usd,
                    unmerged: git
                        .as_ref()
                        .and_then(|g| {
                            crate::repo::worktree::commits_ahead(g, &a.branch, &ledger.run_branch)
                                .ok()
                        })
                        .unwrap_or_default(),
                }
            })
            .collect();
        Some(WorkersView {
            run_id: ledger.run_id,
            run_branch: ledger.run_branch,
            started_at: ledger.started_at,
            workers: ledger.workers,
            outcome: if crate::project::running_supervisor(&layout).is_some() {
                Some("running".into())
            } else {
                ledger.outcome
            },
            iterations: ledger.iterations + unheard,
            cost_usd: ledger.cost_usd + unheard_cost,
            merged: ledger.merged,
            merges: ledger.merges.len(),
            assignments,
        })
    }

    /// Every branch not merged yet, for the report's items left: its item,
    /// where it stands and why, and its commits.
    pub(crate) fn left(&self) -> Vec<super::lanes::LeftItem> {
        (self.assignments.iter())
            .map(|a| {
                let commits: Vec<String> = (a.unmerged.iter())
                    .map(|(id, subject)| format!("{} {subject}", &id[..id.len().min(10)]))
                    .collect();
                super::lanes::LeftItem {
                    item: a.item.clone(),
                    why: format!(
                        "{}{}; branch {}, {} commit(s) not merged{}{}",
                        a.status,
                        a.why
                            .as_deref()
                            .map(|w| format!(": {w}"))
                            .unwrap_or_default(),
                        a.branch,
                        commits.len(),
                        if commits.is_empty() { "" } else { ": " },
                        commits.join("; ")
                    ),
                }
            })
            .collect()
    }

    /// The lines `ralph status` adds.
    pub(crate) fn human(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "workers    {} on {} (run {}{}): {} iteration(s), ${:.2}, {} item(s) merged, {} merge(s) tried",
            self.workers,
            self.run_branch,
            self.run_id,
            self.outcome
                .as_deref()
                .map(|o| format!(", {}", o.replace('_', " ")))
                .unwrap_or_default(),
            self.iterations,
            self.cost_usd,
            self.merged.len(),
            self.merges
        );
        for a in &self.assignments {
            let _ = writeln!(
                out,
                "  {:<6} {} \"{}\"{}: {}, iteration {}, ${:.2}; branch {} ({} commit(s) not merged), worktree {}",
                a.worker,
                a.status,
                a.item,
                if a.task == "update" {
                    " (updating its branch after a conflict)"
                } else {
                    ""
                },
                a.why.as_deref().unwrap_or("its loop's state below"),
                a.iteration,
                a.cost_usd,
                a.branch,
                a.unmerged.len(),
                a.worktree
            );
            for (id, subject) in &a.unmerged {
                let _ = writeln!(out, "           {} {subject}", &id[..id.len().min(10)]);
            }
        }
        out
    }
}
