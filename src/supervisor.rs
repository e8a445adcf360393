//! The supervised loop (`ralph run`): one agent process per iteration,
//! its stream metered live, checkpoints at L2/L3, and the exit rules
//! between iterations. The only async part of ralph; everything it decides
//! it reports as [`Event`]s.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::oneshot;
use tokio::time::sleep_until;

use crate::agent::{self, Agent, AgentCommand};
use crate::breaker::{self, Admission};
use crate::checkpoint::{self, Moment};
use crate::completion;
use crate::config::{Config, format_duration};
use crate::context::{Change, ContextMeter, Level};
use crate::error::{Error, Result};
use crate::events::{Bus, Event, EventLog};
use crate::hooks;
use crate::limits::{self, LimitHit};
use crate::plan::Plan;
use crate::prompt::{self, Templates};
use crate::repo::{self, OwnPaths};
use crate::state::{
    ContextCheckpoint, HistoryEntry, IterationRecord, Layout, Lock, RunState, now_rfc3339,
};
use crate::stream::{ResultMessage, StreamEvent, ToolCall};

/// Between SIGINT and SIGTERM, and SIGTERM and SIGKILL.
const STOP_STEP: Duration = Duration::from_secs(5);
/// How often, during an iteration, the display is redrawn and the budgets
/// are checked.
const TICK: Duration = Duration::from_secs(1);
/// Added to a usage limit's reset time before going on.
const LIMIT_MARGIN: Duration = Duration::from_secs(5);
/// Wait when a limit gives no reset time (doubles each time, up to max_wait).
const LIMIT_FALLBACK: Duration = Duration::from_secs(15 * 60);
/// How long the lines an agent left in its pipe may take to read once it
/// exited (nothing writes to the pipe any more: this only bounds a stuck
/// reader).
const DRAIN_LIMIT: Duration = Duration::from_secs(30);
/// Tools whose path input is a file the agent changes.
const EDIT_TOOLS: [&str; 4] = ["Write", "Edit", "MultiEdit", "NotebookEdit"];

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub fresh: bool,
    pub reset_breaker: bool,
    /// Stop before this moment (`--deadline HH:MM`).
    pub deadline: Option<jiff::Timestamp>,
    /// Count the budgets from this invocation, not the run's start.
    pub budget_per_invocation: bool,
}

/// How a run ended; maps to the exit codes of DESIGN.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Completed,
    BreakerOpen,
    IterationLimit,
    BudgetSpent,
    Stopped,
    Interrupted,
}

impl Outcome {
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Completed => 0,
            Outcome::BreakerOpen => 3,
            Outcome::IterationLimit => 4,
            Outcome::BudgetSpent => 5,
            Outcome::Stopped => 6,
            Outcome::Interrupted => 130,
        }
    }

    pub fn status(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::BreakerOpen => "breaker_open",
            Outcome::IterationLimit => "iteration_limit",
            Outcome::BudgetSpent => "budget_spent",
            Outcome::Stopped => "stopped",
            Outcome::Interrupted => "interrupted",
        }
    }
}

/// Requests that reach the supervisor from outside.
#[derive(Debug, Clone, PartialEq)]
enum Request {
    Interrupt,
    Hangup,
    Checkpoint(String),
    Stop,
}

struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
    control: PathBuf,
}

impl Signals {
    fn install(layout: &Layout) -> Result<Signals> {
        let s = |k| signal(k).map_err(|e| Error::wrap("cannot install signal handlers", e));
        Ok(Signals {
            int: s(SignalKind::interrupt())?,
            term: s(SignalKind::terminate())?,
            hup: s(SignalKind::hangup())?,
            usr1: s(SignalKind::user_defined1())?,
            usr2: s(SignalKind::user_defined2())?,
            control: layout.control(),
        })
    }

    async fn next(&mut self) -> Request {
        tokio::select! {
            _ = self.int.recv() => Request::Interrupt,
            _ = self.term.recv() => Request::Interrupt,
            _ = self.hup.recv() => Request::Hangup,
            _ = self.usr1.recv() => {
                let reason = std::fs::read(&self.control)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                    .and_then(|v| v.get("reason").and_then(|r| r.as_str()).map(str::to_string))
                    .unwrap_or_else(|| "manual".into());
                let _ = std::fs::remove_file(&self.control);
                Request::Checkpoint(reason)
            }
            _ = self.usr2.recv() => Request::Stop,
        }
    }
}

/// Everything one run needs, shared by its iterations.
pub struct Supervisor {
    root: PathBuf,
    layout: Layout,
    config: Config,
    templates: Templates,
    opts: RunOptions,
    bus: Bus,
    state: RunState,
    lock: Lock,
    signals: Signals,
    /// Iterations, time and cost allowed (per run, or per invocation).
    budgets: crate::budgets::Budgets,
    interrupts: u32,
    stop_requested: bool,
    limit_backoff: Duration,
    /// The previous iteration ended on a usage limit too.
    limited_before: bool,
    /// The snapshot taken after the last iteration while nothing has touched
    /// the tree since (no WIP commit, hook or wait): the next iteration
    /// starts from it instead of a second full status of the repository.
    reuse_snapshot: Option<repo::Snapshot>,
}

/// Facts gathered while one agent process ran.
#[derive(Debug, Default)]
struct Iteration {
    number: u32,
    result: Option<ResultMessage>,
    cost_usd: f64,
    checkpoint: Option<(String, Level, f64)>,
    stop_reason: Option<String>,
    notes_path: Option<PathBuf>,
    limit: Option<LimitHit>,
    timed_out: Option<String>,
    exit_code: Option<i32>,
    exit_signal: Option<i32>,
    spawn_error: Option<String>,
    invalid_lines: u64,
    skipped_lines: u64,
    last_text: Option<String>,
    /// What the agent last said before the checkpoint began (afterwards it
    /// talks about its handoff, not its work).
    text_at_checkpoint: Option<String>,
    tool_calls: Vec<ToolCall>,
    files_touched: Vec<String>,
    permission_denials: Vec<String>,
    promise: bool,
    stderr_tail: String,
    seconds: f64,
}

/// The stop sequence: where it stands and when the next step is due.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stop {
    Running,
    /// Asked for a handoff (or waiting for a clean exit) until the deadline.
    Asked(Instant),
    Interrupted(Instant),
    Terminated(Instant),
    Killed,
}

