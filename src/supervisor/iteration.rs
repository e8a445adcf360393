//! One agent process as a synchronous machine. The driver turns what
//! happens (a line, the exit, a request, a timer) into an [`Input`]; the
//! machine counts, meters and decides, and answers with [`Effect`]s for
//! the driver to carry out. What it learnt comes out as [`Facts`]. Pure:
//! no runtime, no agent, no clock — time comes in as [`Now`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::Now;
use super::budget::Budgets;
use super::facts::{CheckpointMark, Facts, MeterSummary};
use super::facts::{first_line, rel};
use super::signals::Request;
use super::stop::{Overdue, SignalCount, StopSequence};
use crate::checkpoint;
use crate::completion;
use crate::config::Config;
use crate::context::{Change, ContextMeter, Level, round1};
use crate::events::Event;
use crate::limits;
use crate::state::{RunState, Trigger};
use crate::stream::StreamEvent;

/// How often, during an iteration, the display is redrawn and the budgets
/// are checked: a fixed beat, not "a second after the last line", so that
/// an agent that talks more often than once a second cannot starve the
/// budget checks.
const TICK: Duration = Duration::from_secs(1);
/// Tools whose path input is a file the agent changes.
const EDIT_TOOLS: [&str; 4] = ["Write", "Edit", "MultiEdit", "NotebookEdit"];

/// What happened, as the driver saw it.
#[derive(Debug)]
pub(super) enum Input {
    /// A decoded line and when its reader received it.
    Line(StreamEvent, Instant),
    /// The agent process ended; the lines still in the pipe follow.
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
    Request(Request),
    /// [`IterationMachine::next_wake`] has come.
    Wake,
    /// The answer to [`Effect::AskHandoff`]: whether the request reached
    /// the agent's stdin.
    HandoffSent(bool),
}

/// What the driver is to do, in this order.
#[derive(Debug)]
pub(super) enum Effect {
    Emit(Event),
    /// Send the agent the checkpoint request, then answer with
    /// [`Input::HandoffSent`].
    AskHandoff(HandoffRequest),
    CloseStdin,
    Signal(Signal),
    /// SIGHUP: the terminal is gone.
    DetachDisplay,
    /// Redraw the display.
    Tick,
}

/// The values the checkpoint request template is rendered with.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct HandoffRequest {
    pub notes_path: PathBuf,
    pub percent: f64,
    pub level: Level,
    pub tokens: u64,
    pub usable: u64,
    pub grace: Duration,
    pub trigger: Trigger,
    pub reason: String,
}

/// What one iteration may do, fixed when it starts.
#[derive(Debug, Clone)]
pub(super) struct IterationLimits {
    pub number: u32,
    pub root: PathBuf,
    pub iteration_timeout: Duration,
    pub idle_timeout: Duration,
    pub grace: Duration,
    /// Ask the agent for handoff notes before stopping it.
    pub agent_handoff: bool,
    pub promise: String,
    pub budgets: Budgets,
    /// The run's cost before this iteration.
    pub cost_before: f64,
    /// For reset times written as local times.
    pub tz: jiff::tz::TimeZone,
}

impl IterationLimits {
    pub(super) fn new(
        config: &Config,
        number: u32,
        root: &Path,
        budgets: &Budgets,
        state: &RunState,
        tz: jiff::tz::TimeZone,
    ) -> IterationLimits {
        IterationLimits {
            number,
            root: root.to_path_buf(),
            iteration_timeout: config.loop_.iteration_timeout.0,
            idle_timeout: config.loop_.idle_timeout.0,
            grace: config.context.grace.0,
            agent_handoff: config.context.agent_handoff,
            promise: config.loop_.completion_promise.clone(),
            budgets: budgets.clone(),
            cost_before: state.cost_usd,
            tz,
        }
    }
}

/// The meter for the next agent: the configured window, and what earlier
/// results told about the model's.
pub(super) fn meter(config: &Config, state: &RunState) -> ContextMeter {
    let mut meter = ContextMeter::new(
        config.agent.context_window,
        config.agent.reserve_tokens,
        config.thresholds(),
    )
    .with_known_windows(&state.known_windows);
    if let Some(m) = &config.agent.model {
        meter.set_model(m);
    }
    meter
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The agent runs: the machine may act on it.
    Live,
    /// It exited: its last lines are counted, nothing is acted on.
    Draining,
}

