//! A worker's exit on the remote (pure): everything it must leave there
//! goes in one atomic push, so that a remote that does not answer delays
//! the exit by one bound, not one per record; and when that push cannot
//! be made, what the remote lacks and how the fleet recovers.
//!
//! The push holds its status (`workers/<id>`), its end record
//! (`ends/<worker>-<ms>`), what its loops still owe the ledger, and for
//! the item it holds as it stops: its branch and snapshot as they are in
//! the clone, its loop's record and the claim's delete. All or nothing
//! (`--atomic`): a claim is never released without the work it released.

use git2::Oid;

use super::wire::Update;
use crate::formats::Unrecorded;

/// What a worker leaves on the remote as it exits.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Leaving {
    /// Its last status, over what the clone saw there.
    pub(crate) status: Update,
    /// Its end record (created).
    pub(crate) end: Update,
    /// The ledger with what its loops owe added (over what the clone saw).
    pub(crate) spending: Option<Update>,
    /// The item it still holds.
    pub(crate) item: Option<Giving>,
}

/// The item a worker gives back as it exits: its refs, in the clone and
/// as last pushed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Giving {
    pub(crate) key: String,
    /// The claim's ref and this worker's commit there.
    pub(crate) claim: (String, Oid),
    /// `false` once the remote showed the claim taken over: its claim,
    /// branch and snapshot are another worker's now.
    pub(crate) ours: bool,
    /// The item's branch (the same name in the clone and on the remote).
    pub(crate) branch: Work,
    pub(crate) snapshot: Work,
    /// The round's loop record (created).
    pub(crate) record: Option<Update>,
}

/// One ref of an item's work: its commit here, and on the remote as last pushed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Work {
    pub(crate) refname: String,
    pub(crate) local: Option<Oid>,
    pub(crate) pushed: Option<Oid>,
}

impl Work {
    /// The update that brings the remote to the clone's commit, if it differs.
    pub(crate) fn update(&self) -> Option<Update> {
        let new = self.local.filter(|l| Some(*l) != self.pushed)?;
        Some(match self.pushed {
            Some(old) => Update::swap(self.refname.as_str(), old, new),
            None => Update::create(self.refname.as_str(), new),
        })
    }
}

impl Giving {
    /// The remote as a fetch after a race lost shows it: the claim (its
    /// commit and holder), the item's branch and snapshot. Whom the item
    /// was lost to, if the claim is no longer this worker's commit.
    pub(crate) fn seen(
        &mut self,
        claim: Option<(Oid, &str)>,
        branch: Option<Oid>,
        snapshot: Option<Oid>,
    ) -> Option<String> {
        self.ours = claim.is_some_and(|(oid, _)| oid == self.claim.1);
        self.branch.pushed = branch;
        self.snapshot.pushed = snapshot;
        match claim {
            _ if self.ours => None,
            Some((_, holder)) => Some(holder.to_string()),
            None => Some("nobody".to_string()),
        }
    }

    fn updates(&self) -> Vec<Update> {
        let mut out = Vec::new();
        if self.ours {
            out.extend(self.branch.update());
            out.extend(self.snapshot.update());
            let (claim, held) = &self.claim;
            out.push(Update::delete(claim.as_str(), *held));
        }
        out.extend(self.record.clone());
        out
    }

    /// The branch whose commits the remote lacks (only in this clone), if
    /// the push of everything did not go through or the item is not ours.
    fn only_local(&self) -> Option<String> {
        self.branch.update().map(|_| self.branch.refname.clone())
    }
}

impl Leaving {
    /// The one atomic push.
    pub(crate) fn updates(&self) -> Vec<Update> {
        let mut out = vec![self.status.clone(), self.end.clone()];
        out.extend(self.spending.clone());
        out.extend(self.item.iter().flat_map(Giving::updates));
        out
    }

