//! The async side of one iteration. It decides nothing: it waits for
//! whatever comes first — the agent's exit, a line, a request, the
//! machine's next wake, in that order of priority — hands it to the
//! [`IterationMachine`] as an [`Input`], and carries out the [`Effect`]s
//! that come back. After the exit it drains the lines left in the pipe.

use std::collections::VecDeque;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::sleep_until;

use super::Now;
use super::facts::Facts;
use super::iteration::{Effect, HandoffRequest, Input, IterationMachine, NudgeRequest};
use super::publish::Publisher;
use super::snapshots::SafetyNet;
use crate::agent::{Agent, Line};
use crate::config::templates::{self, Templates};
use crate::formats::{Event, StopStep};
use crate::formats::{Layout, RunState};
use crate::platform::signals::Catcher;
use crate::project::Lock;
use crate::text::format_duration;

/// How long the lines an agent left in its pipe may take to read once it
/// exited (nothing writes to the pipe any more: this only bounds a stuck
/// reader).
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// Wait for the agent's exit in a task of its own (so that waiting never
/// holds a borrow of the agent); the status arrives on the receiver.
pub(super) fn watch_exit(agent: &mut Agent) -> oneshot::Receiver<std::io::Result<ExitStatus>> {
    let (exit_tx, exited) = oneshot::channel();
    let mut child = agent.take_child();
    tokio::spawn(async move {
        let _ = exit_tx.send(child.wait().await);
    });
    exited
}

/// What one iteration's driver works with.
pub(super) struct Driver<'a> {
    /// Every event goes out through it (a rising level fires `on_level`),
    /// told the run's facts in `state`, as between iterations.
    events: &'a mut Publisher,
    state: &'a RunState,
    pub(crate) templates: &'a Templates,
    pub(crate) root: &'a Path,
    pub(crate) signals: &'a mut Catcher,
    /// Re-taken on the beat should a `git clean -fdx` delete it; the
    /// sessions of the agent's tools are recorded in it on the same beat (a
    /// takeover after a crash ends them).
    pub(crate) lock: &'a mut Lock,
    net: SafetyNet,
    /// Effects still to carry out (kept to spare an allocation per line).
    queue: VecDeque<Effect>,
    out: Vec<Effect>,
    /// The stop step the agent took for the last `Effect::Signal`, named by
    /// the `agent_signalled` event the machine emits right after it.
    stop_taken: Option<StopStep>,
}

