//! Run state on disk: `.ralph/state.json` (versioned, written atomically),
//! the `.ralph/lock` that names the running supervisor, and the layout of
//! ralph's runtime directory.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::IterationOutcome;
use super::{CarryOver, ItemAccount, ShardRequest};
use crate::context::Level;
use crate::error::{Error, Result};
use crate::rules::breaker::BreakerState;

pub(crate) const STATE_VERSION: u32 = 1;

/// What set a checkpoint off. Written (state.json, events, `RALPH_TRIGGER`,
/// the handoff) as its snake_case name. It lives here, with the state that
/// keeps it, so that the checkpoint and the events need not import the
/// supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    Context,
    Manual,
    Timeout,
    Budget,
    Signal,
    Stop,
    RateLimit,
    /// An item was checked off and the next one would not fit.
    Boundary,
    /// The supervisor died (`kill -9`, a crash) during the iteration; the
    /// next run took it over.
    Crash,
    /// Claude Code was about to compact an interactive session (`ralph hook pre-compact`).
    Compact,
}

impl Trigger {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Trigger::Context => "context",
            Trigger::Manual => "manual",
            Trigger::Timeout => "timeout",
            Trigger::Budget => "budget",
            Trigger::Signal => "signal",
            Trigger::Stop => "stop",
            Trigger::RateLimit => "rate_limit",
            Trigger::Boundary => "boundary",
            Trigger::Crash => "crash",
            Trigger::Compact => "compact",
        }
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What set a checkpoint off, in a few words (`{{ label }}` of
/// `git.commit_message`, the handoff title): "L2 at 87%" for the context,
/// else the trigger, with the context's percent when there was a reading:
/// "signal at 24%", "manual".
pub(crate) fn checkpoint_label(trigger: Trigger, level: Level, percent: f64) -> String {
    let percent = percent.round() as i64;
    match trigger {
        // Both are the context filling up (`compact`: Claude Code's own).
        Trigger::Context | Trigger::Compact => format!("{level} at {percent}%"),
        _ if percent > 0 => format!("{trigger} at {percent}%"),
        _ => trigger.to_string(),
    }
}

/// Where a run stands (`status` in state.json). The supervisor writes the
/// named ones; `Other` keeps whatever another version of ralph wrote, word
/// for word, rather than refusing its state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    New,
    Running,
    Waiting,
    Completed,
    BreakerOpen,
    IterationLimit,
    BudgetSpent,
    Stopped,
    Interrupted,
    Failed,
    /// Ended at a completion no session could pass: a check's script
    /// changed during the run and is not trusted (`config::trust`).
    Untrusted,
    #[serde(untagged)]
    Other(String),
}

impl RunStatus {
    const NAMED: [RunStatus; 11] = [
        RunStatus::New,
        RunStatus::Running,
        RunStatus::Waiting,
        RunStatus::Completed,
        RunStatus::BreakerOpen,
        RunStatus::IterationLimit,
        RunStatus::BudgetSpent,
        RunStatus::Stopped,
        RunStatus::Interrupted,
        RunStatus::Failed,
        RunStatus::Untrusted,
    ];

    pub fn name(&self) -> &str {
        match self {
            RunStatus::New => "new",
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Completed => "completed",
            RunStatus::BreakerOpen => "breaker_open",
            RunStatus::IterationLimit => "iteration_limit",
            RunStatus::BudgetSpent => "budget_spent",
            RunStatus::Stopped => "stopped",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Failed => "failed",
            RunStatus::Untrusted => "untrusted",
            RunStatus::Other(s) => s,
        }
    }

    /// A supervisor is (or was, if it died) at work on the run.
    pub fn is_active(&self) -> bool {
        matches!(self, RunStatus::Running | RunStatus::Waiting)
    }
}

