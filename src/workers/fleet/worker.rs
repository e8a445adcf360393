//! The fleet worker: `ralph run --remote R --fleet NAME`. Join (or create)
//! the run, then until every item is merged: claim an item (or take over
//! one whose lease expired), run an ordinary loop on it in its own worktree
//! while renewing the claim and pushing its branch and a snapshot every
//! third of a lease, then merge it under the merge lease (`merge.rs`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use git2::{Oid, Repository, WorktreeAddOptions, WorktreePruneOptions};
use jiff::Timestamp;

use super::child::{self, ITEM_PLAN, Loop};
use super::lease::{Names, valid_component};
use super::remote::{Fleet, Held, Spent, View, WorkerState, WorkerStatus};
use super::say::{FleetEvent, Say};
use super::units::{Unit, item_plan, units};
use super::wire::{Update, WireError};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::repo::{OwnPaths, Repo};

/// What the command line gave.
pub(crate) struct Options {
    pub remote: String,
    pub fleet: String,
    pub worker: Option<String>,
    pub json: bool,
    /// Passed on to each item's loop (`--model`, `--agent`).
    pub loop_args: Vec<OsString>,
}

/// How one item's work ended.
pub(crate) enum ItemEnd {
    Merged,
    /// Lost to a takeover, or the merge found it already done: next item.
    Gone,
    /// SIGTERM/SIGINT: pushed and released.
    Stopped,
    /// The loop ended without completing (its exit code): pushed and released.
    Failed(i32),
}

pub(crate) struct Worker {
    pub(super) fleet: Fleet,
    pub(super) say: Say,
    pub(super) config: Config,
    /// The project root inside the clone's work tree, and the plan, relative to the work tree.
    pub(super) root_rel: PathBuf,
    pub(super) plan_rel: PathBuf,
    pub(super) root: PathBuf,
    pub(super) loop_args: Vec<OsString>,
    pub(super) unreachable_since: Option<Instant>,
    pub(super) failures: u32,
    pub(super) spent: Spent,
}

pub(crate) fn run(project_root: &Path, config: Config, opts: Options) -> Result<i32> {
    let names = Names::new(&opts.fleet)?;
    let repo = Repository::discover(project_root).map_err(|e| {
        Error::usage("a fleet worker needs a git clone of the fleet's remote").with_hint(format!(
            "clone the repository and run `ralph run --remote R --fleet NAME` in it ({})",
            e.message()
        ))
    })?;
    let workdir = repo
        .workdir()
        .ok_or_else(|| Error::usage("a fleet worker needs a clone with a work tree"))?
        .canonicalize()
        .map_err(|e| Error::io("cannot read", project_root, e))?;
    let root = project_root
        .canonicalize()
        .map_err(|e| Error::io("cannot read", project_root, e))?;
    let root_rel = root
        .strip_prefix(&workdir)
        .unwrap_or(Path::new(""))
        .to_path_buf();
    let plan_rel = root_rel.join(&config.plan);
    let worker = worker_id(opts.worker.as_deref())?;
    let f = &config.fleet;
    let fleet = Fleet::open(
        &workdir,
        &opts.remote,
        names.clone(),
        &worker,
        f.lease.0,
        f.clock_skew.0,
        f.network_timeout.0,
    )
    .map_err(|e| Error::wrap("cannot open the clone", e))?;
    let say = Say::new(
        &worker,
        opts.json,
        root.join(".ralph/fleet")
            .join(names.fleet())
            .join("events.jsonl"),
    );
    child::catch_stop_signals()?;
    let mut w = Worker {
        fleet,
        say,
        config,
        root_rel,
        plan_rel,
        root,
        loop_args: opts.loop_args,
        unreachable_since: None,
        failures: 0,
        spent: Spent::default(),
    };
    let code = w.work()?;
    w.status(
        if code == 0 {
            WorkerState::Finished
        } else if code == 130 {
            WorkerState::Stopped
        } else {
            WorkerState::Failed
        },
        None,
        "",
    );
    w.say.say(FleetEvent::Finished { exit_code: code });
    Ok(code)
}

/// `--worker`, else `RALPH_WORKER`, else the host name and pid.
fn worker_id(given: Option<&str>) -> Result<String> {
    let id = match given
        .map(String::from)
        .or_else(|| std::env::var("RALPH_WORKER").ok())
    {
        Some(id) => id,
        None => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .unwrap_or_else(|_| "host".into());
            let host: String = host
                .trim()
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '-'
                    }
                })
                .collect();
            format!("{host}-{}", std::process::id())
        }
    };
    if valid_component(&id) {
        Ok(id)
    } else {
        Err(
            Error::usage(format!("the worker name `{id}` cannot name a ref"))
                .with_hint("use letters, digits, `.`, `_` and `-`"),
        )
    }
}

