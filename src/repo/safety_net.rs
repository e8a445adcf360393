//! ralph's own safety net: snapshots of the project's files as commit
//! objects on hidden refs (`refs/ralph/snapshots/<scope>/<run>/<iteration>`,
//! the scope being the work tree and project, `repo/scope.rs`), and what
//! `ralph recover` lists and restores from them. A work tree lists, prunes
//! and restores only its own project's snapshots; refs written before scopes
//! existed (`refs/ralph/snapshots/<run>/<iteration>`) count as the main
//! work tree's top-level project's.
//!
//! A snapshot is taken with the WIP commit's rules (tracked and untracked
//! files, no ignored files, no ralph runtime files; no new file that is
//! over `git.max_file_size`, binary or one too many, see `guard`) into the
//! repository's index in memory, every entry it changed put back after
//! (`commit::Undo`; the file read again when that cannot be: a conflict, an
//! entry libgit2 dropped unasked), so HEAD, the index file, the branch and
//! the stash are never touched, and no second copy of the index (~20 MB
//! and a read of the whole file on 100,000 files) is made. A changed tracked file over `git.max_file_size` keeps
//! its indexed version in a snapshot: an agent rewriting a generated 1 GB
//! file every second must not fill the disk with its versions (the WIP
//! commit at the checkpoint still takes it, once). The snapshots of one iteration form a chain (each names the one
//! before it), so a later snapshot of a tree the agent wiped does not hide
//! an earlier one that still had the work.

use std::fs;

use git2::{Oid, Signature};
use serde::Serialize;

use super::commit::{Staging, Undo};
use super::{Guard, OwnPaths, Repo, bytes_to_path};
use crate::{Error, Result};

/// Where the snapshot refs live; outside `refs/heads` and `refs/tags`, so no
/// branch list, `git log --all` aside, shows them.
pub(crate) const SNAPSHOT_REFS: &str = "refs/ralph/snapshots/";
pub(super) const BASE: &str = "Ralph-Base: ";
const PREVIOUS: &str = "Ralph-Previous: ";
const WORK_TREE: &str = "Ralph-Work-Tree: ";
const PROJECT: &str = "Ralph-Project: ";

/// What [`Repo::record_snapshot`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SnapshotOutcome {
    Written {
        commit: String,
        reference: String,
    },
    /// The tree is the same as the previous snapshot's (or HEAD's, before
    /// the first): nothing new to keep.
    Unchanged,
}

/// One snapshot as `ralph recover --json` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct SnapshotInfo {
    /// The short commit id: what `ralph recover ID` takes.
    pub(crate) id: String,
    pub(crate) commit: String,
    #[serde(rename = "ref")]
    pub(crate) reference: String,
    pub(crate) run: String,
    pub(crate) iteration: u32,
    /// When it was taken, RFC 3339.
    pub(crate) time: String,
    /// Files that differ from the current HEAD.
    pub(crate) files_changed: usize,
}

impl Repo {
    /// Record the work tree as the newest snapshot of `run`'s `iteration`.
    pub(crate) fn record_snapshot(
        &self,
        run: &str,
        iteration: u32,
        own: &OwnPaths,
        guard: &Guard,
    ) -> Result<SnapshotOutcome> {
        self.try_record(run, iteration, own, guard)
            .map_err(|e| Error::wrap("cannot record a snapshot of the work tree", e))
    }

