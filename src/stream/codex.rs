//! Decoding of `codex app-server` output: JSON-RPC messages without the
//! `"jsonrpc"` member, one object per line (read from the schema that
//! `codex app-server generate-json-schema` writes for the pinned version,
//! and from real output under `tests/fixtures/codex-*`).
//!
//! Each line becomes one of ralph's [`StreamEvent`]s, and, for the agent's
//! wire (`agent/codex.rs`), a [`Control`]: the ids of the thread and turn, a
//! turn's end, a request the server waits an answer for, the answer to one
//! of ralph's requests. What maps to what:
//!
//! | app-server | ralph |
//! | --- | --- |
//! | `thread/start` response (`model`, `thread.id`) | `Init` |
//! | `thread/tokenUsage/updated` (`last`, `modelContextWindow`) | `Assistant` with the usage of the model call and the window |
//! | `item/started` `commandExecution` / `fileChange` | `Assistant` with a tool call (`Bash`, `Write`/`Edit` per path) |
//! | `item/completed` `agentMessage` | `Assistant` with its text |
//! | `item/completed` `commandExecution` / `fileChange` | `User` (the tool's result is in) |
//! | `item/started` `contextCompaction` | `Compacted` |
//! | `error` with `willRetry` | `ApiRetry` |
//! | `turn/completed` | `Result` (`completed`: success; `failed`: the error, its HTTP status; `interrupted`) |
//! | `account/rateLimits/updated` (`primary`, `secondary`: `usedPercent`, `windowDurationMins`, `resetsAt`) | `RateLimit` with the subscription windows (the quota guard) |
//!
//! Codex reports no cost: results carry `total_cost_usd` 0.

use serde::Deserialize;
use serde_json::Value;

use super::raw::SUMMARY_LEN;
use super::{
    AssistantMessage, LineDecoder, ResultMessage, Shape, StreamEvent, ToolCall, Usage, WindowUsage,
};
use crate::text::cut_bytes;

/// What ralph reads of a long line: an `agentMessage`'s `text` in full; the
/// rest (a command's whole output in `aggregatedOutput`) is cut.
const SHAPE: Shape = Shape {
    words: &[b"text"],
    unread: &[],
    sparse: &[],
};

/// What the agent's wire needs to know of a line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Control {
    /// `thread/start` answered: the thread to start turns on.
    ThreadStarted { thread_id: String },
    /// A turn began (its id is what `turn/steer` and `turn/interrupt` name).
    TurnStarted { turn_id: String },
    /// The turn ended (completed, failed or interrupted).
    TurnEnded,
    /// The server asks and waits for an answer (approvals, user input).
    Request { id: Value, method: String },
    /// The answer to one of ralph's requests.
    Response { id: Value, error: Option<String> },
}

/// The decoder of one app-server process: lines in (bounded by the shared
/// [`LineDecoder`]), events out.
#[derive(Debug)]
pub struct CodexDecoder {
    lines: LineDecoder,
    session: Session,
}

/// What later lines need (the model, the last usage, the agent's last
/// words), and the control of the last line.
#[derive(Debug, Default)]
struct Session {
    model: String,
    calls: u64,
    last_tokens: u64,
    last_text: Option<String>,
    /// Requests declined since the last result.
    denials: Vec<String>,
    control: Option<Control>,
}

impl Default for CodexDecoder {
    fn default() -> CodexDecoder {
        CodexDecoder::new()
    }
}

impl CodexDecoder {
    pub(crate) fn new() -> CodexDecoder {
        CodexDecoder {
            lines: LineDecoder::of(SHAPE),
            session: Session::default(),
        }
    }

    /// Feed the next bytes: how many were consumed (up to the end of the
    /// current line), and the event if a line ended there.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> (usize, Option<StreamEvent>) {
        let session = &mut self.session;
        self.lines.push_with(bytes, |line| session.decode(line))
    }

    /// End of input: the last line, if it had no newline.
    pub(crate) fn finish(&mut self) -> Option<StreamEvent> {
        let session = &mut self.session;
        self.lines.finish_with(|line| session.decode(line))
    }

    /// What the last decoded line means for the wire (taken once).
    pub(crate) fn take_control(&mut self) -> Option<Control> {
        self.session.control.take()
    }
}

