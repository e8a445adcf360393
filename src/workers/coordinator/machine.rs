//! PURE: the coordination core. Every decision of a parallel run — which
//! assignment starts next, when a dead coordinator's worker is taken over,
//! what a worker's exit means, what a merge leads to, when the shared
//! budget halts the run, who is granted a session, one usage limit pausing
//! everyone — is taken here, synchronously, with time passed in; the
//! coordinator (`coordinator.rs` and its files) only translates what
//! happened into an [`Input`] and carries out the [`Effect`]s (git,
//! processes, files, events). The shape of `supervisor::IterationMachine`.
//!
//! What the core keeps is what lives only as long as this coordinator: the
//! stop, the pause, the grants, the leases. What a takeover needs is the
//! ledger's (`.ralph/workers.json`), read here through [`World`] and
//! written by the coordinator alone.
//!
//! Pitfalls: an input decides from the world as the coordinator read it
//! just before; a start (`Effect::Resume`, `Effect::Assign`) changes the
//! world, so [`Input::Fill`] yields one start at a time and the
//! coordinator asks again. Nothing is started once the run is halted: a
//! conflict handed back then waits, paused, for the next run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::formats::ledger::{Ledger, Merged, Status};
use crate::workers::grant::{self, Decision};

/// The moment an input happens at.
#[derive(Debug, Clone, Copy)]
pub(super) struct Now {
    pub(super) mono: Instant,
}

/// What the coordinator knows of the world when an input comes in.
#[derive(Debug, Clone, Copy)]
pub(super) struct World<'a> {
    pub(super) ledger: &'a Ledger,
    /// Workers whose loop runs now as this coordinator's child.
    pub(super) running: &'a BTreeSet<String>,
}

/// Why the run stops giving out work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Stop {
    Interrupted,
    Stopped,
    Budget,
    Iterations,
}

/// A signal that reached the coordinator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Sig {
    /// SIGINT, SIGTERM.
    Interrupt,
    /// SIGUSR2: `ralph stop`.
    Stop,
    /// SIGUSR1: `ralph checkpoint`.
    Checkpoint,
    /// SIGHUP: the terminal went away.
    Hangup,
}

/// What a worker's loop is told (SIGINT, SIGUSR2, SIGUSR1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Order {
    Interrupt,
    Stop,
    Checkpoint,
}

/// Which running workers an order goes to.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum To {
    All,
    AllBut(String),
}

/// A record of a worker's loop heard live on its stdout (read back from
/// its log later, a record counts toward the ledger's totals only).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Heard {
    SessionStarted,
    SessionEnded,
    /// It waits `seconds` for its usage limit to reset.
    LimitWait {
        seconds: u64,
    },
}

/// Where to start work, read by the coordinator before it asks.
#[derive(Debug, Clone, Default)]
pub(super) struct Free {
    /// Units ready to start, in plan order (`assign::ready`).
    pub(super) ready: Vec<String>,
    /// Whether `max_worktrees` leaves room for one more worktree.
    pub(super) room: bool,
    /// Workers whose project lock a live loop holds (a dead coordinator's
    /// worker finishing its checkpoint).
    pub(super) busy: BTreeSet<String>,
}

