//! `.ralph/workers.json`: the coordinator's record of a parallel run — who
//! works on what, in which worktree and branch, what was merged — written
//! atomically after every change, so that a coordinator taking over after
//! kill -9 knows every worker branch and merges nothing twice; what a merge
//! did (`Merged`, also the `merged` event's outcome); which workers' records
//! were taken in already (`Heard`). The coordinator that writes it is
//! `workers`; a parallel run's state for its report is `report::runs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Event, Layout, Record, read_log};
use crate::error::{Error, Result};

/// What merging a worker branch did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
// `AlreadyMerged` is the wire's `already_merged`.
#[allow(clippy::enum_variant_names)]
pub enum Merged {
    /// The worker branch's commits were already on the run branch.
    AlreadyMerged,
    /// The run branch moved forward to the worker branch's tip.
    FastForward { from: String, to: String },
    /// A merge commit (first parent: the run branch's old tip).
    MergeCommit { from: String, id: String },
    /// Both changed the same lines: nothing written, the worker branch kept.
    Conflict { files: Vec<String> },
    /// The merge was clean but the run branch's work tree has changes of
    /// the user's in the way: nothing written.
    Blocked { reason: String },
}

/// What a worker was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Task {
    /// Do the unit.
    Item,
    /// Merge the run branch into its branch and resolve the conflict.
    Update,
}

impl Task {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Task::Item => "item",
            Task::Update => "update",
        }
    }
}

/// Where an assignment is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "why")]
pub(crate) enum Status {
    /// Its worker's loop runs (or ran, when the coordinator died).
    Running,
    /// Stopped before it finished (a budget, `ralph stop`, a usage limit
    /// elsewhere): the next `ralph run --workers` resumes it in its worktree.
    Paused,
    /// Left to a person, its branch and worktree kept: a conflict still
    /// unresolved, a worker that failed.
    Left(String),
}

/// One unit given to a worker, until its branch is merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Assignment {
    pub(crate) worker: String,
    /// The unit's key (`plan::units::Unit::key`).
    pub(crate) item: String,
    pub(crate) branch: String,
    /// The worktree's top directory.
    pub(crate) worktree: PathBuf,
    /// The git worktree's name (`git worktree list`).
    pub(crate) worktree_name: String,
    /// The project's directory inside the worktree (where the worker runs).
    pub(crate) project_dir: PathBuf,
    pub(crate) task: Task,
    /// Merges tried so far.
    pub(crate) attempts: u32,
    /// Times its loop was started again after it died (kill -9, a crash;
    /// not an interrupt it ended on).
    #[serde(default)]
    pub(crate) restarts: u32,
    #[serde(flatten)]
    pub(crate) status: Status,
    /// The files of the last conflict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) conflict: Vec<String>,
    /// The run branch's tip the branch was made from: a branch still there
    /// has no work of its own.
    #[serde(default)]
    pub(crate) base: String,
    /// Its worktree was made whole (false from its record until then: a
    /// coordinator killed in the middle of the checkout leaves a partial
    /// one, which the next makes again). Older ledgers: true.
    #[serde(default = "made")]
    pub(crate) prepared: bool,
}

fn made() -> bool {
    true
}

/// One entry of the merge queue's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MergeRecord {
    pub(crate) ts: String,
    pub(crate) worker: String,
    pub(crate) item: String,
    pub(crate) branch: String,
    pub(crate) attempt: u32,
    #[serde(flatten)]
    pub(crate) merged: Merged,
    pub(crate) backup: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Ledger {
    pub(crate) run_id: String,
    /// The branch the coordinator merges into (checked out where it runs).
    pub(crate) run_branch: String,
    pub(crate) plan: String,
    pub(crate) started_at: String,
    /// Set when the run ended; a new `ralph run --workers` starts afresh.
    #[serde(default)]
    pub(crate) ended: Option<String>,
    /// How the last coordinator ended (`completed`, `stopped`, …).
    #[serde(default)]
    pub(crate) outcome: Option<String>,
    pub(crate) workers: u32,
    pub(crate) assignments: Vec<Assignment>,
    /// Units merged in this run, in merge order.
    pub(crate) merged: Vec<String>,
    pub(crate) merges: Vec<MergeRecord>,
    /// Shared budgets, counted over every worker.
    pub(crate) iterations: u32,
    pub(crate) cost_usd: f64,
    /// Per worker, the last record of its loops taken in (counted and
    /// written to the run's log). A worker's loop writes every record to
    /// its own log too, so what no coordinator heard (its loop went on
    /// while none listened, after kill -9) is read on from there, and
    /// nothing is counted twice. A worker absent here (an older ledger,
    /// whose `heard` held times only) is not read back.
    #[serde(default)]
    pub(crate) last_heard: Heard,
    /// The run branch's tip when the run started (after the user's own
    /// changes were committed): where the morning report's "what changed"
    /// begins.
    #[serde(default)]
    pub(crate) start_commit: Option<String>,
    /// ralph's own commits in this run, for the morning report to tell
    /// them from the agents': the coordinator's (merge commits, plan
    /// check-offs, a worker's leftovers) and the workers' loops' (WIP
    /// commits, final commits at completion, from their states).
    #[serde(default)]
    pub(crate) commits: Vec<String>,
}

