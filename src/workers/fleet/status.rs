//! `ralph status --fleet NAME`: the fleet as the remote has it, from any
//! clone — every item (done, claimed and by whom, its lease, open), every
//! worker's last word, the merge lease and the shared budget. It fetches
//! and never pushes.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;

use super::lease::{Names, record};
use super::merge::MergeRecord;
use super::remote::{Fleet, Ledger, View, WorkerState, WorkerStatus};
use super::units::units;
use crate::error::{Error, Result};
use crate::plan::units::UnitState;

/// What `ralph status --fleet` shows (`--json`: this object).
#[derive(Debug, Default, Serialize)]
pub(crate) struct FleetStatus {
    pub(crate) fleet: String,
    pub(crate) remote: String,
    pub(crate) run_branch: String,
    /// The run branch's commit, if the run exists.
    pub(crate) run: Option<String>,
    pub(crate) items: Vec<ItemStatus>,
    pub(crate) workers: Vec<WorkerStatus>,
    /// The merge lease's holder, if one holds it.
    pub(crate) merging: Option<String>,
    pub(crate) ledger: Option<Ledger>,
    pub(crate) backups: usize,
    /// Every merge into the run branch, oldest first: the night's story.
    pub(crate) merged: Vec<Merge>,
}

/// One merge on the run branch.
#[derive(Debug, Serialize)]
pub(crate) struct Merge {
    pub(crate) at: Timestamp,
    pub(crate) commit: String,
    #[serde(flatten)]
    pub(crate) record: MergeRecord,
}

#[derive(Debug, Serialize)]
pub(crate) struct ItemStatus {
    pub(crate) key: String,
    pub(crate) text: String,
    /// `done`, `cancelled`, `claimed`, `expired` (its lease ran out: the
    /// next worker takes it over), `given_up` (for the whole fleet: left to
    /// a person) or `open`.
    pub(crate) state: &'static str,
    /// Why its holder gave it up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) given_up: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) holder: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) generation: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lease_expires_at: Option<Timestamp>,
    /// Work pushed on the item's branch, not merged yet.
    pub(crate) pushed: bool,
}

/// Fetch the fleet's refs through `remote` and describe them.
pub(crate) fn status(
    root: &Path,
    remote: &str,
    fleet: &str,
    lease: Duration,
    skew: Duration,
) -> Result<FleetStatus> {
    let (f, view) = fetch(root, remote, fleet, skew)?;
    Ok(describe(&f, &view, lease))
}

/// The fleet's refs, fetched through `remote` into the clone at `root`
/// (as an observer named `status`: it never pushes).
pub(super) fn fetch(
    root: &Path,
    remote: &str,
    fleet: &str,
    skew: Duration,
) -> Result<(Fleet, View)> {
    fetch_with(root, remote, fleet, skew, Duration::from_secs(60))
}

/// [`fetch`], each fetch bounded by `timeout`.
pub(super) fn fetch_with(
    root: &Path,
    remote: &str,
    fleet: &str,
    skew: Duration,
    timeout: Duration,
) -> Result<(Fleet, View)> {
    let names = Names::new(fleet)?;
    let mut f = Fleet::open(
        root,
        remote,
        names,
        "status",
        Duration::from_secs(60),
        skew,
        timeout,
    )
    .map_err(|e| {
        Error::usage(format!("cannot read the fleet: {e}"))
            .with_hint("run it inside a clone of the fleet's remote")
    })?;
    let view = f.sync().map_err(|e| {
        Error::usage(format!(
            "cannot fetch the fleet `{fleet}` from `{remote}`: {e}"
        ))
    })?;
    Ok((f, view))
}

