//! What the supervisor reports: the [`Event`] and its [`Record`], the
//! schema of `.ralph/events.jsonl` and of `ralph run --json`
//! (docs/events.md), and the log read back. The bus and its sinks that
//! write and consume them are `events`'s.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Point;
use crate::context::{Level, MeterReading};
use crate::formats::ShardReason;
use crate::formats::{IterationOutcome, RunStatus, Trigger};
use crate::rules::breaker;
use crate::rules::limits::LimitSource;

/// What a `trust` event says ralph did about files changed during a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrustAction {
    /// During the run: not obeyed (the run keeps what it started with).
    Ignored,
    /// At the next start, without the box: the run starts, warned.
    Warned,
    /// At the next start: confirmed by `ralph run --trust-config`.
    Confirmed,
}

/// One thing that happened. Serialized with `"event": "<snake_case name>"`
/// and a `ts` (RFC 3339) by [`Record`]; documented in docs/events.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    RunStarted {
        run_id: String,
        resumed: bool,
        first_iteration: u32,
        max_iterations: u32,
        plan: String,
        pid: u32,
        /// When the run's time is up (RFC 3339): the earlier of
        /// `--deadline` and `loop.max_duration` counted as the run counts
        /// it. Left out when neither is set (and in older records).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline: Option<String>,
        /// The run's cost at which it stops: `loop.max_cost_usd` counted
        /// as the run counts it. Left out when unset (and in older records).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_cost_usd: Option<f64>,
    },
    IterationStarted {
        iteration: u32,
        command: Vec<String>,
        transcript: String,
        resume_from: Option<String>,
    },
    /// After every main-thread turn: the meter's reading.
    Context {
        iteration: u32,
        reading: MeterReading,
        tool: Option<String>,
    },
    LevelChanged {
        iteration: u32,
        from: Level,
        to: Level,
        percent: f64,
        tokens: u64,
    },
    Compacted {
        iteration: u32,
        pre_tokens: u64,
        post_tokens: u64,
    },
    ApiRetry {
        iteration: u32,
        attempt: u64,
        max_retries: u64,
        error_status: Option<u64>,
        error: Option<String>,
    },
    /// The plan changed live: items checked off, and the item now current.
    ItemChecked {
        iteration: u32,
        items: Vec<String>,
        next: Option<String>,
        percent: f64,
        /// Tokens the next item is estimated at, and what is left before
        /// the checkpoint.
        next_estimate: Option<u64>,
        remaining: u64,
    },
    /// At L1: the agent was told to finish its item and not start another.
    Nudged {
        iteration: u32,
        percent: f64,
        item: Option<String>,
    },
    /// The next prompt asks for the item to be split into sub-items.
    ShardSuggested {
        iteration: u32,
        item: String,
        /// `too_large` or `checkpointed`.
        reason: ShardReason,
        estimate: Option<u64>,
        percent: f64,
    },
    CheckpointRequested {
        iteration: u32,
        trigger: Trigger,
        level: Level,
        percent: f64,
        notes_path: Option<String>,
    },
    /// A kind that takes no message mid-session but continues a stopped
    /// session by id (opencode) was asked for its handoff notes in one more
    /// turn of that session, after the clean stop at L2.
    SessionContinued {
        iteration: u32,
        session_id: String,
        notes_path: String,
        /// The notes file was there when the continuation ended.
        notes_written: bool,
        seconds: f64,
        cost_usd: f64,
    },
    AgentSignalled {
        iteration: u32,
        /// The stop step taken: a signal, or the kind's own request.
        signal: StopStep,
        reason: String,
    },
    AgentExited {
        iteration: u32,
        code: Option<i32>,
        signal: Option<i32>,
        seconds: f64,
    },
    Checkpoint {
        iteration: u32,
        trigger: Trigger,
        level: Level,
        percent: f64,
        tokens: u64,
        commit: Option<String>,
        commit_note: Option<String>,
        handoff: Option<String>,
    },
    /// The safety net recorded the work tree on a hidden ref
    /// (`ralph recover`).
    Snapshot {
        iteration: u32,
        /// `interval` (every `git.snapshot_interval`) or `stop` (ralph is
        /// about to stop the agent).
        reason: SnapshotReason,
        commit: String,
        #[serde(rename = "ref")]
        reference: String,
    },
    Hook {
        hook: Point,
        command: String,
        ok: bool,
        detail: String,
        /// 1, then 2… when `hooks.retries` runs a failed command again.
        #[serde(default = "first_attempt")]
        attempt: u32,
    },
    PrematurePromise {
        iteration: u32,
        open_items: usize,
    },
    /// ralph ran the `[verify]` commands (docs/verify.md).
    Verify {
        #[serde(flatten)]
        verification: crate::formats::Verification,
    },
    /// The agent kept its promise but the run did not complete: the
    /// `[verify]` commands failed.
    CompletionRefused {
        iteration: u32,
        reason: String,
    },
    IterationEnded {
        iteration: u32,
        outcome: IterationOutcome,
        progress: bool,
        cost_usd: f64,
        peak_percent: f64,
        seconds: f64,
        error: Option<String>,
        invalid_lines: u64,
        skipped_lines: u64,
        /// The agent's kind is not metered live (Gemini CLI): `peak_percent`
        /// is no measure of its context. Left out when false, so that
        /// records read as before.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        not_metered: bool,
        /// The agent's own session id, when its output named one: the
        /// report's "reopen the session" for every row, a worker's too
        /// (whose state leaves with its worktree). Left out when none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_id: Option<String>,
    },
    Breaker {
        #[serde(with = "breaker_status")]
        status: breaker::Status,
        rule: Option<String>,
        message: String,
    },
    LimitWait {
        until: String,
        seconds: u64,
        source: LimitSource,
        detail: String,
    },
    Warning {
        message: String,
    },
    /// Files ralph acts on (`ralph.toml`, `prompts/*.j2`, scripts its
    /// hooks and checks name, git hooks) changed during a run, and what
    /// ralph does about it (`config::trust`, docs/sandbox.md).
    Trust {
        action: TrustAction,
        paths: Vec<String>,
        message: String,
    },
    /// Something only a person can settle; the run stops or goes on without
    /// it and says so here (`reason`: `conflict`, `verify_failing`, …).
    /// Notified as `needs_human` (docs/notifications.md).
    NeedsHuman {
        iteration: u32,
        reason: String,
        message: String,
    },
    /// Parallel workers (docs/workers.md; the record's `worker` names it):
    /// the coordinator gave a worker a
    /// unit of the plan (`task`: `item`), or its branch to bring up to date
    /// after a merge conflict (`task`: `update`).
    WorkerStarted {
        item: String,
        task: String,
        branch: String,
        worktree: String,
    },
    /// A worker's loop ended (its own `run_ended`, as the coordinator saw it).
    WorkerEnded {
        item: String,
        exit_code: i32,
        outcome: String,
    },
    /// The merge queue merged a worker branch into the run branch, or could
    /// not (`conflict`: handed back; `blocked`: the user's files in the way).
    Merge {
        item: String,
        branch: String,
        /// 1 for the first try, then one more after each update.
        attempt: u32,
        #[serde(flatten)]
        merged: crate::formats::Merged,
        /// The ref that keeps the run branch's tip from before the merge.
        backup: Option<String>,
    },
    RunEnded {
        outcome: RunStatus,
        exit_code: i32,
        reason: String,
        iterations: u32,
        cost_usd: f64,
        /// The morning report written as the run ended (`report`).
        #[serde(default)]
        report: Option<String>,
    },
    /// A fleet worker's event (`ralph run --remote R --fleet NAME`): its
    /// own names, all `fleet_…` (`formats::fleet`). Last: untagged here,
    /// tagged by its own `event`.
    #[serde(untagged)]
    Fleet(super::fleet::FleetEvent),
}