impl<'a> Driver<'a> {
    pub(super) fn new(
        net: SafetyNet,
        (events, state): (&'a mut Publisher, &'a RunState),
        templates: &'a Templates,
        root: &'a Path,
        signals: &'a mut Catcher,
        lock: &'a mut Lock,
    ) -> Driver<'a> {
        Driver {
            events,
            state,
            templates,
            root,
            signals,
            lock,
            net,
            queue: VecDeque::new(),
            out: Vec::new(),
            stop_taken: None,
        }
    }

    /// Run the machine until the agent has exited and its lines are read.
    pub(super) async fn drive(
        mut self,
        mut machine: IterationMachine,
        agent: &mut Agent,
        mut lines: mpsc::Receiver<Line>,
        mut exited: oneshot::Receiver<std::io::Result<ExitStatus>>,
    ) -> Facts {
        // Before the agent's first answer (an API round trip away): stash
        // entries after this are its own.
        let stash_before = crate::repo::stash_ids(self.root);
        let mut lines_open = true;
        let status = loop {
            let input = tokio::select! {
                biased;
                status = &mut exited => break status.ok().and_then(Result::ok),
                line = lines.recv(), if lines_open => match line {
                    Some((event, at)) => Input::Line(event, at),
                    None => {
                        lines_open = false;
                        continue;
                    }
                },
                request = self.signals.next() => Input::Request(request),
                () = sleep_until(machine.next_wake().into()) => Input::Wake,
            };
            self.step(&mut machine, input, Some(agent)).await;
        };
        let exit = Input::Exited {
            code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s)),
        };
        self.step(&mut machine, exit, None).await;
        // Whatever the agent left behind ends with the iteration; then the
        // readers reach EOF and every line it wrote can be read: all of
        // them, up to the channel's end (an agent that printed thousands of
        // lines and exited at once has most of them still in the pipe).
        // Running on_level hooks are ralph's children too: let them end.
        self.events.settle();
        agent.end_leftovers();
        let drained = tokio::time::Instant::now() + DRAIN_LIMIT;
        while let Ok(Some((event, at))) = tokio::time::timeout_at(drained, lines.recv()).await {
            self.step(&mut machine, Input::Line(event, at), None).await;
        }
        agent.join_readers();
        // The plan as the agent left it: items checked off by other means
        // than Write/Edit (a shell command, a commit) are booked too.
        let project = crate::project::Project::at(self.root);
        if let Some(plan) = machine.plan_path().and_then(|p| project.plan_at(&p).ok()) {
            self.step(&mut machine, Input::Plan(plan), None).await;
        }
        let mut facts = machine.finish();
        // Read once the stderr reader has seen the end, not before: the
        // agent's last words on stderr explain why it failed.
        facts.stderr_tail = agent.stderr_tail();
        for message in agent.transcript_notes() {
            self.events.warn(message);
        }
        facts.stash_before = Some(stash_before);
        facts
    }

    /// Hand one input to the machine and carry out what it answers. An
    /// agent of `None` has exited: effects on it are dropped.
    async fn step(
        &mut self,
        machine: &mut IterationMachine,
        input: Input,
        mut agent: Option<&mut Agent>,
    ) {
        machine.handle(input, &Now::read(), &mut self.out);
        self.queue.extend(self.out.drain(..));
        while let Some(effect) = self.queue.pop_front() {
            match effect {
                Effect::Emit(mut event) => {
                    // The machine asks for a signal; the agent says which
                    // step it took (Codex: `turn/interrupt` while a turn runs).
                    if let (Event::AgentSignalled { signal, .. }, Some(taken)) =
                        (&mut event, self.stop_taken.take())
                    {
                        *signal = taken;
                    }
                    self.events.emit(event, self.state, None);
                }
                Effect::Tick => {
                    self.events.report();
                    // Within a beat of a `git clean -fdx`, the lock is ours
                    // again; another holder is found before the next iteration.
                    let layout = Layout::new(self.root);
                    let _ = crate::project::ownership::keep_runtime(
                        &layout,
                        self.lock,
                        self.events.bus(),
                    );
                    self.events.bus().tick();
                    let _ = self
                        .lock
                        .add_sessions(crate::agent::procs::descendant_sessions());
                }
                Effect::DetachDisplay => self.events.bus().detach(),
                Effect::Snapshot(reason) => {
                    if let Some(event) = self.net.record(reason) {
                        self.events.emit(event, self.state, None);
                    }
                }
                Effect::CloseStdin => {
                    if let Some(a) = agent.as_deref_mut() {
                        a.close_stdin();
                    }
                }
                Effect::Signal(sig) => {
                    if let Some(a) = agent.as_deref() {
                        self.stop_taken = Some(a.signal(sig));
                    }
                }
                Effect::ReadPlan(path) => {
                    // An unreadable plan (mid-write, deleted) is looked at next time.
                    if let Ok(plan) = crate::project::Project::at(self.root).plan_at(&path) {
                        machine.handle(Input::Plan(plan), &Now::read(), &mut self.out);
                        for e in self.out.drain(..).rev() {
                            self.queue.push_front(e);
                        }
                    }
                }
                Effect::Nudge(request) => {
                    if let Some(a) = agent.as_deref_mut() {
                        self.nudge(a, &request).await;
                    }
                }
                Effect::AskHandoff(request) => {
                    let sent = match agent.as_deref_mut() {
                        Some(a) => self.ask_handoff(a, &request).await,
                        None => false,
                    };
                    // The answer's effects come before the rest of the queue.
                    machine.handle(Input::HandoffSent(sent), &Now::read(), &mut self.out);
                    for e in self.out.drain(..).rev() {
                        self.queue.push_front(e);
                    }
                }
            }
        }
    }

    /// Render the L1 nudge and write it to the agent's stdin (unless its
    /// turn is over and stdin closed).
    async fn nudge(&mut self, agent: &mut Agent, r: &NudgeRequest) {
        if !agent.stdin_open() {
            return;
        }
        let text = self.templates.render(
            templates::NUDGE,
            minijinja::context! {
                percent => r.percent,
                tokens => r.tokens,
                usable => r.usable,
                item => &r.item,
            },
        );
        match text {
            Ok(text) => {
                agent.send(&text).await;
            }
            Err(e) => self.events.warn(format!("cannot render the L1 nudge: {e}")),
        }
    }

    /// Render the checkpoint request and write it to the agent's stdin.
    async fn ask_handoff(&mut self, agent: &mut Agent, r: &HandoffRequest) -> bool {
        if !agent.stdin_open() {
            return false;
        }
        match handoff_text(self.templates, self.root, r) {
            Ok(text) => agent.send(&text).await,
            Err(e) => {
                self.events.warn(e);
                false
            }
        }
    }
}

/// The checkpoint request `r` as the agent is sent it (mid-session, or as
/// the prompt of a continued session), its notes' directory made.
pub(super) fn handoff_text(
    templates: &Templates,
    root: &Path,
    r: &HandoffRequest,
) -> Result<String, String> {
    let _ = crate::formats::create_dir_private(
        &root.join(r.notes_path.parent().unwrap_or(Path::new("."))),
    );
    templates
        .render(
            templates::CHECKPOINT_REQUEST,
            minijinja::context! {
                percent => r.percent,
                level => r.level.name(),
                tokens => r.tokens,
                usable => r.usable,
                notes_path => r.notes_path.display().to_string(),
                grace => format_duration(r.grace),
                trigger => r.trigger.name(),
                reason => &r.reason,
            },
        )
        .map_err(|e| format!("cannot render the checkpoint request: {e}"))
}