impl From<&str> for RunStatus {
    fn from(name: &str) -> RunStatus {
        RunStatus::NAMED
            .into_iter()
            .find(|s| s.name() == name)
            .unwrap_or_else(|| RunStatus::Other(name.to_string()))
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// ralph's directory, relative to the project root.
pub(crate) const RALPH_DIR: &str = ".ralph";

/// Where ralph keeps its runtime files under the project root: every path
/// under `.ralph/` is named here, nowhere else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub(crate) root: PathBuf,
    pub(crate) dir: PathBuf,
}

impl Layout {
    pub fn new(root: &Path) -> Layout {
        Layout {
            root: root.to_path_buf(),
            dir: root.join(RALPH_DIR),
        }
    }
    pub fn state(&self) -> PathBuf {
        self.dir.join("state.json")
    }
    pub fn events(&self) -> PathBuf {
        self.dir.join("events.jsonl")
    }
    /// The process groups of the hooks running now (`agent/shell.rs`).
    pub(crate) fn hook_groups(&self) -> PathBuf {
        self.dir.join("hook-groups.json")
    }
    pub(crate) fn lock(&self) -> PathBuf {
        self.dir.join("lock")
    }
    pub(crate) fn control(&self) -> PathBuf {
        self.dir.join("control.json")
    }
    pub(crate) fn handoffs(&self) -> PathBuf {
        self.dir.join("handoffs")
    }
    /// The agent's own notes (writable inside the box).
    pub(crate) fn notes(&self) -> PathBuf {
        self.dir.join("notes")
    }
    /// A fleet's records on this machine (`workers::fleet`).
    pub(crate) fn fleet(&self) -> PathBuf {
        self.dir.join("fleet")
    }
    /// The morning report.
    pub(crate) fn report(&self) -> PathBuf {
        self.dir.join("report.html")
    }
    /// The ledger of finished items, shared by every run in this repo.
    pub(crate) fn items(&self) -> PathBuf {
        self.dir.join("items.jsonl")
    }
    /// A worker's grant of sessions (`formats::grant`).
    pub(crate) fn grant(&self) -> PathBuf {
        self.dir.join("grant.json")
    }
    /// The models' context windows runs learnt (`formats::windows`).
    pub(crate) fn windows(&self) -> PathBuf {
        self.dir.join("windows.json")
    }
    /// Every run's transcripts, one directory each.
    pub(crate) fn runs(&self) -> PathBuf {
        self.dir.join("runs")
    }
    pub(crate) fn run_dir(&self, run_id: &str) -> PathBuf {
        self.runs().join(run_id)
    }
    pub fn transcript(&self, run_id: &str, iteration: u32) -> PathBuf {
        self.run_dir(run_id)
            .join(format!("iter-{iteration:03}.jsonl"))
    }