impl Worker {
    fn work(&mut self) -> Result<i32> {
        let view = self.join()?;
        let mut view = Some(view);
        loop {
            if child::stop_requested() {
                return Ok(130);
            }
            let v = match view.take() {
                Some(v) => v,
                None => match self.sync() {
                    Some(v) => v,
                    None => continue,
                },
            };
            let open: Vec<Unit> = self
                .plan_units(&v)?
                .into_iter()
                .filter(|u| !u.done)
                .collect();
            if open.is_empty() {
                return Ok(0);
            }
            if let Some(what) = self.budget_spent(&v) {
                self.say.say(FleetEvent::BudgetSpent { what });
                return Ok(5);
            }
            let Some(held) = self.claim_one(&v, &open)? else {
                self.say_waiting(&v, open.len());
                self.pause(self.poll());
                continue;
            };
            let unit = open
                .iter()
                .find(|u| u.key == held.lease.what)
                .cloned()
                .expect("claimed from open");
            match self.work_on(&v, &unit, held)? {
                ItemEnd::Merged | ItemEnd::Gone => {}
                ItemEnd::Stopped => return Ok(130),
                ItemEnd::Failed(code) => return Ok(code),
            }
        }
    }

    /// Fetch; create the run from this clone's HEAD if there is none yet.
    fn join(&mut self) -> Result<View> {
        let first = self
            .fleet
            .sync()
            .map_err(|e| start_error(&e, self.fleet.wire().remote()))?;
        let created = if first.run.is_none() {
            let head = self
                .fleet
                .repo()
                .head()
                .ok()
                .and_then(|h| h.target())
                .ok_or_else(|| Error::usage("the clone has no commit to start the run from"))?;
            self.fleet
                .create_run(head, &self.plan_rel.to_string_lossy())
                .map_err(|e| start_error(&e, self.fleet.wire().remote()))?
        } else {
            false
        };
        let view = self
            .fleet
            .sync()
            .map_err(|e| start_error(&e, self.fleet.wire().remote()))?;
        let open = self.plan_units(&view)?.iter().filter(|u| !u.done).count();
        self.say.say(FleetEvent::Joined {
            created,
            run_branch: self.fleet.names().run_branch(),
            open_items: open,
        });
        Ok(view)
    }

    /// The run branch's plan, as units.
    pub(super) fn plan_units(&self, view: &View) -> Result<Vec<Unit>> {
        let run = view
            .run
            .ok_or_else(|| Error::internal("the fleet's run branch is gone from the remote"))?;
        Ok(units(&self.plan_text(run)?))
    }

    pub(super) fn plan_text(&self, commit: Oid) -> Result<String> {
        let repo = self.fleet.repo();
        let read = || -> std::result::Result<String, git2::Error> {
            let tree = repo.find_commit(commit)?.tree()?;
            let entry = tree.get_path(&self.plan_rel)?;
            let blob = repo.find_blob(entry.id())?;
            Ok(String::from_utf8_lossy(blob.content()).into_owned())
        };
        read().map_err(|e| {
            Error::usage(format!(
                "the run branch has no plan at {}",
                self.plan_rel.display()
            ))
            .with_hint(format!(
                "commit the plan before starting the fleet ({})",
                e.message()
            ))
        })
    }

    /// The first open item nobody holds, else the first whose lease expired.
    fn claim_one(&mut self, view: &View, open: &[Unit]) -> Result<Option<Held>> {
        let names = self.fleet.names().clone();
        let free = open.iter().filter(|u| !view.claims.contains_key(&u.key));
        let expired = open.iter().filter(|u| {
            view.claims
                .get(&u.key)
                .is_some_and(|(oid, l)| self.fleet.expired(&names.claim(&u.key), *oid, l))
        });
        let candidates: Vec<Unit> = free.chain(expired).cloned().collect();
        for unit in candidates {
            match self.fleet.acquire(
                &names.claim(&unit.key),
                &unit.key,
                &unit.text,
                view.claims.get(&unit.key),
            ) {
                Ok(Some(held)) => {
                    self.say.say(FleetEvent::Claimed {
                        item: unit.key.clone(),
                        text: unit.text.clone(),
                        generation: held.lease.generation,
                        took_over_from: held.lease.took_over_from.clone(),
                    });
                    return Ok(Some(held));
                }
                Ok(None) => continue,
                Err(e) => {
                    self.unreachable(&e);
                    return Ok(None);
                }
            }
        }
        Ok(None)
    }

