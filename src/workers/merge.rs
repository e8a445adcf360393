//! One worker branch merged into the run branch, through git2.
//!
//! The coordinator calls this once per finished item, one at a time (the
//! merge queue). Promises: the run branch only moves forward (a
//! fast-forward or a merge commit whose first parent is its old tip), and
//! only if nobody moved it meanwhile; a backup ref names the old tip before
//! anything is written; on a conflict nothing is written and the worker
//! branch is left as it is; when the run branch is checked out, its work
//! tree is updated with git's safe checkout, which never overwrites a file
//! the user changed and never deletes an untracked one (the merge is then
//! `Blocked`, nothing written). A merge cut short by kill -9 is finished by
//! the next try: after the checkout (index at the merged tree) or during
//! it (files already holding the merged bytes are not in the way).

use git2::{Oid, Repository, build::CheckoutBuilder};

use crate::error::{Error, Result};
use crate::formats::Merged;

/// One merge to do.
#[derive(Debug, Clone)]
pub(crate) struct MergeRequest<'a> {
    /// Short name of the run branch (`main`).
    pub(crate) run_branch: &'a str,
    /// Short name of the worker branch (`ralph/<run>/w1`).
    pub(crate) worker_branch: &'a str,
    /// Full name of the ref that keeps the run branch's tip from before.
    pub(crate) backup_ref: &'a str,
    /// The merge commit's message.
    pub(crate) message: &'a str,
}

fn git_err(what: &str) -> impl Fn(git2::Error) -> Error + '_ {
    move |e| Error::wrap(what.to_string(), e)
}

/// Merge `req.worker_branch` into `req.run_branch` in `repo` (opened at the
/// work tree where the run branch is checked out, if it is).
pub(crate) fn merge(repo: &Repository, req: &MergeRequest<'_>) -> Result<Merged> {
    let run_ref = format!("refs/heads/{}", req.run_branch);
    let ours = repo
        .refname_to_id(&run_ref)
        .map_err(git_err("cannot read the run branch"))?;
    let theirs = repo
        .refname_to_id(&format!("refs/heads/{}", req.worker_branch))
        .map_err(git_err("cannot read the worker branch"))?;
    if ours == theirs
        || repo
            .graph_descendant_of(ours, theirs)
            .map_err(git_err("cannot compare the branches"))?
    {
        return Ok(Merged::AlreadyMerged);
    }
    let fast_forward = repo
        .graph_descendant_of(theirs, ours)
        .map_err(git_err("cannot compare the branches"))?;
    let new = if fast_forward {
        theirs
    } else {
        let (ours_c, theirs_c) = (
            repo.find_commit(ours)
                .map_err(git_err("cannot read a commit"))?,
            repo.find_commit(theirs)
                .map_err(git_err("cannot read a commit"))?,
        );
        let mut index = repo
            .merge_commits(&ours_c, &theirs_c, None)
            .map_err(git_err("cannot merge"))?;
        if index.has_conflicts() {
            return Ok(Merged::Conflict {
                files: conflicted(&index),
            });
        }
        let tree = index
            .write_tree_to(repo)
            .map_err(git_err("cannot write the merged tree"))?;
        let tree = repo
            .find_tree(tree)
            .map_err(git_err("cannot read a tree"))?;
        let (author, committer) =
            crate::repo::identities(repo).map_err(git_err("cannot name the committer"))?;
        repo.commit(
            None,
            &author,
            &committer,
            req.message,
            &tree,
            &[&ours_c, &theirs_c],
        )
        .map_err(git_err("cannot write the merge commit"))?
    };
    repo.reference(
        req.backup_ref,
        ours,
        true,
        &format!(
            "ralph: {} before merging {}",
            req.run_branch, req.worker_branch
        ),
    )
    .map_err(git_err("cannot write the backup ref"))?;
    if checked_out(repo, &run_ref)
        && let Err(reason) = update_work_tree(repo, new)
    {
        return Ok(Merged::Blocked { reason });
    }
    repo.reference_matching(
        &run_ref,
        new,
        true,
        ours,
        &format!("ralph: merge {}", req.worker_branch),
    )
    .map_err(git_err(
        "cannot move the run branch (did something else move it?)",
    ))?;
    Ok(if fast_forward {
        Merged::FastForward {
            from: ours.to_string(),
            to: new.to_string(),
        }
    } else {
        Merged::MergeCommit {
            from: ours.to_string(),
            id: new.to_string(),
        }
    })
}

/// Whether `repo`'s HEAD is `run_ref`.
fn checked_out(repo: &Repository, run_ref: &str) -> bool {
    repo.find_reference("HEAD")
        .ok()
        .and_then(|h| h.symbolic_target().map(|t| t == run_ref))
        .unwrap_or(false)
}

