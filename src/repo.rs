//! The project's git repository, through git2 only (never the `git` CLI):
//! opening it, its branch and HEAD, ralph's own paths, what the agent
//! changed, progress snapshots, WIP commits at checkpoints and the safety
//! net's hidden snapshot refs.
//!
//! ```text
//! repo.rs            this map
//! repo/
//!   repository.rs    Repo (open; hold: one opened repository per run, shared by its steps;
//!                    branch, HEAD), OwnPaths/Own (what a commit leaves out),
//!                    LeftOut, index entries `git add -A` leaves alone, shared path helpers
//!   stat.rs          changes, diff_stat
//!   history.rs       commits and the diffstat between two commits (the morning report)
//!   snapshot.rs      snapshots for progress, made_progress
//!   commit.rs        the WIP commit and its staging rules (what is staged, what is left out);
//!                    Undo: a snapshot's staging put back in the index in memory
//!   guard.rs         the [git] Guard: the rules that keep work out of a WIP commit
//!   health.rs        commit_blockers: split/sparse index, detached HEAD, a stale index.lock, an unwritable .git (doctor, the run's start, WIP commit)
//!   worktree.rs      the workers' worktrees and branches: made, listed with what is not merged, removed once merged; a worktree's HEAD brought home
//!   stash.rs         stash entries, those made since an iteration began
//!   outputs.rs       the files ralph's own stdout/stderr write to
//!   scope.rs         a run's scope: the key of its work tree and project, the claim that
//!                    refuses an overlapping run, the work tree's commit lock
//!   safety_net.rs    work-tree snapshots on refs/ralph/snapshots/<scope>/<run>/<iteration>
//!   restore.rs       a snapshot written back (every path checked first) or onto a new branch
//!   walk.rs          one pass over the work tree per event (OnePass), the pass counter
//!   trees.rs         diff_trees: the diff of two trees, reading only the subtrees that differ
//! ```
//!
//! Pitfalls: never touch HEAD, the index or the stash outside a WIP commit;
//! every path from git is bytes relative to the work tree, and the project
//! root may be a subdirectory of it.

mod commit;
mod guard;
mod health;
mod history;
mod outputs;
mod repository;
mod restore;
mod safety_net;
mod scope;
mod snapshot;
mod stash;
mod stat;
mod trees;
mod walk;
pub(crate) mod worktree;

pub use commit::CommitOutcome;
pub(crate) use commit::{identities, remove_stale_commit_locks};
pub use guard::Guard;
pub(crate) use health::Blocker;
pub(crate) use history::{CommitLine, DiffStat};
pub(crate) use outputs::{output_files, remember_output_files};
pub use repository::*;
pub(crate) use restore::Restored;
pub(crate) use safety_net::{SNAPSHOT_REFS, SnapshotInfo, SnapshotOutcome};
pub(crate) use scope::ScopeClaim;
pub use snapshot::snapshot;
pub(crate) use snapshot::{Snapshot, made_progress};
pub(crate) use stash::{StashEntry, stash_ids};
pub(crate) use stat::display_path;
pub(crate) use trees::diff_trees;
pub(crate) use walk::touched;
pub use walk::{OnePass, one_pass, one_pass_to_commit, work_tree_passes};
