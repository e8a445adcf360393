//! The protocol on the remote: the run, claims, the merge lease, the
//! ledger and the workers' status, each a ref written only by atomic
//! create, compare-and-swap or delete (`wire`), each record a commit
//! (`lease`'s theory). Reading is a fetch into the clone's mirror
//! (`Names::seen`) and git2.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use git2::{Oid, Repository, Signature};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::lease::{Lease, Names, record};
use super::wire::{Update, Wire, WireError};

/// A fleet as one clone sees it through one remote.
pub(crate) struct Fleet {
    wire: Wire,
    repo: Repository,
    names: Names,
    worker: String,
    lease: Duration,
    skew: Duration,
    /// Each lease ref's commit and since when (monotonic) it has been seen
    /// unchanged: the clock-free half of the expiry rule.
    observed: HashMap<String, (Oid, Instant)>,
}

/// A lease this worker holds: the ref, its commit on the remote, its record.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) refname: String,
    pub(crate) oid: Oid,
    pub(crate) lease: Lease,
    /// When it was taken or last renewed (monotonic): the next renewal is
    /// due a third of a lease after, however the holder's work is split
    /// into loops, rounds and merges.
    pub(crate) renewed: Instant,
}

/// The shared budget: what every worker spent, on `ledger`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Ledger {
    pub(crate) plan: String,
    pub(crate) created_by: String,
    pub(crate) created_at: Option<Timestamp>,
    pub(crate) iterations: u64,
    pub(crate) cost_usd: f64,
    pub(crate) items_done: u64,
    #[serde(default)]
    pub(crate) by_worker: BTreeMap<String, Spent>,
    /// A usage limit a worker's agent hit: until it resets no worker
    /// starts an item or lets its loop start another iteration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) limit: Option<Limit>,
}

/// A usage limit, shared on the ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Limit {
    pub(crate) until: Timestamp,
    /// The worker whose agent hit it.
    pub(crate) by: String,
    /// What said so (`rate_limit_event`, `result`, …).
    pub(crate) source: String,
}

impl Ledger {
    /// `spent` added, in total and to `worker`'s share.
    pub(crate) fn add(&mut self, worker: &str, spent: Spent) {
        self.iterations += spent.iterations;
        self.cost_usd += spent.cost_usd;
        self.items_done += spent.items_done;
        let mine = self.by_worker.entry(worker.to_string()).or_default();
        mine.iterations += spent.iterations;
        mine.cost_usd += spent.cost_usd;
        mine.items_done += spent.items_done;
    }

    /// Record a usage limit (the later of two wins).
    pub(crate) fn limit_until(&mut self, limit: Limit) {
        if self.limit.as_ref().is_none_or(|l| l.until < limit.until) {
            self.limit = Some(limit);
        }
    }

    /// A usage limit that has not reset at `now`.
    pub(crate) fn limited(&self, now: Timestamp) -> Option<&Limit> {
        self.limit.as_ref().filter(|l| l.until > now)
    }
}

impl Spent {
    pub(crate) fn is_zero(&self) -> bool {
        self.iterations == 0 && self.cost_usd == 0.0 && self.items_done == 0
    }

    pub(crate) fn plus(self, o: Spent) -> Spent {
        Spent {
            iterations: self.iterations + o.iterations,
            cost_usd: self.cost_usd + o.cost_usd,
            items_done: self.items_done + o.items_done,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Spent {
    pub(crate) iterations: u64,
    pub(crate) cost_usd: f64,
    pub(crate) items_done: u64,
}

/// What a worker is doing, in `ralph status --fleet`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WorkerState {
    Working,
    Merging,
    Waiting,
    Stopped,
    Finished,
    Failed,
    /// Never said by a worker: `ralph status --fleet`'s word for one that
    /// says it is busy and has not spoken for a lease (killed, its machine
    /// gone, or cut off from the remote).
    Dead,
}

impl WorkerState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            WorkerState::Working => "working",
            WorkerState::Merging => "merging",
            WorkerState::Waiting => "waiting",
            WorkerState::Stopped => "stopped",
            WorkerState::Finished => "finished",
            WorkerState::Failed => "failed",
            WorkerState::Dead => "dead",
        }
    }
}