    fn work_on(&mut self, view: &View, unit: &Unit, mut held: Held) -> Result<ItemEnd> {
        let names = self.fleet.names().clone();
        let key = unit.key.clone();
        let mut pushed_item = view.items.get(&key).copied();
        let mut pushed_snapshot = view.snapshots.get(&key).copied();
        let run = view.run.expect("joined");
        let base = pushed_item.unwrap_or(run);
        let (wt_root, note) = self.prepare(unit, &held, base, pushed_snapshot)?;
        let title = crate::plan::Plan::parse(&self.plan_text(run)?).title;
        let mut note = note;
        let mut conflicts = 0;
        loop {
            std::fs::create_dir_all(wt_root.join(".ralph"))
                .map_err(|e| Error::io("cannot create", &wt_root, e))?;
            let plan = item_plan(title.as_deref(), unit, note.as_deref());
            std::fs::write(wt_root.join(ITEM_PLAN), plan)
                .map_err(|e| Error::io("cannot write", wt_root.join(ITEM_PLAN), e))?;
            self.status(WorkerState::Working, Some(unit), "");
            let code = self.supervise(
                unit,
                &mut held,
                &wt_root,
                &mut pushed_item,
                &mut pushed_snapshot,
            )?;
            let Some(code) = code else {
                return Ok(ItemEnd::Gone);
            };
            self.account(&wt_root);
            self.commit_leftovers(&wt_root, unit, code);
            if code != 0 {
                let why = if child::stop_requested() {
                    "stopped by a signal"
                } else {
                    "the loop ended without completing the item"
                };
                return self.release(
                    unit,
                    &held,
                    &wt_root,
                    &mut pushed_item,
                    &mut pushed_snapshot,
                    why,
                    code,
                );
            }
            match self.merge(unit, &mut held, &wt_root, &mut pushed_item, pushed_snapshot)? {
                Some(end) => {
                    if matches!(end, ItemEnd::Merged) {
                        self.remove_worktree(&key);
                    }
                    return Ok(end);
                }
                None if conflicts >= MAX_CONFLICTS => {
                    let why = "its branch still conflicts with the run branch after the loop was asked to merge it";
                    return self.release(
                        unit,
                        &held,
                        &wt_root,
                        &mut pushed_item,
                        &mut pushed_snapshot,
                        why,
                        1,
                    );
                }
                // A conflict: once more, with the task of merging the run branch.
                None => {
                    conflicts += 1;
                    note = Some(format!(
                        "Before anything else: the run branch moved and this item's branch no longer merges cleanly. \
                         Merge `{}` (run `git merge {}`) into this branch, resolve the conflicts, keep both sides' work, commit.",
                        names.seen(&names.run_branch()),
                        names.seen(&names.run_branch()),
                    ));
                }
            }
        }
    }

