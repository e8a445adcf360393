//! The handoff notes of a kind that takes no message mid-session but can
//! continue a stopped session by its id (`Capabilities::continues`:
//! opencode's `run --session ID`). At L2 such an agent is stopped cleanly
//! like any other; then, before the checkpoint is saved, its session is
//! continued once with the checkpoint request as the prompt, through the
//! same `Agent` and decoder, bounded by `context.grace` and stopped as any
//! agent is (SIGINT, SIGTERM, SIGKILL). The notes are read as Claude Code's
//! are, and the handoff then drops its "none could be asked for" sentence.
//! Its cost counts to the iteration's; its transcript is kept beside the
//! iteration's (`iter-NNN-continued.jsonl`).

use std::time::Duration;

use tokio::time::{Instant, sleep_until};

use super::Supervisor;
use super::driver::{self, handoff_text};
use super::facts::{CheckpointMark, Facts};
use super::iteration::HandoffRequest;
use super::stop::StopSequence;
use crate::agent::{Agent, AgentCommand};
use crate::checkpoint;
use crate::formats::Event;
use crate::formats::Trigger;
use crate::platform::signals::Request;
use crate::stream::StreamEvent;

/// How long its last lines may take to read once it exited.
const DRAIN: Duration = Duration::from_secs(5);

impl Supervisor {
    /// Ask a stopped session for its handoff notes in one more turn, when
    /// the kind can and notes are wanted: the context's L2 checkpoint
    /// (`context.agent_handoff`), no notes yet, the session's id known.
    pub(super) async fn continue_for_notes(&mut self, facts: &mut Facts, mark: CheckpointMark) {
        let kind = self.config.agent.kind;
        let wanted = kind.capabilities().continues
            && self.config.context.agent_handoff
            && mark.trigger == Trigger::Context
            && facts.notes_path.is_none();
        let Some(session) = facts.session_id.clone().filter(|_| wanted) else {
            return;
        };
        let grace = self.config.context.grace.0;
        let request = HandoffRequest {
            notes_path: checkpoint::notes_path(facts.number),
            percent: crate::context::round1(mark.percent),
            level: mark.level,
            tokens: mark.tokens,
            usable: self.state.context_window,
            grace,
            trigger: mark.trigger,
            reason: facts.stop_reason.clone().unwrap_or_default(),
        };
        let text = match handoff_text(&self.templates, &self.root, &request) {
            Ok(text) => text,
            Err(e) => return self.events.warn(e),
        };
        let cmd = AgentCommand::continuing(&self.config, facts.number, &self.root, &session);
        let transcript = self
            .layout
            .transcript(&self.state.run_id, facts.number)
            .with_file_name(format!("iter-{:03}-continued.jsonl", facts.number));
        let (mut agent, mut lines) = match Agent::spawn(&cmd, &self.root, &transcript) {
            Ok(x) => x,
            Err(e) => {
                return self.events.warn(format!(
                    "cannot continue the agent's session for handoff notes: {}",
                    e.render().trim_end().replace('\n', "; ")
                ));
            }
        };
        let _ = self.lock.set_agent(Some(agent.pid));
        let mut exited = driver::watch_exit(&mut agent);
        agent.send(&text).await;
        agent.close_stdin();
        let mut stop = StopSequence::Running;
        stop.begin(Instant::now().into_std(), grace, true);
        let mut cost = 0.0;
        let mut lines_open = true;
        loop {
            let wake = stop
                .deadline()
                .map_or_else(|| Instant::now() + grace, Instant::from_std);
            tokio::select! {
                biased;
                _ = &mut exited => break,
                line = lines.recv(), if lines_open => match line {
                    Some((StreamEvent::Result(r), _)) => cost += r.total_cost_usd,
                    Some(_) => {}
                    None => lines_open = false,
                },
                () = sleep_until(wake) => {
                    let now = Instant::now().into_std();
                    if stop.due(now).is_some() {
                        agent.signal(stop.escalate(now));
                    }
                }
                request = self.signals.next() => {
                    // Handled once it is over; a person stopping the run
                    // cuts it short (each interrupt one step further).
                    if matches!(request, Request::Interrupt | Request::Stop) {
                        agent.signal(stop.escalate(Instant::now().into_std()));
                    }
                    self.held.insert(0, request);
                }
            }
        }
        let drained = Instant::now() + DRAIN;
        while let Ok(Some((event, _))) = tokio::time::timeout_at(drained, lines.recv()).await {
            if let StreamEvent::Result(r) = event {
                cost += r.total_cost_usd;
            }
        }
        agent.join_readers();
        agent.end_leftovers();
        let _ = self.lock.set_agent(None);
        // The agent worked on: what the iteration's end walked is old.
        crate::repo::touched(&self.root);
        let written = self.root.join(&request.notes_path).is_file();
        if written {
            facts.notes_path = Some(request.notes_path.clone());
        }
        facts.cost_usd += cost;
        facts.continued = true;
        self.events.emit(
            Event::SessionContinued {
                iteration: facts.number,
                session_id: session,
                notes_path: request.notes_path.display().to_string(),
                notes_written: written,
                seconds: agent.started.elapsed().as_secs_f64(),
                cost_usd: cost,
            },
            &self.state,
            None,
        );
    }
}
