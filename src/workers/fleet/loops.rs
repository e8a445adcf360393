//! What each item's loop did, left on the remote for the fleet's morning
//! report (`report.rs`): one ref per loop, `loops/<key>-<stamp>-<worker>`,
//! at a commit whose message carries a [`LoopRecord`] and whose tree holds
//! the loop's own event log for that round (`events.jsonl`, as the loop
//! wrote it: secrets already redacted), its `state.json`, and the worker's
//! own records (`Event::Fleet`, warnings) said since its previous record
//! reached the remote (`fleet.jsonl`: its claim, a merge's own
//! `fleet_merged`, …). The morning report is read from these records.
//!
//! Why a ref of its own and not the ledger or the merge commit: the ledger
//! is rewritten by every worker at every iteration's end, so it must stay
//! small; a merge commit exists only for loops that were merged, and the
//! morning needs the ones that were released, lost or stopped too. A
//! unique ref is an atomic create nobody else contends for; a merged loop's
//! record goes in the merge's own atomic push (no merge without its story),
//! the others' in a push of their own once the item's fate is known.
//!
//! What a worker says after its last loop record (`fleet_finished`, the
//! items it left to a person, a budget spent, …) goes in its end record,
//! `ends/<worker>-<stamp>` ([`EndRecord`]: `fleet.jsonl` alone in its
//! tree), pushed once as it exits: one try, bounded, so a remote that
//! refuses or does not answer then cannot hold the exit.

use git2::{Oid, Repository};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::lease::Names;
use super::wire::WireError;
use crate::formats::Record;

/// How one loop's round on an item ended, as its worker saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum LoopEnd {
    /// Completed and merged into the run branch.
    Merged,
    /// Completed, but its branch conflicted: the item went back to its loop.
    Conflict,
    /// The claim given up with the work pushed (`why` says why).
    Released,
    /// Its lease was taken over by another worker.
    Lost,
    /// Checkpointed while a usage limit another worker hit resets; the same
    /// worker goes on with the item after it.
    Paused,
    /// Completed, but another worker had merged the item already.
    AlreadyDone,
    /// Given up for the whole fleet with the work pushed (`why` says why):
    /// no other worker takes it.
    GivenUp,
}

impl LoopEnd {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LoopEnd::Merged => "merged",
            LoopEnd::Conflict => "conflict",
            LoopEnd::Released => "released",
            LoopEnd::Lost => "lost",
            LoopEnd::Paused => "paused",
            LoopEnd::AlreadyDone => "already done",
            LoopEnd::GivenUp => "given up",
        }
    }
}

/// One loop's round on one item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LoopRecord {
    /// The item's key and text.
    pub(crate) item: String,
    pub(crate) text: String,
    pub(crate) worker: String,
    /// The claim's generation (above 1: taken over).
    pub(crate) generation: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) took_over_from: Option<String>,
    /// 1 for the first loop on the item under this claim, one more for each
    /// round after a conflict or a pause.
    pub(crate) round: u32,
    pub(crate) started_at: Timestamp,
    pub(crate) ended_at: Timestamp,
    /// The loop's exit code (none when it was killed for a lost claim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) exit_code: Option<i32>,
    pub(crate) iterations: u64,
    pub(crate) cost_usd: f64,
    pub(crate) end: LoopEnd,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) why: String,
}

impl LoopRecord {
    /// The ref's last component: unique per worker and time.
    pub(crate) fn ref_name(&self) -> String {
        format!(
            "{}-{}-{}",
            self.item,
            self.ended_at.as_millisecond(),
            self.worker
        )
    }
}

/// The record's commit: the record in its message, the round's log, the
/// loop's state and the worker's records in its tree.
pub(crate) fn commit(
    repo: &Repository,
    r: &LoopRecord,
    events: &[u8],
    state: Option<&[u8]>,
    fleet: &[Record],
) -> Result<Oid, WireError> {
    let mut tree = repo.treebuilder(None)?;
    tree.insert("events.jsonl", repo.blob(events)?, 0o100644)?;
    tree.insert(FLEET, repo.blob(&lines(fleet))?, 0o100644)?;
    if let Some(state) = state {
        tree.insert("state.json", repo.blob(state)?, 0o100644)?;
    }
    let tree = repo.find_tree(tree.write()?)?;
    let json = serde_json::to_string(r).expect("a record serialises");
    let message = format!(
        "ralph fleet: loop {} by {} (round {}): {}\n\n{json}\n",
        r.item,
        r.worker,
        r.round,
        r.end.as_str()
    );
    let sig = super::remote::signature()?;
    Ok(repo.commit(None, &sig, &sig, &message, &tree, &[])?)
}

