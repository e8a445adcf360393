//! Codex's app-server (0.169.0, tests/fixtures/codex-0.169.0): JSON-RPC over stdio
//! without the `"jsonrpc"` member, one object a line. The sim is the server:
//!
//! - [`serve`] answers the client's requests on the stdin thread: `initialize`,
//!   `thread/start` (and `thread/started`), `turn/start` (and `turn/started`; its text
//!   is the prompt), `turn/steer` (into the running turn, refused when none runs),
//!   `turn/interrupt` (the clean stop); anything else is "method not found";
//! - [`Translator`] turns the player's Claude lines into the server's notifications:
//!   `thread/tokenUsage/updated` per model call (with `modelContextWindow`), items
//!   (`agentMessage`, `commandExecution`, `fileChange`, `contextCompaction`), `error`
//!   for a retry, `account/rateLimits/updated`, and `turn/completed` for a result.
//!
//! Both share the thread and the running turn ([`Shared`]). SIGINT ends the app-server
//! outright (measured on 0.169.0): the player exits 130 on it in this format.

use std::sync::{Arc, Mutex, MutexGuard};

use regex::Regex;
use serde_json::{Value, json};

use super::{blocks, is_synthetic, usage};
use crate::ids::Ids;

/// What the stdin thread and the player share of one app-server session.
#[derive(Clone, Default)]
pub(crate) struct Shared(Arc<Mutex<Session>>);

#[derive(Default)]
struct Session {
    model: String,
    window: u64,
    thread: Option<String>,
    /// The running turn.
    turn: Option<String>,
}

impl Shared {
    pub(crate) fn new(model: &str, window: u64) -> Shared {
        Shared(Arc::new(Mutex::new(Session {
            model: model.to_string(),
            window,
            ..Session::default()
        })))
    }

