//! ralph's runtime directory `.ralph/`: its layout (every path under it),
//! the run state `.ralph/state.json` (versioned, written atomically), the
//! `flock`ed `.ralph/lock` that names the running supervisor, and which
//! files are ralph's (the prompt file, its output files, git's exclude).
//!
//! ```text
//! state.rs           this map
//! state/
//!   run_state.rs     Layout, RunState and its records, Trigger, atomic/private writes
//!   outcome.rs       IterationOutcome: an iteration's outcome, typed, as the same strings
//!   lock.rs          Lock, LockInfo: the running supervisor and its agent's sessions
//!   ownership.rs     the prompt file ralph may overwrite, .git/info/exclude, keep_runtime
//! ```
//!
//! Pitfalls: `state.json` is an on-disk format (`STATE_VERSION`); add
//! fields with serde defaults, never rename. Everything under `.ralph/` is
//! user-only (0700/0600).

mod lock;
mod outcome;
pub(crate) mod ownership;
mod run_state;

pub(crate) use lock::running_supervisor;
pub use lock::{Lock, read_lock};
pub(crate) use outcome::IterationOutcome;
pub use run_state::*;
