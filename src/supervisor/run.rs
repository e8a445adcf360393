//! `Supervisor`: the run as a whole — the loop of iterations, measuring
//! before and after each, checkpoints, the end of a run. This file and
//! `record` are the only writers of `RunState`'s bookkeeping during a run.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::budget::{self, Budgets};
use super::driver::Driver;
use super::facts::{CheckpointMark, Facts, rel};
use super::iteration::{IterationLimits, IterationMachine};
use super::limit_wait::LimitBackoff;
use super::publish::Publisher;
pub(crate) use super::verdict::Outcome;
use super::verdict::{Measured, Next, RunFlags};
use super::{Now, driver, iteration, record, start, verdict};
use crate::agent::{self, Agent, AgentCommand};
use crate::checkpoint;
use crate::config::Config;
use crate::config::templates::Templates;
use crate::config::trust;
use crate::error::Result;
use crate::events::Bus;
use crate::formats::Event;
use crate::formats::{Layout, RunState, RunStatus, Trigger, Windows, now_rfc3339};
use crate::plan::Plan;
use crate::platform::signals::{Catcher, Request};
use crate::project::Lock;
use crate::project::Project;
use crate::prompt;
use crate::repo::{self, OwnPaths};
use crate::rules::fatal;

#[derive(Debug, Clone, Default)]
pub(crate) struct RunOptions {
    pub(crate) fresh: bool,
    pub(crate) reset_breaker: bool,
    /// Stop before this moment (`--deadline HH:MM`).
    pub(crate) deadline: Option<jiff::Timestamp>,
    /// Count the budgets from this invocation, not the run's start.
    pub(crate) budget_per_invocation: bool,
    /// A worker of `ralph run --workers N` (`--worker NAME`): its
    /// coordinator notifies for it, and its unit is done once checked off.
    pub(crate) worker: Option<WorkerUnit>,
    /// `--trust-config`: files changed during the last run are the user's.
    pub(crate) trust_config: bool,
    /// A parallel run's worker: its coordinator's trust record (`--trusted-by`).
    pub(crate) trusted_by: Option<trust::Record>,
    /// A fleet item's loop (`--granted`): each session waits for its
    /// worker's grant, as a parallel run's worker waits for its coordinator's.
    pub(crate) granted: bool,
    /// The project whose `.ralph/windows.json` remembers the models' windows
    /// (`--home`: a parallel run's coordinator's, a fleet worker's); None:
    /// this loop's own.
    pub(crate) home: Option<PathBuf>,
}

/// What a worker's loop knows of the unit it was handed: its run is done
/// once the unit is checked off, in the plan it was handed or in the
/// project's plan in its worktree (where prompts and `AGENTS.md` files
/// teach agents to check items off), promise or not; `[verify]` decides.
#[derive(Debug, Clone, Default)]
pub(crate) struct WorkerUnit {
    /// The unit's key (`RALPH_ITEM`); an update task's plan does not hold it.
    pub(crate) item: String,
    /// The project's plan (ralph.toml's `plan`), relative to the root.
    pub(crate) project_plan: PathBuf,
    /// The worker's branch (`RALPH_WORKER_BRANCH`): ralph's commits go there.
    pub(crate) branch: String,
}

/// Everything one run needs, shared by its iterations.
pub(crate) struct Supervisor {
    pub(super) root: PathBuf,
    /// Where the models' windows are remembered (`RunOptions::home`).
    pub(super) home: PathBuf,
    pub(super) layout: Layout,
    pub(super) config: Config,
    pub(super) templates: Templates,
    pub(super) reset_breaker: bool,
    /// Every event of the run goes out through it (bus and hooks).
    pub(super) events: Publisher,
    pub(super) state: RunState,
    pub(super) lock: Lock,
    pub(super) signals: Catcher,
    pub(super) budgets: Budgets,
    pub(super) flags: RunFlags,
    /// Requests that came while a continued session ran (`continuation`),
    /// handled before the next iteration as any request between two.
    pub(super) held: Vec<Request>,
    pub(super) backoff: LimitBackoff,
    /// The snapshot taken after the last iteration while nothing has touched
    /// the tree since (no WIP commit, hook or wait): the next iteration
    /// starts from it instead of a second full status of the repository.
    pub(super) reuse_snapshot: Option<repo::Snapshot>,
    /// Likewise the work tree as a tree at the last iteration's end: the
    /// next one's start (`state.iteration_tree`).
    pub(super) reuse_tree: Option<String>,
    /// Files the completion's checks wrote or changed (`supervisor/verify.rs`):
    /// not the agent's work, left out of the final commit.
    pub(super) written_by_checks: Vec<String>,
    /// This run's claim on its project in its work tree (`repo/scope.rs`),
    /// held for the run's life.
    pub(super) _claim: Option<repo::ScopeClaim>,
    /// The unfinished run of a dead supervisor that this new one replaces
    /// (`--fresh`, another plan): its last iteration is taken over first.
    pub(super) replaced: Option<RunState>,
    /// What the run trusted at its start (`config::trust`), kept in
    /// `.ralph/trust.json`, and the files seen changed since.
    pub(super) trust: trust::Record,
    pub(super) untrusted: Vec<String>,
    /// A worker's unit (`RunOptions::worker`).
    pub(super) unit: Option<WorkerUnit>,
    /// Whether each session waits for a grant: a parallel run's worker,
    /// a fleet item's loop (`--granted`).
    pub(super) waits_for_grants: bool,
    /// Sessions this process started (a worker's grant counts them).
    pub(super) sessions_started: u32,
    /// The login end last said (`rules::login`): said once, not after
    /// every session.
    pub(super) login_said: Option<jiff::Timestamp>,
    /// The project's repository, held open for the run (`Repo::hold`).
    pub(super) _repo: repo::Held,
    /// The run's start as one event, up to the first iteration's start
    /// (`Supervisor::new`).
    pub(super) start: Option<repo::OnePass>,
}