    fn try_record(
        &self,
        run: &str,
        iteration: u32,
        own: &OwnPaths,
        guard: &Guard,
    ) -> std::result::Result<SnapshotOutcome, git2::Error> {
        let reference = format!("{SNAPSHOT_REFS}{}/{run}/{iteration}", self.scope_key());
        let previous = self.git.refname_to_id(&reference).ok();
        let tree_id = self.work_tree_as_tree(own, guard)?;
        let base = self.head_oid();
        let compare_with = match previous {
            Some(id) => Some(self.git.find_commit(id)?.tree_id()),
            None => self.head_tree()?.map(|t| t.id()),
        };
        if compare_with == Some(tree_id) {
            return Ok(SnapshotOutcome::Unchanged);
        }
        let tree = self.git.find_tree(tree_id)?;
        let parents = [base, previous]
            .into_iter()
            .flatten()
            .map(|id| self.git.find_commit(id))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let show = |id: Option<Oid>| id.map_or_else(|| "none".to_string(), |id| id.to_string());
        let message = format!(
            "ralph snapshot: run {run}, iteration {iteration}\n\n{BASE}{}\n{PREVIOUS}{}\n{WORK_TREE}{}\n{PROJECT}{}\n",
            show(base),
            show(previous),
            self.workdir().display(),
            self.project_label(),
        );
        let who = Signature::now("ralph", "ralph@localhost")?;
        let parents: Vec<_> = parents.iter().collect();
        let commit = self
            .git
            .commit(None, &who, &who, &message, &tree, &parents)?;
        self.git
            .reference(&reference, commit, true, "ralph: snapshot")?;
        Ok(SnapshotOutcome::Written {
            commit: commit.to_string(),
            reference,
        })
    }

    /// The work tree as a tree object, staged as a WIP commit would stage
    /// it, into the repository's index in memory and put back as it was
    /// ([`Undo`]): the index file is only read, and no second copy of the
    /// index is read or held (on 100,000 files each is ~20 MB and a read
    /// of the whole file).
    pub(super) fn work_tree_as_tree(
        &self,
        own: &OwnPaths,
        guard: &Guard,
    ) -> std::result::Result<Oid, git2::Error> {
        // One walk for the limits, the frozen files and the staging.
        let _pass = super::one_pass(&self.root);
        let left_out = self
            .left_out(own, guard)
            .map_err(|e| git2::Error::from_str(&e.to_string()))?;
        let frozen = self.big_changed_files(own, guard.max_file_size)?;
        let mut index = self.git.index()?;
        // As on disk now (the agent's git may have rewritten it).
        index.read(false)?;
        let mut own = self.own(own);
        own.leave_out(&left_out);
        own.frozen = frozen;
        own.max_new_size = guard.max_file_size;
        let mut undo = Undo::new(&index);
        let tree = self
            .stage_work_tree(&mut index, &own, Staging::Tree(&mut undo))
            .and_then(|_| {
                if own.scope.is_empty() {
                    index.write_tree()
                } else {
                    self.scoped_tree(&index, self.head_tree()?.as_ref(), &own.scope)
                }
            });
        undo.apply(&mut index)?;
        tree
    }

