//! The item a worker holds, and how its work ended: shared by the worker's
//! files (`worker`, `item`, `merge`), so that none imports another's.

use std::path::PathBuf;

use git2::Oid;

use super::leave::Giving;
use super::meter::Meter;
use super::remote::Held;
use super::units::Unit;

/// The item a worker holds: its unit, its claim, its worktree, and its
/// branch's and snapshot's commits on the remote as last pushed or seen.
pub(crate) struct Job {
    pub(crate) unit: Unit,
    pub(crate) held: Held,
    /// The worktree's project root.
    pub(crate) wt_root: PathBuf,
    pub(crate) pushed_item: Option<Oid>,
    pub(crate) pushed_snapshot: Option<Oid>,
    /// The loop's log, tailed for the ledger and its record.
    pub(crate) meter: Meter,
    /// The loop's round on the item (1, then one more per conflict or pause)
    /// and when it began.
    pub(crate) round: u32,
    pub(crate) round_started: jiff::Timestamp,
    /// Why the worker stopped its loop, if it did.
    pub(crate) halt: Option<Halt>,
}

/// Why a worker stops its item's loop before the loop ends by itself.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Halt {
    /// The fleet's budget is spent (the ledger says what).
    Budget(String),
    /// A usage limit another worker's agent hit: checkpoint now, go on
    /// with the item once it resets.
    Limit(super::remote::Limit),
    /// The remote's rules refused a push of the item's work (its message):
    /// the item is given up for the fleet.
    Refused(String),
}

/// How one item's work ended.
pub(crate) enum ItemEnd {
    Merged,
    /// Lost to a takeover, or the merge found it already done: next item.
    Gone,
    /// SIGTERM/SIGINT: pushed and released.
    Stopped,
    /// The loop ended without completing (its exit code): pushed and released.
    Failed(i32),
    /// The remote's rules refused the merge (the server's message).
    Refused(String),
}

/// The item a worker gives back as it exits, for its exit's one push:
/// its refs, how many of the worker's records its loop record carries,
/// and its `fleet_released`, said once the push is made.
pub(crate) struct Left {
    pub(crate) giving: Giving,
    pub(crate) carried: usize,
    pub(crate) released: crate::formats::Record,
}
