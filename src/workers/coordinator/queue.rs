//! The merge queue's step: one finished worker branch merged into the run
//! branch; then its unit checked off and committed, its worktree removed;
//! or its conflict handed back, or the unit left to a person.

use std::sync::mpsc;

use super::{Coordinator, read_plan, write_worker_plan};
use crate::error::{Error, Result};
use crate::events::Event;
use crate::text::printable;
use crate::workers::child::Msg;
use crate::workers::ledger::{Assignment, MergeRecord, Status, Task};
use crate::workers::{MergeRequest, Merged, assign, worktree};

impl Coordinator {
    /// Assignments whose work is in the run branch already, settled before
    /// any worker starts: a merge a killed coordinator made but had not
    /// recorded (recorded now, `already_merged`, instead of running its
    /// worker's loop again for nothing), a merge whose cleanup it did not
    /// finish, and branches left to a person that were merged by hand. A
    /// branch with no work of its own is not merged; one whose loop still
    /// runs (a worker of the dead coordinator finishing its checkpoint) is
    /// left until it ends.
    pub(super) fn settle_merged(&mut self, tx: &mpsc::Sender<Msg>) -> Result<()> {
        let run = self.ledger.run_branch.clone();
        let in_run = |a: &Assignment| {
            let tip = self.git.refname_to_id(&format!("refs/heads/{}", a.branch));
            tip.is_ok_and(|t| t.to_string() != a.base)
                && worktree::commits_ahead(&self.git, &a.branch, &run).is_ok_and(|c| c.is_empty())
        };
        let settle: Vec<(usize, bool)> = (0..self.ledger.assignments.len())
            .filter_map(|i| {
                let a = &self.ledger.assignments[i];
                if self.ledger.merged.contains(&a.item)
                    || matches!(a.status, Status::Left(_)) && in_run(a)
                {
                    Some((i, true))
                } else if matches!(a.status, Status::Running | Status::Paused)
                    && a.task == Task::Item
                    && in_run(a)
                    && !crate::workers::child::project_busy(&a.project_dir)
                {
                    Some((i, false))
                } else {
                    None
                }
            })
            .collect();
        for (i, recorded) in settle.into_iter().rev() {
            // Its loop ended while no coordinator listened.
            self.catch_up(&self.ledger.assignments[i].worker.clone());
            if !recorded {
                self.merge(i, tx)?;
                continue;
            }
            let a = &self.ledger.assignments[i];
            let how = if matches!(a.status, Status::Left(_)) {
                "merged by hand"
            } else {
                "merged before the last coordinator ended"
            };
            self.bus.emit_from(
                &a.worker.clone(),
                Event::Warning {
                    message: format!(
                        "{} is in {run} now ({how}): \"{}\" is done",
                        a.branch, a.item
                    ),
                },
            );
            self.git_write(|c| c.merged(i))?;
        }
        Ok(())
    }

    /// The merge queue's one step: merge assignment `i`'s branch; on
    /// success check its unit off and remove its worktree; on a conflict
    /// hand it back, or leave it to a person after the last attempt.
    pub(super) fn merge(&mut self, i: usize, tx: &mpsc::Sender<Msg>) -> Result<()> {
        let a = self.ledger.assignments[i].clone();
        let attempt = a.attempts + 1;
        let backup = format!(
            "refs/ralph/merges/{}/{}",
            self.ledger.run_id,
            self.ledger.merges.len() + 1
        );
        // Plan text in a commit message: `git log` would print its escapes.
        let message = format!("ralph: merge {} (\"{}\")", a.branch, printable(&a.item));
        let merged = self.git_write(|c| {
            crate::workers::merge(
                &c.git,
                &MergeRequest {
                    run_branch: &c.ledger.run_branch,
                    worker_branch: &a.branch,
                    backup_ref: &backup,
                    message: &message,
                },
            )
        })?;
        let wrote_backup = matches!(
            merged,
            Merged::FastForward { .. } | Merged::MergeCommit { .. } | Merged::Blocked { .. }
        );
        let backup = wrote_backup.then_some(backup);
        self.ledger.merges.push(MergeRecord {
            ts: crate::state::now_rfc3339(),
            worker: a.worker.clone(),
            item: a.item.clone(),
            branch: a.branch.clone(),
            attempt,
            merged: merged.clone(),
            backup: backup.clone(),
        });
        self.ledger.assignments[i].attempts = attempt;
        self.save()?;
        self.bus.emit_from(
            &a.worker,
            Event::Merge {
                item: a.item.clone(),
                branch: a.branch.clone(),
                attempt,
                merged: merged.clone(),
                backup,
            },
        );
        if let Merged::MergeCommit { id, .. } = &merged {
            self.ledger.made(id.clone());
        }
        match merged {
            Merged::AlreadyMerged | Merged::FastForward { .. } | Merged::MergeCommit { .. } => {
                self.git_write(|c| c.merged(i))
            }
            Merged::Conflict { files } if attempt < self.config.workers.conflict_attempts => {
                let a = &mut self.ledger.assignments[i];
                a.task = Task::Update;
                a.conflict = files.clone();
                let a = a.clone();
                write_worker_plan(&a.project_dir, &update_plan(&self.ledger.run_branch, &a))?;
                self.save()?;
                self.start(&a, true, tx)
            }
            Merged::Conflict { files } => {
                let why = format!(
                    "merge conflict in {} still unresolved after {attempt} attempt(s)",
                    files.join(", ")
                );
                self.leave(i, "conflict", why)
            }
            Merged::Blocked { reason } => self.leave(i, "merge_blocked", reason),
        }
    }

