//! A worker and its remote: fetches and retries with back-off while the
//! remote cannot be reached (said once, and again when it answers), the
//! pauses a stop request cuts short, and the worker's status ref.

use std::time::{Duration, Instant};

use jiff::Timestamp;

use super::child;
use super::live::Live;
use super::remote::{Fleet, View, WorkerState, WorkerStatus};
use super::say::FleetEvent;
use super::units::Unit;
use super::wire::WireError;
use super::worker::Worker;

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

    /// Publish this worker's state (best effort: a status is not work),
    /// with its item loop's live reading while it holds an item.
    pub(super) fn status(&mut self, state: WorkerState, unit: Option<&Unit>, note: &str) {
        let live = unit.and(self.live.clone());
        let status = WorkerStatus {
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
        };
        self.said_at = Some(Instant::now());
        if self.fleet.say(&status).is_ok() {
            self.live_said = status.live;
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
