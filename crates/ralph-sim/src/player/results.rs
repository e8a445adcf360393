//! How a turn ends: an API error (the synthetic message and its result), a scripted
//! result, the result line with the session's accounting, and the lines the real CLI
//! prints when SIGINT aborts it.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Flow, InFlight, Sim};
use crate::input::{Event, TOOL_PGID};
use crate::lines::{
    ResultSpec, ResultStats, ToolOutcome, default_error_text, result_line, synthetic_error_line,
    timestamp, tool_result_line, user_text_line,
};
use crate::step::{ErrorStep, ResultStep, Turn};
use crate::usage::{DEFAULT_OUTPUT_TOKENS, Totals, Usage};

impl Sim<'_> {
    pub(super) fn play_error(&mut self, error: &ErrorStep) -> Flow<()> {
        self.close_task()?;
        let text = error.text.clone().unwrap_or_else(|| {
            default_error_text(&error.kind, error.api_error_status, error.resets_in_secs)
        });
        let (msg_id, uuid) = (self.ids.msg_id(), self.ids.uuid());
        let line = synthetic_error_line(&self.ctx(), &msg_id, &text, &error.kind, &uuid);
        self.emit(&line)?;
        self.turns += 1;
        if let Some(code) = error.exit_code {
            self.exit_code = code;
        }
        let terminal_reason = error.terminal_reason.clone().unwrap_or_else(|| {
            if text.contains("Prompt is too long") {
                "prompt_too_long".into()
            } else {
                "api_error".into()
            }
        });
        self.emit_result(ResultSpec {
            subtype: "success".into(),
            is_error: true,
            text: Some(text),
            api_error_status: Some(error.api_error_status),
            errors: Vec::new(),
            permission_denials: Vec::new(),
            terminal_reason,
            stop_reason: "stop_sequence",
            cost_usd: error.cost_usd.or(self.cfg.cost_usd),
            num_turns: None,
        })
    }

    pub(super) fn play_result(&mut self, result: &ResultStep) -> Flow<()> {
        let text = result
            .text_file
            .as_ref()
            .and_then(|path| std::fs::read_to_string(path).ok())
            .map_or_else(|| result.text.clone(), |t| t.trim_end().to_string());
        let success = result.subtype == "success";
        // The real CLI's result text is the last assistant text: say it first.
        if success && !result.is_error && self.last_text.as_deref() != Some(&text) {
            let turn = Turn {
                text: Some(text.clone()),
                usage: result.context.map(Usage::from_context),
                output_tokens: DEFAULT_OUTPUT_TOKENS,
                ..Turn::default()
            };
            self.play_turn(&turn)?;
        }
        if let Some(code) = result.exit_code {
            self.exit_code = code;
        }
        self.emit_result(ResultSpec {
            subtype: result.subtype.clone(),
            is_error: result.is_error,
            text: success.then_some(text),
            api_error_status: result.api_error_status,
            errors: result.errors.clone(),
            permission_denials: result.permission_denials.clone(),
            terminal_reason: result.terminal_reason.clone(),
            stop_reason: if success { "end_turn" } else { "tool_use" },
            cost_usd: result.cost_usd.or(self.cfg.cost_usd),
            num_turns: result.num_turns,
        })
    }

    pub(super) fn emit_result(&mut self, spec: ResultSpec) -> Flow<()> {
        let computed = self.session.cost();
        if let Some(cost) = spec.cost_usd {
            self.cost_adjust = cost - computed;
        }
        let stats = ResultStats {
            duration_ms: self.started.elapsed().as_millis() as u64,
            num_turns: spec.num_turns.unwrap_or(self.turns.max(1)),
            turn: self.turn,
            session: self.session,
            cost: (computed + self.cost_adjust).max(0.0),
            context_window: self.cfg.context_window,
        };
        let uuid = self.ids.uuid();
        let line = result_line(&self.ctx(), &spec, &stats, &uuid);
        self.emit(&line)?;
        self.turn = Totals::default();
        self.turns = 0;
        Ok(())
    }

    /// SIGINT while running: what the real CLI prints before it exits 0.
    pub(super) fn abort(&mut self) -> Flow<()> {
        if TOOL_PGID.load(Ordering::SeqCst) > 0 {
            // Reap the killed tool so it is gone by the time anyone looks.
            let deadline = Instant::now() + Duration::from_millis(200);
            while let Ok(event) = self
                .rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                if matches!(event, Event::ToolDone(_)) {
                    break;
                }
            }
            TOOL_PGID.store(0, Ordering::SeqCst);
        }
        let in_flight = self.in_flight.take().or_else(|| {
            self.open_task.take().map(|task| InFlight {
                tool_id: task.id,
                parent: None,
            })
        });
        let ts = timestamp();
        let interrupted = if let Some(tool) = &in_flight {
            let outcome = ToolOutcome {
                content: Value::from(
                    "The user doesn't want to proceed with this tool use. The tool use was \
                     rejected (eg. if it was a file edit, the new_string was NOT written to the \
                     file). STOP what you are doing and wait for the user to tell you how to \
                     proceed.",
                ),
                is_error: Some(true),
                tool_use_result: Some(Value::from("User rejected tool use")),
            };
            let uuid = self.ids.uuid();
            let line = tool_result_line(
                &self.ctx(),
                &tool.tool_id,
                &outcome,
                tool.parent.as_deref(),
                &uuid,
                &ts,
            );
            self.emit(&line)?;
            "[Request interrupted by user for tool use]"
        } else {
            "[Request interrupted by user]"
        };
        let uuid = self.ids.uuid();
        let line = user_text_line(&self.ctx(), interrupted, None, &uuid, &ts);
        self.emit(&line)?;
        self.emit_result(ResultSpec::aborted())
    }
}
