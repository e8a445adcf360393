//! The OpenAI Chat Completions API as opencode's OpenAI-compatible provider
//! (`@ai-sdk/openai-compatible`, `baseURL` in `opencode.json`) speaks it:
//! `POST /v1/chat/completions` with `stream: true` and
//! `stream_options.include_usage`, answered with `chat.completion.chunk`
//! events, a last chunk with `usage`, and `data: [DONE]`.
//!
//! Main-conversation requests are those that offer tools; the rest (the
//! session title) get a short canned answer.

use serde_json::{Value, json};

use super::Reply;
use super::server::{Request, Responder, Response};

/// The usage-limit answer, in OpenAI's words (429 `insufficient_quota`).
/// opencode retries a 429 five times (2 s, 4 s, 8 s, 16 s, 30 s apart
/// without headers) before it reports the error; `retry-after-ms`, which it
/// honours, keeps the test short.
pub fn usage_limit() -> Reply {
    Reply::Error {
        status: 429,
        body: json!({"error": {
            "message": "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
            "type": "insufficient_quota",
            "param": null,
            "code": "insufficient_quota"
        }}),
        headers: vec![("retry-after-ms".into(), "50".into())],
    }
}

/// A request the provider rejects (400, not retried).
pub fn api_error(message: &str) -> Reply {
    Reply::Error {
        status: 400,
        body: json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}}),
        headers: Vec::new(),
    }
}

/// The chat a main request carries, for the script.
pub struct Chat<'a>(pub &'a Request);

impl Chat<'_> {
    pub fn messages(&self) -> &[Value] {
        self.0.body["messages"]
            .as_array()
            .map_or(&[], Vec::as_slice)
    }

    /// Assistant turns already in the conversation: 0 for a session's first request.
    pub fn assistant_turns(&self) -> usize {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count()
    }

    /// All text of every user and tool message.
    pub fn user_text(&self) -> String {
        self.messages()
            .iter()
            .filter(|m| m["role"] == "user" || m["role"] == "tool")
            .map(|m| text_of(&m["content"]))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The text of the last user message.
    pub fn last_user_text(&self) -> String {
        self.messages()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .map(|m| text_of(&m["content"]))
            .unwrap_or_default()
    }

    /// The names of the tools offered.
    pub fn tools(&self) -> Vec<String> {
        self.0.body["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

type Script = dyn Fn(&Chat) -> Reply + Send + Sync;

pub struct OpenAi(Box<Script>);

impl OpenAi {
    pub fn new(script: impl Fn(&Chat) -> Reply + Send + Sync + 'static) -> OpenAi {
        OpenAi(Box::new(script))
    }
}

impl Responder for OpenAi {
    fn is_main(&self, r: &Request) -> bool {
        r.method == "POST"
            && r.path.ends_with("/chat/completions")
            && r.body["tools"].as_array().is_some_and(|t| !t.is_empty())
    }

    fn respond(&self, r: &Request) -> Response {
        if r.method == "POST" && r.path.ends_with("/chat/completions") {
            let reply = if r.is_main() {
                (self.0)(&Chat(r))
            } else {
                Reply::turn(500).text("Mock session")
            };
            return render(reply, r);
        }
        Response::json(
            404,
            &json!({"error": {"message": format!("the mock has no {}", r.path), "type": "not_found"}}),
        )
    }
}

fn render(reply: Reply, r: &Request) -> Response {
    let (text, tools, prompt_tokens, delay) = match reply {
        Reply::Error {
            status,
            body,
            headers,
        } => {
            let mut r = Response::json(status, &body);
            r.headers = headers;
            return r;
        }
        Reply::Turn {
            text,
            tools,
            prompt_tokens,
            delay,
        } => (text, tools, prompt_tokens, delay),
    };
    let model = r.body["model"].as_str().unwrap_or("mock-model");
    let id = format!("chatcmpl-mock-{:04}", r.seq);
    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 1_790_000_000, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string()
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for t in &text {
        events.push(chunk(json!({"content": t}), Value::Null));
    }
    for (i, (name, args)) in tools.iter().enumerate() {
        events.push(chunk(
            json!({"tool_calls": [{"index": i, "id": format!("call_mock_{:04}_{i}", r.seq), "type": "function",
                "function": {"name": name, "arguments": args.to_string()}}]}),
            Value::Null,
        ));
    }
    let finish = if tools.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    events.push(chunk(json!({}), json!(finish)));
    // Most of the prompt is served from the cache, as on a long session.
    let cached = prompt_tokens.saturating_sub(prompt_tokens.min(100));
    events.push(
        json!({"id": id, "object": "chat.completion.chunk", "created": 1_790_000_000, "model": model,
            "choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 40,
            "total_tokens": prompt_tokens + 40, "prompt_tokens_details": {"cached_tokens": cached}}})
        .to_string(),
    );
    events.push("[DONE]".to_string());
    let mut response = Response::sse(events.iter().map(String::as_str));
    response.delay = delay;
    response
}