/// The fleet as `view` has it; `lease`: the fleet's `[fleet] lease`, for
/// telling a dead worker from a busy one.
pub(super) fn describe(f: &Fleet, view: &View, lease: Duration) -> FleetStatus {
    let names = f.names();
    let plan = match (&view.run, &view.ledger) {
        (Some(run), Some((_, ledger))) => {
            let read = || -> std::result::Result<String, git2::Error> {
                let repo = f.repo();
                let tree = repo.find_commit(*run)?.tree()?;
                let blob = repo.find_blob(tree.get_path(Path::new(&ledger.plan))?.id())?;
                Ok(String::from_utf8_lossy(blob.content()).into_owned())
            };
            read().unwrap_or_default()
        }
        _ => String::new(),
    };
    let items = units(&plan)
        .unwrap_or_default()
        .into_iter()
        .map(|u| {
            let claim = view.claims.get(&u.key);
            let state = match claim {
                _ if u.state == UnitState::Done => "done",
                _ if u.state == UnitState::Cancelled => "cancelled",
                Some((_, lease)) if lease.given_up.is_some() => "given_up",
                Some((oid, lease)) if f.expired(&names.claim(&u.key), *oid, lease) => "expired",
                Some(_) => "claimed",
                None => "open",
            };
            ItemStatus {
                given_up: claim.and_then(|(_, l)| l.given_up.clone()),
                pushed: view.items.contains_key(&u.key),
                holder: claim.map(|(_, l)| l.holder.clone()),
                generation: claim.map(|(_, l)| l.generation),
                lease_expires_at: claim.map(|(_, l)| l.expires_at()),
                key: u.key,
                text: u.text,
                state,
            }
        })
        .collect();
    let merged = view
        .run
        .map(|run| history(f.repo(), run))
        .unwrap_or_default();
    FleetStatus {
        fleet: names.fleet().to_string(),
        remote: f.wire().remote().to_string(),
        run_branch: names.run_branch(),
        run: view.run.map(|o| o.to_string()),
        items,
        workers: view
            .workers
            .iter()
            .map(|w| judged(w, view, Timestamp::now(), lease, f.skew()))
            .collect(),
        merging: view.merge.as_ref().map(|(_, l)| l.holder.clone()),
        ledger: view.ledger.as_ref().map(|(_, l)| l.clone()),
        backups: view.backups.len(),
        merged,
    }
}

/// A worker's last word as it stands at `now` (pure): one that says it is
/// busy (working, merging, or waiting without a usage limit to wait out)
/// speaks at least every third of a lease, so after a lease and the clock
/// skew allowance of silence it is dead, or cut off from the remote.
fn judged(
    w: &WorkerStatus,
    view: &View,
    now: Timestamp,
    lease: Duration,
    skew: Duration,
) -> WorkerStatus {
    let waiting_out_a_limit = w.state == WorkerState::Waiting
        && view
            .ledger
            .as_ref()
            .is_some_and(|(_, l)| l.limited(now).is_some());
    let busy = matches!(
        w.state,
        WorkerState::Working | WorkerState::Merging | WorkerState::Waiting
    );
    let silent = now.duration_since(w.at).unsigned_abs();
    if !busy || waiting_out_a_limit || silent <= lease + skew {
        return w.clone();
    }
    WorkerStatus {
        state: WorkerState::Dead,
        note: format!(
            "{} {}s ago and silent since (a live worker speaks every third of a lease): killed, or cut off from the remote",
            w.state.as_str(),
            silent.as_secs()
        ),
        ..w.clone()
    }
}

/// The merges on the run branch's first-parent line, oldest first (the
/// walk stops at the first commit that is not a fleet merge: the base).
fn history(repo: &git2::Repository, run: git2::Oid) -> Vec<Merge> {
    let mut out = Vec::new();
    let mut at = Some(run);
    while let Some(oid) = at {
        let Ok(commit) = repo.find_commit(oid) else {
            break;
        };
        let Ok(record) = record::<MergeRecord>(commit.message().unwrap_or_default()) else {
            break;
        };
        out.push(Merge {
            at: Timestamp::from_second(commit.time().seconds()).unwrap_or_default(),
            commit: oid.to_string(),
            record,
        });
        at = commit.parent_id(0).ok();
    }
    out.reverse();
    out
}

