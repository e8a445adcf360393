//! Leases (pure): the record a claim commit carries, the names of a fleet's
//! refs, and the one rule that says a lease has expired.
//!
//! A lease is a ref on the remote pointing at a commit (empty tree) whose
//! message carries a [`Lease`] as JSON. Taking it is an atomic create of
//! the ref; renewing it is a compare-and-swap from the holder's last commit
//! to a child commit with a newer `renewed_at`; a takeover after expiry is a
//! compare-and-swap from the expired commit (the one the taker judged) to a
//! commit of its own with `generation + 1`; releasing it deletes the ref, again
//! only if it still points at the holder's commit. Every commit is unique
//! (holder, times, generation), so two workers can never push the same
//! value, and a holder whose lease was taken over learns it from its next
//! renewal being refused — it then stops working on the item. One ref per
//! item (not one per generation): the compare-and-swap already makes the
//! takeover exclusive, and the commit chain (each takeover's parent is the
//! commit it replaced) keeps the history of who held it.
//!
//! Clock skew: `renewed_at` is the holder's wall clock. A lease counts as
//! expired when either (a) its commit has not changed for a whole lease
//! length as measured by the observer's own monotonic clock (no clocks
//! compared at all), or (b) the observer's wall clock is past `renewed_at +
//! lease + skew`, so clocks that disagree by less than `[fleet] clock_skew`
//! never cut a live lease short. (b) lets a newly started worker take over a
//! long-dead claim at once; (a) bounds the wait whatever the clocks say.
//! Neither applies within a lease of the observer reaching the remote
//! again after calls that could not (`Fleet::expired`): it cannot tell a
//! dead holder from one that was as cut off as itself.

use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The longest item text a claim or a status carries, in characters: each
/// is pushed again at every beat.
pub(super) const ITEM_TEXT: usize = 300;

/// What a lease commit says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Lease {
    /// The worker holding it.
    pub(crate) holder: String,
    /// What it is for: an item's key, or `merge`.
    pub(crate) what: String,
    /// The item's text (empty for the merge lease), for `ralph status --fleet`:
    /// cut, as every renewal pushes it again.
    #[serde(default)]
    pub(crate) text: String,
    /// 1 for the first claim, one more for each takeover.
    pub(crate) generation: u32,
    /// When this generation began.
    pub(crate) taken_at: Timestamp,
    pub(crate) renewed_at: Timestamp,
    /// The lease's length in seconds, as the holder set it.
    pub(crate) lease_secs: u64,
    /// Whom it was taken over from, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) took_over_from: Option<String>,
    /// Why its holder gave the item up for the whole fleet (a conflict it
    /// could not resolve, a push the remote refused): such a claim never
    /// expires, so no other worker pays for the same end; a person frees
    /// it by deleting the ref.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) given_up: Option<String>,
    /// Given up because the remote's rules refused its push: any item's
    /// work would meet them, so no worker starts another (`fleet_rules_refuse`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) refused: bool,
}

impl Lease {
    pub(crate) fn new(
        holder: &str,
        what: &str,
        text: &str,
        lease: Duration,
        now: Timestamp,
    ) -> Lease {
        Lease {
            holder: holder.to_string(),
            what: what.to_string(),
            text: crate::text::cut(text, ITEM_TEXT),
            generation: 1,
            taken_at: now,
            renewed_at: now,
            lease_secs: lease.as_secs().max(1),
            took_over_from: None,
            given_up: None,
            refused: false,
        }
    }

    /// The next generation, taken over by `holder` from this one.
    pub(crate) fn taken_over(&self, holder: &str, lease: Duration, now: Timestamp) -> Lease {
        Lease {
            holder: holder.to_string(),
            generation: self.generation + 1,
            taken_at: now,
            renewed_at: now,
            lease_secs: lease.as_secs().max(1),
            took_over_from: Some(self.holder.clone()),
            ..self.clone()
        }
    }

