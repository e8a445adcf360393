//! The plan (`fix_plan.md`) and its items as units of work: checkbox items,
//! which item an iteration works on, what each item is expected to cost and
//! really cost, and the decision log.
//!
//! ```text
//! plan.rs            this map
//! plan/
//!   checklist.rs     Plan: open/in-progress/done/cancelled items outside fences and comments
//!   items.rs         ItemTracker, ItemAccount, boundary and shard rules, .ralph/items.jsonl
//!   estimate.rs      an item's expected context cost and confidence (pure)
//!   units.rs         items → units a worker can be given: sub-items, `(after: …)`, `(serial)`, ready units, a worker's own plan, checking a unit off (pure)
//!   decisions.rs     the decision log .ralph/decisions.md (DEC-NNN, supersedes)
//! ```

mod checklist;
pub mod decisions;
pub mod estimate;
pub mod items;
pub(crate) mod units;

pub use checklist::*;
