//! The coordinator: the ralph the user started with `--workers N`. It
//! gives units to workers, reads their events, merges their branches one at
//! a time, checks units off and commits the plan, and enforces the shared
//! budgets. Everything it decides is in `.ralph/workers.json` before it
//! acts, so a coordinator started after kill -9 resumes every worker.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use git2::Repository;
use nix::sys::signal::Signal;

use super::assign::{self, UnitState};
use super::child::{self, Child, Msg, WORKER_PLAN};
use super::ledger::{Assignment, Ledger, MergeRecord, Status, Task};
use super::{MergeRequest, Merged, worktree};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::events::{Bus, Event, EventLog};
use crate::project::Project;
use crate::repo::{OwnPaths, Repo};
use crate::state::Lock;

/// What the user asked for besides the count.
pub struct Options {
    pub workers: u32,
    pub fresh: bool,
    /// `--model`, `--agent`: handed to every worker.
    pub pass: Vec<String>,
}

/// The last signal that reached the coordinator (0: none).
static SIGNAL: AtomicI32 = AtomicI32::new(0);

fn install_signals() -> Result<()> {
    for sig in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGHUP,
    ] {
        let n = sig as i32;
        // SAFETY: the handler only stores into an atomic (async-signal-safe).
        unsafe { signal_hook_registry::register(n, move || SIGNAL.store(n, Ordering::SeqCst)) }
            .map_err(|e| Error::wrap("cannot install signal handlers", e))?;
    }
    Ok(())
}

/// Why the run stops giving out work.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stop {
    Interrupted,
    Stopped,
    Budget,
    Iterations,
}

struct Coordinator {
    root: PathBuf,
    ralph_dir: PathBuf,
    config: Config,
    git: Repository,
    plan_path: PathBuf,
    /// The plan relative to the work tree (for its commit).
    plan_in_tree: PathBuf,
    /// The project's directory relative to the work tree.
    prefix: PathBuf,
    worktrees: PathBuf,
    ledger: Ledger,
    bus: Bus,
    children: BTreeMap<String, Child>,
    opts: Options,
    stop: Option<Stop>,
    /// Workers stopped because another hit a usage limit, and until when.
    paused_until: Option<Instant>,
    started: Instant,
}

