//! What one iteration leaves behind: the facts the machine gathered while
//! the agent ran, and the few text helpers that shape them. Plain data.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::stop::SignalCount;
use crate::context::{ContextMeter, Level};
use crate::formats::Trigger;
use crate::rules::limits::LimitHit;
use crate::stream::{ResultMessage, ToolCall};

/// Why an iteration is checkpointed, and one reading of the meter that
/// gives its level, percent and tokens together: the reading at the
/// request (or, for a checkpoint decided after the session, its peak).
/// The level is the context's, whatever the trigger: a stop at 13% is L0,
/// not the L2 of a context checkpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct CheckpointMark {
    pub(crate) trigger: Trigger,
    pub(crate) level: Level,
    pub(crate) percent: f64,
    pub(crate) tokens: u64,
}

impl CheckpointMark {
    /// The meter as it reads now.
    pub(super) fn reading(trigger: Trigger, m: &ContextMeter) -> CheckpointMark {
        CheckpointMark {
            trigger,
            level: m.level(),
            percent: m.percent(),
            tokens: m.tokens(),
        }
    }

    /// The session's peak (zero when no agent ran).
    pub(super) fn at_peak(trigger: Trigger, m: Option<&MeterSummary>) -> CheckpointMark {
        CheckpointMark {
            trigger,
            level: m.map_or(Level::L0, |m| m.peak_level),
            percent: m.map_or(0.0, |m| m.peak_percent),
            tokens: m.map_or(0, |m| m.peak_tokens),
        }
    }
}

/// The meter at the end of an iteration.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct MeterSummary {
    pub(crate) window: u64,
    pub(crate) known_windows: BTreeMap<String, u64>,
    /// What this iteration learnt of its models' windows, and from where
    /// (`.ralph/windows.json` keeps it past the run).
    pub(crate) learned_windows: BTreeMap<String, (u64, crate::context::WindowSource)>,
    pub(crate) peak_percent: f64,
    pub(crate) peak_level: Level,
    pub(crate) peak_tokens: u64,
    /// The kind reports no usage per model call: the peak is no measure.
    pub(crate) not_metered: bool,
}

/// Facts gathered while one agent process ran.
#[derive(Debug, Default)]
pub(super) struct Facts {
    pub(crate) number: u32,
    pub(crate) result: Option<ResultMessage>,
    pub(crate) cost_usd: f64,
    pub(crate) checkpoint: Option<CheckpointMark>,
    pub(crate) stop_reason: Option<String>,
    pub(crate) notes_path: Option<PathBuf>,
    pub(crate) limit: Option<LimitHit>,
    pub(crate) timed_out: Option<String>,
    pub(crate) exit_code: Option<i32>,
    pub(crate) exit_signal: Option<i32>,
    pub(crate) spawn_error: Option<String>,
    /// The program is missing or not executable (not a passing shortage).
    pub(crate) cannot_start: bool,
    pub(crate) invalid_lines: u64,
    pub(crate) skipped_lines: u64,
    pub(crate) last_text: Option<String>,
    /// What the agent last said before the checkpoint began (afterwards it
    /// talks about its handoff, not its work).
    pub(crate) text_at_checkpoint: Option<String>,
    /// What the agent first said after the L1 nudge.
    pub(crate) nudge_answer: Option<String>,
    /// The agent CLI's session id, from its init line.
    pub(crate) session_id: Option<String>,
    /// The session was continued once after its stop to ask for handoff
    /// notes (`continuation`).
    pub(crate) continued: bool,
    pub(crate) tool_calls: Vec<ToolCall>,
    pub(crate) files_touched: Vec<String>,
    pub(crate) permission_denials: Vec<String>,
    /// The subscription's usage: the run's before, updated by the agent's reports.
    pub(crate) quota: crate::rules::quota::Usage,
    pub(crate) promise: bool,
    pub(crate) stderr_tail: String,
    pub(crate) seconds: f64,
    /// When it started (RFC 3339), for the history.
    pub(crate) started_at: String,
    /// Interrupts so far in the run, this iteration's included.
    pub(crate) signals: SignalCount,
    /// `ralph stop` arrived during the iteration.
    pub(crate) stop_requested: bool,
    /// The stash entries (ids) when the agent started; None when none ran.
    pub(crate) stash_before: Option<Vec<String>>,
    /// `None` when the agent never started.
    pub(crate) meter: Option<MeterSummary>,
    /// Item by item (`None` without a plan to follow).
    pub(crate) items: Option<crate::plan::items::ItemsOutcome>,
}

/// The first non-blank line, trimmed, at most 120 characters.
pub(super) fn first_line(s: &str) -> String {
    let line = s
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    line.chars().take(120).collect()
}

/// `path` relative to `root` when it is inside it.
pub(super) fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}