impl FleetStatus {
    pub(crate) fn human(&self) -> String {
        let mut out = String::new();
        let Some(run) = &self.run else {
            let _ = writeln!(
                out,
                "fleet {}: no run on {} yet (the first worker creates it)",
                self.fleet, self.remote
            );
            return out;
        };
        let done = self.items.iter().filter(|i| i.state == "done").count();
        let _ = writeln!(
            out,
            "fleet {} on {}: {} at {}",
            self.fleet,
            self.remote,
            self.run_branch,
            &run[..10.min(run.len())]
        );
        let _ = writeln!(out, "items: {done} of {} done", self.items.len());
        for i in &self.items {
            let who = match (&i.holder, i.generation, i.lease_expires_at) {
                (Some(h), _, _) if i.given_up.is_some() => {
                    format!(
                        " — given up by {h}: {}",
                        i.given_up.as_deref().unwrap_or_default()
                    )
                }
                (Some(h), Some(g), Some(t)) if i.state != "done" => {
                    format!(" — {h} (generation {g}, lease until {t})")
                }
                _ => String::new(),
            };
            let pushed = if i.pushed && i.state != "done" {
                " [work pushed]"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  {:<8} {} {}{who}{pushed}",
                i.state,
                i.key,
                crate::text::cut(&i.text, 80)
            );
        }
        let _ = writeln!(out, "workers: {}", self.workers.len());
        for w in &self.workers {
            let item = w
                .item
                .as_deref()
                .map(|k| format!(" on {k}"))
                .unwrap_or_default();
            let off = w
                .unreachable_since
                .map(|t| format!(", remote unreachable since {t}"))
                .unwrap_or_default();
            let note = if w.note.is_empty() {
                String::new()
            } else {
                format!(" ({})", w.note)
            };
            let _ = writeln!(
                out,
                "  {:<20} {}{item}{note}, last word {}{off}; {} iterations, ${:.2}, {} merged",
                w.worker,
                w.state.as_str(),
                w.at,
                w.spent.iterations,
                w.spent.cost_usd,
                w.spent.items_done
            );
        }
        let _ = writeln!(out, "merged: {}", self.merged.len());
        for m in &self.merged {
            let from = m
                .record
                .took_over_from
                .as_deref()
                .map(|f| format!(", taken over from {f}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  {} {} {} — {}{from}",
                m.at,
                m.record.item,
                crate::text::cut(&m.record.text, 60),
                m.record.worker
            );
        }
        if let Some(h) = &self.merging {
            let _ = writeln!(out, "merging: {h} holds the merge lease");
        }
        if let Some(l) = &self.ledger {
            let _ = writeln!(
                out,
                "spent: {} iterations, ${:.2}; {} items merged; {} backup refs",
                l.iterations, l.cost_usd, l.items_done, self.backups
            );
            if let Some(limit) = l.limited(Timestamp::now()) {
                let _ = writeln!(
                    out,
                    "paused: usage limit hit by {} until {}: no worker starts an item or an iteration before",
                    limit.by, limit.until
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::fleet::remote::{Limit, Spent};

    fn said(state: WorkerState, at: &str) -> WorkerStatus {
        WorkerStatus {
            worker: "w1".into(),
            state,
            item: None,
            item_text: String::new(),
            at: at.parse().unwrap(),
            unreachable_since: None,
            note: String::new(),
            spent: Spent::default(),
            live: None,
        }
    }

    #[test]
    fn a_busy_worker_silent_for_a_lease_and_the_skew_is_dead() {
        let now: Timestamp = "2026-11-27T03:10:00Z".parse().unwrap();
        let (lease, skew) = (Duration::from_secs(300), Duration::from_secs(60));
        let view = View::default();
        let judge = |s: WorkerState, at: &str| judged(&said(s, at), &view, now, lease, skew).state;
        // Within a lease and the skew: as it said.
        assert_eq!(
            judge(WorkerState::Working, "2026-11-27T03:04:00Z"),
            WorkerState::Working
        );
        // Past them, busy: dead.
        for busy in [
            WorkerState::Working,
            WorkerState::Merging,
            WorkerState::Waiting,
        ] {
            assert_eq!(
                judge(busy, "2026-11-27T03:03:59Z"),
                WorkerState::Dead,
                "{busy:?}"
            );
        }
        // A worker that ended says so once and stays silent: not dead.
        for ended in [
            WorkerState::Finished,
            WorkerState::Stopped,
            WorkerState::Failed,
        ] {
            assert_eq!(judge(ended, "2026-11-27T01:00:00Z"), ended);
        }
        // Waiting out a usage limit: one word, then silence until the reset.
        let mut limited = View::default();
        let mut ledger = Ledger::default();
        ledger.limit_until(Limit {
            by: "w2".into(),
            until: "2026-11-27T05:00:00Z".parse().unwrap(),
            source: "result".into(),
        });
        limited.ledger = Some((git2::Oid::zero(), ledger));
        let w = judged(
            &said(WorkerState::Waiting, "2026-11-27T02:00:00Z"),
            &limited,
            now,
            lease,
            skew,
        );
        assert_eq!(w.state, WorkerState::Waiting);
        let dead = judged(
            &said(WorkerState::Working, "2026-11-27T02:00:00Z"),
            &view,
            now,
            lease,
            skew,
        );
        assert!(dead.note.contains("killed, or cut off"), "{}", dead.note);
    }
}