    fn leave(&mut self, i: usize, reason: &str, why: String) -> Result<()> {
        let a = self.ledger.assignments[i].clone();
        self.ledger.assignments[i].status = Status::Left(why.clone());
        self.save()?;
        self.bus.emit(Event::NeedsHuman {
            iteration: self.ledger.iterations,
            reason: reason.into(),
            message: format!(
                "{} (\"{}\"): {why}; its branch {} and worktree {} are kept",
                a.worker,
                a.item,
                a.branch,
                a.worktree.display()
            ),
        });
        Ok(())
    }

    /// Assignment `i` is merged: its unit checked off in the plan (one
    /// commit on the run branch), its worktree and branch removed.
    pub(super) fn merged(&mut self, i: usize) -> Result<()> {
        // In an order a kill at any step can resume: the plan (checking
        // off twice does nothing), the ledger's merged list, the worktree,
        // then the assignment.
        let a = self.ledger.assignments[i].clone();
        let text = read_plan(&self.plan_path)?;
        if let Some(checked) = assign::check_off(&text, &a.item) {
            crate::state::write_atomic(&self.plan_path, checked.as_bytes())?;
            let item = printable(&a.item);
            self.commit_plan(&format!("ralph: \"{item}\" done (merged {})", a.branch))?;
        }
        if !self.ledger.merged.contains(&a.item) {
            self.ledger.merged.push(a.item.clone());
        }
        self.save()?;
        if let Err(e) = worktree::remove_merged(
            &self.git,
            &a.worktree_name,
            &a.branch,
            &self.ledger.run_branch,
        ) {
            self.bus.emit(Event::Warning {
                message: format!("worktree {} kept: {e}", a.worktree.display()),
            });
        }
        self.ledger.assignments.remove(i);
        self.save()
    }

    /// The plan, committed alone on the run branch.
    fn commit_plan(&mut self, message: &str) -> Result<()> {
        let bytes = std::fs::read(&self.plan_path)
            .map_err(|e| Error::io("cannot read", &self.plan_path, e))?;
        let id = commit_alone(&self.git, &self.plan_in_tree, &bytes, message)
            .map_err(|e| Error::wrap("cannot commit the plan", e))?;
        self.ledger.made(id.to_string());
        Ok(())
    }
}

/// Commit `bytes` as `path` (relative to the work tree's top) on HEAD and
/// nothing else: the tree is HEAD's with that one entry replaced, never the
/// index, which may hold what a merge cut short by kill -9 had staged (a
/// plan check-off once carried another item's files onto the run branch
/// that way). The index then agrees with the commit for `path`.
fn commit_alone(
    git: &git2::Repository,
    path: &std::path::Path,
    bytes: &[u8],
    message: &str,
) -> std::result::Result<git2::Oid, git2::Error> {
    let parent = git.head()?.peel_to_commit()?;
    let base = parent.tree()?;
    let mode = match base.get_path(path) {
        Ok(e) if e.filemode() == 0o100755 => git2::FileMode::BlobExecutable,
        _ => git2::FileMode::Blob,
    };
    let blob = git.blob(bytes)?;
    let mut update = git2::build::TreeUpdateBuilder::new();
    update.upsert(path, blob, mode);
    let tree = git.find_tree(update.create_updated(git, &base)?)?;
    let (author, committer) = crate::repo::identities(git)?;
    let id = git.commit(
        Some("HEAD"),
        &author,
        &committer,
        message,
        &tree,
        &[&parent],
    )?;
    let mut index = git.index()?;
    index.add_path(path)?;
    index.write()?;
    Ok(id)
}

/// The plan of a worker sent back to bring its branch up to date.
fn update_plan(run_branch: &str, a: &Assignment) -> String {
    format!(
        "# Bring branch {} up to date with {run_branch}\n\n- [ ] Merge `{run_branch}` into this branch (`git merge {run_branch}`), resolve the conflicts in {} so that both sides' work is kept (this branch did: \"{}\"), and commit the merge\n",
        a.branch,
        a.conflict
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", "),
        a.item
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn the_plan_is_committed_alone_whatever_the_index_holds() {
        let dir = tempfile::tempdir().unwrap();
        let git = git2::Repository::init(dir.path()).unwrap();
        let mut config = git.config().unwrap();
        config.set_str("user.name", "t").unwrap();
        config.set_str("user.email", "t@example.com").unwrap();
        std::fs::write(dir.path().join("fix_plan.md"), "- [ ] a\n").unwrap();
        let mut index = git.index().unwrap();
        index.add_path(Path::new("fix_plan.md")).unwrap();
        let tree = git.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        git.commit(Some("HEAD"), &sig, &sig, "initial", &tree, &[])
            .unwrap();
        // Another item's file, staged by a merge a kill cut short.
        std::fs::write(dir.path().join("other.txt"), "not this commit's\n").unwrap();
        index.add_path(Path::new("other.txt")).unwrap();
        index.write().unwrap();
        std::fs::write(dir.path().join("fix_plan.md"), "- [x] a\n").unwrap();

        let id = commit_alone(&git, Path::new("fix_plan.md"), b"- [x] a\n", "done").unwrap();
        let tree = git.find_commit(id).unwrap().tree().unwrap();
        assert!(tree.get_path(Path::new("other.txt")).is_err());
        let plan = tree.get_path(Path::new("fix_plan.md")).unwrap();
        assert_eq!(git.find_blob(plan.id()).unwrap().content(), b"- [x] a\n");
        let statuses = git.statuses(None).unwrap();
        let status = |p: &str| {
            statuses
                .iter()
                .find(|s| s.path() == Some(p))
                .map(|s| s.status())
        };
        assert_eq!(status("fix_plan.md"), None, "the plan is clean");
        assert_eq!(
            status("other.txt"),
            Some(git2::Status::INDEX_NEW),
            "left as it was"
        );
    }
}