#[derive(Debug, Clone)]
pub(super) enum Input<'a> {
    Signal(Sig),
    /// Time passed: the shared budgets, the end of a usage-limit pause.
    Tick,
    /// Start what can start (one start at a time), else grant sessions.
    Fill(&'a Free),
    /// The coordinator starts `worker`'s loop (a new unit, a resumed one,
    /// a conflict handed back): its first session is decided now.
    Starting {
        worker: &'a str,
    },
    Heard {
        worker: &'a str,
        heard: Heard,
    },
    /// `worker`'s loop ended with `code` (its running assignment's); `busy`:
    /// another loop still holds its project.
    Exited {
        worker: &'a str,
        code: i32,
        busy: bool,
    },
    /// The merge of `item`'s branch, its `attempt`th, came out `merged`.
    MergeDone {
        item: &'a str,
        attempt: u32,
        merged: &'a Merged,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Effect {
    Tell(To, Order),
    /// The terminal is gone: the display detaches.
    Detach,
    Warn(String),
    /// `worker`'s loop may start `sessions` sessions in all.
    Grant {
        worker: String,
        sessions: u32,
    },
    /// Take the assignment of `worker` (a previous coordinator's, or paused)
    /// up again in its worktree.
    Resume {
        worker: String,
    },
    /// A free worker, a branch and a worktree for `item`.
    Assign {
        item: String,
    },
    /// `max_worktrees` is reached by worktrees kept for a person.
    WorktreesFull,
    /// The assignment of `item` is now `status` (`restarted`: its loop
    /// died by a signal and is started again).
    Set {
        item: String,
        status: Status,
        restarted: bool,
    },
    /// Merge the branch of `item`'s assignment (the merge queue's next step).
    Merge {
        item: String,
    },
    /// `item`'s work is in the run branch: checked off.
    CheckOff {
        item: String,
    },
    /// Send `item`'s worker back to bring its branch up to date with the
    /// run branch (an `update` task); `start`: now, else when the run resumes.
    HandBack {
        item: String,
        files: Vec<String>,
        start: bool,
    },
    /// Leave `item` to a person, its branch and worktree kept.
    Leave {
        item: String,
        reason: &'static str,
        why: String,
    },
}

/// What the core is given once: the rules of this run.
#[derive(Debug, Clone)]
pub(super) struct Rules {
    pub(super) workers: u32,
    pub(super) conflict_attempts: u32,
    pub(super) limits: grant::Limits,
    /// What the run had spent where its budgets count from.
    pub(super) from: grant::Spent,
    /// How long a dead coordinator's worker that still holds its project
    /// is waited for before its assignment is taken over anyway.
    pub(super) lease: Duration,
}

/// The most times a worker killed by a signal is started again in its
/// worktree (each time taking its dead iteration over).
pub(super) const MAX_RESTARTS: u32 = 5;

/// How long a worker of a dead coordinator may hold its project.
pub(super) const LEASE: Duration = Duration::from_secs(120);

/// A running worker's sessions: granted to its loop, started, ended.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Granted {
    granted: u32,
    started: u32,
    ended: u32,
}

impl Granted {
    /// Granted and not ended: running, or about to start.
    fn running(self) -> u32 {
        self.granted.saturating_sub(self.ended)
    }
}

#[derive(Debug)]
pub(super) struct Machine {
    rules: Rules,
    started: Instant,
    stop: Option<Stop>,
    /// Workers stopped because another hit a usage limit, and until when.
    paused_until: Option<Instant>,
    grants: BTreeMap<String, Granted>,
    /// Per worker of a dead coordinator still holding its project: since
    /// when it is waited for.
    leases: BTreeMap<String, Instant>,
}

impl Machine {
    pub(super) fn new(rules: Rules, now: &Now) -> Machine {
        Machine {
            rules,
            started: now.mono,
            stop: None,
            paused_until: None,
            grants: BTreeMap::new(),
            leases: BTreeMap::new(),
        }
    }

    pub(super) fn stop(&self) -> Option<Stop> {
        self.stop
    }

    pub(super) fn handle(&mut self, input: Input, world: &World, now: &Now, out: &mut Vec<Effect>) {
        match input {
            Input::Signal(sig) => match sig {
                Sig::Hangup => out.push(Effect::Detach),
                Sig::Checkpoint => out.push(Effect::Tell(To::All, Order::Checkpoint)),
                Sig::Stop => self.halt(Stop::Stopped, out),
                Sig::Interrupt => self.halt(Stop::Interrupted, out),
            },
            Input::Tick => {
                self.check_budgets(world, now, out);
                if self.paused_until.is_some_and(|t| now.mono >= t) {
                    self.paused_until = None;
                }
            }
            Input::Fill(free) => {
                if self.active() && !self.start_one(free, world, now, out) {
                    self.regrant(world, now, out);
                }
            }
            Input::Starting { worker } => {
                // None when the shared budget does not cover it now (a
                // conflict handed back waits for the next grant).
                let first = u32::from(self.decide(world, now) == Decision::Go);
                self.grants.insert(
                    worker.to_string(),
                    Granted {
                        granted: first,
                        ..Granted::default()
                    },
                );
                out.push(Effect::Grant {
                    worker: worker.to_string(),
                    sessions: first,
                });
            }
            Input::Heard { worker, heard } => self.heard(worker, heard, now, out),
            Input::Exited { worker, code, busy } => self.exited(worker, code, busy, world, out),
            Input::MergeDone {
                item,
                attempt,
                merged,
            } => {
                // The budget as spent now, not at the last tick: the
                // iteration that finished this unit may have spent it.
                self.check_budgets(world, now, out);
                out.push(self.merged(item, attempt, merged));
            }
        }
    }