/// Why the safety net recorded the work tree (`snapshot.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotReason {
    /// `git.snapshot_interval` has passed.
    Interval,
    /// ralph is about to stop the agent.
    Stop,
}

impl SnapshotReason {
    pub(crate) fn name(self) -> &'static str {
        match self {
            SnapshotReason::Interval => "interval",
            SnapshotReason::Stop => "stop",
        }
    }
}

impl std::fmt::Display for SnapshotReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

fn first_attempt() -> u32 {
    1
}

/// An event with its time, as written to the log and to `--json` output.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub ts: String,
    /// The worker whose loop reported it (`ralph run --workers N`), or none
    /// for a single run's and the coordinator's own events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    #[serde(flatten)]
    pub event: Event,
}

impl Record {
    /// `event` stamped now, with every known secret replaced: what the
    /// sinks (and the hooks, on stdin) get.
    pub(crate) fn new(event: Event) -> Record {
        Record {
            ts: crate::formats::now_rfc3339(),
            worker: None,
            event: redacted(event),
        }
    }
}

/// The event with every known secret replaced: events carry what the agent
/// or a hook said, which may quote one (see `secrets`).
fn redacted(event: Event) -> Event {
    let Ok(json) = serde_json::to_string(&event) else {
        return event;
    };
    match crate::text::secrets::redact_json(&json) {
        std::borrow::Cow::Borrowed(_) => event,
        std::borrow::Cow::Owned(clean) => serde_json::from_str(&clean).unwrap_or(event),
    }
}