impl Supervisor {
    pub(crate) fn new(
        root: &Path,
        config: Config,
        opts: RunOptions,
        mut bus: Bus,
    ) -> Result<Supervisor> {
        let kind = match &opts.worker {
            Some(_) => start::Kind::Worker(opts.trusted_by.as_ref()),
            None => start::Kind::Loop,
        };
        let checked = start::Start::check(root, &config, kind, opts.trust_config)?;
        let project = Project::at(root);
        let plan_text = project.plan_text(&config)?;
        // Values the plan holds now are the user's words (see `secrets`).
        crate::text::secrets::note_plan(&plan_text);
        let plan = crate::plan::Plan::parse(&plan_text);
        let state_path = Layout::new(root).state();
        let previous = match RunState::load(&state_path) {
            Ok(s) => s,
            Err(e) if opts.fresh => {
                let _ = std::fs::rename(&state_path, state_path.with_extension("json.bad"));
                tracing::warn!("unreadable state replaced: {e}");
                None
            }
            Err(e) => return Err(e),
        };
        let start = record::start_from(previous, opts.fresh, &config.plan.display().to_string());
        let previous = start.continued();
        // The first prompt, rendered now: an undefined variable in the
        // user's template is bad input (exit 2) before anything is started,
        // counted or written.
        let first = previous.map_or(1, |s| s.iteration + 1);
        let blank = RunState::default();
        let first_state = previous.unwrap_or(&blank);
        let fitted = crate::prompt::fit::render_prompt(
            root,
            checked.templates(),
            &config,
            first_state,
            &plan,
            first,
        )?;
        // A prompt the usable window cannot hold would be an emergency stop
        // at the agent's first turn, every iteration: refused now.
        let usable = super::iteration::meter(&config, first_state).usable();
        if fitted.tokens as u64 > usable {
            return Err(crate::error::Error::usage(format!(
                "the first prompt is about {} tokens, more than the usable context window ({usable} tokens: agent.context_window less agent.reserve_tokens)",
                fitted.tokens
            ))
            .with_hint(format!(
                "`ralph prompt --stats` shows what each section costs; shorten the current item of {} or the prompt template, or give the agent a larger window",
                config.plan.display()
            )));
        }
        // One opened repository for the whole run (one parsed index): every
        // step's `Repo::open` shares it.
        let held = repo::Repo::hold(root);
        // As everywhere in a run, a repository git2 cannot open is no repository.
        let repo = repo::Repo::open(root).ok().flatten();
        // The run's start is one event (`repo::one_pass`, its walk taken at
        // the first status, inside `begin`): the untracked files said now,
        // the user's edits committed before the first session and the
        // first iteration's boundary tree and snapshot share one walk. Not
        // a worker's: its coordinator's grant may be long in coming, and
        // the coordinator works in its tree meanwhile.
        let start_pass = opts
            .worker
            .is_none()
            .then(|| repo::one_pass_to_commit(root));
        let begun = checked.begin(repo.as_ref(), None, &mut bus)?;
        let (mut state, replaced) = start.into_state(&begun.run_id, &mut bus);
        let home = opts.home.clone().unwrap_or_else(|| root.to_path_buf());
        // What earlier runs learnt of the models' windows, refreshed at each
        // start (another loop of the project may have learnt more).
        match Windows::read(&home) {
            Ok(w) => state.remembered_windows = w.windows(),
            Err(message) => bus.emit(Event::Warning { message }),
        }
        let counted_from =
            budget::CountedFrom::of(&state, opts.budget_per_invocation, jiff::Timestamp::now());
        let mut sup = Supervisor {
            root: root.to_path_buf(),
            home,
            layout: begun.layout,
            templates: begun.templates,
            reset_breaker: opts.reset_breaker,
            events: Publisher::new(bus, begun.hooks, root.join(&config.plan)),
            state,
            lock: begun.lock,
            signals: begun.signals,
            budgets: Budgets::new(&config, opts.deadline, Instant::now(), counted_from),
            flags: RunFlags::default(),
            held: Vec::new(),
            backoff: LimitBackoff::default(),
            reuse_snapshot: None,
            reuse_tree: None,
            written_by_checks: Vec::new(),
            _claim: begun.claim,
            replaced,
            waits_for_grants: opts.worker.is_some() || opts.granted,
            unit: opts.worker,
            sessions_started: 0,
            login_said: None,
            _repo: held,
            start: start_pass,
            config,
            trust: begun.trust,
            untrusted: Vec::new(),
        };
        sup.lock.info.run_id = sup.state.run_id.clone();
        sup.lock.set_agent(None)?;
        // A state that cannot be written now (a read-only or full `.ralph/`)
        // is an error before any agent starts; later failures are warnings,
        // so that a disk filling up overnight does not stop the work. A
        // replaced run's state stays on disk until its takeover is done.
        let state_path = sup.layout.state();
        sup.replaced
            .as_mut()
            .unwrap_or(&mut sup.state)
            .save(&state_path)?;
        sup.trust.save(&sup.layout.dir)?;
        if opts.trusted_by.is_some() {
            // What the worktree holds that its coordinator did not start
            // with (an agent's merged edit to ralph.toml), named now.
            sup.note_untrusted();
        }
        Ok(sup)
    }