impl Session {
    /// Decode one line (or its compacted form).
    fn decode(&mut self, line: &[u8]) -> StreamEvent {
        self.control = None;
        match super::parse_object::<Wire>(line) {
            Ok(wire) => self.event(wire),
            Err(reason) => StreamEvent::Invalid {
                reason: format!("not a JSON-RPC message: {reason}"),
            },
        }
    }

    fn event(&mut self, wire: Wire) -> StreamEvent {
        let Some(method) = wire.method else {
            // A response to one of ralph's requests.
            let id = wire.id.unwrap_or(Value::Null);
            let result = wire.result.unwrap_or_default();
            let error = wire.error.map(|e| e.message);
            self.control = Some(Control::Response {
                id: id.clone(),
                error: error.clone(),
            });
            if let Some(thread) = result.thread {
                if let Some(model) = result.model {
                    self.model = model;
                }
                self.control = Some(Control::ThreadStarted {
                    thread_id: thread.id.clone(),
                });
                return StreamEvent::Init {
                    model: Some(self.model.clone()).filter(|m| !m.is_empty()),
                    session_id: Some(thread.id),
                };
            }
            return StreamEvent::Other {
                kind: match error {
                    Some(_) => "rpc_error".into(),
                    None => "rpc_response".into(),
                },
            };
        };
        let params = wire.params.unwrap_or_default();
        if let Some(id) = wire.id {
            // The server waits for an answer; the wire declines (headless:
            // nobody to ask), which the breaker counts as a denial.
            let what = params.command.or(params.reason).unwrap_or_default();
            self.denials.push(match what.is_empty() {
                true => method.clone(),
                false => format!("{method}: {}", cut_bytes(what, SUMMARY_LEN)),
            });
            self.control = Some(Control::Request {
                id,
                method: method.clone(),
            });
            return StreamEvent::Other { kind: method };
        }
        match method.as_str() {
            "thread/tokenUsage/updated" => self.usage(params),
            "account/rateLimits/updated" => match params.rate_limits {
                Some(limits) => StreamEvent::RateLimit {
                    // A usage limit reached comes as a failed turn; this is
                    // the account's usage so far.
                    status: "allowed".into(),
                    resets_at: None,
                    kind: None,
                    windows: limits.windows(),
                },
                None => StreamEvent::Other { kind: method },
            },
            "turn/started" => {
                if let Some(turn) = params.turn {
                    self.control = Some(Control::TurnStarted { turn_id: turn.id });
                }
                StreamEvent::Other { kind: method }
            }
            "item/started" => match params.item {
                Some(item) => self.item_started(item, method),
                None => StreamEvent::Other { kind: method },
            },
            "item/completed" => match params.item {
                Some(item) if item.kind == "agentMessage" => {
                    let text = item.text.unwrap_or_default();
                    self.last_text = Some(text.clone());
                    StreamEvent::Assistant(AssistantMessage {
                        id: item.id,
                        model: self.model.clone(),
                        text: vec![text],
                        ..AssistantMessage::default()
                    })
                }
                // A command or an edit ended: its result is in, as a tool
                // result line says for Claude Code (the plan it may have
                // changed is read again now, not at the session's end).
                Some(item) if matches!(item.kind.as_str(), "commandExecution" | "fileChange") => {
                    StreamEvent::User {
                        parent_tool_use_id: None,
                    }
                }
                _ => StreamEvent::Other { kind: method },
            },
            "error" if params.will_retry == Some(true) => {
                let error = params.error.unwrap_or_default();
                let (attempt, max_retries) = retry_count(&error.message);
                StreamEvent::ApiRetry {
                    attempt,
                    max_retries,
                    error_status: http_status(&error.codex_error_info),
                    error: Some(error.details()),
                }
            }
            "turn/completed" => {
                self.control = Some(Control::TurnEnded);
                match params.turn {
                    Some(turn) => self.result(turn),
                    None => StreamEvent::Other { kind: method },
                }
            }
            _ => StreamEvent::Other { kind: method },
        }
    }