/// Read `.ralph/events.jsonl`, skipping lines that do not parse (a torn
/// last line after a crash).
pub(crate) fn read_log(path: &Path) -> Vec<Record> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// One step of stopping the agent, as events name it: a signal ("SIGINT",
/// "SIGTERM", "SIGKILL") or, for a kind whose clean stop is a request of its
/// protocol, that request ("turn/interrupt": Codex's app-server).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopStep {
    #[serde(rename = "SIGINT")]
    Sigint,
    #[serde(rename = "SIGTERM")]
    Sigterm,
    #[serde(rename = "SIGKILL")]
    Sigkill,
    #[serde(rename = "turn/interrupt")]
    TurnInterrupt,
}

impl StopStep {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StopStep::Sigint => "SIGINT",
            StopStep::Sigterm => "SIGTERM",
            StopStep::Sigkill => "SIGKILL",
            StopStep::TurnInterrupt => "turn/interrupt",
        }
    }
}

impl From<nix::sys::signal::Signal> for StopStep {
    fn from(signal: nix::sys::signal::Signal) -> StopStep {
        use nix::sys::signal::Signal;
        match signal {
            Signal::SIGINT => StopStep::Sigint,
            Signal::SIGTERM => StopStep::Sigterm,
            // The stop escalates through these three only.
            _ => StopStep::Sigkill,
        }
    }
}

impl std::fmt::Display for StopStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The breaker's status as events name it: "closed", "half-open", "open"
/// (`state.json` keeps serde's snake_case names; events the human ones).
mod breaker_status {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::rules::breaker::Status;