    /// A fresh worktree on the item's branch (its pushed tip, or the run
    /// branch); on a takeover, the previous holder's newer snapshot is
    /// committed on top (the crash handoff). Returns the worktree's project
    /// root and the note for the agent.
    fn prepare(
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

    fn worktree_path(&self, key: &str) -> PathBuf {
        self.root
            .join(".ralph/fleet")
            .join(self.fleet.names().fleet())
            .join(key)
    }

    pub(super) fn remove_worktree(&self, key: &str) {
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

    /// Run the item's loop: renew, push and say while it works; forward a
    /// stop. `None`: the item was lost to a takeover (its loop stopped).
    fn supervise(
        &mut self,
        unit: &Unit,
        held: &mut Held,
        wt_root: &Path,
        pushed_item: &mut Option<Oid>,
        pushed_snapshot: &mut Option<Oid>,
    ) -> Result<Option<i32>> {
        let mut args = self.loop_args.clone();
        if let Some(left) = self.iterations_left() {
            args.extend(["--max-iterations".into(), left.max(1).to_string().into()]);
        }
        let env = [
            ("RALPH_FLEET", self.fleet.names().fleet().to_string()),
            ("RALPH_WORKER", self.fleet.worker().to_string()),
            ("RALPH_FLEET_ITEM", unit.key.clone()),
        ];
        let mut child = Loop::start(wt_root, &args, &env)?;
        let every = self.fleet.lease_length() / 3;
        let mut next_beat = Instant::now() + every;
        let grace = self.config.fleet.grace.0;
        loop {
            if let Some(code) = child.exited() {
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
            } else if Instant::now() >= next_beat {
                match self.beat(unit, held, wt_root, pushed_item, pushed_snapshot) {
                    Ok(()) => next_beat = Instant::now() + every,
                    Err(WireError::Rejected(_)) => {
                        child.ask_to_stop();
                        child.finish_within(grace);
                        let holder = self.holder_of(&unit.key);
                        self.say.say(FleetEvent::Lost {
                            item: unit.key.clone(),
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
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Renew the claim, push the item's branch and a snapshot of its work tree.
    fn beat(
        &mut self,
        unit: &Unit,
        held: &mut Held,
        wt_root: &Path,
        pushed_item: &mut Option<Oid>,
        pushed_snapshot: &mut Option<Oid>,
    ) -> std::result::Result<(), WireError> {
        self.fleet.renew(held)?;
        self.push_work(&unit.key, wt_root, pushed_item, pushed_snapshot)?;
        self.reconnected();
        self.status(WorkerState::Working, Some(unit), "");
        Ok(())
    }

    /// Push the item branch (its local tip) and a fresh snapshot of the worktree.
    pub(super) fn push_work(
        &mut self,
        key: &str,
        wt_root: &Path,
        pushed_item: &mut Option<Oid>,
        pushed_snapshot: &mut Option<Oid>,
    ) -> std::result::Result<(), WireError> {
        let names = self.fleet.names().clone();
        let mut updates = Vec::new();
        let tip = self.fleet.local_ref(&names.item_branch(key));
        if let Some(tip) = tip
            && Some(tip) != *pushed_item
        {
            updates.push(match pushed_item {
                Some(old) => Update::swap(names.item_branch(key), *old, tip),
                None => Update::create(names.item_branch(key), tip),
            });
        }
        let snapshot = self.snapshot(key, wt_root);
        if let Some(snap) = snapshot
            && Some(snap) != *pushed_snapshot
        {
            updates.push(match pushed_snapshot {
                Some(old) => Update::swap(names.snapshot(key), *old, snap),
                None => Update::create(names.snapshot(key), snap),
            });
        }
        self.fleet.wire().push(&updates)?;
        if tip.is_some() {
            *pushed_item = tip;
        }
        if snapshot.is_some() {
            *pushed_snapshot = snapshot;
        }
        Ok(())
    }

    /// The worktree recorded as a snapshot commit (the safety net's staging rules).
    fn snapshot(&self, key: &str, wt_root: &Path) -> Option<Oid> {
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
    fn commit_leftovers(&self, wt_root: &Path, unit: &Unit, code: i32) {
        let Ok(Some(repo)) = Repo::open(wt_root) else {
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

    /// What the item's loop spent, added to the ledger.
    fn account(&mut self, wt_root: &Path) {
        let layout = crate::state::Layout::new(wt_root);
        let Ok(Some(state)) = crate::state::RunState::load(&layout.state()) else {
            return;
        };
        let spent = Spent {
            iterations: u64::from(state.iteration),
            cost_usd: state.cost_usd,
            items_done: 0,
        };
        self.spent.iterations += spent.iterations;
        self.spent.cost_usd += spent.cost_usd;
        self.retry_remote(|f| f.spend(spent).map(|_| ()));
    }

    /// Give the claim up with the work pushed.
    #[allow(clippy::too_many_arguments)]
    fn release(
        &mut self,
        unit: &Unit,
        held: &Held,
        wt_root: &Path,
        pushed_item: &mut Option<Oid>,
        pushed_snapshot: &mut Option<Oid>,
        why: &str,
        code: i32,
    ) -> Result<ItemEnd> {
        let key = unit.key.clone();
        // Within the grace: a few quick attempts, no long back-off.
        let deadline = Instant::now() + self.config.fleet.grace.0 / 3;
        let mut pushed = false;
        while Instant::now() < deadline {
            match self
                .push_work(&key, wt_root, pushed_item, pushed_snapshot)
                .and_then(|()| self.fleet.release(held))
            {
                Ok(()) => {
                    pushed = true;
                    break;
                }
                Err(WireError::Rejected(_)) => break,
                Err(e) => {
                    self.unreachable(&e);
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
        if pushed {
            self.say.say(FleetEvent::Released {
                item: key,
                why: why.to_string(),
                exit_code: code,
            });
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

    fn iterations_left(&self) -> Option<u64> {
        let view = self.fleet.view().ok()?;
        let (_, ledger) = view.ledger?;
        Some(u64::from(self.config.loop_.max_iterations).saturating_sub(ledger.iterations))
    }

    /// The fleet's shared budget (`[loop] max_iterations`, `max_cost_usd`,
    /// counted over every worker on the ledger), if spent.
    fn budget_spent(&self, view: &View) -> Option<String> {
        let (_, ledger) = view.ledger.as_ref()?;
        if ledger.iterations >= u64::from(self.config.loop_.max_iterations) {
            return Some(format!(
                "{} of {} iterations",
                ledger.iterations, self.config.loop_.max_iterations
            ));
        }
        match self.config.loop_.max_cost_usd {
            Some(max) if ledger.cost_usd >= max => {
                Some(format!("${:.2} of ${max:.2}", ledger.cost_usd))
            }
            _ => None,
        }
    }

    fn say_waiting(&mut self, view: &View, open: usize) {
        let _ = view;
        self.status(WorkerState::Waiting, None, "");
        self.say.say(FleetEvent::Waiting { held: open });
    }

    /// A fetch; `None` after saying the remote is unreachable and waiting.
    pub(super) fn sync(&mut self) -> Option<View> {
        match self.fleet.sync() {
            Ok(v) => {
                self.reconnected();
                Some(v)
            }
            Err(e) => {
                let wait = self.unreachable(&e);
                self.pause(wait);
                None
            }
        }
    }

    /// Retry `op` on the remote until it goes through (unreachable: back-off)
    /// or is refused; a stop request ends the retries.
    pub(super) fn retry_remote(
        &mut self,
        mut op: impl FnMut(&mut Fleet) -> std::result::Result<(), WireError>,
    ) -> bool {
        loop {
            match op(&mut self.fleet) {
                Ok(()) => {
                    self.reconnected();
                    return true;
                }
                Err(WireError::Unreachable(e)) if !child::stop_requested() => {
                    let wait = self.unreachable(&WireError::Unreachable(e));
                    self.pause(wait);
                }
                Err(_) => return false,
            }
        }
    }

    /// Say the remote is unreachable; the back-off before the next try.
    pub(super) fn unreachable(&mut self, e: &WireError) -> Duration {
        self.unreachable_since.get_or_insert_with(Instant::now);
        self.failures += 1;
        let wait = Duration::from_secs(1u64 << self.failures.min(16))
            .min(self.config.fleet.max_retry_wait.0);
        self.say.say(FleetEvent::Unreachable {
            error: e.to_string(),
            retry_in_secs: wait.as_secs(),
        });
        wait
    }

    fn reconnected(&mut self) {
        self.failures = 0;
        if let Some(since) = self.unreachable_since.take() {
            self.say.say(FleetEvent::Reconnected {
                after_secs: since.elapsed().as_secs(),
            });
        }
    }

    pub(super) fn poll(&self) -> Duration {
        (self.fleet.lease_length() / 4).clamp(Duration::from_millis(500), Duration::from_secs(5))
    }

    /// Sleep, cut short by a stop request.
    pub(super) fn pause(&self, d: Duration) {
        let until = Instant::now() + d;
        while Instant::now() < until && !child::stop_requested() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Publish this worker's state (best effort: a status is not work).
    pub(super) fn status(&mut self, state: WorkerState, unit: Option<&Unit>, note: &str) {
        let status = WorkerStatus {
            worker: self.fleet.worker().to_string(),
            state,
            item: unit.map(|u| u.key.clone()),
            item_text: unit.map(|u| u.text.clone()).unwrap_or_default(),
            at: Timestamp::now(),
            unreachable_since: self
                .unreachable_since
                .map(|i| Timestamp::now() - i.elapsed()),
            note: note.to_string(),
            spent: self.spent,
        };
        let _ = self.fleet.say(&status);
    }
}

/// How often an item's loop is asked to bring its branch up to date before
/// the worker gives the item up (pushed, released) and stops.
const MAX_CONFLICTS: u32 = 2;

fn worktree_name(fleet: &str, key: &str) -> String {
    format!("ralph-fleet-{fleet}-{key}")
}

fn start_error(e: &WireError, remote: &str) -> Error {
    Error::usage(format!("cannot start the fleet worker on remote `{remote}`: {e}"))
        .with_hint("check that `git fetch REMOTE` and `git push REMOTE` work from this clone with the same user and environment")
}