    fn lock(&self) -> MutexGuard<'_, Session> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a request from the client means for the player.
#[derive(Debug, PartialEq)]
pub(crate) enum Asked {
    /// A turn's input (`turn/start`) or a message into it (`turn/steer`).
    Message(String),
    /// `turn/interrupt` of the running turn.
    Interrupt,
}

fn input_text(params: &Value) -> String {
    params["input"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn turn_object(id: &str, status: &str) -> Value {
    json!({"id": id, "rootTurnId": id, "items": [], "itemsView": "notLoaded",
        "status": status, "error": null})
}

/// One line from the client: the lines to write back (responses first, then the
/// notifications they cause), and what it asks of the player.
pub(crate) fn serve(line: &[u8], shared: &Shared, ids: &mut Ids) -> (Vec<String>, Option<Asked>) {
    let Ok(request) = serde_json::from_slice::<Value>(line) else {
        return (Vec::new(), None);
    };
    let (Some(method), Some(id)) = (request["method"].as_str(), request.get("id")) else {
        // A notification (`initialized`) or an answer to a request of ours.
        return (Vec::new(), None);
    };
    let params = &request["params"];
    let reply = |result: Value| json!({"id": id, "result": result}).to_string();
    let refuse = |code: i64, message: &str| {
        json!({"id": id, "error": {"code": code, "message": message}}).to_string()
    };
    let mut session = shared.lock();
    match method {
        "initialize" => (
            vec![reply(
                json!({"userAgent": "ralph-sim/0.169.0", "platformFamily": "unix",
                "platformOs": "linux"}),
            )],
            None,
        ),
        "thread/start" => {
            let thread = ids.uuid();
            if let Some(model) = params["model"].as_str() {
                session.model = model.to_string();
            }
            session.thread = Some(thread.clone());
            let object = json!({"id": thread, "sessionId": thread, "preview": "",
                "ephemeral": false, "cwd": params["cwd"], "status": {"type": "idle"}});
            let started = json!({"method": "thread/started", "params": {"thread": object}});
            (
                vec![
                    reply(json!({"thread": object, "model": session.model,
                        "modelProvider": "openai", "cwd": params["cwd"],
                        "approvalPolicy": "never", "reasoningEffort": null})),
                    started.to_string(),
                ],
                None,
            )
        }
        "turn/start" => {
            let Some(thread) = session.thread.clone() else {
                return (vec![refuse(-32600, "thread not found")], None);
            };
            if session.turn.is_some() {
                return (vec![refuse(-32600, "a turn is already running")], None);
            }
            let turn = ids.uuid();
            session.turn = Some(turn.clone());
            let started = json!({"method": "turn/started",
                "params": {"threadId": thread, "turn": turn_object(&turn, "inProgress")}});
            (
                vec![
                    reply(json!({"turn": turn_object(&turn, "inProgress")})),
                    started.to_string(),
                ],
                Some(Asked::Message(input_text(params))),
            )
        }
        "turn/steer" => match &session.turn {
            Some(turn) if params["expectedTurnId"] == turn.as_str() => (
                vec![reply(json!({"turnId": turn}))],
                Some(Asked::Message(input_text(params))),
            ),
            _ => (vec![refuse(-32600, "no active turn to steer")], None),
        },
        "turn/interrupt" => {
            let running = session.turn.is_some();
            (vec![reply(json!({}))], running.then_some(Asked::Interrupt))
        }
        _ => (
            vec![refuse(-32601, &format!("method not found: {method}"))],
            None,
        ),
    }
}

/// The server's notifications for the player's lines.
pub(crate) struct Translator {
    shared: Shared,
    /// The model call whose usage was reported last (one report per call).
    message: String,
    total: (u64, u64, u64),
    /// The item kind of each tool call, for its `item/completed`.
    items: Vec<(String, Value)>,
}

fn notification(method: &str, params: Value) -> String {
    json!({"method": method, "params": params}).to_string()
}

/// Codex's words for a usage limit ("try again at 3:05 PM"), from Claude Code's
/// ("resets 3:05pm").
fn usage_limit_text(text: &str) -> Option<String> {
    let re = Regex::new(r"resets (\d{1,2}:\d{2})(am|pm)").expect("valid regex");
    let c = re.captures(text)?;
    Some(format!(
        "You've hit your usage limit. Upgrade to Pro or try again at {} {}.",
        &c[1],
        c[2].to_uppercase()
    ))
}

/// The `codexErrorInfo` of an HTTP status, as the decoder reads it.
fn error_info(status: u64) -> Value {
    match status {
        429 => json!("usageLimitExceeded"),
        401 => json!("unauthorized"),
        other => json!({"responseStreamDisconnected": {"httpStatusCode": other}}),
    }
}

impl Translator {
    pub(crate) fn new(shared: Shared) -> Translator {
        Translator {
            shared,
            message: String::new(),
            total: (0, 0, 0),
            items: Vec::new(),
        }
    }

    pub(crate) fn translate(&mut self, v: &Value) -> Vec<String> {
        let (thread, turn, window) = {
            let s = self.shared.lock();
            (
                s.thread.clone().unwrap_or_default(),
                s.turn.clone().unwrap_or_default(),
                s.window,
            )
        };
        let ids = json!({"threadId": thread, "turnId": turn});
        let with = |mut params: Value| {
            params["threadId"] = ids["threadId"].clone();
            params["turnId"] = ids["turnId"].clone();
            params
        };
        let mut out = Vec::new();
        match (v["type"].as_str(), v["subtype"].as_str()) {
            (Some("assistant"), _) if !is_synthetic(v) => {
                let message = v["message"]["id"].as_str().unwrap_or_default();
                if message != self.message {
                    self.message = message.to_string();
                    let (input, read, write, output) = usage(v);
                    let prompt = input + read + write;
                    self.total.0 += prompt;
                    self.total.1 += read;
                    self.total.2 += output;
                    let breakdown = |i: u64, c: u64, o: u64| {
                        json!({"totalTokens": i + o, "inputTokens": i, "cachedInputTokens": c,
                            "outputTokens": o, "reasoningOutputTokens": 0})
                    };
                    out.push(notification(
                        "thread/tokenUsage/updated",
                        with(json!({"tokenUsage": {
                            "total": breakdown(self.total.0, self.total.1, self.total.2),
                            "last": breakdown(prompt, read, output),
                            "modelContextWindow": window}})),
                    ));
                }
                for b in blocks(v) {
                    match b["type"].as_str() {
                        Some("text") => {
                            let item = json!({"type": "agentMessage", "id": format!("{message}#{}", out.len()),
                                "text": b["text"]});
                            out.push(notification("item/started", with(json!({"item": item}))));
                            out.push(notification("item/completed", with(json!({"item": item}))));
                        }
                        Some("tool_use") => {
                            let id = b["id"].as_str().unwrap_or_default().to_string();
                            let input = &b["input"];
                            let item = match b["name"].as_str() {
                                Some("Bash") => json!({"type": "commandExecution", "id": id,
                                    "command": input["command"], "status": "inProgress"}),
                                Some(name @ ("Write" | "Edit" | "MultiEdit")) => {
                                    let kind = if name == "Write" { "add" } else { "update" };
                                    json!({"type": "fileChange", "id": id, "status": "inProgress",
                                        "changes": [{"path": input["file_path"], "kind": {"type": kind}}]})
                                }
                                // Codex reads and searches with commands.
                                Some("Read") => json!({"type": "commandExecution", "id": id,
                                    "command": format!("cat {}", input["file_path"].as_str().unwrap_or_default()),
                                    "status": "inProgress"}),
                                Some(name @ ("Glob" | "Grep")) => {
                                    json!({"type": "commandExecution", "id": id,
                                    "command": format!("{} {}", name.to_lowercase(), input["pattern"].as_str().unwrap_or_default()),
                                    "status": "inProgress"})
                                }
                                _ => continue,
                            };
                            out.push(notification("item/started", with(json!({"item": item}))));
                            self.items.push((id, item));
                        }
                        _ => {}
                    }
                }
            }
            (Some("user"), _) => {
                for b in blocks(v) {
                    let id = b["tool_use_id"].as_str().unwrap_or_default();
                    if let Some(at) = self.items.iter().position(|(i, _)| i == id) {
                        let (_, mut item) = self.items.remove(at);
                        item["status"] = json!(if b["is_error"] == true {
                            "failed"
                        } else {
                            "completed"
                        });
                        if item["type"] == "commandExecution" {
                            item["aggregatedOutput"] = json!(super::result_text(&b["content"]));
                            item["exitCode"] = json!(i32::from(b["is_error"] == true));
                        }
                        out.push(notification("item/completed", with(json!({"item": item}))));
                    }
                }
            }
            (Some("system"), Some("api_retry")) => {
                let (attempt, max) = (v["attempt"].as_u64(), v["max_retries"].as_u64());
                out.push(notification(
                    "error",
                    with(json!({"willRetry": true, "error": {
                        "message": format!("Reconnecting... {}/{}", attempt.unwrap_or(1), max.unwrap_or(5)),
                        "codexErrorInfo": error_info(v["error_status"].as_u64().unwrap_or(500)),
                        "additionalDetails": null}})),
                ));
            }
            (Some("system"), Some("compact_boundary")) => {
                let item =
                    json!({"type": "contextCompaction", "id": format!("compact_{}", self.total.0)});
                out.push(notification("item/started", with(json!({"item": item}))));
                out.push(notification("item/completed", with(json!({"item": item}))));
            }
            (Some("rate_limit_event"), _) => {
                let info = &v["rate_limit_info"];
                let used = info["utilization"]
                    .as_f64()
                    .map(|u| (u * 100.0).round() as u64);
                let window = match info["rateLimitType"].as_str() {
                    Some("seven_day") => 10_080,
                    _ => 300,
                };
                let primary = used.map(|used| {
                    json!({"usedPercent": used, "windowDurationMins": window,
                        "resetsAt": info["resetsAt"]})
                });
                out.push(notification(
                    "account/rateLimits/updated",
                    json!({"rateLimits": {"limitId": "codex", "primary": primary,
                        "secondary": null, "credits": null, "planType": null}}),
                ));
            }
            (Some("result"), _) => {
                let status = v["api_error_status"].as_u64();
                let (state, error) = match (v["is_error"] == true, status) {
                    (false, _) => ("completed", Value::Null),
                    (true, Some(status)) => {
                        let text = v["result"].as_str().unwrap_or("error");
                        let message = match status {
                            429 => usage_limit_text(text).unwrap_or_else(|| text.to_string()),
                            _ => text.to_string(),
                        };
                        let error = json!({"message": message, "codexErrorInfo": error_info(status),
                            "additionalDetails": null});
                        out.push(notification(
                            "error",
                            with(json!({"willRetry": false, "error": error})),
                        ));
                        ("failed", error)
                    }
                    // What the player prints when it is stopped.
                    (true, None) if v["subtype"] == "error_during_execution" => {
                        ("interrupted", Value::Null)
                    }
                    (true, None) => (
                        "failed",
                        json!({"message": v["result"].as_str().or(v["errors"][0].as_str())
                            .unwrap_or("error"), "codexErrorInfo": "other"}),
                    ),
                };
                let mut object = turn_object(&turn, state);
                object["error"] = error;
                // A completed turn lists its last message, as Codex's does.
                if let Some(text) = v["result"]
                    .as_str()
                    .filter(|t| state == "completed" && !t.is_empty())
                {
                    object["items"] = json!([{"type": "agentMessage", "id": format!("{turn}#last"), "text": text}]);
                }
                self.shared.lock().turn = None;
                out.push(notification(
                    "turn/completed",
                    json!({"threadId": thread, "turn": object}),
                ));
            }
            _ => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(line: &str) -> Value {
        serde_json::from_str(line).unwrap()
    }

    fn rpc(shared: &Shared, line: &str) -> (Vec<Value>, Option<Asked>) {
        let (lines, asked) = serve(line.as_bytes(), shared, &mut Ids::new());
        (lines.iter().map(|l| value(l)).collect(), asked)
    }

    #[test]
    fn the_handshake_a_turn_a_steer_and_an_interrupt() {
        let shared = Shared::new("gpt-5.1-codex", 258_400);
        let (out, asked) = rpc(&shared, r#"{"method":"initialize","id":1,"params":{}}"#);
        assert_eq!((out[0]["id"].clone(), asked), (json!(1), None));
        assert!(rpc(&shared, r#"{"method":"initialized"}"#).0.is_empty());
        // No thread yet: a turn cannot start.
        let (out, _) = rpc(
            &shared,
            r#"{"method":"turn/start","id":2,"params":{"input":[]}}"#,
        );
        assert!(out[0]["error"].is_object());
        let (out, _) = rpc(
            &shared,
            r#"{"method":"thread/start","id":3,"params":{"cwd":"/p"}}"#,
        );
        let thread = out[0]["result"]["thread"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(out[0]["result"]["model"], "gpt-5.1-codex");
        assert_eq!(out[1]["method"], "thread/started");
        let start = json!({"method": "turn/start", "id": 4, "params": {"threadId": thread,
            "input": [{"type": "text", "text": "do the work"}]}});
        let (out, asked) = rpc(&shared, &start.to_string());
        assert_eq!(asked, Some(Asked::Message("do the work".into())));
        let turn = out[0]["result"]["turn"]["id"].as_str().unwrap().to_string();
        assert_eq!(out[1]["method"], "turn/started");
        let steer = |expected: &str| {
            json!({"method": "turn/steer", "id": 5, "params": {"threadId": thread,
                "expectedTurnId": expected, "input": [{"type": "text", "text": "notes"}]}})
            .to_string()
        };
        let (out, asked) = rpc(&shared, &steer("other"));
        assert!(out[0]["error"].is_object() && asked.is_none());
        let (out, asked) = rpc(&shared, &steer(&turn));
        assert_eq!(out[0]["result"]["turnId"], turn.as_str());
        assert_eq!(asked, Some(Asked::Message("notes".into())));
        let (_, asked) = rpc(&shared, r#"{"method":"turn/interrupt","id":6,"params":{}}"#);
        assert_eq!(asked, Some(Asked::Interrupt));
        let (out, _) = rpc(&shared, r#"{"method":"review/start","id":7}"#);
        assert_eq!(out[0]["error"]["code"], -32601);
    }

    #[test]
    fn lines_become_usage_items_and_the_turns_end() {
        let shared = Shared::new("gpt-5.1-codex", 258_400);
        shared.lock().thread = Some("th".into());
        shared.lock().turn = Some("tu".into());
        let mut t = Translator::new(shared.clone());
        let text = r#"{"type":"assistant","message":{"id":"msg_1","usage":{"input_tokens":100,"cache_read_input_tokens":29900,"output_tokens":5},"content":[{"type":"text","text":"Writing."}]},"parent_tool_use_id":null}"#;
        let tool = r#"{"type":"assistant","message":{"id":"msg_1","usage":{"input_tokens":100,"cache_read_input_tokens":29900,"output_tokens":5},"content":[{"type":"tool_use","id":"toolu_1","name":"Write","input":{"file_path":"a.txt","content":"x"}}]},"parent_tool_use_id":null}"#;
        let done = r#"{"type":"user","message":{"content":[{"tool_use_id":"toolu_1","type":"tool_result","content":"ok"}]},"parent_tool_use_id":null}"#;
        let mut out: Vec<Value> = [text, tool, done]
            .iter()
            .flat_map(|l| t.translate(&value(l)))
            .map(|l| value(&l))
            .collect();
        let methods: Vec<&str> = out.iter().map(|v| v["method"].as_str().unwrap()).collect();
        assert_eq!(
            methods,
            [
                "thread/tokenUsage/updated",
                "item/started",
                "item/completed",
                "item/started",
                "item/completed"
            ]
        );
        let usage = &out[0]["params"]["tokenUsage"];
        assert_eq!(usage["last"]["inputTokens"], 30000);
        assert_eq!(usage["last"]["cachedInputTokens"], 29900);
        assert_eq!(usage["modelContextWindow"], 258_400);
        assert_eq!(
            out[3]["params"]["item"]["changes"][0]["kind"]["type"],
            "add"
        );
        assert_eq!(out[4]["params"]["item"]["status"], "completed");
        let run = r#"{"type":"assistant","message":{"id":"msg_2","usage":{"input_tokens":1},"content":[{"type":"tool_use","id":"toolu_2","name":"Bash","input":{"command":"ls"}}]},"parent_tool_use_id":null}"#;
        let ran = r#"{"type":"user","message":{"content":[{"tool_use_id":"toolu_2","type":"tool_result","content":[{"type":"text","text":"a.txt"}]}]},"parent_tool_use_id":null}"#;
        t.translate(&value(run));
        let done = value(&t.translate(&value(ran))[0]);
        assert_eq!(done["params"]["item"]["aggregatedOutput"], "a.txt");
        let limit = r#"{"type":"result","is_error":true,"api_error_status":429,"result":"You've hit your session limit · resets 3:05pm"}"#;
        out = t
            .translate(&value(limit))
            .iter()
            .map(|l| value(l))
            .collect();
        assert_eq!(out[0]["method"], "error");
        let turn = &out[1]["params"]["turn"];
        assert_eq!(turn["status"], "failed");
        assert_eq!(turn["error"]["codexErrorInfo"], "usageLimitExceeded");
        assert!(
            turn["error"]["message"]
                .as_str()
                .unwrap()
                .contains("try again at 3:05 PM")
        );
        assert!(shared.lock().turn.is_none());
        let stopped = r#"{"type":"result","subtype":"error_during_execution","is_error":true}"#;
        let out = t.translate(&value(stopped));
        assert_eq!(value(&out[0])["params"]["turn"]["status"], "interrupted");
    }
}
