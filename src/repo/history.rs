//! What the commits between two points say: the commits themselves
//! (`git log from..to`, first line of each) and a `git diff --stat
//! from to`-like total. For the morning report's "what changed overnight".

use git2::Oid;
use serde::Serialize;

use super::Repo;

/// Commits listed at most, newest first (the total is counted in full).
const MAX_COMMITS: usize = 200;

/// One commit: its id and the first line of its message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CommitLine {
    pub(crate) id: String,
    pub(crate) summary: String,
}

/// `git diff --stat`'s last line, as numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
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
        Some(out)
    }

    /// The diffstat between two commits' trees.
    pub(crate) fn diff_stat_between(&self, from: &str, to: &str) -> Option<DiffStat> {
        let tree = |id: &str| {
            let oid = Oid::from_str(id).ok()?;
            self.git.find_commit(oid).ok()?.tree().ok()
        };
        let (a, b) = (tree(from)?, tree(to)?);
        let diff = self.git.diff_tree_to_tree(Some(&a), Some(&b), None).ok()?;
        let stats = diff.stats().ok()?;
        Some(DiffStat {
            files: stats.files_changed(),
            insertions: stats.insertions(),
            deletions: stats.deletions(),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::repo::repository::tests::*;

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
        let stat = repo.diff_stat_between(&start, &end).unwrap();
        assert_eq!((stat.files, stat.insertions, stat.deletions), (2, 2, 0));
        assert_eq!(repo.commits_between(&end, &end).unwrap(), []);
        assert!(repo.commits_between("0000", &end).is_none());
    }
}