    pub(super) fn save(&mut self) {
        let path = self.layout.state();
        if let Err(e) = self.state.save(&path) {
            self.events.warn(format!(
                "cannot save the run state: {e}; the run goes on degraded, .ralph/state.json keeps its last good version"
            ));
        }
    }

    /// What an iteration learnt of its models' windows, kept past the run
    /// (`.ralph/windows.json`); a memory that cannot be read is replaced, one
    /// that cannot be written is said, and the run goes on.
    pub(super) fn remember_windows(&mut self, facts: &Facts) {
        let Some(learned) = facts.meter.as_ref().map(|m| &m.learned_windows) else {
            return;
        };
        if learned.is_empty() {
            return;
        }
        let mut memory = Windows::read(&self.home).unwrap_or_default();
        if !memory.learn(learned, &now_rfc3339(), &self.state.run_id) {
            return;
        }
        if let Err(e) = memory.write(&self.home) {
            self.events.warn(format!(
                "cannot remember the models' context windows: {e}; the next run meters them by name until the agent reports them again"
            ));
        }
    }

    pub(super) fn emit_all(&mut self, events: Vec<Event>) {
        for e in events {
            self.publish(e, None);
        }
    }

    /// Publish `event` and run the hooks of its `[hooks]` point, if it has
    /// one, with `reason` as `RALPH_REASON` (`publish.rs`).
    pub(super) fn publish(&mut self, event: Event, reason: Option<String>) {
        if self.events.emit(event, &self.state, reason) {
            // A hook may have changed the tree.
            self.tree_touched();
        }
    }

    /// Something may have changed the work tree: the snapshot taken after
    /// the last iteration no longer tells where the next one starts, and
    /// the event under way walks the tree again (`repo::one_pass`).
    pub(super) fn tree_touched(&mut self) {
        self.head_moved();
        repo::touched(&self.root);
    }

    /// ralph committed: the snapshot taken after the last iteration names
    /// an older HEAD. The event's walk still names every changed path (a
    /// commit only makes paths clean).
    fn head_moved(&mut self) {
        self.reuse_snapshot = None;
        self.reuse_tree = None;
    }

    pub(super) fn plan(&self) -> Plan {
        Project::at(&self.root)
            .plan(&self.config)
            .unwrap_or_default()
    }

    /// The plan can be worked from: it reads (`Project::plan_text`'s policy:
    /// missing, binary, huge are errors), and holds more than whitespace
    /// unless it was blank when this run started (a plan the agent is to
    /// write). [`Supervisor::plan`] reads a plan that cannot be read as an
    /// empty one, which a session would be paid to find empty again.
    /// `Ok(blank)`: whether it is blank now.
    fn plan_to_work_from(&self, blank_at_start: Option<bool>) -> Result<bool> {
        let path = Project::at(&self.root).plan_path(&self.config);
        let since = match blank_at_start {
            None => "",
            Some(_) => {
                " (it was there when the run started: it was deleted, emptied or replaced since)"
            }
        };
        let text = Project::at(&self.root)
            .plan_text(&self.config)
            .map_err(|e| {
                crate::error::Error::usage(format!("{e}{since}")).with_hint(format!(
                    "put the plan back (`git checkout -- {}` if it is committed), then `ralph run`",
                    self.config.plan.display()
                ))
            })?;
        let blank = text.trim().is_empty();
        if blank && blank_at_start == Some(false) {
            return Err(crate::error::Error::usage(format!(
                "plan {} is empty{since}",
                path.display()
            ))
            .with_hint("write its items back (`- [ ] item`, one per task), then `ralph run`"));
        }
        Ok(blank)
    }