    /// Create `.ralph/` (user-only) with a `.gitignore` that keeps the
    /// runtime files out of git but lets handoffs be committed.
    pub fn ensure(&self) -> Result<()> {
        for dir in [&self.dir, &self.handoffs()] {
            create_dir_private(dir)?;
        }
        let ignore = self.dir.join(".gitignore");
        if !ignore.exists() {
            write_private(&ignore, GITIGNORE.as_bytes())?;
        }
        Ok(())
    }
}

pub const GITIGNORE: &str = "# ralph's runtime files (this one too: `git clean -fd` keeps it); handoffs and the decision log are committed.\n*\n!handoffs/\n!handoffs/**\n!decisions.md\n";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FileInProgress {
    pub path: String,
    pub lines: Option<String>,
    pub description: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContextCheckpoint {
    pub active: bool,
    pub level: Option<Level>,
    pub percent_at_checkpoint: f64,
    pub(crate) timestamp: Option<String>,
    pub handoff_file: Option<String>,
    pub(crate) resume_summary: Option<String>,
    pub files_in_progress: Vec<FileInProgress>,
    pub current_todo_item: Option<String>,
    pub progress_on_item: Option<String>,
    /// What set it off.
    pub(crate) trigger: Option<Trigger>,
    pub(crate) commit: Option<String>,
    /// Why there is no WIP commit, when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) commit_note: Option<String>,
    /// Stash entries the agent made during the iteration (`stash@{0} (…)`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) stashed: Vec<String>,
    /// Paths the WIP commit left out, still in the work tree.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) left_out: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HistoryEntry {
    pub iteration: u32,
    pub peak_percent: f64,
    pub checkpoint: bool,
    pub level: Option<Level>,
    pub handoff: Option<String>,
    pub peak_tokens: u64,
}

/// One finished iteration, as the loop's rules and `ralph status` see it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct IterationRecord {
    pub iteration: u32,
    pub started_at: String,
    pub ended_at: String,
    pub outcome: IterationOutcome,
    pub exit_code: Option<i32>,
    pub progress: bool,
    pub cost_usd: f64,
    pub error: Option<String>,
    pub error_hash: Option<String>,
    pub commit: Option<String>,
    // Left out when empty so that records and outputs without them read as
    // before (the same shape as the morning report's fields).
    /// The plan item the iteration worked on: the first open one at its start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<String>,
    /// Plan items the iteration checked off (seen live as the plan changed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub items_checked: Vec<String>,
    /// Plan items done and open when it ended.
    #[serde(skip_serializing_if = "is_zero")]
    pub items_done: usize,
    #[serde(skip_serializing_if = "is_zero")]
    pub items_open: usize,
    /// Context tokens `item` consumed in this iteration.
    #[serde(skip_serializing_if = "is_zero")]
    pub item_tokens: u64,
    /// The iteration split its item into sub-items.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub split: bool,
    /// The agent CLI's session id (`claude --resume ID` reopens it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// HEAD when it ended (its checkpoint's WIP commit included): the
    /// report's commits per iteration run between these.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// The work tree (a tree object id, committed or not) when it started
    /// and when it ended (or when a takeover found it after a kill): what
    /// it changed, for the report, whenever that work was committed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree_start: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree_end: Option<String>,
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunState {
    pub version: u32,
    pub run_id: String,
    pub task_name: String,
    /// The plan file the run works through, as `ralph.toml` or `ralph run
    /// PLAN` named it: another plan is another run.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub plan: String,
    pub objective: String,
    /// The number of the latest iteration started (0 before the first).
    pub iteration: u32,
    pub started_at: String,
    pub updated_at: String,
    pub status: RunStatus,
    pub exit_reason: Option<String>,
    pub no_change_count: u32,
    pub last_diff_hash: Option<String>,
    pub error_hashes: Vec<String>,
    pub max_iterations: u32,
    pub completion_promise: String,
    pub todo_items: Vec<String>,
    pub completed_items: Vec<String>,
    pub context_checkpoint: ContextCheckpoint,
    pub context_history: Vec<HistoryEntry>,
    pub context_window: u64,
    /// Context windows the agent's results reported, by model.
    pub known_windows: std::collections::BTreeMap<String, u64>,
    /// Context windows earlier runs learnt, by model, as this run found them
    /// at its start (`.ralph/windows.json`, `formats::windows`).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub remembered_windows: std::collections::BTreeMap<String, u64>,
    pub cost_usd: f64,
    /// The subscription's 5-hour and weekly usage the agent last reported
    /// (the quota guard, `rules::quota`).
    pub quota: crate::rules::quota::Usage,
    pub consecutive_failures: u32,
    pub breaker: BreakerState,
    pub history: Vec<IterationRecord>,
    pub last_commit: Option<String>,
    pub last_handoff: Option<String>,
    /// While waiting out a usage limit: until when (RFC 3339).
    pub waiting_until: Option<String>,
    pub supervisor_pid: Option<u32>,
    /// Per-item accounting: tokens, iterations, checkpoints, estimate.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<ItemAccount>,
    /// A split the next prompt asks for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard_request: Option<ShardRequest>,
    /// Uncommitted work on an unfinished item, told to the next prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub carry_over: Option<CarryOver>,
    /// The latest run of the `[verify]` commands; while it failed, the
    /// next prompt asks for the failure to be fixed first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<crate::formats::Verification>,
    /// Failed runs of the checks in a row (0 once one passes).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub verify_failures: u32,
    /// HEAD when the run started and when it ended: the morning report's
    /// "what changed overnight".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_commit: Option<String>,
    /// The work tree (a tree object id) when iteration `iteration` started;
    /// moved to its record when it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration_tree: Option<String>,
    /// When the run ended (RFC 3339); none while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// The checkpoints' WIP commits: how many had something to commit,
    /// how many were committed, why the last one that failed did.
    #[serde(default, skip_serializing_if = "CommitTally::is_empty")]
    pub commits: CommitTally,
}

/// The checkpoints' WIP commits of a run ("N of M checkpoints committed").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CommitTally {
    pub tried: u32,
    pub committed: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
    /// The iterations whose checkpoint's WIP commit failed and whose work
    /// no commit has taken since: retried at each iteration's end and the
    /// run's (a full disk that has room again, a lock gone).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<u32>,
    /// Of `committed`, those whose work a later commit took (a retry, the
    /// next checkpoint's).
    #[serde(skip_serializing_if = "is_zero")]
    pub late: u32,
}

impl CommitTally {
    fn is_empty(&self) -> bool {
        self.tried == 0
    }

