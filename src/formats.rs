//! ralph's persisted and wire formats, in one leaf home: what it writes to
//! disk or sends on a wire — the `.ralph/` layout (every path under it), the
//! run state `.ralph/state.json` (versioned, written atomically), an
//! iteration's outcome as it is recorded. Every subsystem imports these
//! types downward; this module imports only the leaves below it (`error`,
//! `text`, `platform`, `context`, `stream`, `rules`), never a subsystem,
//! so no import circle runs through a format (an architecture test says so).
//!
//! ```text
//! formats.rs         this map
//! formats/
//!   event.rs         Event, Record (events.jsonl, `--json`), StopStep, SnapshotReason, TrustAction, read_log
//!   fleet.rs         FleetEvent: a fleet worker's events (`Event::Fleet`, all `fleet_…`) and their human line
//!   ledger.rs        .ralph/workers.json: Ledger, Assignment, MergeRecord, Merged, Heard, ledger_of
//!   grant.rs         .ralph/grant.json: the sessions a worker's loop may start
//!   windows.rs       .ralph/windows.json: the models' context windows runs learnt, kept past them
//!   items.rs         an item's account, a shard request, the carry-over, Confidence
//!   run_state.rs     Layout, RunState and its records, Trigger, atomic/private writes
//!   verification.rs  Verification: a run of the [verify] checks as state, events and prompt keep it
//!   point.rs         Point: the hook points, the keys of [hooks] and the `hook` event's field
//!   outcome.rs       IterationOutcome: an iteration's outcome, typed, as the same strings
//! ```
//!
//! Pitfalls: these are on-disk formats (`STATE_VERSION`); add fields with
//! serde defaults, never rename. Everything under `.ralph/` is user-only
//! (0700/0600). The behaviour around a format lives with its subsystem
//! (the breaker's rules in `rules::breaker`, the lock in `project::lock`).

mod event;
mod fleet;
mod grant;
mod items;
pub(crate) mod ledger;
mod outcome;
mod point;
mod run_state;
pub(crate) mod verification;
mod windows;

pub use event::*;
pub use fleet::{FleetEvent, Unrecorded};
pub(crate) use grant::Grant;
pub use items::*;
pub(crate) use ledger::{Heard, Ledger, Merged, ledger_of};
pub(crate) use outcome::IterationOutcome;
pub use point::Point;
pub use run_state::*;
pub use verification::Verification;
pub(crate) use windows::Windows;
