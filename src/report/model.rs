//! The figures of one run as the report shows them and `ralph report
//! --json` writes them: the run, its iterations (readings, marks), waits,
//! breaker changes and metrics. Data only; `gather.rs` fills them from
//! what the run recorded.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::context::{Level, Thresholds};
use crate::formats::IterationOutcome;

/// Everything the report shows about one run (also its `--json` form).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    pub(crate) run_id: String,
    pub(crate) objective: Option<String>,
    pub(crate) plan: Option<String>,
    pub(crate) started_at: Option<String>,
    pub(crate) ended_at: Option<String>,
    /// Wall time from the first start to the end (or the last event).
    pub(crate) seconds: f64,
    /// `completed`, `breaker_open`, …, or `running` while it goes on.
    pub(crate) outcome: String,
    pub(crate) reason: Option<String>,
    pub(crate) exit_code: Option<i32>,
    /// Supervisor starts: 1, plus one per `ralph run` that continued it.
    pub(crate) sessions: u32,
    pub(crate) cost_usd: f64,
    pub(crate) items_done: Option<usize>,
    pub(crate) items_open: Option<usize>,
    /// ralph's own commits as recorded, oldest first: its WIP commits; in
    /// a parallel run also the coordinator's (merges, plan check-offs, a
    /// worker's leftovers) and the workers' final commits.
    pub(crate) commits: Vec<String>,
    pub thresholds: Thresholds,
    pub budgets: Budgets,
    pub iterations: Vec<IterationRow>,
    pub waits: Vec<Wait>,
    pub breaker: Vec<BreakerChange>,
    /// What was left to a person (`needs_human`), oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) needs_human: Vec<HumanRow>,
    /// The runs of the `[verify]` commands, oldest first.
    pub verify: Vec<super::story::VerifyRow>,
    /// What changed overnight (from git: `changes::read_git`).
    pub story: super::story::Story,
    pub metrics: Metrics,
    /// The subscription's windows as the agent last reported them (the
    /// quota guard); empty when it reported none.
    pub(crate) quota: Vec<crate::rules::quota::WindowView>,
    /// The run's warnings (a notification not delivered, a commit skipped,
    /// …), each distinct one once, first seen first.
    pub(crate) warnings: Vec<WarningRow>,
}

/// One distinct warning of the run and how often it was given.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WarningRow {
    pub(crate) message: String,
    pub(crate) count: u32,
    /// When it was first given.
    pub(crate) at: String,
}

/// The limits the run was held to, as far as they are known.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Budgets {
    pub(crate) max_iterations: Option<u32>,
    pub(crate) max_cost_usd: Option<f64>,
    pub(crate) max_duration_secs: Option<f64>,
    /// When the run's time was up, as its latest start said (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) deadline: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IterationRow {
    pub(crate) iteration: u32,
    /// The worker that ran it (a parallel run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) worker: Option<String>,
    pub(crate) started_at: Option<String>,
    pub(crate) ended_at: Option<String>,
    /// Seconds from the run's start to this iteration's start and end.
    pub(crate) start_offset: Option<f64>,
    pub(crate) end_offset: Option<f64>,
    pub(crate) seconds: f64,
    pub(crate) item: Option<String>,
    pub(crate) items_checked: Vec<String>,
    pub(crate) items_done: Option<usize>,
    pub(crate) items_open: Option<usize>,
    pub(crate) outcome: IterationOutcome,
    pub(crate) progress: bool,
    pub(crate) error: Option<String>,
    pub(crate) cost_usd: f64,
    pub(crate) cumulative_cost_usd: f64,
    pub(crate) peak_percent: f64,
    pub(crate) peak_tokens: u64,
    /// The usable window (tokens) its readings are a percentage of.
    pub(crate) usable_tokens: u64,
    /// Its agent was not metered live (Gemini CLI): `peak_percent` and the
    /// readings are no measure of its context.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) not_metered: bool,
    /// Why ralph checkpointed it (`context`, `manual`, `budget`, …).
    pub(crate) trigger: Option<String>,
    pub(crate) level: Option<Level>,
    pub(crate) handoff: Option<String>,
    pub(crate) commit: Option<String>,
    /// The handoff it resumed from.
    pub(crate) resumed_from: Option<String>,
    /// What it changed, its commits, its agent session (`story.rs`).
    #[serde(flatten)]
    pub(crate) story: super::story::IterationStory,
    pub(crate) readings: Vec<Reading>,
    pub(crate) marks: Vec<Mark>,
}

