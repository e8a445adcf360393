//! The Gemini API as Gemini CLI speaks it through the GenAI SDK
//! (`GOOGLE_GEMINI_BASE_URL`): `POST /v1beta/models/M:streamGenerateContent
//! ?alt=sse` for the conversation, answered with `GenerateContentResponse`
//! events (text and `functionCall` parts, `usageMetadata`, `finishReason`).
//!
//! Main-conversation requests are streamed ones that offer tools; the
//! CLI's side queries (`generateContent` for its next-speaker check or
//! routing, `countTokens`) get a short canned answer.

use serde_json::{Value, json};

use super::Reply;
use super::server::{Request, Responder, Response};

/// The usage-limit answer, in Google's words: 429 `RESOURCE_EXHAUSTED` with
/// a per-day `QuotaFailure`, which the CLI treats as terminal (no retry).
pub fn usage_limit() -> Reply {
    Reply::Error {
        status: 429,
        body: json!({"error": {
            "code": 429,
            "message": "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 250, model: gemini-2.5-flash\nPlease retry in 41.6s.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
                    "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                    "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
                    "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash"},
                    "quotaValue": "250"
                }]},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "41s"}
            ]
        }}),
        headers: Vec::new(),
    }
}

/// A request the API rejects (400 `INVALID_ARGUMENT`, not retried).
pub fn api_error(message: &str) -> Reply {
    Reply::Error {
        status: 400,
        body: json!({"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}),
        headers: Vec::new(),
    }
}

/// The conversation a main request carries, for the script.
pub struct Chat<'a>(pub &'a Request);

impl Chat<'_> {
    pub fn contents(&self) -> &[Value] {
        self.0.body["contents"]
            .as_array()
            .map_or(&[], Vec::as_slice)
    }

    /// Model turns already in the conversation: 0 for a session's first request.
    pub fn assistant_turns(&self) -> usize {
        self.contents()
            .iter()
            .filter(|m| m["role"] == "model")
            .count()
    }

    /// All text of every user turn (function responses included).
    pub fn user_text(&self) -> String {
        self.contents()
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| text_of(&m["parts"]))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The names of the tools offered.
    pub fn tools(&self) -> Vec<String> {
        self.0.body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["functionDeclarations"].as_array())
            .flatten()
            .filter_map(|f| f["name"].as_str().map(str::to_string))
            .collect()
    }
}

fn text_of(parts: &Value) -> String {
    parts
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| match (&p["text"], &p["functionResponse"]) {
            (Value::String(t), _) => t.clone(),
            (_, Value::Object(_)) => p["functionResponse"]["response"].to_string(),
            _ => String::new(),
        })
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

type Script = dyn Fn(&Chat) -> Reply + Send + Sync;

pub struct Gemini(Box<Script>);

impl Gemini {
    pub fn new(script: impl Fn(&Chat) -> Reply + Send + Sync + 'static) -> Gemini {
        Gemini(Box::new(script))
    }
}

impl Responder for Gemini {
    fn is_main(&self, r: &Request) -> bool {
        r.method == "POST"
            && r.path.contains(":streamGenerateContent")
            && r.body["tools"].as_array().is_some_and(|t| !t.is_empty())
    }

    fn respond(&self, r: &Request) -> Response {
        let model = model_of(&r.path);
        if r.is_main() {
            return render((self.0)(&Chat(r)), &model, r.seq);
        }
        if r.path.contains(":countTokens") {
            return Response::json(200, &json!({"totalTokens": 1000}));
        }
        if r.path.contains(":streamGenerateContent") {
            return render(Reply::turn(500).text("ok"), &model, r.seq);
        }
        if r.path.contains(":generateContent") {
            // The CLI's JSON side queries (who speaks next, how hard the
            // task is): one answer that satisfies each.
            let answer = json!({"next_speaker": "user", "reasoning": "mock",
                "complexity_score": 10, "complexity_reasoning": "mock"});
            return Response::json(
                200,
                &response(
                    vec![json!({"text": answer.to_string()})],
                    500,
                    "STOP",
                    &model,
                    r.seq,
                ),
            );
        }
        Response::json(
            404,
            &json!({"error": {"code": 404, "message": format!("the mock has no {}", r.path), "status": "NOT_FOUND"}}),
        )
    }
}

/// `gemini-2.5-flash` from `/v1beta/models/gemini-2.5-flash:streamGenerateContent`.
fn model_of(path: &str) -> String {
    path.split("/models/")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap_or("gemini-mock")
        .to_string()
}

fn response(parts: Vec<Value>, prompt_tokens: u64, finish: &str, model: &str, seq: usize) -> Value {
    let cached = prompt_tokens.saturating_sub(prompt_tokens.min(100));
    json!({
        "candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": finish, "index": 0}],
        "usageMetadata": {"promptTokenCount": prompt_tokens, "candidatesTokenCount": 40,
            "totalTokenCount": prompt_tokens + 40, "cachedContentTokenCount": cached},
        "modelVersion": model,
        "responseId": format!("mock-{seq:04}"),
    })
}

fn render(reply: Reply, model: &str, seq: usize) -> Response {
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
    // Every text but the last streams on its own; the last event holds the
    // last text, the function calls and the finish reason.
    let (last, first) = match text.split_last() {
        Some((last, first)) => (Some(last), first),
        None => (None, &[][..]),
    };
    let mut events: Vec<String> = first
        .iter()
        .map(|t| {
            let mut e = response(vec![json!({"text": t})], prompt_tokens, "", model, seq);
            e["candidates"][0]
                .as_object_mut()
                .unwrap()
                .remove("finishReason");
            e.to_string()
        })
        .collect();
    let parts: Vec<Value> = last
        .map(|t| json!({"text": t}))
        .into_iter()
        .chain(
            tools
                .iter()
                .map(|(name, args)| json!({"functionCall": {"name": name, "args": args}})),
        )
        .collect();
    events.push(response(parts, prompt_tokens, "STOP", model, seq).to_string());
    let mut response = Response::sse(events.iter().map(String::as_str));
    response.delay = delay;
    response
}