    /// What the remote lacks when the push did not go through, and the
    /// branch whose commits are only in this clone.
    pub(crate) fn unrecorded(&self) -> (Vec<Unrecorded>, Option<String>) {
        let mut missing = vec![Unrecorded::Status, Unrecorded::EndRecord];
        if self.spending.is_some() {
            missing.push(Unrecorded::Spending);
        }
        let Some(item) = &self.item else {
            return (missing, None);
        };
        if item.ours {
            missing.push(Unrecorded::Release);
            if item.branch.update().is_some() {
                missing.push(Unrecorded::Branch);
            }
            if item.snapshot.update().is_some() {
                missing.push(Unrecorded::Snapshot);
            }
        }
        if item.record.is_some() {
            missing.push(Unrecorded::LoopRecord);
        }
        (missing, item.only_local())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oid(n: u8) -> Oid {
        Oid::from_bytes(&[n; 20]).unwrap()
    }

    fn work(refname: &str, local: Option<u8>, pushed: Option<u8>) -> Work {
        Work {
            refname: refname.into(),
            local: local.map(oid),
            pushed: pushed.map(oid),
        }
    }

    fn leaving(item: Option<Giving>, spending: bool) -> Leaving {
        Leaving {
            status: Update::swap("workers/wa", oid(1), oid(2)),
            end: Update::create("ends/wa-1", oid(3)),
            spending: spending.then(|| Update::swap("ledger", oid(4), oid(5))),
            item,
        }
    }

    fn giving(branch: Work, snapshot: Work, ours: bool) -> Giving {
        Giving {
            key: "i-1".into(),
            claim: ("claims/i-1".into(), oid(6)),
            ours,
            branch,
            snapshot,
            record: Some(Update::create("loops/i-1-1-wa", oid(7))),
        }
    }

    fn names(updates: &[Update]) -> Vec<&str> {
        updates.iter().map(|u| u.refname.as_str()).collect()
    }

    #[test]
    fn one_push_carries_all_a_worker_leaves_and_a_failed_one_says_what_the_remote_lacks() {
        use Unrecorded::*;
        struct Case {
            what: &'static str,
            leaving: Leaving,
            pushed: Vec<&'static str>,
            missing: Vec<Unrecorded>,
            only_local: Option<&'static str>,
        }
        let cases = [
            Case {
                what: "finished: nothing held, nothing owed",
                leaving: leaving(None, false),
                pushed: vec!["workers/wa", "ends/wa-1"],
                missing: vec![Status, EndRecord],
                only_local: None,
            },
            Case {
                what: "stopped with new commits and a new snapshot, owing the ledger",
                leaving: leaving(
                    Some(giving(
                        work("items/i-1", Some(8), Some(9)),
                        work("snapshots/i-1", Some(10), None),
                        true,
                    )),
                    true,
                ),
                pushed: vec![
                    "workers/wa",
                    "ends/wa-1",
                    "ledger",
                    "items/i-1",
                    "snapshots/i-1",
                    "claims/i-1",
                    "loops/i-1-1-wa",
                ],
                missing: vec![
                    Status, EndRecord, Spending, Release, Branch, Snapshot, LoopRecord,
                ],
                only_local: Some("items/i-1"),
            },
            Case {
                what: "stopped with everything pushed already: the claim's release only",
                leaving: leaving(
                    Some(giving(
                        work("items/i-1", Some(8), Some(8)),
                        work("snapshots/i-1", Some(10), Some(10)),
                        true,
                    )),
                    false,
                ),
                pushed: vec!["workers/wa", "ends/wa-1", "claims/i-1", "loops/i-1-1-wa"],
                missing: vec![Status, EndRecord, Release, LoopRecord],
                only_local: None,
            },
            Case {
                what: "taken over meanwhile: nothing of the item's but the loop's record",
                leaving: leaving(
                    Some(giving(
                        work("items/i-1", Some(8), Some(9)),
                        work("snapshots/i-1", Some(10), Some(11)),
                        false,
                    )),
                    false,
                ),
                pushed: vec!["workers/wa", "ends/wa-1", "loops/i-1-1-wa"],
                missing: vec![Status, EndRecord, LoopRecord],
                only_local: Some("items/i-1"),
            },
        ];
        for c in cases {
            assert_eq!(names(&c.leaving.updates()), c.pushed, "{}", c.what);
            let (missing, only_local) = c.leaving.unrecorded();
            assert_eq!(missing, c.missing, "{}", c.what);
            assert_eq!(only_local.as_deref(), c.only_local, "{}", c.what);
        }
    }

    #[test]
    fn after_a_race_lost_only_what_is_still_this_workers_is_pushed_again() {
        let fresh = || {
            giving(
                work("items/i-1", Some(8), Some(9)),
                work("snapshots/i-1", Some(10), None),
                true,
            )
        };
        // Still ours (the ledger or the status moved): everything again,
        // each swap from what the remote holds now.
        let mut g = fresh();
        assert_eq!(
            g.seen(Some((oid(6), "wa")), Some(oid(9)), Some(oid(11))),
            None
        );
        assert!(g.ours);
        assert_eq!(
            g.snapshot.update(),
            Some(Update::swap("snapshots/i-1", oid(11), oid(10)))
        );
        // Taken over by wb: its record only; our commits stay here.
        let mut g = fresh();
        assert_eq!(
            g.seen(Some((oid(12), "wb")), Some(oid(13)), None)
                .as_deref(),
            Some("wb")
        );
        assert_eq!(names(&g.updates()), ["loops/i-1-1-wa"]);
        assert_eq!(g.only_local().as_deref(), Some("items/i-1"));
        // Merged and deleted meanwhile (nobody holds it).
        let mut g = fresh();
        assert_eq!(g.seen(None, None, None).as_deref(), Some("nobody"));
        assert!(!g.ours);
    }

    #[test]
    fn the_release_deletes_the_claim_by_this_workers_commit_and_work_swaps_from_what_was_pushed() {
        let g = giving(
            work("items/i-1", Some(8), Some(9)),
            work("snapshots/i-1", Some(10), None),
            true,
        );
        let updates = g.updates();
        assert_eq!(updates[0], Update::swap("items/i-1", oid(9), oid(8)));
        assert_eq!(updates[1], Update::create("snapshots/i-1", oid(10)));
        assert_eq!(updates[2], Update::delete("claims/i-1", oid(6)));
        // No commit in the clone: nothing to push (a worktree gone).
        assert_eq!(work("items/i-1", None, Some(9)).update(), None);
    }
}
