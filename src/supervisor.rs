//! The supervised loop (`ralph run`): one agent process per iteration,
//! its stream metered live, checkpoints at L2/L3, and the exit rules
//! between iterations. The only async part of ralph; everything it decides
//! it reports as [`Event`]s.
//!
//! # Theory of operation
//!
//! ```text
//!  Supervisor::run ─ loop ──────────────────────────────────────────────┐
//!   │ pending requests (signals, `ralph stop`) between iterations       │
//!   │ verdict::gate ── End? ─────────────────────────────► finish_as    │
//!   │ measure: plan + snapshot (IO)                                     │
//!   │ run_agent: prompt, spawn ─► driver ◄─► IterationMachine ─► Facts  │
//!   │ measure again (IO) ─► verdict::judge ─► save_checkpoint (IO)      │
//!   │ record::iteration (state, breaker) ─► event, save, hook           │
//!   │ verdict::next: Continue ──────────────────────────────────────────┘
//!   │                WaitForLimit ─► LimitBackoff::plan ─► sleep / End
//!   └─────────────── End ─────────────────────────────────► finish_as
//! ```
//!
//! Deciding and doing are kept apart. The pure parts take time as a value
//! ([`Now`]) and answer with data: `iteration` (one agent: lines, requests,
//! timers → effects), `stop` (the stop sequence), `verdict` (failure,
//! outcome, the exit rules in one order), `budget` and `limit_wait`. The
//! doing is here (files, git, hooks, the state on disk), in `driver` (the
//! agent and the display; the signals come from `crate::platform::signals`, the one
//! owner) and `waiting` (a usage-limit wait).
//! This file and `record` are the only writers of [`RunState`]'s
//! bookkeeping during a run.
//!
//! # Files
//!
//! ```text
//! supervisor.rs          this map
//! supervisor/
//!   start.rs             the one start of a run (a loop, a worker's loop, a coordinator):
//!                        checks before anything is written, then lock, log, trust, signals
//!   run.rs               Supervisor: the loop, measuring, save_checkpoint, finish_as
//!   iteration.rs         IterationMachine: one agent as a pure machine (Input → Effects);
//!                        when L2/L3 fire (the checkpoint request, the stop)
//!   iteration/setup.rs   an iteration's limits and the meter it starts with
//!   iteration/seams.rs   following the plan item by item, item-boundary handoffs
//!   driver.rs            the async side: exit, lines, requests, wakes → Input; Effects applied
//!   continuation.rs      a stopped session continued once for handoff notes (opencode's `--session`)
//!   stop.rs              the typed stop sequence (grace, SIGINT, SIGTERM, SIGKILL)
//!   verdict.rs           failure, outcome and the exit rules in one order (decides the exit code)
//!   record.rs            an iteration's bookkeeping in RunState, the circuit breaker's update
//!   budget.rs            iterations, cost, duration and --deadline budgets
//!   limit_wait.rs        a usage limit: wait until it resets (backoff) or end the run (pure)
//!   waiting.rs           the wait itself: state `waiting`, countdown, signals still end it
//!   seams.rs             the run's side of the seams: estimates, the shard rule, the items ledger
//!   now.rs               Now: time as a value, read once per input
//!   facts.rs             what an iteration leaves behind (plain data)
//!   grant.rs             a worker waits for its coordinator's grant before each session
//!   publish.rs           Publisher: the one way an event is published, hooks run with the same facts
//!   snapshots.rs         the safety net's snapshots during an iteration, pruning at the start
//!   takeover.rs          taking over a dead supervisor's iteration (replay of its transcript)
//!   verify.rs            [verify]: when the checks run, a refused completion, the final commit
//! ```
//!
//! # Pitfalls
//!
//! - Decide in the pure parts, do in `run`/`driver`: a rule written in the
//!   driver cannot be table-tested and will drift from its twin.
//! - Time is an input ([`Now`](now::Now)); never read the clock in a pure part.
//! - Only `run` and `record` write `RunState` during a run.

mod budget;
mod continuation;
mod driver;
mod facts;
mod grant;
mod iteration;
mod limit_wait;
mod now;
mod publish;
mod record;
mod run;
mod seams;
mod snapshots;
pub(crate) mod start;
mod stop;
mod takeover;
mod verdict;
mod verify;
mod waiting;

pub(crate) use budget::CountedFrom;
pub(crate) use iteration::meter;
use now::Now;
pub(crate) use record::checkpoint_outside_a_run;
pub(crate) use run::*;
pub(crate) use seams::next_shard;
