//! The coordinator: the ralph the user started with `--workers N`. It
//! gives units to workers, reads their events, merges their branches one at
//! a time, checks units off and commits the plan, and enforces the shared
//! budgets. Everything it decides is in `.ralph/workers.json` before it
//! acts, so a coordinator started after kill -9 resumes every worker.
//!
//! ```text
//! coordinator.rs     the loop: units to workers, their events, shared budgets
//! coordinator/
//!   setup.rs         the start: run branch, lock, ledger to continue, units checked
//!   grants.rs        a session granted to each worker's loop while the shared budget covers it
//!   hear.rs          the workers' records: heard live or read back, counted once
//!   leftovers.rs     what a worker left, onto its branch: stray commits, the
//!                    stash, uncommitted work; its edits to the plan left out
//!   queue.rs         the merge queue's step: merge, check off and commit, or hand back
//!   run_branch.rs    the run branch whatever the user's checkout does: the
//!                    plan read from it, check-offs committed on it
//!   end.rs           how the run ends: outcome, handoff of unmerged branches, report
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use git2::Repository;
use nix::sys::signal::Signal;

mod end;
mod grants;
mod hear;
mod leftovers;
mod queue;
mod run_branch;
mod setup;

pub(crate) use setup::run;

use super::child::{self, Child, Msg, WORKER_PLAN};
use super::grant;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::events::Bus;
use crate::formats::Event;
use crate::formats::ledger::{Assignment, Ledger, Status, Task};
use crate::plan::units;
use crate::repo::worktree;
use grants::Granted;

/// What the user asked for besides the count.
pub(crate) struct Options {
    pub(crate) workers: u32,
    pub(crate) fresh: bool,
    /// `--model`, `--agent`: handed to every worker.
    pub(crate) pass: Vec<String>,
    /// `--budget-per-invocation`: the shared budgets count from this start,
    /// not the run's (as for one loop).
    pub(crate) budget_per_invocation: bool,
    /// `--trust-config`: files changed during the last run are the user's.
    pub(crate) trust_config: bool,
}

/// The last signal that reached the coordinator (0: none).
static SIGNAL: AtomicI32 = AtomicI32::new(0);

fn install_signals() -> Result<()> {
    for sig in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGHUP,
    ] {
        let n = sig as i32;
        // SAFETY: the handler only stores into an atomic (async-signal-safe).
        unsafe { signal_hook_registry::register(n, move || SIGNAL.store(n, Ordering::SeqCst)) }
            .map_err(|e| Error::wrap("cannot install signal handlers", e))?;
    }
    Ok(())
}

