//! The item a worker holds, and how its work ended: shared by the worker's
//! files (`worker`, `item`, `merge`), so that none imports another's.

use std::path::PathBuf;

use git2::Oid;

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
}
