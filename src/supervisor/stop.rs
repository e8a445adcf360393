//! How one agent is stopped: the typed stop sequence (grace, SIGINT,
//! SIGTERM, SIGKILL), the interrupts counted so far, and why an iteration
//! is overdue. Pure: every instant comes in as a value.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::budget::BudgetSpent;
use crate::config::format_duration;
use crate::state::Trigger;

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