impl Ledger {
    /// The assignments whose branch is still there: work not merged yet.
    /// A branch the user deleted (its worktree removed first) is work they
    /// chose to throw away, and holds nothing back.
    pub(crate) fn unmerged(&self, git: &git2::Repository) -> Vec<&Assignment> {
        (self.assignments.iter())
            .filter(|a| git.find_branch(&a.branch, git2::BranchType::Local).is_ok())
            .collect()
    }

    /// What `worker`'s loops wrote to their own logs after the last record
    /// a coordinator took in (`last_heard`): nothing for a worker of an older
    /// ledger, where it had got is unknown. Untagged, as the loop wrote them.
    pub(crate) fn unheard_of(&self, worker: &str) -> Vec<Record> {
        if !self.last_heard.knows(worker) {
            return Vec::new();
        }
        let at = |ts: &str| ts.parse::<jiff::Timestamp>().ok();
        let mut dirs: Vec<&Path> = (self.assignments.iter())
            .filter(|a| a.worker == worker)
            .map(|a| a.project_dir.as_path())
            .collect();
        dirs.dedup();
        let mut records: Vec<Record> = dirs
            .into_iter()
            .flat_map(|dir| read_log(&Layout::new(dir).events()))
            .filter(|r| self.last_heard.is_new(worker, r))
            .collect();
        records.sort_by_key(|r| at(&r.ts));
        records
    }

    /// Every worker's [`Ledger::unheard_of`], tagged with the worker: what
    /// the run's log lacks until a coordinator takes it in (`ralph status`
    /// and the report count it meanwhile).
    pub(crate) fn unheard(&self) -> Vec<Record> {
        let workers: std::collections::BTreeSet<&str> =
            self.assignments.iter().map(|a| a.worker.as_str()).collect();
        workers
            .into_iter()
            .flat_map(|w| {
                self.unheard_of(w).into_iter().map(move |mut r| {
                    r.worker = Some(w.to_string());
                    r
                })
            })
            .collect()
    }

    /// `id` among ralph's own commits (once).
    pub(crate) fn made(&mut self, id: impl Into<String>) {
        let id = id.into();
        if !self.commits.contains(&id) {
            self.commits.push(id);
        }
    }
}

impl Ledger {
    pub(crate) fn path(ralph_dir: &Path) -> PathBuf {
        ralph_dir.join("workers.json")
    }

    pub(crate) fn load(ralph_dir: &Path) -> Result<Option<Ledger>> {
        let path = Ledger::path(ralph_dir);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| Error::wrap(format!("cannot read {}", path.display()), e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("cannot read", &path, e)),
        }
    }

    pub(crate) fn save(&self, ralph_dir: &Path) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::wrap("cannot write the workers' ledger", e))?;
        crate::formats::write_atomic(&Ledger::path(ralph_dir), &bytes)
    }
}

/// Per worker, the last of its loops' records taken in: its time and the
/// record itself. A worker's records come in the order they happened (one
/// loop at a time, each writing in order), so a record earlier than that
/// one, or that one again, was taken in already: read back from the
/// worker's own log, or written twice by a coordinator killed between
/// writing it and saving this. The one rule for the coordinator (kept in
/// the ledger) and the report (over the run's log).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Heard(BTreeMap<String, Last>);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Last {
    ts: jiff::Timestamp,
    /// None: a mark, no record (where a new assignment's records begin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    event: Option<Event>,
}

impl Heard {
    /// Whether `worker`'s record `r` is new (then it is the last).
    pub(crate) fn take(&mut self, worker: &str, r: &Record) -> bool {
        if !self.is_new(worker, r) {
            return false;
        }
        if let Ok(ts) = r.ts.parse() {
            let last = Last {
                ts,
                event: Some(r.event.clone()),
            };
            self.0.insert(worker.to_string(), last);
        }
        true
    }

    /// [`Heard::take`] for a record of the run's log, tagged with its
    /// worker (the coordinator's own records are always new).
    pub(crate) fn first(&mut self, r: &Record) -> bool {
        match &r.worker {
            Some(w) => self.take(w, r),
            None => true,
        }
    }

    /// Whether `worker`'s record `r` comes after the last one taken in.
    pub(crate) fn is_new(&self, worker: &str, r: &Record) -> bool {
        let (Some(last), Ok(ts)) = (self.0.get(worker), r.ts.parse::<jiff::Timestamp>()) else {
            return true;
        };
        ts > last.ts || (ts == last.ts && last.event.as_ref() != Some(&r.event))
    }

    /// Whether anything of `worker` was taken in (an older ledger's
    /// workers are unknown: where they had got, nobody knows).
    pub(crate) fn knows(&self, worker: &str) -> bool {
        self.0.contains_key(worker)
    }

    /// `worker`'s records count from now on (a new assignment: anything
    /// older in a reused worktree was taken in before).
    pub(crate) fn start(&mut self, worker: &str) {
        (self.0.entry(worker.to_string())).or_insert_with(|| Last {
            ts: jiff::Timestamp::now(),
            event: None,
        });
    }
}

/// The ledger of the parallel run `run_id` (none for a single loop): the
/// project's while it is that run's, else the copy the run kept beside its
/// report (`.ralph/runs/<id>/workers.json`).
pub(crate) fn ledger_of(ralph_dir: &Path, run_id: &str) -> Option<Ledger> {
    [ralph_dir.to_path_buf(), ralph_dir.join("runs").join(run_id)]
        .iter()
        .find_map(|dir| {
            Ledger::load(dir)
                .ok()
                .flatten()
                .filter(|l| l.run_id == run_id)
        })
}
