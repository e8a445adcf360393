//! What an iteration amounts to, and whether the run goes on: the failure
//! judgement, the iteration's outcome, and the exit rules in their one
//! documented order. Pure: everything comes in as values.

use super::budget::BudgetSpent;
use super::facts::{CheckpointMark, Facts};
use super::stop::SignalCount;
use crate::breaker::{self, Admission, BreakerState, Trip};
use crate::config::format_duration;
use crate::context::Level;
use crate::events::Event;
use crate::limits::LimitHit;
use crate::state::{RunStatus, Trigger};

/// How a run ended; maps to the exit codes of DESIGN.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    BreakerOpen,
    IterationLimit,
    BudgetSpent,
    Stopped,
    Interrupted,
}

impl Outcome {
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Completed => 0,
            Outcome::BreakerOpen => 3,
            Outcome::IterationLimit => 4,
            Outcome::BudgetSpent => 5,
            Outcome::Stopped => 6,
            Outcome::Interrupted => 130,
        }
    }

    pub fn status(self) -> RunStatus {
        match self {
            Outcome::Completed => RunStatus::Completed,
            Outcome::BreakerOpen => RunStatus::BreakerOpen,
            Outcome::IterationLimit => RunStatus::IterationLimit,
            Outcome::BudgetSpent => RunStatus::BudgetSpent,
            Outcome::Stopped => RunStatus::Stopped,
            Outcome::Interrupted => RunStatus::Interrupted,
        }
    }
}

/// One iteration's outcome as the history and the events name it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum IterationOutcome {
    NotStarted(String),
    UsageLimit,
    Checkpoint(Trigger, Level),
    Failed,
    Promise,
    Done,
}

impl std::fmt::Display for IterationOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IterationOutcome::NotStarted(e) => write!(f, "agent did not start: {e}"),
            IterationOutcome::UsageLimit => f.write_str("usage limit"),
            IterationOutcome::Checkpoint(t, l) => write!(f, "checkpoint ({t}, {l})"),
            IterationOutcome::Failed => f.write_str("failed"),
            IterationOutcome::Promise => f.write_str("promise"),
            IterationOutcome::Done => f.write_str("done"),
        }
    }
}

/// What the supervisor measured around the iteration.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Measured {
    /// The work tree changed (or commits were made).
    pub tree_progress: bool,
    /// Plan items were ticked off.
    pub items_done: bool,
}

/// What the user asked for during the run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct RunFlags {
    pub signals: SignalCount,
    pub stop_requested: bool,
}

impl RunFlags {
    /// Take in what arrived during an iteration.
    pub(super) fn absorb(&mut self, facts: &Facts) {
        self.signals = facts.signals;
        self.stop_requested |= facts.stop_requested;
    }
}

/// The judgement of one iteration.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Verdict {
    pub progress: bool,
    pub error: Option<String>,
    /// The checkpoint to save, if any.
    pub checkpoint: Option<CheckpointMark>,
    pub outcome: IterationOutcome,
    /// What the circuit breaker is told.
    pub breaker: breaker::Outcome,
}

/// What the run does next.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Next {
    Continue,
    WaitForLimit(LimitHit),
    End(Outcome, String),
}

pub(super) fn judge(facts: &Facts, measured: &Measured, flags: &RunFlags) -> Verdict {
    let progress = measured.tree_progress || measured.items_done;
    let we_stopped = facts.checkpoint.is_some();
    // A timeout whose iteration made progress is not a failure.
    let error = failure_of(facts, we_stopped).filter(|_| !(facts.timed_out.is_some() && progress));
    let rate_limited = facts.limit.is_some();
    // A usage limit with work in the tree: save it before waiting.
    let checkpoint = facts.checkpoint.or_else(|| {
        (rate_limited && measured.tree_progress).then_some(CheckpointMark {
            trigger: Trigger::RateLimit,
            level: Level::L2,
            percent: 0.0,
        })
    });
    let outcome = if let Some(e) = &facts.spawn_error {
        IterationOutcome::NotStarted(e.clone())
    } else if rate_limited {
        IterationOutcome::UsageLimit
    } else if let Some(mark) = &checkpoint {
        IterationOutcome::Checkpoint(mark.trigger, mark.level)
    } else if error.is_some() {
        IterationOutcome::Failed
    } else if facts.promise {
        IterationOutcome::Promise
    } else {
        IterationOutcome::Done
    };
    let breaker = breaker::Outcome {
        progress,
        failed: error.is_some(),
        error: error.clone(),
        permission_denials: facts.permission_denials.clone(),
        rate_limited,
        cut_short: flags.signals.any()
            || flags.stop_requested
            || checkpoint.is_some_and(|c| c.trigger == Trigger::Budget),
    };
    Verdict {
        progress,
        error,
        checkpoint,
        outcome,
        breaker,
    }
}

