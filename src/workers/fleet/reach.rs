//! A worker and its remote: fetches and retries with back-off while the
//! remote cannot be reached (said once, and again when it answers), the
//! pauses a stop request cuts short, the worker's status ref, and its end
//! (all it leaves on the remote in one bounded push: `leave.rs`).

use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::child;
use super::job::Left;
use super::leave::Leaving;
use super::live::Live;
use super::loops::{self, EndRecord};
use super::remote::{Fleet, View, WorkerState, WorkerStatus};
use super::say::FleetEvent;
use super::units::Unit;
use super::wire::{Update, WireError};
use super::worker::Worker;
use crate::formats::Record;

/// A call at the worker's end is given at least this, however short the grace.
const END_PUSH_AT_LEAST: Duration = Duration::from_secs(2);

impl Worker {
    pub(super) fn say_waiting(&mut self, view: &View, open: usize) {
        let _ = view;
        self.status(WorkerState::Waiting, None, "");
        self.say.say(FleetEvent::Waiting { open });
    }

    /// A fetch; `None` after saying the remote is unreachable and waiting.
    pub(super) fn sync(&mut self) -> Option<View> {
        match self.fleet.sync() {
            Ok(v) => {
                self.reconnected();
                Some(v)
            }
            Err(e) => {
                let wait = self.unreachable(&e);
                self.pause(wait);
                None
            }
        }
    }

    /// Retry `op` on the remote until it goes through (unreachable: back-off)
    /// or is refused; a stop request ends the retries.
    pub(super) fn retry_remote(
        &mut self,
        mut op: impl FnMut(&mut Fleet) -> std::result::Result<(), WireError>,
    ) -> bool {
        loop {
            match op(&mut self.fleet) {
                Ok(()) => {
                    self.reconnected();
                    return true;
                }
                Err(WireError::Unreachable(e)) if !child::stop_requested() => {
                    let wait = self.unreachable(&WireError::Unreachable(e));
                    self.pause(wait);
                }
                Err(_) => return false,
            }
        }
    }

    /// Say the remote is unreachable; the back-off before the next try.
    pub(super) fn unreachable(&mut self, e: &WireError) -> Duration {
        let since = *self.unreachable_since.get_or_insert_with(Instant::now);
        self.failures += 1;
        let bound = self.config.fleet.max_unreachable.0;
        if since.elapsed() >= bound && !child::stop_requested() {
            self.say.say(FleetEvent::RemoteGone {
                error: e.to_string(),
                after_secs: since.elapsed().as_secs(),
            });
            child::stop_for_good();
            return Duration::ZERO;
        }
        let wait = Duration::from_secs(1u64 << self.failures.min(16))
            .min(self.config.fleet.max_retry_wait.0);
        self.say.say(FleetEvent::Unreachable {
            error: e.to_string(),
            retry_in_secs: wait.as_secs(),
        });
        wait
    }

    pub(super) fn reconnected(&mut self) {
        self.failures = 0;
        if let Some(since) = self.unreachable_since.take() {
            self.say.say(FleetEvent::Reconnected {
                after_secs: since.elapsed().as_secs(),
            });
        }
    }

    pub(super) fn poll(&self) -> Duration {
        (self.fleet.lease_length() / 4).clamp(Duration::from_millis(500), Duration::from_secs(5))
    }

