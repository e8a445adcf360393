//! Plan items as the run records them: what each item cost
//! (`state.json` → `items`, `.ralph/items.jsonl`), a pending request to
//! split one, what an unfinished iteration carries to the next prompt, and
//! how sure an estimate is. The rules that make and read them are
//! `plan::items` and `plan::estimate`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
/// How sure an item's estimate is (`items.jsonl`, `state.json`).
pub(crate) enum Confidence {
    Low,
    Medium,
    High,
}

impl Confidence {
    /// Headroom asked for on top of an estimate before it is said to fit:
    /// the less ralph knows, the more it keeps in hand.
    pub(crate) fn margin(self) -> f64 {
        match self {
            Confidence::Low => 1.25,
            Confidence::Medium => 1.15,
            Confidence::High => 1.05,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Confidence::Low => "low",
            Confidence::Medium => "medium",
            Confidence::High => "high",
        }
    }
}

/// What the run knows about one plan item, summed over the iterations that
/// worked on it (`state.json` → `items`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ItemAccount {
    pub(crate) item: String,
    /// Context tokens it consumed: the climb while it was current, summed
    /// across iterations and checkpoints.
    pub(crate) tokens: u64,
    pub(crate) iterations: u32,
    pub(crate) checkpoints: u32,
    /// Iterations in a row, up to the latest that worked on it, that ended
    /// in a context checkpoint with it unfinished.
    pub(crate) streak: u32,
    pub(crate) done: bool,
    /// The estimate made when it first became current.
    pub(crate) estimate: Option<u64>,
    pub(crate) confidence: Option<Confidence>,
    /// The iteration that split it into sub-items, if one did.
    pub(crate) split_in: Option<u32>,
    /// The `[verify]` commands passed (or not) after it was checked off
    /// (`verify.on = ["item"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) verified: Option<bool>,
}

/// Why the next prompt asks for the current item to be split (SHD-002).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardReason {
    /// Its estimate is above `context.shard_percent` of the usable window.
    TooLarge,
    /// It was checkpointed in two iterations in a row.
    Checkpointed,
}

impl ShardReason {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ShardReason::TooLarge => "too_large",
            ShardReason::Checkpointed => "checkpointed",
        }
    }
}

impl std::fmt::Display for ShardReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A pending request, carried in `state.json` to the next prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardRequest {
    pub(crate) item: String,
    pub(crate) reason: ShardReason,
    pub(crate) estimate: Option<u64>,
    pub(crate) percent: f64,
}

/// What an iteration that ended without finishing its item (and without a
/// checkpoint, whose handoff says it all) leaves the next prompt: its
/// uncommitted changes, what it answered when told the context was filling
/// (L1), and its last words — where it stopped, what comes next. Or an
/// iteration that put work in the stash, finished item or not: work no
/// commit and no check-off sees, which the next session would do again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CarryOver {
    pub(crate) iteration: u32,
    pub(crate) item: Option<String>,
    /// `git diff --stat`-like lines of what changed.
    pub(crate) changes: Vec<String>,
    /// Its answer to the L1 nudge (when it differs from its last words).
    #[serde(default)]
    pub(crate) answer: Option<String>,
    #[serde(default)]
    pub(crate) last_words: Option<String>,
    /// The stash entries it made (`stash@{0} (WIP on main: …)`); always
    /// written, the template reads it.
    #[serde(default)]
    pub(crate) stashed: Vec<String>,
}
