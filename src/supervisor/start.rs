//! The start of a run: the one path a single loop (`Supervisor::new`), a
//! worker's loop (`ralph run --worker`), a parallel run's coordinator
//! (`workers::coordinator::setup`) and a fleet worker (`workers::fleet`)
//! take, in two steps.
//!
//! [`Start::check`], before anything is written: the agent's variables
//! remembered as secrets, the templates, the agent's program and its box,
//! and the last run's changes judged (`config::trust`: a change an agent
//! made is not acted on unconfirmed; a worker acts on its coordinator's
//! record). Bad input is refused here, exit 2, with nothing made — not a
//! worktree, a branch or a log.
//!
//! [`Start::begin`], the run taking its project: `.ralph/` made (and what
//! the box mounts read-only), the signals caught, the project's lock, the
//! claim on its work tree, dead temp files gone, the event log (only the
//! lock holder writes it), the trust decision said, notifications, ralph's
//! runtime files kept out of git, what a dead run left ended (its agent,
//! the sessions its tools started, its hooks, its git lock files) and the
//! hooks this run trusts. The caller saves `.ralph/trust.json` after its
//! own state (the state's file is the one an unwritable `.ralph/` is
//! reported by).
//!
//! Pitfalls: the signals are caught before the lock, so a Ctrl-C during the
//! start is a request the run answers, not the default death with the lock
//! held; what a dead run left is ended only once its lock is ours.

use std::path::Path;

use crate::agent;
use crate::config::Config;
use crate::config::templates::Templates;
use crate::config::trust;
use crate::error::{Error, Result};
use crate::events::{Bus, EventLog};
use crate::formats::{Event, Layout};
use crate::hooks::Hooks;
use crate::platform::signals::Catcher;
use crate::project::Lock;
use crate::project::ownership::{self, Workplace};
use crate::prompt;
use crate::repo::{self, Repo, ScopeClaim};

/// Which run starts.
#[derive(Clone, Copy)]
pub(crate) enum Kind<'a> {
    /// One loop in the project.
    Loop,
    /// A worker's loop in its worktree, made by its coordinator: it acts on
    /// its coordinator's trust record (`--trusted-by`), and its coordinator
    /// notifies for it.
    Worker(Option<&'a trust::Record>),
    /// A parallel run's coordinator: its agents work in worktrees; its
    /// workers act on the configuration it holds (`holding_config`).
    Coordinator,
    /// A fleet worker in its clone (`--fleet NAME`): its items' loops work
    /// in worktrees; its log is the fleet's (`.ralph/fleet/NAME/`). Its
    /// trust record is not kept: its loops judge their own worktrees.
    Fleet(&'a str),
}

/// A start whose checks passed; nothing written yet.
pub(crate) struct Start<'a> {
    root: &'a Path,
    config: &'a Config,
    kind: Kind<'a>,
    layout: Layout,
    boxed: bool,
    trusted: trust::Decision,
    templates: Templates,
}

/// A run started: it holds its project.
pub(crate) struct Begun {
    pub(crate) layout: Layout,
    pub(crate) run_id: String,
    pub(crate) lock: Lock,
    /// Its claim on its project in its work tree, held for the run's life.
    pub(crate) claim: Option<ScopeClaim>,
    /// What it trusted at its start, for `.ralph/trust.json` (saved by the caller).
    pub(crate) trust: trust::Record,
    /// The hooks, refused when their scripts change after this start.
    pub(crate) hooks: Hooks,
    /// The signals that reach it from now on.
    pub(crate) signals: Catcher,
    /// The prompt templates, checked.
    pub(crate) templates: Templates,
}

