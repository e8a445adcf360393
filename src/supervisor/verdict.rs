//! What an iteration amounts to, and whether the run goes on: the failure
//! judgement, the iteration's outcome, and the exit rules in their one
//! documented order. Pure: everything comes in as values.

use super::budget::BudgetSpent;
use super::facts::{CheckpointMark, Facts};
use super::stop::SignalCount;
use crate::context::Level;
use crate::formats::Event;
use crate::formats::{IterationOutcome, RunStatus, Trigger};
use crate::rules::breaker::{self, Admission, BreakerState, Trip};
use crate::rules::fatal::Fatal;
use crate::rules::limits::LimitHit;
use crate::text::format_duration;

/// How a run ended; maps to the exit codes of DESIGN.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Completed,
    BreakerOpen,
    IterationLimit,
    BudgetSpent,
    Stopped,
    Interrupted,
    /// A completion refused by a check whose script changed during the
    /// run: none can pass until a person confirms (exit 2, as the next
    /// start's refusal).
    Untrusted,
}

impl Outcome {
    pub(crate) fn exit_code(self) -> i32 {
        match self {
            Outcome::Completed => 0,
            Outcome::BreakerOpen => 3,
            Outcome::IterationLimit => 4,
            Outcome::BudgetSpent => 5,
            Outcome::Stopped => 6,
            Outcome::Interrupted => 130,
            Outcome::Untrusted => 2,
        }
    }

    pub(crate) fn status(self) -> RunStatus {
        match self {
            Outcome::Completed => RunStatus::Completed,
            Outcome::BreakerOpen => RunStatus::BreakerOpen,
            Outcome::IterationLimit => RunStatus::IterationLimit,
            Outcome::BudgetSpent => RunStatus::BudgetSpent,
            Outcome::Stopped => RunStatus::Stopped,
            Outcome::Interrupted => RunStatus::Interrupted,
            Outcome::Untrusted => RunStatus::Untrusted,
        }
    }
}

/// What the supervisor measured around the iteration.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Measured {
    /// The work tree changed (or commits were made).
    pub(crate) tree_progress: bool,
    /// Plan items were ticked off.
    pub(crate) items_done: bool,
}

/// What the user asked for during the run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct RunFlags {
    pub(crate) signals: SignalCount,
    pub(crate) stop_requested: bool,
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
    pub(crate) progress: bool,
    pub(crate) error: Option<String>,
    /// The checkpoint to save, if any.
    pub(crate) checkpoint: Option<CheckpointMark>,
    pub(crate) outcome: IterationOutcome,
    /// What the circuit breaker is told.
    pub(crate) breaker: breaker::Outcome,
}

/// What the run does next.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Next {
    Continue,
    WaitForLimit(LimitHit),
    End(Outcome, String),
}

pub(super) fn judge(facts: &Facts, measured: &Measured, flags: &RunFlags) -> Verdict {
    // Splitting an item into sub-items is progress: the breaker must not
    // open on the iteration that did what the shard request asked.
    let split = facts.items.as_ref().is_some_and(|i| i.split);
    let progress = measured.tree_progress || measured.items_done || split;
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
        fatal: None,
    };
    Verdict {
        progress,
        error,
        checkpoint,
        outcome,
        breaker,
    }
}

/// An iteration whose supervisor died, as the run that takes it over
/// judges it: a `crash` checkpoint once its agent had started (the facts
/// replayed from its transcript carry the meter), and not held against the
/// agent (the breaker hears only whether it got somewhere).
pub(super) fn crashed(facts: &Facts, progress: bool) -> Verdict {
    let checkpoint = facts.meter.as_ref().map(|m| CheckpointMark {
        trigger: Trigger::Crash,
        level: m.peak_level.max(Level::L2),
        percent: m.peak_percent,
    });
    Verdict {
        progress,
        error: None,
        checkpoint,
        outcome: IterationOutcome::Crash,
        breaker: breaker::Outcome {
            progress,
            permission_denials: facts.permission_denials.clone(),
            cut_short: true,
            ..breaker::Outcome::default()
        },
    }
}

