//! User hooks from `ralph.toml` `[hooks]`: which event fires which hook
//! point, what a command gets (`RALPH_*` variables and the event's JSON line
//! on stdin), retries, and the `hook` events that report each run.
//! docs/hooks.md is the user's side of this.
//!
//! ```text
//! hooks.rs           this map
//! hooks/
//!   runner.rs        Point, Facts, Hooks (a worker thread), env, retries
//!   process.rs       one command in its own process group: pipes, timeout, kill
//! ```
//!
//! Pitfalls: values are passed in the environment, never interpolated into
//! the command; the loop waits for hooks except `on_level`.

pub(crate) mod process;
mod runner;

pub use process::watch_interrupts;
pub use runner::*;
