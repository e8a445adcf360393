//! The workers' git worktrees and branches, through git2: made from the run
//! branch's tip, listed with the commits not merged yet, removed only once
//! their branch is merged.

use std::path::{Path, PathBuf};

use git2::{BranchType, Oid, Repository, WorktreeAddOptions, WorktreePruneOptions};

use crate::error::{Error, Result};

fn git_err(what: String) -> impl FnOnce(git2::Error) -> Error {
    move |e| Error::wrap(what, e)
}

/// `base`, or `base-2`, `base-3`… : the first name `taken` refuses.
pub(crate) fn free_name(base: &str, taken: impl Fn(&str) -> bool) -> String {
    if !taken(base) {
        return base.to_string();
    }
    (2..)
        .map(|n| format!("{base}-{n}"))
        .find(|n| !taken(n))
        .expect("an unbounded range has a free name")
}

/// Where a worktree's HEAD was found, relative to its worker branch.
#[derive(Debug, PartialEq)]
pub(crate) enum Head {
    OnBranch,
    /// On another branch or detached, at or ahead of the worker branch:
    /// the branch was moved forward to it and HEAD put back on the branch.
    Moved(String),
    /// Apart from the worker branch (each has commits the other lacks):
    /// HEAD detached where it was, so that nothing commits onto the
    /// branch the agent checked out (the run branch, say).
    Apart(String),
}

/// Bring the worktree `wt`'s HEAD back onto `branch` where the agent's
/// commits allow it, the index and the work tree untouched. An agent may
/// commit on a branch of its own, on a detached HEAD or on the run branch
/// it checked out: ralph's commits (checkpoints, the completion's, the
/// coordinator's leftovers) must go on the worker branch, never onto a
/// branch whose tip has moved past the worktree's index.
pub(crate) fn home(wt: &Repository, branch: &str) -> std::result::Result<Head, git2::Error> {
    let mine = format!("refs/heads/{branch}");
    let head = wt.head()?;
    if head.name() == Some(mine.as_str()) {
        return Ok(Head::OnBranch);
    }
    let detached = wt.head_detached()?;
    // On another branch, the commit this worktree's index is based on is
    // the one it last checked out or committed (its own HEAD log): the
    // branch's tip may have moved since in another worktree (the run
    // branch, by the coordinator's merges).
    let at = match detached {
        true => None,
        false => wt
            .reflog("HEAD")
            .ok()
            .and_then(|log| log.get(0).map(|e| e.id_new()))
            .filter(|id| !id.is_zero()),
    };
    let at = match at {
        Some(at) => at,
        None => head.peel_to_commit()?.id(),
    };
    let place = if detached {
        "a detached HEAD".to_string()
    } else {
        format!("branch {}", head.shorthand().unwrap_or("?"))
    };
    let tip = wt.refname_to_id(&mine)?;
    if tip == at || wt.graph_descendant_of(at, tip)? {
        wt.reference(&mine, at, true, "ralph: the worker's commits found")?;
        wt.set_head(&mine)?;
        return Ok(Head::Moved(format!(
            "its work was on {place}: {branch} moved forward to it"
        )));
    }
    wt.set_head_detached(at)?;
    Ok(Head::Apart(format!(
        "its work was on {place}, apart from {branch}"
    )))
}

/// Whether branch `name` exists.
pub(crate) fn branch_exists(repo: &Repository, name: &str) -> bool {
    repo.find_branch(name, BranchType::Local).is_ok()
}

/// Where a new assignment of `worker` in run `run` goes: its branch
/// `ralph/<run>/<leaf>`, its worktree's name `ralph-<run>-<leaf>` and
/// directory `<worktrees>/<leaf>`, with the first leaf (`w2`, `w2-2`…)
/// free as all three. Chosen together: a directory left behind without its
/// branch (a removal cut short by kill -9) takes its leaf out of use; a
/// name searched with the directory fixed would never be found.
pub(crate) fn free_place(
    repo: &Repository,
    run: &str,
    worker: &str,
    worktrees: &Path,
) -> (String, String, PathBuf) {
    let place = |leaf: &str| {
        (
            format!("ralph/{run}/{leaf}"),
            format!("ralph-{run}-{leaf}"),
            worktrees.join(leaf),
        )
    };
    let leaf = free_name(worker, |leaf| {
        let (branch, name, path) = place(leaf);
        branch_exists(repo, &branch) || repo.find_worktree(&name).is_ok() || path.exists()
    });
    place(&leaf)
}

/// Branch `branch` (made at `from` if missing), checked out in a new
/// worktree `name` at `path`.
pub(crate) fn create(
    repo: &Repository,
    name: &str,
    path: &Path,
    branch: &str,
    from: Oid,
) -> Result<()> {
    let commit = repo
        .find_commit(from)
        .map_err(git_err("cannot read the run branch's tip".into()))?;
    // A branch made before a coordinator died is taken as it is.
    let created = match repo.find_branch(branch, BranchType::Local) {
        Ok(existing) => existing,
        Err(_) => repo
            .branch(branch, &commit, false)
            .map_err(git_err(format!("cannot create branch {branch}")))?,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io("cannot create", parent, e))?;
    }
    let reference = created.into_reference();
    let mut opts = WorktreeAddOptions::new();
    opts.reference(Some(&reference));
    repo.worktree(name, path, Some(&opts))
        .map_err(git_err(format!(
            "cannot add the worktree {} for branch {branch}",
            path.display()
        )))?;
    Ok(())
}

