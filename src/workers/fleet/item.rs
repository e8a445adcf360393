//! One item's work in its worktree: the worktree on the item's branch (a
//! takeover's pushed snapshot committed on top: the crash handoff across
//! machines), the item's loop supervised while the claim is renewed and
//! the branch and a snapshot pushed every third of a lease, what the loop
//! left committed and accounted, and the claim released with the work
//! pushed when the loop ends without completing.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use git2::{Oid, Repository, WorktreeAddOptions, WorktreePruneOptions};

use super::child::{self, Loop};
use super::job::{Halt, ItemEnd, Job, Left};
use super::leave::{Giving, Work};
use super::loops::{self, LoopEnd, LoopRecord};
use super::remote::{Held, Ledger, Limit, WorkerState};
use super::say::FleetEvent;
use super::units::Unit;
use super::wire::{Update, WireError};
use super::worker::Worker;
use crate::error::{Error, Result};
use crate::formats::{Grant, Record};
use crate::repo::{OwnPaths, Repo};

/// The sessions granted to one start of an item's loop, counted from the
/// round's iterations when it started.
struct Granting {
    from: u64,
    sessions: u32,
}

impl Worker {
    /// A fresh worktree on the item's branch (its pushed tip, or the run
    /// branch); on a takeover, the previous holder's newer snapshot is
    /// committed on top (the crash handoff). Returns the worktree's project
    /// root and the note for the agent.
    pub(super) fn prepare(
        &mut self,
        unit: &Unit,
        held: &Held,
        base: Oid,
        snapshot: Option<Oid>,
    ) -> Result<(PathBuf, Option<String>)> {
        let names = self.fleet.names().clone();
        let repo = self.fleet.repo();
        let git = |e: git2::Error| Error::wrap("cannot prepare the item's worktree", e);
        let mut tip = base;
        let mut note = None;
        if let Some(from) = &held.lease.took_over_from {
            note = Some(format!(
                "This item was taken over from worker {from}, whose lease expired (a crash or a preemption). \
                 Its work so far is on this branch (the last commits, including a WIP commit of its work tree); \
                 check what is done and carry on from there."
            ));
            if let Some(snap) = snapshot.and_then(|s| repo.find_commit(s).ok())
                && let Ok(parent) = snap.parent(0)
                && (parent.id() == base
                    || repo.graph_descendant_of(parent.id(), base).unwrap_or(false))
                && snap.tree_id() != parent.tree_id()
            {
                let sig = super::remote::signature().map_err(git)?;
                let msg = format!(
                    "ralph fleet: take over \"{}\" from {from} (WIP: its work tree as last pushed)\n\nItem: {}\nSnapshot: {}\n",
                    crate::text::cut(&unit.text, 200),
                    unit.key,
                    snap.id()
                );
                tip = repo
                    .commit(
                        None,
                        &sig,
                        &sig,
                        &msg,
                        &snap.tree().map_err(git)?,
                        &[&parent],
                    )
                    .map_err(git)?;
                self.say.say(FleetEvent::Restored {
                    item: unit.key.clone(),
                    commit: tip.to_string(),
                });
            }
        }
        let branch = names.item_branch(&unit.key);
        let path = self.worktree_path(&unit.key);
        self.remove_worktree(&unit.key);
        let repo = self.fleet.repo();
        let reference = repo
            .reference(&branch, tip, true, "ralph fleet: the item's branch")
            .map_err(git)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("cannot create", dir, e))?;
        }
        let mut opts = WorktreeAddOptions::new();
        opts.reference(Some(&reference));
        repo.worktree(&worktree_name(names.fleet(), &unit.key), &path, Some(&opts))
            .map_err(git)?;
        Ok((path.join(&self.root_rel), note))
    }

    fn loops_dir(&self) -> PathBuf {
        crate::formats::Layout::new(&self.root)
            .fleet()
            .join(self.fleet.names().fleet())
            .join("loops")
    }

    pub(super) fn worktree_path(&self, key: &str) -> PathBuf {
        crate::formats::Layout::new(&self.root)
            .fleet()
            .join(self.fleet.names().fleet())
            .join(key)
    }

    /// Remove the item's worktree, keeping its loop's records (state,
    /// events, transcripts, report) under `.ralph/fleet/<name>/loops/`.
    pub(super) fn remove_worktree(&self, key: &str) {
        let records =
            crate::formats::Layout::new(&self.worktree_path(key).join(&self.root_rel)).dir;
        if records.is_dir() {
            let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%S");
            let kept = self.loops_dir().join(format!("{key}-{stamp}"));
            let _ = std::fs::create_dir_all(self.loops_dir());
            let _ = std::fs::rename(&records, &kept);
        }
        let repo = self.fleet.repo();
        if let Ok(wt) = repo.find_worktree(&worktree_name(self.fleet.names().fleet(), key)) {
            let _ = wt.prune(Some(
                WorktreePruneOptions::new()
                    .valid(true)
                    .locked(true)
                    .working_tree(true),
            ));
        }
        let _ = std::fs::remove_dir_all(self.worktree_path(key));
    }

    /// Run the item's loop: renew, push and say while it works; put what
    /// it spends on the ledger as each iteration ends; stop it when the
    /// fleet's budget is spent or a usage limit pauses the fleet; forward
    /// a stop. `None`: the item was lost to a takeover (its loop stopped).
    pub(super) fn supervise(&mut self, job: &mut Job) -> Result<Option<i32>> {
        let mut args = self.loop_args.clone();
        if let Some(left) = self.iterations_left() {
            args.extend(["--max-iterations".into(), left.max(1).to_string().into()]);
        }
        // Each session waits for this worker's grant: the first now (the
        // ledger covered it when the item was claimed), each next one once
        // the ledger has the last and still covers one more.
        args.push("--granted".into());
        // The models' windows are remembered in this worker's project.
        args.extend(["--home".into(), self.root.clone().into_os_string()]);
        let mut grant = Granting {
            from: job.meter.counted.iterations,
            sessions: 1,
        };
        crate::formats::create_dir_private(&crate::formats::Layout::new(&job.wt_root).dir)?;
        Grant { sessions: 1 }.write(&job.wt_root)?;
        let env = [
            ("RALPH_FLEET", self.fleet.names().fleet().to_string()),
            ("RALPH_WORKER", self.fleet.worker().to_string()),
            ("RALPH_FLEET_ITEM", job.unit.key.clone()),
            // The same name a worker on one machine gets (docs/workers.md).
            ("RALPH_ITEM", job.unit.text.clone()),
        ];
        let mut child = Loop::start(&job.wt_root, &args, &env)?;
        let every = self.fleet.lease_length() / 3;
        // Due a third of a lease after the last renewal, not after this
        // loop's start: short rounds must not starve the lease.
        let mut next_beat = job.held.renewed + every;
        let grace = self.config.fleet.grace.0;
        loop {
            if let Some(code) = child.exited() {
                job.meter.read(self.fleet.worker());
                return Ok(Some(code));
            }
            if child::stop_requested() {
                child.ask_to_stop();
                // Two thirds of the grace for the loop's checkpoint, the rest for the push.
                if child
                    .stop_sent()
                    .is_some_and(|t| t.elapsed() >= grace * 2 / 3)
                {
                    return Ok(Some(child.kill()));
                }
            } else {
                self.meter(job, &mut child);
                self.grant_next(job, &mut grant);
                let live = job.meter.live();
                self.live(&job.unit, live);
                if Instant::now() >= next_beat {
                    match self.beat(job) {
                        Ok(()) => {
                            next_beat = Instant::now() + every;
                            // What the others spent, and a limit they hit.
                            if let Ok((_, ledger)) = self.fleet.fetch_ledger() {
                                self.judge(job, &mut child, &ledger);
                            }
                        }
                        // Asked again, the rule answers the same: stop the
                        // loop (a checkpoint) and give the item up.
                        Err(WireError::Refused(message)) => {
                            next_beat = Instant::now() + every;
                            if job.halt.is_none() {
                                self.say.say(FleetEvent::Refused {
                                    item: job.unit.key.clone(),
                                    message: message.clone(),
                                });
                                child.halt();
                                job.halt = Some(Halt::Refused(message));
                            }
                        }
                        Err(WireError::Rejected(_)) => {
                            child.ask_to_stop();
                            child.finish_within(grace);
                            job.meter.read(self.fleet.worker());
                            let holder = self.holder_of(&job.unit.key);
                            self.say.say(FleetEvent::Lost {
                                item: job.unit.key.clone(),
                                holder,
                            });
                            return Ok(None);
                        }
                        Err(e) => {
                            let wait = self.unreachable(&e);
                            next_beat = Instant::now() + wait.min(every);
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Read the loop's log; put what it owes on the ledger (an iteration's
    /// spending, a usage limit), then judge by the ledger. An unreachable
    /// remote: kept owed, tried again after the back-off.
    fn meter(&mut self, job: &mut Job, child: &mut Loop) {
        let worker = self.fleet.worker().to_string();
        job.meter.read(&worker);
        if !job.meter.due() {
            return;
        }
        match self.pay(job) {
            Ok(ledger) => self.judge(job, child, &ledger),
            Err(e) => {
                let wait = match e {
                    WireError::Unreachable(_) => self.unreachable(&e),
                    _ => self.poll(),
                };
                job.meter.retry_at = Some(Instant::now() + wait);
            }
        }
    }

    /// One more session for the item's loop once the ledger has what its
    /// last one spent and the fleet's budget still covers one (`judge`
    /// halted the loop otherwise): a fleet overruns its budget by at most
    /// the sessions running on the other machines. While the remote cannot
    /// be reached the loop goes on, what it spends owed (as before grants).
    fn grant_next(&self, job: &Job, grant: &mut Granting) {
        let paid = job.meter.owed.is_zero() || self.unreachable_since.is_some();
        if job.halt.is_some() || !paid {
            return;
        }
        let ended = job.meter.counted.iterations.saturating_sub(grant.from);
        let next = u32::try_from(ended + 1).unwrap_or(u32::MAX);
        if next > grant.sessions {
            grant.sessions = next;
            if let Err(e) = (Grant { sessions: next }).write(&job.wt_root) {
                // The loop waits until a later write lands, or the stop.
                tracing::warn!("cannot grant the item's loop its next session: {e}");
            }
        }
    }

    /// What the loop owes, on the ledger; the ledger after it.
    pub(super) fn pay(&mut self, job: &mut Job) -> std::result::Result<Ledger, WireError> {
        let worker = self.fleet.worker().to_string();
        let owed = job.meter.owed;
        let limit = job.meter.limit_owed.clone();
        let ledger = self.fleet.update_ledger(|l| {
            l.add(&worker, owed);
            if let Some(limit) = &limit {
                l.limit_until(limit.clone());
            }
        })?;
        job.meter.paid();
        self.spent = self.spent.plus(owed);
        self.reconnected();
        if let Some(limit) = limit {
            self.say.say(FleetEvent::LimitShared { until: limit.until });
        }
        Ok(ledger)
    }

    /// Stop the loop (a checkpoint with a handoff, as `ralph stop` does) when
    /// the ledger says the fleet's budget is spent, or that a usage limit
    /// hit by another worker has not reset.
    fn judge(&mut self, job: &mut Job, child: &mut Loop, ledger: &Ledger) {
        if job.halt.is_some() {
            return;
        }
        if let Some(what) = self.budget_spent(ledger) {
            self.say.say(FleetEvent::BudgetSpent { what: what.clone() });
            child.halt();
            job.halt = Some(Halt::Budget(what));
            return;
        }
        let now = jiff::Timestamp::now();
        if let Some(limit) = ledger.limited(now)
            && limit.by != self.fleet.worker()
            && !job.meter.waiting_itself(now)
        {
            self.say.say(FleetEvent::Paused {
                by: limit.by.clone(),
                until: limit.until,
                item: Some(job.unit.key.clone()),
            });
            child.halt();
            job.halt = Some(Halt::Limit(limit.clone()));
        }
    }

    /// A usage limit paused the item's loop: push the work, keep the claim
    /// (renewed) until it resets. `Some(end)`: the item was lost or the
    /// worker stopped meanwhile; `None`: go on with the item.
    pub(super) fn wait_out(&mut self, job: &mut Job, limit: Limit) -> Result<Option<ItemEnd>> {
        let mut limit = limit;
        let _ = self.push_work(job);
        let every = self.fleet.lease_length() / 3;
        loop {
            self.status(
                WorkerState::Waiting,
                Some(&job.unit.clone()),
                &format!(
                    "paused: usage limit hit by {} until {}",
                    limit.by, limit.until
                ),
            );
            let left = limit
                .until
                .duration_since(jiff::Timestamp::now())
                .unsigned_abs()
                .min(every);
            self.pause(left);
            if child::stop_requested() {
                return Ok(Some(self.leave_item(job, "stopped by a signal", 130, None)));
            }
            match self.fleet.renew(&mut job.held) {
                Ok(()) => self.reconnected(),
                Err(WireError::Rejected(_)) => {
                    let holder = self.holder_of(&job.unit.key);
                    self.say.say(FleetEvent::Lost {
                        item: job.unit.key.clone(),
                        holder,
                    });
                    return Ok(Some(ItemEnd::Gone));
                }
                Err(e) => {
                    self.unreachable(&e);
                }
            }
            let now = jiff::Timestamp::now();
            if limit.until <= now {
                // Extended by another worker's limit meanwhile?
                match self.fleet.fetch_ledger() {
                    Ok((_, ledger)) => match ledger.limited(now) {
                        Some(l) => limit = l.clone(),
                        None => return Ok(None),
                    },
                    Err(e) => {
                        self.unreachable(&e);
                    }
                }
            }
        }
    }

    /// Renew the claim, push the item's branch and a snapshot of its work tree.
    pub(super) fn beat(&mut self, job: &mut Job) -> std::result::Result<(), WireError> {
        self.fleet.renew(&mut job.held)?;
        self.push_work(job)?;
        self.reconnected();
        self.status(WorkerState::Working, Some(&job.unit), "");
        Ok(())
    }

    /// Push the item branch (its local tip) and a fresh snapshot of the worktree.
    pub(super) fn push_work(&mut self, job: &mut Job) -> std::result::Result<(), WireError> {
        let (branch, snapshot) = self.item_work(job);
        let updates: Vec<Update> = [branch.update(), snapshot.update()]
            .into_iter()
            .flatten()
            .collect();
        self.fleet.wire().push(&updates)?;
        if branch.local.is_some() {
            job.pushed_item = branch.local;
        }
        if snapshot.local.is_some() {
            job.pushed_snapshot = snapshot.local;
        }
        Ok(())
    }

    /// The item's branch and a fresh snapshot of its worktree: each in the
    /// clone and as last pushed.
    fn item_work(&self, job: &Job) -> (Work, Work) {
        let names = self.fleet.names();
        let key = job.unit.key.as_str();
        let branch = Work {
            refname: names.item_branch(key),
            local: self.fleet.local_ref(&names.item_branch(key)),
            pushed: job.pushed_item,
        };
        let snapshot = Work {
            refname: names.snapshot(key),
            local: self.snapshot(key, &job.wt_root),
            pushed: job.pushed_snapshot,
        };
        (branch, snapshot)
    }

    /// The worktree recorded as a snapshot commit (the safety net's staging rules).
    pub(super) fn snapshot(&self, key: &str, wt_root: &Path) -> Option<Oid> {
        let repo = Repo::open(wt_root).ok()??;
        let own = OwnPaths::new(&self.config.prompt_file);
        repo.record_snapshot(&format!("fleet-{key}"), 1, &own, &self.config.git.guard())
            .ok()?;
        let prefix = format!(
            "{}{}/fleet-{key}/1",
            crate::repo::SNAPSHOT_REFS,
            repo.scope_key()
        );
        Repository::discover(wt_root)
            .ok()?
            .refname_to_id(&prefix)
            .ok()
    }

    /// Commit what the loop left uncommitted (its WIP commit rules).
    pub(super) fn commit_leftovers(&self, job: &Job, code: i32) {
        let unit = &job.unit;
        let Ok(Some(repo)) = Repo::open(&job.wt_root) else {
            return;
        };
        let own = OwnPaths::new(&self.config.prompt_file);
        let what = if code == 0 { "done" } else { "WIP" };
        let msg = format!(
            "ralph fleet: {what}: {} ({})\n\nWorker: {}\n",
            crate::text::cut(&unit.text, 200),
            unit.key,
            self.fleet.worker()
        );
        let _ = repo.wip_commit(&msg, &own);
    }

    /// The rest of what the item's loop spent, on the ledger (retried while
    /// the remote cannot be reached). A worker that is stopping leaves it
    /// owed: its exit's one push carries it (`leave.rs`).
    pub(super) fn account(&mut self, job: &mut Job) {
        job.meter.read(self.fleet.worker());
        if job.meter.owed.is_zero() && job.meter.limit_owed.is_none() {
            return;
        }
        if child::stop_requested() {
            self.owed = (
                self.owed.0.plus(job.meter.owed),
                job.meter.limit_owed.take().or(self.owed.1.take()),
            );
            job.meter.paid();
            return;
        }
        loop {
            match self.pay(job) {
                Err(e @ WireError::Unreachable(_)) if !child::stop_requested() => {
                    let wait = self.unreachable(&e);
                    self.pause(wait);
                }
                _ => return,
            }
        }
    }

    /// The loop's record (`loops.rs`) for the round that just ended, and
    /// its commit: the round's log, the loop's state and the worker's
    /// records not on the remote yet (with `to_say`, said once the record
    /// is pushed: `Say::pushed` then) in its tree.
    pub(super) fn loop_record(
        &self,
        job: &Job,
        code: Option<i32>,
        end: LoopEnd,
        why: &str,
        to_say: Option<&Record>,
    ) -> std::result::Result<(LoopRecord, Oid), WireError> {
        let lease = &job.held.lease;
        let record = LoopRecord {
            item: job.unit.key.clone(),
            text: job.unit.text.clone(),
            worker: self.fleet.worker().to_string(),
            generation: lease.generation,
            took_over_from: lease.took_over_from.clone(),
            round: job.round,
            started_at: job.round_started,
            ended_at: jiff::Timestamp::now(),
            exit_code: code,
            iterations: job.meter.counted.iterations,
            cost_usd: job.meter.counted.cost_usd,
            end,
            why: why.to_string(),
        };
        let state = std::fs::read(crate::formats::Layout::new(&job.wt_root).state()).ok();
        let mut said = self.say.unpushed().to_vec();
        said.extend(to_say.cloned());
        let oid = loops::commit(
            self.fleet.repo(),
            &record,
            job.meter.round_log().as_bytes(),
            state.as_deref(),
            &said,
        )?;
        Ok((record, oid))
    }

    /// Push the loop's record on its own (every end but a merge, whose
    /// record goes in the merge's push). Best effort: the morning report
    /// lacks the round when it cannot be pushed.
    pub(super) fn publish_loop(
        &mut self,
        job: &mut Job,
        code: Option<i32>,
        end: LoopEnd,
        why: &str,
    ) {
        let carried = self.say.unpushed().len();
        let Ok((record, oid)) = self.loop_record(job, code, end, why, None) else {
            return;
        };
        let refname = loops::refname(self.fleet.names(), &record);
        if self.retry_remote(|f| f.wire().push(&[Update::create(refname.as_str(), oid)])) {
            self.say.pushed(carried);
        }
    }

    /// Give the item back as the worker exits: its work, its loop's record
    /// (`record`: how the round ended) and the claim's release go in the
    /// exit's one push (`leave.rs`), `fleet_released` said once it is made.
    pub(super) fn leave_item(
        &mut self,
        job: &mut Job,
        why: &str,
        code: i32,
        record: Option<LoopEnd>,
    ) -> ItemEnd {
        let carried = self.say.unpushed().len();
        // Best effort, as every loop record: the morning report lacks the round without it.
        let record = record
            .and_then(|end| self.loop_record(job, Some(code), end, why, None).ok())
            .map(|(record, oid)| Update::create(loops::refname(self.fleet.names(), &record), oid));
        let (branch, snapshot) = self.item_work(job);
        let giving = Giving {
            key: job.unit.key.clone(),
            claim: (job.held.refname.clone(), job.held.oid),
            ours: true,
            branch,
            snapshot,
            record,
        };
        let released = self.say.record(FleetEvent::Released {
            item: job.unit.key.clone(),
            why: why.to_string(),
            exit_code: code,
        });
        self.leaving = Some(Left {
            carried: if giving.record.is_some() { carried } else { 0 },
            giving,
            released,
        });
        if child::stop_requested() {
            ItemEnd::Stopped
        } else {
            ItemEnd::Failed(code)
        }
    }

    /// Give the item up for the whole fleet (`Lease::given_up`) with its
    /// work pushed as far as the remote takes it: no other worker pays for
    /// the same end (`refused`: by the remote's rules, so no worker starts
    /// another item). The worker stops with `code`.
    pub(super) fn give_up(
        &mut self,
        job: &mut Job,
        why: &str,
        code: i32,
        refused: bool,
    ) -> Result<ItemEnd> {
        let deadline = Instant::now() + self.config.fleet.grace.0 / 3;
        loop {
            // A refused branch does not keep the claim from being marked.
            let pushed = match self.push_work(job) {
                Err(WireError::Unreachable(e)) => Err(WireError::Unreachable(e)),
                _ => self.fleet.give_up(&job.held, why, refused),
            };
            match pushed {
                Ok(()) => {
                    self.say.say(FleetEvent::GivenUp {
                        item: job.unit.key.clone(),
                        text: job.unit.text.clone(),
                        why: why.to_string(),
                    });
                    break;
                }
                Err(e @ WireError::Unreachable(_)) if Instant::now() < deadline => {
                    self.unreachable(&e);
                    std::thread::sleep(Duration::from_millis(500));
                }
                // Lost meanwhile, refused, or out of time: the claim expires as any.
                Err(_) => break,
            }
        }
        Ok(if child::stop_requested() {
            ItemEnd::Stopped
        } else {
            ItemEnd::Failed(code)
        })
    }

    pub(super) fn holder_of(&mut self, key: &str) -> String {
        self.fleet
            .sync()
            .ok()
            .and_then(|v| v.claims.get(key).map(|(_, l)| l.holder.clone()))
            .unwrap_or_else(|| "nobody".into())
    }
}

fn worktree_name(fleet: &str, key: &str) -> String {
    format!("ralph-fleet-{fleet}-{key}")
}