    /// Whether there is no work left to start now or later in this run.
    pub(super) fn nothing_to_start(&self, world: &World, free: &Free) -> bool {
        if self.stop.is_some() {
            return true;
        }
        if self.paused_until.is_some() {
            return false;
        }
        let resumable = (world.ledger.assignments.iter())
            .any(|a| matches!(a.status, Status::Running | Status::Paused));
        // With no worker running and no room for a worktree, nothing can
        // free one: the run ends and says why.
        !resumable && (free.ready.is_empty() || (world.running.is_empty() && !free.room))
    }

    fn active(&self) -> bool {
        self.stop.is_none() && self.paused_until.is_none()
    }

    /// Stop giving out work and stop every worker (each checkpoints first).
    fn halt(&mut self, why: Stop, out: &mut Vec<Effect>) {
        if self.stop.is_none() {
            self.stop = Some(why);
        }
        let order = match why {
            Stop::Interrupted => Order::Interrupt,
            _ => Order::Stop,
        };
        out.push(Effect::Tell(To::All, order));
    }

    fn spent(&self, world: &World, now: &Now) -> grant::Spent {
        let (l, from) = (world.ledger, &self.rules.from);
        grant::Spent {
            iterations: l.iterations.saturating_sub(from.iterations),
            cost: l.cost_usd - from.cost,
            elapsed: from.elapsed + now.mono.saturating_duration_since(self.started),
            running: self.grants.values().map(|g| g.running()).sum(),
        }
    }

    /// Whether the shared budget covers one more session now.
    fn decide(&self, world: &World, now: &Now) -> Decision {
        grant::decide(&self.rules.limits, &self.spent(world, now))
    }

    /// The shared budgets as spent (not as granted): the run halts.
    fn check_budgets(&mut self, world: &World, now: &Now, out: &mut Vec<Effect>) {
        if self.stop.is_some() {
            return;
        }
        let (limits, spent) = (&self.rules.limits, self.spent(world, now));
        let cost = limits.max_cost.is_some_and(|max| spent.cost >= max);
        let time = limits.max_duration.is_some_and(|d| spent.elapsed >= d);
        if cost || time {
            self.halt(Stop::Budget, out);
        } else if spent.iterations >= limits.max_iterations {
            self.halt(Stop::Iterations, out);
        }
    }

    /// One start, if a worker is free and the shared budget covers its
    /// first session: first an assignment to take up again (a dead
    /// coordinator's, a paused one), then a ready unit. Whether it started
    /// one.
    fn start_one(&mut self, free: &Free, world: &World, now: &Now, out: &mut Vec<Effect>) -> bool {
        if world.running.len() >= self.rules.workers as usize
            || self.decide(world, now) != Decision::Go
        {
            return false;
        }
        let resume = (world.ledger.assignments.iter()).find(|a| {
            matches!(a.status, Status::Running | Status::Paused)
                && !world.running.contains(&a.worker)
        });
        if let Some(a) = resume {
            // A worker of a coordinator that died may still be finishing
            // its checkpoint: its lease runs out after `lease`.
            if free.busy.contains(&a.worker) {
                let since = *self.leases.entry(a.worker.clone()).or_insert(now.mono);
                if now.mono.saturating_duration_since(since) < self.rules.lease {
                    // Nothing else starts before it: it is the next.
                    return false;
                }
            }
            self.leases.remove(&a.worker);
            out.push(Effect::Resume {
                worker: a.worker.clone(),
            });
            return true;
        }
        let Some(item) = free.ready.first() else {
            return false;
        };
        if !free.room {
            out.push(Effect::WorktreesFull);
            return false;
        }
        out.push(Effect::Assign { item: item.clone() });
        true
    }

