//! One agent process as a synchronous machine. The driver turns what
//! happens (a line, the exit, a request, a timer) into an [`Input`]; the
//! machine counts, meters and decides, and answers with [`Effect`]s for
//! the driver to carry out. What it learnt comes out as [`Facts`]. Pure:
//! no runtime, no agent, no clock — time comes in as [`Now`].
//!
//! ```text
//! iteration.rs       IterationMachine: inputs, effects, levels, the checkpoint, the stop
//! iteration/
//!   setup.rs         what an iteration may do, fixed at its start: limits, the meter
//!   seams.rs         the plan followed item by item: boundary, nudge, shard
//! ```

mod seams;
mod setup;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::Now;
use super::facts::rel;
use super::facts::{CheckpointMark, Facts, MeterSummary};
use super::snapshots::SnapshotReason;
use super::stop::{Overdue, SignalCount, StopSequence};
use crate::checkpoint;
use crate::context::{Change, ContextMeter, Level, round1};
use crate::formats::Event;
use crate::formats::Trigger;
use crate::plan::Plan;
use crate::platform::signals::Request;
use crate::rules::completion;
use crate::rules::limits;
use crate::stream::StreamEvent;
pub(super) use seams::{NudgeRequest, SeamWatch};
pub(super) use setup::IterationLimits;
pub(crate) use setup::meter;

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
    /// The answer to [`Effect::ReadPlan`] (the plan after an edit, or at the end).
    Plan(Plan),
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
    /// Read the plan and answer with [`Input::Plan`].
    ReadPlan(PathBuf),
    /// Send the L1 nudge to the agent's stdin.
    Nudge(NudgeRequest),
    /// Record the work tree on the safety net's hidden ref.
    Snapshot(SnapshotReason),
}