impl<'a> Start<'a> {
    /// The checks of a run's start: see the module's text.
    pub(crate) fn check(
        root: &'a Path,
        config: &'a Config,
        kind: Kind<'a>,
        trust_config: bool,
    ) -> Result<Start<'a>> {
        let layout = Layout::new(root);
        crate::text::secrets::remember(&config.agent.env);
        let templates = Templates::load(root)?;
        templates.check(&[prompt::PROMPT, prompt::CHECKPOINT_REQUEST])?;
        agent::check_program(config, root)?;
        let agent_home = config.agent.env.get("HOME").map(String::as_str);
        agent::sandbox::check(config.agent.sandbox, root, agent_home)?;
        let boxed = config.agent.sandbox == crate::config::sandbox::Kind::Bwrap;
        let trusted = match kind {
            // A worker's project is its worktree, made by its coordinator.
            Kind::Worker(_) => trust::Decision::Trusted,
            Kind::Loop | Kind::Coordinator | Kind::Fleet(_) => {
                trust::at_start(root, &layout.dir, boxed, trust_config)?
            }
        };
        Ok(Start {
            root,
            config,
            kind,
            layout,
            boxed,
            trusted,
            templates,
        })
    }

    /// The prompt templates, checked.
    pub(crate) fn templates(&self) -> &Templates {
        &self.templates
    }

    /// Take the project: see the module's text. `repo`: the project's
    /// repository (none: not a git project); `run_id`: the run this start
    /// continues (a parallel run's ledger), else a new id.
    pub(crate) fn begin(
        self,
        repo: Option<&Repo>,
        run_id: Option<String>,
        bus: &mut Bus,
    ) -> Result<Begun> {
        let (root, config, layout) = (self.root, self.config, &self.layout);
        let workplace = match self.kind {
            Kind::Loop | Kind::Worker(_) => Workplace::Here,
            Kind::Coordinator | Kind::Fleet(_) => Workplace::Worktrees,
        };
        if workplace == Workplace::Here {
            ownership::claim_prompt_file(root, &config.prompt_file)?;
        }
        layout.ensure()?;
        if self.boxed {
            agent::sandbox::protect::prepare(root);
        }
        let signals = Catcher::new(Some(layout.control()))?;
        let run_id = run_id.unwrap_or_else(|| super::record::new_run_id(root, repo));
        let lock = Lock::acquire(layout, &run_id)?;
        // After the project's own lock (a second run of this project is
        // refused by it, naming its pid): the work tree's other projects.
        let claim = repo.map(Repo::claim_scope).transpose()?.flatten();
        crate::formats::remove_dead_temp_files(&layout.dir, None);
        // Only the lock holder writes the log: a refused second instance must not.
        let log = match self.kind {
            Kind::Fleet(name) => layout.fleet().join(name).join("events.jsonl"),
            _ => layout.events(),
        };
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io("cannot create", dir, e))?;
        }
        bus.add(Box::new(EventLog::open(&log)?));
        let trust = self.record(&run_id)?;
        if let Some(event) = trust::start_event(self.trusted) {
            bus.emit(event);
        }
        if !matches!(self.kind, Kind::Worker(_))
            && let Some(notifier) = crate::events::notify::Notifier::start(&config.notify, root)?
        {
            bus.add(Box::new(notifier));
        }
        ownership::at_start(root, &config.prompt_file, workplace, bus);
        end_what_a_dead_run_left(root, layout, &lock, bus);
        let hooks = Hooks::trusting(&config.hooks, root, Some(trust.started.clone()));
        Ok(Begun {
            layout: self.layout,
            run_id,
            lock,
            claim,
            trust,
            hooks,
            signals,
            templates: self.templates,
        })
    }

    /// What this run trusts from its start (`.ralph/trust.json`).
    fn record(&self, run_id: &str) -> Result<trust::Record> {
        let root = self.root;
        let fingerprints = trust::Fingerprints::take(root, self.config);
        match self.kind {
            Kind::Loop | Kind::Worker(None) | Kind::Fleet(_) => {
                Ok(trust::Record::start(run_id, self.boxed, fingerprints))
            }
            // The workers' loops act on this configuration (`--trusted-by`).
            Kind::Coordinator => {
                trust::Record::start(run_id, self.boxed, fingerprints).holding_config(root)
            }
            Kind::Worker(Some(coordinator)) => {
                let fingerprints = fingerprints.trusted_by(&coordinator.started);
                // Its templates are read from the worktree: one the
                // coordinator did not start with is refused, named (the
                // config is the coordinator's, the scripts are judged by
                // its fingerprints). One missing there (untracked in the
                // user's checkout) is the embedded default, as before.
                let templates: Vec<String> = (fingerprints.changed(root).into_iter())
                    .filter(|p| p.starts_with("prompts/") && root.join(p).is_file())
                    .collect();
                if !templates.is_empty() {
                    return Err(Error::config(format!(
                        "changed during the parallel run and not confirmed: {}; this worker does not act on templates the agents may have written",
                        templates.join(", ")
                    ))
                    .with_hint("look at the change on the run branch (`git log -p -- FILE`); put it back, or stop the run and start it again with `ralph run --workers N --trust-config`"));
                }
                let sandboxed = self.boxed || coordinator.sandboxed;
                Ok(trust::Record::start(run_id, sandboxed, fingerprints))
            }
        }
    }
}

/// The previous run died (its lock was stale), a loop or a coordinator:
/// its agent (killed by its parent-death signal where there is one) and
/// the tools it started in sessions of their own must not live on, nor the
/// hooks it was running, nor the git lock files it held while writing to
/// git (they would refuse every commit, merge and branch from now on: they
/// are its own, not another git's).
fn end_what_a_dead_run_left(root: &Path, layout: &Layout, lock: &Lock, bus: &mut Bus) {
    if let Some(pgid) = lock.stale_agent_pgid {
        tracing::warn!("the previous run died; ending what is left of its agent (session {pgid})");
        agent::kill_session(pgid);
    }
    lock.stale_sessions
        .iter()
        .for_each(agent::procs::kill_recorded_session);
    let hook_groups = layout.hook_groups();
    if agent::shell::end_left_behind(&hook_groups) > 0 {
        tracing::warn!("the previous run died; its hooks were ended");
    }
    agent::shell::record_groups_in(hook_groups);
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
