//! What changed between two points, for the morning report's "what
//! changed overnight": the commits between two commits (`git log
//! from..to`, first line of each), the work tree as a tree object at an
//! iteration's boundaries (committed or not: [`Repo::work_tree_id`]), and a
//! `git diff --stat`-like total between two trees or commits with ralph's
//! own files and what lies outside the project left out
//! ([`Repo::changed_between`]).
//!
//! Pitfall: an iteration's work is often committed later (by the next
//! checkpoint's WIP commit, or the final commit), or never: what an
//! iteration changed is its work tree at its end against its work tree at
//! its start, never the commits made during it.

use git2::{Oid, Patch};
use serde::{Deserialize, Serialize};

use super::{Guard, OwnPaths, Repo};

/// Commits listed at most, newest first (the total is counted in full).
const MAX_COMMITS: usize = 200;

/// One commit: its id and the first line of its message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CommitLine {
    pub(crate) id: String,
    pub(crate) summary: String,
}

/// `git diff --stat`'s last line, as numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DiffStat {
    pub(crate) files: usize,
    pub(crate) insertions: usize,
    pub(crate) deletions: usize,
}

impl DiffStat {
    pub(crate) fn line(&self) -> String {
        format!(
            "{} file(s) changed, +{} -{}",
            self.files, self.insertions, self.deletions
        )
    }
}

impl Repo {
    /// Commits reachable from `to` and not from `from`, oldest first (at
    /// most [`MAX_COMMITS`], the newest kept). `None` when either is not a
    /// commit of this repository (a history rewritten since).
    pub(crate) fn commits_between(&self, from: &str, to: &str) -> Option<Vec<CommitLine>> {
        let (from, to) = (Oid::from_str(from).ok()?, Oid::from_str(to).ok()?);
        let mut walk = self.git.revwalk().ok()?;
        walk.push(to).ok()?;
        walk.hide(from).ok()?;
        Some(self.lines(walk))
    }

    /// The commits of `walk`, oldest first (at most [`MAX_COMMITS`], the
    /// newest kept).
    fn lines(&self, walk: git2::Revwalk<'_>) -> Vec<CommitLine> {
        let mut out: Vec<CommitLine> = walk
            .flatten()
            .take(MAX_COMMITS)
            .filter_map(|id| self.git.find_commit(id).ok())
            .map(|c| CommitLine {
                id: c.id().to_string(),
                summary: crate::text::printable(c.summary().unwrap_or("")).into_owned(),
            })
            .collect();
        out.reverse();
        out
    }

    /// Commits reachable from `from` (HEAD when an iteration began) and
    /// from no branch now, oldest first: what an agent's `git reset
    /// --hard OLDER` (or a commit on a detached HEAD it left) put out of
    /// every branch. Empty when `from` is on a branch still, or unknown.
    pub(crate) fn commits_left_behind(&self, from: &str) -> Vec<CommitLine> {
        let left = || -> Option<Vec<CommitLine>> {
            let from = Oid::from_str(from).ok()?;
            let mut walk = self.git.revwalk().ok()?;
            walk.push(from).ok()?;
            walk.hide_glob("refs/heads/*").ok()?;
            if let Ok(head) = self.git.head()
                && let Some(id) = head.target()
            {
                walk.hide(id).ok()?;
            }
            Some(self.lines(walk))
        };
        left().unwrap_or_default()
    }

    /// The work tree as a tree object (written to the object database,
    /// referenced by nothing), staged as the safety net's snapshots stage
    /// it: tracked and new files, ralph's own files at their indexed
    /// version, nothing outside the project. `None` when it cannot be read.
    pub fn work_tree_id(&self, own: &OwnPaths, guard: &Guard) -> Option<String> {
        match self.work_tree_as_tree(own, guard) {
            Ok(id) => Some(id.to_string()),
            Err(e) => {
                tracing::debug!("cannot read the work tree as a tree: {e}");
                None
            }
        }
    }

    /// What changed from `from` to `to` (each a tree or a commit id), as
    /// `git diff --stat` counts it, leaving out ralph's own files and what
    /// lies outside the project. `None` when either is not in this
    /// repository (a history rewritten, an object pruned since).
    pub(crate) fn changed_between(&self, from: &str, to: &str, own: &OwnPaths) -> Option<DiffStat> {
        let diff = self.diff_between(from, to)?;
        let own = self.own(own);
        let mut stat = DiffStat::default();
        for (i, delta) in diff.deltas().enumerate() {
            let path = delta
                .new_file()
                .path_bytes()
                .or(delta.old_file().path_bytes());
            if path.is_none_or(|p| own.contains(p)) {
                continue;
            }
            stat.files += 1;
            if let Ok(Some(patch)) = Patch::from_diff(&diff, i)
                && let Ok((_, insertions, deletions)) = patch.line_stats()
            {
                stat.insertions += insertions;
                stat.deletions += deletions;
            }
        }
        Some(stat)
    }

