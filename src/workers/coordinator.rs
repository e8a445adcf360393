//! The coordinator: the ralph the user started with `--workers N`. It
//! gives units to workers, reads their events, merges their branches one at
//! a time, checks units off and commits the plan, and enforces the shared
//! budgets. Everything it decides is in `.ralph/workers.json` before it
//! acts, so a coordinator started after kill -9 resumes every worker.
//!
//! Theory: deciding and doing are apart, as in the supervisor. Every
//! decision is the machine's (`machine.rs`, pure, time passed in): which
//! assignment starts next, when a dead coordinator's worker is taken over
//! (its lease), what a worker's exit means, what a merge leads to (check
//! off, hand back, give up), when the shared budget halts the run, which
//! session is granted, one usage limit pausing all. This file turns what
//! happened (a signal, a tick, a child's record, its exit, a merge's
//! result) into an `Input` and carries out the `Effect`s: git, processes,
//! files, events.
//!
//! ```text
//! coordinator.rs     the loop: what happened → Input; Effects carried out
//! coordinator/
//!   machine.rs       PURE: the coordination core (Input → Effects), table-tested
//!   setup.rs         the start: run branch, lock, trust, ledger to continue,
//!                    units checked
//!   hear.rs          the workers' records: heard live or read back, counted once
//!   leftovers.rs     what a worker left, onto its branch: stray commits, the
//!                    stash, uncommitted work; its edits to the plan left out
//!   queue.rs         the merge queue's step: merge, then check off and commit,
//!                    hand back or leave, as the machine says
//!   run_branch.rs    the run branch whatever the user's checkout does: the
//!                    plan read from it, check-offs committed on it
//!   end.rs           how the run ends: outcome, handoff of unmerged branches, report
//! ```
//!
//! Pitfalls: a start changes what the machine reads, so starts are asked
//! for one at a time (`fill`); an assignment is known by its item (an item
//! given out is busy: one assignment each), a child by its worker.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use git2::Repository;
use nix::sys::signal::Signal;

mod end;
mod hear;
mod leftovers;
mod machine;
mod queue;
mod run_branch;
mod setup;

pub(crate) use setup::run;

use super::child::{self, Child, Msg, WORKER_PLAN};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::events::Bus;
use crate::formats::Event;
use crate::formats::ledger::{Assignment, Ledger, Status, Task};
use crate::plan::units;
use crate::platform::signals::Request;
use crate::repo::worktree;
use machine::{Effect, Free, Input, Machine, Now, Order, Sig, To, World};

/// What the user asked for besides the count.
pub(crate) struct Options {
    pub(crate) workers: u32,
    pub(crate) fresh: bool,
    /// `--model`, `--agent`: handed to every worker.
    pub(crate) pass: Vec<String>,
    /// `--budget-per-invocation`: the shared budgets count from this start,
    /// not the run's (as for one loop).
    pub(crate) budget_per_invocation: bool,
    /// `--deadline`: handed to every worker in `pass`; the run's
    /// `run_started` says it.
    pub(crate) deadline: Option<jiff::Timestamp>,
    /// `--trust-config`: files changed during the last run are the user's.
    pub(crate) trust_config: bool,
}

/// The moment an input happens at: the clock is read here, never in the machine.
fn now() -> Now {
    Now {
        mono: Instant::now(),
    }
}

/// What a caught signal asks of the parallel run (`crate::platform::signals`).
fn sig(request: Request) -> Sig {
    match request {
        Request::Interrupt => Sig::Interrupt,
        Request::Hangup => Sig::Hangup,
        Request::Checkpoint(_) => Sig::Checkpoint,
        Request::Stop => Sig::Stop,
    }
}