    fn usage(&mut self, params: Params) -> StreamEvent {
        let Some(usage) = params.token_usage else {
            return StreamEvent::Other {
                kind: "thread/tokenUsage/updated".into(),
            };
        };
        let last = usage.last;
        // `inputTokens` counts the cached part too: the whole prompt, which
        // is what fills the window.
        let cached = last.cached_input_tokens.min(last.input_tokens);
        self.calls += 1;
        self.last_tokens = last.input_tokens;
        StreamEvent::Assistant(AssistantMessage {
            id: format!("{}#{}", params.turn_id.unwrap_or_default(), self.calls),
            model: self.model.clone(),
            usage: Usage {
                input_tokens: last.input_tokens - cached,
                output_tokens: last.output_tokens,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: cached,
            },
            context_window: usage.model_context_window.filter(|&w| w > 0),
            ..AssistantMessage::default()
        })
    }

    fn item_started(&mut self, item: Item, method: String) -> StreamEvent {
        let calls: Vec<ToolCall> = match item.kind.as_str() {
            "commandExecution" => vec![ToolCall {
                id: item.id,
                name: "Bash".into(),
                path: None,
                summary: item.command.map(|c| cut_bytes(c, SUMMARY_LEN)),
            }],
            "fileChange" => item
                .changes
                .into_iter()
                .map(|c| ToolCall {
                    id: item.id.clone(),
                    name: if c.kind.is_add() { "Write" } else { "Edit" }.into(),
                    path: Some(c.path),
                    summary: None,
                })
                .collect(),
            "contextCompaction" => {
                return StreamEvent::Compacted {
                    pre_tokens: self.last_tokens,
                    post_tokens: 0,
                };
            }
            _ => return StreamEvent::Other { kind: method },
        };
        StreamEvent::Assistant(AssistantMessage {
            id: format!("item:{}", calls.first().map_or("", |c| c.id.as_str())),
            model: self.model.clone(),
            tool_calls: calls,
            ..AssistantMessage::default()
        })
    }

    fn result(&mut self, turn: Turn) -> StreamEvent {
        let last_text = turn
            .items
            .iter()
            .rev()
            .find(|i| i.kind == "agentMessage")
            .and_then(|i| i.text.clone())
            .or_else(|| self.last_text.take());
        let (subtype, is_error) = match turn.status.as_str() {
            "completed" => ("success", false),
            // ralph's name for a turn that ended because it was stopped.
            "interrupted" => ("error_during_execution", true),
            _ => ("error", true),
        };
        let error = turn.error;
        ResultMessage {
            subtype: subtype.into(),
            is_error,
            api_error_status: error
                .as_ref()
                .and_then(|e| http_status(&e.codex_error_info)),
            text: match &error {
                Some(e) if is_error => Some(e.details()),
                _ => last_text,
            },
            total_cost_usd: 0.0,
            num_turns: 1,
            terminal_reason: Some(turn.status),
            errors: error.iter().map(TurnError::details).collect(),
            permission_denials: std::mem::take(&mut self.denials),
            ..ResultMessage::default()
        }
        .into()
    }
}

impl From<ResultMessage> for StreamEvent {
    fn from(r: ResultMessage) -> StreamEvent {
        StreamEvent::Result(r)
    }
}

/// "Reconnecting... 2/5" → (2, 5).
fn retry_count(message: &str) -> (u64, u64) {
    let counted = message.rsplit(' ').next().and_then(|n| n.split_once('/'));
    match counted.map(|(a, b)| (a.parse(), b.parse())) {
        Some((Ok(a), Ok(b))) => (a, b),
        _ => (0, 0),
    }
}

/// The HTTP status an error stands for: the one it names, else the one its
/// kind means (a usage limit is a 429, as Claude Code reports it).
fn http_status(info: &Value) -> Option<u64> {
    if let Some(obj) = info.as_object() {
        return obj
            .values()
            .find_map(|v| v.get("httpStatusCode").and_then(Value::as_u64));
    }
    Some(match info.as_str()? {
        "usageLimitExceeded" | "rateLimitExceeded" => 429,
        "internalServerError" => 500,
        "serverOverloaded" => 529,
        "unauthorized" => 401,
        "badRequest" | "contextWindowExceeded" => 400,
        "modelNotFound" => 404,
        _ => return None,
    })
}

