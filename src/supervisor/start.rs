//! The start of a run: the one path a single loop (`Supervisor::new`), a
//! worker's loop and a parallel run's coordinator
//! (`workers::coordinator::setup`) take from "the checks passed" to "the
//! run holds its project and speaks on the bus": the secrets its events
//! are redacted of, the trust of the last
//! run's changes, the project's lock, the claim on its work tree, the
//! event log, notifications, ralph's runtime files kept out of git, what a
//! dead run left (its agent, its hooks, its git lock files) and the hooks
//! this run trusts.
//!
//! Pitfalls: the trust is decided before anything is written (a change the
//! agent made during the last run is not acted on unconfirmed); only the
//! lock holder writes the log (a refused second instance must not); what a
//! dead run left is ended only once its lock is ours.

use std::path::Path;

use crate::agent;
use crate::config::Config;
use crate::config::trust;
use crate::error::Result;
use crate::events::{Bus, Event, EventLog};
use crate::hooks;
use crate::repo::{self, Repo, ScopeClaim};
use crate::state::ownership::{self, Workplace};
use crate::state::{Layout, Lock};

/// What kind of run starts, and where.
pub(crate) struct Start<'a> {
    pub(crate) root: &'a Path,
    pub(crate) config: &'a Config,
    /// The project's repository (none: not a git project).
    pub(crate) repo: Option<&'a Repo>,
    /// The id of the run this start continues (a parallel run's ledger);
    /// none: a new id (a single loop settles its own id from its state).
    pub(crate) run_id: Option<String>,
    /// Where its agents work: here (a loop) or in worktrees (a coordinator).
    pub(crate) workplace: Workplace,
    /// A worker's loop: its worktree is its coordinator's (trusted), and
    /// its coordinator notifies for it.
    pub(crate) worker: bool,
    /// `--trust-config`: files changed during the last run are the user's.
    pub(crate) trust_config: bool,
}

/// A run started: it holds its project.
pub(crate) struct Begun {
    pub(crate) layout: Layout,
    pub(crate) run_id: String,
    pub(crate) lock: Lock,
    /// Its claim on its project in its work tree, held for the run's life.
    pub(crate) claim: Option<ScopeClaim>,
    /// What it trusted at its start, for `.ralph/trust.json`: saved by the
    /// caller right after its own state (the state's file is the one a
    /// `.ralph/` that cannot be written is reported by).
    pub(crate) trust: trust::Record,
    /// The hooks, refused when their scripts change after this start.
    pub(crate) hooks: hooks::Hooks,
}

/// Start a run: see the module's text for the steps and their order.
pub(crate) fn begin(s: Start, bus: &mut Bus) -> Result<Begun> {
    let (root, config) = (s.root, s.config);
    let layout = Layout::new(root);
    crate::text::secrets::remember(&config.agent.env);
    // Values the plan holds now are the user's words (see `secrets`).
    if let Ok(text) = std::fs::read_to_string(root.join(&config.plan)) {
        crate::text::secrets::note_plan(&text);
    }
    let boxed = config.agent.sandbox == agent::sandbox::Kind::Bwrap;
    let trusted = if s.worker {
        trust::Decision::Trusted
    } else {
        trust::at_start(root, &layout.dir, boxed, s.trust_config)?
    };
    if s.workplace == Workplace::Here {
        ownership::claim_prompt_file(root, &config.prompt_file)?;
    }
    layout.ensure()?;
    if boxed {
        agent::sandbox::protect::prepare(root);
    }
    let run_id = (s.run_id).unwrap_or_else(|| super::record::new_run_id(root, s.repo));
    let lock = Lock::acquire(&layout, &run_id)?;
    // After the project's own lock (a second run of this project is
    // refused by it, naming its pid): the work tree's other projects.
    let claim = s.repo.map(Repo::claim_scope).transpose()?.flatten();
    crate::state::remove_dead_temp_files(&layout.dir, None);
    bus.add(Box::new(EventLog::open(&layout.events())?));
    if let Some(event) = trust::start_event(trusted) {
        bus.emit(event);
    }
    let trust = trust::Record::start(&run_id, boxed, trust::Fingerprints::take(root, config));
    if !s.worker
        && let Some(notifier) = crate::events::notify::Notifier::start(&config.notify, root)?
    {
        bus.add(Box::new(notifier));
    }
    ownership::at_start(root, &config.prompt_file, s.workplace, bus);
    end_what_a_dead_run_left(root, &layout, &lock, bus);
    let hooks = hooks::Hooks::trusting(&config.hooks, root, Some(trust.started.clone()));
    Ok(Begun {
        layout,
        run_id,
        lock,
        claim,
        trust,
        hooks,
    })
}

/// The previous run died (its lock was stale): its agent (killed by its
/// parent-death signal) and the tools it started must not live on, nor
/// the hooks it was running, nor the git lock files it held while
/// writing to git (they would refuse every commit and merge from now on:
/// they are its own, not another git's).
fn end_what_a_dead_run_left(root: &Path, layout: &Layout, lock: &Lock, bus: &mut Bus) {
    if let Some(pgid) = lock.stale_agent_pgid {
        tracing::warn!(
            "the previous supervisor died; ending what is left of its agent (session {pgid})"
        );
        agent::kill_session(pgid);
    }
    lock.stale_sessions
        .iter()
        .for_each(agent::procs::kill_recorded_session);
    let hook_groups = layout.hook_groups();
    if hooks::process::end_left_behind(&hook_groups) > 0 {
        tracing::warn!("the previous supervisor died; its hooks were ended");
    }
    hooks::process::record_groups_in(hook_groups);
    if lock.stale_committing {
        let removed = repo::remove_stale_commit_locks(root);
        if !removed.is_empty() {
            bus.emit(Event::Warning {
                message: format!(
                    "the previous run died writing to git; removed the git lock files it left: {}",
                    removed.join(", ")
                ),
            });
        }
    }
}
