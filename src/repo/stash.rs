//! The stash, as ralph watches it: entries the agent made during an
//! iteration hold work a WIP commit cannot see, so the handoff and the
//! next prompt say where that work is and how to get it back.

use serde::{Deserialize, Serialize};

use super::Repo;

/// One `git stash` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StashEntry {
    /// `stash@{N}`, as `git stash list` shows it now.
    pub(crate) name: String,
    /// The stash commit's id.
    pub(crate) id: String,
    /// Its message ("WIP on main: 1a2b3c4 subject", "On main: baseline").
    pub(crate) message: String,
}

impl Repo {
    /// The stash entries, newest first (`git stash list`), read from the
    /// reflog of `refs/stash` without changing it.
    pub(crate) fn stash_entries(&self) -> Vec<StashEntry> {
        let Ok(log) = self.git.reflog("refs/stash") else {
            return Vec::new();
        };
        log.iter()
            .enumerate()
            .map(|(i, e)| StashEntry {
                name: format!("stash@{{{i}}}"),
                id: e.id_new().to_string(),
                message: e.message().unwrap_or("").to_string(),
            })
            .collect()
    }

    /// Stash entries not among `before` (ids): the ones made since.
    pub(crate) fn stashed_since(&self, before: &[String]) -> Vec<StashEntry> {
        self.stash_entries()
            .into_iter()
            .filter(|e| !before.contains(&e.id))
            .collect()
    }
}

/// The ids of the stash entries of the repository containing `root` (none
/// outside git).
pub(crate) fn stash_ids(root: &std::path::Path) -> Vec<String> {
    match Repo::open(root) {
        Ok(Some(repo)) => repo.stash_entries().into_iter().map(|e| e.id).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use crate::repo::repository::tests::*;

    #[test]
    fn new_stash_entries_are_found_by_id() {
        let (dir, mut git) = init_repo();
        let repo = open(dir.path());
        assert!(repo.stash_entries().is_empty());
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        write(dir.path(), "a.txt", "first\n");
        git.stash_save(&sig, "first", None).unwrap();
        let before: Vec<String> = repo.stash_entries().into_iter().map(|e| e.id).collect();
        write(dir.path(), "a.txt", "second\n");
        git.stash_save(&sig, "baseline", None).unwrap();
        let new = repo.stashed_since(&before);
        assert_eq!(new.len(), 1, "{new:?}");
        assert_eq!(new[0].name, "stash@{0}");
        assert!(new[0].message.contains("baseline"), "{new:?}");
        assert_eq!(repo.stash_entries().len(), 2);
    }
}
