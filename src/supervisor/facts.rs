//! What one iteration leaves behind: the facts the machine gathered while
//! the agent ran, and the few text helpers that shape them. Plain data.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::stop::SignalCount;
use crate::context::Level;
use crate::rules::limits::LimitHit;
use crate::state::Trigger;
use crate::stream::{ResultMessage, ToolCall};

/// Why an iteration is checkpointed, and at what level of the context.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct CheckpointMark {
    pub trigger: Trigger,
    pub level: Level,
    pub percent: f64,
}

/// The meter at the end of an iteration.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct MeterSummary {
    pub window: u64,
    pub known_windows: BTreeMap<String, u64>,
    pub peak_percent: f64,
    pub peak_level: Level,
    pub peak_tokens: u64,
    /// The kind reports no usage per model call: the peak is no measure.
    pub not_metered: bool,
}

/// Facts gathered while one agent process ran.
#[derive(Debug, Default)]
pub(super) struct Facts {
    pub number: u32,
    pub result: Option<ResultMessage>,
    pub cost_usd: f64,
    pub checkpoint: Option<CheckpointMark>,
    pub stop_reason: Option<String>,
    pub notes_path: Option<PathBuf>,
    pub limit: Option<LimitHit>,
    pub timed_out: Option<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub spawn_error: Option<String>,
    pub invalid_lines: u64,
    pub skipped_lines: u64,
    pub last_text: Option<String>,
    /// What the agent last said before the checkpoint began (afterwards it
    /// talks about its handoff, not its work).
    pub text_at_checkpoint: Option<String>,
    /// What the agent first said after the L1 nudge.
    pub nudge_answer: Option<String>,
    /// The agent CLI's session id, from its init line.
    pub session_id: Option<String>,
    /// The session was continued once after its stop to ask for handoff
    /// notes (`continuation`).
    pub continued: bool,
    pub tool_calls: Vec<ToolCall>,
    pub files_touched: Vec<String>,
    pub permission_denials: Vec<String>,
    /// The subscription's usage: the run's before, updated by the agent's reports.
    pub quota: crate::rules::quota::Usage,
    pub promise: bool,
    pub stderr_tail: String,
    pub seconds: f64,
    /// When it started (RFC 3339), for the history.
    pub started_at: String,
    /// Interrupts so far in the run, this iteration's included.
    pub signals: SignalCount,
    /// `ralph stop` arrived during the iteration.
    pub stop_requested: bool,
    /// The stash entries (ids) when the agent started; None when none ran.
    pub stash_before: Option<Vec<String>>,
    /// `None` when the agent never started.
    pub meter: Option<MeterSummary>,
    /// Item by item (`None` without a plan to follow).
    pub items: Option<crate::plan::items::ItemsOutcome>,
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