pub(super) struct Coordinator {
    root: PathBuf,
    ralph_dir: PathBuf,
    config: Config,
    git: Repository,
    plan_path: PathBuf,
    /// The plan relative to the work tree (for its commit).
    plan_in_tree: PathBuf,
    /// The project's directory relative to the work tree.
    prefix: PathBuf,
    worktrees: PathBuf,
    ledger: Ledger,
    bus: Bus,
    /// The run's own hooks: `on_exit` once, for the whole parallel run
    /// (the workers' loops run the other points).
    hooks: crate::hooks::Hooks,
    children: BTreeMap<String, Child>,
    /// How each worker's loop ended, as its own `run_ended` said (heard
    /// live or read back; forgotten when its next loop starts): the exit
    /// code alone cannot tell `untrusted` from a usage error.
    ended: BTreeMap<String, crate::formats::RunStatus>,
    opts: Options,
    /// Every decision (`machine.rs`): this coordinator only applies them.
    machine: Machine,
    /// The user's checkout is off the run branch (said once each time).
    checkout_away: bool,
    /// The plan file in the user's checkout is missing or blank while the
    /// run branch is checked out there (said once each time).
    checkout_plan_gone: bool,
    /// Why no new worktree could be made (`max_worktrees` reached by the
    /// ones kept for a person), once said.
    worktrees_full: Option<String>,
    /// The project's lock; `committing` while the coordinator writes to
    /// git, so that the next one knows to clear the lock files it left.
    lock: crate::project::Lock,
    /// What the run trusted at its start (`config::trust`), its workers'
    /// configuration among it, kept in `.ralph/trust.json`.
    trust: crate::config::trust::Record,
    /// The signals that reached it since its start.
    signals: crate::platform::signals::Catcher,
}

impl Coordinator {
    fn save(&self) -> Result<()> {
        self.ledger.save(&self.ralph_dir)
    }

    /// Run `step` (a write to git) marked in the lock as committing.
    fn git_write<T>(&mut self, step: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.lock.set_committing(true)?;
        let result = step(self);
        self.lock.set_committing(false)?;
        result
    }

    /// The world as the machine reads it.
    fn world(&self) -> (&Ledger, BTreeSet<String>) {
        (&self.ledger, self.children.keys().cloned().collect())
    }

    /// `input` decided by the machine, its effects carried out.
    fn handle(&mut self, input: Input, tx: &mpsc::Sender<Msg>) -> Result<()> {
        let mut out = Vec::new();
        let running: BTreeSet<String> = self.children.keys().cloned().collect();
        let world = World {
            ledger: &self.ledger,
            running: &running,
        };
        self.machine.handle(input, &world, &now(), &mut out);
        for effect in out {
            self.apply(effect, tx)?;
        }
        Ok(())
    }

    /// Where work can start now: the ready units, the room for a worktree,
    /// the dead coordinator's workers that still hold their project.
    fn free(&self) -> Free {
        let busy = (self.ledger.assignments.iter())
            .filter(|a| {
                matches!(a.status, Status::Running | Status::Paused)
                    && !self.children.contains_key(&a.worker)
                    && child::project_busy(&a.project_dir)
            })
            .map(|a| a.worker.clone())
            .collect();
        Free {
            ready: self.ready_units(),
            room: self.room_for_a_worktree(),
            busy,
        }
    }