/// Why the run stops giving out work.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stop {
    Interrupted,
    Stopped,
    Budget,
    Iterations,
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
    opts: Options,
    stop: Option<Stop>,
    /// Workers stopped because another hit a usage limit, and until when.
    paused_until: Option<Instant>,
    /// The user's checkout is off the run branch (said once each time).
    checkout_away: bool,
    /// Per running worker: sessions granted to its loop, and ended.
    grants: BTreeMap<String, Granted>,
    /// Why no new worktree could be made (`max_worktrees` reached by the
    /// ones kept for a person), once said.
    worktrees_full: Option<String>,
    started: Instant,
    /// What the run had spent where its budgets count from (the run's
    /// start, or this coordinator's with `--budget-per-invocation`): the
    /// one rule of a single loop, so a restart does not renew the time.
    counted_from: crate::supervisor::CountedFrom,
    /// The project's lock; `committing` while the coordinator writes to
    /// git, so that the next one knows to clear the lock files it left.
    lock: crate::project::Lock,
    /// What the run trusted at its start (`config::trust`), its workers'
    /// configuration among it, kept in `.ralph/trust.json`.
    trust: crate::config::trust::Record,
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

    fn drive(&mut self) -> Result<i32> {
        let (tx, rx) = mpsc::channel::<Msg>();
        self.settle_merged(&tx)?;
        let mut waiting_locks: BTreeMap<String, Instant> = BTreeMap::new();
        loop {
            self.take_signal();
            self.watch_checkout();
            self.check_budgets();
            if self.paused_until.is_some_and(|t| Instant::now() >= t) {
                self.paused_until = None;
            }
            if self.stop.is_none() && self.paused_until.is_none() {
                self.fill(&tx, &mut waiting_locks)?;
                self.regrant();
            }
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(msg) => self.heard(msg),
                Err(mpsc::RecvTimeoutError::Timeout) => self.bus.tick(),
                Err(mpsc::RecvTimeoutError::Disconnected) => {}
            }
            while let Ok(msg) = rx.try_recv() {
                self.heard(msg);
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
                    self.heard(msg);
                }
                self.children.remove(&worker);
                self.grants.remove(&worker);
                self.catch_up(&worker);
                self.finished(&worker, code, &tx)?;
            }
            if self.children.is_empty() && self.nothing_to_start() {
                break;
            }
        }
        self.end()
    }

    fn take_signal(&mut self) {
        let sig = SIGNAL.swap(0, Ordering::SeqCst);
        let Ok(sig) = Signal::try_from(sig) else {
            return;
        };
        match sig {
            Signal::SIGHUP => self.bus.detach(),
            // `ralph checkpoint`: each worker checkpoints and goes on.
            Signal::SIGUSR1 => {
                for c in self.children.values() {
                    c.signal(Signal::SIGUSR1);
                }
            }
            Signal::SIGUSR2 => self.halt(Stop::Stopped),
            _ => self.halt(Stop::Interrupted),
        }
    }

    /// Stop giving out work and stop every worker (each checkpoints first).
    fn halt(&mut self, why: Stop) {
        if self.stop.is_none() {
            self.stop = Some(why);
        }
        let signal = match why {
            Stop::Interrupted => Signal::SIGINT,
            _ => Signal::SIGUSR2,
        };
        for c in self.children.values() {
            c.signal(signal);
        }
    }

    fn check_budgets(&mut self) {
        if self.stop.is_some() {
            return;
        }
        let l = &self.config.loop_;
        let from = &self.counted_from;
        let cost = l
            .max_cost_usd
            .is_some_and(|max| self.ledger.cost_usd - from.cost >= max);
        let time = l
            .max_duration
            .is_some_and(|d| from.elapsed + self.started.elapsed() >= d.0);
        if cost || time {
            self.halt(Stop::Budget);
        } else if self.ledger.iterations - from.iteration >= l.max_iterations {
            self.halt(Stop::Iterations);
        }
    }

    /// Whether there is no work left to start now or later in this run.
    fn nothing_to_start(&self) -> bool {
        if self.stop.is_some() {
            return true;
        }
        if self.paused_until.is_some() {
            return false;
        }
        let resumable = self
            .ledger
            .assignments
            .iter()
            .any(|a| matches!(a.status, Status::Running | Status::Paused));
        // With no worker running and no room for a worktree, nothing can
        // free one: the run ends and says why.
        !resumable
            && (self.ready_units().is_empty()
                || (self.children.is_empty() && !self.room_for_a_worktree()))
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

    /// Start workers while there are free ones: first the assignments a
    /// previous coordinator left (takeover), then ready units.
    fn fill(
        &mut self,
        tx: &mpsc::Sender<Msg>,
        waiting: &mut BTreeMap<String, Instant>,
    ) -> Result<()> {
        while self.children.len() < self.opts.workers as usize {
            // Started only when the shared budget covers its first session.
            if self.decide() != grant::Decision::Go {
                break;
            }
            let resume = self.ledger.assignments.iter().position(|a| {
                matches!(a.status, Status::Running | Status::Paused)
                    && !self.children.contains_key(&a.worker)
            });
            if let Some(i) = resume {
                let a = self.ledger.assignments[i].clone();
                if self.children.values().any(|c| c.worker == a.worker) {
                    break;
                }
                // A worker of a coordinator that died may still be
                // finishing its checkpoint: its lock says so.
                if child::project_busy(&a.project_dir) {
                    let since = *waiting.entry(a.worker.clone()).or_insert_with(Instant::now);
                    if since.elapsed() < Duration::from_secs(120) {
                        return Ok(());
                    }
                }
                waiting.remove(&a.worker);
                // What its loop did while no coordinator listened.
                self.catch_up(&a.worker);
                self.ledger.assignments[i].status = Status::Running;
                if loop_completed(&a) {
                    // It finished its unit then: merged, not run again.
                    self.save()?;
                    self.finished(&a.worker, 0, tx)?;
                    continue;
                }
                self.save()?;
                self.git_write(|c| c.prepare(&a))?;
                self.start(&a, false, tx)?;
                continue;
            }
            let Some(item) = self.ready_units().into_iter().next() else {
                break;
            };
            if !self.room_for_a_worktree() {
                self.say_worktrees_full();
                break;
            }
            let a = self.assign(&item)?;
            self.start(&a, true, tx)?;
        }
        Ok(())
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
        let first = u32::from(self.decide() == grant::Decision::Go);
        crate::formats::Grant { sessions: first }.write(&a.project_dir)?;
        let child = child::spawn(a, &self.ledger.run_branch, fresh, &self.opts.pass, tx)?;
        self.children.insert(a.worker.clone(), child);
        self.grants.insert(
            a.worker.clone(),
            Granted {
                granted: first,
                ..Granted::default()
            },
        );
        Ok(())
    }

    /// A worker's loop ended with `code`.
    fn finished(&mut self, worker: &str, code: i32, tx: &mpsc::Sender<Msg>) -> Result<()> {
        let Some(i) = self
            .ledger
            .assignments
            .iter()
            .position(|a| a.worker == worker && a.status == Status::Running)
        else {
            return Ok(());
        };
        let a = self.ledger.assignments[i].clone();
        self.commit_leftovers(&a);
        self.bus.emit_from(
            &a.worker,
            Event::WorkerEnded {
                item: a.item.clone(),
                exit_code: code,
                outcome: outcome_name(code).into(),
            },
        );
        if code == 5 {
            // A budget of its own (`--deadline`, the quota guard) is
            // everyone's: the others stop too.
            self.halt(Stop::Budget);
        }
        if code != 0 {
            self.ledger.assignments[i].status = after_exit(code, a.restarts);
            if code == 2 && child::project_busy(&a.project_dir) {
                // Refused: a loop of a coordinator that died still runs in
                // its worktree. Resumed once that one has ended.
                self.ledger.assignments[i].status = Status::Paused;
            }
            if code > 128 {
                self.ledger.assignments[i].restarts += 1;
            }
            return self.save();
        }
        self.merge(i, tx)
    }
}

