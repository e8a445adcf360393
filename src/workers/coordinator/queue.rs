//! The merge queue's step: one finished worker branch merged into the run
//! branch; then its unit checked off and committed, its worktree removed;
//! or its conflict handed back, or the unit left to a person.

use std::sync::mpsc;

use super::machine::Input;
use super::{Coordinator, write_worker_plan};
use crate::error::Result;
use crate::formats::Event;
use crate::formats::Merged;
use crate::formats::ledger::{Assignment, MergeRecord, Status, Task};
use crate::plan::units;
use crate::repo::worktree;
use crate::text::printable;
use crate::workers::MergeRequest;
use crate::workers::child::Msg;

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
            ts: crate::formats::now_rfc3339(),
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
        let done = Input::MergeDone {
            item: &a.item,
            attempt,
            merged: &merged,
        };
        self.handle(done, tx)
    }

    /// `i`'s worker sent back to bring its branch up to date with the run
    /// branch: now, or (`start` false: the run is halted) by the next run.
    pub(super) fn hand_back(
        &mut self,
        i: usize,
        files: Vec<String>,
        start: bool,
        tx: &mpsc::Sender<Msg>,
    ) -> Result<()> {
        let a = &mut self.ledger.assignments[i];
        a.task = Task::Update;
        a.conflict = files;
        if !start {
            a.status = Status::Paused;
        }
        let a = a.clone();
        write_worker_plan(&a.project_dir, &update_plan(&self.ledger.run_branch, &a))?;
        self.save()?;
        if start {
            self.start(&a, true, tx)?;
        }
        Ok(())
    }

    pub(super) fn leave(&mut self, i: usize, reason: &str, why: String) -> Result<()> {
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
        let text = self.plan_text()?;
        if let Some(checked) = units::check_off(&text, &a.item) {
            let item = printable(&a.item);
            self.commit_plan(
                &checked,
                &format!("ralph: \"{item}\" done (merged {})", a.branch),
            )?;
        } else if !units::unit_done(&text, &a.item) && !self.ledger.merged.contains(&a.item) {
            // Reworded or removed while its worker ran: the merge is said,
            // not hidden behind "every item is merged and checked off".
            self.bus.emit(Event::Warning {
                message: format!(
                    "\"{}\" is merged ({}), but the plan no longer has it (reworded or removed during the run): nothing is checked off for it, and a reworded item is a new item to ralph, worked on its own",
                    printable(&a.item),
                    a.branch
                ),
            });
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

    /// Merged units the plan shows open again (an editor saving a copy of
    /// the plan from before their check-off): checked off again, in one
    /// commit, and said. Left open, they were neither worked again (they
    /// are merged) nor done: the run ended "incomplete" with nothing left
    /// to a person, and every later `ralph run` the same.
    pub(super) fn recheck_merged(&mut self) -> Result<()> {
        let mut text = self.plan_text()?;
        let mut again = Vec::new();
        for item in &self.ledger.merged {
            if let Some(checked) = units::check_off(&text, item) {
                text = checked;
                again.push(format!("\"{}\"", printable(item)));
            }
        }
        if again.is_empty() {
            return Ok(());
        }
        let names = again.join(", ");
        self.commit_plan(
            &text,
            &format!(
                "ralph: {names} checked off again (merged in this run; the plan showed them open)"
            ),
        )?;
        self.bus.emit(Event::Warning {
            message: format!(
                "{names}: merged in this run, but the plan showed them open again (a copy of the plan saved over its check-offs?): checked off again; to have one done again, uncheck it after this run ends and `ralph run` again"
            ),
        });
        Ok(())
    }
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
