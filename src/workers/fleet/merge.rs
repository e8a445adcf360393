//! Merging a finished item into the run branch under the merge lease.
//!
//! One atomic push does it all, each ref checked against what this worker
//! saw: the run branch moves from its old tip to a merge commit (first
//! parent the old tip, second the item's branch, the plan checked off by
//! the merger — the only writer of the plan on the run branch), a backup
//! ref keeps the old tip, the item's claim, branch and snapshot are
//! deleted, and the ledger counts the item as done. If another worker took
//! the item over, its claim no longer matches and nothing at all is
//! written: an item is merged exactly once.
//! A conflict writes nothing and hands the item back to its worker's loop.

use std::path::Path;
use std::time::Duration;

use git2::{Oid, build::TreeUpdateBuilder};
use serde::{Deserialize, Serialize};

use super::child;
use super::job::{ItemEnd, Job};
use super::lease::Lease;
use super::loops::{self, LoopEnd};
use super::remote::{Spent, WorkerState};
use super::say::FleetEvent;
use super::units::{Unit, check_off};
use super::wire::{Update, WireError};
use super::worker::Worker;
use crate::error::{Error, Result};

/// What a merge commit's message carries after its summary line (read
/// back by `ralph status --fleet` for the fleet's history).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MergeRecord {
    pub(crate) item: String,
    pub(crate) text: String,
    pub(crate) worker: String,
    /// The claim's generation: above 1 when the item was taken over.
    pub(crate) generation: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) took_over_from: Option<String>,
}

enum Attempt {
    Merged(Oid),
    Conflict(Vec<String>),
    /// The run branch already has the item checked off (merged by another).
    AlreadyDone,
}

impl Worker {
    /// `Some(end)`, or `None` on a conflict (the loop runs once more); and
    /// what became of the loop's round. A merged round's record (`loops.rs`)
    /// is created in the merge's own push; the caller pushes the others'.
    pub(super) fn merge(&mut self, job: &mut Job) -> Result<(Option<ItemEnd>, LoopEnd)> {
        let unit = job.unit.clone();
        let names = self.fleet.names().clone();
        let key = unit.key.clone();
        self.status(WorkerState::Merging, Some(&unit), "");
        let every = self.fleet.lease_length() / 3;
        // The item's branch on the remote first: the merge deletes it there by its value.
        loop {
            match self.push_work(job) {
                Ok(()) => break,
                Err(WireError::Rejected(_)) => return self.lost(&unit),
                Err(WireError::Refused(m)) => {
                    return Ok((Some(ItemEnd::Refused(m)), LoopEnd::GivenUp));
                }
                Err(_) if child::stop_requested() => {
                    return Ok((Some(ItemEnd::Stopped), LoopEnd::Released));
                }
                Err(e) => {
                    let wait = self.unreachable(&e);
                    self.pause(wait);
                }
            }
        }
        loop {
            if child::stop_requested() && self.unreachable_since.is_some() {
                // Committed here, pushed as far as it got; the claim expires.
                return Ok((Some(ItemEnd::Stopped), LoopEnd::Released));
            }
            if job.held.renewed.elapsed() >= every {
                match self.fleet.renew(&mut job.held) {
                    Ok(()) => {}
                    Err(WireError::Rejected(_)) => return self.lost(&unit),
                    Err(e) => {
                        let wait = self.unreachable(&e);
                        self.pause(wait);
                        continue;
                    }
                }
            }
            let Some(view) = self.sync() else { continue };
            let lease = match self.fleet.acquire(
                &names.merge_lease(),
                super::lease::MERGE,
                "",
                view.merge.as_ref(),
            ) {
                Ok(Some(lease)) => lease,
                Ok(None) => {
                    self.pause(Duration::from_millis(300));
                    continue;
                }
                Err(e) => {
                    let wait = self.unreachable(&e);
                    self.pause(wait);
                    continue;
                }
            };
            let run = view.run.expect("joined");
            let item_tip = job.pushed_item.expect("pushed above");
            let said;
            let attempt = self.merge_commit(run, item_tip, &unit, &job.held.lease);
            let pushed = match attempt {
                Ok(Attempt::Merged(commit)) => {
                    // The loop's record carries the merge's own event: on
                    // the remote exactly when the merge is.
                    let merged = self.say.record(FleetEvent::Merged {
                        item: key.clone(),
                        text: unit.text.clone(),
                        commit: commit.to_string(),
                    });
                    let carried = self.say.unpushed().len();
                    let (record, oid) = self
                        .loop_record(job, Some(0), LoopEnd::Merged, "", Some(&merged))
                        .map_err(|e| Error::wrap("cannot record the item's loop", e))?;
                    let record = Update::create(loops::refname(&names, &record), oid);
                    said = (merged, carried);
                    let stamp = format!("{}-{key}", jiff::Timestamp::now().as_millisecond());
                    let mut updates = vec![
                        Update::swap(names.run_branch(), run, commit),
                        Update::create(names.backup(&stamp), run),
                        Update::delete(names.item_branch(&key), item_tip),
                        Update::delete(names.claim(&key), job.held.oid),
                        record,
                    ];
                    if let Some(s) = job.pushed_snapshot {
                        updates.push(Update::delete(names.snapshot(&key), s));
                    }
                    // The item counted as done in the same push: exact.
                    let done = Spent {
                        items_done: 1,
                        ..Spent::default()
                    };
                    match self.fleet.spending(&view, done, None) {
                        Ok((ledger, _)) => {
                            updates.push(ledger);
                            self.fleet.wire().push(&updates).map(|()| commit)
                        }
                        Err(e) => Err(e),
                    }
                }
                other => {
                    let _ = self.fleet.release(&lease);
                    return match other {
                        Ok(Attempt::AlreadyDone) => {
                            let _ = self.fleet.release(&job.held);
                            Ok((Some(ItemEnd::Gone), LoopEnd::AlreadyDone))
                        }
                        Ok(Attempt::Conflict(files)) => {
                            self.say.say(FleetEvent::Conflict { item: key, files });
                            Ok((None, LoopEnd::Conflict))
                        }
                        Err(e) => Err(Error::wrap("cannot merge the item", e)),
                        Ok(Attempt::Merged(_)) => unreachable!("handled above"),
                    };
                }
            };
            let _ = self.fleet.release(&lease);
            match pushed {
                Ok(_) => {
                    let (merged, carried) = said;
                    self.say.pushed(carried);
                    self.say.said(merged);
                    self.say.pushed(1);
                    self.spent.items_done += 1;
                    return Ok((Some(ItemEnd::Merged), LoopEnd::Merged));
                }
                // Not a race: the same push gets the same answer.
                Err(WireError::Refused(m)) => {
                    return Ok((Some(ItemEnd::Refused(m)), LoopEnd::GivenUp));
                }
                // The run branch moved, or our claim is gone: look again.
                Err(WireError::Rejected(_)) => {
                    let view = self.fleet.sync().ok();
                    if view.is_some_and(|v| v.claims.get(&key).map(|c| c.0) != Some(job.held.oid)) {
                        return self.lost(&unit);
                    }
                }
                Err(e) => {
                    let wait = self.unreachable(&e);
                    self.pause(wait);
                }
            }
        }
    }

