//! The safety net during a run: the driver's side of
//! [`Effect::Snapshot`](super::iteration::Effect) (the work tree recorded on
//! `refs/ralph/snapshots/<run>/<iteration>` through
//! [`Repo::record_snapshot`]), the pruning of old runs' refs at the
//! start, and the work tree at each iteration's boundaries (what the
//! report says an iteration changed, committed or not).

use std::path::Path;

use super::Supervisor;
use crate::formats::Event;
pub(super) use crate::formats::SnapshotReason;
use crate::repo::{Guard, OwnPaths, Repo, SnapshotOutcome};

/// Takes one iteration's snapshots.
pub(super) struct SafetyNet {
    /// `None` outside a git repository: nothing to record into.
    repo: Option<Repo>,
    run: String,
    iteration: u32,
    own: OwnPaths,
    /// The WIP commit's limits, which snapshots keep too.
    guard: Guard,
    /// A failure is reported once per iteration, not at every interval.
    warned: bool,
}

impl Supervisor {
    /// The safety net of iteration `number` of this run.
    pub(super) fn safety_net(&self, number: u32) -> SafetyNet {
        SafetyNet {
            repo: Repo::open(&self.root).ok().flatten(),
            run: self.state.run_id.clone(),
            iteration: number,
            own: self.own(),
            guard: self.snapshot_guard(),
            warned: false,
        }
    }

    /// The size and count limits bound what snapshots store; a small
    /// binary the agent made is work to get back (the WIP commit leaves it
    /// out of the branch's history, not out of reach).
    fn snapshot_guard(&self) -> Guard {
        Guard {
            commit_binaries: true,
            ..self.config.git.guard()
        }
    }

    /// The work tree as a tree object, as a snapshot takes it (`None`
    /// outside git).
    pub(super) fn work_tree(&self) -> Option<String> {
        let repo = Repo::open(&self.root).ok().flatten()?;
        repo.work_tree_id(&self.own(), &self.snapshot_guard())
    }

    /// The iteration that just reached the history: HEAD and the work tree
    /// at its end, and the work tree at its start (recorded when it
    /// started, so that a takeover after a kill still has it). `unchanged`:
    /// the progress snapshots say the tree is as it started, so its start
    /// is its end (no tree to write: an idle iteration costs nothing more).
    pub(super) fn record_boundary(&mut self, unchanged: bool) {
        let head = self.head();
        let start = self.state.iteration_tree.take();
        let tree = match &start {
            Some(start) if unchanged => Some(start.clone()),
            _ => self.work_tree(),
        };
        self.reuse_tree.clone_from(&tree);
        if let Some(record) = self.state.history.last_mut() {
            record.head = head;
            record.tree_start = start;
            record.tree_end = tree;
        }
    }
}

impl SafetyNet {
    /// Record the work tree; the event to emit, if any (none when the tree
    /// is the same as the last snapshot's).
    pub(super) fn record(&mut self, reason: SnapshotReason) -> Option<Event> {
        let repo = self.repo.as_ref()?;
        match repo.record_snapshot(&self.run, self.iteration, &self.own, &self.guard) {
            Ok(SnapshotOutcome::Written { commit, reference }) => Some(Event::Snapshot {
                iteration: self.iteration,
                reason,
                commit,
                reference,
            }),
            Ok(SnapshotOutcome::Unchanged) => None,
            Err(e) if !self.warned => {
                self.warned = true;
                Some(Event::Warning {
                    message: format!(
                        "iteration {}: {}",
                        self.iteration,
                        e.render().trim_end().replace('\n', "; ")
                    ),
                })
            }
            Err(_) => None,
        }
    }
}

/// At the start of a run: delete the snapshot refs of all but the newest
/// `keep_runs` runs (this one always kept).
pub(super) fn prune(root: &Path, keep_runs: usize, current: &str) {
    if let Ok(Some(repo)) = Repo::open(root) {
        let removed = repo.prune_snapshots(keep_runs, current);
        if !removed.is_empty() {
            tracing::info!("pruned the snapshots of old runs: {}", removed.join(", "));
        }
    }
}
