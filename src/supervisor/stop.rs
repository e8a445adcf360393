//! How one agent is stopped: the typed stop sequence (grace, SIGINT,
//! SIGTERM, SIGKILL), the interrupts counted so far, and why an iteration
//! is overdue. Pure: every instant comes in as a value.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::budget::BudgetSpent;
use crate::formats::Trigger;
use crate::text::format_duration;

/// Between SIGINT and SIGTERM, and SIGTERM and SIGKILL.
pub(super) const STOP_STEP: Duration = Duration::from_secs(5);

/// Where the stop sequence of one agent stands, and when its next step is
/// due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopSequence {
    Running,
    /// Asked for a handoff (or waiting for a clean exit after the result)
    /// until then.
    Asked {
        until: Instant,
    },
    /// SIGINT sent.
    Interrupted {
        until: Instant,
    },
    /// SIGTERM sent.
    Terminated {
        until: Instant,
    },
    Killed,
}

impl StopSequence {
    /// Begin stopping: with a reason to wait (handoff notes asked for, or
    /// the result already in, so the agent is about to exit by itself) a
    /// grace period; otherwise the first signal at once, which is returned.
    pub(super) fn begin(&mut self, now: Instant, grace: Duration, wait: bool) -> Option<Signal> {
        if wait {
            *self = StopSequence::Asked { until: now + grace };
            None
        } else {
            *self = StopSequence::Asked { until: now };
            Some(self.escalate(now))
        }
    }

    /// One step further along SIGINT → SIGTERM → SIGKILL: the signal to send.
    pub(super) fn escalate(&mut self, now: Instant) -> Signal {
        let (sig, next) = match *self {
            StopSequence::Running | StopSequence::Asked { .. } => (
                Signal::SIGINT,
                StopSequence::Interrupted {
                    until: now + STOP_STEP,
                },
            ),
            StopSequence::Interrupted { .. } => (
                Signal::SIGTERM,
                StopSequence::Terminated {
                    until: now + STOP_STEP,
                },
            ),
            StopSequence::Terminated { .. } | StopSequence::Killed => {
                (Signal::SIGKILL, StopSequence::Killed)
            }
        };
        *self = next;
        sig
    }

    /// Straight to SIGKILL (the second interrupt).
    pub(super) fn kill(&mut self) -> Signal {
        *self = StopSequence::Killed;
        Signal::SIGKILL
    }

    /// When the next step is due, if one is.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match *self {
            StopSequence::Asked { until }
            | StopSequence::Interrupted { until }
            | StopSequence::Terminated { until } => Some(until),
            StopSequence::Running | StopSequence::Killed => None,
        }
    }

    /// The step that is due at `now`, with the reason to give for it.
    pub(super) fn due(&self, now: Instant) -> Option<&'static str> {
        match *self {
            StopSequence::Asked { until } if now >= until => Some("grace period over"),
            StopSequence::Interrupted { until } | StopSequence::Terminated { until }
                if now >= until =>
            {
                Some("the agent did not exit")
            }
            _ => None,
        }
    }

    pub(super) fn is_running(&self) -> bool {
        *self == StopSequence::Running
    }

    pub(super) fn is_asked(&self) -> bool {
        matches!(self, StopSequence::Asked { .. })
    }
}

/// Interrupts (SIGINT/SIGTERM) received during the run: the first stops
/// gently, the second at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum SignalCount {
    #[default]
    None,
    Once,
    Twice,
}

impl SignalCount {
    /// Count one more interrupt; the count it makes.
    pub(super) fn bump(&mut self) -> SignalCount {
        *self = match self {
            SignalCount::None => SignalCount::Once,
            SignalCount::Once | SignalCount::Twice => SignalCount::Twice,
        };
        *self
    }

    pub(super) fn any(self) -> bool {
        self != SignalCount::None
    }
}

/// Why a running iteration must end before the agent is done.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Overdue {
    /// `loop.iteration_timeout` reached.
    Iteration(Duration),
    /// `loop.idle_timeout` without a line.
    Idle(Duration),
    /// A budget of the run is spent.
    Budget(BudgetSpent),
}

impl Overdue {
    pub(super) fn trigger(&self) -> Trigger {
        match self {
            Overdue::Iteration(_) | Overdue::Idle(_) => Trigger::Timeout,
            Overdue::Budget(_) => Trigger::Budget,
        }
    }

    /// A timeout counts against the iteration (unless it made progress); a
    /// spent budget does not.
    pub(super) fn is_timeout(&self) -> bool {
        self.trigger() == Trigger::Timeout
    }

