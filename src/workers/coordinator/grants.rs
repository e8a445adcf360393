//! Shared budgets, granted before a session starts: the coordinator's
//! side of `workers/grant.rs`. Each running worker's loop is granted its
//! first session when it starts and one more each time it has none
//! running, while `grant::decide` says the shared budget covers it.

use std::path::PathBuf;

use super::Coordinator;
use crate::formats::ledger::Status;
use crate::workers::grant;

impl Coordinator {
    /// Whether the shared budget covers one more session now.
    pub(super) fn decide(&self) -> grant::Decision {
        let l = &self.config.loop_;
        let from = &self.counted_from;
        let limits = grant::Limits {
            max_iterations: l.max_iterations,
            max_cost: l.max_cost_usd,
            max_duration: l.max_duration.map(|d| d.0),
        };
        let spent = grant::Spent {
            iterations: self.ledger.iterations.saturating_sub(from.iteration),
            cost: self.ledger.cost_usd - from.cost,
            elapsed: from.elapsed + self.started.elapsed(),
            running: self.grants.values().map(Granted::running).sum(),
        };
        grant::decide(&limits, &spent)
    }

    /// One more session for each worker whose loop waits for one, while
    /// the shared budget covers it (a worker not granted one waits until
    /// the budget's end stops it).
    pub(super) fn regrant(&mut self) {
        let waiting: Vec<String> = (self.grants.iter())
            .filter(|(_, g)| g.running() == 0)
            .map(|(w, _)| w.clone())
            .collect();
        for worker in waiting {
            if self.decide() != grant::Decision::Go {
                return;
            }
            let Some(dir) = self.project_dir_of(&worker) else {
                continue;
            };
            let Some(g) = self.grants.get_mut(&worker) else {
                continue;
            };
            g.granted += 1;
            let sessions = g.granted;
            if let Err(e) = (crate::formats::Grant { sessions }).write(&dir) {
                tracing::warn!("cannot grant {worker} a session: {e}");
            }
        }
    }

    fn project_dir_of(&self, worker: &str) -> Option<PathBuf> {
        (self.ledger.assignments.iter())
            .find(|a| a.worker == worker && a.status == Status::Running)
            .map(|a| a.project_dir.clone())
    }
}

/// A running worker's sessions: granted to its loop, started, ended.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Granted {
    pub(super) granted: u32,
    pub(super) started: u32,
    pub(super) ended: u32,
}

impl Granted {
    /// Granted and not ended: running, or about to start.
    pub(super) fn running(&self) -> u32 {
        self.granted.saturating_sub(self.ended)
    }
}