    /// One checkpoint's commit: made (`Ok`), failed (why), or not called
    /// for (`None`: nothing to commit, `git.wip_commit` off).
    /// A commit of the work tree made (a WIP commit takes all of it, the
    /// failed checkpoint's work too), failed (why), or not called for
    /// (`None`: nothing to commit, `git.wip_commit` off).
    pub(crate) fn count(&mut self, iteration: u32, commit: Option<Result<(), &str>>) {
        match commit {
            Some(Ok(())) => {
                self.tried += 1;
                self.committed += 1;
                self.retried(true);
            }
            Some(Err(why)) => {
                self.tried += 1;
                self.last_failure = Some(why.to_string());
                self.pending.push(iteration);
            }
            None => {}
        }
    }

    /// A commit of the work tree after failed ones: made (their
    /// checkpoints are committed, late), or nothing left to commit (the
    /// agent committed the work itself: no checkpoint commit of ralph's).
    pub(crate) fn retried(&mut self, made: bool) {
        let late = u32::try_from(self.pending.len()).unwrap_or(u32::MAX);
        self.pending.clear();
        if made {
            self.committed += late;
            self.late += late;
        }
    }

    /// What the run's end says of them when some failed.
    pub(crate) fn shortfall(&self) -> Option<String> {
        let why = self.last_failure.as_deref().unwrap_or("unknown");
        if self.committed < self.tried {
            Some(format!(
                "{} of {} checkpoints committed (the last failure: {why})",
                self.committed, self.tried
            ))
        } else {
            (self.late > 0).then(|| {
                format!(
                    "{} of {} checkpoints committed, {} of them late: the run was degraded until its WIP commit could be made again (the last failure: {why})",
                    self.committed, self.tried, self.late
                )
            })
        }
    }
}

impl Default for RunState {
    fn default() -> Self {
        RunState {
            version: STATE_VERSION,
            run_id: String::new(),
            task_name: String::new(),
            plan: String::new(),
            objective: String::new(),
            iteration: 0,
            started_at: String::new(),
            updated_at: String::new(),
            status: RunStatus::New,
            exit_reason: None,
            no_change_count: 0,
            last_diff_hash: None,
            error_hashes: Vec::new(),
            max_iterations: 0,
            completion_promise: String::new(),
            todo_items: Vec::new(),
            completed_items: Vec::new(),
            context_checkpoint: ContextCheckpoint::default(),
            context_history: Vec::new(),
            context_window: 0,
            known_windows: Default::default(),
            remembered_windows: Default::default(),
            cost_usd: 0.0,
            quota: Default::default(),
            consecutive_failures: 0,
            breaker: BreakerState::default(),
            history: Vec::new(),
            last_commit: None,
            last_handoff: None,
            waiting_until: None,
            supervisor_pid: None,
            items: Vec::new(),
            shard_request: None,
            carry_over: None,
            verify: None,
            verify_failures: 0,
            start_commit: None,
            end_commit: None,
            iteration_tree: None,
            ended_at: None,
            commits: CommitTally::default(),
        }
    }
}

impl RunState {
    /// Read the state; `Ok(None)` when there is none yet.
    pub fn load(path: &Path) -> Result<Option<RunState>> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("cannot read", path, e)),
        };
        let state: RunState = serde_json::from_slice(&bytes).map_err(|e| {
            Error::usage(format!(
                "{} is not a valid ralph state file: {e}",
                path.display()
            ))
            .with_hint(
                "start a new run with `ralph run --fresh` (the old file is kept as state.json.bad)",
            )
        })?;
        if state.version > STATE_VERSION {
            return Err(Error::usage(format!(
                "{} was written by a newer ralph (state version {})",
                path.display(),
                state.version
            ))
            .with_hint("upgrade ralph, or start over with `ralph run --fresh`"));
        }
        Ok(Some(state))
    }

    /// Atomic write: temp file, fsync, rename. A crash at any moment, power
    /// loss included, leaves either the old or the new file.
    ///
    /// A state that says the run has ended is the one save that must not
    /// be lost: when a full disk (ENOSPC) has no room for the temp file, it is
    /// written over the old file in place (compact, padded with spaces),
    /// so that the final state is the truth, not "running".
    pub fn save(&mut self, path: &Path) -> Result<()> {
        self.updated_at = now_rfc3339();
        let json = serde_json::to_string_pretty(self)
            .map_err(|e| Error::wrap("cannot serialize the run state", e))?;
        // The state quotes the agent (last words, errors): no secrets in it.
        let atomic = write_atomic(path, crate::text::secrets::redact_json(&json).as_bytes());
        let ended = !matches!(
            self.status,
            RunStatus::New | RunStatus::Running | RunStatus::Waiting
        );
        let no_room = matches!(&atomic, Err(Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::StorageFull);
        if !(ended && no_room) {
            return atomic;
        }
        let json = serde_json::to_string(self)
            .map_err(|e| Error::wrap("cannot serialize the run state", e))?;
        let json = crate::text::secrets::redact_json(&json);
        if write_in_place(path, json.as_bytes()).is_ok() {
            return Ok(());
        }
        // Too long for the room the old file holds: the run's end written
        // into the last good state (its history stays as it was saved).
        let end = std::fs::read(path)
            .ok()
            .and_then(|old| serde_json::from_slice::<serde_json::Value>(&old).ok())
            .and_then(|old| self.end_over(old));
        match end {
            Some(text) => write_in_place(path, crate::text::secrets::redact_json(&text).as_bytes())
                .map_err(|_| atomic.unwrap_err()),
            None => atomic,
        }
    }

    /// `old`, a saved state, with this one's end: how and when the run
    /// ended, and nothing left running or waiting. Compact JSON.
    fn end_over(&self, mut old: serde_json::Value) -> Option<String> {
        const END: [&str; 7] = [
            "status",
            "exit_reason",
            "ended_at",
            "updated_at",
            "end_commit",
            "supervisor_pid",
            "waiting_until",
        ];
        let now = serde_json::to_value(self).ok()?;
        let fields = old.as_object_mut()?;
        for key in END {
            match now.get(key) {
                Some(value) => fields.insert(key.to_string(), value.clone()),
                None => fields.remove(key),
            };
        }
        serde_json::to_string(&old).ok()
    }

    pub(crate) fn is_finished(&self) -> bool {
        self.status == RunStatus::Completed
    }
}