    /// The files (workdir-relative) that differ from `from` to `to`, but
    /// ralph's own and what lies outside the project; deleted ones too.
    pub(crate) fn paths_changed_between(
        &self,
        from: &str,
        to: &str,
        own: &OwnPaths,
    ) -> Option<Vec<String>> {
        let diff = self.diff_between(from, to)?;
        let own = self.own(own);
        let paths = diff
            .deltas()
            .filter_map(|d| d.new_file().path_bytes().or(d.old_file().path_bytes()))
            .filter(|p| !own.contains(p))
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        Some(paths)
    }

    fn diff_between(&self, from: &str, to: &str) -> Option<git2::Diff<'_>> {
        let tree = |id: &str| {
            let object = self.git.find_object(Oid::from_str(id).ok()?, None).ok()?;
            object.peel_to_tree().ok()
        };
        let (a, b) = (tree(from)?, tree(to)?);
        super::diff_trees(&self.git, Some(&a), Some(&b), None).ok()
    }
}

#[cfg(test)]
mod tests {
    use crate::repo::repository::tests::*;

    use crate::repo::{Guard, OwnPaths};

    #[test]
    fn commits_and_diffstat_between_two_points() {
        let (dir, git) = init_repo();
        write(dir.path(), "a.txt", "one\n");
        let start = commit_all(&git, "start").to_string();
        write(dir.path(), "a.txt", "one\ntwo\n");
        commit_all(&git, "parser: two");
        write(dir.path(), "new.txt", "new\n");
        let end = commit_all(&git, "ralph: checkpoint\n\nbody").to_string();
        let repo = open(dir.path());
        let commits = repo.commits_between(&start, &end).unwrap();
        let summaries: Vec<_> = commits.iter().map(|c| c.summary.as_str()).collect();
        assert_eq!(summaries, ["parser: two", "ralph: checkpoint"]);
        assert_eq!(commits[1].id, end);
        let stat = repo
            .changed_between(&start, &end, &OwnPaths::default())
            .unwrap();
        assert_eq!((stat.files, stat.insertions, stat.deletions), (2, 2, 0));
        assert_eq!(repo.commits_between(&end, &end).unwrap(), []);
        assert!(repo.commits_between("0000", &end).is_none());
    }

    const GUARD: Guard = Guard {
        max_file_size: 0,
        max_new_files: 0,
        commit_binaries: true,
    };

    #[test]
    fn an_iterations_work_is_its_work_tree_at_its_end_whenever_it_is_committed() {
        let (dir, git) = init_repo();
        let root = dir.path();
        let own = OwnPaths::default();
        let repo = open(root);
        let start = repo.work_tree_id(&own, &GUARD).unwrap();
        // Iteration 1 leaves its work uncommitted; ralph rewrites its own files.
        write(root, "a.txt", "alpha\nmore\n");
        write(root, "src/new.rs", "fn x() {}\n");
        write(root, "PROMPT.md", "the next prompt\n");
        write(root, ".ralph/handoffs/h.md", "handoff\n");
        let after_one = repo.work_tree_id(&own, &GUARD).unwrap();
        let stat = repo.changed_between(&start, &after_one, &own).unwrap();
        assert_eq!((stat.files, stat.insertions, stat.deletions), (2, 2, 0));
        // Iteration 2 changes one line; the WIP commit at its end takes
        // iteration 1's work too: iteration 2 still changed one file.
        write(root, "b.txt", "BETA\n");
        let commit = commit_all(&git, "ralph: checkpoint").to_string();
        let after_two = repo.work_tree_id(&own, &GUARD).unwrap();
        let stat = repo.changed_between(&after_one, &after_two, &own).unwrap();
        assert_eq!((stat.files, stat.insertions, stat.deletions), (1, 1, 1));
        // A committed work tree is the commit's tree; a tree and a commit compare.
        assert_eq!(
            repo.changed_between(&commit, &after_two, &own),
            Some(Default::default())
        );
        assert_eq!(repo.changed_between("0000", &after_two, &own), None);
    }
}