/// A worker's last word, on `workers/<id>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct WorkerStatus {
    pub(crate) worker: String,
    pub(crate) state: WorkerState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) item: Option<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) item_text: String,
    pub(crate) at: Timestamp,
    /// Since when the remote could not be reached (said once it is back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) unreachable_since: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) note: String,
    #[serde(default)]
    pub(crate) spent: Spent,
    /// Its item loop as last seen, while it holds an item (`live.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) live: Option<super::live::Live>,
}

/// Everything of the fleet on the remote, as of the last `sync`.
#[derive(Debug, Clone, Default)]
pub(crate) struct View {
    pub(crate) run: Option<Oid>,
    pub(crate) claims: BTreeMap<String, (Oid, Lease)>,
    pub(crate) merge: Option<(Oid, Lease)>,
    pub(crate) ledger: Option<(Oid, Ledger)>,
    pub(crate) workers: Vec<WorkerStatus>,
    pub(crate) items: BTreeMap<String, Oid>,
    pub(crate) snapshots: BTreeMap<String, Oid>,
    /// The backup refs' names (`<stamp>-<key>`).
    pub(crate) backups: Vec<String>,
}

impl Fleet {
    pub(crate) fn open(
        dir: &Path,
        remote: &str,
        names: Names,
        worker: &str,
        lease: Duration,
        skew: Duration,
        timeout: Duration,
    ) -> Result<Fleet, WireError> {
        Ok(Fleet {
            wire: Wire::new(dir, remote, timeout),
            repo: Repository::discover(dir)?,
            names,
            worker: worker.to_string(),
            lease,
            skew,
            observed: HashMap::new(),
        })
    }

    pub(crate) fn names(&self) -> &Names {
        &self.names
    }

    pub(crate) fn repo(&self) -> &Repository {
        &self.repo
    }

    pub(crate) fn wire(&self) -> &Wire {
        &self.wire
    }

    /// Every fetch and push from now on given at most `timeout`.
    pub(crate) fn bound_calls(&mut self, timeout: Duration) {
        self.wire = self.wire.bounded(timeout);
    }

    pub(crate) fn worker(&self) -> &str {
        &self.worker
    }

    /// `[fleet] clock_skew`, as opened.
    pub(crate) fn skew(&self) -> Duration {
        self.skew
    }

    pub(crate) fn lease_length(&self) -> Duration {
        self.lease
    }

    /// Fetch the fleet's refs and note which lease commits changed.
    pub(crate) fn sync(&mut self) -> Result<View, WireError> {
        self.wire.fetch(&self.names.refspecs())?;
        let view = self.view()?;
        let now = Instant::now();
        let mut current: Vec<(String, Oid)> = view
            .claims
            .iter()
            .map(|(k, (oid, _))| (self.names.claim(k), *oid))
            .collect();
        if let Some((oid, _)) = &view.merge {
            current.push((self.names.merge_lease(), *oid));
        }
        self.observed
            .retain(|r, _| current.iter().any(|(c, _)| c == r));
        for (r, oid) in current {
            let entry = self.observed.entry(r).or_insert((oid, now));
            if entry.0 != oid {
                *entry = (oid, now);
            }
        }
        Ok(view)
    }

    /// The fleet as last fetched (no network).
    pub(crate) fn view(&self) -> Result<View, WireError> {
        read_view(&self.repo, &self.names)
    }

    /// Whether `(oid, lease)` at `refname` has run out (`Lease::expired`).
    /// Not within a lease of this worker seeing the remote again: when the
    /// remote itself was away, every holder was as cut off as this worker
    /// and could not renew either; taking their items at once paid for the
    /// same item twice (three times once the holder took it back).
    pub(crate) fn expired(&self, refname: &str, oid: Oid, lease: &Lease) -> bool {
        if (self.wire.regained()).is_some_and(|at| at.elapsed() < self.lease) {
            return false;
        }
        let unchanged_for = match self.observed.get(refname) {
            Some((seen, since)) if *seen == oid => since.elapsed(),
            _ => Duration::ZERO,
        };
        lease.expired(Timestamp::now(), unchanged_for, self.skew)
    }