/// Write `bytes` to `path` atomically: a new file user-only, an existing
/// one with the mode it had. The data is
/// on disk before the rename makes it the file, so a power loss leaves the
/// old or the new content, never a torn or empty file. The directory is not
/// synced (a second sync on every save): a power loss may undo the rename,
/// which again leaves the old file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    // A writer of this file killed before its rename left its temp file
    // (the plan's would stay in the user's project, PROMPT.md's would be
    // swept into a WIP commit).
    remove_dead_temp_files(dir, Some(name));
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        // A file that exists keeps its mode: the user's plan stays 0644.
        if let Ok(meta) = std::fs::metadata(path) {
            f.set_permissions(meta.permissions())?;
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e: std::io::Error| {
        let _ = std::fs::remove_file(&tmp);
        Error::io("cannot write", path, e)
    })
}

/// Overwrite `path` from its start without truncating it first (no block
/// is freed, so a full disk has room for as much as the old file held),
/// padding with spaces over what was longer (JSON ignores them). Only
/// what fits in the old file is written: a longer text would need blocks
/// a full disk does not have, and its write would stop part-way, leaving
/// the new text's start over the old one's end — neither state, and the
/// last good one destroyed. Then the old file stays as it is.
fn write_in_place(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let f = OpenOptions::new().write(true).open(path)?;
    let meta = f.metadata()?;
    if !fits_in_place(bytes.len() as u64, meta.len(), meta.blocks() * 512) {
        return Err(std::io::Error::from(std::io::ErrorKind::StorageFull));
    }
    overwrite_padded(&f, bytes.to_vec())?;
    f.sync_all()
}