/// Why this iteration counts as a failure, if it does.
pub(super) fn failure_of(it: &Facts, we_stopped: bool) -> Option<String> {
    if let Some(e) = &it.spawn_error {
        return Some(format!("agent could not start: {e}"));
    }
    if it.limit.is_some() {
        return None; // waited out, not held against the agent
    }
    if let Some(t) = &it.timed_out {
        return Some(t.clone());
    }
    if let Some(r) = &it.result {
        // Our own SIGINT makes the CLI report an aborted run: not a failure.
        let aborted_by_us = we_stopped && r.subtype == "error_during_execution";
        if r.is_error && !aborted_by_us {
            let text = r
                .text
                .clone()
                .filter(|t| !t.is_empty())
                .or_else(|| (!r.errors.is_empty()).then(|| r.errors.join("; ")))
                .unwrap_or_else(|| r.subtype.clone());
            return Some(match r.api_error_status {
                Some(s) => format!("API error {s}: {text}"),
                None => text,
            });
        }
        return None;
    }
    if we_stopped {
        return None;
    }
    let stderr = it
        .stderr_tail
        .trim()
        .lines()
        .last()
        .unwrap_or("")
        .to_string();
    Some(match (it.exit_code, it.exit_signal) {
        (Some(0), _) => "agent exited without a result".into(),
        (Some(c), _) => format!(
            "agent exited with code {c} without a result{}",
            if stderr.is_empty() {
                String::new()
            } else {
                format!(": {stderr}")
            }
        ),
        (None, Some(s)) => format!("agent was killed by signal {s}"),
        _ => "agent ended without a result".into(),
    })
}

/// The circuit breaker's part in the exit rules.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum BreakerEnd {
    /// It opened on the iteration just ended.
    Tripped(Trip),
    /// It is still open from before; the cooldown has this left.
    Cooling(String),
}

/// Everything the exit rules look at, whether between iterations
/// ([`gate`]) or after one ([`next`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Case {
    pub signalled: bool,
    /// The agent kept its promise in this iteration; the plan's open items.
    pub promise: Option<(u32, usize)>,
    pub require_plan_complete: bool,
    pub breaker: Option<BreakerEnd>,
    pub stop_requested: bool,
    pub budget: Option<BudgetSpent>,
    pub limit: Option<LimitHit>,
    /// The iteration limit is reached after this many iterations.
    pub iteration_limit: Option<u32>,
}

/// The exit rules, most specific first: signal > completion (a premature
/// promise only warns) > breaker > stop > budget > usage limit > iteration
/// limit > go on.
pub(super) fn exit_rule(case: Case, events: &mut Vec<Event>) -> Next {
    if case.signalled {
        return Next::End(Outcome::Interrupted, "interrupted by a signal".into());
    }
    if let Some((iteration, open_items)) = case.promise {
        if case.require_plan_complete && open_items > 0 {
            events.push(Event::PrematurePromise {
                iteration,
                open_items,
            });
        } else {
            return Next::End(
                Outcome::Completed,
                format!("the agent kept its promise in iteration {iteration}"),
            );
        }
    }
    match case.breaker {
        Some(BreakerEnd::Tripped(trip)) => {
            events.push(Event::Breaker {
                status: "open".into(),
                rule: Some(trip.rule.into()),
                message: format!("{}; {}", trip.message, trip.hint),
            });
            return Next::End(
                Outcome::BreakerOpen,
                format!(
                    "circuit breaker opened ({}): {}. {}",
                    trip.rule, trip.message, trip.hint
                ),
            );
        }
        Some(BreakerEnd::Cooling(why)) => return Next::End(Outcome::BreakerOpen, why),
        None => {}
    }
    if case.stop_requested {
        return Next::End(Outcome::Stopped, "stopped on request (ralph stop)".into());
    }
    if let Some(spent) = case.budget {
        return Next::End(Outcome::BudgetSpent, spent.to_string());
    }
    if let Some(hit) = case.limit {
        return Next::WaitForLimit(hit);
    }
    if let Some(n) = case.iteration_limit {
        return Next::End(
            Outcome::IterationLimit,
            format!("iteration limit reached: {n} iterations (loop.max_iterations)"),
        );
    }
    Next::Continue
}

/// Between iterations: may another one start?
pub(super) fn gate(
    admission: Admission,
    breaker: &BreakerState,
    flags: &RunFlags,
    budget: Option<BudgetSpent>,
    started_here: u32,
    max_iterations: u32,
    events: &mut Vec<Event>,
) -> Next {
    let breaker = match admission {
        Admission::Go => None,
        Admission::Trial => {
            events.push(Event::Breaker {
                status: "half-open".into(),
                rule: breaker.rule.clone(),
                message: "cooldown over: one trial iteration".into(),
            });
            None
        }
        Admission::Wait(left) => Some(BreakerEnd::Cooling(format!(
            "circuit breaker is open ({}): {}; the cooldown ends in {}. Fix the cause and run `ralph run --reset-breaker` to go on now",
            breaker.rule.as_deref().unwrap_or("?"),
            breaker.message.as_deref().unwrap_or(""),
            format_duration(left)
        ))),
    };
    exit_rule(
        Case {
            breaker,
            stop_requested: flags.stop_requested,
            budget,
            iteration_limit: (started_here >= max_iterations).then_some(started_here),
            ..Case::default()
        },
        events,
    )
}

/// After an iteration: does the run go on?
pub(super) fn next(
    facts: &Facts,
    trip: Option<Trip>,
    flags: &RunFlags,
    budget: Option<BudgetSpent>,
    open_items: usize,
    require_plan_complete: bool,
    events: &mut Vec<Event>,
) -> Next {
    exit_rule(
        Case {
            signalled: flags.signals.any(),
            promise: facts.promise.then_some((facts.number, open_items)),
            require_plan_complete,
            breaker: trip.map(BreakerEnd::Tripped),
            stop_requested: flags.stop_requested,
            budget,
            limit: facts.limit.clone(),
            iteration_limit: None,
        },
        events,
    )
}