impl Supervisor {
    pub fn new(root: &Path, config: Config, opts: RunOptions, mut bus: Bus) -> Result<Supervisor> {
        let layout = Layout::new(root);
        crate::secrets::remember(&config.agent.env);
        let templates = Templates::load(root)?;
        // Bad input is exit 2 before anything starts (issue 13).
        templates.check(&[prompt::PROMPT, prompt::CHECKPOINT_REQUEST])?;
        agent::check_program(&config, root)?;
        let plan = Plan::load(&root.join(&config.plan))?;
        let state_path = layout.state();
        let previous = match RunState::load(&state_path) {
            Ok(s) => s,
            Err(e) if opts.fresh => {
                let _ = std::fs::rename(&state_path, state_path.with_extension("json.bad"));
                tracing::warn!("unreadable state replaced: {e}");
                None
            }
            Err(e) => return Err(e),
        }
        .filter(|s| !opts.fresh && !s.is_finished());
        // The first prompt, rendered now: an undefined variable in the
        // user's template is bad input (exit 2) before anything is started,
        // counted or written.
        let first = previous.as_ref().map_or(1, |s| s.iteration + 1);
        prompt::render_prompt(
            &templates,
            &config,
            previous.as_ref().unwrap_or(&RunState::default()),
            &plan,
            first,
        )?;
        layout.ensure()?;
        let signals = Signals::install(&layout)?;
        let run_id = jiff::Zoned::now().strftime("%Y%m%d-%H%M%S").to_string();
        let lock = Lock::acquire(&layout, &run_id)?;
        crate::state::remove_dead_temp_files(&layout.dir);
        // Only the lock holder writes the log: a refused second instance must not.
        bus.add(Box::new(EventLog::open(&layout.events())?));
        if let Some(pgid) = lock.stale_agent_pgid {
            // The previous supervisor died; its agent (killed by its
            // parent-death signal) and the tools it started must not live on.
            tracing::warn!(
                "the previous supervisor died; ending what is left of its agent (session {pgid})"
            );
            agent::kill_session(pgid);
        }
        // The tools it started in sessions of their own, as it recorded them.
        lock.stale_sessions
            .iter()
            .for_each(crate::procs::kill_recorded_session);
        if lock.stale_committing {
            // It died inside a WIP commit: the git lock files it held would
            // skip every checkpoint from now on ("another git process is
            // running"). They are its own, not another git's.
            let removed = repo::remove_stale_commit_locks(root);
            if !removed.is_empty() {
                bus.emit(Event::Warning {
                    message: format!(
                        "the previous supervisor died during a WIP commit; removed the git lock files it left: {}",
                        removed.join(", ")
                    ),
                });
            }
        }
        let state = previous.unwrap_or_else(|| RunState {
            run_id: run_id.clone(),
            started_at: now_rfc3339(),
            ..RunState::default()
        });
        let runs = layout.dir.join("runs");
        for message in crate::transcript::tidy(&runs, &state.run_id, &config.runs) {
            bus.emit(Event::Warning { message });
        }
        let budgets =
            crate::budgets::Budgets::new(&config.loop_, &state, opts.budget_per_invocation);
        let mut sup = Supervisor {
            root: root.to_path_buf(),
            layout,
            templates,
            opts,
            bus,
            state,
            lock,
            signals,
            budgets,
            interrupts: 0,
            stop_requested: false,
            limit_backoff: LIMIT_FALLBACK,
            limited_before: false,
            reuse_snapshot: None,
            config,
        };
        sup.lock.info.run_id = sup.state.run_id.clone();
        sup.lock.set_agent(None)?;
        // A state that cannot be written now (a read-only or full `.ralph/`)
        // is an error before any agent starts; later failures are warnings,
        // so that a disk filling up overnight does not stop the work.
        let state_path = sup.layout.state();
        sup.state.save(&state_path)?;
        Ok(sup)
    }

    fn save(&mut self) {
        let path = self.layout.state();
        if let Err(e) = self.state.save(&path) {
            self.bus.emit(Event::Warning {
                message: format!("cannot save the run state: {e}"),
            });
        }
    }

    fn plan(&self) -> Plan {
        Plan::load(&self.root.join(&self.config.plan)).unwrap_or_default()
    }

    fn own(&self) -> OwnPaths {
        OwnPaths {
            prompt_file: self.config.prompt_file.clone(),
        }
    }

    /// Run iterations until a rule says stop.
    pub async fn run(mut self) -> Result<Outcome> {
        agent::become_subreaper();
        let resumed = self.state.iteration > 0;
        let plan = self.plan();
        self.state.status = "running".into();
        self.state.exit_reason = None;
        self.state.supervisor_pid = Some(std::process::id());
        self.state.max_iterations = self.budgets.iteration_limit();
        self.state.completion_promise = self.config.loop_.completion_promise.clone();
        self.state.task_name = self
            .config
            .plan
            .file_stem()
            .map_or("plan".into(), |s| s.to_string_lossy().into_owned());
        self.state.objective = plan
            .title
            .clone()
            .unwrap_or_else(|| format!("work through {}", self.config.plan.display()));
        self.bus.emit(Event::RunStarted {
            run_id: self.state.run_id.clone(),
            resumed,
            first_iteration: self.state.iteration + 1,
            max_iterations: self.budgets.iteration_limit(),
            plan: self.config.plan.display().to_string(),
            pid: std::process::id(),
        });
        if self.opts.reset_breaker {
            self.state.breaker.reset(now_secs());
            self.bus.emit(Event::Breaker {
                status: "closed".into(),
                rule: None,
                message: "reset by hand (--reset-breaker)".into(),
            });
        }
        let (outcome, reason) = match self.iterations().await {
            Ok(end) => end,
            Err(e) => {
                // ralph's own failure (a template, the disk): the state and
                // the last event say so, with the code the process exits with.
                self.finish_as("failed", e.exit_code(), format!("failed: {e}"));
                return Err(e);
            }
        };
        self.finish_as(outcome.status(), outcome.exit_code(), reason);
        Ok(outcome)
    }