    fn lost(&mut self, unit: &Unit) -> Result<(Option<ItemEnd>, LoopEnd)> {
        let holder = self.holder_of(&unit.key);
        self.say.say(FleetEvent::Lost {
            item: unit.key.clone(),
            holder,
        });
        Ok((Some(ItemEnd::Gone), LoopEnd::Lost))
    }

    /// The merge commit of `item` into `run` with the plan checked off.
    fn merge_commit(
        &self,
        run: Oid,
        item: Oid,
        unit: &Unit,
        lease: &Lease,
    ) -> std::result::Result<Attempt, git2::Error> {
        let repo = self.fleet.repo();
        let plan_path = self.plan_rel.to_string_lossy().into_owned();
        let run_c = repo.find_commit(run)?;
        let plan_text = match self.plan_text(run) {
            Ok(t) => t,
            Err(_) => return Err(git2::Error::from_str("the run branch has no plan")),
        };
        // Checked off already (or gone from the plan): merged by another.
        let Some(checked) = check_off(&plan_text, unit) else {
            return Ok(Attempt::AlreadyDone);
        };
        let item_c = repo.find_commit(item)?;
        let mut index = repo.merge_commits(&run_c, &item_c, None)?;
        // ralph's own files: the plan and the prompt file are the run
        // branch's (the merger writes the plan; every loop regenerates its
        // prompt), and a handoff both sides wrote keeps the item's.
        let prompt = self
            .root_rel
            .join(&self.config.prompt_file)
            .to_string_lossy()
            .into_owned();
        let own_dir = format!(
            "{}/",
            self.root_rel
                .join(crate::formats::RALPH_DIR)
                .to_string_lossy()
        );
        for path in [&plan_path, &prompt] {
            let _ = index.remove_path(Path::new(path));
        }
        let theirs: Vec<git2::IndexEntry> = index
            .conflicts()?
            .filter_map(|c| c.ok())
            .filter_map(|c| c.their)
            .filter(|e| e.path.starts_with(own_dir.as_bytes()))
            .collect();
        for mut entry in theirs {
            let path = String::from_utf8_lossy(&entry.path).into_owned();
            index.remove_path(Path::new(&path))?;
            entry.flags &= !0x3000; // stage 0: resolved
            index.add(&entry)?;
        }
        if index.has_conflicts() {
            return Ok(Attempt::Conflict(crate::workers::merge::conflicted(&index)));
        }
        let merged = repo.find_tree(index.write_tree_to(repo)?)?;
        let blob = repo.blob(checked.as_bytes())?;
        let run_tree = run_c.tree()?;
        let mode_of = |path: &str| match run_tree.get_path(Path::new(path)) {
            Ok(e) if e.filemode() == 0o100755 => git2::FileMode::BlobExecutable,
            _ => git2::FileMode::Blob,
        };
        let mut update = TreeUpdateBuilder::new();
        update.upsert(&plan_path, blob, mode_of(&plan_path));
        // (Left out of the index above: absent unless the run branch has it.)
        if let Ok(e) = run_tree.get_path(Path::new(&prompt)) {
            update.upsert(&prompt, e.id(), mode_of(&prompt));
        }
        let tree = update.create_updated(repo, &merged)?;
        let tree = repo.find_tree(tree)?;
        let sig = super::remote::signature()?;
        let record = MergeRecord {
            item: unit.key.clone(),
            text: unit.text.clone(),
            worker: self.fleet.worker().to_string(),
            generation: lease.generation,
            took_over_from: lease.took_over_from.clone(),
        };
        let message = format!(
            "ralph fleet: merge \"{}\" ({}) from {}\n\n{}\n",
            crate::text::cut(&unit.text, 200),
            unit.key,
            self.fleet.worker(),
            serde_json::to_string(&record).expect("a record serialises")
        );
        Ok(Attempt::Merged(repo.commit(
            None,
            &sig,
            &sig,
            &message,
            &tree,
            &[&run_c, &item_c],
        )?))
    }
}