    /// Given up for the whole fleet, for `why`; `refused` by the remote's rules.
    pub(crate) fn given_up(&self, why: &str, refused: bool, now: Timestamp) -> Lease {
        Lease {
            renewed_at: now,
            given_up: Some(why.to_string()),
            refused,
            ..self.clone()
        }
    }

    pub(crate) fn renewed(&self, now: Timestamp) -> Lease {
        Lease {
            renewed_at: now,
            ..self.clone()
        }
    }

    /// When the holder's own clock says it runs out.
    pub(crate) fn expires_at(&self) -> Timestamp {
        self.renewed_at
            .checked_add(jiff::SignedDuration::from_secs(self.lease_secs as i64))
            .unwrap_or(self.renewed_at)
    }

    /// The rule (the module's theory): expired when its commit stayed the
    /// same for a whole lease on the observer's monotonic clock
    /// (`unchanged_for`), or when the observer's wall clock `now` is past
    /// the holder's expiry by more than `skew`.
    /// A claim given up never expires.
    pub(crate) fn expired(&self, now: Timestamp, unchanged_for: Duration, skew: Duration) -> bool {
        if self.given_up.is_some() {
            return false;
        }
        let lease = Duration::from_secs(self.lease_secs);
        if unchanged_for >= lease {
            return true;
        }
        let limit = self
            .expires_at()
            .checked_add(jiff::SignedDuration::try_from(skew).unwrap_or_default())
            .unwrap_or(Timestamp::MAX);
        now > limit
    }

    /// The commit message: a line for `git log`, then the record.
    pub(crate) fn message(&self) -> String {
        let json = serde_json::to_string(self).expect("a lease serialises");
        format!(
            "ralph fleet: {} {} by {} (generation {})\n\n{json}\n",
            if self.what == MERGE {
                "merge lease"
            } else if self.given_up.is_some() {
                "given up"
            } else {
                "claim"
            },
            self.what,
            self.holder,
            self.generation
        )
    }

    pub(crate) fn parse(message: &str) -> Result<Lease> {
        record(message)
    }
}

/// The JSON record after a commit message's first blank line.
pub(crate) fn record<T: for<'de> Deserialize<'de>>(message: &str) -> Result<T> {
    let body = message.split_once("\n\n").map_or("", |(_, b)| b).trim();
    serde_json::from_str(body)
        .map_err(|e| Error::wrap("a fleet ref's commit does not carry ralph's record", e))
}

/// The merge lease's `what`.
pub(crate) const MERGE: &str = "merge";

/// The refs of one fleet, on the remote and as fetched into the clone.
///
/// ```text
/// refs/heads/ralph/fleet/<name>/run            the run branch (the plan, merged work)
/// refs/heads/ralph/fleet/<name>/items/<key>    an item's work, pushed as it goes
/// refs/ralph/fleet/<name>/claims/<key>         an item's lease
/// refs/ralph/fleet/<name>/merge                the merge lease
/// refs/ralph/fleet/<name>/ledger               the shared budget (iterations, cost)
/// refs/ralph/fleet/<name>/workers/<worker>     each worker's last word (status)
/// refs/ralph/fleet/<name>/snapshots/<key>      an item's newest work-tree snapshot
/// refs/ralph/fleet/<name>/backups/<stamp>      the run branch before each merge
/// refs/ralph/fleet/<name>/loops/<key>-<stamp>-<worker>  what an item's loop did (its record and log)
/// refs/ralph/fleet/<name>/ends/<worker>-<stamp>        what a worker said after its last loop record
/// ```
///
/// Fetched, `refs/heads/ralph/fleet/<name>/X` lands on
/// `refs/ralph/seen/<name>/heads/X` and `refs/ralph/fleet/<name>/X` on
/// `refs/ralph/seen/<name>/ctl/X`, so the clone's own branches are never
/// touched by a fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    fleet: String,
}