pub fn run(project: &Project, config: Config, opts: Options, mut bus: Bus) -> Result<i32> {
    let root = project.root().to_path_buf();
    let layout = project.layout().clone();
    let repo = Repo::open(&root)?.ok_or_else(|| {
        Error::usage("`ralph run --workers` needs a git repository: each worker has a worktree")
            .with_hint("`git init` and commit the project, or run one loop without --workers")
    })?;
    let run_branch = repo.branch().ok_or_else(|| {
        Error::usage("HEAD is detached: the workers' work is merged into the branch checked out")
            .with_hint("check out a branch first, e.g. `git switch -c ralph-run`")
    })?;
    if repo.head_id().is_none() {
        return Err(Error::usage(format!(
            "branch {run_branch} has no commit yet: the workers' worktrees start from it"
        ))
        .with_hint("commit the project first"));
    }
    let workdir = repo
        .workdir()
        .canonicalize()
        .map_err(|e| Error::io("cannot resolve", repo.workdir(), e))?;
    let git =
        Repository::open(&workdir).map_err(|e| Error::wrap("cannot open the git repository", e))?;
    let canon_root = root
        .canonicalize()
        .map_err(|e| Error::io("cannot resolve", &root, e))?;
    let prefix = canon_root
        .strip_prefix(&workdir)
        .unwrap_or(Path::new(""))
        .to_path_buf();
    let plan_path = root.join(&config.plan);
    let plan_in_tree = prefix.join(&config.plan);
    layout.ensure()?;
    let previous = Ledger::load(&layout.dir)?.filter(|l| l.ended.is_none());
    let run_id = previous.as_ref().map_or_else(
        || crate::supervisor::new_run_id(&root, Some(&repo)),
        |l| l.run_id.clone(),
    );
    let lock = Lock::acquire(&layout, &run_id)?;
    let _claim = repo.claim_scope()?;
    bus.add(Box::new(EventLog::open(&layout.events())?));
    if let Some(notifier) = crate::notify::Notifier::start(&config.notify, &root)? {
        bus.add(Box::new(notifier));
    }
    crate::state::ownership::at_start(&root, &config.prompt_file, &mut bus);
    let resumed = previous.is_some();
    let ledger = match previous {
        Some(l) if opts.fresh && !l.assignments.is_empty() => {
            let branches: Vec<&str> = l.assignments.iter().map(|a| a.branch.as_str()).collect();
            return Err(Error::usage(format!(
                "the parallel run {} has worker branches not merged yet: {}",
                l.run_id,
                branches.join(", ")
            ))
            .with_hint("`ralph run --workers N` without --fresh finishes them; `ralph status` lists their commits"));
        }
        Some(l) if l.run_branch != run_branch => {
            return Err(Error::usage(format!(
                "the parallel run {} merges into {}, but {run_branch} is checked out",
                l.run_id, l.run_branch
            ))
            .with_hint(format!("`git switch {}` and run again", l.run_branch)));
        }
        Some(l) if !opts.fresh => l,
        _ => {
            committed_before(&repo, &config, &mut bus);
            Ledger {
                run_id: run_id.clone(),
                run_branch: run_branch.clone(),
                plan: config.plan.display().to_string(),
                started_at: crate::state::now_rfc3339(),
                workers: opts.workers,
                ..Ledger::default()
            }
        }
    };
    config_is_committed(&git, &prefix, &run_branch)?;
    let text = read_plan(&plan_path)?;
    assign::units(&text).map_err(|e| {
        Error::usage(e.to_string()).with_hint("docs/workers.md says how to mark dependencies")
    })?;
    let worktrees = root
        .join(
            config
                .workers
                .dir
                .as_deref()
                .unwrap_or(Path::new(".ralph/worktrees")),
        )
        .join(&run_id);
    install_signals()?;
    let mut c = Coordinator {
        root,
        ralph_dir: layout.dir.clone(),
        git,
        plan_path,
        plan_in_tree,
        prefix,
        worktrees,
        ledger,
        bus,
        children: BTreeMap::new(),
        opts,
        stop: None,
        paused_until: None,
        started: Instant::now(),
        config,
    };
    c.ledger.workers = c.opts.workers;
    c.bus.emit(Event::RunStarted {
        run_id: run_id.clone(),
        resumed,
        first_iteration: c.ledger.iterations + 1,
        max_iterations: c.config.loop_.max_iterations,
        plan: c.ledger.plan.clone(),
        pid: std::process::id(),
    });
    c.save()?;
    let result = c.drive();
    drop(lock);
    result
}

/// The user's tracked edits, committed on their own before any worktree
/// is made from the branch (as a single run does).
fn committed_before(repo: &Repo, config: &Config, bus: &mut Bus) {
    let (outcome, files) = repo.commit_tracked_changes(
        "ralph: changes present before the run",
        &OwnPaths::new(&config.prompt_file),
    );
    if !files.is_empty() {
        bus.emit(Event::Warning {
            message: format!(
                "changes present before the run ({}): {}",
                files.join(", "),
                match outcome {
                    crate::repo::CommitOutcome::Committed { id, .. } => format!(
                        "committed on their own ({}) so that the workers start from them",
                        &id[..id.len().min(8)]
                    ),
                    crate::repo::CommitOutcome::Skipped { reason } => reason,
                    crate::repo::CommitOutcome::NothingToCommit => "nothing to commit".into(),
                }
            ),
        });
    }
}