    /// Tracked files changed in the work tree that are over `max` bytes
    /// (none when `max` is 0, no limit).
    fn big_changed_files(
        &self,
        own: &OwnPaths,
        max: u64,
    ) -> std::result::Result<Vec<Vec<u8>>, git2::Error> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let own = self.own(own);
        let workdir = self.workdir();
        let statuses = self.statuses(&mut super::status_options(false))?;
        Ok(statuses
            .iter()
            .filter(|e| {
                e.status()
                    .intersects(git2::Status::WT_MODIFIED | git2::Status::WT_TYPECHANGE)
            })
            .map(|e| e.path_bytes().to_vec())
            .filter(|p| !own.contains(p))
            .filter(|p| {
                fs::symlink_metadata(workdir.join(bytes_to_path(p))).is_ok_and(|m| m.len() > max)
            })
            .collect())
    }

    /// Whether a snapshot ref is this work tree's project's.
    fn is_own(&self, parsed: &ParsedRef) -> bool {
        match &parsed.scope {
            Some(scope) => *scope == self.scope_key(),
            // Written before scopes: only the main work tree's top-level
            // project could have written them correctly.
            None => self.prefix.is_empty() && self.git.path() == self.git.commondir(),
        }
    }

    /// This work tree's project's snapshots, newest first.
    pub(crate) fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        self.try_snapshots(true)
            .map_err(|e| Error::wrap("cannot list ralph's snapshots", e))
    }

    fn try_snapshots(&self, own_only: bool) -> std::result::Result<Vec<SnapshotInfo>, git2::Error> {
        let head_tree = self.head_tree()?;
        let mut out = Vec::new();
        for reference in self.git.references_glob(&format!("{SNAPSHOT_REFS}*"))? {
            let reference = reference?;
            let Some(name) = reference.name() else {
                continue;
            };
            let Some(parsed) = parse_ref(name) else {
                continue;
            };
            if own_only && !self.is_own(&parsed) {
                continue;
            }
            let ParsedRef { run, iteration, .. } = parsed;
            let mut next = reference.target();
            while let Some(id) = next {
                let commit = self.git.find_commit(id)?;
                let files_changed =
                    super::diff_trees(&self.git, head_tree.as_ref(), Some(&commit.tree()?), None)?
                        .deltas()
                        .len();
                out.push(SnapshotInfo {
                    id: short(id),
                    commit: id.to_string(),
                    reference: name.to_string(),
                    run: run.clone(),
                    iteration,
                    time: jiff::Timestamp::from_second(commit.time().seconds())
                        .map(|t| t.to_string())
                        .unwrap_or_default(),
                    files_changed,
                });
                next = trailer(&commit, PREVIOUS);
            }
        }
        // Newest first (by time, then run and iteration); the stable sort keeps
        // a chain's own newest-first order within one second.
        out.sort_by(|a, b| (&b.time, &b.run, b.iteration).cmp(&(&a.time, &a.run, a.iteration)));
        Ok(out)
    }

    /// Delete the snapshot refs of all but the newest `keep_runs` runs of
    /// this work tree's project (run ids sort by time), `current` counted and
    /// always kept; other work trees' and projects' are not counted nor
    /// touched. Returns the runs removed.
    pub(crate) fn prune_snapshots(&self, keep_runs: usize, current: &str) -> Vec<String> {
        let Ok(refs) = self.git.references_glob(&format!("{SNAPSHOT_REFS}*")) else {
            return Vec::new();
        };
        let mut by_run: Vec<(String, String)> = refs
            .flatten()
            .filter_map(|r| {
                let name = r.name()?.to_string();
                let parsed = parse_ref(&name).filter(|p| self.is_own(p))?;
                Some((parsed.run, name))
            })
            .collect();
        let mut runs: Vec<String> = by_run
            .iter()
            .map(|(run, _)| run.clone())
            .filter(|run| run != current)
            .collect();
        runs.sort_unstable_by(|a, b| b.cmp(a));
        runs.dedup();
        let old: Vec<String> = runs.into_iter().skip(keep_runs.saturating_sub(1)).collect();
        by_run.retain(|(run, _)| old.contains(run));
        for (_, name) in by_run {
            if let Ok(mut r) = self.git.find_reference(&name) {
                let _ = r.delete();
            }
        }
        old
    }

    /// Find one of this project's snapshots by short or full commit id, by
    /// ref name, or by `<run>/<iteration>` (the newest of that iteration).
    /// Another work tree's or project's snapshot is refused, naming where it
    /// belongs.
    pub(crate) fn find_snapshot(&self, spec: &str) -> Result<SnapshotInfo> {
        let own = self.snapshots()?;
        match self.find_in(&own, spec) {
            Some(found) => Ok(found),
            None => {
                let all = self
                    .try_snapshots(false)
                    .map_err(|e| Error::wrap("cannot list ralph's snapshots", e))?;
                Err(match self.find_in(&all, spec) {
                    Some(theirs) => self.not_ours(&theirs),
                    None => Error::usage(format!("no snapshot `{}`", spec.trim()))
                        .with_hint("`ralph recover` lists the snapshots with their ids"),
                })
            }
        }
    }

    /// The refusal of another work tree's (or project's) snapshot.
    fn not_ours(&self, theirs: &SnapshotInfo) -> Error {
        let commit = Oid::from_str(&theirs.commit)
            .ok()
            .and_then(|id| self.git.find_commit(id).ok());
        let said = |key: &str| {
            commit
                .as_ref()
                .and_then(|c| c.message().map(str::to_string))
                .and_then(|m| {
                    m.lines()
                        .find_map(|l| l.strip_prefix(key).map(str::to_string))
                })
        };
        let here = self.workdir().display().to_string();
        let whose = match (said(WORK_TREE), said(PROJECT)) {
            // The same place, another identity (`repo/scope.rs`).
            (Some(tree), Some(project)) if tree == here => {
                format!("a removed work tree that was at {tree}, project {project}")
            }
            (Some(tree), Some(project)) => format!("work tree {tree}, project {project}"),
            (Some(tree), None) => format!("work tree {tree}"),
            _ => "an older ralph's run in the main work tree".to_string(),
        };
        Error::usage(format!(
            "snapshot {} belongs to another work tree or project ({whose}), not to {} in {}",
            theirs.id,
            self.project_label(),
            here
        ))
        .with_hint(format!(
            "restore it from there (`ralph recover {}` in that project), or onto a new branch without touching this work tree: `ralph recover {} --branch NAME` there",
            theirs.id, theirs.id
        ))
    }

    fn find_in(&self, all: &[SnapshotInfo], spec: &str) -> Option<SnapshotInfo> {
        let spec = spec.trim();
        let scoped = format!("{SNAPSHOT_REFS}{}/{spec}", self.scope_key());
        let by_ref = |s: &SnapshotInfo| {
            s.reference == spec
                || s.reference == format!("{SNAPSHOT_REFS}{spec}")
                || s.reference == scoped
        };
        // The newest of a chain is the one the ref points at.
        let found = all
            .iter()
            .find(|s| {
                by_ref(s) && self.git.refname_to_id(&s.reference).ok() == s.commit.parse().ok()
            })
            .or_else(|| {
                let matches: Vec<_> = all
                    .iter()
                    .filter(|s| spec.len() >= 4 && s.commit.starts_with(spec))
                    .collect();
                (matches.len() == 1).then(|| matches[0])
            });
        found.cloned()
    }
}