pub(super) struct IterationMachine {
    limits: IterationLimits,
    meter: ContextMeter,
    facts: Facts,
    stop: StopSequence,
    phase: Phase,
    started: Instant,
    last_line: Instant,
    beat: Instant,
    /// A checkpoint waiting for [`Input::HandoffSent`]: its reason.
    asking: Option<String>,
}

impl IterationMachine {
    pub(super) fn new(
        limits: IterationLimits,
        meter: ContextMeter,
        signals: SignalCount,
        now: &Now,
    ) -> IterationMachine {
        IterationMachine {
            facts: Facts {
                number: limits.number,
                signals,
                ..Facts::default()
            },
            limits,
            meter,
            stop: StopSequence::Running,
            phase: Phase::Live,
            started: now.mono,
            last_line: now.mono,
            beat: now.mono + TICK,
            asking: None,
        }
    }

    pub(super) fn handle(&mut self, input: Input, now: &Now, out: &mut Vec<Effect>) {
        match input {
            Input::Line(event, at) => {
                self.last_line = at;
                self.on_line(&event, now, out);
            }
            Input::Exited { code, signal } => {
                self.phase = Phase::Draining;
                self.facts.seconds = now
                    .mono
                    .saturating_duration_since(self.started)
                    .as_secs_f64();
                self.facts.exit_code = code;
                self.facts.exit_signal = signal;
                out.push(Effect::Emit(Event::AgentExited {
                    iteration: self.facts.number,
                    code,
                    signal,
                    seconds: self.facts.seconds,
                }));
            }
            // Once the agent is gone there is nothing left to act on.
            _ if self.phase == Phase::Draining => {}
            Input::Request(request) => self.on_request(request, now, out),
            Input::Wake => self.on_wake(now, out),
            Input::HandoffSent(sent) => {
                if let Some(why) = self.asking.take() {
                    let notes = sent.then(|| checkpoint::notes_path(self.facts.number));
                    self.checkpoint_asked(notes, &why, now, out);
                }
            }
        }
    }

    /// When the machine wants an [`Input::Wake`]: the display beat, the
    /// iteration and idle deadlines while running, the stop sequence's next
    /// step.
    pub(super) fn next_wake(&self) -> Instant {
        let mut wake = self.beat;
        if self.stop.is_running() {
            wake = wake
                .min(self.started + self.limits.iteration_timeout)
                .min(self.last_line + self.limits.idle_timeout);
        }
        if let Some(t) = self.stop.deadline() {
            wake = wake.min(t);
        }
        wake
    }

    /// The facts of the iteration, once its last line is counted.
    pub(super) fn finish(self) -> Facts {
        let mut facts = self.facts;
        let m = &self.meter;
        if facts.checkpoint.is_none() && m.peak_level() >= Level::L2 {
            // The level was crossed in the very last lines (or after the
            // agent had already exited): still save the work.
            facts.checkpoint = Some(CheckpointMark {
                trigger: Trigger::Context,
                level: m.peak_level(),
                percent: m.peak_percent(),
            });
        }
        facts.meter = Some(MeterSummary {
            window: m.window(),
            known_windows: m.known_windows().clone(),
            peak_percent: m.peak_percent(),
            peak_level: m.peak_level(),
            peak_tokens: m.peak_tokens(),
        });
        facts
    }

    fn live(&self) -> bool {
        self.phase == Phase::Live
    }

    fn emit(&self, out: &mut Vec<Effect>, event: Event) {
        out.push(Effect::Emit(event));
    }

