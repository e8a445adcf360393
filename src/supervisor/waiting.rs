//! The IO side of waiting out a usage limit: the state says `waiting`,
//! the display counts down, and a signal or `ralph stop` still ends the
//! run. How long to wait is `limit_wait`'s pure decision.

use std::time::Duration;

use tokio::time::sleep_until;

use super::limit_wait::LimitPlan;
use super::verdict::Outcome;
use super::{Now, Supervisor};
use crate::formats::Event;
use crate::formats::RunStatus;
use crate::rules::limits::LimitHit;

impl Supervisor {
    /// Sleep until a usage limit resets (interruptible), or end the run
    /// when waiting is off or would take too long.
    pub(super) async fn wait_for_limit(&mut self, hit: LimitHit) -> Option<(Outcome, String)> {
        let now = Now::read();
        let wait = match self
            .backoff
            .plan(&hit, &now, &self.config.rate_limit, &self.budgets)
        {
            LimitPlan::Wait(wait) => wait,
            LimitPlan::End(why) => return Some((Outcome::BudgetSpent, why)),
        };
        let until = now.wall + jiff::SignedDuration::try_from(wait).unwrap_or_default();
        self.tree_touched();
        self.state.status = RunStatus::Waiting;
        self.state.waiting_until = Some(until.to_string());
        self.save();
        let waiting = Event::LimitWait {
            until: until.to_string(),
            seconds: wait.as_secs(),
            source: hit.source,
            detail: hit.detail.clone(),
        };
        self.publish(waiting, None);
        let end = tokio::time::Instant::now() + wait;
        loop {
            tokio::select! {
                _ = sleep_until(end) => break,
                _ = tokio::time::sleep(Duration::from_secs(1)) => self.events.bus().tick(),
                request = self.signals.next() => {
                    if let Some(end) = self.on_request_between(request, "while waiting for a usage limit to reset") {
                        return Some(end);
                    }
                }
            }
        }
        self.state.waiting_until = None;
        self.state.status = RunStatus::Running;
        self.save();
        None
    }
}