/// A snapshot ref's parts.
struct ParsedRef {
    /// None for a ref written before scopes existed.
    scope: Option<String>,
    run: String,
    iteration: u32,
}

/// `refs/ralph/snapshots/<scope>/<run>/<iteration>` (or, written before
/// scopes, `refs/ralph/snapshots/<run>/<iteration>`) → its parts.
fn parse_ref(name: &str) -> Option<ParsedRef> {
    let (rest, iteration) = name.strip_prefix(SNAPSHOT_REFS)?.rsplit_once('/')?;
    let (scope, run) = match rest.split_once('/') {
        Some((scope, run)) => (Some(scope.to_string()), run),
        None => (None, rest),
    };
    Some(ParsedRef {
        scope,
        run: run.to_string(),
        iteration: iteration.parse().ok()?,
    })
}

/// A commit id named in a `Ralph-…:` line of a snapshot's message.
pub(super) fn trailer(commit: &git2::Commit<'_>, key: &str) -> Option<Oid> {
    let message = commit.message()?;
    let value = message.lines().find_map(|l| l.strip_prefix(key))?;
    Oid::from_str(value.trim()).ok()
}

fn short(id: Oid) -> String {
    id.to_string()[..10].to_string()
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    use super::*;
    use crate::repo::Restored;
    use crate::repo::repository::tests::*;

    /// The defaults of `[git]`.
    const GUARD: Guard = Guard {
        max_file_size: 10_000_000,
        max_new_files: 1000,
        commit_binaries: true,
    };

    fn index_bytes(root: &Path) -> Vec<u8> {
        fs::read(root.join(".git/index")).unwrap()
    }

    fn written(outcome: SnapshotOutcome) -> String {
        match outcome {
            SnapshotOutcome::Written { commit, .. } => commit,
            other => panic!("expected a snapshot, got {other:?}"),
        }
    }

    #[test]
    fn a_snapshot_touches_neither_head_nor_index_nor_stash_and_skips_repeats() {
        let (dir, git) = init_repo();
        let root = dir.path();
        let repo = open(root);
        // A clean tree is HEAD: nothing to keep.
        assert_eq!(
            repo.record_snapshot("r1", 1, &own(), &GUARD).unwrap(),
            SnapshotOutcome::Unchanged
        );
        write(root, "a.txt", "alpha, edited\n");
        write(root, "new/deep.txt", "untracked\n");
        write(root, ".ralph/state.json", "{}");
        fs::write(root.join(".gitignore"), "build/\n").unwrap();
        write(root, "build/out.o", "ignored\n");
        let head = git.head().unwrap().target();
        let index = index_bytes(root);
        let first = written(repo.record_snapshot("r1", 1, &own(), &GUARD).unwrap());
        assert_eq!(git.head().unwrap().target(), head);
        assert_eq!(index_bytes(root), index, "the index file is only read");
        assert!(git.refname_to_id("refs/stash").is_err());
        // Same tree again: not written.
        assert_eq!(
            repo.record_snapshot("r1", 1, &own(), &GUARD).unwrap(),
            SnapshotOutcome::Unchanged
        );
        let tree = git
            .find_commit(first.parse().unwrap())
            .unwrap()
            .tree()
            .unwrap();
        let names: Vec<String> = ["a.txt", "b.txt", ".gitignore", "new/deep.txt"]
            .into_iter()
            .filter(|p| tree.get_path(Path::new(p)).is_ok())
            .map(String::from)
            .collect();
        assert_eq!(
            names.len(),
            4,
            "tracked, untracked and .gitignore: {names:?}"
        );
        assert!(tree.get_path(Path::new("build/out.o")).is_err(), "ignored");
        assert!(
            tree.get_path(Path::new(".ralph/state.json")).is_err(),
            "runtime"
        );
    }

    /// Every entry of the repository's index in memory, stat data and all
    /// but libgit2's "up to date" mark (memory only, cleared when the
    /// index is written; every entry added gets it).
    fn entries(repo: &Repo) -> Vec<String> {
        const UPTODATE: u16 = 1 << 2;
        let index = repo.git.index().unwrap();
        index
            .iter()
            .map(|e| {
                format!(
                    "{} {} {:o} {:x} {:x} {} {}.{} {}.{} {} {}",
                    String::from_utf8_lossy(&e.path),
                    e.id,
                    e.mode,
                    e.flags,
                    e.flags_extended & !UPTODATE,
                    e.file_size,
                    e.mtime.seconds(),
                    e.mtime.nanoseconds(),
                    e.ctime.seconds(),
                    e.ctime.nanoseconds(),
                    e.ino,
                    e.dev
                )
            })
            .collect()
    }

    /// A snapshot stages into the repository's own index in memory, no
    /// copy of it (no second repository, no second read of the file), and
    /// puts every entry back as it was: a staged file, a held secret, a
    /// deleted file, new files, and a file whose name became a directory
    /// (libgit2 drops that entry unasked: the file is read again).
    #[test]
    fn a_snapshot_puts_the_index_in_memory_back_as_it_was() {
        let (dir, git) = init_repo();
        let root = dir.path();
        write(root, "x", "a file, to become a directory\n");
        write(root, "key.txt", "plain\n");
        commit_all(&git, "more");
        let repo = open(root);
        let cases: [(&str, &dyn Fn()); 2] = [
            ("edits", &|| {
                write(root, "a.txt", "alpha, edited\n");
                write(root, "staged.txt", "staged\n");
                // A secret the agent staged itself: held at HEAD's version.
                write(root, "key.txt", "aws AKIAIOSFODNN7EXAMPLE\n");
                let mut index = git.index().unwrap();
                index.add_path(Path::new("staged.txt")).unwrap();
                index.add_path(Path::new("key.txt")).unwrap();
                index.write().unwrap();
                fs::remove_file(root.join("b.txt")).unwrap();
                write(root, "new/deep.txt", "untracked\n");
            }),
            ("file to directory", &|| {
                fs::remove_file(root.join("x")).unwrap();
                write(root, "x/inside.txt", "now a directory\n");
            }),
        ];
        for (n, (what, change)) in cases.into_iter().enumerate() {
            change();
            // What a status reads in: the index as on disk.
            repo.changes(&own()).unwrap();
            let before = entries(&repo);
            let index = index_bytes(root);
            let (id, more) = super::super::repository::tests::opened_and(|| {
                written(
                    repo.record_snapshot("r1", n as u32, &own(), &GUARD)
                        .unwrap(),
                )
            });
            assert_eq!(more, 0, "{what}: no second repository");
            assert_eq!(entries(&repo), before, "{what}: the index in memory");
            assert_eq!(index_bytes(root), index, "{what}: the index file");
            let tree = git
                .find_commit(id.parse().unwrap())
                .unwrap()
                .tree()
                .unwrap();
            let has = |p: &str| tree.get_path(Path::new(p)).is_ok();
            match what {
                "edits" => {
                    assert!(has("staged.txt") && has("new/deep.txt") && !has("b.txt"));
                    let key = tree.get_path(Path::new("key.txt")).unwrap();
                    let blob = git.find_blob(key.id()).unwrap();
                    assert_eq!(blob.content(), b"plain\n", "the secret is held at HEAD");
                }
                _ => assert!(has("x/inside.txt"), "{what}"),
            }
        }
    }

    #[test]
    fn work_wiped_by_reset_and_clean_comes_back_byte_for_byte() {
        let (dir, git) = init_repo();
        let root = dir.path();
        let repo = open(root);
        let binary: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
        write(root, "a.txt", "alpha, an hour of work\n");
        write(root, "src/new.rs", "fn main() {}\n");
        fs::write(root.join("src/blob.bin"), &binary).unwrap();
        let early = written(repo.record_snapshot("r1", 2, &own(), &GUARD).unwrap());
        // The agent wipes its own work: the tree is HEAD again…
        fs::write(root.join("a.txt"), "alpha\n").unwrap();
        fs::remove_dir_all(root.join("src")).unwrap();
        // …and a later snapshot of the same iteration is only a repeat of HEAD
        // after more edits: the chain keeps the early one listed.
        write(root, "b.txt", "beta 2\n");
        let late = written(repo.record_snapshot("r1", 2, &own(), &GUARD).unwrap());
        fs::write(root.join("b.txt"), "beta\n").unwrap();
        let list = repo.snapshots().unwrap();
        let ids: Vec<&str> = list.iter().map(|s| s.commit.as_str()).collect();
        assert!(
            ids.contains(&early.as_str()) && ids.contains(&late.as_str()),
            "{ids:?}"
        );
        let early_info = list.iter().find(|s| s.commit == early).unwrap();
        assert_eq!((early_info.run.as_str(), early_info.iteration), ("r1", 2));
        assert_eq!(early_info.files_changed, 3);
        // The ref names the newest.
        assert_eq!(repo.find_snapshot("r1/2").unwrap().commit, late);

        let restored = repo.restore_snapshot(&early[..8], false, &own()).unwrap();
        let Restored::WorkTree { files, .. } = restored else {
            panic!("{restored:?}")
        };
        assert_eq!(files.len(), 3, "{files:?}");
        assert_eq!(fs::read(root.join("src/blob.bin")).unwrap(), binary);
        assert_eq!(
            fs::read_to_string(root.join("a.txt")).unwrap(),
            "alpha, an hour of work\n"
        );
        assert_eq!(
            fs::read_to_string(root.join("src/new.rs")).unwrap(),
            "fn main() {}\n"
        );
        assert_eq!(
            git.head().unwrap().peel_to_commit().unwrap().message(),
            Some("initial")
        );
    }

    #[test]
    fn restoring_over_uncommitted_changes_needs_force() {
        let (dir, _git) = init_repo();
        let root = dir.path();
        let repo = open(root);
        write(root, "a.txt", "snapshotted\n");
        let id = written(repo.record_snapshot("r1", 1, &own(), &GUARD).unwrap());
        write(root, "a.txt", "newer, uncommitted\n");
        let err = repo.restore_snapshot(&id, false, &own()).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.render().contains("--branch"), "{}", err.render());
        assert_eq!(
            fs::read_to_string(root.join("a.txt")).unwrap(),
            "newer, uncommitted\n"
        );
        repo.restore_snapshot(&id, true, &own()).unwrap();
        assert_eq!(
            fs::read_to_string(root.join("a.txt")).unwrap(),
            "snapshotted\n"
        );
    }

    #[test]
    fn restoring_brings_back_only_what_the_snapshot_changed() {
        let (dir, git) = init_repo();
        let root = dir.path();
        let repo = open(root);
        write(root, "a.txt", "the agent's edit\n");
        let id = written(repo.record_snapshot("r1", 1, &own(), &GUARD).unwrap());
        // Later, b.txt is changed and committed; the agent's edit is lost.
        write(root, "a.txt", "alpha\n");
        write(root, "b.txt", "beta, committed later\n");
        commit_all(&git, "later");
        let Restored::WorkTree { files, .. } = repo.restore_snapshot(&id, false, &own()).unwrap()
        else {
            panic!()
        };
        assert_eq!(files, ["a.txt"]);
        assert_eq!(
            fs::read_to_string(root.join("b.txt")).unwrap(),
            "beta, committed later\n",
            "a file the snapshot did not change keeps its newer content"
        );
    }

    #[test]
    fn restoring_never_writes_through_a_symlinked_directory() {
        let (dir, _git) = init_repo();
        let root = dir.path();
        let repo = open(root);
        write(root, "src/lib.rs", "work\n");
        let id = written(repo.record_snapshot("r1", 1, &own(), &GUARD).unwrap());
        let outside = tempfile::tempdir().unwrap();
        fs::remove_dir_all(root.join("src")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("src")).unwrap();
        let err = repo.restore_snapshot(&id, true, &own()).unwrap_err();
        assert!(err.render().contains("symbolic link"), "{}", err.render());
        assert!(!outside.path().join("lib.rs").exists());
    }

    /// Issue 22: snapshots keep what the WIP commit keeps; a changed tracked
    /// file over the size limit keeps its committed version in them.
    #[test]
    fn snapshots_keep_the_size_limit_for_new_and_changed_files() {
        let (dir, git) = init_repo();
        let root = dir.path();
        write(root, "big.dat", "small at first\n");
        commit_all(&git, "big.dat");
        let repo = open(root);
        let guard = Guard {
            max_file_size: 1000,
            ..GUARD
        };
        write(root, "big.dat", &"x".repeat(5000));
        write(root, "out/huge.txt", &"y".repeat(5000));
        write(root, "src/work.rs", "fn work() {}\n");
        let id = written(repo.record_snapshot("r1", 1, &own(), &guard).unwrap());
        let tree = git
            .find_commit(id.parse().unwrap())
            .unwrap()
            .tree()
            .unwrap();
        assert!(tree.get_path(Path::new("src/work.rs")).is_ok());
        assert!(tree.get_path(Path::new("out/huge.txt")).is_err());
        let kept = git
            .find_blob(tree.get_path(Path::new("big.dat")).unwrap().id())
            .unwrap();
        assert_eq!(kept.content(), b"small at first\n");
        // Rewriting them only is no new snapshot.
        write(root, "big.dat", &"z".repeat(6000));
        write(root, "out/huge.txt", &"w".repeat(6000));
        assert_eq!(
            repo.record_snapshot("r1", 1, &own(), &guard).unwrap(),
            SnapshotOutcome::Unchanged
        );
    }

    /// Issue 22: a clash found at the fifth file used to leave four written.
    #[test]
    fn a_clash_anywhere_is_found_before_any_file_is_written() {
        let (dir, _git) = init_repo();
        let root = dir.path();
        let repo = open(root);
        for f in ["a1.txt", "a2.txt", "a3.txt", "a4.txt", "z/lib.rs"] {
            write(root, f, "work\n");
        }
        let id = written(repo.record_snapshot("r1", 1, &own(), &GUARD).unwrap());
        for f in ["a1.txt", "a2.txt", "a3.txt", "a4.txt"] {
            fs::remove_file(root.join(f)).unwrap();
        }
        fs::remove_dir_all(root.join("z")).unwrap();
        fs::write(root.join("z"), "a file where the directory was\n").unwrap();
        let err = repo.restore_snapshot(&id, true, &own()).unwrap_err();
        assert!(
            err.render().contains("nothing was written"),
            "{}",
            err.render()
        );
        for f in ["a1.txt", "a2.txt", "a3.txt", "a4.txt"] {
            assert!(!root.join(f).exists(), "{f} written before the clash");
        }
    }

    /// Issue 22: `--branch refs/heads/x` made `refs/heads/refs/heads/x`;
    /// `--branch HEAD` failed with exit 1.
    #[test]
    fn branch_names_are_taken_as_git_takes_them() {
        let (dir, git) = init_repo();
        let root = dir.path();
        let repo = open(root);
        write(root, "c.txt", "gamma\n");
        let id = written(repo.record_snapshot("r1", 1, &own(), &GUARD).unwrap());
        repo.snapshot_to_branch(&id, "refs/heads/rescued").unwrap();
        assert!(git.find_branch("rescued", git2::BranchType::Local).is_ok());
        assert!(git.find_reference("refs/heads/refs/heads/rescued").is_err());
        for bad in ["HEAD", "refs/heads/HEAD", "a..b", "-x", ""] {
            let err = repo.snapshot_to_branch(&id, bad).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad}: {}", err.render());
        }
    }

    #[test]
    fn a_snapshot_onto_a_new_branch_sits_on_the_commit_it_was_taken_on() {
        let (dir, git) = init_repo();
        let root = dir.path();
        let repo = open(root);
        let base = git.head().unwrap().target().unwrap();
        write(root, "c.txt", "gamma\n");
        let id = written(repo.record_snapshot("r1", 1, &own(), &GUARD).unwrap());
        // HEAD moves on meanwhile.
        commit_all(&git, "later");
        let Restored::Branch { commit, .. } = repo.snapshot_to_branch(&id, "rescued").unwrap()
        else {
            panic!()
        };
        let made = git.find_commit(commit.parse().unwrap()).unwrap();
        assert_eq!(made.parent_ids().collect::<Vec<_>>(), vec![base]);
        assert!(made.tree().unwrap().get_path(Path::new("c.txt")).is_ok());
        assert_eq!(git.head().unwrap().shorthand(), Some("master"));
        let again = repo.snapshot_to_branch(&id, "rescued").unwrap_err();
        assert!(again.render().contains("already exists"));
        assert!(repo.find_snapshot("nope").is_err());
    }

    #[test]
    fn only_the_newest_runs_keep_their_snapshots() {
        let (dir, _git) = init_repo();
        let root = dir.path();
        let repo = open(root);
        for (n, run) in ["20260101-010101", "20260102-010101", "20260103-010101"]
            .iter()
            .enumerate()
        {
            write(root, "a.txt", &format!("v{n}\n"));
            written(repo.record_snapshot(run, 1, &own(), &GUARD).unwrap());
        }
        // The current run counts among the kept ones, and is kept whatever its name.
        assert_eq!(
            repo.prune_snapshots(2, "20260103-010101"),
            vec!["20260101-010101".to_string()]
        );
        let runs: Vec<String> = repo
            .snapshots()
            .unwrap()
            .into_iter()
            .map(|s| s.run)
            .collect();
        assert_eq!(runs, ["20260103-010101", "20260102-010101"]);
        assert!(repo.prune_snapshots(2, "20260103-010101").is_empty());
        assert_eq!(
            repo.prune_snapshots(1, "20260102-010101"),
            vec!["20260103-010101".to_string()]
        );
        assert_eq!(repo.snapshots().unwrap().len(), 1);
    }
}
