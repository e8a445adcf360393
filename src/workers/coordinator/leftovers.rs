//! What a worker's loop leaves behind, gathered onto its branch before the
//! merge queue takes the branch: work the agent committed elsewhere in its
//! worktree (another branch, a detached HEAD, the stash), what it left
//! uncommitted, and none of its edits to the project's plan.
//!
//! Theory: the merge queue merges the worker branch, and a merged worktree
//! is removed. Work that is reachable from the worktree but not from its
//! branch would be dropped with it (a detached HEAD's commits become
//! unreachable), and the item recorded done without it. So before the WIP
//! commit: the stash entries git made on the branch are applied back, HEAD
//! is brought back onto the branch (moved forward to the agent's commit,
//! or, when the two diverged, the agent's commit merged into it), and the
//! project's plan is put back as the branch's merge base with the run
//! branch has it: the plan has one writer, and check-offs an agent made
//! there (its own item or others') reach the run branch only as the
//! coordinator's.
//!
//! Pitfalls: the stash is the repository's, shared by every worktree: only
//! entries git names after this branch ("WIP on <branch>: …") are taken. An
//! agent that checked out the run branch in its worktree has HEAD on the
//! run branch: ralph's WIP commit must never go there (its stale index
//! would delete what was merged since), so HEAD is moved first.

use std::path::Path;

use git2::{BranchType, Oid, Repository, build::CheckoutBuilder};

use crate::repo::worktree::{self, Head};

use super::Coordinator;
use crate::formats::Event;
use crate::formats::ledger::Assignment;
use crate::repo::{CommitOutcome, OwnPaths, Repo};

impl Coordinator {
    /// Everything a worker left in its worktree, committed on its branch
    /// with the WIP commit's rules: nothing stays behind, nothing is
    /// dropped, and the project's plan is left as the run branch had it.
    pub(super) fn commit_leftovers(&mut self, a: &Assignment) {
        let Ok(mut wt) = Repository::open(&a.worktree) else {
            return;
        };
        let plan = self.plan_in_tree.clone();
        let mut notes = unstash(&mut wt, &a.branch);
        let home = worktree::home(&wt, &a.branch);
        let stray = match home {
            Ok(Head::OnBranch) => Ok(None),
            Ok(Head::Moved(note)) => {
                notes.push(note);
                Ok(None)
            }
            Ok(Head::Apart(note)) => {
                notes.push(note);
                stray_branch(&wt, &a.branch).map(Some)
            }
            Err(e) => Err(e),
        };
        let stray = stray.unwrap_or_else(|e| {
            notes.push(format!(
                "cannot bring its worktree's HEAD home: {}",
                e.message()
            ));
            None
        });
        notes.extend(plan_as_at_base(&wt, &plan, &self.ledger.run_branch));
        self.wip_commit(a);
        if let Some(stray) = stray {
            notes.push(fold_in(&wt, &a.branch, &stray).unwrap_or_else(|e| {
                format!(
                    "its work on branch {stray} could not be merged into {} ({}): {stray} is kept",
                    a.branch,
                    e.message()
                )
            }));
            // The branch's own commits may have edited the plan too.
            if plan_as_at_base(&wt, &plan, &self.ledger.run_branch).is_some() {
                self.wip_commit(a);
            }
        }
        for note in notes {
            self.bus.emit_from(
                &a.worker,
                Event::Warning {
                    message: format!(
                        "{} (\"{}\"): {note}",
                        a.worker,
                        crate::text::printable(&a.item)
                    ),
                },
            );
        }
    }

    fn wip_commit(&mut self, a: &Assignment) {
        let Ok(Some(repo)) = Repo::open(&a.project_dir) else {
            return;
        };
        let own = OwnPaths::new(&self.config.prompt_file);
        let left_out = repo
            .left_out(&own, &self.config.git.guard())
            .unwrap_or_default();
        for l in left_out.iter().filter(|l| l.secret) {
            let message = format!(
                "{} left out of {}'s leftover commit, still in its worktree: {}",
                crate::repo::display_path(l.path.as_bytes()),
                a.worker,
                l.why
            );
            self.bus.emit_from(&a.worker, Event::Warning { message });
        }
        let outcome = repo.wip_commit_leaving_out(
            &format!(
                "ralph: {}'s uncommitted work on \"{}\"",
                a.worker,
                crate::text::printable(&a.item)
            ),
            &own,
            &left_out,
            &self.config.git.guard(),
        );
        match outcome {
            CommitOutcome::Skipped { reason } => self
                .bus
                .emit_from(&a.worker, Event::Warning { message: reason }),
            CommitOutcome::Committed { id, .. } => self.ledger.made(id),
            CommitOutcome::NothingToCommit => {}
        }
    }
}