    fn drive(&mut self) -> Result<i32> {
        let (tx, rx) = mpsc::channel::<Msg>();
        self.settle_merged(&tx)?;
        loop {
            while let Some(request) = self.signals.take() {
                self.handle(Input::Signal(sig(request)), &tx)?;
            }
            self.watch_checkout();
            self.handle(Input::Tick, &tx)?;
            self.fill(&tx)?;
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(msg) => self.heard(msg, &tx)?,
                Err(mpsc::RecvTimeoutError::Timeout) => self.bus.tick(),
                Err(mpsc::RecvTimeoutError::Disconnected) => {}
            }
            while let Ok(msg) = rx.try_recv() {
                self.heard(msg, &tx)?;
            }
            let exited: Vec<(String, i32)> = self
                .children
                .iter_mut()
                .filter_map(|(w, c)| c.exited().map(|code| (w.clone(), code)))
                .collect();
            for (worker, code) in exited {
                // The rest of its output first (its run_ended comes before):
                // what the pipe still holds, then its own log.
                while let Ok(msg) = rx.try_recv() {
                    self.heard(msg, &tx)?;
                }
                self.children.remove(&worker);
                self.catch_up(&worker);
                self.finished(&worker, code, &tx)?;
            }
            let (ledger, running) = self.world();
            let world = World {
                ledger,
                running: &running,
            };
            if running.is_empty() && self.machine.nothing_to_start(&world, &self.free()) {
                break;
            }
        }
        self.end()
    }

    /// Start workers while the machine says so, one at a time, then grant
    /// sessions.
    fn fill(&mut self, tx: &mpsc::Sender<Msg>) -> Result<()> {
        loop {
            let free = self.free();
            let mut out = Vec::new();
            let running: BTreeSet<String> = self.children.keys().cloned().collect();
            let world = World {
                ledger: &self.ledger,
                running: &running,
            };
            self.machine
                .handle(Input::Fill(&free), &world, &now(), &mut out);
            let started =
                (out.iter()).any(|e| matches!(e, Effect::Resume { .. } | Effect::Assign { .. }));
            for effect in out {
                self.apply(effect, tx)?;
            }
            if !started {
                return Ok(());
            }
        }
    }

    /// One effect of the machine's, carried out.
    fn apply(&mut self, effect: Effect, tx: &mpsc::Sender<Msg>) -> Result<()> {
        match effect {
            Effect::Tell(to, order) => {
                let signal = match order {
                    Order::Interrupt => Signal::SIGINT,
                    Order::Stop => Signal::SIGUSR2,
                    Order::Checkpoint => Signal::SIGUSR1,
                };
                for (w, c) in &self.children {
                    if !matches!(&to, To::AllBut(but) if but == w) {
                        c.signal(signal);
                    }
                }
            }
            Effect::Detach => self.bus.detach(),
            Effect::Warn(message) => self.bus.emit(Event::Warning { message }),
            Effect::Grant { worker, sessions } => {
                let dir = (self.ledger.assignments.iter())
                    .find(|a| a.worker == worker && a.status == Status::Running)
                    .map(|a| a.project_dir.clone());
                if let Some(dir) = dir
                    && let Err(e) = (crate::formats::Grant { sessions }).write(&dir)
                {
                    tracing::warn!("cannot grant {worker} a session: {e}");
                }
            }
            Effect::Resume { worker } => self.resume(&worker, tx)?,
            Effect::Assign { item } => {
                let a = self.assign(&item)?;
                self.start(&a, true, tx)?;
            }
            Effect::WorktreesFull => self.say_worktrees_full(),
            Effect::Set {
                item,
                status,
                restarted,
            } => {
                if let Some(a) = self.assignment_mut(&item) {
                    a.status = status;
                    a.restarts += u32::from(restarted);
                }
                self.save()?;
            }
            Effect::Merge { item } => {
                if let Some(i) = self.index_of(&item) {
                    self.merge(i, tx)?;
                }
            }
            Effect::CheckOff { item } => {
                if let Some(i) = self.index_of(&item) {
                    self.git_write(|c| c.merged(i))?;
                }
            }
            Effect::HandBack { item, files, start } => {
                if let Some(i) = self.index_of(&item) {
                    self.hand_back(i, files, start, tx)?;
                }
            }
            Effect::Leave { item, reason, why } => {
                if let Some(i) = self.index_of(&item) {
                    self.leave(i, reason, why)?;
                }
            }
        }
        Ok(())
    }

    /// The assignment of `item` (one at most: an item given out is busy).
    fn index_of(&self, item: &str) -> Option<usize> {
        self.ledger.assignments.iter().position(|a| a.item == item)
    }

    fn assignment_mut(&mut self, item: &str) -> Option<&mut Assignment> {
        self.ledger.assignments.iter_mut().find(|a| a.item == item)
    }

    /// Every assignment's worktree that exists counts against
    /// `max_worktrees`: running, paused, and kept for a person (left items
    /// and their branches stay until merged), so kept worktrees cannot pile
    /// up run after run.
    fn room_for_a_worktree(&self) -> bool {
        let in_use = self
            .ledger
            .assignments
            .iter()
            .filter(|a| a.worktree.exists())
            .count();
        in_use < self.config.workers.max_worktrees as usize
    }

    /// Said once per run: which kept worktrees take the room.
    fn say_worktrees_full(&mut self) {
        if self.worktrees_full.is_some() {
            return;
        }
        let kept: Vec<String> = self
            .ledger
            .assignments
            .iter()
            .filter(|a| matches!(a.status, Status::Left(_)) && a.worktree.exists())
            .map(|a| format!("{} ({})", a.worktree.display(), a.item))
            .collect();
        let message = format!(
            "[workers] max_worktrees ({}) reached: {} worktree(s) kept for items left to a person: {}; \
             merge their branches (or remove them with `git worktree remove` and `git branch -D`) \
             to free room, or raise max_worktrees",
            self.config.workers.max_worktrees,
            kept.len(),
            kept.join("; ")
        );
        self.bus.emit(Event::NeedsHuman {
            iteration: self.ledger.iterations,
            reason: "max_worktrees".into(),
            message: message.clone(),
        });
        self.worktrees_full = Some(message);
    }

    fn ready_units(&self) -> Vec<String> {
        let Ok(text) = self.plan_text() else {
            return Vec::new();
        };
        let Ok(units) = units::units(&text) else {
            return Vec::new();
        };
        let busy: BTreeSet<String> = self
            .ledger
            .assignments
            .iter()
            .map(|a| a.item.clone())
            .collect();
        let merged: BTreeSet<String> = self.ledger.merged.iter().cloned().collect();
        units::ready(&units, &busy, &merged)
            .into_iter()
            .map(|i| units[i].key.clone())
            .collect()
    }

    /// `worker`'s assignment (a previous coordinator's, or paused) taken
    /// up again in its worktree.
    fn resume(&mut self, worker: &str, tx: &mpsc::Sender<Msg>) -> Result<()> {
        let Some(i) = (self.ledger.assignments.iter()).position(|a| {
            a.worker == worker && matches!(a.status, Status::Running | Status::Paused)
        }) else {
            return Ok(());
        };
        // What its loop did while no coordinator listened.
        self.catch_up(worker);
        self.ledger.assignments[i].status = Status::Running;
        let a = self.ledger.assignments[i].clone();
        self.save()?;
        if loop_completed(&a) {
            // It finished its unit then: merged, not run again.
            return self.finished(worker, 0, tx);
        }
        self.git_write(|c| c.prepare(&a))?;
        self.start(&a, false, tx)
    }

    /// A free worker name (`w1`…), a new branch and worktree for `item`.
    fn assign(&mut self, item: &str) -> Result<Assignment> {
        let busy: BTreeSet<&str> = self
            .ledger
            .assignments
            .iter()
            .filter(|a| matches!(a.status, Status::Running | Status::Paused))
            .map(|a| a.worker.as_str())
            .collect();
        let worker = (1..)
            .map(|n| format!("w{n}"))
            .find(|w| !busy.contains(w.as_str()))
            .expect("an unbounded range has a free name");
        let (branch, name, path) =
            worktree::free_place(&self.git, &self.ledger.run_id, &worker, &self.worktrees);
        let tip = self
            .git
            .refname_to_id(&format!("refs/heads/{}", self.ledger.run_branch))
            .map_err(|e| Error::wrap("cannot read the run branch", e))?;
        let a = Assignment {
            worker,
            item: item.to_string(),
            branch,
            project_dir: path.join(&self.prefix),
            worktree: path,
            worktree_name: name,
            task: Task::Item,
            attempts: 0,
            restarts: 0,
            status: Status::Running,
            conflict: Vec::new(),
            base: tip.to_string(),
            prepared: false,
        };
        // Recorded before the branch exists: a coordinator killed in
        // between leaves no branch the next one does not know of.
        self.ledger.assignments.push(a.clone());
        // Its loops' records are read back from here on, if need be.
        self.ledger.last_heard.start(&a.worker);
        self.save()?;
        self.git_write(|c| c.prepare(&a))?;
        Ok(a)
    }

    /// `a`'s branch, worktree and plan, made where missing (a new
    /// assignment, or one a killed coordinator had only recorded), then
    /// recorded as prepared.
    fn prepare(&mut self, a: &Assignment) -> Result<()> {
        if !a.prepared && a.worktree.exists() {
            // Killed in the middle of its checkout: files missing or empty.
            // Nothing ran there yet (a worker starts only once prepared).
            worktree::discard_partial(&self.git, &a.worktree_name, &a.worktree)?;
        }
        if !a.worktree.exists() {
            let _ = self.git.find_worktree(&a.worktree_name).map(|wt| {
                let _ = wt.prune(Some(git2::WorktreePruneOptions::new().valid(true)));
            });
            let from = git2::Oid::from_str(&a.base)
                .map_err(|e| Error::wrap("a bad commit id in the workers' ledger", e))?;
            worktree::create(&self.git, &a.worktree_name, &a.worktree, &a.branch, from)?;
        }
        if !a.project_dir.join(WORKER_PLAN).is_file() {
            let text = self.plan_text()?;
            let units = units::units(&text).map_err(|e| Error::usage(e.to_string()))?;
            let unit = units.iter().find(|u| u.key == a.item).ok_or_else(|| {
                Error::usage(format!("plan item \"{}\" is gone from the plan", a.item))
            })?;
            write_worker_plan(&a.project_dir, &units::worker_plan(&text, unit))?;
        }
        if let Some(mine) = self
            .ledger
            .assignments
            .iter_mut()
            .find(|m| m.worker == a.worker && m.item == a.item && !m.prepared)
        {
            mine.prepared = true;
            self.save()?;
        }
        Ok(())
    }

    fn start(&mut self, a: &Assignment, fresh: bool, tx: &mpsc::Sender<Msg>) -> Result<()> {
        self.bus.emit_from(
            &a.worker,
            Event::WorkerStarted {
                item: a.item.clone(),
                task: a.task.name().into(),
                branch: a.branch.clone(),
                worktree: a.worktree.display().to_string(),
            },
        );
        // Its first session granted before it starts (none when the shared
        // budget does not cover it now: a conflict handed back waits).
        let mut out = Vec::new();
        let running: BTreeSet<String> = self.children.keys().cloned().collect();
        let world = World {
            ledger: &self.ledger,
            running: &running,
        };
        let starting = Input::Starting { worker: &a.worker };
        self.machine.handle(starting, &world, &now(), &mut out);
        for effect in out {
            if let Effect::Grant { sessions, .. } = effect {
                crate::formats::Grant { sessions }.write(&a.project_dir)?;
            }
        }
        self.ended.remove(&a.worker);
        let child = child::spawn(a, &self.ledger.run_branch, fresh, &self.opts.pass, tx)?;
        self.children.insert(a.worker.clone(), child);
        Ok(())
    }

    /// A worker's loop ended with `code`.
    fn finished(&mut self, worker: &str, code: i32, tx: &mpsc::Sender<Msg>) -> Result<()> {
        let Some(a) = (self.ledger.assignments.iter())
            .find(|a| a.worker == worker && a.status == Status::Running)
            .cloned()
        else {
            return Ok(());
        };
        self.commit_leftovers(&a);
        let outcome = machine::outcome(self.ended.remove(worker).as_ref(), code);
        self.bus.emit_from(
            &a.worker,
            Event::WorkerEnded {
                item: a.item.clone(),
                exit_code: code,
                outcome: outcome.clone(),
            },
        );
        let busy = code == 2 && child::project_busy(&a.project_dir);
        let exited = Input::Exited {
            worker,
            code,
            outcome: &outcome,
            busy,
        };
        self.handle(exited, tx)
    }
}

/// Whether `a`'s loop ended `completed` with its unit checked off: its
/// state says so (the state of an earlier unit's loop names that unit).
fn loop_completed(a: &Assignment) -> bool {
    let layout = crate::formats::Layout::new(&a.project_dir);
    crate::formats::RunState::load(&layout.state())
        .ok()
        .flatten()
        .is_some_and(|s| {
            s.status == crate::formats::RunStatus::Completed && s.completed_items.contains(&a.item)
        })
}

fn write_worker_plan(project_dir: &Path, text: &str) -> Result<()> {
    let path = project_dir.join(WORKER_PLAN);
    if let Some(dir) = path.parent() {
        crate::formats::create_dir_private(dir)?;
    }
    crate::formats::write_atomic(&path, text.as_bytes())
}