    /// Commits the iteration put out of every branch (its agent's `git
    /// reset --hard` past ralph's checkpoint commit, say), said with how
    /// to keep them: git would drop them silently in a few weeks.
    fn left_behind(&mut self, number: u32, before: Option<&repo::Snapshot>) {
        let Some(head) = before.and_then(|s| s.head.as_deref()) else {
            return;
        };
        let Ok(Some(repo)) = repo::Repo::open(&self.root) else {
            return;
        };
        let left = repo.commits_left_behind(head);
        if left.is_empty() {
            return;
        }
        let named: Vec<String> = left
            .iter()
            .map(|c| format!("{} {}", &c.id[..c.id.len().min(10)], c.summary))
            .collect();
        self.events.warn(format!(
            "iteration {number} left {} commit(s) on no branch (a `git reset` to an older commit during the session?): {}; `git branch ralph-iter-{number} {}` keeps them",
            left.len(),
            named.join(", "),
            &head[..head.len().min(10)]
        ));
    }

    /// A worker's HEAD put back on its branch after an agent moved it (a
    /// branch of its own, a detached HEAD, the run branch checked out), or
    /// detached where it is when that cannot be done: this loop's commits
    /// (checkpoints, completion) never land on another branch.
    fn worker_head_home(&mut self) {
        let Some(unit) = self.unit.as_ref().filter(|u| !u.branch.is_empty()) else {
            return;
        };
        let Ok(wt) = git2::Repository::discover(&self.root) else {
            return;
        };
        match crate::repo::worktree::home(&wt, &unit.branch) {
            Ok(crate::repo::worktree::Head::OnBranch) => {}
            Ok(crate::repo::worktree::Head::Moved(note)) => self.events.warn(note),
            Ok(crate::repo::worktree::Head::Apart(note)) => self.events.warn(format!(
                "{note}: HEAD is left detached there, no checkpoint commit is made; the coordinator merges it when this loop ends"
            )),
            Err(e) => self
                .events
                .warn(format!("cannot read HEAD of the worktree: {}", e.message())),
        }
    }

    /// The plan after an iteration. A worker's unit checked off in the
    /// project's plan in its worktree is checked off in the plan it was
    /// handed too (ralph's own file): one signal, whichever plan the agent
    /// wrote. The project's plan itself is the coordinator's to change.
    fn unit_checked_off(&self) -> Plan {
        let plan = self.plan();
        let Some(unit) = &self.unit else { return plan };
        let project_plan = std::fs::read_to_string(self.root.join(&unit.project_plan));
        let handed = self.root.join(&self.config.plan);
        let checked = project_plan
            .ok()
            .filter(|text| crate::plan::units::unit_done(text, &unit.item))
            .and_then(|_| std::fs::read_to_string(&handed).ok())
            .and_then(|text| crate::plan::units::check_off(&text, &unit.item));
        match checked {
            Some(text) => match crate::formats::write_atomic(&handed, text.as_bytes()) {
                Ok(()) => self.plan(),
                Err(e) => {
                    tracing::warn!("cannot check the unit off in {}: {e}", handed.display());
                    plan
                }
            },
            None => plan,
        }
    }

    pub(super) fn own(&self) -> OwnPaths {
        OwnPaths {
            prompt_file: self.config.prompt_file.clone(),
        }
    }

    /// The machine of iteration `number`: its limits and a fresh meter.
    pub(super) fn machine(&self, number: u32, now: &Now) -> IterationMachine {
        let limits = IterationLimits::new(
            &self.config,
            number,
            &self.root,
            &self.budgets,
            &self.state,
            jiff::tz::TimeZone::system(),
        );
        let meter = iteration::meter(&self.config, &self.state);
        IterationMachine::new(limits, meter, self.flags.signals, now)
    }

    /// Run iterations until a rule says stop.
    pub(crate) async fn run(mut self) -> Result<Outcome> {
        agent::become_subreaper();
        self.close_replaced();
        self.tidy_runs();
        let resumed = self.state.iteration > 0;
        let plan = self.plan();
        let limit = self.budgets.iteration_limit();
        let dead = record::start(&mut self.state, &self.config, &plan, limit);
        let ends = self.budgets.ends(&Now::read());
        self.events.emit(
            Event::RunStarted {
                run_id: self.state.run_id.clone(),
                resumed,
                first_iteration: self.state.iteration + 1,
                max_iterations: self.state.max_iterations,
                plan: self.config.plan.display().to_string(),
                pid: std::process::id(),
                deadline: ends.deadline.map(|t| t.to_string()),
                max_cost_usd: ends.max_cost_usd,
            },
            &self.state,
            None,
        );
        if let Some(why) =
            budget::unbindable_cost(self.config.agent.kind, self.config.loop_.max_cost_usd)
        {
            self.events.warn(why);
        }
        if let Some(why) = self.doomed_commits() {
            self.finish_as(RunStatus::Failed, 2, why.clone());
            return Err(crate::error::Error::config(why));
        }
        self.take_over(dead);
        // The night's work goes on the branch checked out now, whatever
        // HEAD does later in this checkout.
        if let Ok(Some(repo)) = repo::Repo::open(&self.root) {
            repo.commit_only_on_this_branch();
        }
        // After the takeover: the user's edits it committed before the run
        // are not the night's work.
        if self.state.start_commit.is_none() {
            self.state.start_commit = self.head();
        }
        if self.reset_breaker {
            self.state.breaker.reset(Now::read().wall.as_second());
            let reset = Event::Breaker {
                status: crate::rules::breaker::Status::Closed,
                rule: None,
                message: "reset by hand (--reset-breaker)".into(),
            };
            self.publish(reset, None);
        }
        // A usage-limit wait that a killed supervisor (or the run before
        // `--fresh`) recorded still holds: no session before its time.
        let recorded = crate::rules::limits::recorded(
            self.state.waiting_until.as_deref(),
            jiff::Timestamp::now(),
        );
        let waited = match recorded {
            Some(hit) => self.wait_for_limit(hit).await,
            None => None,
        };
        let ended = match waited {
            Some(end) => Ok(end),
            None => self.iterations().await,
        };
        let (outcome, reason) = match ended {
            Ok(end) => end,
            Err(e) => {
                // ralph's own failure (a template, the disk): the state and
                // the last event say so, with the code the process exits with.
                self.finish_as(RunStatus::Failed, e.exit_code(), format!("failed: {e}"));
                return Err(e);
            }
        };
        self.finish_as(outcome.status(), outcome.exit_code(), reason);
        Ok(outcome)
    }

