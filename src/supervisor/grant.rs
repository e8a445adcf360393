//! A worker's loop waits for the coordinator's grant before each session
//! (`workers/grant.rs`), a fleet item's loop for its fleet worker's
//! (`workers/fleet/item.rs`, once the ledger has the last iteration): the
//! shared budget is decided before a session starts, not found spent after
//! another started. Signals and `ralph stop` are heard while it waits; a
//! loop with no grant file is not held, nor one that is neither (a stale
//! grant file in a worktree a person took over holds nobody).

use std::time::Duration;

use super::Supervisor;
use super::verdict::Outcome;
use crate::formats::Grant;

impl Supervisor {
    /// Wait until this loop may start one more session. `Some` ends the
    /// run (a request while waiting: the coordinator stops a worker whose
    /// session the shared budget does not cover).
    pub(super) async fn wait_for_grant(&mut self) -> Option<(Outcome, String)> {
        if !self.waits_for_grants {
            return None;
        }
        loop {
            match Grant::read(&self.root) {
                None => return None,
                Some(g) if g.sessions > self.sessions_started => {
                    self.sessions_started += 1;
                    return None;
                }
                Some(_) => {}
            }
            tokio::select! {
                request = self.signals.next() => {
                    let end = self.on_request_between(request, "waiting for the coordinator's grant");
                    if end.is_some() {
                        return end;
                    }
                }
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    }
}