    /// Sleep, cut short by a stop request.
    pub(super) fn pause(&self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until && !child::stop_requested() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The worker's end, as it exits with `code`: one atomic push of all
    /// it leaves on the remote (`leave.rs`: its last status, its end
    /// record with `fleet_finished` last, what it owes the ledger, the
    /// item it gives back), given at most `[fleet] network_timeout` or a
    /// third of `[fleet] grace` (what a stop leaves once the loop has
    /// checkpointed), whichever is shorter: a remote that does not answer
    /// holds the exit that long, once. A race lost (the remote answered:
    /// the ledger or the status moved, the item was taken over) is looked
    /// at again once; anything else is said (`fleet_unrecorded`).
    pub(super) fn end(&mut self, code: i32) {
        let f = &self.config.fleet;
        let bound = f
            .network_timeout
            .0
            .min((f.grace.0 / 3).max(END_PUSH_AT_LEAST));
        self.fleet.bound_calls(bound);
        let state = match code {
            0 => WorkerState::Finished,
            130 => WorkerState::Stopped,
            _ => WorkerState::Failed,
        };
        let mut left = self.leaving.take();
        let finished = self.say.record(FleetEvent::Finished { exit_code: code });
        let mut lost_to = None;
        let mut looked_again = false;
        let outcome = loop {
            let leaving = match self.leaving(state, code, &finished, left.as_ref()) {
                Ok(leaving) => leaving,
                Err(e) => break Err(e),
            };
            match self.fleet.wire().push(&leaving.updates()) {
                // A race lost, so the remote answers: what is still ours, once more.
                Err(WireError::Rejected(_)) if !looked_again => {
                    looked_again = true;
                    match self.fleet.sync() {
                        Ok(view) => {
                            if let Some(g) = left.as_mut().map(|l| &mut l.giving) {
                                let claim = view.claims.get(&g.key);
                                lost_to = g.seen(
                                    claim.map(|(oid, lease)| (*oid, lease.holder.as_str())),
                                    view.items.get(&g.key).copied(),
                                    view.snapshots.get(&g.key).copied(),
                                );
                            }
                        }
                        Err(e) => break Ok((leaving, Err(e))),
                    }
                }
                pushed => break Ok((leaving, pushed)),
            }
        };
        match outcome {
            Ok((_, Ok(()))) => {
                // On the remote now: the loop record's and the end record's.
                self.say.pushed(self.say.unpushed().len());
                self.spent = self.spent.plus(self.owed.0);
                match (left, lost_to) {
                    // Its branch's last commits stay in this clone (said so).
                    (Some(l), Some(holder)) => self.say.say(FleetEvent::Lost {
                        item: l.giving.key,
                        holder,
                    }),
                    (Some(l), None) => self.say.said(l.released),
                    (None, _) => {}
                }
                self.say.said(finished);
            }
            Ok((leaving, Err(e))) => {
                let (missing, only_local) = leaving.unrecorded();
                self.say.say(FleetEvent::Unrecorded {
                    error: e.to_string(),
                    missing,
                    item: leaving.item.map(|i| i.key),
                    only_local,
                });
                self.say.say(FleetEvent::Finished { exit_code: code });
            }
            Err(e) => {
                self.say.warn(format!(
                    "the worker's last records could not be made (they stay in this clone's .ralph/fleet/ log): {e}"
                ));
                self.say.say(FleetEvent::Finished { exit_code: code });
            }
        }
    }

    /// What this worker leaves on the remote as it exits (`leave.rs`), as
    /// the clone last saw the remote: its end record holds what it said
    /// that no loop record carries, the item's `fleet_released` if it is
    /// still ours, and `finished`.
    fn leaving(
        &self,
        state: WorkerState,
        code: i32,
        finished: &Record,
        left: Option<&Left>,
    ) -> Result<Leaving, WireError> {
        let (owed, limit) = &self.owed;
        let spending = if owed.is_zero() && limit.is_none() {
            None
        } else {
            let view = self.fleet.view()?;
            Some(self.fleet.spending(&view, *owed, limit.as_ref())?.0)
        };
        let mut status = self.status_record(state, None, "");
        // With what this push pays.
        status.spent = self.spent.plus(*owed);
        let status = self.fleet.status_update(&status)?;
        let carried = left.map_or(0, |l| l.carried);
        let mut said = self.say.unpushed()[carried..].to_vec();
        said.extend(left.filter(|l| l.giving.ours).map(|l| l.released.clone()));
        said.push(finished.clone());
        let record = EndRecord {
            worker: self.fleet.worker().to_string(),
            ended_at: Timestamp::now(),
            exit_code: code,
        };
        let oid = loops::end_commit(self.fleet.repo(), &record, &said)?;
        let end = Update::create(loops::end_refname(self.fleet.names(), &record), oid);
        Ok(Leaving {
            status,
            end,
            spending,
            item: left.map(|l| l.giving.clone()),
        })
    }

    /// Publish this worker's state (best effort: a status is not work),
    /// with its item loop's live reading while it holds an item.
    pub(super) fn status(&mut self, state: WorkerState, unit: Option<&Unit>, note: &str) {
        let status = self.status_record(state, unit, note);
        self.said_at = Some(Instant::now());
        if self.fleet.say(&status).is_ok() {
            self.live_said = status.live;
        }
    }

    /// This worker's state as its status ref holds it.
    fn status_record(&self, state: WorkerState, unit: Option<&Unit>, note: &str) -> WorkerStatus {
        let live = unit.and(self.live.clone());
        WorkerStatus {
            worker: self.fleet.worker().to_string(),
            state,
            item: unit.map(|u| u.key.clone()),
            // Bounded: the status is pushed every beat; the plan has the rest.
            item_text: unit
                .map(|u| crate::text::cut(&u.text, super::lease::ITEM_TEXT))
                .unwrap_or_default(),
            at: Timestamp::now(),
            unreachable_since: self
                .unreachable_since
                .map(|i| Timestamp::now() - i.elapsed()),
            note: note.to_string(),
            spent: self.spent,
            live,
        }
    }

    /// While the item's loop runs: publish its live reading when it changed
    /// and `[fleet] live` has passed since the last word (never while the
    /// remote cannot be reached: the beat's retries have that).
    pub(super) fn live(&mut self, unit: &Unit, live: Option<Live>) {
        self.live = live;
        let every = self.config.fleet.live.0;
        let due = !every.is_zero()
            && self.unreachable_since.is_none()
            && self.said_at.is_none_or(|t| t.elapsed() >= every)
            && self
                .live
                .as_ref()
                .is_some_and(|l| l.news(self.live_said.as_ref()));
        if due {
            self.status(WorkerState::Working, Some(unit), "");
        }
    }
}