    /// Say before the first session what would make every checkpoint's
    /// WIP commit fail all night (`Repo::commit_blockers`, the same list
    /// `ralph doctor` shows), not at the first checkpoint. A condition
    /// nothing in the run can cure (ralph cannot write to the repository)
    /// refuses the run: `Some` is the reason, with its fix.
    fn doomed_commits(&mut self) -> Option<String> {
        if !self.config.git.wip_commit {
            return None;
        }
        let blockers = match repo::Repo::open(&self.root) {
            Ok(Some(r)) => r.commit_blockers(),
            // The agent may `git init` a new project itself.
            _ => vec![repo::Blocker {
                what: "this project is not in a git repository".into(),
                fix:
                    "`git init && git add -A && git commit -m start`, or set git.wip_commit = false"
                        .into(),
                lasting: false,
            }],
        };
        let mut refused = Vec::new();
        for b in blockers {
            if b.lasting {
                refused.push(format!("{}; fix: {}", b.what, b.fix));
            } else {
                self.events.warn(format!(
                    "no checkpoint of this run can be committed: {}; fix: {}",
                    b.what, b.fix
                ));
            }
        }
        (!refused.is_empty()).then(|| {
            format!(
                "refused before any session: no checkpoint of this run could be committed: {}; or set git.wip_commit = false in ralph.toml to run without WIP commits",
                refused.join("; ")
            )
        })
    }

    /// The commit HEAD is at, if there is a repository with one.
    pub(super) fn head(&self) -> Option<String> {
        repo::Repo::open(&self.root).ok().flatten()?.head_id()
    }

    pub(super) fn finish_as(&mut self, status: RunStatus, exit_code: i32, mut reason: String) {
        self.commit_late();
        if let Some(shortfall) = self.state.commits.shortfall() {
            reason = format!("{reason}; {shortfall}");
        }
        self.note_untrusted();
        if !self.untrusted.is_empty() {
            reason = format!(
                "{reason}; changed during the run and not obeyed: {} (the next `ralph run` asks you to confirm them)",
                self.untrusted.join(", ")
            );
        }
        self.trust.end(&self.root);
        if let Err(e) = self.trust.save(&self.layout.dir) {
            self.events
                .warn(format!("cannot save the trust record: {e}"));
        }
        self.state.end_commit = self.head();
        self.state.ended_at = Some(jiff::Timestamp::now().to_string());
        self.state.status = status;
        self.state.exit_reason = Some(reason.clone());
        self.state.waiting_until = None;
        self.state.supervisor_pid = None;
        self.save();
        // The morning report (src/morning), for the user and the hooks.
        let report =
            crate::report::after_run(&self.layout, &self.config, &self.state, self.events.bus());
        let ended = record::ended(&self.state, exit_code, reason, report);
        self.publish(ended, None);
    }

    /// Files ralph acts on that changed since the start and were not
    /// reported yet: a `trust` event names them (they are not obeyed).
    pub(super) fn note_untrusted(&mut self) {
        let fresh: Vec<String> = self
            .trust
            .started
            .changed(&self.root)
            .into_iter()
            .filter(|p| !self.untrusted.contains(p))
            .collect();
        if fresh.is_empty() {
            return;
        }
        self.untrusted.extend(fresh.iter().cloned());
        let event = crate::formats::Event::Trust {
            action: crate::formats::TrustAction::Ignored,
            message: format!(
                "changed during the run: {}; not obeyed (the run keeps the configuration, templates and scripts it started with; a hook or check naming a changed script is not run)",
                fresh.join(", ")
            ),
            paths: fresh,
        };
        self.publish(event, None);
    }