    pub(crate) fn serialize<S: Serializer>(status: &Status, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(status.name())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Status, D::Error> {
        let name = String::deserialize(d)?;
        [Status::Closed, Status::HalfOpen, Status::Open]
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown breaker status `{name}`")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_fields_are_written_as_the_documented_strings() {
        use crate::context::Level;
        for (event, field, text) in [
            (
                Event::Breaker {
                    status: breaker::Status::HalfOpen,
                    rule: None,
                    message: "m".into(),
                },
                "status",
                "half-open",
            ),
            (
                Event::AgentSignalled {
                    iteration: 1,
                    signal: StopStep::TurnInterrupt,
                    reason: "r".into(),
                },
                "signal",
                "turn/interrupt",
            ),
            (
                Event::IterationEnded {
                    iteration: 1,
                    outcome: IterationOutcome::Checkpoint(Trigger::RateLimit, Level::L2),
                    progress: false,
                    cost_usd: 0.0,
                    peak_percent: 0.0,
                    seconds: 0.0,
                    error: None,
                    invalid_lines: 0,
                    skipped_lines: 0,
                    not_metered: false,
                    session_id: None,
                },
                "outcome",
                "checkpoint (rate_limit, L2)",
            ),
            (
                Event::ShardSuggested {
                    iteration: 1,
                    item: "i".into(),
                    reason: ShardReason::TooLarge,
                    estimate: None,
                    percent: 0.0,
                },
                "reason",
                "too_large",
            ),
            (
                Event::ShardSuggested {
                    iteration: 1,
                    item: "i".into(),
                    reason: ShardReason::Checkpointed,
                    estimate: None,
                    percent: 0.0,
                },
                "reason",
                "checkpointed",
            ),
        ] {
            let json = serde_json::to_value(&event).unwrap();
            assert_eq!(json[field], text, "{json}");
            assert_eq!(serde_json::from_value::<Event>(json).unwrap(), event);
        }
        let snapshot = |reason| Event::Snapshot {
            iteration: 1,
            reason,
            commit: "c".into(),
            reference: "r".into(),
        };
        let hook = |hook| Event::Hook {
            hook,
            command: "c".into(),
            ok: true,
            detail: String::new(),
            attempt: 1,
        };
        let wait = |source| Event::LimitWait {
            until: "u".into(),
            seconds: 1,
            source,
            detail: String::new(),
        };
        let ended = |outcome| Event::RunEnded {
            outcome,
            exit_code: 0,
            reason: String::new(),
            iterations: 1,
            cost_usd: 0.0,
            report: None,
        };
        for (event, field, text) in [
            (snapshot(SnapshotReason::Interval), "reason", "interval"),
            (snapshot(SnapshotReason::Stop), "reason", "stop"),
            (hook(Point::Checkpoint), "hook", "on_checkpoint"),
            (hook(Point::IterationEnd), "hook", "on_iteration_end"),
            (hook(Point::Exit), "hook", "on_exit"),
            (hook(Point::Level), "hook", "on_level"),
            (hook(Point::Breaker), "hook", "on_breaker"),
            (hook(Point::LimitWait), "hook", "on_limit_wait"),
            (hook(Point::Verify), "hook", "on_verify"),
            (
                wait(LimitSource::RateLimitEvent),
                "source",
                "rate_limit_event",
            ),
            (
                wait(LimitSource::SyntheticError),
                "source",
                "synthetic_error",
            ),
            (wait(LimitSource::Http429), "source", "http_429"),
            (wait(LimitSource::ResultText), "source", "result_text"),
            (ended(RunStatus::Completed), "outcome", "completed"),
            (ended(RunStatus::BreakerOpen), "outcome", "breaker_open"),
            (
                ended(RunStatus::IterationLimit),
                "outcome",
                "iteration_limit",
            ),
            (ended(RunStatus::BudgetSpent), "outcome", "budget_spent"),
            (ended(RunStatus::Stopped), "outcome", "stopped"),
            (ended(RunStatus::Interrupted), "outcome", "interrupted"),
            (ended(RunStatus::Failed), "outcome", "failed"),
        ] {
            let json = serde_json::to_value(&event).unwrap();
            assert_eq!(json[field], text, "{json}");
            assert_eq!(serde_json::from_value::<Event>(json).unwrap(), event);
        }
    }

    #[test]
    fn not_metered_is_written_only_when_true_and_read_when_absent() {
        let ended = |not_metered| Event::IterationEnded {
            iteration: 2,
            outcome: IterationOutcome::Done,
            progress: true,
            cost_usd: 0.0,
            peak_percent: 0.0,
            seconds: 1.0,
            error: None,
            invalid_lines: 0,
            skipped_lines: 0,
            not_metered,
            session_id: None,
        };
        let line = serde_json::to_value(ended(true)).unwrap();
        assert_eq!(line["not_metered"], true);
        let line = serde_json::to_string(&ended(false)).unwrap();
        assert!(!line.contains("not_metered"), "{line}");
        // A record written before the field existed.
        let old = r#"{"ts":"2026-11-21T22:00:00Z","event":"iteration_ended","iteration":2,"outcome":"done","progress":true,"cost_usd":0.0,"peak_percent":0.0,"seconds":1.0,"error":null,"invalid_lines":0,"skipped_lines":0}"#;
        let r: Record = serde_json::from_str(old).unwrap();
        assert!(matches!(
            r.event,
            Event::IterationEnded {
                not_metered: false,
                ..
            }
        ));
    }

    #[test]
    fn a_fleet_workers_events_are_records_of_the_one_stream() {
        use crate::formats::FleetEvent;
        let mut r = Record::new(Event::Fleet(FleetEvent::Unreachable {
            error: "fatal: https://x:ghp_0123456789abcdefghijABCDEFGHIJ@github.com/o/r: 403".into(),
            retry_in_secs: 4,
        }));
        r.worker = Some("w1".into());
        let line = serde_json::to_string(&r).unwrap();
        // Flat, named `fleet_…`, its worker on the record, redacted as any.
        assert!(
            line.contains(r#""worker":"w1","event":"fleet_unreachable""#),
            "{line}"
        );
        assert!(!line.contains("ghp_0123456789"), "{line}");
        let back: Record = serde_json::from_str(&line).unwrap();
        assert!(matches!(
            back.event,
            Event::Fleet(FleetEvent::Unreachable {
                retry_in_secs: 4,
                ..
            })
        ));
        // The other events still read as themselves.
        let warning: Record =
            serde_json::from_str(r#"{"ts":"t","event":"warning","message":"x"}"#).unwrap();
        assert!(matches!(warning.event, Event::Warning { .. }));
        let paused: Record = serde_json::from_str(
            r#"{"ts":"t","worker":"w2","event":"fleet_paused","by":"w1","until":"2026-11-27T05:00:00Z"}"#,
        )
        .unwrap();
        assert!(matches!(
            paused.event,
            Event::Fleet(FleetEvent::Paused { item: None, .. })
        ));
    }

    #[test]
    fn records_are_flat_json_with_event_name() {
        let r = Record {
            ts: "2026-11-21T22:00:00Z".into(),
            worker: None,
            event: Event::Warning {
                message: "x".into(),
            },
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"ts":"2026-11-21T22:00:00Z","event":"warning","message":"x"}"#
        );
    }
}