/// A text of `new` bytes may be written over a file of `len` bytes that
/// holds `allocated` bytes of blocks on a full disk: it needs no block the
/// file does not hold already.
fn fits_in_place(new: u64, len: u64, allocated: u64) -> bool {
    new <= len.max(allocated)
}

/// One positioned write of `bytes` at the start of `f`, padded with spaces
/// over whatever was longer: never truncated first, so a reader always
/// finds a whole record, and no block is given back to a full disk.
pub(crate) fn overwrite_padded(f: &File, mut bytes: Vec<u8>) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let old = f.metadata()?.len() as usize;
    if bytes.len() < old {
        bytes.resize(old, b' ');
    }
    f.write_all_at(&bytes, 0)
}

/// Remove the temp files of [`write_atomic`] calls that a killed process
/// never finished (`.NAME.tmp-PID` with no process PID), of the file
/// `only` names or of any: litter that would otherwise stay for good.
pub(crate) fn remove_dead_temp_files(dir: &Path, only: Option<&str>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some((target, pid)) = name
            .to_str()
            .and_then(|n| n.strip_prefix('.')?.rsplit_once(".tmp-"))
            .and_then(|(target, pid)| Some((target, pid.parse::<u32>().ok()?)))
        else {
            continue;
        };
        if only.is_none_or(|o| o == target) && !crate::platform::exists(pid) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Create a directory and its missing parents, each user-only (0700).
pub(crate) fn create_dir_private(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io("cannot create", dir, e))
}

/// Create or replace a file readable by the user only.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("cannot write", path, e))?;
    f.write_all(bytes)
        .map_err(|e| Error::io("cannot write", path, e))
}

