//! The project's own commands that ralph runs from `ralph.toml`, all on one
//! process runner (`agent::shell`, beside the agent's own launcher): the `[hooks]` (which event fires which hook point, what a
//! command gets — `RALPH_*` variables and the event's JSON line on stdin —,
//! retries, and the `hook` events that report each run; docs/hooks.md) and
//! the `[verify]` checks (docs/verify.md).
//!
//! ```text
//! hooks.rs           this map
//! hooks/
//!   runner.rs        which event fires which Point, Facts, Hooks (a worker thread), env, retries
//!   verify.rs        `[verify]`: the checks, run in order, stopping at the first failure
//! ```
//!
//! Pitfalls: values are passed in the environment, never interpolated into
//! the command; the loop waits for hooks except `on_level`.

mod runner;
pub(crate) mod verify;

pub(crate) use runner::*;
