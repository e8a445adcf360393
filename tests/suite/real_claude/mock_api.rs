//! A mock of the Anthropic Messages API on 127.0.0.1, for the real Claude
//! Code CLI (`ANTHROPIC_BASE_URL`), served by the suite's one loopback HTTP
//! server (`agent_mock::server`).
//!
//! Main-conversation requests (`POST /v1/messages` with `tools`) go to the
//! test's script, which answers with a [`Reply`]: an SSE stream of
//! `message_start`, `content_block_start/delta/stop` (text, `tool_use` with
//! `input_json_delta`), `message_delta` (with usage) and `message_stop`, or
//! an error status. Everything else the CLI may send (`count_tokens`, a
//! tool-less side query such as a title, `HEAD` connectivity checks) gets a
//! sensible canned answer. `MockApi::start_raw` serves another API the same
//! way (Codex's Responses API, `real_codex/mock_responses.rs`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::agent_mock::server::{MockServer, Request, Responder, Response};

/// One request as the mock received it (the server's, with the Messages
/// API's reading of it below).
pub type ApiRequest = Request;

impl ApiRequest {
    /// The CLI's session id: one per agent process.
    pub fn session(&self) -> Option<&str> {
        self.header("x-claude-code-session-id")
    }

    pub fn model(&self) -> &str {
        self.body["model"].as_str().unwrap_or("")
    }

    pub fn messages(&self) -> &[Value] {
        self.body["messages"].as_array().map_or(&[], Vec::as_slice)
    }

    /// Assistant turns already in the conversation: 0 for a session's first request.
    pub fn assistant_turns(&self) -> usize {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count()
    }

    /// All text of the first user message (the prompt, with the CLI's reminders).
    pub fn first_user_text(&self) -> String {
        self.messages()
            .iter()
            .find(|m| m["role"] == "user")
            .map(|m| text_of(&m["content"]))
            .unwrap_or_default()
    }

    /// All text of the last user message: tool results included, where the
    /// CLI puts messages that arrived on stdin while a tool ran.
    pub fn last_user_text(&self) -> String {
        self.messages()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .map(|m| text_of(&m["content"]))
            .unwrap_or_default()
    }

    /// All text of every message.
    pub fn all_text(&self) -> String {
        self.messages()
            .iter()
            .map(|m| text_of(&m["content"]))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// `(name, input)` of every tool call the assistant made so far.
    pub fn assistant_tool_uses(&self) -> Vec<(String, Value)> {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| {
                (
                    b["name"].as_str().unwrap_or("").to_string(),
                    b["input"].clone(),
                )
            })
            .collect()
    }