impl Names {
    /// `fleet` must be one ref-name component: letters, digits, `.`, `_`, `-`.
    pub(crate) fn new(fleet: &str) -> Result<Names> {
        if valid_component(fleet) {
            Ok(Names {
                fleet: fleet.to_string(),
            })
        } else {
            Err(
                Error::usage(format!("`--fleet {fleet}` is not a usable fleet name")).with_hint(
                    "use letters, digits, `.`, `_` and `-` (at most 100), e.g. `--fleet nightly`",
                ),
            )
        }
    }

    pub(crate) fn fleet(&self) -> &str {
        &self.fleet
    }

    fn heads(&self) -> String {
        format!("refs/heads/ralph/fleet/{}/", self.fleet)
    }

    fn ctl(&self) -> String {
        format!("refs/ralph/fleet/{}/", self.fleet)
    }

    pub(crate) fn run_branch(&self) -> String {
        format!("{}run", self.heads())
    }

    pub(crate) fn item_branch(&self, key: &str) -> String {
        format!("{}items/{key}", self.heads())
    }

    pub(crate) fn claim(&self, key: &str) -> String {
        format!("{}claims/{key}", self.ctl())
    }

    pub(crate) fn merge_lease(&self) -> String {
        format!("{}{MERGE}", self.ctl())
    }

    pub(crate) fn ledger(&self) -> String {
        format!("{}ledger", self.ctl())
    }

    pub(crate) fn worker(&self, id: &str) -> String {
        format!("{}workers/{id}", self.ctl())
    }

    pub(crate) fn snapshot(&self, key: &str) -> String {
        format!("{}snapshots/{key}", self.ctl())
    }

    pub(crate) fn backup(&self, stamp: &str) -> String {
        format!("{}backups/{stamp}", self.ctl())
    }

    /// One item loop's record: `name` is unique (`<key>-<stamp>-<worker>`).
    pub(crate) fn loop_record(&self, name: &str) -> String {
        format!("{}loops/{name}", self.ctl())
    }

    /// A worker's end record: `name` is unique (`<worker>-<stamp>`).
    pub(crate) fn end_record(&self, name: &str) -> String {
        format!("{}ends/{name}", self.ctl())
    }

    /// What `git fetch` is given: every ref of this fleet, into the mirror.
    pub(crate) fn refspecs(&self) -> Vec<String> {
        vec![
            format!("+{}*:{}*", self.heads(), self.seen_heads()),
            format!("+{}*:{}*", self.ctl(), self.seen_ctl()),
        ]
    }

    fn seen_heads(&self) -> String {
        format!("refs/ralph/seen/{}/heads/", self.fleet)
    }

    fn seen_ctl(&self) -> String {
        format!("refs/ralph/seen/{}/ctl/", self.fleet)
    }

    /// Where a remote ref of this fleet is mirrored in the clone.
    pub(crate) fn seen(&self, remote_ref: &str) -> String {
        if let Some(rest) = remote_ref.strip_prefix(&self.heads()) {
            format!("{}{rest}", self.seen_heads())
        } else if let Some(rest) = remote_ref.strip_prefix(&self.ctl()) {
            format!("{}{rest}", self.seen_ctl())
        } else {
            remote_ref.to_string()
        }
    }

    /// The mirror's prefix of one family (`claims/`, `workers/`, …).
    pub(crate) fn seen_prefix(&self, family: &str) -> String {
        format!("{}{family}", self.seen_ctl())
    }
}