// ---- the wire shapes, with only the fields ralph reads ----

#[derive(Deserialize)]
struct Wire {
    id: Option<Value>,
    method: Option<String>,
    params: Option<Params>,
    result: Option<RpcResult>,
    error: Option<RpcError>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Params {
    turn_id: Option<String>,
    token_usage: Option<TokenUsage>,
    turn: Option<Turn>,
    item: Option<Item>,
    error: Option<TurnError>,
    will_retry: Option<bool>,
    rate_limits: Option<RateLimits>,
    // Requests from the server.
    command: Option<String>,
    reason: Option<String>,
}

/// The account's usage of its subscription windows (`x-codex-primary-*`
/// and `x-codex-secondary-*` response headers, as Codex passes them on).
#[derive(Deserialize, Default)]
#[serde(default)]
struct RateLimits {
    primary: Option<RateWindow>,
    secondary: Option<RateWindow>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RateWindow {
    used_percent: f64,
    window_duration_mins: Option<u64>,
    resets_at: Option<i64>,
}

impl RateLimits {
    /// In the quota guard's names: the 5-hour and weekly windows by their
    /// length, else by place (Codex's primary window is the 5-hour one,
    /// its secondary the weekly one).
    fn windows(self) -> Vec<WindowUsage> {
        [(self.primary, "five_hour"), (self.secondary, "seven_day")]
            .into_iter()
            .filter_map(|(window, by_place)| {
                let w = window?;
                let name = match w.window_duration_mins {
                    Some(300) => "five_hour",
                    Some(10_080) => "seven_day",
                    Some(_) => return None,
                    None => by_place,
                };
                Some(WindowUsage {
                    name: name.into(),
                    utilization: w.used_percent / 100.0,
                    resets_at: w.resets_at,
                })
            })
            .collect()
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RpcResult {
    model: Option<String>,
    thread: Option<Thread>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RpcError {
    message: String,
}

#[derive(Deserialize)]
struct Thread {
    id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TokenUsage {
    last: Breakdown,
    model_context_window: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct Breakdown {
    input_tokens: u64,
    cached_input_tokens: u64,
    output_tokens: u64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Turn {
    id: String,
    status: String,
    items: Vec<Item>,
    error: Option<TurnError>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct TurnError {
    message: String,
    additional_details: Option<String>,
    codex_error_info: Value,
}

impl TurnError {
    fn details(&self) -> String {
        match &self.additional_details {
            Some(d) if !d.is_empty() && !self.message.contains(d.as_str()) => {
                format!("{} ({d})", self.message)
            }
            _ => self.message.clone(),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Item {
    #[serde(rename = "type")]
    kind: String,
    id: String,
    text: Option<String>,
    command: Option<String>,
    changes: Vec<FileChange>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct FileChange {
    path: String,
    kind: ChangeKind,
}

/// `{"type": "add"}`, or the plain string of older versions.
#[derive(Deserialize, Default)]
#[serde(untagged)]
enum ChangeKind {
    Tagged {
        #[serde(rename = "type")]
        kind: String,
    },
    Plain(String),
    #[default]
    Unknown,
}

impl ChangeKind {
    fn is_add(&self) -> bool {
        matches!(self, ChangeKind::Tagged { kind } | ChangeKind::Plain(kind) if kind == "add")
    }
}

#[cfg(test)]
mod tests {
    use super::super::MAX_COMPACTED;
    use super::*;

    const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/codex-0.169.0/");

    /// Every event and control of a recorded session, fed in chunks of
    /// `chunk` bytes (lines split anywhere).
    fn decode(name: &str, chunk: usize) -> (Vec<StreamEvent>, Vec<Control>) {
        let bytes = std::fs::read(format!("{DIR}{name}.out.jsonl")).unwrap();
        let mut d = CodexDecoder::new();
        let (mut events, mut controls) = (Vec::new(), Vec::new());
        for mut rest in bytes.chunks(chunk) {
            while !rest.is_empty() {
                let (used, event) = d.push(rest);
                events.extend(event);
                controls.extend(d.take_control());
                rest = &rest[used..];
            }
        }
        events.extend(d.finish());
        (events, controls)
    }

    #[test]
    fn rate_limits_feed_the_quota_guard() {
        let mut d = CodexDecoder::new();
        let line = br#"{"method":"account/rateLimits/updated","params":{"rateLimits":{"limitId":"codex","primary":{"usedPercent":62,"windowDurationMins":300,"resetsAt":1795500000},"secondary":{"usedPercent":91.5,"windowDurationMins":10080,"resetsAt":1796000000},"credits":null,"planType":"plus"}}}"#;
        let StreamEvent::RateLimit {
            status, windows, ..
        } = d.session.decode(line)
        else {
            panic!("a rate limit event");
        };
        assert_eq!(status, "allowed");
        assert_eq!(
            windows,
            [
                WindowUsage {
                    name: "five_hour".into(),
                    utilization: 0.62,
                    resets_at: Some(1_795_500_000)
                },
                WindowUsage {
                    name: "seven_day".into(),
                    utilization: 0.915,
                    resets_at: Some(1_796_000_000)
                },
            ]
        );
        // What the recordings hold without the headers: nothing to guard.
        let empty = br#"{"method":"account/rateLimits/updated","params":{"rateLimits":{"limitId":"codex","primary":null,"secondary":null}}}"#;
        assert!(
            matches!(d.session.decode(empty), StreamEvent::RateLimit { windows, .. } if windows.is_empty())
        );
        // A window of another length is none of the guard's.
        let other = br#"{"method":"account/rateLimits/updated","params":{"rateLimits":{"primary":{"usedPercent":5,"windowDurationMins":60}}}}"#;
        assert!(
            matches!(d.session.decode(other), StreamEvent::RateLimit { windows, .. } if windows.is_empty())
        );
    }

    fn result(events: &[StreamEvent]) -> &ResultMessage {
        let results: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Result(r) => Some(r),
                _ => None,
            })
            .collect();
        assert_eq!(results.len(), 1);
        results[0]
    }

    fn usages(events: &[StreamEvent]) -> Vec<(u64, Option<u64>)> {
        events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Assistant(m) if m.usage.occupancy() > 0 => {
                    Some((m.usage.occupancy(), m.context_window))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_session_that_writes_a_file_and_completes() {
        for chunk in [1 << 20, 7] {
            let (events, controls) = decode("write-file", chunk);
            assert!(
                events
                    .iter()
                    .all(|e| !matches!(e, StreamEvent::Invalid { .. }))
            );
            let init = events.iter().find_map(|e| match e {
                StreamEvent::Init { model, session_id } => {
                    Some((model.clone(), session_id.clone()))
                }
                _ => None,
            });
            let (model, thread) = init.expect("an init");
            assert_eq!(model.as_deref(), Some("gpt-5.1-codex"));
            let thread = thread.unwrap();
            assert_eq!(
                controls.first(),
                Some(&Control::Response {
                    id: 1.into(),
                    error: None
                })
            );
            assert!(controls.contains(&Control::ThreadStarted {
                thread_id: thread.clone()
            }));
            assert!(matches!(controls.last(), Some(Control::TurnEnded)));
            assert_eq!(
                controls
                    .iter()
                    .filter(|c| matches!(c, Control::TurnStarted { .. }))
                    .count(),
                1
            );
            let calls: Vec<_> = events
                .iter()
                .filter_map(|e| match e {
                    StreamEvent::Assistant(m) => Some(m.tool_calls.clone()),
                    _ => None,
                })
                .flatten()
                .collect();
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0].name, "Bash");
            assert_eq!(
                calls[0].summary.as_deref(),
                Some("/bin/bash -lc 'echo hello > out.txt'")
            );
            // One usage per model call, each with the window.
            assert_eq!(
                usages(&events),
                [(1000, Some(258_400)), (2000, Some(258_400))]
            );
            let r = result(&events);
            assert!(!r.is_error);
            assert_eq!(r.subtype, "success");
            assert_eq!(
                r.text.as_deref(),
                Some("Wrote out.txt. <promise>COMPLETE</promise>")
            );
            assert_eq!(r.total_cost_usd, 0.0);
        }
    }

    #[test]
    fn retries_then_an_api_error() {
        let (events, _) = decode("api-error", 1 << 20);
        let retries: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ApiRetry {
                    attempt,
                    max_retries,
                    ..
                } => Some((*attempt, *max_retries)),
                _ => None,
            })
            .collect();
        assert_eq!(retries, [(1, 5), (2, 5), (3, 5), (4, 5), (5, 5)]);
        let r = result(&events);
        assert!(r.is_error);
        assert_eq!(r.subtype, "error");
        assert_eq!(r.api_error_status, Some(500));
        assert!(
            r.text.as_deref().unwrap().contains("high demand"),
            "{:?}",
            r.text
        );
    }

    #[test]
    fn a_usage_limit_is_a_429_with_its_reset_time() {
        let (events, _) = decode("usage-limit", 1 << 20);
        let r = result(&events);
        assert_eq!(r.api_error_status, Some(429));
        let text = r.text.as_deref().unwrap();
        assert!(text.contains("hit your usage limit"), "{text}");
        // Recorded at 05:47 UTC: "try again at 6:47 AM".
        let now: jiff::Zoned = "2026-11-24T05:47:00[UTC]".parse().unwrap();
        let hit = crate::rules::limits::from_result(r, &now).expect("a limit");
        assert_eq!(hit.source, crate::rules::limits::LimitSource::Http429);
        assert_eq!(hit.resets_at, Some("2026-11-24T06:47:00Z".parse().unwrap()));
    }

    #[test]
    fn a_steer_goes_in_and_compactions_reset_the_meter() {
        let (events, controls) = decode("steer", 4096);
        let responses = controls
            .iter()
            .filter(|c| matches!(c, Control::Response { id, error: None } if *id == 10))
            .count();
        assert_eq!(responses, 1, "the steer was accepted");
        let compactions = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::Compacted { .. }))
            .count();
        assert!(compactions > 5, "{compactions}");
        // Codex compacted first once a call had passed 244,800 tokens (90%
        // of its 272k window; 94.7% of the 258,400 it reports).
        let first = events
            .iter()
            .position(|e| matches!(e, StreamEvent::Compacted { .. }))
            .unwrap();
        let before = usages(&events[..first]);
        let [.., (below, _), (past, window)] = before[..] else {
            panic!("{before:?}")
        };
        assert!(below < 244_800 && past >= 244_800, "{before:?}");
        assert_eq!(window, Some(258_400));
        assert_eq!(
            events[first],
            StreamEvent::Compacted {
                pre_tokens: past,
                post_tokens: 0
            }
        );
        assert!(!result(&events).is_error);
    }

    #[test]
    fn an_interrupted_turn_is_a_result_ralph_stopped() {
        let (events, controls) = decode("interrupt", 1 << 20);
        let r = result(&events);
        assert!(r.is_error);
        assert_eq!(r.subtype, "error_during_execution");
        assert_eq!(r.terminal_reason.as_deref(), Some("interrupted"));
        assert!(matches!(controls.last(), Some(Control::TurnEnded)));
    }

    #[test]
    fn server_requests_are_controls_and_denials() {
        let mut d = CodexDecoder::new();
        let e = d.session.decode(br#"{"method":"item/commandExecution/requestApproval","id":7,"params":{"threadId":"t","turnId":"u","itemId":"i","command":"rm -rf /"}}"#);
        assert_eq!(
            e,
            StreamEvent::Other {
                kind: "item/commandExecution/requestApproval".into()
            }
        );
        assert_eq!(
            d.take_control(),
            Some(Control::Request {
                id: 7.into(),
                method: "item/commandExecution/requestApproval".into()
            })
        );
        let e = d.session.decode(br#"{"method":"turn/completed","params":{"threadId":"t","turn":{"id":"u","items":[],"status":"completed"}}}"#);
        let StreamEvent::Result(r) = e else {
            panic!("{e:?}")
        };
        assert_eq!(
            r.permission_denials,
            ["item/commandExecution/requestApproval: rm -rf /"]
        );
    }

    #[test]
    fn a_command_or_an_edit_that_ended_is_a_tool_result() {
        let mut d = CodexDecoder::new();
        let started = d.session.decode(br#"{"method":"item/started","params":{"item":{"type":"fileChange","id":"p1","changes":[{"path":"/p/fix_plan.md","kind":{"type":"update","move_path":null},"diff":""}],"status":"inProgress"},"threadId":"t","turnId":"u"}}"#);
        let StreamEvent::Assistant(m) = started else {
            panic!("{started:?}")
        };
        assert_eq!(m.tool_calls[0].name, "Edit");
        assert_eq!(m.tool_calls[0].path.as_deref(), Some("/p/fix_plan.md"));
        for item in [
            r#"{"type":"fileChange","id":"p1","changes":[],"status":"completed"}"#,
            r#"{"type":"commandExecution","id":"c1","command":"sed -i s/x/y/ fix_plan.md","exitCode":0}"#,
        ] {
            let line = format!(
                r#"{{"method":"item/completed","params":{{"item":{item},"threadId":"t","turnId":"u"}}}}"#
            );
            assert_eq!(
                d.session.decode(line.as_bytes()),
                StreamEvent::User {
                    parent_tool_use_id: None
                }
            );
        }
        let reasoning = br#"{"method":"item/completed","params":{"item":{"type":"reasoning","id":"r1"},"threadId":"t","turnId":"u"}}"#;
        assert!(matches!(
            d.session.decode(reasoning),
            StreamEvent::Other { .. }
        ));
    }

    #[test]
    fn bad_and_endless_lines_are_invalid_and_bounded() {
        let mut d = CodexDecoder::new();
        assert!(matches!(
            d.session.decode(b"not json"),
            StreamEvent::Invalid { .. }
        ));
        let mut big = vec![b'x'; 5 * MAX_COMPACTED];
        big.push(b'\n');
        let (used, e) = d.push(&big[..MAX_COMPACTED / 2]);
        assert_eq!((used, e), (MAX_COMPACTED / 2, None));
        let (_, e) = d.push(&big[MAX_COMPACTED / 2..]);
        assert!(matches!(e, Some(StreamEvent::Invalid { .. })));
        let (_, e) = d.push(b"{\"method\":\"warning\",\"params\":{}}\n");
        assert_eq!(
            e,
            Some(StreamEvent::Other {
                kind: "warning".into()
            })
        );
    }

    #[test]
    fn a_command_output_of_any_length_is_skipped_not_read() {
        // 20 MiB of output in one `item/completed` (cut while it streams
        // past), then the agent's words, read whole however long.
        let output = "error: \\\"quoted\\\"\\n".repeat(1_200_000);
        let words = "All done. ".repeat(20_000);
        let stream = format!(
            "{{\"method\":\"item/completed\",\"params\":{{\"item\":{{\"type\":\"commandExecution\",\"id\":\"c1\",\"command\":\"make\",\"aggregatedOutput\":\"{output}\",\"exitCode\":1}},\"threadId\":\"t\",\"turnId\":\"u\"}}}}\n\
             {{\"method\":\"item/completed\",\"params\":{{\"item\":{{\"type\":\"agentMessage\",\"id\":\"m1\",\"text\":\"{words}\"}},\"threadId\":\"t\",\"turnId\":\"u\"}}}}\n"
        );
        assert!(stream.len() > 20 << 20);
        let mut d = CodexDecoder::new();
        let mut events = Vec::new();
        for mut rest in stream.as_bytes().chunks(128 << 10) {
            while !rest.is_empty() {
                let (used, e) = d.push(rest);
                events.extend(e);
                rest = &rest[used..];
            }
        }
        let [StreamEvent::User { .. }, StreamEvent::Assistant(m)] = &events[..] else {
            panic!("{} events", events.len())
        };
        assert!(m.text == [words], "the words read whole");
    }
}