    fn finish_as(&mut self, status: &str, exit_code: i32, reason: String) {
        self.state.status = status.into();
        self.state.exit_reason = Some(reason.clone());
        self.state.waiting_until = None;
        self.state.supervisor_pid = None;
        let path = self.layout.state();
        if let Err(e) = self.state.save_final(&path) {
            self.bus.emit(Event::Warning {
                message: format!("cannot save the final run state: {e}"),
            });
        }
        self.run_hooks(
            "on_exit",
            &self.config.hooks.on_exit.clone(),
            vec![
                ("RALPH_OUTCOME", status.to_string()),
                ("RALPH_EXIT_CODE", exit_code.to_string()),
            ],
        );
        self.bus.emit(Event::RunEnded {
            outcome: status.into(),
            exit_code,
            reason,
            iterations: self.state.iteration,
            cost_usd: self.state.cost_usd,
        });
    }

    /// A budget that is spent: cost, duration, deadline.
    fn budget_spent(&self, extra_cost: f64) -> Option<String> {
        self.budgets
            .cost_spent(self.state.cost_usd + extra_cost)
            .or_else(|| self.time_spent_within(Duration::ZERO))
    }

    /// The time budget (max_duration, deadline) that is reached `within`
    /// from now.
    fn time_spent_within(&self, within: Duration) -> Option<String> {
        if let Some(why) = self.budgets.duration_spent_within(within) {
            return Some(why);
        }
        let then = jiff::SignedDuration::try_from(within)
            .ok()
            .and_then(|d| jiff::Timestamp::now().checked_add(d).ok());
        if let Some(deadline) = self.opts.deadline
            && then.is_none_or(|t| t >= deadline)
        {
            return Some(format!("deadline {deadline} reached"));
        }
        None
    }

    async fn iterations(&mut self) -> Result<(Outcome, String)> {
        loop {
            // A signal or `ralph stop` between two iterations must not
            // start another agent.
            while let Some(request) = self.pending_request().await {
                if let Some(end) = self.on_request_between(request, "between iterations") {
                    return Ok(end);
                }
            }
            match self.state.breaker.admit(&self.config.breaker, now_secs()) {
                Admission::Go => {}
                Admission::Trial => self.bus.emit(Event::Breaker {
                    status: "half-open".into(),
                    rule: self.state.breaker.rule.clone(),
                    message: "cooldown over: one trial iteration".into(),
                }),
                Admission::Wait(left) => {
                    let msg = format!(
                        "circuit breaker is open ({}): {}; the cooldown ends in {}. Fix the cause and run `ralph run --reset-breaker` to go on now",
                        self.state.breaker.rule.as_deref().unwrap_or("?"),
                        self.state.breaker.message.as_deref().unwrap_or(""),
                        format_duration(left)
                    );
                    return Ok((Outcome::BreakerOpen, msg));
                }
            }
            if self.stop_requested {
                return Ok((Outcome::Stopped, "stopped on request (ralph stop)".into()));
            }
            if let Some(why) = self.budget_spent(0.0) {
                return Ok((Outcome::BudgetSpent, why));
            }
            if let Some(why) = self.budgets.iterations_spent(self.state.iteration) {
                return Ok((Outcome::IterationLimit, why));
            }
            let number = self.state.iteration + 1;
            self.state.iteration = number;
            let plan_before = self.plan();
            let snap_before = match self.reuse_snapshot.take() {
                Some(s) => Some(s),
                None => repo::snapshot(&self.root, &self.own()).ok(),
            };
            let iteration = self.run_iteration(number, &plan_before).await?;
            if let Some(end) = self
                .after_iteration(iteration, &plan_before, snap_before)
                .await
            {
                return Ok(end);
            }
        }
    }

