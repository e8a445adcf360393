//! A mock of the OpenAI Responses API (`POST /v1/responses`, server-sent
//! events) for the real Codex CLI, served by the Messages mock's HTTP
//! server (`MockApi::start_raw`). Codex is pointed at it with `-c
//! model_providers.mock={base_url=…, wire_api="responses", env_key=…}`.
//!
//! Each request goes to the test's script, which answers with a [`Answer`]:
//! a model call (`exec_command` calls and/or a message, with the usage that
//! says how full the context is) or an HTTP error.

use std::path::Path;

use serde_json::{Value, json};

use crate::agent_mock::server::Response;
use crate::real_claude::mock_api::{ApiRequest, MockApi, http, log_path};

/// What one model call outputs.
#[derive(Debug, Clone)]
pub enum Out {
    Text(String),
    /// An `exec_command` call: a shell command Codex runs.
    Exec(String),
}

#[derive(Debug, Clone)]
pub enum Answer {
    Call {
        out: Vec<Out>,
        /// Input tokens the call reports: what ralph's meter reads.
        occupancy: u64,
        /// The subscription's usage in percent (5-hour, weekly), sent as
        /// ChatGPT's backend does: `x-codex-primary-*`, `x-codex-secondary-*`.
        quota: Option<(f64, f64)>,
    },
    Error {
        status: u16,
        body: Value,
        /// Response headers (the account's usage, as on a usage limit).
        headers: Vec<(String, String)>,
    },
}

impl Answer {
    pub fn call(occupancy: u64) -> Answer {
        Answer::Call {
            out: Vec::new(),
            occupancy,
            quota: None,
        }
    }

    /// The response says how much of the 5-hour and weekly windows is used.
    pub fn quota(mut self, five_hour: f64, weekly: f64) -> Answer {
        if let Answer::Call { quota, .. } = &mut self {
            *quota = Some((five_hour, weekly));
        }
        self
    }

    pub fn text(self, text: &str) -> Answer {
        self.with(Out::Text(text.to_string()))
    }

    pub fn exec(self, command: &str) -> Answer {
        self.with(Out::Exec(command.to_string()))
    }

    fn with(mut self, o: Out) -> Answer {
        if let Answer::Call { out, .. } = &mut self {
            out.push(o);
        }
        self
    }

    pub fn error(status: u16, body: Value) -> Answer {
        Answer::Error {
            status,
            body,
            headers: Vec::new(),
        }
    }

    /// A usage limit as ChatGPT's backend answers it: HTTP 429
    /// `usage_limit_reached` with the moment it resets (epoch seconds), and
    /// the 5-hour window used up in the headers (`x-codex-primary-*`).
    pub fn usage_limit(resets_at: i64) -> Answer {
        let now = jiff::Timestamp::now().as_second();
        Answer::Error {
            status: 429,
            body: json!({"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached", "plan_type": "plus", "resets_at": resets_at, "resets_in_seconds": resets_at - now}}),
            headers: window_headers("primary", 100.0, 300, resets_at),
        }
    }
}

/// The `x-codex-<window>-*` headers of one subscription window.
fn window_headers(window: &str, used: f64, minutes: u64, reset: i64) -> Vec<(String, String)> {
    [
        ("used-percent", used.to_string()),
        ("window-minutes", minutes.to_string()),
        ("reset-at", reset.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (format!("x-codex-{window}-{k}"), v))
    .collect()
}

/// What the tests read of a request.
pub trait ResponsesRequest {
    /// The Codex thread (one per agent process).
    fn thread(&self) -> String;
    /// Every text of the input: user messages (the prompt, steered
    /// messages) and the outputs of earlier calls.
    fn input_text(&self) -> String;
    /// The user messages only.
    fn user_text(&self) -> String;
    /// `exec_command` calls already made in this thread.
    fn calls(&self) -> usize;
}

impl ResponsesRequest for ApiRequest {
    fn thread(&self) -> String {
        self.header("thread-id").unwrap_or("-").to_string()
    }

    fn input_text(&self) -> String {
        input(self)
            .iter()
            .map(|i| match i["type"].as_str() {
                Some("message") => message_text(i),
                Some("function_call_output") => i["output"].as_str().unwrap_or("").to_string(),
                _ => String::new(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn user_text(&self) -> String {
        input(self)
            .iter()
            .filter(|i| i["type"] == "message" && i["role"] == "user")
            .map(message_text)
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn calls(&self) -> usize {
        input(self)
            .iter()
            .filter(|i| i["type"] == "function_call")
            .count()
    }
}

fn input(r: &ApiRequest) -> &[Value] {
    r.body["input"].as_array().map_or(&[], Vec::as_slice)
}

fn message_text(item: &Value) -> String {
    item["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Serve `script` on 127.0.0.1.
pub fn start(
    dir: &Path,
    script: impl Fn(&ApiRequest) -> Answer + Send + Sync + 'static,
) -> MockApi {
    MockApi::start_raw(&log_path(dir), move |req| {
        if !req.is_main() {
            return http(404, "application/json", req.seq, b"{}");
        }
        render(script(req), req.seq)
    })
}

fn render(answer: Answer, id: usize) -> Response {
    let (out, occupancy, quota) = match answer {
        Answer::Error {
            status,
            body,
            headers,
        } => {
            let mut response = http(status, "application/json", id, body.to_string().as_bytes());
            response.headers.extend(headers);
            return response;
        }
        Answer::Call {
            out,
            occupancy,
            quota,
        } => (out, occupancy, quota),
    };
    let rid = format!("resp_e2e_{id:04}");
    let mut events = vec![json!({"type": "response.created", "response": {"id": rid}})];
    for (i, o) in out.iter().enumerate() {
        let item = match o {
            Out::Text(t) => json!({
                "type": "message", "role": "assistant", "id": format!("msg_e2e_{id:04}_{i}"),
                "content": [{"type": "output_text", "text": t}],
            }),
            Out::Exec(cmd) => json!({
                "type": "function_call", "name": "exec_command",
                "arguments": json!({"cmd": cmd}).to_string(),
                "call_id": format!("call_e2e_{id:04}_{i}"),
            }),
        };
        events.push(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
    }
    events.push(
        json!({"type": "response.completed", "response": {"id": rid, "usage": {
            "input_tokens": occupancy,
            "input_tokens_details": {"cached_tokens": occupancy / 2},
            "output_tokens": 40,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": occupancy + 40,
        }}}),
    );
    let mut body = String::new();
    for e in events {
        body.push_str(&format!(
            "event: {}\ndata: {e}\n\n",
            e["type"].as_str().unwrap()
        ));
    }
    let mut response = http(200, "text/event-stream", id, body.as_bytes());
    if let Some((five_hour, weekly)) = quota {
        let now = jiff::Timestamp::now().as_second();
        for (window, used, minutes, reset) in [
            ("primary", five_hour, 300, now + 3 * 3600),
            ("secondary", weekly, 10_080, now + 4 * 86400),
        ] {
            response
                .headers
                .extend(window_headers(window, used, minutes, reset));
        }
    }
    response
}