/// Whether a stash entry's message names `branch` (git writes "WIP on
/// <branch>: <id> <subject>", or "On <branch>: <message>" with `-m`).
fn stash_of(message: &str, branch: &str) -> bool {
    let rest = message
        .strip_prefix("WIP on ")
        .or_else(|| message.strip_prefix("On "));
    rest.and_then(|r| r.strip_prefix(branch))
        .is_some_and(|r| r.starts_with(':'))
}

/// The stash entries made on `branch`, applied to the worktree and dropped.
fn unstash(wt: &mut Repository, branch: &str) -> Vec<String> {
    let mut mine = Vec::new();
    let _ = wt.stash_foreach(|i, message, _| {
        if stash_of(message, branch) {
            mine.push(i);
        }
        true
    });
    let mut notes = Vec::new();
    // The oldest first, each dropped once applied: the indices of the
    // newer ones do not move.
    for i in mine.into_iter().rev() {
        match wt.stash_apply(i, None) {
            Ok(()) => {
                let _ = wt.stash_drop(i);
                notes.push("its stashed work was applied back and is merged with the rest".into());
            }
            Err(e) => notes.push(format!(
                "a stash entry of {branch} could not be applied ({}): it stays in `git stash list`",
                e.message()
            )),
        }
    }
    notes
}

/// A worktree whose HEAD is apart from its worker branch: a branch
/// `<branch>-stray` at HEAD, checked out for the WIP commit.
fn stray_branch(wt: &Repository, branch: &str) -> Result<String, git2::Error> {
    let at = wt.head()?.peel_to_commit()?;
    let stray = worktree::free_name(&format!("{branch}-stray"), |n| {
        wt.find_branch(n, BranchType::Local).is_ok()
    });
    wt.branch(&stray, &at, false)?;
    wt.set_head(&format!("refs/heads/{stray}"))?;
    Ok(stray)
}

/// The WIP commit on `stray` done, its work merged into the worker branch
/// (a merge commit) and HEAD back on the branch; a conflict keeps `stray`.
fn fold_in(wt: &Repository, branch: &str, stray: &str) -> Result<String, git2::Error> {
    let mine = format!("refs/heads/{branch}");
    let ours = wt.find_commit(wt.refname_to_id(&mine)?)?;
    let theirs = wt.find_commit(wt.refname_to_id(&format!("refs/heads/{stray}"))?)?;
    let mut index = wt.merge_commits(&ours, &theirs, None)?;
    if index.has_conflicts() {
        return Ok(format!(
            "its work on branch {stray} conflicts with {branch}: {stray} is kept for a person to merge"
        ));
    }
    let tree = wt.find_tree(index.write_tree_to(wt)?)?;
    let (author, committer) = crate::repo::identities(wt)?;
    let message = format!("ralph: merge the work found on {stray}");
    wt.commit(
        Some(&mine),
        &author,
        &committer,
        &message,
        &tree,
        &[&ours, &theirs],
    )?;
    wt.set_head(&mine)?;
    wt.checkout_head(Some(CheckoutBuilder::new().force()))?;
    wt.find_branch(stray, BranchType::Local)?.delete()?;
    Ok(format!("its work on {stray} was merged into {branch}"))
}

/// The project's plan in the worktree put back as it is where the branch
/// and the run branch meet, when the agent changed it. Its note, if so.
fn plan_as_at_base(wt: &Repository, plan: &Path, run_branch: &str) -> Option<String> {
    let head = wt.head().ok()?.peel_to_commit().ok()?.id();
    let run = wt.refname_to_id(&format!("refs/heads/{run_branch}")).ok()?;
    let base: Oid = wt.merge_base(head, run).ok()?;
    let tree = wt.find_commit(base).ok()?.tree().ok()?;
    let blob = tree
        .get_path(plan)
        .ok()?
        .to_object(wt)
        .ok()?
        .peel_to_blob()
        .ok()?;
    let path = wt.workdir()?.join(plan);
    if std::fs::read(&path).ok().as_deref() == Some(blob.content()) {
        return None;
    }
    crate::formats::write_atomic(&path, blob.content()).ok()?;
    Some(format!(
        "its edits to {} were left out: the coordinator checks items off there once merged",
        plan.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stash_entries_are_known_by_the_branch_git_names() {
        let b = "ralph/r1/w1";
        assert!(stash_of("WIP on ralph/r1/w1: 1a2b3c4 initial", b));
        assert!(stash_of("On ralph/r1/w1: my notes", b));
        assert!(!stash_of("WIP on ralph/r1/w10: 1a2b3c4 initial", b));
        assert!(!stash_of("WIP on main: 1a2b3c4 initial", b));
        assert!(!stash_of("WIP on (no branch): 1a2b3c4 initial", b));
    }
}
