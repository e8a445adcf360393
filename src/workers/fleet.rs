//! Fleets (issue 26): many machines on one plan through the git remote.
//! See docs/fleet.md.
//!
//! ralph schedules no machines: Kubernetes, a CI matrix or any batch system
//! starts N processes with the same command line, `ralph run --remote R
//! --fleet NAME`, each in its own clone. They cooperate only through refs on
//! the remote, each written by an atomic create, compare-and-swap or delete
//! (`wire`): the first creates the run (run branch + ledger) from its plan,
//! the rest join; a worker claims an item by creating its claim ref and
//! renews it while it works (a lease); it pushes its item branch and
//! snapshots as it goes, so when its lease expires another worker takes
//! the item over from what was pushed; it merges into the run branch under
//! the merge lease, and the same atomic push checks the item off on the
//! plan, deletes its claim and its item branch, and keeps a backup ref of
//! the run branch before.
//!
//! ```text
//! fleet.rs           this map
//! fleet/
//!   wire.rs          fetch/push through the user's `git` (why: its docs), compare-and-swap pushes
//!   lease.rs         the lease record, the expiry rule and clock skew, the fleet's ref names (pure)
//!   units.rs         plan items as units: keys, sub-items, checking off, the one-item plan (pure)
//!   remote.rs        Fleet: sync, the run, acquire/renew/release, the ledger, workers' status
//!   worker.rs        the worker: join (or create the run), pick and claim a ready unit, an item's rounds
//!   job.rs           the item a worker holds (Job) and how its work ended (ItemEnd)
//!   item.rs          one item: its worktree (takeover: the pushed snapshot), its loop, beats, giving it back
//!   leave.rs         a worker's exit: all it leaves on the remote in one atomic push, what a failed one lacks (pure)
//!   reach.rs         the remote: retries with back-off, said; pauses; the worker's status ref; its exit's push
//!   live.rs          the item loop's live reading on the status ref: context, tool, state (pure, bounded)
//!   child.rs         the item's loop as a child `ralph run`, stop signals
//!   meter.rs         the item loop's log tailed: each iteration's spending and a usage limit, owed to the ledger
//!   loops.rs         each item loop's record on the remote (its log and state), for the morning report
//!   merge.rs         the merge under the merge lease: one atomic push
//!   say.rs           the worker's events (stderr / --json, .ralph/fleet/<name>/events.jsonl)
//!   status.rs        `ralph status --fleet NAME`
//!   watch.rs         `ralph watch --fleet NAME`: the fleet as the `RunView` the watch screen draws (pure), fetched again and again
//!   report.rs        `ralph report --fleet NAME`: the morning report from the remote (the report's renderers)
//! ```
//!
//! Pitfalls: a push that the remote refused (`Rejected`: another worker got
//! there first) and one that never arrived (`Unreachable`) mean different
//! things — the first is lost, the second is retried. Never push with
//! `+`/`--force`: every write names the value it replaces.

mod child;
mod item;
mod job;
mod lease;
mod leave;
mod live;
mod loops;
mod merge;
mod meter;
mod reach;
mod remote;
mod report;
mod say;
mod status;
mod units;
mod watch;
mod wire;
mod worker;

pub(crate) use report::report;
pub(crate) use status::{FleetStatus, status};
pub(crate) use watch::Watcher;
pub(crate) use worker::{Options, run};