    /// Create the run from `base` (its plan at `plan`): the run branch and
    /// the ledger, both or neither. `false` when another worker made it
    /// first (this one joins).
    pub(crate) fn create_run(&mut self, base: Oid, plan: &str) -> Result<bool, WireError> {
        let ledger = Ledger {
            plan: plan.to_string(),
            created_by: self.worker.clone(),
            created_at: Some(Timestamp::now()),
            ..Ledger::default()
        };
        let oid = self.record_commit(&ledger_message(&ledger), &[])?;
        match self.wire.push(&[
            Update::create(self.names.run_branch(), base),
            Update::create(self.names.ledger(), oid),
        ]) {
            Ok(()) => Ok(true),
            Err(WireError::Rejected(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Take the lease at `refname` if nobody holds it, or if its holder's
    /// lease ran out (`seen`: what the last sync showed there). `None`: it
    /// is held, or another worker was faster.
    pub(crate) fn acquire(
        &mut self,
        refname: &str,
        what: &str,
        text: &str,
        seen: Option<&(Oid, Lease)>,
    ) -> Result<Option<Held>, WireError> {
        let now = Timestamp::now();
        let (lease, update_of) = match seen {
            None => (Lease::new(&self.worker, what, text, self.lease, now), None),
            Some((oid, old)) if self.expired(refname, *oid, old) => {
                (old.taken_over(&self.worker, self.lease, now), Some(*oid))
            }
            Some(_) => return Ok(None),
        };
        let parents: Vec<Oid> = update_of.into_iter().collect();
        let oid = self.record_commit(&lease.message(), &parents)?;
        let update = match update_of {
            None => Update::create(refname, oid),
            Some(old) => Update::swap(refname, old, oid),
        };
        match self.wire.push(&[update]) {
            Ok(()) => Ok(Some(Held {
                refname: refname.to_string(),
                oid,
                lease,
                renewed: Instant::now(),
            })),
            Err(WireError::Rejected(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Renew a held lease. `Rejected`: it was taken over — stop working
    /// under it.
    pub(crate) fn renew(&mut self, held: &mut Held) -> Result<(), WireError> {
        let lease = held.lease.renewed(Timestamp::now());
        let oid = self.record_commit(&lease.message(), &[held.oid])?;
        self.wire
            .push(&[Update::swap(held.refname.as_str(), held.oid, oid)])?;
        held.oid = oid;
        held.lease = lease;
        held.renewed = Instant::now();
        Ok(())
    }

    /// Give a held claim up for the whole fleet (only if it is still ours):
    /// the claim stays, marked `given_up`, and never expires.
    pub(crate) fn give_up(
        &mut self,
        held: &Held,
        why: &str,
        refused: bool,
    ) -> Result<(), WireError> {
        let lease = held.lease.given_up(why, refused, Timestamp::now());
        let oid = self.record_commit(&lease.message(), &[held.oid])?;
        self.wire
            .push(&[Update::swap(held.refname.as_str(), held.oid, oid)])
    }

    /// Give a held lease up (only if it is still ours).
    pub(crate) fn release(&mut self, held: &Held) -> Result<(), WireError> {
        self.wire
            .push(&[Update::delete(held.refname.as_str(), held.oid)])
    }

    /// Change the shared ledger by `change`: a compare-and-swap from the
    /// ledger as just fetched (that one ref only: cheap enough for every
    /// iteration's end), retried over concurrent changes. The ledger after it.
    pub(crate) fn update_ledger(
        &mut self,
        change: impl Fn(&mut Ledger),
    ) -> Result<Ledger, WireError> {
        for _ in 0..32 {
            let (old, mut ledger) = self.fetch_ledger()?;
            change(&mut ledger);
            let oid = self.record_commit(&ledger_message(&ledger), &[old])?;
            let update = Update::swap(self.names.ledger(), old, oid);
            match self.wire.push(std::slice::from_ref(&update)) {
                Ok(()) => {
                    self.mirror(&update);
                    return Ok(ledger);
                }
                Err(WireError::Rejected(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(WireError::Rejected(
            "the ledger kept changing under 32 attempts".into(),
        ))
    }

    /// The ledger as the remote has it now (one ref fetched).
    pub(crate) fn fetch_ledger(&mut self) -> Result<(Oid, Ledger), WireError> {
        let ledger = self.names.ledger();
        let seen = self.names.seen(&ledger);
        self.wire.fetch(&[format!("+{ledger}:{seen}")])?;
        let old = self
            .local_ref(&seen)
            .ok_or_else(|| WireError::Local("the fleet has no ledger: was it created?".into()))?;
        let message = self
            .repo
            .find_commit(old)?
            .message()
            .unwrap_or_default()
            .to_string();
        let ledger = record(&message).map_err(|e| WireError::Local(e.to_string()))?;
        Ok((old, ledger))
    }

    /// The ledger of `view` with `spent` added by this worker (and a usage
    /// limit its agent hit): the update to push (a compare-and-swap from
    /// what `view` saw, so it can go into another atomic push, as the
    /// merge's and the exit's do) and the totals after it.
    pub(crate) fn spending(
        &self,
        view: &View,
        spent: Spent,
        limit: Option<&Limit>,
    ) -> Result<(Update, Ledger), WireError> {
        let Some((old, mut ledger)) = view.ledger.clone() else {
            return Err(WireError::Local(
                "the fleet has no ledger: was it created?".into(),
            ));
        };
        ledger.add(&self.worker, spent);
        if let Some(limit) = limit {
            ledger.limit_until(limit.clone());
        }
        let oid = self.record_commit(&ledger_message(&ledger), &[old])?;
        Ok((Update::swap(self.names.ledger(), old, oid), ledger))
    }

    /// Publish this worker's status on `workers/<id>` (its own ref: replaced
    /// whatever it holds).
    pub(crate) fn say(&mut self, status: &WorkerStatus) -> Result<(), WireError> {
        let mut update = self.status_update(status)?;
        let pushed = match self.wire.push(std::slice::from_ref(&update)) {
            Err(WireError::Rejected(_)) => {
                // Our mirror was behind (a restart under the same id): once more.
                self.sync()?;
                update = self.status_over_seen(update);
                self.wire.push(std::slice::from_ref(&update))
            }
            other => other,
        };
        if pushed.is_ok() {
            self.mirror(&update);
        }
        pushed
    }

    /// The clone's mirror of a ref this worker just pushed: what the remote
    /// holds now, so that its next compare-and-swap of the ref (its status,
    /// the ledger, the exit's push) starts from it, not from the last fetch.
    fn mirror(&self, update: &Update) {
        // A mirror left behind costs one fetch at the next update, no more.
        if let Some(oid) = update.new {
            let seen = self.names.seen(&update.refname);
            let _ = self.repo.reference(&seen, oid, true, "ralph fleet: pushed");
        }
    }

    /// The update that puts `status` on `workers/<id>`, over what the
    /// clone last saw there.
    pub(crate) fn status_update(&self, status: &WorkerStatus) -> Result<Update, WireError> {
        let json = serde_json::to_string(status).expect("a status serialises");
        // Nothing known to be a secret leaves in a status (as in every record).
        let json = crate::text::secrets::redact_json(&json);
        let msg = format!(
            "ralph fleet: worker {} {}\n\n{json}\n",
            self.worker,
            status.state.as_str()
        );
        let oid = self.record_commit(&msg, &[])?;
        Ok(self.status_over_seen(Update::create(self.names.worker(&self.worker), oid)))
    }

    /// A status update made again over what the clone saw there last
    /// (after a fetch: the mirror was behind).
    pub(crate) fn status_over_seen(&self, update: Update) -> Update {
        let oid = update.new.expect("a status is written, never deleted");
        match self.local_ref(&self.names.seen(&update.refname)) {
            Some(old) => Update::swap(update.refname, old, oid),
            None => Update::create(update.refname, oid),
        }
    }

    /// A commit of the empty tree carrying `message`: a record.
    pub(crate) fn record_commit(&self, message: &str, parents: &[Oid]) -> Result<Oid, WireError> {
        let tree = self.repo.find_tree(self.repo.treebuilder(None)?.write()?)?;
        let parents: Vec<git2::Commit> = parents
            .iter()
            .map(|p| self.repo.find_commit(*p))
            .collect::<Result<_, _>>()?;
        let refs: Vec<&git2::Commit> = parents.iter().collect();
        let sig = signature()?;
        Ok(self.repo.commit(None, &sig, &sig, message, &tree, &refs)?)
    }

    pub(crate) fn local_ref(&self, name: &str) -> Option<Oid> {
        self.repo.refname_to_id(name).ok()
    }
}

/// ralph's own signature on fleet records and merges.
pub(crate) fn signature() -> Result<Signature<'static>, git2::Error> {
    Signature::now("ralph", "ralph@localhost")
}

fn ledger_message(ledger: &Ledger) -> String {
    let json = serde_json::to_string(ledger).expect("a ledger serialises");
    format!(
        "ralph fleet: ledger: {} iterations, ${:.2}, {} items done\n\n{json}\n",
        ledger.iterations, ledger.cost_usd, ledger.items_done
    )
}

/// Read the mirror of a fleet's refs (what the last fetch brought).
pub(crate) fn read_view(repo: &Repository, names: &Names) -> Result<View, WireError> {
    let mut view = View {
        run: repo.refname_to_id(&names.seen(&names.run_branch())).ok(),
        ..View::default()
    };
    let message = |oid: Oid| -> Result<String, WireError> {
        Ok(repo
            .find_commit(oid)?
            .message()
            .unwrap_or_default()
            .to_string())
    };
    let family = |prefix: &str| -> Result<Vec<(String, Oid)>, WireError> {
        let mut out = Vec::new();
        for r in repo.references_glob(&format!("{prefix}*"))? {
            let r = r?;
            if let (Some(name), Some(oid)) = (r.name(), r.target()) {
                out.push((name.trim_start_matches(prefix).to_string(), oid));
            }
        }
        Ok(out)
    };
    for (key, oid) in family(&names.seen_prefix("claims/"))? {
        if let Ok(lease) = Lease::parse(&message(oid)?) {
            view.claims.insert(key, (oid, lease));
        }
    }
    if let Ok(oid) = repo.refname_to_id(&names.seen(&names.merge_lease()))
        && let Ok(lease) = Lease::parse(&message(oid)?)
    {
        view.merge = Some((oid, lease));
    }
    if let Ok(oid) = repo.refname_to_id(&names.seen(&names.ledger()))
        && let Ok(ledger) = record(&message(oid)?)
    {
        view.ledger = Some((oid, ledger));
    }
    for (_, oid) in family(&names.seen_prefix("workers/"))? {
        if let Ok(status) = record(&message(oid)?) {
            view.workers.push(status);
        }
    }
    view.workers.sort_by(|a, b| a.worker.cmp(&b.worker));
    let items_prefix = names.seen(&names.item_branch(""));
    view.items = family(&items_prefix)?.into_iter().collect();
    view.snapshots = family(&names.seen_prefix("snapshots/"))?
        .into_iter()
        .collect();
    view.backups = family(&names.seen_prefix("backups/"))?
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    Ok(view)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::PathBuf;
    use std::process::Command;

    use tempfile::TempDir;

    use super::*;

    pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A bare remote holding one commit with `files`, and a way to clone it.
    pub(crate) struct Remote {
        pub(crate) tmp: TempDir,
        pub(crate) bare: PathBuf,
    }

    impl Remote {
        pub(crate) fn new(files: &[(&str, &str)]) -> Remote {
            let tmp = TempDir::new().unwrap();
            let bare = tmp.path().join("remote.git");
            git(
                tmp.path(),
                &["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()],
            );
            let seed = tmp.path().join("seed");
            git(
                tmp.path(),
                &["init", "-q", "-b", "main", seed.to_str().unwrap()],
            );
            for (path, text) in files {
                std::fs::write(seed.join(path), text).unwrap();
            }
            git(&seed, &["add", "-A"]);
            git(&seed, &["commit", "-q", "-m", "seed"]);
            git(&seed, &["push", "-q", bare.to_str().unwrap(), "main"]);
            Remote { tmp, bare }
        }

        pub(crate) fn clone(&self, name: &str) -> PathBuf {
            let dir = self.tmp.path().join(name);
            git(
                self.tmp.path(),
                &[
                    "clone",
                    "-q",
                    self.bare.to_str().unwrap(),
                    dir.to_str().unwrap(),
                ],
            );
            dir
        }

        pub(crate) fn refs(&self, prefix: &str) -> Vec<String> {
            let out = git(&self.bare, &["for-each-ref", "--format=%(refname)", prefix]);
            out.lines().map(String::from).collect()
        }
    }

    fn fleet(dir: &Path, worker: &str, lease: Duration) -> Fleet {
        Fleet::open(
            dir,
            "origin",
            Names::new("night").unwrap(),
            worker,
            lease,
            Duration::from_secs(3600),
            Duration::from_secs(60),
        )
        .unwrap()
    }

    fn head(dir: &Path) -> Oid {
        Oid::from_str(&git(dir, &["rev-parse", "HEAD"])).unwrap()
    }

    #[test]
    fn the_first_worker_creates_the_run_and_the_rest_join() {
        let remote = Remote::new(&[("fix_plan.md", "- [ ] a\n")]);
        let (a, b) = (remote.clone("a"), remote.clone("b"));
        let mut fa = fleet(&a, "wa", Duration::from_secs(60));
        let mut fb = fleet(&b, "wb", Duration::from_secs(60));
        assert!(fa.create_run(head(&a), "fix_plan.md").unwrap());
        assert!(!fb.create_run(head(&b), "fix_plan.md").unwrap());
        let view = fb.sync().unwrap();
        assert_eq!(view.run, Some(head(&a)));
        let (_, ledger) = view.ledger.unwrap();
        assert_eq!(
            (ledger.created_by.as_str(), ledger.plan.as_str()),
            ("wa", "fix_plan.md")
        );
    }

    #[test]
    fn of_workers_racing_for_an_item_exactly_one_gets_it() {
        let remote = Remote::new(&[("f", "x")]);
        let dirs: Vec<PathBuf> = (0..4).map(|i| remote.clone(&format!("c{i}"))).collect();
        let names = Names::new("night").unwrap();
        let winners: Vec<Vec<String>> = std::thread::scope(|s| {
            let handles: Vec<_> = dirs
                .iter()
                .enumerate()
                .map(|(i, dir)| {
                    let names = names.clone();
                    s.spawn(move || {
                        let mut f = fleet(dir, &format!("w{i}"), Duration::from_secs(60));
                        (0..5)
                            .filter_map(|item| {
                                let key = format!("i-{item}");
                                f.acquire(&names.claim(&key), &key, "", None).unwrap()
                            })
                            .map(|held| held.lease.what)
                            .collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all: Vec<String> = winners.concat();
        all.sort();
        assert_eq!(
            all,
            ["i-0", "i-1", "i-2", "i-3", "i-4"],
            "each item won once: {winners:?}"
        );
        assert_eq!(remote.refs("refs/ralph/fleet/night/claims/").len(), 5);
    }

    #[test]
    fn a_live_lease_is_kept_an_expired_one_is_taken_over_and_its_holder_learns_it() {
        let remote = Remote::new(&[("f", "x")]);
        let (a, b) = (remote.clone("a"), remote.clone("b"));
        let lease = Duration::from_secs(1);
        let mut fa = fleet(&a, "wa", lease);
        let mut fb = fleet(&b, "wb", lease);
        let claim = fa.names().claim("i-1");
        let mut held = fa.acquire(&claim, "i-1", "one", None).unwrap().unwrap();
        fa.renew(&mut held).unwrap();
        // B sees it live: no takeover.
        let view = fb.sync().unwrap();
        let seen = view.claims.get("i-1").cloned().unwrap();
        assert_eq!(seen.1.holder, "wa");
        assert!(
            fb.acquire(&claim, "i-1", "one", Some(&seen))
                .unwrap()
                .is_none()
        );
        // A stops renewing; B and C, having watched it unchanged for a
        // lease, both try to take it over: exactly one does.
        let c = remote.clone("c");
        let mut fc = fleet(&c, "wc", lease);
        fc.sync().unwrap();
        std::thread::sleep(lease + Duration::from_millis(100));
        let seen = fb.sync().unwrap().claims.get("i-1").cloned().unwrap();
        assert_eq!(fc.sync().unwrap().claims["i-1"].0, seen.0);
        let by_b = fb.acquire(&claim, "i-1", "one", Some(&seen)).unwrap();
        let by_c = fc.acquire(&claim, "i-1", "one", Some(&seen)).unwrap();
        assert!(by_c.is_none(), "the second taker is refused");
        let taken = by_b.unwrap();
        assert_eq!(taken.lease.generation, 2);
        assert_eq!(taken.lease.took_over_from.as_deref(), Some("wa"));
        // A's renewal and release are refused: it lost the item.
        assert!(matches!(fa.renew(&mut held), Err(WireError::Rejected(_))));
        assert!(matches!(fa.release(&held), Err(WireError::Rejected(_))));
        let view = fa.sync().unwrap();
        assert_eq!(view.claims["i-1"].1.holder, "wb");
        fb.release(&taken).unwrap();
        assert!(remote.refs("refs/ralph/fleet/night/claims/").is_empty());
    }

    /// The remote goes away for longer than a lease and comes back: its
    /// holder could not renew (it was as cut off), so neither rule may
    /// take the claim at once, on the wall clock (skew 0) or on the
    /// observer's own clock; once a whole lease passes unchanged after
    /// the return, the holder is dead and the claim is taken over.
    #[test]
    fn a_claim_is_not_taken_over_right_after_the_remote_comes_back() {
        for skew in [Duration::ZERO, Duration::from_secs(3600)] {
            let remote = Remote::new(&[("f", "x")]);
            let (a, b) = (remote.clone("a"), remote.clone("b"));
            let lease = Duration::from_secs(1);
            let open = |dir: &Path, worker: &str| {
                let names = Names::new("night").unwrap();
                let timeout = Duration::from_secs(60);
                Fleet::open(dir, "origin", names, worker, lease, skew, timeout).unwrap()
            };
            let (mut fa, mut fb) = (open(&a, "wa"), open(&b, "wb"));
            let claim = fa.names().claim("i-1");
            fa.acquire(&claim, "i-1", "one", None).unwrap().unwrap();
            fb.sync().unwrap();
            let away = remote.tmp.path().join("away.git");
            std::fs::rename(&remote.bare, &away).unwrap();
            // Seen by a fetch, or (a worker busy with its item) by a push.
            let cut_off = if skew.is_zero() {
                fb.sync().map(|_| ())
            } else {
                let other = fb.names().claim("i-2");
                fb.acquire(&other, "i-2", "two", None).map(|_| ())
            };
            assert!(matches!(cut_off, Err(WireError::Unreachable(_))));
            std::thread::sleep(lease + Duration::from_millis(200));
            std::fs::rename(&away, &remote.bare).unwrap();
            let seen = fb.sync().unwrap().claims.get("i-1").cloned().unwrap();
            assert!(
                fb.acquire(&claim, "i-1", "one", Some(&seen))
                    .unwrap()
                    .is_none(),
                "skew {skew:?}: taken over at once"
            );
            std::thread::sleep(lease + Duration::from_millis(100));
            let seen = fb.sync().unwrap().claims.get("i-1").cloned().unwrap();
            let taken = fb.acquire(&claim, "i-1", "one", Some(&seen)).unwrap();
            assert_eq!(taken.unwrap().lease.took_over_from.as_deref(), Some("wa"));
        }
    }

    #[test]
    fn the_ledger_adds_up_concurrent_spending() {
        let remote = Remote::new(&[("f", "x")]);
        let dirs: Vec<PathBuf> = (0..3).map(|i| remote.clone(&format!("c{i}"))).collect();
        fleet(&dirs[0], "w0", Duration::from_secs(60))
            .create_run(head(&dirs[0]), "fix_plan.md")
            .unwrap();
        std::thread::scope(|s| {
            for (i, dir) in dirs.iter().enumerate() {
                s.spawn(move || {
                    let mut f = fleet(dir, &format!("w{i}"), Duration::from_secs(60));
                    for _ in 0..4 {
                        let spent = Spent {
                            iterations: 2,
                            cost_usd: 0.25,
                            items_done: 1,
                        };
                        f.update_ledger(|l| l.add(&format!("w{i}"), spent)).unwrap();
                    }
                });
            }
        });
        let (_, ledger) = fleet(&dirs[0], "w0", Duration::from_secs(60))
            .sync()
            .unwrap()
            .ledger
            .unwrap();
        assert_eq!((ledger.iterations, ledger.items_done), (24, 12));
        assert!((ledger.cost_usd - 3.0).abs() < 1e-9);
        assert_eq!(ledger.by_worker.len(), 3);
        assert!(ledger.by_worker.values().all(|s| s.iterations == 8));
    }

    #[test]
    fn the_later_usage_limit_wins_and_one_that_reset_pauses_nobody() {
        let at = |s: &str| -> Timestamp { s.parse().unwrap() };
        let limit = |until: &str, by: &str| Limit {
            until: at(until),
            by: by.into(),
            source: "rate_limit_event".into(),
        };
        let mut l = Ledger::default();
        l.limit_until(limit("2026-11-24T04:00:00Z", "wa"));
        l.limit_until(limit("2026-11-24T03:30:00Z", "wb"));
        assert_eq!(
            l.limit.as_ref().unwrap().by,
            "wa",
            "the earlier one does not shorten it"
        );
        l.limit_until(limit("2026-11-24T05:00:00Z", "wc"));
        assert_eq!(l.limit.as_ref().unwrap().by, "wc");
        assert!(l.limited(at("2026-11-24T04:59:59Z")).is_some());
        assert!(l.limited(at("2026-11-24T05:00:00Z")).is_none());
        // An older ledger (no limit field) still reads.
        let old: Ledger = serde_json::from_str(
            r#"{"plan":"p","created_by":"w","created_at":null,"iterations":1,"cost_usd":0.5,"items_done":0}"#,
        )
        .unwrap();
        assert!(old.limit.is_none());
    }

    #[test]
    fn workers_say_what_they_do_and_an_unreachable_remote_is_not_a_refusal() {
        let remote = Remote::new(&[("f", "x")]);
        let a = remote.clone("a");
        let mut fa = fleet(&a, "wa", Duration::from_secs(60));
        let mut status = WorkerStatus {
            worker: "wa".into(),
            state: WorkerState::Working,
            item: Some("i-1".into()),
            item_text: "one".into(),
            at: Timestamp::now(),
            unreachable_since: None,
            note: String::new(),
            spent: Spent::default(),
            live: None,
        };
        fa.say(&status).unwrap();
        status.state = WorkerState::Finished;
        fa.say(&status).unwrap();
        let view = fa.sync().unwrap();
        assert_eq!(view.workers.len(), 1);
        assert_eq!(view.workers[0].state, WorkerState::Finished);
        // The remote goes away: fetch and push say "unreachable", not "rejected".
        std::fs::rename(&remote.bare, remote.tmp.path().join("gone")).unwrap();
        assert!(matches!(fa.sync(), Err(WireError::Unreachable(_))));
        let claim = fa.names().claim("i-2");
        assert!(matches!(
            fa.acquire(&claim, "i-2", "", None),
            Err(WireError::Unreachable(_))
        ));
    }
}