/// Whether `path` (relative to the project root) stays inside the project
/// and out of `.git/`: an absolute path or one climbing out with `..` is
/// neither.
pub(crate) fn inside_project(path: &Path) -> bool {
    use std::path::Component;
    let mut depth = 0usize;
    for part in path.components() {
        match part {
            Component::Normal(name) if depth == 0 && name == ".git" => return false,
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir if depth > 0 => depth -= 1,
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

pub(crate) fn now_rfc3339() -> String {
    jiff::Timestamp::now().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::{Lock, running_supervisor};

    #[test]
    fn prompt_file_stays_in_the_project() {
        for ok in ["PROMPT.md", "docs/p.md", "./a/../b.md"] {
            assert!(inside_project(Path::new(ok)), "{ok}");
        }
        for bad in [
            ".git/config",
            "./.git/x",
            "/etc/passwd",
            "../other/PROMPT.md",
            "a/../../x",
        ] {
            assert!(!inside_project(Path::new(bad)), "{bad}");
        }
    }

    type Commit<'a> = Option<Result<(), &'a str>>;

    #[test]
    fn checkpoints_committed_are_counted_and_a_shortfall_said() {
        let mut t = CommitTally::default();
        assert_eq!(t.shortfall(), None);
        // (the checkpoint's commit) → the tally said afterwards
        let steps: [(Commit, Option<&str>); 4] = [
            (Some(Ok(())), None),
            (None, None),
            (
                Some(Err("another git process holds .git/index.lock")),
                Some(
                    "1 of 2 checkpoints committed (the last failure: another git process holds .git/index.lock)",
                ),
            ),
            (
                Some(Err("HEAD is detached")),
                Some("1 of 3 checkpoints committed (the last failure: HEAD is detached)"),
            ),
        ];
        for (commit, said) in steps {
            t.count(1, commit);
            assert_eq!(t.shortfall().as_deref(), said);
        }
    }

    #[test]
    fn a_failed_commit_is_pending_until_a_commit_takes_its_work() {
        let mut t = CommitTally::default();
        t.count(2, Some(Err("no space left on device")));
        t.count(3, Some(Err("no space left on device")));
        assert_eq!(t.pending, [2, 3]);
        // One commit of the tree takes the work of both.
        t.retried(true);
        assert_eq!((t.pending.len(), t.committed, t.late), (0, 2, 2));
        assert_eq!(
            t.shortfall().as_deref(),
            Some(
                "2 of 2 checkpoints committed, 2 of them late: the run was degraded until its WIP commit could be made again (the last failure: no space left on device)"
            )
        );
        // So does the next checkpoint's own commit.
        t.count(4, Some(Err("full")));
        t.count(5, Some(Ok(())));
        assert_eq!((t.pending.len(), t.committed, t.late), (0, 4, 3));
        // Nothing left to commit (the agent committed it): not counted.
        let mut t = CommitTally::default();
        t.count(1, Some(Err("full")));
        t.retried(false);
        assert_eq!((t.pending.len(), t.committed), (0, 0));
        assert_eq!(
            t.shortfall().as_deref(),
            Some("0 of 1 checkpoints committed (the last failure: full)")
        );
    }

    #[test]
    fn the_in_place_fallback_writes_only_what_fits_over_the_old_file() {
        // (new length, old length, its blocks) → written in place
        for (new, len, blocks, fits) in [
            (10, 10, 0, true),
            (9, 10, 0, true),
            (0, 10, 0, true),
            (11, 10, 0, false),
            (4096, 10, 4096, true),
            (4097, 10, 4096, false),
        ] {
            assert_eq!(
                fits_in_place(new, len, blocks),
                fits,
                "{new} {len} {blocks}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, b"{\"iteration\":3}").unwrap();
        let held = {
            use std::os::unix::fs::MetadataExt;
            (std::fs::metadata(&path).unwrap().blocks() * 512).max(14) as usize
        };
        // Longer than the old file's blocks: refused, the last good file kept whole.
        let longer = format!("{{\"iteration\":4,\"x\":\"{}\"}}", "x".repeat(held));
        let err = write_in_place(&path, longer.as_bytes()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::StorageFull);
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"iteration\":3}");
        // Shorter: written, padded with spaces.
        write_in_place(&path, b"{}").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{}             ");
    }

    #[test]
    fn an_end_too_long_for_the_old_file_is_written_into_it() {
        let old = serde_json::json!({"iteration": 7, "status": "running", "history": [1, 2]});
        let ended = RunState {
            iteration: 8,
            status: RunStatus::IterationLimit,
            exit_reason: Some("iteration limit reached".into()),
            ..RunState::default()
        };
        let text = ended.end_over(old).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["status"], "iteration_limit");
        assert_eq!(v["exit_reason"], "iteration limit reached");
        // The rest is the last good state's.
        assert_eq!(
            (v["iteration"].clone(), v["history"].clone()),
            (7.into(), serde_json::json!([1, 2]))
        );
    }

    #[test]
    fn an_existing_file_keeps_its_mode_and_a_new_one_is_the_users_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (plan, new) = (dir.path().join("fix_plan.md"), dir.path().join("new.json"));
        std::fs::write(&plan, "- [ ] a\n").unwrap();
        std::fs::set_permissions(&plan, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_atomic(&plan, b"- [x] a\n").unwrap();
        write_atomic(&new, b"{}").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&plan), 0o644);
        assert_eq!(mode(&new), 0o600);
    }

    #[test]
    fn a_killed_writers_temporary_file_is_removed_by_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let plan = dir.path().join("fix_plan.md");
        // pid_max is at most 2^22: this pid is nobody's.
        let dead = dir.path().join(".fix_plan.md.tmp-4194305");
        std::fs::write(&dead, "half").unwrap();
        let other = dir.path().join(".notes.md.tmp-4194305");
        std::fs::write(&other, "someone else's").unwrap();
        write_atomic(&plan, b"- [x] a\n").unwrap();
        assert!(!dead.exists());
        assert!(other.exists(), "another file's is not touched");
        assert_eq!(std::fs::read(&plan).unwrap(), b"- [x] a\n");
    }

    #[test]
    fn statuses_and_triggers_are_written_as_their_names() {
        for status in RunStatus::NAMED {
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(json, format!("\"{status}\""));
            assert_eq!(serde_json::from_str::<RunStatus>(&json).unwrap(), status);
            assert_eq!(RunStatus::from(status.name()), status);
        }
        // A word this version does not know is kept as it was written.
        let other: RunStatus = serde_json::from_str("\"paused\"").unwrap();
        assert_eq!(other, RunStatus::Other("paused".into()));
        assert_eq!(serde_json::to_string(&other).unwrap(), "\"paused\"");
        let triggers = [
            (Trigger::Context, "context"),
            (Trigger::Manual, "manual"),
            (Trigger::Timeout, "timeout"),
            (Trigger::Budget, "budget"),
            (Trigger::Signal, "signal"),
            (Trigger::Stop, "stop"),
            (Trigger::RateLimit, "rate_limit"),
            (Trigger::Crash, "crash"),
        ];
        for (trigger, name) in triggers {
            assert_eq!(
                serde_json::to_string(&trigger).unwrap(),
                format!("\"{name}\"")
            );
            assert_eq!(trigger.to_string(), name);
        }
    }

    #[test]
    fn state_round_trips_with_design_field_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let mut s = RunState {
            run_id: "r1".into(),
            iteration: 3,
            ..RunState::default()
        };
        s.context_history.push(HistoryEntry {
            iteration: 1,
            peak_percent: 87.5,
            checkpoint: true,
            ..HistoryEntry::default()
        });
        s.save(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        for key in [
            "task_name",
            "objective",
            "iteration",
            "started_at",
            "status",
            "no_change_count",
            "last_diff_hash",
            "error_hashes",
            "max_iterations",
            "completion_promise",
            "todo_items",
            "completed_items",
            "context_checkpoint",
            "percent_at_checkpoint",
            "files_in_progress",
            "current_todo_item",
            "progress_on_item",
            "resume_summary",
            "handoff_file",
            "context_history",
            "peak_percent",
            "version",
            "run_id",
            "context_window",
        ] {
            assert!(text.contains(&format!("\"{key}\"")), "missing {key}");
        }
        let back = RunState::load(&path).unwrap().unwrap();
        assert_eq!(back, s);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn corrupt_or_future_state_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, "{\"version\": 1, \"iteration\": ").unwrap();
        let e = RunState::load(&path).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.hint().unwrap().contains("--fresh"));
        std::fs::write(&path, "{\"version\": 99}").unwrap();
        assert!(
            RunState::load(&path)
                .unwrap_err()
                .to_string()
                .contains("newer")
        );
        assert!(RunState::load(&dir.path().join("none")).unwrap().is_none());
    }

    #[test]
    fn dead_writers_temp_files_are_removed_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dir.path().join(".state.json.tmp-999999999");
        let live = dir
            .path()
            .join(format!(".control.json.tmp-{}", std::process::id()));
        let other = dir.path().join("notes.tmp-1");
        for f in [&dead, &live, &other] {
            std::fs::write(f, "{").unwrap();
        }
        remove_dead_temp_files(dir.path(), None);
        assert!(!dead.exists());
        assert!(live.exists() && other.exists());
    }

    #[test]
    fn lock_is_exclusive_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        layout.ensure().unwrap();
        let mut a = Lock::acquire(&layout, "run-a").unwrap();
        a.set_agent(Some(4242)).unwrap();
        a.set_committing(true).unwrap();
        assert_eq!(running_supervisor(&layout).unwrap().run_id, "run-a");
        let e = Lock::acquire(&layout, "run-b").err().unwrap();
        assert!(matches!(e, Error::Locked { pid } if pid == std::process::id() as i32));
        drop(a);
        assert!(running_supervisor(&layout).is_none());
        let b = Lock::acquire(&layout, "run-b").unwrap();
        assert_eq!(
            b.stale_agent_pgid,
            Some(4242),
            "the dead holder's agent is reported"
        );
        assert!(b.stale_committing, "and that it died in a checkpoint");
    }

    #[test]
    fn a_deleted_lock_is_taken_again_and_a_replaced_one_held_elsewhere_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        layout.ensure().unwrap();
        let mut a = Lock::acquire(&layout, "run-a").unwrap();
        assert!(!a.revalidate(&layout).unwrap(), "nothing to do");
        // `git clean -fdx`: the whole directory goes.
        std::fs::remove_dir_all(&layout.dir).unwrap();
        assert!(running_supervisor(&layout).is_none());
        assert!(a.revalidate(&layout).unwrap(), "re-created");
        assert_eq!(running_supervisor(&layout).unwrap().run_id, "run-a");
        assert!(layout.dir.join(".gitignore").exists());
        // Deleted again, and a second supervisor locks a new file first.
        std::fs::remove_file(layout.lock()).unwrap();
        let _b = Lock::acquire(&layout, "run-b").unwrap();
        let e = a.revalidate(&layout).err().unwrap();
        assert!(matches!(e, Error::Locked { .. }), "{e}");
    }
}