/// One ref-name component that needs no quoting anywhere.
pub(crate) fn valid_component(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && !s.starts_with('.')
        && !s.ends_with(".lock")
        && !s.contains("..")
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_huge_items_claim_stays_small() {
        // Every renewal pushes the claim again: a 1 MB item cost 1 MB a beat.
        let huge = "x".repeat(1 << 20);
        let l = Lease::new(
            "w1",
            "i-abc",
            &huge,
            Duration::from_secs(60),
            Timestamp::now(),
        );
        assert!(serde_json::to_string(&l).unwrap().len() < 2048);
        assert!(l.text.starts_with("xxx"));
    }

    fn lease() -> Lease {
        Lease::new(
            "w1",
            "i-abc",
            "do it",
            Duration::from_secs(60),
            at("2026-11-24T03:00:00Z"),
        )
    }

    #[test]
    fn a_lease_expires_by_wall_clock_only_past_the_skew_allowance() {
        let l = lease();
        let skew = Duration::from_secs(30);
        let seen = Duration::ZERO;
        // Within the lease, and within lease + skew: live.
        assert!(!l.expired(at("2026-11-24T03:00:59Z"), seen, skew));
        assert!(!l.expired(at("2026-11-24T03:01:30Z"), seen, skew));
        // Past lease + skew: expired.
        assert!(l.expired(at("2026-11-24T03:01:31Z"), seen, skew));
        // An observer whose clock runs behind never expires it early.
        assert!(!l.expired(at("2026-11-24T02:50:00Z"), Duration::from_secs(59), skew));
    }

    #[test]
    fn a_lease_unchanged_for_a_whole_lease_is_expired_whatever_the_clocks_say() {
        let l = lease();
        // The observer's clock is an hour behind: only the observation counts.
        let behind = at("2026-11-24T02:00:00Z");
        assert!(!l.expired(behind, Duration::from_secs(59), Duration::from_secs(30)));
        assert!(l.expired(behind, Duration::from_secs(60), Duration::from_secs(30)));
    }

    #[test]
    fn a_claim_given_up_never_expires_and_says_why() {
        let g = lease().given_up("still conflicts", false, at("2026-11-24T03:00:30Z"));
        let a_day_later = at("2026-11-25T03:00:00Z");
        assert!(!g.expired(a_day_later, Duration::from_secs(86_400), Duration::ZERO));
        let back = Lease::parse(&g.message()).unwrap();
        assert_eq!(back.given_up.as_deref(), Some("still conflicts"));
        assert!(g.message().starts_with("ralph fleet: given up i-abc by w1"));
    }

    #[test]
    fn renewal_and_takeover_make_new_records() {
        let l = lease();
        let r = l.renewed(at("2026-11-24T03:00:20Z"));
        assert_eq!((r.generation, r.taken_at), (1, l.taken_at));
        assert!(!r.expired(at("2026-11-24T03:01:15Z"), Duration::ZERO, Duration::ZERO));
        let t = r.taken_over("w2", Duration::from_secs(90), at("2026-11-24T03:05:00Z"));
        assert_eq!(
            (t.generation, t.holder.as_str(), t.lease_secs),
            (2, "w2", 90)
        );
        assert_eq!(t.took_over_from.as_deref(), Some("w1"));
        assert_eq!(t.what, "i-abc");
    }

    #[test]
    fn the_record_round_trips_through_the_commit_message() {
        let l = lease();
        let msg = l.message();
        assert!(msg.starts_with("ralph fleet: claim i-abc by w1 (generation 1)\n\n"));
        assert_eq!(Lease::parse(&msg).unwrap(), l);
        assert!(Lease::parse("no record here").is_err());
    }

    #[test]
    fn names_keep_branches_and_control_refs_apart() {
        let n = Names::new("nightly").unwrap();
        assert_eq!(n.run_branch(), "refs/heads/ralph/fleet/nightly/run");
        assert_eq!(n.claim("i-1"), "refs/ralph/fleet/nightly/claims/i-1");
        assert_eq!(n.seen(&n.run_branch()), "refs/ralph/seen/nightly/heads/run");
        assert_eq!(
            n.seen(&n.claim("i-1")),
            "refs/ralph/seen/nightly/ctl/claims/i-1"
        );
        for bad in ["", "a/b", "..", "x.lock", "a b", ".hidden", "é"] {
            assert!(Names::new(bad).is_err(), "{bad:?}");
        }
    }
}