/// Bring the work tree and index from HEAD's tree to `new`'s, safely: a
/// file the user changed or an untracked file in the way stops it before
/// anything is written.
fn update_work_tree(repo: &Repository, new: Oid) -> std::result::Result<(), String> {
    let commit = repo.find_commit(new).map_err(|e| e.message().to_string())?;
    // An index already at the merged tree is a coordinator killed between
    // this checkout (which writes the index last) and the ref update: the
    // work tree is where the merge put it, and any edit since is the
    // user's, to keep. Checking out again would take those files for the
    // user's changes in the way.
    let index_tree = repo.index().and_then(|mut index| index.write_tree());
    if index_tree.is_ok_and(|t| t == commit.tree_id()) {
        return Ok(());
    }
    let checkout = || repo.checkout_tree(commit.as_object(), Some(CheckoutBuilder::new().safe()));
    // Refused, nothing written: only then look for a cut checkout's files
    // (hashing them on every merge would be work done for the rare case).
    let refused = match checkout() {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    let in_the_way = |e: git2::Error| {
        format!(
            "the run branch's work tree has changes in the way of the merge ({})",
            e.message()
        )
    };
    match undo_ours(repo, &commit) {
        Ok(true) => checkout().map_err(in_the_way),
        Ok(false) => Err(in_the_way(refused)),
        Err(e) => Err(e.message().to_string()),
    }
}

/// The files this merge writes found in the work tree already with the
/// merged content while the index does not know it: what a checkout killed
/// half-way left (files written, the index not yet). Safe checkout would
/// take them for the user's changes in the way and block the merge, so
/// they are put back as HEAD has them (a new file removed), to be written
/// again by the checkout: the same bytes, nothing lost. A file in the way
/// with any other content is left for the checkout to refuse. Whether
/// anything was put back.
fn undo_ours(
    repo: &Repository,
    commit: &git2::Commit<'_>,
) -> std::result::Result<bool, git2::Error> {
    let head = repo.head()?.peel_to_tree()?;
    let diff = crate::repo::diff_trees(repo, Some(&head), Some(&commit.tree()?), None)?;
    let workdir = repo.workdir().unwrap_or(std::path::Path::new("."));
    let mut changed = CheckoutBuilder::new();
    changed.force();
    let (mut any_changed, mut undone) = (false, false);
    for d in diff.deltas() {
        let Some(path) = d.new_file().path() else {
            continue;
        };
        let file = workdir.join(path);
        let ours = file.is_file()
            && Oid::hash_file(git2::ObjectType::Blob, &file)
                .is_ok_and(|id| id == d.new_file().id());
        match d.status() {
            git2::Delta::Added if ours => {
                undone |= std::fs::remove_file(&file).is_ok();
            }
            git2::Delta::Modified if ours => {
                changed.path(path);
                any_changed = true;
            }
            _ => {}
        }
    }
    if any_changed {
        repo.checkout_head(Some(&mut changed))?;
    }
    Ok(undone || any_changed)
}

/// The paths in conflict, each once (also the fleet's merge's answer).
pub(crate) fn conflicted(index: &git2::Index) -> Vec<String> {
    let mut files: Vec<String> = index
        .conflicts()
        .into_iter()
        .flatten()
        .filter_map(|c| c.ok())
        .filter_map(|c| c.our.or(c.their).or(c.ancestor))
        .map(|e| String::from_utf8_lossy(&e.path).into_owned())
        .collect();
    files.dedup();
    files
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A repository with `main` at one commit holding `a.txt` (three lines).
    fn repo() -> (tempfile::TempDir, Repository) {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        repo.set_head("refs/heads/main").unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\nthree\n").unwrap();
        commit_all(&repo, "initial");
        (dir, repo)
    }

    fn commit_all(repo: &Repository, message: &str) -> Oid {
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let mut index = repo.index().unwrap();
        index
            .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
            .unwrap();
        index.write().unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let parents: Vec<git2::Commit> = repo
            .head()
            .ok()
            .and_then(|h| h.peel_to_commit().ok())
            .into_iter()
            .collect();
        let parents: Vec<&git2::Commit> = parents.iter().collect();
        repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)
            .unwrap()
    }

    /// A commit on `branch` (created from main's tip if missing) that
    /// writes `files`, made in a worktree as a worker would.
    fn on_branch(repo: &Repository, holder: &Path, branch: &str, files: &[(&str, &str)]) -> Oid {
        let name = branch.replace('/', "-");
        let path = holder.join(&name);
        if repo.find_branch(branch, git2::BranchType::Local).is_err() {
            let tip = repo.head().unwrap().peel_to_commit().unwrap();
            repo.branch(branch, &tip, false).unwrap();
        }
        if !path.exists() {
            let reference = repo
                .find_reference(&format!("refs/heads/{branch}"))
                .unwrap();
            let mut opts = git2::WorktreeAddOptions::new();
            opts.reference(Some(&reference));
            repo.worktree(&name, &path, Some(&opts)).unwrap();
        }
        let wt = Repository::open(&path).unwrap();
        for (f, text) in files {
            std::fs::write(path.join(f), text).unwrap();
        }
        commit_all(&wt, &format!("work on {branch}"))
    }

    fn request<'a>(worker: &'a str, backup: &'a str) -> MergeRequest<'a> {
        MergeRequest {
            run_branch: "main",
            worker_branch: worker,
            backup_ref: backup,
            message: "ralph: merge",
        }
    }

    fn tip(repo: &Repository, branch: &str) -> Oid {
        repo.refname_to_id(&format!("refs/heads/{branch}")).unwrap()
    }

    #[test]
    fn a_branch_ahead_is_fast_forwarded_with_a_backup_and_the_work_tree_follows() {
        let (dir, repo) = repo();
        let holder = tempfile::tempdir().unwrap();
        let before = tip(&repo, "main");
        let work = on_branch(&repo, holder.path(), "ralph/r/w1", &[("b.txt", "b\n")]);
        let got = merge(&repo, &request("ralph/r/w1", "refs/ralph/merges/r/1")).unwrap();
        assert_eq!(
            got,
            Merged::FastForward {
                from: before.to_string(),
                to: work.to_string()
            }
        );
        assert_eq!(tip(&repo, "main"), work);
        assert_eq!(repo.refname_to_id("refs/ralph/merges/r/1").unwrap(), before);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
            "b\n"
        );
        assert!(repo.statuses(None).unwrap().is_empty(), "work tree clean");
        // Again: nothing to do.
        let again = merge(&repo, &request("ralph/r/w1", "refs/ralph/merges/r/2")).unwrap();
        assert_eq!(again, Merged::AlreadyMerged);
        assert!(repo.find_reference("refs/ralph/merges/r/2").is_err());
    }

    #[test]
    fn diverged_branches_get_a_merge_commit_with_both_parents() {
        let (dir, repo) = repo();
        let holder = tempfile::tempdir().unwrap();
        on_branch(&repo, holder.path(), "ralph/r/w1", &[("b.txt", "b\n")]);
        let w2 = on_branch(&repo, holder.path(), "ralph/r/w2", &[("c.txt", "c\n")]);
        merge(&repo, &request("ralph/r/w1", "refs/ralph/merges/r/1")).unwrap();
        let before = tip(&repo, "main");
        let got = merge(&repo, &request("ralph/r/w2", "refs/ralph/merges/r/2")).unwrap();
        let Merged::MergeCommit { from, id } = got else {
            panic!("{got:?}")
        };
        assert_eq!(from, before.to_string());
        let commit = repo.find_commit(Oid::from_str(&id).unwrap()).unwrap();
        assert_eq!(commit.parent_ids().collect::<Vec<_>>(), [before, w2]);
        assert_eq!(tip(&repo, "main").to_string(), id);
        for f in ["b.txt", "c.txt"] {
            assert!(dir.path().join(f).is_file(), "{f}");
        }
        assert!(repo.statuses(None).unwrap().is_empty(), "work tree clean");
    }

    #[test]
    fn a_conflict_writes_nothing_and_keeps_the_worker_branch() {
        let (dir, repo) = repo();
        let holder = tempfile::tempdir().unwrap();
        on_branch(
            &repo,
            holder.path(),
            "ralph/r/w1",
            &[("a.txt", "one\nTWO by w1\nthree\n")],
        );
        let w2 = on_branch(
            &repo,
            holder.path(),
            "ralph/r/w2",
            &[("a.txt", "one\n2 by w2\nthree\n")],
        );
        merge(&repo, &request("ralph/r/w1", "refs/ralph/merges/r/1")).unwrap();
        let before = tip(&repo, "main");
        let got = merge(&repo, &request("ralph/r/w2", "refs/ralph/merges/r/2")).unwrap();
        assert_eq!(
            got,
            Merged::Conflict {
                files: vec!["a.txt".into()]
            }
        );
        assert_eq!(tip(&repo, "main"), before);
        assert_eq!(tip(&repo, "ralph/r/w2"), w2);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "one\nTWO by w1\nthree\n"
        );
        assert_eq!(repo.state(), git2::RepositoryState::Clean);
        assert!(repo.statuses(None).unwrap().is_empty());
    }

    #[test]
    fn the_users_files_in_the_way_block_the_merge_and_are_kept() {
        let (dir, repo) = repo();
        let holder = tempfile::tempdir().unwrap();
        on_branch(
            &repo,
            holder.path(),
            "ralph/r/w1",
            &[("b.txt", "b\n"), ("a.txt", "one\ntwo\nthree\nfour\n")],
        );
        let before = tip(&repo, "main");
        // An untracked file where the branch adds one; an edit where it edits.
        std::fs::write(dir.path().join("b.txt"), "the user's\n").unwrap();
        let got = merge(&repo, &request("ralph/r/w1", "refs/ralph/merges/r/1")).unwrap();
        assert!(matches!(got, Merged::Blocked { .. }), "{got:?}");
        assert_eq!(tip(&repo, "main"), before);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
            "the user's\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "one\ntwo\nthree\n"
        );
    }

    /// The coordinator killed after the work tree was brought to the merge
    /// but before the run branch moved: the next try finishes the merge
    /// (it is not the user's change in the way).
    #[test]
    fn a_merge_cut_between_its_checkout_and_its_ref_update_is_finished_by_the_next_try() {
        for diverged in [false, true] {
            let (dir, repo) = repo();
            let holder = tempfile::tempdir().unwrap();
            if diverged {
                on_branch(&repo, holder.path(), "ralph/r/w0", &[("z.txt", "z\n")]);
                merge(&repo, &request("ralph/r/w0", "refs/ralph/merges/r/0")).unwrap();
            }
            let w1 = on_branch(
                &repo,
                holder.path(),
                "ralph/r/w1",
                &[("b.txt", "b\n"), ("a.txt", "one\ntwo\nthree\nfour\n")],
            );
            let before = tip(&repo, "main");
            // What the first try did before it was killed: the checkout of
            // the merged tree, no ref update.
            let merged_tree = if diverged {
                let (o, t) = (
                    repo.find_commit(before).unwrap(),
                    repo.find_commit(w1).unwrap(),
                );
                let mut index = repo.merge_commits(&o, &t, None).unwrap();
                index.write_tree_to(&repo).unwrap()
            } else {
                repo.find_commit(w1).unwrap().tree_id()
            };
            let tree = repo.find_tree(merged_tree).unwrap();
            repo.checkout_tree(tree.as_object(), Some(CheckoutBuilder::new().safe()))
                .unwrap();
            assert_eq!(tip(&repo, "main"), before);
            let got = merge(&repo, &request("ralph/r/w1", "refs/ralph/merges/r/1")).unwrap();
            assert!(
                matches!(got, Merged::FastForward { .. } | Merged::MergeCommit { .. }),
                "{got:?}"
            );
            let now = repo.find_commit(tip(&repo, "main")).unwrap();
            assert_eq!(now.tree_id(), merged_tree);
            assert_eq!(
                std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
                "one\ntwo\nthree\nfour\n"
            );
            assert!(repo.statuses(None).unwrap().is_empty(), "work tree clean");
        }
    }

    /// Killed in the middle of the checkout itself: some files written,
    /// the index not. The next try finishes the merge (a file in the way
    /// with other content still blocks it: the test above).
    #[test]
    fn a_merge_cut_in_the_middle_of_its_checkout_is_finished_by_the_next_try() {
        let (dir, repo) = repo();
        let holder = tempfile::tempdir().unwrap();
        let files = [("b.txt", "b\n"), ("a.txt", "one\ntwo\nthree\nfour\n")];
        on_branch(&repo, holder.path(), "ralph/r/w1", &files);
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        let got = merge(&repo, &request("ralph/r/w1", "refs/ralph/merges/r/1")).unwrap();
        assert!(matches!(got, Merged::FastForward { .. }), "{got:?}");
        assert!(repo.statuses(None).unwrap().is_empty(), "work tree clean");
    }

    #[test]
    fn a_run_branch_not_checked_out_only_moves_its_ref() {
        let (dir, repo) = repo();
        let holder = tempfile::tempdir().unwrap();
        let main_tip = tip(&repo, "main");
        repo.branch("run", &repo.find_commit(main_tip).unwrap(), false)
            .unwrap();
        let work = on_branch(&repo, holder.path(), "ralph/r/w1", &[("b.txt", "b\n")]);
        let req = MergeRequest {
            run_branch: "run",
            ..request("ralph/r/w1", "refs/ralph/merges/r/1")
        };
        merge(&repo, &req).unwrap();
        assert_eq!(tip(&repo, "run"), work);
        assert_eq!(tip(&repo, "main"), main_tip);
        assert!(!dir.path().join("b.txt").exists());
    }
}