/// The agent kept its promise over failing checks (`why`, the failed
/// verification's summary): not a completion, and a failure for the
/// breaker, so that the same failure claimed done again and again opens it
/// (`same_error`) instead of looping all night.
pub(super) fn refuse(verdict: &mut Verdict, why: String) {
    verdict.outcome = IterationOutcome::Refused;
    verdict.error = Some(why.clone());
    verdict.breaker.failed = true;
    verdict.breaker.error = Some(why);
}

/// An error no further session gets past (`rules::fatal`): a failure that
/// opens the breaker at once, even where a usage limit would be waited out
/// (OpenAI's `insufficient_quota` is a 429 that no wait cures).
pub(super) fn fatal(verdict: &mut Verdict, fatal: Fatal) {
    if verdict.outcome == IterationOutcome::UsageLimit {
        verdict.outcome = IterationOutcome::Failed;
    }
    let why = verdict
        .error
        .clone()
        .unwrap_or_else(|| fatal.message.clone());
    verdict.error = Some(why.clone());
    verdict.breaker.failed = true;
    verdict.breaker.error = Some(why);
    verdict.breaker.rate_limited = false;
    verdict.breaker.fatal = Some(fatal);
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
    pub(crate) signalled: bool,
    /// The agent kept its promise in this iteration; the plan's open items.
    pub(crate) promise: Option<(u32, usize)>,
    pub(crate) require_plan_complete: bool,
    /// Why the promise does not complete the run: the checks failed.
    pub(crate) refused: Option<String>,
    /// The refusal can never be lifted in this run (a check's script is
    /// not trusted): why, and what to do. The run ends at it.
    pub(crate) untrusted: Option<String>,
    pub(crate) breaker: Option<BreakerEnd>,
    pub(crate) stop_requested: bool,
    pub(crate) budget: Option<BudgetSpent>,
    pub(crate) limit: Option<LimitHit>,
    /// The iteration limit is reached after this many iterations.
    pub(crate) iteration_limit: Option<u32>,
    /// A worker's unit is checked off in this iteration (promise or not).
    pub(crate) unit_done: Option<u32>,
}