    /// One more session for each worker whose loop waits for one, while
    /// the shared budget covers it (a worker not granted one waits until
    /// the budget's end stops it).
    fn regrant(&mut self, world: &World, now: &Now, out: &mut Vec<Effect>) {
        let waiting: Vec<String> = (self.grants.iter())
            .filter(|(w, g)| g.running() == 0 && world.running.contains(*w))
            .map(|(w, _)| w.clone())
            .collect();
        for worker in waiting {
            if self.decide(world, now) != Decision::Go {
                return;
            }
            let g = self.grants.get_mut(&worker).expect("listed above");
            g.granted += 1;
            out.push(Effect::Grant {
                worker,
                sessions: g.granted,
            });
        }
    }

    fn heard(&mut self, worker: &str, heard: Heard, now: &Now, out: &mut Vec<Effect>) {
        match heard {
            Heard::SessionStarted => {
                if let Some(g) = self.grants.get_mut(worker) {
                    g.started += 1;
                }
            }
            Heard::SessionEnded => {
                if let Some(g) = self.grants.get_mut(worker) {
                    g.ended = (g.ended + 1).min(g.started);
                }
            }
            // One usage limit pauses every worker: the others checkpoint
            // and stop now, and start again when it resets; the one that
            // hit it waits by itself (its own loop's wait).
            Heard::LimitWait { seconds } => {
                let until = now.mono + Duration::from_secs(seconds);
                self.paused_until = Some(self.paused_until.map_or(until, |t| t.max(until)));
                out.push(Effect::Tell(To::AllBut(worker.to_string()), Order::Stop));
                out.push(Effect::Warn(format!(
                    "usage limit hit by {worker}: every worker pauses for {seconds}s, until it resets"
                )));
            }
        }
    }

    /// A worker's loop ended: merged when it finished its unit, else
    /// resumed later or left to a person.
    fn exited(
        &mut self,
        worker: &str,
        code: i32,
        busy: bool,
        world: &World,
        out: &mut Vec<Effect>,
    ) {
        self.grants.remove(worker);
        let Some(a) = (world.ledger.assignments.iter())
            .find(|a| a.worker == worker && a.status == Status::Running)
        else {
            return;
        };
        if code == 5 {
            // A budget of its own (`--deadline`, the quota guard) is
            // everyone's: the others stop too.
            self.halt(Stop::Budget, out);
        }
        let item = a.item.clone();
        if code == 0 {
            out.push(Effect::Merge { item });
            return;
        }
        let status = if code == 2 && busy {
            // Refused: a loop of a coordinator that died still runs in its
            // worktree. Resumed once that one has ended.
            Status::Paused
        } else {
            after_exit(code, a.restarts)
        };
        out.push(Effect::Set {
            item,
            status,
            // Died by a signal; an interrupt it ended on (130, 143: the
            // user's Ctrl-C passed on) is a stop, not a death, and uses
            // none of its restarts.
            restarted: code > 128 && !matches!(code, 130 | 143),
        });
    }

    fn merged(&self, item: &str, attempt: u32, merged: &Merged) -> Effect {
        let item = item.to_string();
        match merged {
            Merged::AlreadyMerged | Merged::FastForward { .. } | Merged::MergeCommit { .. } => {
                Effect::CheckOff { item }
            }
            Merged::Conflict { files } if attempt < self.rules.conflict_attempts => {
                Effect::HandBack {
                    item,
                    files: files.clone(),
                    // A halted run starts nothing more: the update waits,
                    // paused, for the next `ralph run --workers`.
                    start: self.stop.is_none(),
                }
            }
            Merged::Conflict { files } => Effect::Leave {
                item,
                reason: "conflict",
                why: format!(
                    "merge conflict in {} still unresolved after {attempt} attempt(s)",
                    files.join(", ")
                ),
            },
            Merged::Blocked { reason } => Effect::Leave {
                item,
                reason: "merge_blocked",
                why: reason.clone(),
            },
        }
    }
}

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

pub(super) fn outcome_name(code: i32) -> &'static str {
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

#[cfg(test)]
mod tests;