    /// `(tool_use_id, content, is_error)` of the tool results in the last message.
    pub fn last_tool_results(&self) -> Vec<(String, String, bool)> {
        let Some(last) = self.messages().last() else {
            return Vec::new();
        };
        last["content"]
            .as_array()
            .map(|blocks| {
                blocks
                    .iter()
                    .filter(|b| b["type"] == "tool_result")
                    .map(|b| {
                        (
                            b["tool_use_id"].as_str().unwrap_or("").to_string(),
                            text_of(&b["content"]),
                            b["is_error"].as_bool().unwrap_or(false),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn summary(&self) -> String {
        format!(
            "#{} {} {} model={} tools={} messages={} session={}",
            self.seq,
            self.method,
            self.path,
            self.model(),
            self.body["tools"].as_array().map_or(0, Vec::len),
            self.messages().len(),
            self.session().unwrap_or("-"),
        )
    }
}

/// The text in a message's `content`: a string, or blocks of text and tool
/// results (whose own content is a string or blocks).
pub fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| match b["type"].as_str() {
                Some("text") => b["text"].as_str().unwrap_or("").to_string(),
                Some("tool_result") => text_of(&b["content"]),
                _ => String::new(),
            })
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// One content block of a scripted answer.
#[derive(Debug, Clone)]
pub enum Block {
    Text(String),
    ToolUse { name: String, input: Value },
}

/// The script's answer to one main-conversation request.
#[derive(Debug, Clone)]
pub enum Reply {
    Message {
        blocks: Vec<Block>,
        /// Context occupancy the message reports: what ralph's meter reads.
        occupancy: u64,
        delay: Duration,
        /// Response headers beyond the usual (`anthropic-ratelimit-unified-*`).
        headers: Vec<(String, String)>,
    },
    Error {
        status: u16,
        kind: String,
        message: String,
        /// Response headers beyond the usual (`retry-after`, rate limits).
        headers: Vec<(String, String)>,
    },
}

impl Reply {
    /// An assistant message whose usage says `occupancy` tokens are in context.
    pub fn turn(occupancy: u64) -> Reply {
        Reply::Message {
            blocks: Vec::new(),
            occupancy,
            delay: Duration::ZERO,
            headers: Vec::new(),
        }
    }

    /// The subscription usage headers the API sends a claude.ai login
    /// (Claude Code 2.1.328 reads them into `rate_limit_event` lines only
    /// when logged in that way, `CLAUDE_CODE_OAUTH_TOKEN`): the 5-hour and
    /// weekly windows used by these fractions, resetting in 1 h and 3 days.
    pub fn usage_limits(mut self, five_hour: f64, seven_day: f64) -> Reply {
        if let Reply::Message { headers, .. } = &mut self {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            let (reset5, reset7) = (now + 3600, now + 3 * 86400);
            let warn = |u: f64| {
                if u >= 0.75 {
                    "allowed_warning"
                } else {
                    "allowed"
                }
            };
            for (k, v) in [
                ("status", "allowed".to_string()),
                ("reset", reset5.to_string()),
                ("5h-utilization", five_hour.to_string()),
                ("5h-reset", reset5.to_string()),
                ("5h-status", warn(five_hour).to_string()),
                ("7d-utilization", seven_day.to_string()),
                ("7d-reset", reset7.to_string()),
                ("7d-status", warn(seven_day).to_string()),
            ] {
                headers.push((format!("anthropic-ratelimit-unified-{k}"), v));
            }
        }
        self
    }

    /// Answer only after `wait`.
    pub fn after(mut self, wait: Duration) -> Reply {
        if let Reply::Message { delay, .. } = &mut self {
            *delay = wait;
        }
        self
    }

    pub fn text(mut self, text: &str) -> Reply {
        if let Reply::Message { blocks, .. } = &mut self {
            blocks.push(Block::Text(text.to_string()));
        }
        self
    }

    pub fn tool(mut self, name: &str, input: Value) -> Reply {
        if let Reply::Message { blocks, .. } = &mut self {
            blocks.push(Block::ToolUse {
                name: name.to_string(),
                input,
            });
        }
        self
    }

    pub fn error(status: u16, kind: &str, message: &str) -> Reply {
        Reply::Error {
            status,
            kind: kind.to_string(),
            message: message.to_string(),
            headers: Vec::new(),
        }
    }

    /// The API's refusal for a rate limit (429) or overload (529) with the
    /// headers that say when to come back: `retry-after` and the unified
    /// rate limit's status and reset, `reset_in` from now.
    pub fn limited(status: u16, reset_in: Duration) -> Reply {
        let kind = if status == 529 {
            "overloaded_error"
        } else {
            "rate_limit_error"
        };
        let mut reply = Reply::error(status, kind, "E2E: rate limited");
        if let Reply::Error { headers, .. } = &mut reply {
            let reset = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                + reset_in.as_secs();
            for (k, v) in [
                ("retry-after", reset_in.as_secs().to_string()),
                ("anthropic-ratelimit-unified-status", "rejected".into()),
                ("anthropic-ratelimit-unified-reset", reset.to_string()),
                ("anthropic-ratelimit-unified-5h-status", "rejected".into()),
                ("anthropic-ratelimit-unified-5h-reset", reset.to_string()),
                ("anthropic-ratelimit-unified-5h-utilization", "1.0".into()),
            ] {
                headers.push((k.to_string(), v));
            }
        }
        reply
    }
}

type Script = dyn Fn(&ApiRequest) -> Reply + Send + Sync;
/// A whole HTTP response for a request (another provider's API).
type RawScript = dyn Fn(&ApiRequest) -> Response + Send + Sync;

/// The Messages API: main requests (with tools) go to the script.
struct Messages(Box<Script>);

fn is_messages(r: &Request) -> bool {
    r.method == "POST" && (r.path == "/v1/messages" || r.path.starts_with("/v1/messages?"))
}

impl Responder for Messages {
    fn is_main(&self, r: &Request) -> bool {
        is_messages(r) && r.body["tools"].as_array().is_some_and(|t| !t.is_empty())
    }

    fn respond(&self, request: &Request) -> Response {
        let id = request.seq;
        match (request.method.as_str(), request.path.as_str()) {
            ("HEAD", _) => http(200, "text/plain", id, &[]),
            ("POST", p) if p.starts_with("/v1/messages/count_tokens") => {
                http(200, "application/json", id, br#"{"input_tokens":1000}"#)
            }
            _ if request.is_main() => {
                // A panicking script answers as the API would fail, and its
                // panic text stays in the test's output.
                let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    (self.0)(request)
                }))
                .unwrap_or_else(|_| Reply::error(500, "api_error", "the mock's script panicked"));
                render(reply, request)
            }
            // A side query (title, summary, quota probe): a short answer.
            _ if is_messages(request) => render(Reply::turn(1000).text("ok"), request),
            _ => http(
                404,
                "application/json",
                id,
                json!({"type": "error", "error": {"type": "not_found_error", "message": format!("the mock has no {}", request.path)}})
                    .to_string()
                    .as_bytes(),
            ),
        }
    }
}

/// Another API: `POST …/responses` counts as a main request.
struct Raw(Box<RawScript>);

impl Responder for Raw {
    fn is_main(&self, r: &Request) -> bool {
        r.method == "POST" && r.path.ends_with("/responses")
    }

    fn respond(&self, request: &Request) -> Response {
        (self.0)(request)
    }
}

/// The mock API: the server with the Messages API (or another) behind it.
pub struct MockApi(MockServer);

impl MockApi {
    /// Serve on a free port of 127.0.0.1; requests are logged to `log`.
    pub fn start(
        log: &Path,
        script: impl Fn(&ApiRequest) -> Reply + Send + Sync + 'static,
    ) -> MockApi {
        MockApi(MockServer::start(log, Messages(Box::new(script))))
    }

    /// Serve another API: `respond` gives the whole response (see [`http`]).
    pub fn start_raw(
        log: &Path,
        respond: impl Fn(&ApiRequest) -> Response + Send + Sync + 'static,
    ) -> MockApi {
        MockApi(MockServer::start(log, Raw(Box::new(respond))))
    }

    pub fn url(&self) -> String {
        self.0.url()
    }

    pub fn requests(&self) -> Vec<ApiRequest> {
        self.0.requests()
    }

    pub fn main_requests(&self) -> Vec<ApiRequest> {
        self.0.main_requests()
    }

    /// One line per request, for failure messages.
    pub fn describe(&self) -> String {
        self.requests()
            .iter()
            .map(ApiRequest::summary)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn render(reply: Reply, request: &ApiRequest) -> Response {
    let id = request.seq;
    match reply {
        Reply::Error {
            status,
            kind,
            message,
            headers,
        } => {
            let body = json!({"type": "error", "error": {"type": kind, "message": message}});
            let mut response = http(status, "application/json", id, body.to_string().as_bytes());
            response.headers.extend(headers);
            response
        }
        Reply::Message {
            blocks,
            occupancy,
            delay,
            headers,
        } => {
            let model = request.model().to_string();
            let input = occupancy.min(100);
            let usage = json!({
                "input_tokens": input,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": occupancy - input,
                "output_tokens": 1,
            });
            let has_tool = blocks.iter().any(|b| matches!(b, Block::ToolUse { .. }));
            let stop_reason = if has_tool { "tool_use" } else { "end_turn" };
            let message_id = format!("msg_e2e_{id:04}");
            if request.body["stream"] != true {
                let content: Vec<Value> = blocks
                    .iter()
                    .enumerate()
                    .map(|(i, b)| block_json(b, id, i))
                    .collect();
                let body = json!({
                    "id": message_id, "type": "message", "role": "assistant", "model": model,
                    "content": content, "stop_reason": stop_reason, "stop_sequence": null,
                    "usage": usage,
                });
                return http(200, "application/json", id, body.to_string().as_bytes());
            }
            let mut events = vec![(
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": message_id, "type": "message", "role": "assistant", "model": model,
                    "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage,
                }}),
            )];
            for (i, b) in blocks.iter().enumerate() {
                match b {
                    Block::Text(t) => {
                        events.push(("content_block_start", json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})));
                        events.push(("content_block_delta", json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": t}})));
                    }
                    Block::ToolUse { name, input } => {
                        events.push(("content_block_start", json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": tool_id(id, i), "name": name, "input": {}}})));
                        events.push(("content_block_delta", json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}})));
                    }
                }
                events.push((
                    "content_block_stop",
                    json!({"type": "content_block_stop", "index": i}),
                ));
            }
            events.push(("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 40}})));
            events.push(("message_stop", json!({"type": "message_stop"})));
            let mut body = String::new();
            for (name, data) in events {
                body.push_str(&format!("event: {name}\ndata: {data}\n\n"));
            }
            let mut out = http(200, "text/event-stream", id, body.as_bytes());
            out.delay = delay;
            out.headers.extend(headers);
            out
        }
    }
}

fn tool_id(request: usize, block: usize) -> String {
    format!("toolu_e2e_{request:04}_{block}")
}

fn block_json(b: &Block, request: usize, i: usize) -> Value {
    match b {
        Block::Text(t) => json!({"type": "text", "text": t}),
        Block::ToolUse { name, input } => {
            json!({"type": "tool_use", "id": tool_id(request, i), "name": name, "input": input})
        }
    }
}

/// A complete answer with the request id the real API sends.
pub fn http(status: u16, content_type: &'static str, id: usize, body: &[u8]) -> Response {
    Response {
        status,
        content_type,
        body: body.to_vec(),
        delay: Duration::ZERO,
        headers: vec![("request-id".into(), format!("req_e2e_{id:04}"))],
    }
}

/// Where the request log of a test goes.
pub fn log_path(dir: &Path) -> PathBuf {
    dir.join("api-requests.jsonl")
}