    pub(super) async fn iterations(&mut self) -> Result<(Outcome, String)> {
        let first = self.state.iteration;
        let blank_at_start = self.plan_to_work_from(None)?;
        loop {
            if self.state.iteration > 0 {
                self.note_untrusted();
            }
            // A signal or `ralph stop` between two iterations must not
            // start another agent.
            while let Some(request) = match self.held.pop() {
                Some(r) => Some(r),
                None => self.signals.take(),
            } {
                if let Some(end) = self.on_request_between(request, "between iterations") {
                    return Ok(end);
                }
            }
            // A plan deleted or emptied (an editor, `> fix_plan.md`) leaves
            // nothing to work from: no session is paid for it.
            self.plan_to_work_from(Some(blank_at_start))?;
            // Nothing open: no session is paid for to find out (before the
            // budgets and the iteration limit: the night's work is done).
            let after = (self.state.iteration > first).then_some(self.state.iteration);
            if let Some(end) = self.finished_plan(after) {
                return Ok(end);
            }
            let now = Now::read();
            let admission = self
                .state
                .breaker
                .admit(&self.config.breaker, now.wall.as_second());
            let mut events = Vec::new();
            let gate = verdict::gate(
                admission,
                &self.state.breaker,
                &self.flags,
                self.budgets
                    .spent(&now, self.state.cost_usd, &self.state.quota),
                self.budgets.iterations_counted(self.state.iteration),
                self.config.loop_.max_iterations,
                &mut events,
            );
            self.emit_all(events);
            if let Next::End(outcome, why) = gate {
                return Ok((outcome, why));
            }
            // A worker's session is granted by its coordinator first.
            if let Some(end) = self.wait_for_grant().await {
                return Ok(end);
            }
            crate::project::ownership::keep_runtime(
                &self.layout,
                &mut self.lock,
                self.events.bus(),
            )?;
            let number = self.state.iteration + 1;
            self.state.iteration = number;
            // A `| tee ralph.log` that opened its file after ralph started.
            repo::remember_output_files();
            let plan_before = self.plan();
            // The boundary tree and the progress snapshot from one walk.
            let pass = repo::one_pass(&self.root);
            // Saved before the agent starts (`run_agent`).
            self.state.iteration_tree = match self.reuse_tree.take() {
                Some(tree) => Some(tree),
                None => self.work_tree(),
            };
            let snap_before = match self.reuse_snapshot.take() {
                Some(s) => Some(s),
                None => repo::snapshot(&self.root, &self.own()).ok(),
            };
            drop(pass);
            self.start = None;
            let facts = self.run_agent(number, &plan_before).await?;
            let end = self.after_agent(facts, &plan_before, snap_before).await;
            // What `benches/perf.rs` and `e2e_checkpoint` count.
            tracing::debug!(
                iteration = number,
                work_tree_passes = repo::work_tree_passes(),
                repositories_opened = repo::repositories_opened(),
                "bookkeeping"
            );
            if let Some(end) = end {
                return Ok(end);
            }
        }
    }

    /// One agent process, from its prompt to its last line.
    pub(super) async fn run_agent(&mut self, number: u32, plan: &Plan) -> Result<Facts> {
        let started_at = now_rfc3339();
        let seams = self.prepare_seams(number, plan);
        let prompt_text = prompt::render_prompt(
            &self.root,
            &self.templates,
            &self.config,
            &self.state,
            plan,
            number,
        )?;
        let prompt_path = self.root.join(&self.config.prompt_file);
        // Committed with the next checkpoint; it quotes the agent's last words,
        // and the plan, which is left as the user wrote it.
        let plan_text = (Project::at(&self.root).plan_text(&self.config)).unwrap_or_default();
        let saved_prompt = crate::text::secrets::scrub_keeping(&prompt_text, &plan_text);
        if let Err(e) =
            crate::project::ownership::write_prompt(&self.layout, &prompt_path, &saved_prompt)
        {
            self.events
                .warn(format!("cannot write {}: {e}", prompt_path.display()));
        }
        let cmd = AgentCommand::from_config(&self.config, number, &self.root);
        let run_dir = self.layout.run_dir(&self.state.run_id);
        let transcript = self.layout.transcript(&self.state.run_id, number);
        let resume_from = self
            .state
            .context_checkpoint
            .active
            .then(|| self.state.context_checkpoint.handoff_file.clone())
            .flatten();
        self.state.status = RunStatus::Running;
        self.save();
        self.events.emit(
            Event::IterationStarted {
                iteration: number,
                command: cmd.display(),
                transcript: rel(&self.root, &transcript),
                resume_from,
            },
            &self.state,
            None,
        );
        let spawned = crate::formats::create_dir_private(&run_dir)
            .and_then(|()| Agent::spawn(&cmd, &self.root, &transcript));
        let (mut agent, lines) = match spawned {
            Ok(x) => x,
            Err(e) => {
                self.state.context_window = iteration::meter(&self.config, &self.state).window();
                return Ok(Facts {
                    number,
                    started_at,
                    cannot_start: gone_or_not_executable(&e),
                    spawn_error: Some(e.render().trim_end().replace('\n', "; ")),
                    signals: self.flags.signals,
                    ..Facts::default()
                });
            }
        };
        let _ = self.lock.set_agent(Some(agent.pid));
        let exited = driver::watch_exit(&mut agent);
        // The prompt is the first user message; the resume block has now
        // been handed over. A kind that takes no message mid-session reads
        // its prompt up to the end of stdin.
        agent.send(&prompt_text).await;
        if !self.config.agent.kind.capabilities().message {
            agent.close_stdin();
        }
        if self.state.context_checkpoint.active {
            self.state.context_checkpoint.active = false;
            self.save();
        }
        let machine = self.machine(number, &Now::read()).with_seams(seams);
        let driver = Driver::new(
            self.safety_net(number),
            (&mut self.events, &self.state),
            &self.templates,
            &self.root,
            &mut self.signals,
            &mut self.lock,
        );
        let mut facts = driver.drive(machine, &mut agent, lines, exited).await;
        facts.started_at = started_at;
        let _ = self.lock.set_agent(None);
        record::meter(&mut self.state, &facts);
        self.remember_windows(&facts);
        Ok(facts)
    }