/// The most times a worker killed by a signal is started again in its
/// worktree (each time taking its dead iteration over).
const MAX_RESTARTS: u32 = 5;

/// Where an assignment goes when its loop ended with `code` (not 0):
/// stopped, paused or killed, it is resumed in its worktree (a worker
/// killed with -9 is taken over there); failed (its breaker, a bad setup),
/// it is left to a person with its branch.
fn after_exit(code: i32, restarts: u32) -> Status {
    match code {
        5 | 6 | 130 | 143 => Status::Paused,
        c if c > 128 && restarts < MAX_RESTARTS => Status::Paused,
        c => Status::Left(format!("its loop ended: {} (exit {c})", outcome_name(c))),
    }
}

fn outcome_name(code: i32) -> &'static str {
    match code {
        0 => "completed",
        3 => "breaker_open",
        4 => "iteration_limit",
        5 => "budget_spent",
        6 => "stopped",
        130 | 143 => "interrupted",
        _ => "failed",
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

fn read_plan(path: &Path) -> Result<String> {
    crate::plan::Plan::read_text(path)
}

fn write_worker_plan(project_dir: &Path, text: &str) -> Result<()> {
    let path = project_dir.join(WORKER_PLAN);
    if let Some(dir) = path.parent() {
        crate::formats::create_dir_private(dir)?;
    }
    crate::formats::write_atomic(&path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_stopped_or_killed_is_resumed_one_that_failed_is_left() {
        for code in [5, 6, 130, 143, 137] {
            assert_eq!(after_exit(code, 0), Status::Paused, "{code}");
        }
        assert!(matches!(after_exit(137, MAX_RESTARTS), Status::Left(_)));
        for code in [1, 2, 3, 4] {
            assert!(matches!(after_exit(code, 0), Status::Left(_)), "{code}");
        }
    }
}