    pub(super) fn reason(&self) -> String {
        match self {
            Overdue::Iteration(d) => format!("iteration timeout ({}) reached", format_duration(*d)),
            Overdue::Idle(d) => {
                format!("no output for {} (loop.idle_timeout)", format_duration(*d))
            }
            Overdue::Budget(b) => format!("{b}: finishing the iteration"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::supervisor::Now;

    const GRACE: Duration = Duration::from_secs(30);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn escalation_from_running_to_sigkill() {
        let t0 = Now::read().mono;
        let mut stop = StopSequence::Running;
        assert_eq!(stop.deadline(), None);
        assert_eq!(stop.begin(t0, GRACE, true), None);
        // (at, what is due then, the signal that step sends, the state after)
        let steps = [
            (t0 + GRACE, "grace period over", Signal::SIGINT),
            (
                t0 + GRACE + STOP_STEP,
                "the agent did not exit",
                Signal::SIGTERM,
            ),
            (
                t0 + GRACE + STOP_STEP * 2,
                "the agent did not exit",
                Signal::SIGKILL,
            ),
        ];
        for (at, reason, sig) in steps {
            let before = at - Duration::from_millis(1);
            assert_eq!(stop.deadline(), Some(at), "{sig:?}");
            assert_eq!(stop.due(before), None, "not due a moment before");
            assert_eq!(stop.due(at), Some(reason));
            assert_eq!(stop.escalate(at), sig);
        }
        assert_eq!(stop, StopSequence::Killed);
        assert_eq!((stop.deadline(), stop.due(t0 + secs(3600))), (None, None));
        // Nothing is ever sent past SIGKILL but SIGKILL.
        assert_eq!(stop.escalate(t0), Signal::SIGKILL);
    }

    #[test]
    fn a_result_already_in_waits_otherwise_it_interrupts_now() {
        let t0 = Now::read().mono;
        // (a reason to wait, the signal sent at once, the state after)
        let cases = [
            (true, None, StopSequence::Asked { until: t0 + GRACE }),
            (
                false,
                Some(Signal::SIGINT),
                StopSequence::Interrupted {
                    until: t0 + STOP_STEP,
                },
            ),
        ];
        for (wait, sent, after) in cases {
            let mut stop = StopSequence::Running;
            assert_eq!(stop.begin(t0, GRACE, wait), sent, "wait {wait}");
            assert_eq!(stop, after, "wait {wait}");
        }
    }

    #[test]
    fn the_second_interrupt_kills_at_once_from_any_step() {
        let t0 = Now::read().mono;
        for mut stop in [
            StopSequence::Running,
            StopSequence::Asked { until: t0 },
            StopSequence::Interrupted { until: t0 },
            StopSequence::Terminated { until: t0 },
        ] {
            assert_eq!(stop.kill(), Signal::SIGKILL);
            assert_eq!(stop, StopSequence::Killed);
        }
        let mut count = SignalCount::default();
        assert!(!count.any());
        assert_eq!(count.bump(), SignalCount::Once);
        assert_eq!(count.bump(), SignalCount::Twice);
        assert_eq!(count.bump(), SignalCount::Twice);
        assert!(count.any());
    }

    #[test]
    fn every_overdue_has_its_trigger_and_reason() {
        let deadline: jiff::Timestamp = "2026-11-22T06:30:00Z".parse().unwrap();
        let cases = [
            (
                Overdue::Iteration(secs(3600)),
                Trigger::Timeout,
                "iteration timeout (1h00m) reached",
            ),
            (
                Overdue::Idle(secs(600)),
                Trigger::Timeout,
                "no output for 10m00s (loop.idle_timeout)",
            ),
            (
                Overdue::Budget(BudgetSpent::Cost {
                    spent: 5.5,
                    max: 5.0,
                }),
                Trigger::Budget,
                "cost budget spent: $5.50 of loop.max_cost_usd $5.00: finishing the iteration",
            ),
            (
                Overdue::Budget(BudgetSpent::Duration(secs(7200))),
                Trigger::Budget,
                "loop.max_duration 2h00m reached: finishing the iteration",
            ),
            (
                Overdue::Budget(BudgetSpent::Deadline(deadline)),
                Trigger::Budget,
                "deadline 2026-11-22T06:30:00Z reached: finishing the iteration",
            ),
        ];
        for (overdue, trigger, reason) in cases {
            assert_eq!(overdue.trigger(), trigger, "{reason}");
            assert_eq!(overdue.is_timeout(), trigger == Trigger::Timeout);
            assert_eq!(overdue.reason(), reason);
        }
    }
}