    /// Progress, checkpoint, state, rules. `Some` ends the run.
    pub(super) async fn after_agent(
        &mut self,
        mut facts: Facts,
        plan_before: &Plan,
        snap_before: Option<repo::Snapshot>,
    ) -> Option<(Outcome, String)> {
        // Progress, checkpoint, WIP commit, boundary tree and final commit
        // from one walk of the work tree (`repo::one_pass`).
        let _pass = repo::one_pass_to_commit(&self.root);
        self.worker_head_home();
        let plan_after = self.unit_checked_off();
        let snap_after = repo::snapshot(&self.root, &self.own()).ok();
        let tree_progress = match (&snap_before, &snap_after) {
            (Some(b), Some(a)) => repo::made_progress(&self.root, b, a),
            _ => false,
        };
        // The agent changed nothing: its work tree at its end is the one it
        // started from, no second tree to write (unless something touches
        // the tree before the iteration is recorded).
        let unchanged = snap_after.is_some() && snap_before == snap_after;
        self.left_behind(facts.number, snap_before.as_ref());
        self.reuse_snapshot = snap_after;
        let checked = plan_after.newly_done(plan_before);
        let measured = Measured {
            tree_progress,
            items_done: !checked.is_empty(),
        };
        self.flags.absorb(&facts);
        self.login_ending(&facts);
        let mut verdict = verdict::judge(&facts, &measured, &self.flags);
        let signs = fatal::Signs {
            agent: self.config.agent.kind.cli(),
            install_hint: self.config.agent.kind.install_hint(),
            cannot_start: facts.spawn_error.as_deref().filter(|_| facts.cannot_start),
            result: facts.result.as_ref(),
            exit_code: facts.exit_code,
        };
        if let Some(f) = fatal::classify(signs) {
            verdict::fatal(&mut verdict, f);
        }
        let mut gate = verdict::Gate {
            open_items: plan_after.open_count(),
            require_plan_complete: self.config.loop_.require_plan_complete,
            refused: None,
            untrusted: None,
            unit_done: self.unit.is_some() && plan_after.open_count() == 0,
        };
        self.verify_iteration(&facts, &mut verdict, &mut gate, checked);
        if let Some(mark) = verdict.checkpoint {
            self.continue_for_notes(&mut facts, mark).await;
            self.save_checkpoint(&facts, mark);
        } else if let Some(message) =
            crate::plan::decisions::record_from_plan(&self.root, &self.config.plan, facts.number)
        {
            self.events.warn(message);
        }
        // Not right after this iteration's own checkpoint commit: it took
        // the tree, or failed just now for the same reason.
        let late = if verdict.checkpoint.is_none() {
            self.commit_late()
        } else {
            None
        };
        let mut events = Vec::new();
        let trip = record::iteration(
            &mut self.state,
            &facts,
            &verdict,
            &plan_after,
            snap_before.as_ref().map(|s| s.changes_fingerprint.as_str()),
            &self.config.breaker,
            &Now::read(),
            &mut events,
        );
        if let (Some(id), Some(record)) = (late, self.state.history.last_mut()) {
            record.commit.get_or_insert(id);
        }
        self.after_seams(&facts);
        self.record_boundary(unchanged && self.reuse_snapshot.is_some());
        // Saved first: on_iteration_end hooks read the state of the
        // iteration that ended.
        self.save();
        self.emit_all(events);
        let mut events = Vec::new();
        let next = verdict::next(
            &facts,
            trip,
            &self.flags,
            self.budgets
                .spent(&Now::read(), self.state.cost_usd, &self.state.quota),
            gate,
            &mut events,
        );
        self.emit_all(events);
        match next {
            Next::Continue => {
                self.backoff.clear();
                // A WIP commit moved HEAD: the next iteration's start,
                // from this event's walk while it still holds.
                if self.reuse_snapshot.is_none() {
                    self.reuse_snapshot = repo::snapshot(&self.root, &self.own()).ok();
                }
                None
            }
            Next::WaitForLimit(hit) => self.wait_for_limit(hit).await,
            Next::End(Outcome::Completed, mut why) => {
                self.leave_clean(facts.number, &mut why);
                Some((Outcome::Completed, why))
            }
            Next::End(outcome, why) => Some((outcome, why)),
        }
    }