    async fn run_iteration(&mut self, number: u32, plan: &Plan) -> Result<Iteration> {
        let mut it = Iteration {
            number,
            ..Iteration::default()
        };
        let prompt_text =
            prompt::render_prompt(&self.templates, &self.config, &self.state, plan, number)?;
        let prompt_path = self.root.join(&self.config.prompt_file);
        // Committed with the next checkpoint; it quotes the agent's last words.
        let saved_prompt = crate::secrets::scrub(&prompt_text);
        if let Err(e) = std::fs::write(&prompt_path, saved_prompt.as_bytes()) {
            self.bus.emit(Event::Warning {
                message: format!("cannot write {}: {e}", prompt_path.display()),
            });
        }
        let cmd = AgentCommand::from_config(&self.config, number);
        let run_dir = self.layout.run_dir(&self.state.run_id);
        let transcript = self.layout.transcript(&self.state.run_id, number);
        let resume_from = self
            .state
            .context_checkpoint
            .active
            .then(|| self.state.context_checkpoint.handoff_file.clone())
            .flatten();
        self.state.status = "running".into();
        self.save();
        self.bus.emit(Event::IterationStarted {
            iteration: number,
            command: cmd.display(),
            transcript: rel(&self.root, &transcript),
            resume_from,
        });
        let mut meter = ContextMeter::new(
            self.config.agent.context_window,
            self.config.agent.reserve_tokens,
            self.config.thresholds(),
        )
        .with_known_windows(&self.state.known_windows);
        if let Some(m) = &self.config.agent.model {
            meter.set_model(m);
        }
        let spawned = crate::state::create_dir_private(&run_dir)
            .and_then(|()| Agent::spawn(&cmd, &self.root, &transcript));
        let (mut agent, mut lines) = match spawned {
            Ok(x) => x,
            Err(e) => {
                it.spawn_error = Some(e.render().trim_end().replace('\n', "; "));
                self.state.context_window = meter.window();
                return Ok(it);
            }
        };
        let _ = self.lock.set_agent(Some(agent.pid));
        let (exit_tx, mut exited) = oneshot::channel();
        let child = agent.take_child();
        tokio::spawn(async move {
            let mut child = child;
            let _ = exit_tx.send(child.wait().await);
        });
        // The prompt is the first user message; the resume block has now
        // been handed over.
        agent.send(&prompt_text).await;
        if self.state.context_checkpoint.active {
            self.state.context_checkpoint.active = false;
            self.save();
        }

        let started = Instant::now();
        let mut last_line = Instant::now();
        let mut stop = Stop::Running;
        let mut lines_open = true;
        // A fixed beat, not "a second after the last line": an agent that
        // talks more often than once a second must not starve the budget
        // checks.
        let mut next_tick = Instant::now() + TICK;
        let status = loop {
            let mut wake = next_tick;
            let iter_deadline = started + self.config.loop_.iteration_timeout.0;
            let idle_deadline = last_line + self.config.loop_.idle_timeout.0;
            if stop == Stop::Running {
                wake = wake.min(iter_deadline).min(idle_deadline);
            }
            if let Stop::Asked(t) | Stop::Interrupted(t) | Stop::Terminated(t) = stop {
                wake = wake.min(t);
            }
            tokio::select! {
                biased;
                status = &mut exited => break status.ok().and_then(|s| s.ok()),
                line = lines.recv(), if lines_open => match line {
                    Some((event, at)) => {
                        last_line = at;
                        self.on_line(&mut it, &mut meter, &mut Some(&mut agent), &mut stop, event, started).await;
                    }
                    None => lines_open = false,
                },
                request = self.signals.next() => {
                    self.on_request(&mut it, &meter, &mut agent, &mut stop, request).await;
                }
                _ = sleep_until(wake.into()) => {
                    let now = Instant::now();
                    if now >= next_tick {
                        self.bus.tick();
                        next_tick = now + TICK;
                        let _ = self.lock.add_sessions(crate::procs::descendant_sessions());
                    }
                    match stop {
                        Stop::Running => {
                            let why = if now >= iter_deadline {
                                Some(format!("iteration timeout ({}) reached", format_duration(self.config.loop_.iteration_timeout.0)))
                            } else if now >= idle_deadline {
                                Some(format!("no output for {} (loop.idle_timeout)", format_duration(self.config.loop_.idle_timeout.0)))
                            } else {
                                self.budget_spent(it.cost_usd)
                                    .map(|b| b + ": finishing the iteration")
                            };
                            if let Some(why) = why {
                                let trigger = if why.contains("budget") || why.contains("deadline") || why.contains("max_duration") { "budget" } else {
                                    it.timed_out = Some(why.clone());
                                    "timeout"
                                };
                                let handoff = self.config.context.agent_handoff;
                                self.begin_checkpoint(&mut it, &meter, &mut agent, &mut stop, trigger, &why, handoff).await;
                            }
                        }
                        Stop::Asked(t) if now >= t => self.escalate(&mut agent, &mut stop, number, "grace period over"),
                        Stop::Interrupted(t) | Stop::Terminated(t) if now >= t => self.escalate(&mut agent, &mut stop, number, "the agent did not exit"),
                        _ => {}
                    }
                }
            }
        };
        it.seconds = started.elapsed().as_secs_f64();
        it.exit_code = status.and_then(|s| s.code());
        it.exit_signal = status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s));
        self.bus.emit(Event::AgentExited {
            iteration: number,
            code: it.exit_code,
            signal: it.exit_signal,
            seconds: it.seconds,
        });
        // Whatever the agent left behind ends with the iteration; then the
        // readers reach EOF and every line it wrote can be read: all of
        // them, up to the channel's end (an agent that printed thousands of
        // lines and exited at once has most of them still in the pipe).
        agent.end_leftovers();
        let drained = tokio::time::Instant::now() + DRAIN_LIMIT;
        while let Ok(Some((event, _))) = tokio::time::timeout_at(drained, lines.recv()).await {
            self.on_line(&mut it, &mut meter, &mut None, &mut stop, event, started)
                .await;
        }
        agent.join_readers();
        // Read once the stderr reader has seen the end, not before: the
        // agent's last words on stderr explain why it failed.
        it.stderr_tail = agent.stderr_tail();
        for message in agent.transcript_notes() {
            self.bus.emit(Event::Warning { message });
        }
        let _ = self.lock.set_agent(None);
        self.state.context_window = meter.window();
        self.state.known_windows.clone_from(meter.known_windows());
        self.finish_meter(&mut it, &meter);
        Ok(it)
    }

    fn finish_meter(&mut self, it: &mut Iteration, meter: &ContextMeter) {
        self.state.context_history.push(HistoryEntry {
            iteration: it.number,
            peak_percent: crate::context::round1(meter.peak_percent()),
            checkpoint: it.checkpoint.is_some(),
            level: it
                .checkpoint
                .as_ref()
                .map(|c| c.1)
                .or(Some(meter.peak_level())),
            handoff: None,
            peak_tokens: meter.peak_tokens(),
        });
        if it.checkpoint.is_none() && meter.peak_level() >= Level::L2 {
            // The level was crossed in the very last lines (or after the
            // agent had already exited): still save the work.
            it.checkpoint = Some(("context".into(), meter.peak_level(), meter.peak_percent()));
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn on_line(
        &mut self,
        it: &mut Iteration,
        meter: &mut ContextMeter,
        agent: &mut Option<&mut Agent>,
        stop: &mut Stop,
        event: StreamEvent,
        started: Instant,
    ) {
        let before = meter.tokens();
        let change = meter.observe(&event, started.elapsed());
        let mut tool_label = None;
        match &event {
            StreamEvent::Assistant(m) if m.is_main_thread() => {
                if let Some(hit) = limits::from_assistant(m, &jiff::Zoned::now()) {
                    it.limit.get_or_insert(hit);
                }
                if !m.is_synthetic() {
                    if !m.text.is_empty() {
                        it.last_text = Some(m.text.join("\n"));
                    }
                    for call in &m.tool_calls {
                        let mut call = call.clone();
                        call.path = call.path.map(|p| rel(&self.root, Path::new(&p)));
                        if EDIT_TOOLS.contains(&call.name.as_str())
                            && let Some(p) = &call.path
                        {
                            it.files_touched.retain(|f| f != p);
                            it.files_touched.push(p.clone());
                        }
                        tool_label = Some(match (&call.path, &call.summary) {
                            (Some(p), _) => format!("{} {p}", call.name),
                            (None, Some(s)) => format!("{} {}", call.name, first_line(s)),
                            _ => call.name.clone(),
                        });
                        it.tool_calls.push(call);
                        if it.tool_calls.len() > 50 {
                            it.tool_calls.remove(0);
                        }
                    }
                }
            }
            StreamEvent::RateLimit {
                status, resets_at, ..
            } => {
                if let Some(hit) = limits::from_event(status, *resets_at) {
                    it.limit.get_or_insert(hit);
                }
            }
            StreamEvent::ApiRetry {
                attempt,
                max_retries,
                error_status,
                error,
            } => self.bus.emit(Event::ApiRetry {
                iteration: it.number,
                attempt: *attempt,
                max_retries: *max_retries,
                error_status: *error_status,
                error: error.clone(),
            }),
            StreamEvent::Result(r) => {
                it.cost_usd = it.cost_usd.max(r.total_cost_usd);
                for d in &r.permission_denials {
                    if !it.permission_denials.contains(d) {
                        it.permission_denials.push(d.clone());
                    }
                }
                match limits::from_result(r, &jiff::Zoned::now()) {
                    Some(hit) => {
                        it.limit.get_or_insert(hit);
                    }
                    // The turn ended well after all: the session got past a
                    // rejected rate_limit_event (extra usage, a fallback
                    // model), so the limit did not stop the work.
                    None if !r.is_error => it.limit = None,
                    None => {}
                }
                if r.text.as_deref().is_some_and(|t| {
                    completion::promise_in(t, &self.config.loop_.completion_promise)
                }) {
                    it.promise = true;
                }
                it.result = Some(r.clone());
                // The turn is over: with stdin closed the CLI exits now.
                if let Some(a) = agent.as_mut() {
                    a.close_stdin();
                }
                if *stop == Stop::Running
                    && let Some(why) = self.budget_spent(it.cost_usd)
                {
                    it.stop_reason = Some(why);
                }
            }
            StreamEvent::Invalid { reason } => {
                it.invalid_lines += 1;
                if it.invalid_lines <= 3 {
                    self.bus.emit(Event::Warning {
                        message: format!(
                            "iteration {}: undecodable agent output: {reason}",
                            it.number
                        ),
                    });
                }
            }
            StreamEvent::Other { .. } => it.skipped_lines += 1,
            _ => {}
        }
        match change {
            Some(Change::Level { from, to }) => {
                self.bus.emit(Event::LevelChanged {
                    iteration: it.number,
                    from,
                    to,
                    percent: crate::context::round1(meter.percent()),
                    tokens: meter.tokens(),
                });
                if let Some(a) = agent.as_mut() {
                    if to >= Level::L2 && it.checkpoint.is_none() {
                        let why = format!(
                            "context reached {to} at {:.1}% of the usable window",
                            meter.percent()
                        );
                        let handoff = self.config.context.agent_handoff && to == Level::L2;
                        self.begin_checkpoint(it, meter, a, stop, "context", &why, handoff)
                            .await;
                    } else if to == Level::L3 && matches!(stop, Stop::Asked(_)) {
                        if let Some(cp) = it.checkpoint.as_mut() {
                            cp.1 = Level::L3;
                        }
                        self.escalate(
                            a,
                            stop,
                            it.number,
                            "context reached L3 during the grace period",
                        );
                    }
                }
            }
            Some(Change::Compacted(c)) => self.bus.emit(Event::Compacted {
                iteration: it.number,
                pre_tokens: c.pre_tokens,
                post_tokens: c.post_tokens,
            }),
            None => {}
        }
        if meter.tokens() != before || tool_label.is_some() {
            self.bus.emit(Event::Context {
                iteration: it.number,
                reading: meter.snapshot(),
                tool: tool_label,
            });
        }
    }

    async fn on_request(
        &mut self,
        it: &mut Iteration,
        meter: &ContextMeter,
        agent: &mut Agent,
        stop: &mut Stop,
        request: Request,
    ) {
        match request {
            Request::Hangup => self.bus.detach(),
            Request::Interrupt => {
                self.interrupts += 1;
                if self.interrupts == 1 && it.checkpoint.is_some() {
                    // Already checkpointing: skip the rest of the grace period.
                    if matches!(stop, Stop::Asked(_)) {
                        self.escalate(
                            agent,
                            stop,
                            it.number,
                            "interrupted during the grace period",
                        );
                    }
                } else if self.interrupts == 1 {
                    self.begin_checkpoint(
                        it,
                        meter,
                        agent,
                        stop,
                        "signal",
                        "interrupted (SIGINT/SIGTERM)",
                        false,
                    )
                    .await;
                } else {
                    agent.signal(Signal::SIGKILL);
                    *stop = Stop::Killed;
                    self.bus.emit(Event::AgentSignalled {
                        iteration: it.number,
                        signal: "SIGKILL".into(),
                        reason: "second interrupt".into(),
                    });
                }
            }
            Request::Checkpoint(reason) => {
                let why = format!("checkpoint requested by hand ({reason})");
                let handoff = self.config.context.agent_handoff;
                self.begin_checkpoint(it, meter, agent, stop, "manual", &why, handoff)
                    .await;
            }
            Request::Stop => {
                self.stop_requested = true;
                let handoff = self.config.context.agent_handoff;
                self.begin_checkpoint(
                    it,
                    meter,
                    agent,
                    stop,
                    "stop",
                    "stop requested (ralph stop)",
                    handoff,
                )
                .await;
            }
        }
    }

    /// The L2 sequence: ask for handoff notes (if wanted and possible),
    /// close stdin, and give the agent `grace` before escalating.
    #[allow(clippy::too_many_arguments)]
    async fn begin_checkpoint(
        &mut self,
        it: &mut Iteration,
        meter: &ContextMeter,
        agent: &mut Agent,
        stop: &mut Stop,
        trigger: &str,
        why: &str,
        handoff: bool,
    ) {
        if it.checkpoint.is_some() {
            return;
        }
        it.checkpoint = Some((
            trigger.to_string(),
            meter.level().max(Level::L2),
            meter.percent(),
        ));
        it.stop_reason = Some(why.to_string());
        it.text_at_checkpoint.clone_from(&it.last_text);
        let mut notes = None;
        if handoff && agent.stdin_open() {
            let path = checkpoint::notes_path(it.number);
            let _ = crate::state::create_dir_private(
                &self.root.join(path.parent().unwrap_or(Path::new("."))),
            );
            let text = self.templates.render(
                prompt::CHECKPOINT_REQUEST,
                minijinja::context! {
                    percent => crate::context::round1(meter.percent()),
                    level => meter.level().name(),
                    tokens => meter.tokens(),
                    usable => meter.usable(),
                    notes_path => path.display().to_string(),
                    grace => format_duration(self.config.context.grace.0),
                    trigger => trigger,
                    reason => why,
                },
            );
            match text {
                Ok(text) if agent.send(&text).await => notes = Some(path),
                Ok(_) => {}
                Err(e) => self.bus.emit(Event::Warning {
                    message: format!("cannot render the checkpoint request: {e}"),
                }),
            }
        }
        let had_result = it.result.is_some();
        agent.close_stdin();
        self.bus.emit(Event::CheckpointRequested {
            iteration: it.number,
            trigger: trigger.to_string(),
            level: meter.level().max(Level::L2),
            percent: crate::context::round1(meter.percent()),
            notes_path: notes.as_ref().map(|p| p.display().to_string()),
        });
        it.notes_path = notes.clone();
        if notes.is_some() || had_result {
            *stop = Stop::Asked(Instant::now() + self.config.context.grace.0);
        } else {
            *stop = Stop::Asked(Instant::now());
            self.escalate(agent, stop, it.number, why);
        }
    }

    /// One step further along SIGINT → SIGTERM → SIGKILL.
    fn escalate(&mut self, agent: &mut Agent, stop: &mut Stop, iteration: u32, reason: &str) {
        let now = Instant::now();
        let (sig, next) = match *stop {
            Stop::Running | Stop::Asked(_) => (Signal::SIGINT, Stop::Interrupted(now + STOP_STEP)),
            Stop::Interrupted(_) => (Signal::SIGTERM, Stop::Terminated(now + STOP_STEP)),
            Stop::Terminated(_) | Stop::Killed => (Signal::SIGKILL, Stop::Killed),
        };
        agent.signal(sig);
        *stop = next;
        self.bus.emit(Event::AgentSignalled {
            iteration,
            signal: format!("{sig:?}"),
            reason: reason.to_string(),
        });
    }

    /// Progress, checkpoint, state, rules. `Some` ends the run.
    async fn after_iteration(
        &mut self,
        mut it: Iteration,
        plan_before: &Plan,
        snap_before: Option<repo::Snapshot>,
    ) -> Option<(Outcome, String)> {
        let plan_after = self.plan();
        let newly_done = plan_after.newly_done(plan_before);
        let snap_after = repo::snapshot(&self.root, &self.own()).ok();
        let tree_progress = match (&snap_before, &snap_after) {
            (Some(b), Some(a)) => repo::made_progress(&self.root, b, a),
            _ => false,
        };
        self.reuse_snapshot = snap_after;
        let progress = tree_progress || !newly_done.is_empty();
        let we_stopped = it.checkpoint.is_some();
        // A timeout whose iteration made progress is not a failure.
        let error = self
            .failure_of(&it, we_stopped)
            .filter(|_| !(it.timed_out.is_some() && progress));
        let rate_limited = it.limit.is_some();

        // A usage limit with work in the tree: save it before waiting.
        if rate_limited && it.checkpoint.is_none() && tree_progress {
            it.checkpoint = Some(("rate_limit".into(), Level::L2, 0.0));
        }
        if let Some((trigger, level, percent)) = it.checkpoint.clone() {
            self.save_checkpoint(&it, &trigger, level, percent);
        }

        let outcome_label = if let Some(e) = &it.spawn_error {
            format!("agent did not start: {e}")
        } else if rate_limited {
            "usage limit".into()
        } else if let Some((t, l, _)) = &it.checkpoint {
            format!("checkpoint ({t}, {l})")
        } else if error.is_some() {
            "failed".into()
        } else if it.promise {
            "promise".into()
        } else {
            "done".into()
        };
        self.state.cost_usd += it.cost_usd;
        self.state.todo_items = plan_after.open().map(|i| i.text.clone()).collect();
        self.state.completed_items = plan_after.done().map(|i| i.text.clone()).collect();
        let breaker_outcome = breaker::Outcome {
            progress,
            failed: error.is_some(),
            error: error.clone(),
            permission_denials: it.permission_denials.clone(),
            rate_limited,
            cut_short: self.interrupts > 0
                || self.stop_requested
                || it.checkpoint.as_ref().is_some_and(|c| c.0 == "budget"),
        };
        let was = self.state.breaker.status;
        let trip = self
            .state
            .breaker
            .record(&breaker_outcome, &self.config.breaker, now_secs());
        if was == breaker::Status::HalfOpen && self.state.breaker.status == breaker::Status::Closed
        {
            self.bus.emit(Event::Breaker {
                status: "closed".into(),
                rule: None,
                message: "the trial iteration made progress".into(),
            });
        }
        self.state.no_change_count = self.state.breaker.no_progress;
        self.state.consecutive_failures = self.state.breaker.consecutive_failures;
        let error_hash = error.as_deref().map(breaker::fingerprint);
        if let Some(h) = &error_hash {
            self.state.error_hashes.push(h.clone());
            let excess = self
                .state
                .error_hashes
                .len()
                .saturating_sub(breaker::KEEP_ERROR_HASHES);
            self.state.error_hashes.drain(..excess);
        }
        if let Some(s) = &snap_before {
            self.state.last_diff_hash = Some(s.changes_fingerprint.clone());
        }
        let commit = if it.checkpoint.is_some() {
            self.state.context_checkpoint.commit.clone()
        } else {
            None
        };
        self.state.history.push(IterationRecord {
            iteration: it.number,
            started_at: String::new(),
            ended_at: now_rfc3339(),
            outcome: outcome_label.clone(),
            exit_code: it.exit_code,
            progress,
            cost_usd: it.cost_usd,
            error: error.clone(),
            error_hash,
            commit,
        });
        self.bus.emit(Event::IterationEnded {
            iteration: it.number,
            outcome: outcome_label,
            progress,
            cost_usd: it.cost_usd,
            peak_percent: self
                .state
                .context_history
                .last()
                .map_or(0.0, |h| h.peak_percent),
            seconds: it.seconds,
            error: error.clone(),
            invalid_lines: it.invalid_lines,
            skipped_lines: it.skipped_lines,
        });
        self.save();
        self.run_hooks(
            "on_iteration_end",
            &self.config.hooks.on_iteration_end.clone(),
            vec![("RALPH_PROGRESS", progress.to_string())],
        );

        // The exit rules, most specific first.
        if self.interrupts > 0 {
            return Some((Outcome::Interrupted, "interrupted by a signal".into()));
        }
        if it.promise {
            let open = plan_after.open_count();
            if self.config.loop_.require_plan_complete && open > 0 {
                self.bus.emit(Event::PrematurePromise {
                    iteration: it.number,
                    open_items: open,
                });
            } else {
                return Some((
                    Outcome::Completed,
                    format!("the agent kept its promise in iteration {}", it.number),
                ));
            }
        }
        if let Some(trip) = trip {
            self.bus.emit(Event::Breaker {
                status: "open".into(),
                rule: Some(trip.rule.into()),
                message: format!("{}; {}", trip.message, trip.hint),
            });
            return Some((
                Outcome::BreakerOpen,
                format!(
                    "circuit breaker opened ({}): {}. {}",
                    trip.rule, trip.message, trip.hint
                ),
            ));
        }
        if self.stop_requested {
            return Some((Outcome::Stopped, "stopped on request (ralph stop)".into()));
        }
        if let Some(why) = self.budget_spent(0.0) {
            return Some((Outcome::BudgetSpent, why));
        }
        if let Some(hit) = it.limit {
            return self.wait_for_limit(hit).await;
        }
        self.limited_before = false;
        None
    }

    /// Why this iteration counts as a failure, if it does.
    fn failure_of(&self, it: &Iteration, we_stopped: bool) -> Option<String> {
        if let Some(e) = &it.spawn_error {
            return Some(format!("agent could not start: {e}"));
        }
        if it.limit.is_some() {
            return None; // waited out, not held against the agent
        }
        if let Some(t) = &it.timed_out {
            return Some(t.clone());
        }
        if let Some(r) = &it.result {
            // Our own SIGINT makes the CLI report an aborted run: not a failure.
            let aborted_by_us = we_stopped && r.subtype == "error_during_execution";
            if r.is_error && !aborted_by_us {
                let text = r
                    .text
                    .clone()
                    .filter(|t| !t.is_empty())
                    .or_else(|| (!r.errors.is_empty()).then(|| r.errors.join("; ")))
                    .unwrap_or_else(|| r.subtype.clone());
                return Some(match r.api_error_status {
                    Some(s) => format!("API error {s}: {text}"),
                    None => text,
                });
            }
            return None;
        }
        if we_stopped {
            return None;
        }
        let stderr = it
            .stderr_tail
            .trim()
            .lines()
            .last()
            .unwrap_or("")
            .to_string();
        Some(match (it.exit_code, it.exit_signal) {
            (Some(0), _) => "agent exited without a result".into(),
            (Some(c), _) => format!(
                "agent exited with code {c} without a result{}",
                if stderr.is_empty() {
                    String::new()
                } else {
                    format!(": {stderr}")
                }
            ),
            (None, Some(s)) => format!("agent was killed by signal {s}"),
            _ => "agent ended without a result".into(),
        })
    }

    fn save_checkpoint(&mut self, it: &Iteration, trigger: &str, level: Level, percent: f64) {
        self.reuse_snapshot = None;
        let entry = self
            .state
            .context_history
            .last()
            .cloned()
            .unwrap_or_default();
        let reason = it
            .stop_reason
            .clone()
            .unwrap_or_else(|| format!("{trigger} checkpoint"));
        let moment = Moment {
            iteration: it.number,
            trigger: trigger.to_string(),
            level,
            percent: if percent > 0.0 {
                percent
            } else {
                entry.peak_percent
            },
            tokens: entry.peak_tokens,
            usable: self
                .state
                .context_window
                .saturating_sub(self.config.agent.reserve_tokens),
            window: self.state.context_window,
            reason,
            last_text: it.text_at_checkpoint.clone().or(it.last_text.clone()),
            last_tools: it.tool_calls.clone(),
            files_touched: it.files_touched.clone(),
            notes_path: it.notes_path.clone(),
        };
        // Recorded in the lock: should ralph die inside the commit, the next
        // run knows that git's lock files are its own (state::LockInfo).
        let _ = self.lock.set_committing(true);
        let saved = checkpoint::perform(&self.root, &self.config, &self.templates, &moment);
        let _ = self.lock.set_committing(false);
        for w in &saved.warnings {
            self.bus.emit(Event::Warning { message: w.clone() });
        }
        self.state.context_checkpoint = ContextCheckpoint {
            active: true,
            level: Some(level),
            percent_at_checkpoint: crate::context::round1(moment.percent),
            timestamp: Some(now_rfc3339()),
            handoff_file: saved.handoff.clone(),
            resume_summary: Some(saved.resume_summary.clone()),
            files_in_progress: saved.files_in_progress.clone(),
            current_todo_item: saved.current_item.clone(),
            progress_on_item: it
                .text_at_checkpoint
                .as_deref()
                .or(it.last_text.as_deref())
                .map(first_line),
            trigger: Some(trigger.to_string()),
            commit: saved.commit.clone(),
        };
        if let Some(h) = self.state.context_history.last_mut() {
            h.checkpoint = true;
            h.level = Some(level);
            h.handoff.clone_from(&saved.handoff);
        }
        if saved.commit.is_some() {
            self.state.last_commit.clone_from(&saved.commit);
        }
        if saved.handoff.is_some() {
            self.state.last_handoff.clone_from(&saved.handoff);
        }
        self.save();
        self.bus.emit(Event::Checkpoint {
            iteration: it.number,
            trigger: trigger.to_string(),
            level,
            percent: crate::context::round1(moment.percent),
            tokens: moment.tokens,
            commit: saved.commit.clone(),
            commit_note: saved.commit_note.clone(),
            handoff: saved.handoff.clone(),
        });
        self.run_hooks(
            "on_checkpoint",
            &self.config.hooks.on_checkpoint.clone(),
            vec![
                ("RALPH_LEVEL", level.name().to_string()),
                ("RALPH_PERCENT", format!("{:.0}", moment.percent)),
                ("RALPH_HANDOFF", saved.handoff.unwrap_or_default()),
                ("RALPH_COMMIT", saved.commit.unwrap_or_default()),
                ("RALPH_TRIGGER", trigger.to_string()),
            ],
        );
    }

    fn run_hooks(&mut self, hook: &str, commands: &[String], mut env: Vec<(&str, String)>) {
        if commands.is_empty() {
            return;
        }
        self.reuse_snapshot = None;
        env.push(("RALPH_ITERATION", self.state.iteration.to_string()));
        env.push(("RALPH_RUN_ID", self.state.run_id.clone()));
        for run in hooks::run_all(commands, &self.root, &env, self.config.hooks.timeout.0) {
            self.bus.emit(Event::Hook {
                hook: hook.to_string(),
                command: run.command,
                ok: run.ok,
                detail: run.detail,
            });
        }
    }

    /// A request that arrives while no agent runs. `Some` ends the run.
    fn on_request_between(&mut self, request: Request, when: &str) -> Option<(Outcome, String)> {
        match request {
            Request::Interrupt => {
                self.interrupts += 1;
                return Some((Outcome::Interrupted, format!("interrupted {when}")));
            }
            Request::Stop => return Some((Outcome::Stopped, format!("stopped on request {when}"))),
            Request::Hangup => self.bus.detach(),
            Request::Checkpoint(_) => {
                let it = Iteration {
                    number: self.state.iteration,
                    ..Iteration::default()
                };
                self.save_checkpoint(&it, "manual", Level::L2, 0.0);
            }
        }
        None
    }

    /// A request that arrived while the supervisor was busy between two
    /// agents (hooks, the WIP commit, saving state), without waiting.
    async fn pending_request(&mut self) -> Option<Request> {
        // Hooks and git run synchronously, so the runtime has not yet seen a
        // signal that came meanwhile: let it poll its driver first.
        tokio::task::yield_now().await;
        tokio::select! {
            biased;
            request = self.signals.next() => Some(request),
            () = std::future::ready(()) => None,
        }
    }

    /// Sleep until a usage limit resets (interruptible), or end the run
    /// when waiting is off or would take too long.
    async fn wait_for_limit(&mut self, hit: LimitHit) -> Option<(Outcome, String)> {
        let rl = &self.config.rate_limit;
        let now = jiff::Timestamp::now();
        let passed = hit.resets_at.is_some_and(|t| t <= now);
        // A reset time that has passed while the limit holds on, right after
        // a wait: retrying every few seconds would only burn iterations, so
        // back off as when no reset time is known.
        let retry_soon = !(passed && self.limited_before);
        self.limited_before = true;
        let wait = match hit.resets_at.filter(|_| retry_soon) {
            Some(t) => {
                self.limit_backoff = LIMIT_FALLBACK;
                let secs = (t.as_second() - now.as_second()).max(0) as u64;
                Duration::from_secs(secs) + LIMIT_MARGIN
            }
            None => {
                let w = self.limit_backoff;
                self.limit_backoff = (w * 2).min(rl.max_wait.0);
                w
            }
        };
        if !rl.wait {
            return Some((
                Outcome::BudgetSpent,
                format!(
                    "usage limit hit ({}) and rate_limit.wait is off",
                    hit.detail
                ),
            ));
        }
        if wait > rl.max_wait.0 {
            return Some((
                Outcome::BudgetSpent,
                format!(
                    "usage limit hit ({}); it resets in {}, longer than rate_limit.max_wait {}",
                    hit.detail,
                    format_duration(wait),
                    format_duration(rl.max_wait.0)
                ),
            ));
        }
        // Sleeping past the end of the run's time would only hold the lock
        // until after it: stop now.
        if let Some(why) = self.time_spent_within(wait) {
            return Some((
                Outcome::BudgetSpent,
                format!(
                    "usage limit hit ({}); it resets in {}, but before that the {why}",
                    hit.detail,
                    format_duration(wait)
                ),
            ));
        }
        let until = now + jiff::SignedDuration::try_from(wait).unwrap_or_default();
        self.reuse_snapshot = None;
        self.state.status = "waiting".into();
        self.state.waiting_until = Some(until.to_string());
        self.save();
        self.bus.emit(Event::LimitWait {
            until: until.to_string(),
            seconds: wait.as_secs(),
            source: hit.source.into(),
            detail: hit.detail.clone(),
        });
        let end = tokio::time::Instant::now() + wait;
        loop {
            tokio::select! {
                _ = sleep_until(end) => break,
                _ = tokio::time::sleep(Duration::from_secs(1)) => self.bus.tick(),
                request = self.signals.next() => {
                    if let Some(end) = self.on_request_between(request, "while waiting for a usage limit to reset") {
                        return Some(end);
                    }
                }
            }
        }
        self.state.waiting_until = None;
        self.state.status = "running".into();
        self.save();
        None
    }
}

fn now_secs() -> i64 {
    jiff::Timestamp::now().as_second()
}

fn first_line(s: &str) -> String {
    let line = s
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    line.chars().take(120).collect()
}

/// `path` relative to `root` when it is inside it.
fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Parse `--deadline HH:MM`: the next such local time.
pub fn parse_deadline(text: &str) -> Result<jiff::Timestamp> {
    parse_deadline_at(text, &jiff::Zoned::now())
}

fn parse_deadline_at(text: &str, now: &jiff::Zoned) -> Result<jiff::Timestamp> {
    let bad = || {
        Error::usage(format!("--deadline `{text}` is not a time of day"))
            .with_hint("write it as HH:MM in local time, e.g. --deadline 07:30")
    };
    let time: jiff::civil::Time = text.trim().parse().map_err(|_| bad())?;
    let today = now
        .date()
        .to_datetime(time)
        .to_zoned(now.time_zone().clone())
        .map_err(|_| bad())?;
    let at = if today > *now {
        today
    } else {
        today.tomorrow().map_err(|_| bad())?
    };
    Ok(at.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> jiff::Zoned {
        s.parse().unwrap()
    }

    #[test]
    fn deadline_is_the_next_such_local_time() {
        let evening = at("2026-11-21T22:00:00[Europe/Berlin]");
        let t = parse_deadline_at("07:30", &evening).unwrap();
        assert_eq!(t.to_string(), "2026-11-22T06:30:00Z");
        let early = at("2026-11-22T05:00:00[Europe/Berlin]");
        let t = parse_deadline_at(" 07:30 ", &early).unwrap();
        assert_eq!(t.to_string(), "2026-11-22T06:30:00Z");
        // The very minute now is over: tomorrow's.
        let now = at("2026-11-22T07:30:00[Europe/Berlin]");
        let t = parse_deadline_at("07:30", &now).unwrap();
        assert_eq!(t.to_string(), "2026-11-23T06:30:00Z");
    }

    #[test]
    fn deadline_across_a_clock_change() {
        // The night the clocks go back: 07:30 is 8 hours of wall time away
        // but 9 hours of real time.
        let now = at("2026-10-24T23:30:00[Europe/Berlin]");
        let t = parse_deadline_at("07:30", &now).unwrap();
        assert_eq!(t.to_string(), "2026-10-25T06:30:00Z");
        assert_eq!(t.duration_since(now.timestamp()).as_hours(), 9);
    }

    #[test]
    fn bad_deadlines_are_usage_errors_with_a_hint() {
        let now = at("2026-11-21T22:00:00[UTC]");
        for text in ["7pm", "25:00", "07:60", "", "tomorrow"] {
            let err = parse_deadline_at(text, &now).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{text}");
            assert!(err.render().contains("HH:MM"), "{text}");
        }
    }
}