impl IterationRow {
    pub(super) fn mark(&mut self, at: f64, kind: MarkKind, label: String) {
        self.marks.push(Mark { at, kind, label });
    }

    /// Its item as shown, after the worker that ran it (`w2: alpha`):
    /// plan text, its escape sequences and control characters removed.
    pub(crate) fn item_label(&self) -> String {
        let item = crate::text::printable(self.item.as_deref().unwrap_or(""));
        match &self.worker {
            Some(w) if item.is_empty() => w.clone(),
            Some(w) => format!("{w}: {item}"),
            None => item.into_owned(),
        }
    }

    /// A resume that checked off the item it started on.
    pub(crate) fn completed_its_item(&self) -> bool {
        self.item
            .as_ref()
            .is_some_and(|i| self.items_checked.contains(i))
    }
}

/// One per-turn context reading.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Reading {
    /// Seconds since the iteration started.
    pub(crate) at: f64,
    pub(crate) tokens: u64,
    pub(crate) percent: f64,
}

/// Something ralph did or saw during an iteration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Mark {
    /// Seconds since the iteration started.
    pub(crate) at: f64,
    pub(crate) kind: MarkKind,
    pub(crate) label: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MarkKind {
    /// Asked the agent for its handoff.
    Nudge,
    /// Signalled the agent to stop.
    Stop,
    /// Saved the work: handoff and WIP commit.
    Checkpoint,
    /// The agent's CLI compacted its context.
    Compaction,
}

/// A wait for a usage limit to reset.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Wait {
    pub(crate) at: String,
    pub(crate) offset: Option<f64>,
    pub(crate) seconds: u64,
    pub(crate) until: String,
    pub(crate) source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakerChange {
    pub(crate) at: String,
    pub(crate) offset: Option<f64>,
    pub(crate) status: String,
    pub(crate) rule: Option<String>,
    pub(crate) message: String,
}

/// Something left to a person (`needs_human`): a conflict no attempt
/// resolved, checks that keep failing, a full `max_worktrees`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HumanRow {
    pub(crate) at: String,
    pub(crate) offset: Option<f64>,
    /// The worker whose loop said it (the coordinator's name none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) worker: Option<String>,
    pub(crate) reason: String,
    pub(crate) message: String,
}

/// The figures that say how well the loop worked.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Metrics {
    pub checkpoints: u32,
    pub(crate) checkpoints_by_level: BTreeMap<String, u32>,
    pub(crate) checkpoints_by_trigger: BTreeMap<String, u32>,
    pub(crate) nudges: u32,
    pub(crate) stops: u32,
    pub(crate) compactions: u32,
    /// Tokens the agent's CLI dropped when it compacted.
    pub(crate) context_lost_tokens: u64,
    pub(crate) resumes: u32,
    /// Resumes that checked off the item they started on (`None` when the
    /// run did not record items).
    pub(crate) resumes_completed: Option<u32>,
    pub(crate) items_checked: usize,
    pub(crate) items_per_iteration: f64,
    /// Items checked per agent session (each starts a fresh context window).
    pub(crate) items_per_context_window: f64,
    pub(crate) peak_percent_max: f64,
    pub(crate) peak_percent_median: f64,
    pub(crate) peak_tokens_max: u64,
    pub(crate) breaker_trips: u32,
    pub(crate) limit_waits: u32,
    pub(crate) waited_seconds: u64,
}