/// The worker's own records in a loop record's tree.
const FLEET: &str = "fleet.jsonl";

/// Records as JSON lines.
fn lines(records: &[Record]) -> Vec<u8> {
    let mut lines = String::new();
    for record in records {
        lines.push_str(&serde_json::to_string(record).expect("a record serialises"));
        lines.push('\n');
    }
    lines.into_bytes()
}

/// A worker's end: what it said after its last loop record reached the
/// remote, in the tree's `fleet.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct EndRecord {
    pub(crate) worker: String,
    pub(crate) ended_at: Timestamp,
    pub(crate) exit_code: i32,
}

impl EndRecord {
    /// The ref's last component: unique per worker and time.
    fn ref_name(&self) -> String {
        format!("{}-{}", self.worker, self.ended_at.as_millisecond())
    }
}

/// The end record's commit: the record in its message, `said` in its tree.
pub(crate) fn end_commit(
    repo: &Repository,
    r: &EndRecord,
    said: &[Record],
) -> Result<Oid, WireError> {
    let mut tree = repo.treebuilder(None)?;
    tree.insert(FLEET, repo.blob(&lines(said))?, 0o100644)?;
    let tree = repo.find_tree(tree.write()?)?;
    let json = serde_json::to_string(r).expect("a record serialises");
    let message = format!(
        "ralph fleet: worker {} ended (exit {})\n\n{json}\n",
        r.worker, r.exit_code
    );
    let sig = super::remote::signature()?;
    Ok(repo.commit(None, &sig, &sig, &message, &tree, &[])?)
}

/// The ref an end record goes to.
pub(crate) fn end_refname(names: &Names, r: &EndRecord) -> String {
    names.end_record(&r.ref_name())
}

/// What the workers' end records in the clone's mirror carry, each
/// tagged with its worker.
pub(crate) fn ends(repo: &Repository, names: &Names) -> Vec<Record> {
    family::<EndRecord>(repo, names, "ends/")
        .into_iter()
        .flat_map(|(oid, end)| records(repo, oid, &end.worker))
        .collect()
}

/// Each ref of `family` in the clone's mirror whose commit carries a `T`.
fn family<T: for<'de> Deserialize<'de>>(
    repo: &Repository,
    names: &Names,
    family: &str,
) -> Vec<(Oid, T)> {
    let mut out = Vec::new();
    let Ok(refs) = repo.references_glob(&format!("{}*", names.seen_prefix(family))) else {
        return out;
    };
    for r in refs.flatten() {
        let Some(oid) = r.target() else { continue };
        let Ok(commit) = repo.find_commit(oid) else {
            continue;
        };
        if let Ok(record) = super::lease::record::<T>(commit.message().unwrap_or_default()) {
            out.push((oid, record));
        }
    }
    out
}

/// The records a loop record's commit carries, in the order written: the
/// worker's own (its claim, its merge, …) then the round's log, each
/// tagged with the worker (a loop's records name none). Lines that do not
/// parse (an older ralph's) are left out.
pub(crate) fn records(repo: &Repository, oid: Oid, worker: &str) -> Vec<Record> {
    let mut out: Vec<Record> = Vec::new();
    for name in [FLEET, "events.jsonl"] {
        for line in file(repo, oid, name).lines() {
            if let Ok(mut record) = serde_json::from_str::<Record>(line) {
                record.worker = Some(worker.to_string());
                out.push(record);
            }
        }
    }
    out
}

/// A file of a record's commit (empty when it has none).
fn file(repo: &Repository, oid: Oid, name: &str) -> String {
    let read = || -> Result<String, git2::Error> {
        let tree = repo.find_commit(oid)?.tree()?;
        let entry = tree
            .get_name(name)
            .ok_or_else(|| git2::Error::from_str("the record has no such file"))?;
        let blob = repo.find_blob(entry.id())?;
        Ok(String::from_utf8_lossy(blob.content()).into_owned())
    };
    read().unwrap_or_default()
}

/// Every loop record in the clone's mirror of the fleet's refs (as the
/// last fetch brought them), oldest round first.
pub(crate) fn read(repo: &Repository, names: &Names) -> Vec<(Oid, LoopRecord)> {
    let mut out = family::<LoopRecord>(repo, names, "loops/");
    out.sort_by_key(|(_, r)| r.started_at);
    out
}

/// The ref a record goes to.
pub(crate) fn refname(names: &Names, r: &LoopRecord) -> String {
    names.loop_record(&r.ref_name())
}