/// The values the checkpoint request template is rendered with.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct HandoffRequest {
    pub(crate) notes_path: PathBuf,
    pub(crate) percent: f64,
    pub(crate) level: Level,
    pub(crate) tokens: u64,
    pub(crate) usable: u64,
    pub(crate) grace: Duration,
    pub(crate) trigger: Trigger,
    pub(crate) reason: String,
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
    seams: Option<SeamWatch>,
    /// When the next interval snapshot is due (while the agent runs).
    next_snapshot: Option<Instant>,
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
                quota: limits.quota_before.clone(),
                ..Facts::default()
            },
            next_snapshot: limits.snapshot_every.map(|d| now.mono + d),
            limits,
            meter,
            stop: StopSequence::Running,
            phase: Phase::Live,
            started: now.mono,
            last_line: now.mono,
            beat: now.mono + TICK,
            asking: None,
            seams: None,
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
            Input::Plan(plan) => self.on_plan(&plan, now, out),
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
    /// iteration and idle deadlines and the next snapshot while running,
    /// the stop sequence's next step.
    pub(super) fn next_wake(&self) -> Instant {
        let mut wake = self.beat;
        if self.stop.is_running() {
            wake = wake
                .min(self.started + self.limits.iteration_timeout)
                .min(self.last_line + self.limits.idle_timeout);
            if let Some(t) = self.next_snapshot {
                wake = wake.min(t);
            }
        }
        if let Some(t) = self.stop.deadline() {
            wake = wake.min(t);
        }
        wake
    }

    /// The facts of the iteration, once its last line is counted.
    pub(super) fn finish(mut self) -> Facts {
        let items = self.seams_finish();
        let mut facts = self.facts;
        facts.items = items;
        let m = &self.meter;
        let summary = MeterSummary {
            window: m.window(),
            known_windows: m.known_windows().clone(),
            learned_windows: m.learned_windows(),
            peak_percent: m.peak_percent(),
            peak_level: m.peak_level(),
            peak_tokens: m.peak_tokens(),
            not_metered: m.not_metered(),
        };
        if facts.checkpoint.is_none() && m.peak_level() >= Level::L2 {
            // The level was crossed in the very last lines (or after the
            // agent had already exited): still save the work.
            facts.checkpoint = Some(CheckpointMark::at_peak(Trigger::Context, Some(&summary)));
        }
        facts.meter = Some(summary);
        facts
    }

    fn live(&self) -> bool {
        self.phase == Phase::Live
    }

    fn emit(&self, out: &mut Vec<Effect>, event: Event) {
        out.push(Effect::Emit(event));
    }

    fn on_line(&mut self, event: &StreamEvent, now: &Now, out: &mut Vec<Effect>) {
        let nudged = self.seams.as_ref().is_some_and(|s| s.nudged);
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
                        if nudged && it.nudge_answer.is_none() {
                            it.nudge_answer.clone_from(&it.last_text);
                        }
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
                        tool_label = Some(call.label());
                        it.tool_calls.push(call);
                        if it.tool_calls.len() > 50 {
                            it.tool_calls.remove(0);
                        }
                    }
                }
            }
            StreamEvent::RateLimit {
                status,
                resets_at,
                windows,
                ..
            } => {
                it.quota.observe(windows);
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
            StreamEvent::Init {
                session_id: Some(id),
                ..
            } => {
                it.session_id.get_or_insert_with(|| id.clone());
            }
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
                    && let Some(why) = self.limits.budgets.spent(
                        now,
                        self.limits.cost_before + it.cost_usd,
                        &it.quota,
                    )
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
                        *mark = CheckpointMark::reading(mark.trigger, &self.meter);
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
        self.seams_on_line(event, change, now, out);
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
                // The second (bump never gives None).
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
            if let (Some(due), Some(every)) = (self.next_snapshot, self.limits.snapshot_every)
                && now.mono >= due
            {
                out.push(Effect::Snapshot(SnapshotReason::Interval));
                self.next_snapshot = Some(now.mono + every);
            }
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
                .spent(now, l.cost_before + self.facts.cost_usd, &self.facts.quota)
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
        // The tree before the agent hears of the stop, whatever it does then.
        if self.limits.snapshot_every.is_some() {
            out.push(Effect::Snapshot(SnapshotReason::Stop));
        }
        let m = &self.meter;
        let mark = CheckpointMark::reading(trigger, m);
        self.facts.checkpoint = Some(mark);
        self.facts.stop_reason = Some(why.clone());
        self.facts
            .text_at_checkpoint
            .clone_from(&self.facts.last_text);
        if handoff {
            out.push(Effect::AskHandoff(HandoffRequest {
                notes_path: checkpoint::notes_path(self.facts.number),
                percent: round1(mark.percent),
                level: mark.level,
                tokens: mark.tokens,
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
                level: mark.level,
                percent: round1(mark.percent),
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
                signal: sig.into(),
                reason: reason.to_string(),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Thresholds;
    use crate::stream::decode_line;
    use crate::supervisor::budget::Budgets;

    const GRACE: Duration = Duration::from_secs(30);

    /// A machine for iteration 3 of a run in /repo: a window of 100k
    /// tokens (L2 at 85k, L3 at 95k), a $10 budget, started at `t0`.
    fn machine(agent_handoff: bool) -> (IterationMachine, Now) {
        let t0 = Now::read();
        let limits = IterationLimits {
            number: 3,
            root: PathBuf::from("/repo"),
            iteration_timeout: Duration::from_secs(3600),
            idle_timeout: Duration::from_secs(600),
            grace: GRACE,
            agent_handoff,
            promise: "DONE".into(),
            budgets: Budgets {
                max_cost: Some(10.0),
                max_duration: None,
                deadline: None,
                quota: Default::default(),
                started: t0.mono,
                max_iterations: 50,
                counted_from: Default::default(),
            },
            cost_before: 0.0,
            quota_before: Default::default(),
            tz: jiff::tz::TimeZone::UTC,
            snapshot_every: None,
        };
        let meter = ContextMeter::new(100_000, 0, Thresholds::DEFAULT);
        let m = IterationMachine::new(limits, meter, SignalCount::None, &t0);
        (m, t0)
    }

    fn after(t0: &Now, secs: u64) -> Now {
        Now {
            mono: t0.mono + Duration::from_secs(secs),
            wall: t0.wall + jiff::SignedDuration::from_secs(secs as i64),
        }
    }

    fn assistant(id: &str, tokens: u64, content: &str) -> StreamEvent {
        decode_line(format!(
            r#"{{"type":"assistant","message":{{"id":"{id}","model":"claude-sonnet-4-5","content":[{content}],"usage":{{"input_tokens":{tokens},"output_tokens":1}}}},"parent_tool_use_id":null}}"#
        ).as_bytes())
    }

    fn at_tokens(id: &str, tokens: u64) -> StreamEvent {
        assistant(id, tokens, r#"{"type":"text","text":"working"}"#)
    }

    fn result(text: &str, cost: f64) -> StreamEvent {
        decode_line(format!(
            r#"{{"type":"result","subtype":"success","is_error":false,"result":"{text}","total_cost_usd":{cost}}}"#
        ).as_bytes())
    }

    /// Feed `input` at `now`; what the machine answered.
    fn feed(m: &mut IterationMachine, input: Input, now: &Now) -> Vec<Effect> {
        let mut out = Vec::new();
        m.handle(input, now, &mut out);
        out
    }

    fn line(m: &mut IterationMachine, event: StreamEvent, now: &Now) -> Vec<Effect> {
        feed(m, Input::Line(event, now.mono), now)
    }

    /// The signals sent, with the reasons given.
    fn signals(out: &[Effect]) -> Vec<(Signal, String)> {
        let sent = out.iter().filter_map(|e| match e {
            Effect::Signal(s) => Some(*s),
            _ => None,
        });
        let why = out.iter().filter_map(|e| match e {
            Effect::Emit(Event::AgentSignalled { reason, .. }) => Some(reason.clone()),
            _ => None,
        });
        sent.zip(why).collect()
    }

    fn sig(s: Signal, why: &str) -> Vec<(Signal, String)> {
        vec![(s, why.to_string())]
    }

    fn requested(out: &[Effect]) -> Option<(Trigger, Option<String>)> {
        out.iter().find_map(|e| match e {
            Effect::Emit(Event::CheckpointRequested {
                trigger,
                notes_path,
                ..
            }) => Some((*trigger, notes_path.clone())),
            _ => None,
        })
    }

    #[test]
    fn l2_asks_for_notes_waits_the_grace_then_escalates() {
        let (mut m, t0) = machine(true);
        let t1 = after(&t0, 1);
        let out = line(&mut m, at_tokens("a", 86_000), &t1);
        let ask = out.iter().find_map(|e| match e {
            Effect::AskHandoff(r) => Some(r.clone()),
            _ => None,
        });
        let ask = ask.expect("a handoff request");
        assert_eq!(ask.notes_path, checkpoint::notes_path(3));
        assert_eq!(
            (ask.trigger, ask.level, ask.percent),
            (Trigger::Context, Level::L2, 86.0)
        );
        assert_eq!(
            ask.reason,
            "context reached L2 at 86.0% of the usable window"
        );
        // Nothing else happens to the agent until the request is out.
        assert!(
            !out.iter()
                .any(|e| matches!(e, Effect::CloseStdin | Effect::Signal(_)))
        );
        let out = feed(&mut m, Input::HandoffSent(true), &t1);
        assert!(matches!(out[0], Effect::CloseStdin));
        let notes = checkpoint::notes_path(3).display().to_string();
        assert_eq!(requested(&out), Some((Trigger::Context, Some(notes))));
        assert_eq!(signals(&out), vec![]);
        // The grace period, then SIGINT, SIGTERM, SIGKILL five seconds apart.
        assert_eq!(m.next_wake(), t0.mono + Duration::from_secs(1)); // the beat
        let out = feed(&mut m, Input::Wake, &after(&t0, 30));
        assert_eq!(signals(&out), vec![]);
        let steps = [
            (31, Signal::SIGINT, "grace period over"),
            (36, Signal::SIGTERM, "the agent did not exit"),
            (41, Signal::SIGKILL, "the agent did not exit"),
        ];
        for (at, s, why) in steps {
            let now = after(&t0, at);
            let before = Now {
                mono: now.mono - Duration::from_millis(1),
                ..now.clone()
            };
            assert_eq!(signals(&feed(&mut m, Input::Wake, &before)), vec![]);
            assert_eq!(signals(&feed(&mut m, Input::Wake, &now)), sig(s, why));
        }
        let facts = m.finish();
        assert_eq!(facts.notes_path, Some(checkpoint::notes_path(3)));
        assert_eq!(facts.stop_reason.as_deref(), Some(ask.reason.as_str()));
    }

    #[test]
    fn l3_during_the_grace_period_interrupts_at_once() {
        let (mut m, t0) = machine(true);
        line(&mut m, at_tokens("a", 86_000), &after(&t0, 1));
        feed(&mut m, Input::HandoffSent(true), &after(&t0, 1));
        let out = line(&mut m, at_tokens("b", 96_000), &after(&t0, 5));
        assert_eq!(
            signals(&out),
            sig(Signal::SIGINT, "context reached L3 during the grace period")
        );
        // L3 again after the interrupt does nothing more.
        let out = line(&mut m, at_tokens("c", 97_000), &after(&t0, 6));
        assert_eq!(signals(&out), vec![]);
        let mark = m.finish().checkpoint.unwrap();
        assert_eq!((mark.trigger, mark.level), (Trigger::Context, Level::L3));
    }

    #[test]
    fn l3_at_once_skips_the_notes() {
        let (mut m, t0) = machine(true);
        let out = line(&mut m, at_tokens("a", 96_000), &after(&t0, 1));
        assert!(!out.iter().any(|e| matches!(e, Effect::AskHandoff(_))));
        assert_eq!(requested(&out), Some((Trigger::Context, None)));
        assert_eq!(
            signals(&out),
            sig(
                Signal::SIGINT,
                "context reached L3 at 96.0% of the usable window"
            )
        );
    }

    #[test]
    fn a_result_already_in_gets_the_grace_otherwise_interrupt_now() {
        // (a result first, the signal sent when `ralph stop` arrives)
        for with_result in [false, true] {
            let (mut m, t0) = machine(false);
            if with_result {
                let out = line(&mut m, result("ok", 0.1), &after(&t0, 1));
                assert!(matches!(out[0], Effect::CloseStdin));
            }
            let out = feed(&mut m, Input::Request(Request::Stop), &after(&t0, 2));
            assert_eq!(requested(&out), Some((Trigger::Stop, None)));
            let expect = if with_result {
                vec![]
            } else {
                sig(Signal::SIGINT, "stop requested (ralph stop)")
            };
            assert_eq!(signals(&out), expect, "result in: {with_result}");
            let facts = m.finish();
            assert!(facts.stop_requested);
            assert_eq!(facts.checkpoint.unwrap().trigger, Trigger::Stop);
        }
    }

    #[test]
    fn interrupts_first_gently_then_at_once() {
        let (mut m, t0) = machine(true);
        let out = feed(&mut m, Input::Request(Request::Interrupt), &after(&t0, 1));
        // A signal asks for no notes, even with agent_handoff on.
        assert_eq!(requested(&out), Some((Trigger::Signal, None)));
        assert_eq!(
            signals(&out),
            sig(Signal::SIGINT, "interrupted (SIGINT/SIGTERM)")
        );
        let out = feed(&mut m, Input::Request(Request::Interrupt), &after(&t0, 2));
        assert_eq!(signals(&out), sig(Signal::SIGKILL, "second interrupt"));
        assert_eq!(m.finish().signals, SignalCount::Twice);
        // During the grace period of a checkpoint: skip the rest of it.
        let (mut m, t0) = machine(true);
        feed(
            &mut m,
            Input::Request(Request::Checkpoint("lunch".into())),
            &after(&t0, 1),
        );
        let out = feed(&mut m, Input::HandoffSent(true), &after(&t0, 1));
        assert_eq!(signals(&out), vec![]);
        let out = feed(&mut m, Input::Request(Request::Interrupt), &after(&t0, 2));
        assert_eq!(
            signals(&out),
            sig(Signal::SIGINT, "interrupted during the grace period")
        );
        let facts = m.finish();
        assert_eq!(facts.checkpoint.unwrap().trigger, Trigger::Manual);
        assert_eq!(
            facts.stop_reason.as_deref(),
            Some("checkpoint requested by hand (lunch)")
        );
        // A handoff that could not be sent: no grace without a result.
        let (mut m, t0) = machine(true);
        feed(&mut m, Input::Request(Request::Stop), &after(&t0, 1));
        let out = feed(&mut m, Input::HandoffSent(false), &after(&t0, 1));
        assert_eq!(requested(&out), Some((Trigger::Stop, None)));
        assert_eq!(signals(&out).len(), 1);
    }

    #[test]
    fn the_idle_deadline_follows_the_lines_arrival() {
        let (mut m, t0) = machine(false);
        // Received at 100 s, handled at 105 s.
        let arrived = after(&t0, 100).mono;
        feed(
            &mut m,
            Input::Line(at_tokens("a", 1000), arrived),
            &after(&t0, 105),
        );
        let out = feed(&mut m, Input::Wake, &after(&t0, 699));
        assert_eq!(requested(&out), None);
        let out = feed(&mut m, Input::Wake, &after(&t0, 700));
        assert_eq!(requested(&out), Some((Trigger::Timeout, None)));
        let why = "no output for 10m00s (loop.idle_timeout)";
        assert_eq!(signals(&out), sig(Signal::SIGINT, why));
        let facts = m.finish();
        assert_eq!(facts.timed_out.as_deref(), Some(why));
    }

    #[test]
    fn the_next_wake() {
        let ms = |t0: &Now, n: u64| Now {
            mono: t0.mono + Duration::from_millis(n),
            wall: t0.wall,
        };
        let (mut m, t0) = machine(false);
        assert_eq!(m.next_wake(), ms(&t0, 1000).mono, "the beat");
        // The beat is fixed: a second after it was last seen, lines or not.
        line(&mut m, at_tokens("a", 1000), &ms(&t0, 400));
        assert_eq!(m.next_wake(), ms(&t0, 1000).mono);
        let out = feed(&mut m, Input::Wake, &ms(&t0, 600_300));
        assert!(matches!(out.as_slice(), [Effect::Tick]));
        // Past the beat, the idle deadline (600 s after the last line)...
        assert_eq!(m.next_wake(), ms(&t0, 600_400).mono);
        // ...or the iteration timeout (3600 s after the start).
        let (mut m, t0) = machine(false);
        line(&mut m, at_tokens("a", 1000), &after(&t0, 3500));
        feed(&mut m, Input::Wake, &ms(&t0, 3_599_500));
        assert_eq!(m.next_wake(), after(&t0, 3600).mono);
        // Stopping: the stop sequence's next step, no more the timeouts.
        let (mut m, t0) = machine(false);
        line(&mut m, result("ok", 0.1), &after(&t0, 3590));
        feed(&mut m, Input::Request(Request::Stop), &after(&t0, 3590));
        feed(&mut m, Input::Wake, &ms(&t0, 3_619_500));
        assert_eq!(
            m.next_wake(),
            after(&t0, 3620).mono,
            "the grace period's end"
        );
    }

    fn snapshots(out: &[Effect]) -> Vec<SnapshotReason> {
        out.iter()
            .filter_map(|e| match e {
                Effect::Snapshot(r) => Some(*r),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn snapshots_every_interval_and_before_the_stop_only_while_the_agent_runs() {
        let (_, t0) = machine(false);
        let every = |secs| {
            let (m, _) = machine(true);
            let mut limits = m.limits.clone();
            limits.snapshot_every = secs;
            let meter = ContextMeter::new(100_000, 0, Thresholds::DEFAULT);
            IterationMachine::new(limits, meter, SignalCount::None, &t0)
        };
        // Off: no wake for it, no snapshot, not even before the stop.
        let mut m = every(None);
        assert_eq!(m.next_wake(), after(&t0, 1).mono);
        let mut all = feed(&mut m, Input::Wake, &after(&t0, 120));
        all.extend(line(&mut m, at_tokens("a", 86_000), &after(&t0, 121)));
        assert!(snapshots(&all).is_empty());

        let mut m = every(Some(Duration::from_secs(60)));
        assert!(snapshots(&feed(&mut m, Input::Wake, &after(&t0, 59))).is_empty());
        assert_eq!(m.next_wake(), after(&t0, 60).mono);
        let out = feed(&mut m, Input::Wake, &after(&t0, 60));
        assert_eq!(snapshots(&out), [SnapshotReason::Interval]);
        // The next one counts from when the last was taken.
        assert!(snapshots(&feed(&mut m, Input::Wake, &after(&t0, 119))).is_empty());
        let out = feed(&mut m, Input::Wake, &after(&t0, 120));
        assert_eq!(snapshots(&out), [SnapshotReason::Interval]);
        // L2: the tree is recorded before the agent is asked for anything.
        let out = line(&mut m, at_tokens("a", 86_000), &after(&t0, 121));
        let at = |want: fn(&Effect) -> bool| out.iter().position(want);
        let snap = at(|e| matches!(e, Effect::Snapshot(SnapshotReason::Stop)));
        let ask = at(|e| matches!(e, Effect::AskHandoff(_)));
        assert!(snap.is_some() && snap < ask, "{out:?}");
        assert_eq!(snapshots(&out).len(), 1);
        // Stopping: no interval snapshots any more (nor a second stop one).
        feed(&mut m, Input::HandoffSent(true), &after(&t0, 121));
        let mut all = feed(&mut m, Input::Wake, &after(&t0, 180));
        all.extend(feed(
            &mut m,
            Input::Request(Request::Stop),
            &after(&t0, 181),
        ));
        assert!(snapshots(&all).is_empty(), "{all:?}");
    }

    #[test]
    fn a_spent_budget_finishes_the_iteration() {
        let (mut m, t0) = machine(false);
        // The result says what was spent; the iteration's stop reason says so.
        line(&mut m, result("ok", 12.0), &after(&t0, 1));
        let out = feed(&mut m, Input::Wake, &after(&t0, 1));
        assert_eq!(requested(&out), Some((Trigger::Budget, None)));
        // The result is in: the agent gets the grace period to exit.
        assert_eq!(signals(&out), vec![]);
        let facts = m.finish();
        assert_eq!(facts.timed_out, None);
        assert_eq!(
            facts.stop_reason.as_deref(),
            Some("cost budget spent: $12.00 of loop.max_cost_usd $10.00: finishing the iteration")
        );
    }

    #[test]
    fn after_the_exit_lines_count_but_nothing_is_acted_on() {
        let (mut m, t0) = machine(true);
        let exit = Input::Exited {
            code: Some(0),
            signal: None,
        };
        let out = feed(&mut m, exit, &after(&t0, 2));
        assert!(matches!(
            out.as_slice(),
            [Effect::Emit(Event::AgentExited { iteration: 3, code: Some(0), seconds, .. })] if *seconds == 2.0
        ));
        let out = line(&mut m, at_tokens("a", 90_000), &after(&t0, 3));
        assert!(matches!(
            out[0],
            Effect::Emit(Event::LevelChanged { to: Level::L2, .. })
        ));
        assert!(out.iter().all(|e| matches!(e, Effect::Emit(_))), "{out:?}");
        let out = line(&mut m, result("ok", 0.5), &after(&t0, 3));
        assert!(out.is_empty(), "no stdin to close: {out:?}");
        for input in [
            Input::Wake,
            Input::Request(Request::Stop),
            Input::HandoffSent(true),
        ] {
            assert!(feed(&mut m, input, &after(&t0, 100)).is_empty());
        }
        // L2 crossed late: the work is still saved.
        let facts = m.finish();
        let mark = facts.checkpoint.unwrap();
        assert_eq!(
            (mark.trigger, mark.level, mark.percent),
            (Trigger::Context, Level::L2, 90.0)
        );
        assert_eq!(facts.stop_reason, None);
        let meter = facts.meter.unwrap();
        assert_eq!((meter.peak_tokens, meter.window), (90_000, 100_000));
    }

    #[test]
    fn line_accounting() {
        let (mut m, t0) = machine(false);
        let edit = |id: &str, path: &str| {
            assistant(
                id,
                1000,
                &format!(
                    r#"{{"type":"tool_use","id":"t{id}","name":"Edit","input":{{"file_path":"{path}"}}}}"#
                ),
            )
        };
        let out = line(&mut m, edit("a", "/repo/src/a.rs"), &after(&t0, 1));
        assert!(matches!(
            out.last(),
            Some(Effect::Emit(Event::Context { tool: Some(t), .. })) if t == "Edit src/a.rs"
        ));
        line(&mut m, edit("b", "/elsewhere/b.rs"), &after(&t0, 2));
        line(&mut m, edit("c", "/repo/src/a.rs"), &after(&t0, 3));
        let mut warnings = 0;
        for _ in 0..5 {
            let out = line(&mut m, decode_line(b"{not json"), &after(&t0, 4));
            warnings += out
                .iter()
                .filter(|e| matches!(e, Effect::Emit(Event::Warning { .. })))
                .count();
        }
        line(&mut m, at_tokens("d", 2000), &after(&t0, 5));
        line(
            &mut m,
            result("all done <promise>DONE</promise>", 0.25),
            &after(&t0, 6),
        );
        let facts = m.finish();
        assert_eq!(warnings, 3);
        assert_eq!(facts.invalid_lines, 5);
        // Most recent last, each once; paths inside the root made relative.
        assert_eq!(facts.files_touched, ["/elsewhere/b.rs", "src/a.rs"]);
        assert_eq!(facts.tool_calls.len(), 3);
        assert_eq!(facts.last_text.as_deref(), Some("working"));
        assert!(facts.promise);
        assert_eq!(facts.cost_usd, 0.25);
        assert_eq!(facts.checkpoint, None);
    }

    // --- the seams of the work (issue 14) ---------------------------------------------

    /// The machine with a plan to follow: "one", then "two" estimated at
    /// `two` tokens (high confidence: 5% margin).
    fn with_plan(two: Option<u64>, nudge: bool) -> (IterationMachine, Now) {
        let (m, t0) = machine(true);
        let plan = Plan::parse("- [ ] one\n- [ ] two\n");
        let estimates = two
            .map(|t| {
                let high = crate::formats::Confidence::High;
                (
                    "two".to_string(),
                    crate::plan::estimate::Estimate::known(t, high),
                )
            })
            .into_iter()
            .collect();
        let plan_path = PathBuf::from("/repo/fix_plan.md");
        let seams = SeamWatch {
            tracker: crate::plan::items::ItemTracker::new(Path::new("/repo"), &plan_path, &plan),
            plan_path,
            initial: plan,
            estimates,
            checkpoint_percent: 85.0,
            cap: None,
            nudge,
            nudged: false,
            split: false,
            items_per_session: 3,
        };
        (m.with_seams(seams), t0)
    }

    fn edit_plan(id: &str, tokens: u64) -> StreamEvent {
        assistant(
            id,
            tokens,
            r#"{"type":"tool_use","id":"t1","name":"Edit","input":{"file_path":"/repo/fix_plan.md","old_string":"- [ ] one","new_string":"- [x] one"}}"#,
        )
    }

    fn tool_result() -> StreamEvent {
        decode_line(br#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]},"parent_tool_use_id":null}"#)
    }

    #[test]
    fn boundary_rule_in_the_machine() {
        // (tokens when "one" is checked off, estimate of "two", boundary?)
        // L2 is at 85k of the 100k window.
        let table = [
            (50_000, Some(40_000), true),  // needs 42k, 35k left
            (30_000, Some(40_000), false), // 55k left
            (50_000, None, false),         // unknown item: nothing to go by
            (80_000, Some(4_000), false),  // small and fits, even past L1
        ];
        for (tokens, two, boundary) in table {
            let (mut m, t0) = with_plan(two, false);
            let t1 = after(&t0, 1);
            line(&mut m, at_tokens("a", 10_000), &t1);
            let out = line(&mut m, edit_plan("b", tokens), &t1);
            assert!(
                !out.iter().any(|e| matches!(e, Effect::ReadPlan(_))),
                "not before the result"
            );
            let out = line(&mut m, tool_result(), &t1);
            let Some(Effect::ReadPlan(path)) =
                out.into_iter().find(|e| matches!(e, Effect::ReadPlan(_)))
            else {
                panic!("the plan is re-read once the edit's result is in");
            };
            assert_eq!(path, PathBuf::from("/repo/fix_plan.md"));
            let done = Plan::parse("- [x] one\n- [ ] two\n");
            let out = feed(&mut m, Input::Plan(done), &t1);
            let checked = out
                .iter()
                .any(|e| matches!(e, Effect::Emit(Event::ItemChecked { .. })));
            assert!(checked, "{tokens}");
            let ask = out.iter().find_map(|e| match e {
                Effect::AskHandoff(r) => Some(r.trigger),
                _ => None,
            });
            assert_eq!(
                ask,
                boundary.then_some(Trigger::Boundary),
                "{tokens} {two:?}"
            );
            let facts = m.finish();
            let items = facts.items.expect("items followed");
            assert_eq!(items.checked, ["one"]);
            assert_eq!(items.spent[0], ("one".to_string(), tokens - 10_000));
            assert_eq!(
                facts.checkpoint.map(|c| c.trigger),
                boundary.then_some(Trigger::Boundary)
            );
        }
    }

    #[test]
    fn the_l1_nudge_is_sent_once_and_only_when_wanted() {
        let nudges = |out: &[Effect]| out.iter().filter(|e| matches!(e, Effect::Nudge(_))).count();
        let (mut m, t0) = with_plan(None, true);
        let t1 = after(&t0, 1);
        assert_eq!(nudges(&line(&mut m, at_tokens("a", 60_000), &t1)), 0);
        let out = line(&mut m, at_tokens("b", 72_000), &t1);
        assert_eq!(nudges(&out), 1);
        assert!(
            out.iter().any(
                |e| matches!(e, Effect::Emit(Event::Nudged { item: Some(i), .. }) if i == "one")
            )
        );
        assert_eq!(nudges(&line(&mut m, at_tokens("c", 75_000), &t1)), 0);
        // Down (a compaction) and up again: still once.
        let compact = decode_line(br#"{"type":"system","subtype":"compact_boundary","compact_metadata":{"trigger":"auto","pre_tokens":75000,"post_tokens":20000}}"#);
        line(&mut m, compact, &t1);
        assert_eq!(nudges(&line(&mut m, at_tokens("d", 72_000), &t1)), 0);

        // Off.
        let (mut m, t0) = with_plan(None, false);
        assert_eq!(
            nudges(&line(&mut m, at_tokens("a", 72_000), &after(&t0, 1))),
            0
        );
        // Already checkpointing (straight to L2): no nudge on the way.
        let (mut m, t0) = with_plan(None, true);
        assert_eq!(
            nudges(&line(&mut m, at_tokens("a", 86_000), &after(&t0, 1))),
            0
        );
    }

    #[test]
    fn new_checkbox_items_are_a_split_and_draining_is_booked_without_acting() {
        let (mut m, t0) = with_plan(Some(90_000), false);
        let t1 = after(&t0, 1);
        line(&mut m, at_tokens("a", 10_000), &t1);
        line(&mut m, at_tokens("b", 60_000), &t1);
        feed(
            &mut m,
            Input::Exited {
                code: Some(0),
                signal: None,
            },
            &t1,
        );
        // After the exit the final plan is still booked, but nothing is asked.
        let split = Plan::parse("- [x] one\n- [ ] two\n  - [ ] two, part 1\n  - [ ] two, part 2\n");
        let out = feed(&mut m, Input::Plan(split), &t1);
        assert!(!out.iter().any(|e| matches!(e, Effect::AskHandoff(_))));
        let items = m.finish().items.unwrap();
        assert!(items.split);
        assert_eq!(items.checked, ["one"]);
        assert_eq!(items.item.as_deref(), Some("one"));
    }
}