/// Workers run from a checkout of the run branch: a `ralph.toml` they
/// would not see is refused with the fix.
fn config_is_committed(git: &Repository, prefix: &Path, run_branch: &str) -> Result<()> {
    let path = git
        .workdir()
        .map(|w| w.join(prefix).join("ralph.toml"))
        .filter(|p| p.is_file());
    let Some(_) = path else { return Ok(()) };
    let tree = git
        .revparse_single(&format!("refs/heads/{run_branch}^{{tree}}"))
        .and_then(|t| t.peel_to_tree())
        .map_err(|e| Error::wrap("cannot read the run branch", e))?;
    if tree.get_path(&prefix.join("ralph.toml")).is_err() {
        return Err(Error::usage(format!(
            "ralph.toml is not committed on {run_branch}: the workers' worktrees would not have it"
        ))
        .with_hint("commit ralph.toml (and the plan), then run again"));
    }
    Ok(())
}

fn read_plan(path: &Path) -> Result<String> {
    crate::plan::Plan::load(path)?;
    std::fs::read_to_string(path).map_err(|e| Error::io("cannot read the plan", path, e))
}

impl Coordinator {
    fn save(&self) -> Result<()> {
        self.ledger.save(&self.ralph_dir)
    }

    fn drive(&mut self) -> Result<i32> {
        let (tx, rx) = mpsc::channel::<Msg>();
        let mut waiting_locks: BTreeMap<String, Instant> = BTreeMap::new();
        loop {
            self.take_signal();
            self.check_budgets();
            if self.paused_until.is_some_and(|t| Instant::now() >= t) {
                self.paused_until = None;
            }
            if self.stop.is_none() && self.paused_until.is_none() {
                self.fill(&tx, &mut waiting_locks)?;
            }
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(msg) => self.heard(msg),
                Err(mpsc::RecvTimeoutError::Timeout) => self.bus.tick(),
                Err(mpsc::RecvTimeoutError::Disconnected) => {}
            }
            while let Ok(msg) = rx.try_recv() {
                self.heard(msg);
            }
            let exited: Vec<(String, i32)> = self
                .children
                .iter_mut()
                .filter_map(|(w, c)| c.exited().map(|code| (w.clone(), code)))
                .collect();
            for (worker, code) in exited {
                // The rest of its output first: its run_ended comes before.
                std::thread::sleep(Duration::from_millis(50));
                while let Ok(msg) = rx.try_recv() {
                    self.heard(msg);
                }
                self.children.remove(&worker);
                self.finished(&worker, code, &tx)?;
            }
            if self.children.is_empty() && self.nothing_to_start() {
                break;
            }
        }
        self.end()
    }

    fn take_signal(&mut self) {
        let sig = SIGNAL.swap(0, Ordering::SeqCst);
        let Ok(sig) = Signal::try_from(sig) else {
            return;
        };
        match sig {
            Signal::SIGHUP => self.bus.detach(),
            // `ralph checkpoint`: each worker checkpoints and goes on.
            Signal::SIGUSR1 => {
                for c in self.children.values() {
                    c.signal(Signal::SIGUSR1);
                }
            }
            Signal::SIGUSR2 => self.halt(Stop::Stopped),
            _ => self.halt(Stop::Interrupted),
        }
    }

    /// Stop giving out work and stop every worker (each checkpoints first).
    fn halt(&mut self, why: Stop) {
        if self.stop.is_none() {
            self.stop = Some(why);
        }
        let signal = match why {
            Stop::Interrupted => Signal::SIGINT,
            _ => Signal::SIGUSR2,
        };
        for c in self.children.values() {
            c.signal(signal);
        }
    }

    fn check_budgets(&mut self) {
        if self.stop.is_some() {
            return;
        }
        let l = &self.config.loop_;
        let cost = l.max_cost_usd.is_some_and(|max| self.ledger.cost_usd >= max);
        let time = l
            .max_duration
            .is_some_and(|d| self.started.elapsed() >= d.0);
        if cost || time {
            self.halt(Stop::Budget);
        } else if self.ledger.iterations >= l.max_iterations {
            self.halt(Stop::Iterations);
        }
    }

    /// Whether there is no work left to start now or later in this run.
    fn nothing_to_start(&self) -> bool {
        if self.stop.is_some() {
            return true;
        }
        if self.paused_until.is_some() {
            return false;
        }
        let resumable = self
            .ledger
            .assignments
            .iter()
            .any(|a| matches!(a.status, Status::Running | Status::Paused));
        !resumable && self.ready_units().is_empty()
    }

    fn ready_units(&self) -> Vec<String> {
        let Ok(text) = std::fs::read_to_string(&self.plan_path) else {
            return Vec::new();
        };
        let Ok(units) = assign::units(&text) else {
            return Vec::new();
        };
        let busy: BTreeSet<String> = self
            .ledger
            .assignments
            .iter()
            .map(|a| a.item.clone())
            .collect();
        let merged: BTreeSet<String> = self.ledger.merged.iter().cloned().collect();
        assign::ready(&units, &busy, &merged)
            .into_iter()
            .map(|i| units[i].key.clone())
            .collect()
    }

    /// Start workers while there are free ones: first the assignments a
    /// previous coordinator left (takeover), then ready units.
    fn fill(
        &mut self,
        tx: &mpsc::Sender<Msg>,
        waiting: &mut BTreeMap<String, Instant>,
    ) -> Result<()> {
        while self.children.len() < self.opts.workers as usize {
            let resume = self.ledger.assignments.iter().position(|a| {
                matches!(a.status, Status::Running | Status::Paused)
                    && !self.children.contains_key(&a.worker)
            });
            if let Some(i) = resume {
                let a = self.ledger.assignments[i].clone();
                if self.children.values().any(|c| c.worker == a.worker) {
                    break;
                }
                // A worker of a coordinator that died may still be
                // finishing its checkpoint: its lock says so.
                if child::project_busy(&a.project_dir) {
                    let since = *waiting.entry(a.worker.clone()).or_insert_with(Instant::now);
                    if since.elapsed() < Duration::from_secs(120) {
                        return Ok(());
                    }
                }
                waiting.remove(&a.worker);
                self.ledger.assignments[i].status = Status::Running;
                self.save()?;
                self.start(&a, false, tx)?;
                continue;
            }
            let Some(item) = self.ready_units().into_iter().next() else {
                break;
            };
            let a = self.assign(&item)?;
            self.start(&a, true, tx)?;
        }
        Ok(())
    }

    /// A free worker name (`w1`…), a new branch and worktree for `item`.
    fn assign(&mut self, item: &str) -> Result<Assignment> {
        let busy: BTreeSet<&str> = self
            .ledger
            .assignments
            .iter()
            .filter(|a| matches!(a.status, Status::Running | Status::Paused))
            .map(|a| a.worker.as_str())
            .collect();
        let worker = (1..)
            .map(|n| format!("w{n}"))
            .find(|w| !busy.contains(w.as_str()))
            .expect("an unbounded range has a free name");
        let run = &self.ledger.run_id;
        let branch = worktree::free_name(&format!("ralph/{run}/{worker}"), |b| {
            worktree::branch_exists(&self.git, b)
        });
        let leaf = branch.rsplit('/').next().unwrap_or(&worker).to_string();
        let path = self.worktrees.join(&leaf);
        let name = worktree::free_name(&format!("ralph-{run}-{leaf}"), |n| {
            worktree::worktree_taken(&self.git, n, &path)
        });
        let tip = self
            .git
            .refname_to_id(&format!("refs/heads/{}", self.ledger.run_branch))
            .map_err(|e| Error::wrap("cannot read the run branch", e))?;
        worktree::create(&self.git, &name, &path, &branch, tip)?;
        let a = Assignment {
            worker,
            item: item.to_string(),
            branch,
            project_dir: path.join(&self.prefix),
            worktree: path,
            worktree_name: name,
            task: Task::Item,
            attempts: 0,
            status: Status::Running,
            conflict: Vec::new(),
        };
        let text = read_plan(&self.plan_path)?;
        let units = assign::units(&text).map_err(|e| Error::usage(e.to_string()))?;
        let unit = units
            .iter()
            .find(|u| u.key == item)
            .ok_or_else(|| Error::usage(format!("plan item \"{item}\" is gone from the plan")))?;
        write_worker_plan(&a.project_dir, &assign::worker_plan(&text, unit))?;
        self.ledger.assignments.push(a.clone());
        self.save()?;
        Ok(a)
    }

    fn start(&mut self, a: &Assignment, fresh: bool, tx: &mpsc::Sender<Msg>) -> Result<()> {
        self.bus.emit(Event::WorkerStarted {
            worker: a.worker.clone(),
            item: a.item.clone(),
            task: a.task.name().into(),
            branch: a.branch.clone(),
            worktree: a.worktree.display().to_string(),
        });
        let child = child::spawn(a, &self.ledger.run_branch, fresh, &self.opts.pass, tx)?;
        self.children.insert(a.worker.clone(), child);
        Ok(())
    }

    /// A child's line: its events go out tagged with the worker; the shared
    /// budgets and the usage limit are counted here.
    fn heard(&mut self, msg: Msg) {
        match msg {
            Msg::Said(worker, line) => self
                .bus
                .emit_from(&worker, Event::Warning { message: line }),
            Msg::Record(worker, mut record) => {
                match &record.event {
                    Event::IterationEnded { cost_usd, .. } => {
                        self.ledger.iterations += 1;
                        self.ledger.cost_usd += cost_usd;
                        let _ = self.save();
                    }
                    Event::LimitWait { seconds, .. } => self.pause_others(&worker, *seconds),
                    _ => {}
                }
                record.worker = Some(worker);
                self.bus.publish(&record);
            }
        }
    }

    /// One usage limit pauses every worker: the others checkpoint and stop
    /// now, and start again when it resets; the one that hit it waits by
    /// itself (its own loop's wait).
    fn pause_others(&mut self, limited: &str, seconds: u64) {
        let until = Instant::now() + Duration::from_secs(seconds);
        self.paused_until = Some(self.paused_until.map_or(until, |t| t.max(until)));
        for (w, c) in &self.children {
            if w != limited {
                c.signal(Signal::SIGUSR2);
            }
        }
        self.bus.emit(Event::Warning {
            message: format!(
                "usage limit hit by {limited}: every worker pauses for {seconds}s, until it resets"
            ),
        });
    }

    /// A worker's loop ended with `code`.
    fn finished(&mut self, worker: &str, code: i32, tx: &mpsc::Sender<Msg>) -> Result<()> {
        let Some(i) = self
            .ledger
            .assignments
            .iter()
            .position(|a| a.worker == worker && a.status == Status::Running)
        else {
            return Ok(());
        };
        let a = self.ledger.assignments[i].clone();
        self.commit_leftovers(&a);
        self.bus.emit(Event::WorkerEnded {
            worker: a.worker.clone(),
            item: a.item.clone(),
            exit_code: code,
            outcome: outcome_name(code).into(),
        });
        if code != 0 {
            // Stopped or paused: resumed in its worktree later. Failed (its
            // breaker, a bad setup): left to a person, branch kept.
            self.ledger.assignments[i].status = match code {
                5 | 6 | 130 | 143 => Status::Paused,
                _ => Status::Left(format!(
                    "its loop ended: {} (exit {code})",
                    outcome_name(code)
                )),
            };
            return self.save();
        }
        self.merge(i, tx)
    }

    /// Whatever a worker left uncommitted, committed on its branch with the
    /// WIP commit's rules: nothing stays behind in a worktree.
    fn commit_leftovers(&mut self, a: &Assignment) {
        if let Ok(Some(repo)) = Repo::open(&a.project_dir) {
            let outcome = repo.wip_commit(
                &format!("ralph: {}'s uncommitted work on \"{}\"", a.worker, a.item),
                &OwnPaths::new(&self.config.prompt_file),
            );
            if let crate::repo::CommitOutcome::Skipped { reason } = outcome {
                self.bus
                    .emit_from(&a.worker, Event::Warning { message: reason });
            }
        }
    }

    /// The merge queue's one step: merge assignment `i`'s branch; on
    /// success check its unit off and remove its worktree; on a conflict
    /// hand it back, or leave it to a person after the last attempt.
    fn merge(&mut self, i: usize, tx: &mpsc::Sender<Msg>) -> Result<()> {
        let a = self.ledger.assignments[i].clone();
        let attempt = a.attempts + 1;
        let backup = format!(
            "refs/ralph/merges/{}/{}",
            self.ledger.run_id,
            self.ledger.history.len() + 1
        );
        let message = format!("ralph: merge {} (\"{}\")", a.branch, a.item);
        let merged = super::merge(
            &self.git,
            &MergeRequest {
                run_branch: &self.ledger.run_branch,
                worker_branch: &a.branch,
                backup_ref: &backup,
                message: &message,
            },
        )?;
        let wrote_backup = matches!(
            merged,
            Merged::FastForward { .. } | Merged::MergeCommit { .. } | Merged::Blocked { .. }
        );
        let backup = wrote_backup.then_some(backup);
        self.ledger.history.push(MergeRecord {
            ts: crate::state::now_rfc3339(),
            worker: a.worker.clone(),
            item: a.item.clone(),
            branch: a.branch.clone(),
            attempt,
            merged: merged.clone(),
            backup: backup.clone(),
        });
        self.ledger.assignments[i].attempts = attempt;
        self.save()?;
        self.bus.emit(Event::Merge {
            worker: a.worker.clone(),
            item: a.item.clone(),
            branch: a.branch.clone(),
            attempt,
            merged: merged.clone(),
            backup,
        });
        match merged {
            Merged::AlreadyMerged | Merged::FastForward { .. } | Merged::MergeCommit { .. } => {
                self.merged(i)
            }
            Merged::Conflict { files } if attempt < self.config.workers.conflict_attempts => {
                let a = &mut self.ledger.assignments[i];
                a.task = Task::Update;
                a.conflict = files.clone();
                let a = a.clone();
                write_worker_plan(&a.project_dir, &update_plan(&self.ledger.run_branch, &a))?;
                self.save()?;
                self.start(&a, true, tx)
            }
            Merged::Conflict { files } => {
                let why = format!(
                    "merge conflict in {} still unresolved after {attempt} attempt(s)",
                    files.join(", ")
                );
                self.leave(i, "conflict", why)
            }
            Merged::Blocked { reason } => self.leave(i, "merge_blocked", reason),
        }
    }

    fn leave(&mut self, i: usize, reason: &str, why: String) -> Result<()> {
        let a = self.ledger.assignments[i].clone();
        self.ledger.assignments[i].status = Status::Left(why.clone());
        self.save()?;
        self.bus.emit(Event::NeedsHuman {
            iteration: self.ledger.iterations,
            reason: reason.into(),
            message: format!(
                "{} (\"{}\"): {why}; its branch {} and worktree {} are kept",
                a.worker,
                a.item,
                a.branch,
                a.worktree.display()
            ),
        });
        Ok(())
    }

    /// Assignment `i` is merged: its unit checked off in the plan (one
    /// commit on the run branch), its worktree and branch removed.
    fn merged(&mut self, i: usize) -> Result<()> {
        let a = self.ledger.assignments.remove(i);
        if !self.ledger.merged.contains(&a.item) {
            self.ledger.merged.push(a.item.clone());
        }
        self.save()?;
        let text = read_plan(&self.plan_path)?;
        if let Some(checked) = assign::check_off(&text, &a.item) {
            crate::state::write_atomic(&self.plan_path, checked.as_bytes())?;
            self.commit_plan(&format!("ralph: \"{}\" done (merged {})", a.item, a.branch))?;
        }
        if let Err(e) = worktree::remove_merged(
            &self.git,
            &a.worktree_name,
            &a.branch,
            &self.ledger.run_branch,
        ) {
            self.bus.emit(Event::Warning {
                message: format!("worktree {} kept: {e}", a.worktree.display()),
            });
        }
        Ok(())
    }

    /// The plan, committed alone on the run branch.
    fn commit_plan(&self, message: &str) -> Result<()> {
        let err = |e: git2::Error| Error::wrap("cannot commit the plan", e);
        let mut index = self.git.index().map_err(err)?;
        index.add_path(&self.plan_in_tree).map_err(err)?;
        index.write().map_err(err)?;
        let tree = self
            .git
            .find_tree(index.write_tree().map_err(err)?)
            .map_err(err)?;
        let parent = self
            .git
            .head()
            .and_then(|h| h.peel_to_commit())
            .map_err(err)?;
        let (author, committer) = crate::repo::identities(&self.git).map_err(err)?;
        self.git
            .commit(
                Some("HEAD"),
                &author,
                &committer,
                message,
                &tree,
                &[&parent],
            )
            .map_err(err)?;
        Ok(())
    }

    fn end(&mut self) -> Result<i32> {
        let text = read_plan(&self.plan_path).unwrap_or_default();
        let open = assign::units(&text)
            .map(|u| u.iter().filter(|u| u.state == UnitState::Open).count())
            .unwrap_or(0);
        let left: Vec<String> = self
            .ledger
            .assignments
            .iter()
            .map(|a| {
                let commits =
                    worktree::commits_ahead(&self.git, &a.branch, &self.ledger.run_branch)
                        .map(|c| c.len())
                        .unwrap_or(0);
                format!("{} ({}, {commits} commit(s) not merged)", a.branch, a.item)
            })
            .collect();
        let (outcome, code, reason) = match self.stop {
            Some(Stop::Interrupted) => ("interrupted", 130, "interrupted".to_string()),
            Some(Stop::Stopped) => ("stopped", 6, "stopped by `ralph stop`".to_string()),
            Some(Stop::Budget) => ("budget_spent", 5, "a shared budget is spent".to_string()),
            Some(Stop::Iterations) => (
                "iteration_limit",
                4,
                format!("{} iterations over all workers", self.ledger.iterations),
            ),
            None if open == 0 && left.is_empty() => (
                "completed",
                0,
                "every item is merged and checked off".to_string(),
            ),
            None => (
                "incomplete",
                4,
                format!("{open} item(s) open; left to a person: {}", left.join("; ")),
            ),
        };
        if code == 0 {
            self.ledger.ended = Some(crate::state::now_rfc3339());
        }
        self.save()?;
        if !left.is_empty() && code != 0 {
            self.bus.emit(Event::Warning {
                message: format!("worker branches not merged: {}", left.join("; ")),
            });
        }
        self.bus.emit(Event::RunEnded {
            outcome: outcome.into(),
            exit_code: code,
            reason,
            iterations: self.ledger.iterations,
            cost_usd: self.ledger.cost_usd,
            report: None,
        });
        let _ = &self.root;
        Ok(code)
    }
}

fn outcome_name(code: i32) -> &'static str {
    match code {
        0 => "completed",
        3 => "breaker_open",
        4 => "iteration_limit",
        5 => "budget_spent",
        6 => "stopped",
        130 | 143 => "interrupted",
        _ => "failed",
    }
}

fn write_worker_plan(project_dir: &Path, text: &str) -> Result<()> {
    let path = project_dir.join(WORKER_PLAN);
    if let Some(dir) = path.parent() {
        crate::state::create_dir_private(dir)?;
    }
    crate::state::write_atomic(&path, text.as_bytes())
}

/// The plan of a worker sent back to bring its branch up to date.
fn update_plan(run_branch: &str, a: &Assignment) -> String {
    format!(
        "# Bring branch {} up to date with {run_branch}\n\n- [ ] Merge `{run_branch}` into this branch (`git merge {run_branch}`), resolve the conflicts in {} so that both sides' work is kept (this branch did: \"{}\"), and commit the merge\n",
        a.branch,
        a.conflict
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", "),
        a.item
    )
}
