//! Parallel workers (`ralph run --workers N`, docs/workers.md): one plan
//! run by several agents at once, each in its own git worktree, merged back
//! one at a time with nothing stranded.
//!
//! Theory: the ralph the user started is the **coordinator**, the only
//! writer of the plan and of the run branch (the branch it was started
//! on). The plan is cut into **units** (`plan::units`): a top-level item with
//! its sub-items; `(after: …)` and `(serial)` headings make units wait.
//! Each worker is an ordinary ralph loop in its own worktree on its own
//! branch, given one unit at a time. A finished unit's branch goes through
//! the **merge queue** (`merge`): one merge at a time, a backup ref before
//! each, a conflict handed back to a worker to bring its branch up to date.
//! The coordinator checks a unit off only after its work is merged.
//!
//! ```text
//! workers.rs         this map
//! workers/
//!   coordinator.rs, coordinator/  the loop that gives out units, merges, checks off;
//!                    its decisions a pure machine (`coordinator/machine.rs`)
//!   grant.rs         shared budgets granted before a session starts (pure
//!                    decision, table-tested) and the grant file a worker reads
//!   child.rs         a worker's `ralph run --worker` child process and its events
//!   merge.rs         one worker branch merged into the run branch (git2)
//!   ledger.rs        `.ralph/workers.json`, read by a takeover
//!   fleet.rs, fleet/ many machines on one plan through the git remote
//!                    (`ralph run --remote R --fleet NAME`, issue 26, docs/fleet.md)
//! ```
//!
//! Pitfalls: a worker never commits the shared plan (it works from its own
//! copy of its unit, under `.ralph/`), or every merge would conflict on
//! the checkboxes; the run branch's work tree is the user's checkout, so a
//! merge updates it only with git's safe checkout.

mod child;
mod coordinator;
pub(crate) mod fleet;
pub(crate) mod grant;
mod ledger;
pub(crate) mod merge;

pub(crate) use child::WORKER_PROMPT;
pub(crate) use coordinator::{Options, run};
pub(crate) use ledger::refuse_a_single_loop;
pub(crate) use merge::{MergeRequest, merge};