    pub(super) fn save_checkpoint(&mut self, facts: &Facts, mark: CheckpointMark) {
        self.head_moved();
        let reserve = self.config.agent.reserve_tokens;
        let mut moment = record::moment(&self.state, facts, mark, reserve);
        let kind = self.config.agent.kind;
        if moment.notes_path.is_none() && !kind.capabilities().message {
            moment.unasked = Some(if facts.continued {
                format!(
                    "{} takes no message mid-session; its session was continued once to ask for notes, and it wrote none: this handoff was written from the transcript and the work tree.",
                    kind.product()
                )
            } else {
                format!(
                    "{} takes no message mid-session, so none could be asked for: this handoff was written from the transcript and the work tree.",
                    kind.product()
                )
            });
        }
        // Recorded in the lock: should ralph die inside the commit, the next
        // run knows that git's lock files are its own (project::LockInfo).
        let _ = self.lock.set_committing(true);
        let saved = checkpoint::perform(&self.root, &self.config, &self.templates, &moment);
        let _ = self.lock.set_committing(false);
        for w in &saved.warnings {
            self.events.warn(w.clone());
        }
        record::checkpoint(&mut self.state, &moment, &saved, now_rfc3339());
        if let Some(Err(why)) = saved.commit_outcome() {
            self.events.warn(format!(
                "degraded: the work of iteration {}'s checkpoint is not committed ({why}); it stays in the work tree, and ralph commits it at each iteration's end until it can",
                facts.number
            ));
        }
        self.save();
        let done = Event::Checkpoint {
            iteration: facts.number,
            trigger: mark.trigger,
            level: mark.level,
            percent: crate::context::round1(moment.percent),
            tokens: moment.tokens,
            commit: saved.commit.clone(),
            commit_note: saved.commit_note.clone(),
            handoff: saved.handoff.clone(),
        };
        self.publish(done, Some(moment.reason.clone()));
    }

    /// A claude.ai login that may end before the run does (Claude Code's
    /// `credential_expires_at`): a warning, once per date reported.
    fn login_ending(&mut self, facts: &Facts) {
        let Some(expires) = facts.result.as_ref().and_then(|r| r.credential_expires_at) else {
            return;
        };
        if self.login_said == Some(expires) {
            return;
        }
        let now = Now::read();
        let ends = self.budgets.ends_at(&now);
        if let Some(message) = crate::rules::login::warning(expires, now.wall, ends) {
            self.login_said = Some(expires);
            self.events.warn(message);
        }
    }

    /// The WIP commit of the checkpoints whose own commit failed (a full
    /// disk with room again, a lock gone), retried: `Some` is the commit
    /// made. One that fails again stays pending, said when it first failed.
    pub(super) fn commit_late(&mut self) -> Option<String> {
        if self.state.commits.pending.is_empty() || !self.config.git.wip_commit {
            return None;
        }
        let why = self.state.commits.last_failure.clone().unwrap_or_default();
        let _ = self.lock.set_committing(true);
        let outcome = checkpoint::commit_late(
            &self.root,
            &self.config,
            &self.own(),
            &self.state.commits.pending,
            &why,
        );
        let _ = self.lock.set_committing(false);
        match outcome? {
            repo::CommitOutcome::Committed { id, .. } => {
                let iterations: Vec<String> = (self.state.commits.pending.iter())
                    .map(u32::to_string)
                    .collect();
                self.events.warn(format!(
                    "no longer degraded: the work of iteration {}'s checkpoint is committed now ({}), late: its WIP commit had failed ({why})",
                    iterations.join(", "),
                    &id[..id.len().min(10)]
                ));
                self.state.commits.retried(true);
                self.state.last_commit = Some(id.clone());
                Some(id)
            }
            repo::CommitOutcome::NothingToCommit => {
                self.state.commits.retried(false);
                None
            }
            repo::CommitOutcome::Skipped { .. } => None,
        }
    }

    /// A request that arrives while no agent runs. `Some` ends the run.
    pub(super) fn on_request_between(
        &mut self,
        request: Request,
        when: &str,
    ) -> Option<(Outcome, String)> {
        match request {
            Request::Interrupt => {
                self.flags.signals.bump();
                return Some((Outcome::Interrupted, format!("interrupted {when}")));
            }
            Request::Stop => return Some((Outcome::Stopped, format!("stopped on request {when}"))),
            Request::Hangup => self.events.bus().detach(),
            Request::Checkpoint(_) => {
                let facts = Facts {
                    number: self.state.iteration,
                    ..Facts::default()
                };
                // No agent runs: no reading of its context.
                let mark = CheckpointMark::at_peak(Trigger::Manual, None);
                self.save_checkpoint(&facts, mark);
            }
        }
        None
    }
}

/// The agent's program is missing or not executable: the spawn failed
/// for a reason no later attempt cures (not a shortage of pipes or memory).
fn gone_or_not_executable(e: &crate::error::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            );
        }
        source = err.source();
    }
    false
}

/// Parse `--deadline HH:MM`: the next such local time.
pub(crate) fn parse_deadline(text: &str) -> Result<jiff::Timestamp> {
    budget::parse_deadline(text, &jiff::Zoned::now())
}