    fn on_line(&mut self, event: &StreamEvent, now: &Now, out: &mut Vec<Effect>) {
        let it = &mut self.facts;
        let before = self.meter.tokens();
        let change = self
            .meter
            .observe(event, now.mono.saturating_duration_since(self.started));
        let mut tool_label = None;
        match event {
            StreamEvent::Assistant(m) if m.is_main_thread() => {
                if let Some(hit) =
                    limits::from_assistant(m, &now.wall.to_zoned(self.limits.tz.clone()))
                {
                    it.limit.get_or_insert(hit);
                }
                if !m.is_synthetic() {
                    if !m.text.is_empty() {
                        it.last_text = Some(m.text.join("\n"));
                    }
                    for call in &m.tool_calls {
                        let mut call = call.clone();
                        call.path = call.path.map(|p| rel(&self.limits.root, Path::new(&p)));
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
            } => out.push(Effect::Emit(Event::ApiRetry {
                iteration: it.number,
                attempt: *attempt,
                max_retries: *max_retries,
                error_status: *error_status,
                error: error.clone(),
            })),
            StreamEvent::Result(r) => {
                it.cost_usd = it.cost_usd.max(r.total_cost_usd);
                for d in &r.permission_denials {
                    if !it.permission_denials.contains(d) {
                        it.permission_denials.push(d.clone());
                    }
                }
                match limits::from_result(r, &now.wall.to_zoned(self.limits.tz.clone())) {
                    Some(hit) => {
                        it.limit.get_or_insert(hit);
                    }
                    // The turn ended well after all: the session got past a
                    // rejected rate_limit_event (extra usage, a fallback
                    // model), so the limit did not stop the work.
                    None if !r.is_error => it.limit = None,
                    None => {}
                }
                if r.text
                    .as_deref()
                    .is_some_and(|t| completion::promise_in(t, &self.limits.promise))
                {
                    it.promise = true;
                }
                it.result = Some(r.clone());
                // The turn is over: with stdin closed the CLI exits now.
                if self.phase == Phase::Live {
                    out.push(Effect::CloseStdin);
                }
                if self.stop.is_running()
                    && let Some(why) = self
                        .limits
                        .budgets
                        .spent(now, self.limits.cost_before + it.cost_usd)
                {
                    it.stop_reason = Some(why.to_string());
                }
            }
            StreamEvent::Invalid { reason } => {
                it.invalid_lines += 1;
                if it.invalid_lines <= 3 {
                    out.push(Effect::Emit(Event::Warning {
                        message: format!(
                            "iteration {}: undecodable agent output: {reason}",
                            it.number
                        ),
                    }));
                }
            }
            StreamEvent::Other { .. } => it.skipped_lines += 1,
            _ => {}
        }
        match change {
            Some(Change::Level { from, to }) => {
                self.emit(
                    out,
                    Event::LevelChanged {
                        iteration: self.facts.number,
                        from,
                        to,
                        percent: round1(self.meter.percent()),
                        tokens: self.meter.tokens(),
                    },
                );
                if !self.live() {
                    // Too late to act: finish() saves the work if need be.
                } else if to >= Level::L2 && self.facts.checkpoint.is_none() {
                    let why = format!(
                        "context reached {to} at {:.1}% of the usable window",
                        self.meter.percent()
                    );
                    let handoff = self.limits.agent_handoff && to == Level::L2;
                    self.begin_checkpoint(Trigger::Context, why, handoff, now, out);
                } else if to == Level::L3 && self.stop.is_asked() {
                    if let Some(mark) = self.facts.checkpoint.as_mut() {
                        mark.level = Level::L3;
                    }
                    self.escalate("context reached L3 during the grace period", now, out);
                }
            }
            Some(Change::Compacted(c)) => self.emit(
                out,
                Event::Compacted {
                    iteration: self.facts.number,
                    pre_tokens: c.pre_tokens,
                    post_tokens: c.post_tokens,
                },
            ),
            None => {}
        }
        if self.meter.tokens() != before || tool_label.is_some() {
            self.emit(
                out,
                Event::Context {
                    iteration: self.facts.number,
                    reading: self.meter.snapshot(),
                    tool: tool_label,
                },
            );
        }
    }

    fn on_request(&mut self, request: Request, now: &Now, out: &mut Vec<Effect>) {
        let handoff = self.limits.agent_handoff;
        match request {
            Request::Hangup => out.push(Effect::DetachDisplay),
            Request::Interrupt => match self.facts.signals.bump() {
                // Already checkpointing: skip the rest of the grace period.
                SignalCount::Once if self.facts.checkpoint.is_some() => {
                    if self.stop.is_asked() {
                        self.escalate("interrupted during the grace period", now, out);
                    }
                }
                SignalCount::Once => {
                    let why = "interrupted (SIGINT/SIGTERM)".to_string();
                    self.begin_checkpoint(Trigger::Signal, why, false, now, out);
                }
                SignalCount::None | SignalCount::Twice => {
                    let sig = self.stop.kill();
                    self.signal(sig, "second interrupt", out);
                }
            },
            Request::Checkpoint(reason) => {
                let why = format!("checkpoint requested by hand ({reason})");
                self.begin_checkpoint(Trigger::Manual, why, handoff, now, out);
            }
            Request::Stop => {
                self.facts.stop_requested = true;
                let why = "stop requested (ralph stop)".to_string();
                self.begin_checkpoint(Trigger::Stop, why, handoff, now, out);
            }
        }
    }

    fn on_wake(&mut self, now: &Now, out: &mut Vec<Effect>) {
        if now.mono >= self.beat {
            out.push(Effect::Tick);
            self.beat = now.mono + TICK;
        }
        if self.stop.is_running() {
            if let Some(overdue) = self.overdue(now) {
                let why = overdue.reason();
                if overdue.is_timeout() {
                    self.facts.timed_out = Some(why.clone());
                }
                let handoff = self.limits.agent_handoff;
                self.begin_checkpoint(overdue.trigger(), why, handoff, now, out);
            }
        } else if let Some(reason) = self.stop.due(now.mono) {
            self.escalate(reason, now, out);
        }
    }

    fn overdue(&self, now: &Now) -> Option<Overdue> {
        let l = &self.limits;
        if now.mono >= self.started + l.iteration_timeout {
            Some(Overdue::Iteration(l.iteration_timeout))
        } else if now.mono >= self.last_line + l.idle_timeout {
            Some(Overdue::Idle(l.idle_timeout))
        } else {
            l.budgets
                .spent(now, l.cost_before + self.facts.cost_usd)
                .map(Overdue::Budget)
        }
    }

    /// The checkpoint sequence: ask for handoff notes (if wanted), close
    /// stdin, and give the agent the grace period before escalating.
    fn begin_checkpoint(
        &mut self,
        trigger: Trigger,
        why: String,
        handoff: bool,
        now: &Now,
        out: &mut Vec<Effect>,
    ) {
        if self.facts.checkpoint.is_some() {
            return;
        }
        let m = &self.meter;
        self.facts.checkpoint = Some(CheckpointMark {
            trigger,
            level: m.level().max(Level::L2),
            percent: m.percent(),
        });
        self.facts.stop_reason = Some(why.clone());
        self.facts
            .text_at_checkpoint
            .clone_from(&self.facts.last_text);
        if handoff {
            out.push(Effect::AskHandoff(HandoffRequest {
                notes_path: checkpoint::notes_path(self.facts.number),
                percent: round1(m.percent()),
                level: m.level(),
                tokens: m.tokens(),
                usable: m.usable(),
                grace: self.limits.grace,
                trigger,
                reason: why.clone(),
            }));
            self.asking = Some(why);
        } else {
            self.checkpoint_asked(None, &why, now, out);
        }
    }

    /// The request is out (or was not wanted): close stdin and start the
    /// stop sequence. With notes asked for, or the result already in, the
    /// agent gets the grace period; otherwise it is interrupted now.
    fn checkpoint_asked(
        &mut self,
        notes: Option<PathBuf>,
        why: &str,
        now: &Now,
        out: &mut Vec<Effect>,
    ) {
        let Some(mark) = self.facts.checkpoint else {
            return;
        };
        let had_result = self.facts.result.is_some();
        out.push(Effect::CloseStdin);
        self.emit(
            out,
            Event::CheckpointRequested {
                iteration: self.facts.number,
                trigger: mark.trigger,
                level: self.meter.level().max(Level::L2),
                percent: round1(self.meter.percent()),
                notes_path: notes.as_ref().map(|p| p.display().to_string()),
            },
        );
        let wait = notes.is_some() || had_result;
        self.facts.notes_path = notes;
        if let Some(sig) = self.stop.begin(now.mono, self.limits.grace, wait) {
            self.signal(sig, why, out);
        }
    }

    /// One step further along SIGINT → SIGTERM → SIGKILL.
    fn escalate(&mut self, reason: &str, now: &Now, out: &mut Vec<Effect>) {
        let sig = self.stop.escalate(now.mono);
        self.signal(sig, reason, out);
    }

    fn signal(&self, sig: Signal, reason: &str, out: &mut Vec<Effect>) {
        out.push(Effect::Signal(sig));
        self.emit(
            out,
            Event::AgentSignalled {
                iteration: self.facts.number,
                signal: format!("{sig:?}"),
                reason: reason.to_string(),
            },
        );
    }
}