/// The exit rules, most specific first: signal > completion (a premature
/// promise only warns) > breaker > stop > budget > usage limit > iteration
/// limit > go on.
pub(super) fn exit_rule(case: Case, events: &mut Vec<Event>) -> Next {
    if case.signalled {
        return Next::End(Outcome::Interrupted, "interrupted by a signal".into());
    }
    if let (Some(iteration), None) = (case.unit_done, case.promise) {
        // A worker's unit checked off completes its loop as a promise
        // would: the checks (`[verify]`) still decide.
        match case.refused {
            Some(reason) => {
                events.push(Event::CompletionRefused { iteration, reason });
                if let Some(why) = case.untrusted {
                    return Next::End(Outcome::Untrusted, why);
                }
            }
            None => {
                return Next::End(
                    Outcome::Completed,
                    format!("its unit is checked off in iteration {iteration}"),
                );
            }
        }
    } else if let Some((iteration, open_items)) = case.promise {
        if case.require_plan_complete && open_items > 0 {
            events.push(Event::PrematurePromise {
                iteration,
                open_items,
            });
        } else if let Some(reason) = case.refused {
            events.push(Event::CompletionRefused { iteration, reason });
            if let Some(why) = case.untrusted {
                return Next::End(Outcome::Untrusted, why);
            }
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
                status: breaker::Status::Open,
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
                status: breaker::Status::HalfOpen,
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

/// The project's checks, as far as a plan with nothing open cares.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Checks {
    /// No `[verify]` commands: the plan's word is all there is.
    None,
    Passed,
    Failed,
}

/// A plan with nothing open: the run is complete when its checks pass, with
/// no session to confirm it (a session with nothing to do is paid for
/// nothing). `None` while there is work: an open item, failing checks (the
/// next session fixes them), or a plan without items at all (a plan in
/// prose, nothing ralph can count). `after` is the iteration that left it
/// so, `None` when this run has not started one.
pub(super) fn nothing_open(
    open_items: usize,
    done_items: usize,
    after: Option<u32>,
    checks: Checks,
) -> Option<String> {
    if open_items > 0 || done_items == 0 || checks == Checks::Failed {
        return None;
    }
    let checks = match checks {
        Checks::Passed => " and the checks pass",
        _ => "",
    };
    Some(match after {
        Some(n) => format!(
            "the plan has no open items after iteration {n}{checks}; the agent did not say the promise, so no session was started to confirm it"
        ),
        None => format!(
            "the plan has no open items ({done_items} done){checks}: nothing to do, no session started"
        ),
    })
}

/// Whether the plan has nothing open, before the checks are run for it.
pub(super) fn maybe_finished(open_items: usize, done_items: usize) -> bool {
    nothing_open(open_items, done_items, None, Checks::None).is_some()
}

/// What stands between a promise and the run's completion.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Gate {
    /// The plan's open items when the iteration ended.
    pub(crate) open_items: usize,
    pub(crate) require_plan_complete: bool,
    /// The `[verify]` commands failed: why.
    pub(crate) refused: Option<String>,
    /// …because a check's script is not trusted: why the run ends.
    pub(crate) untrusted: Option<String>,
    /// A worker's unit is checked off: a completion claim of its own.
    pub(crate) unit_done: bool,
}

impl Gate {
    /// A promise made now would pass the plan gate.
    pub(super) fn plan_passes(&self) -> bool {
        !self.require_plan_complete || self.open_items == 0
    }

    /// The iteration claims completion: a promise past the plan gate, or
    /// a worker's unit checked off.
    pub(super) fn claims_completion(&self, promise: bool) -> bool {
        promise && self.plan_passes() || self.unit_done
    }
}

/// After an iteration: does the run go on?
pub(super) fn next(
    facts: &Facts,
    trip: Option<Trip>,
    flags: &RunFlags,
    budget: Option<BudgetSpent>,
    gate: Gate,
    events: &mut Vec<Event>,
) -> Next {
    exit_rule(
        Case {
            signalled: flags.signals.any(),
            promise: facts.promise.then_some((facts.number, gate.open_items)),
            require_plan_complete: gate.require_plan_complete,
            refused: gate.refused,
            untrusted: gate.untrusted,
            breaker: trip.map(BreakerEnd::Tripped),
            stop_requested: flags.stop_requested,
            budget,
            limit: facts.limit.clone(),
            iteration_limit: None,
            unit_done: gate.unit_done.then_some(facts.number),
        },
        events,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::stream::ResultMessage;

    fn result(is_error: bool, subtype: &str, text: &str) -> ResultMessage {
        ResultMessage {
            subtype: subtype.into(),
            is_error,
            text: (!text.is_empty()).then(|| text.to_string()),
            ..ResultMessage::default()
        }
    }

    fn limit() -> LimitHit {
        LimitHit {
            resets_at: None,
            source: crate::rules::limits::LimitSource::RateLimitEvent,
            detail: "5-hour limit".into(),
        }
    }

    #[test]
    fn a_crashed_iteration_is_a_crash_checkpoint_once_its_agent_started() {
        use super::super::facts::MeterSummary;
        let started = Facts {
            number: 4,
            permission_denials: vec!["Bash".into()],
            meter: Some(MeterSummary {
                peak_percent: 40.0,
                peak_level: Level::L0,
                ..MeterSummary::default()
            }),
            ..Facts::default()
        };
        let v = crashed(&started, true);
        assert_eq!(v.outcome.to_string(), "crash");
        assert_eq!(
            v.checkpoint,
            Some(CheckpointMark {
                trigger: Trigger::Crash,
                level: Level::L2,
                percent: 40.0
            })
        );
        assert_eq!(v.error, None);
        assert!(v.breaker.cut_short && v.breaker.progress && !v.breaker.failed);
        assert_eq!(v.breaker.permission_denials, ["Bash"]);
        // Died before its agent started: nothing to hand off.
        let v = crashed(&Facts::default(), false);
        assert_eq!((v.checkpoint, v.progress), (None, false));
    }

    fn mark(trigger: Trigger) -> Option<CheckpointMark> {
        Some(CheckpointMark {
            trigger,
            level: Level::L2,
            percent: 86.0,
        })
    }

    #[test]
    fn the_failure_judgement() {
        let exited = |code, signal, stderr: &str| Facts {
            exit_code: code,
            exit_signal: signal,
            stderr_tail: stderr.into(),
            ..Facts::default()
        };
        let api_error = ResultMessage {
            api_error_status: Some(529),
            ..result(true, "error_during_execution", "overloaded")
        };
        let only_errors = ResultMessage {
            errors: vec!["a".into(), "b".into()],
            ..result(true, "error_max_turns", "")
        };
        // (the facts, whether ralph stopped the agent, the failure)
        let cases: Vec<(Facts, bool, Option<&str>)> = vec![
            (
                Facts {
                    spawn_error: Some("no such file".into()),
                    ..Facts::default()
                },
                false,
                Some("agent could not start: no such file"),
            ),
            // A usage limit is waited out, even with a timeout or an error.
            (
                Facts {
                    limit: Some(limit()),
                    timed_out: Some("no output".into()),
                    result: Some(result(true, "success", "limit")),
                    ..Facts::default()
                },
                false,
                None,
            ),
            (
                Facts {
                    timed_out: Some("iteration timeout (1h00m) reached".into()),
                    ..Facts::default()
                },
                true,
                Some("iteration timeout (1h00m) reached"),
            ),
            (
                Facts {
                    result: Some(result(false, "success", "done")),
                    ..Facts::default()
                },
                false,
                None,
            ),
            (
                Facts {
                    result: Some(result(true, "success", "it broke")),
                    ..Facts::default()
                },
                false,
                Some("it broke"),
            ),
            (
                Facts {
                    result: Some(api_error.clone()),
                    ..Facts::default()
                },
                false,
                Some("API error 529: overloaded"),
            ),
            // Aborted by our own SIGINT: not the agent's failure.
            (
                Facts {
                    result: Some(api_error),
                    ..Facts::default()
                },
                true,
                None,
            ),
            (
                Facts {
                    result: Some(only_errors),
                    ..Facts::default()
                },
                false,
                Some("a; b"),
            ),
            (
                Facts {
                    result: Some(result(true, "error_max_turns", "")),
                    ..Facts::default()
                },
                false,
                Some("error_max_turns"),
            ),
            (exited(Some(1), None, "x"), true, None),
            (
                exited(Some(0), None, ""),
                false,
                Some("agent exited without a result"),
            ),
            (
                exited(Some(2), None, "first\nlast words\n"),
                false,
                Some("agent exited with code 2 without a result: last words"),
            ),
            (
                exited(Some(2), None, " \n"),
                false,
                Some("agent exited with code 2 without a result"),
            ),
            (
                exited(None, Some(9), ""),
                false,
                Some("agent was killed by signal 9"),
            ),
            (
                exited(None, None, ""),
                false,
                Some("agent ended without a result"),
            ),
        ];
        for (i, (facts, we_stopped, failure)) in cases.iter().enumerate() {
            assert_eq!(
                failure_of(facts, *we_stopped).as_deref(),
                *failure,
                "case {i}"
            );
        }
    }

    #[test]
    fn the_judgement_of_an_iteration() {
        let flags = RunFlags::default();
        let tree = Measured {
            tree_progress: true,
            items_done: false,
        };
        let nothing = Measured::default();
        // A timeout that made progress is no failure.
        let timed_out = Facts {
            timed_out: Some("no output".into()),
            checkpoint: mark(Trigger::Timeout),
            ..Facts::default()
        };
        let v = judge(&timed_out, &tree, &flags);
        assert_eq!((v.error, v.progress), (None, true));
        assert_eq!(v.outcome.to_string(), "checkpoint (timeout, L2)");
        let v = judge(&timed_out, &nothing, &flags);
        assert_eq!(v.error.as_deref(), Some("no output"));
        assert!(v.breaker.failed);
        // A usage limit with work in the tree is checkpointed before the wait.
        let limited = Facts {
            limit: Some(limit()),
            ..Facts::default()
        };
        let v = judge(&limited, &tree, &flags);
        assert_eq!(v.checkpoint.map(|c| c.trigger), Some(Trigger::RateLimit));
        assert_eq!(v.outcome.to_string(), "usage limit");
        assert!(v.breaker.rate_limited);
        let v = judge(&limited, &nothing, &flags);
        assert_eq!(v.checkpoint, None);
        // Cut short: by the user, or by a budget.
        let budget = Facts {
            checkpoint: mark(Trigger::Budget),
            ..Facts::default()
        };
        assert!(judge(&budget, &nothing, &flags).breaker.cut_short);
        let stopped = RunFlags {
            stop_requested: true,
            ..flags
        };
        assert!(
            judge(&Facts::default(), &nothing, &stopped)
                .breaker
                .cut_short
        );
        assert!(!judge(&Facts::default(), &nothing, &flags).breaker.cut_short);
        // The outcome labels, most specific first.
        let done = Facts {
            result: Some(result(false, "success", "ok")),
            ..Facts::default()
        };
        let promised = Facts {
            promise: true,
            ..Facts {
                result: Some(result(false, "success", "ok")),
                ..Facts::default()
            }
        };
        let failed = Facts {
            exit_code: Some(1),
            ..Facts::default()
        };
        let not_started = Facts {
            spawn_error: Some("cannot start".into()),
            limit: Some(limit()),
            ..Facts::default()
        };
        let labels = [
            (not_started, "agent did not start: cannot start"),
            (failed, "failed"),
            (promised, "promise"),
            (done, "done"),
        ];
        for (facts, label) in labels {
            assert_eq!(judge(&facts, &nothing, &flags).outcome.to_string(), label);
        }
    }

    fn trip() -> Trip {
        Trip {
            rule: "no_progress",
            message: "3 iterations without progress".into(),
            hint: "look at the plan".into(),
        }
    }

    /// Every rule's own case, in the documented order.
    fn all() -> Case {
        Case {
            signalled: true,
            promise: Some((4, 0)),
            require_plan_complete: false,
            refused: None,
            untrusted: None,
            breaker: Some(BreakerEnd::Tripped(trip())),
            stop_requested: true,
            budget: Some(BudgetSpent::Cost {
                spent: 5.0,
                max: 5.0,
            }),
            limit: Some(limit()),
            iteration_limit: Some(10),
            unit_done: None,
        }
    }

    type TakeAway = fn(&mut Case);

    #[test]
    fn an_iteration_that_split_its_item_made_progress() {
        let flags = RunFlags::default();
        // (split, tree changed, items done) → progress
        let table = [
            (true, false, false, true),
            (false, false, false, false),
            (false, true, false, true),
            (false, false, true, true),
        ];
        for (split, tree_progress, items_done, progress) in table {
            let facts = Facts {
                items: Some(crate::plan::items::ItemsOutcome {
                    split,
                    ..Default::default()
                }),
                ..Facts::default()
            };
            let measured = Measured {
                tree_progress,
                items_done,
            };
            let v = judge(&facts, &measured, &flags);
            assert_eq!(v.progress, progress, "{split} {tree_progress} {items_done}");
            assert_eq!(v.breaker.progress, progress);
        }
    }

    #[test]
    fn the_exit_rule_order() {
        // Take away the rule that decided, and the next one decides.
        let order: [(TakeAway, Next); 8] = [
            (
                |c| c.signalled = false,
                Next::End(Outcome::Interrupted, "interrupted by a signal".into()),
            ),
            (
                |c| c.promise = None,
                Next::End(
                    Outcome::Completed,
                    "the agent kept its promise in iteration 4".into(),
                ),
            ),
            (
                |c| c.breaker = None,
                Next::End(
                    Outcome::BreakerOpen,
                    "circuit breaker opened (no_progress): 3 iterations without progress. look at the plan".into(),
                ),
            ),
            (
                |c| c.stop_requested = false,
                Next::End(Outcome::Stopped, "stopped on request (ralph stop)".into()),
            ),
            (
                |c| c.budget = None,
                Next::End(
                    Outcome::BudgetSpent,
                    "cost budget spent: $5.00 of loop.max_cost_usd $5.00".into(),
                ),
            ),
            (|c| c.limit = None, Next::WaitForLimit(limit())),
            (
                |c| c.iteration_limit = None,
                Next::End(
                    Outcome::IterationLimit,
                    "iteration limit reached: 10 iterations (loop.max_iterations)".into(),
                ),
            ),
            (|_| {}, Next::Continue),
        ];
        let mut case = all();
        for (take_away, decided) in order {
            let mut events = Vec::new();
            assert_eq!(exit_rule(case.clone(), &mut events), decided);
            take_away(&mut case);
        }
    }

    #[test]
    fn a_promise_over_failing_checks_is_refused_and_the_rules_go_on() {
        let refused = Case {
            signalled: false,
            breaker: None,
            stop_requested: false,
            budget: None,
            limit: None,
            iteration_limit: None,
            refused: Some("verify failed: `make` exited with 2".into()),
            ..all()
        };
        let mut events = Vec::new();
        assert_eq!(exit_rule(refused.clone(), &mut events), Next::Continue);
        assert_eq!(
            events,
            [Event::CompletionRefused {
                iteration: 4,
                reason: "verify failed: `make` exited with 2".into()
            }]
        );
        // Refused again and again: the breaker (fed the failure) ends it.
        let tripped = Case {
            breaker: Some(BreakerEnd::Tripped(trip())),
            ..refused
        };
        assert!(matches!(
            exit_rule(tripped, &mut Vec::new()),
            Next::End(Outcome::BreakerOpen, _)
        ));
        // The refusal is a failure with a stable fingerprint.
        let mut v = judge(
            &Facts {
                promise: true,
                ..Facts::default()
            },
            &Measured::default(),
            &RunFlags::default(),
        );
        refuse(&mut v, "verify failed: `make` exited with 2".into());
        assert_eq!(v.outcome.to_string(), "refused");
        assert!(v.breaker.failed);
        assert_eq!(v.breaker.error.as_deref(), v.error.as_deref());
    }

    /// A completion refused because a check's script is not trusted ends
    /// the run at once, promise or unit, before the breaker and the
    /// budgets: a second session could never pass it (issue 34).
    #[test]
    fn a_refusal_no_session_can_lift_ends_the_run() {
        let why = "`sh check.sh` was not run: check.sh changed during the run".to_string();
        for (promise, unit_done) in [(Some((4, 0)), None), (None, Some(4))] {
            let case = Case {
                signalled: false,
                promise,
                unit_done,
                refused: Some("verify failed".into()),
                untrusted: Some(why.clone()),
                ..all()
            };
            let mut events = Vec::new();
            assert_eq!(
                exit_rule(case, &mut events),
                Next::End(Outcome::Untrusted, why.clone())
            );
            assert!(matches!(
                events.as_slice(),
                [Event::CompletionRefused { iteration: 4, .. }]
            ));
        }
        assert_eq!(Outcome::Untrusted.exit_code(), 2);
        assert_eq!(Outcome::Untrusted.status().name(), "untrusted");
    }

    #[test]
    fn a_workers_unit_checked_off_completes_promise_or_not_and_verify_decides() {
        let quiet = Case {
            signalled: false,
            promise: None,
            breaker: Some(BreakerEnd::Tripped(trip())),
            unit_done: Some(3),
            ..all()
        };
        // No promise: the unit checked off completes, before the breaker.
        assert_eq!(
            exit_rule(quiet.clone(), &mut Vec::new()),
            Next::End(
                Outcome::Completed,
                "its unit is checked off in iteration 3".into()
            )
        );
        // A signal still comes first.
        let signalled = Case {
            signalled: true,
            ..quiet.clone()
        };
        assert!(matches!(
            exit_rule(signalled, &mut Vec::new()),
            Next::End(Outcome::Interrupted, _)
        ));
        // Failing checks refuse it, and the rules go on.
        let refused = Case {
            refused: Some("verify failed".into()),
            ..quiet
        };
        let mut events = Vec::new();
        assert!(matches!(
            exit_rule(refused, &mut events),
            Next::End(Outcome::BreakerOpen, _)
        ));
        assert!(matches!(
            events.as_slice(),
            [
                Event::CompletionRefused { iteration: 3, .. },
                Event::Breaker { .. }
            ]
        ));
        // What calls for the completion checks: (promise, open, require, unit) → claim.
        let table = [
            (true, 0, true, false, true),
            (true, 2, true, false, false),
            (true, 2, false, false, true),
            (false, 0, true, false, false),
            (false, 0, true, true, true),
        ];
        for (promise, open_items, require_plan_complete, unit_done, claims) in table {
            let gate = Gate {
                open_items,
                require_plan_complete,
                refused: None,
                untrusted: None,
                unit_done,
            };
            assert_eq!(
                gate.claims_completion(promise),
                claims,
                "{gate:?} {promise}"
            );
        }
    }

    #[test]
    fn a_premature_promise_warns_and_the_rules_go_on() {
        let case = Case {
            promise: Some((4, 2)),
            require_plan_complete: true,
            ..all()
        };
        let case = Case {
            signalled: false,
            ..case
        };
        let mut events = Vec::new();
        let next = exit_rule(case, &mut events);
        assert!(matches!(next, Next::End(Outcome::BreakerOpen, _)));
        assert!(matches!(
            events.as_slice(),
            [
                Event::PrematurePromise {
                    iteration: 4,
                    open_items: 2
                },
                Event::Breaker { .. }
            ]
        ));
        // Without require_plan_complete, the promise completes the run.
        let case = Case {
            signalled: false,
            promise: Some((4, 2)),
            ..all()
        };
        assert!(matches!(
            exit_rule(case, &mut Vec::new()),
            Next::End(Outcome::Completed, _)
        ));
    }

    #[test]
    fn a_plan_with_nothing_open_ends_the_run_when_its_checks_pass() {
        // (open, done, after, checks) → complete, and the reason's words
        let table = [
            (1, 2, Some(3), Checks::Passed, None),
            (0, 0, Some(3), Checks::None, None),
            (0, 2, Some(3), Checks::Failed, None),
            (0, 2, None, Checks::Failed, None),
            (
                0,
                2,
                Some(3),
                Checks::Passed,
                Some("after iteration 3 and the checks pass; the agent did not say the promise"),
            ),
            (
                0,
                1,
                Some(1),
                Checks::None,
                Some("no open items after iteration 1; the agent did not say the promise"),
            ),
            (
                0,
                2,
                None,
                Checks::None,
                Some("no open items (2 done): nothing to do"),
            ),
            (
                0,
                2,
                None,
                Checks::Passed,
                Some("(2 done) and the checks pass: nothing to do"),
            ),
        ];
        for (open, done, after, checks, says) in table {
            let why = nothing_open(open, done, after, checks.clone());
            match says {
                None => assert_eq!(why, None, "{open} {done} {after:?} {checks:?}"),
                Some(words) => {
                    let why = why.unwrap_or_default();
                    assert!(why.contains(words), "{why}");
                }
            }
        }
        assert!(maybe_finished(0, 1));
        assert!(!maybe_finished(1, 1) && !maybe_finished(0, 0));
    }

    #[test]
    fn the_gate_before_an_iteration() {
        let breaker = BreakerState {
            rule: Some("same_error".into()),
            message: Some("the same error 5 times".into()),
            ..BreakerState::default()
        };
        let flags = RunFlags::default();
        let mut events = Vec::new();
        let cooling = gate(
            Admission::Wait(Duration::from_secs(90)),
            &breaker,
            &flags,
            None,
            0,
            10,
            &mut events,
        );
        assert_eq!(
            cooling,
            Next::End(
                Outcome::BreakerOpen,
                "circuit breaker is open (same_error): the same error 5 times; the cooldown ends in 1m30s. Fix the cause and run `ralph run --reset-breaker` to go on now".into()
            )
        );
        assert!(events.is_empty());
        // A trial iteration is announced, then the other rules hold.
        let next = gate(
            Admission::Trial,
            &breaker,
            &flags,
            None,
            10,
            10,
            &mut events,
        );
        assert!(matches!(next, Next::End(Outcome::IterationLimit, _)));
        assert!(
            matches!(events.as_slice(), [Event::Breaker { status, .. }] if *status == breaker::Status::HalfOpen)
        );
        let next = gate(Admission::Go, &breaker, &flags, None, 9, 10, &mut events);
        assert_eq!(next, Next::Continue);
    }
}