/// Remove worktree `name` at `path` that a killed coordinator left half
/// checked out (its branch stays: it has no work of its own yet).
pub(crate) fn discard_partial(repo: &Repository, name: &str, path: &Path) -> Result<()> {
    if let Ok(wt) = repo.find_worktree(name) {
        let mut opts = WorktreePruneOptions::new();
        opts.valid(true).working_tree(true);
        wt.prune(Some(&mut opts))
            .map_err(git_err(format!("cannot remove the worktree {name}")))?;
    }
    if path.exists() {
        std::fs::remove_dir_all(path).map_err(|e| Error::io("cannot remove", path, e))?;
    }
    Ok(())
}

/// Remove worktree `name` (its directory too) and its `branch`: only once
/// `branch` is merged into `run_branch`, which this checks again.
pub(crate) fn remove_merged(
    repo: &Repository,
    name: &str,
    branch: &str,
    run_branch: &str,
) -> Result<()> {
    if !commits_ahead(repo, branch, run_branch)?.is_empty() {
        return Err(Error::usage(format!(
            "branch {branch} has commits not on {run_branch}: its worktree is kept"
        )));
    }
    if let Ok(wt) = repo.find_worktree(name) {
        let mut opts = WorktreePruneOptions::new();
        opts.valid(true).working_tree(true);
        wt.prune(Some(&mut opts))
            .map_err(git_err(format!("cannot remove the worktree {name}")))?;
    }
    if let Ok(mut b) = repo.find_branch(branch, BranchType::Local) {
        b.delete()
            .map_err(git_err(format!("cannot delete branch {branch}")))?;
    }
    Ok(())
}

/// The commits of `branch` not on `run_branch`, newest first: (id, subject).
pub(crate) fn commits_ahead(
    repo: &Repository,
    branch: &str,
    run_branch: &str,
) -> Result<Vec<(String, String)>> {
    let Ok(tip) = repo.refname_to_id(&format!("refs/heads/{branch}")) else {
        return Ok(Vec::new());
    };
    let mut walk = repo
        .revwalk()
        .map_err(git_err("cannot list commits".into()))?;
    walk.push(tip)
        .map_err(git_err("cannot list commits".into()))?;
    if let Ok(base) = repo.refname_to_id(&format!("refs/heads/{run_branch}")) {
        walk.hide(base)
            .map_err(git_err("cannot list commits".into()))?;
    }
    Ok(walk
        .filter_map(|id| id.ok())
        .filter_map(|id| repo.find_commit(id).ok())
        .map(|c| {
            (
                c.id().to_string(),
                c.summary().unwrap_or_default().to_string(),
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository on `main` with one empty commit, its id.
    fn repo_on_main() -> (tempfile::TempDir, Repository, Oid) {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        repo.set_head("refs/heads/main").unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let tree = repo
            .find_tree(repo.index().unwrap().write_tree().unwrap())
            .unwrap();
        let tip = repo
            .commit(Some("HEAD"), &sig, &sig, "initial", &tree, &[])
            .unwrap();
        drop(tree);
        (dir, repo, tip)
    }

    #[test]
    fn free_names_count_up() {
        let taken = ["w1", "w1-2"];
        assert_eq!(free_name("w1", |n| taken.contains(&n)), "w1-3");
        assert_eq!(free_name("w2", |n| taken.contains(&n)), "w2");
    }

    #[test]
    fn a_place_is_free_as_branch_worktree_and_directory_at_once() {
        let (dir, repo, tip) = repo_on_main();
        let worktrees = dir.path().join(".ralph/worktrees/r");
        let (branch, name, path) = free_place(&repo, "r", "w1", &worktrees);
        assert_eq!(
            (branch.as_str(), name.as_str()),
            ("ralph/r/w1", "ralph-r-w1")
        );
        assert_eq!(path, worktrees.join("w1"));
        // w1's directory left behind without its branch; w1-2's branch left
        // without its directory: the next free leaf is w1-3.
        std::fs::create_dir_all(worktrees.join("w1/.ralph")).unwrap();
        repo.branch("ralph/r/w1-2", &repo.find_commit(tip).unwrap(), false)
            .unwrap();
        let (branch, name, path) = free_place(&repo, "r", "w1", &worktrees);
        assert_eq!(
            (branch.as_str(), name.as_str()),
            ("ralph/r/w1-3", "ralph-r-w1-3")
        );
        assert_eq!(path, worktrees.join("w1-3"));
    }

    #[test]
    fn a_worktree_with_unmerged_commits_is_kept() {
        let (_dir, repo, tip) = repo_on_main();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let holder = tempfile::tempdir().unwrap();
        let path = holder.path().join("w1");
        create(&repo, "w1", &path, "ralph/r/w1", tip).unwrap();
        assert!(path.join(".git").exists());
        let wt = Repository::open(&path).unwrap();
        let parent = wt.head().unwrap().peel_to_commit().unwrap();
        let tree = wt.find_tree(parent.tree_id()).unwrap();
        let work = wt
            .commit(Some("HEAD"), &sig, &sig, "work", &tree, &[&parent])
            .unwrap();
        assert_eq!(
            commits_ahead(&repo, "ralph/r/w1", "main").unwrap(),
            [(work.to_string(), "work".to_string())]
        );
        assert!(remove_merged(&repo, "w1", "ralph/r/w1", "main").is_err());
        assert!(path.exists() && branch_exists(&repo, "ralph/r/w1"));
        // Merged: removed, branch and directory.
        repo.reference("refs/heads/main", work, true, "ff").unwrap();
        remove_merged(&repo, "w1", "ralph/r/w1", "main").unwrap();
        assert!(!path.exists() && !branch_exists(&repo, "ralph/r/w1"));
        assert!(repo.find_worktree("w1").is_err());
    }
}
