//! opencode's `run --format json` (1.18.33, tests/fixtures/opencode-1.18.33): one step
//! per model call (`step_start`, its `text` and `tool_use` parts, `step_finish` with the
//! call's tokens and cost), an `error` line for an API error, and no result line: the run
//! is over when a step ends for another reason than `tool-calls` and the output ends.

use serde_json::{Value, json};

use super::{blocks, is_synthetic, type_first, usage};

pub(crate) struct Translator {
    session: String,
    /// The step in progress: its message id, whether it called tools, its usage.
    open: Option<Step>,
    /// Cost already reported in steps (the result's total is spread over them).
    cost: f64,
    /// The tokens of the last model call, for the run's closing step.
    tokens: Value,
}

struct Step {
    message: String,
    tools: bool,
    tokens: Value,
    /// Its text parts.
    text: String,
    /// Tool calls whose result has not come: opencode prints a `tool_use`
    /// part once the tool ran, with its output.
    running: Vec<(String, Value)>,
}

impl Default for Translator {
    fn default() -> Translator {
        Translator {
            session: String::new(),
            open: None,
            cost: 0.0,
            tokens: json!({"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}),
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Claude's tool names and inputs in opencode's vocabulary.
fn tool(name: &str, input: &Value) -> (String, Value) {
    let tool = match name {
        "Write" => "write",
        "Edit" | "MultiEdit" => "edit",
        "Bash" => "bash",
        "Read" => "read",
        other => return (other.to_lowercase(), input.clone()),
    };
    let mut input = input.clone();
    if let Some(path) = input.as_object_mut().and_then(|o| o.remove("file_path")) {
        input["filePath"] = path;
    }
    (tool.to_string(), input)
}

impl Translator {
    pub(crate) fn continue_session(&mut self, id: &str) {
        self.session = id.to_string();
    }

    fn line(&self, kind: &str, part: Value) -> String {
        type_first(
            &json!({"type": kind, "timestamp": now_ms(), "sessionID": self.session, "part": part}),
        )
    }

    fn start(&mut self, message: &str, tokens: Value, out: &mut Vec<String>) {
        self.finish(None, 0.0, out);
        out.push(self.line(
            "step_start",
            json!({"messageID": message, "sessionID": self.session, "type": "step-start"}),
        ));
        self.open = Some(Step {
            message: message.to_string(),
            tools: false,
            tokens,
            text: String::new(),
            running: Vec::new(),
        });
    }

    /// Ends the open step: `reason` if given, else from its tool calls.
    fn finish(&mut self, reason: Option<&str>, cost: f64, out: &mut Vec<String>) {
        let Some(step) = self.open.take() else {
            return;
        };
        let reason = reason.unwrap_or(if step.tools { "tool-calls" } else { "stop" });
        out.push(self.line(
            "step_finish",
            json!({"messageID": step.message, "sessionID": self.session, "type": "step-finish",
                "reason": reason, "tokens": step.tokens, "cost": cost}),
        ));
    }

    pub(crate) fn translate(&mut self, v: &Value) -> Vec<String> {
        if self.session.is_empty() {
            // opencode's session ids: `ses_` and 26 characters.
            let id = v["session_id"]
                .as_str()
                .unwrap_or_default()
                .replace('-', "");
            self.session = format!("ses_{}", id.get(..26).unwrap_or("sim"));
        }
        let mut out = Vec::new();
        match v["type"].as_str() {
            Some("assistant") if !is_synthetic(v) => {
                let message = v["message"]["id"].as_str().unwrap_or("msg_sim").to_string();
                if self.open.as_ref().map(|s| &s.message) != Some(&message) {
                    let (input, read, write, output) = usage(v);
                    let tokens = json!({"input": input, "output": output, "reasoning": 0,
                        "cache": {"read": read, "write": write}});
                    self.tokens = tokens.clone();
                    self.start(&message, tokens, &mut out);
                }
                for b in blocks(v) {
                    match b["type"].as_str() {
                        Some("text") => {
                            if let Some(step) = &mut self.open {
                                step.text.push_str(b["text"].as_str().unwrap_or_default());
                            }
                            out.push(self.line(
                                "text",
                                json!({"messageID": message, "sessionID": self.session,
                                    "type": "text", "text": b["text"]}),
                            ));
                        }
                        Some("tool_use") => {
                            let (name, input) = tool(b["name"].as_str().unwrap_or(""), &b["input"]);
                            let part = json!({"messageID": message, "sessionID": self.session,
                                "type": "tool", "tool": name, "callID": b["id"],
                                "state": {"status": "running", "input": input}});
                            if let Some(step) = &mut self.open {
                                step.tools = true;
                                step.running
                                    .push((b["id"].as_str().unwrap_or("").to_string(), part));
                            }
                        }
                        _ => {}
                    }
                }
            }
            // A tool ran: its part, and the step's end once all its tools ran.
            Some("user") => {
                for b in blocks(v).iter().filter(|b| b["type"] == "tool_result") {
                    let Some(step) = &mut self.open else { break };
                    let id = b["tool_use_id"].as_str().unwrap_or("");
                    let Some(at) = step.running.iter().position(|(i, _)| i == id) else {
                        continue;
                    };
                    let (_, mut part) = step.running.remove(at);
                    let failed = b["is_error"] == true;
                    part["state"]["status"] = json!(if failed { "error" } else { "completed" });
                    part["state"][if failed { "error" } else { "output" }] =
                        json!(super::result_text(&b["content"]));
                    let done = step.running.is_empty();
                    out.push(self.line("tool_use", part));
                    if done {
                        self.finish(None, 0.0, &mut out);
                    }
                }
            }
            Some("result") if v["is_error"] == true && v["api_error_status"].is_u64() => {
                self.finish(None, 0.0, &mut out);
                out.push(type_first(
                    &json!({"type": "error", "timestamp": now_ms(), "sessionID": self.session,
                        "error": {"name": "APIError", "data": {"message": v["result"],
                            "statusCode": v["api_error_status"], "isRetryable": false}}}),
                ));
            }
            // Stopped (SIGINT): the output ends mid-step, as opencode's does.
            Some("result") if v["is_error"] == true => {}
            Some("result") => {
                let total = v["total_cost_usd"].as_f64().unwrap_or(0.0);
                let cost = (total - self.cost).max(0.0);
                self.cost = total.max(self.cost);
                let text = v["result"].as_str().unwrap_or_default();
                let said = match &self.open {
                    Some(step) if !step.tools => Some(step.text.clone()),
                    _ => None,
                };
                if said.is_none() {
                    // The run ends with a step of its own that calls no tool.
                    self.finish(None, 0.0, &mut out);
                    let tokens = self.tokens.clone();
                    self.start("msg_sim_last", tokens, &mut out);
                }
                if !text.is_empty() && said.as_deref() != Some(text) {
                    let message = self.open.as_ref().map_or("", |s| s.message.as_str());
                    out.push(self.line(
                        "text",
                        json!({"messageID": message, "sessionID": self.session,
                            "type": "text", "text": text}),
                    ));
                }
                self.finish(Some("stop"), cost, &mut out);
            }
            _ => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::args;
    use super::super::{Format, Translator, codex};
    use serde_json::Value;

    fn kinds(lines: &[String]) -> Vec<String> {
        lines
            .iter()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn one_step_per_model_call_with_its_tokens() {
        let mut t = Translator::new(
            Format::from_args(&args("run --format json")),
            &codex::Shared::default(),
        );
        let text = r#"{"type":"assistant","message":{"id":"msg_1","usage":{"input_tokens":100,"cache_read_input_tokens":29900,"cache_creation_input_tokens":0,"output_tokens":5},"content":[{"type":"text","text":"Writing."}]},"parent_tool_use_id":null,"session_id":"0123abcd-0123-4567-89ab-0123456789ab"}"#;
        let tool = r#"{"type":"assistant","message":{"id":"msg_1","usage":{"input_tokens":100,"cache_read_input_tokens":29900,"output_tokens":5},"content":[{"type":"tool_use","id":"toolu_1","name":"Write","input":{"file_path":"a.txt","content":"x"}}]},"parent_tool_use_id":null,"session_id":"s"}"#;
        let next = r#"{"type":"assistant","message":{"id":"msg_2","usage":{"input_tokens":10,"cache_read_input_tokens":40000},"content":[{"type":"text","text":"Done."}]},"parent_tool_use_id":null,"session_id":"s"}"#;
        let result = r#"{"type":"result","subtype":"success","is_error":false,"result":"Done.","total_cost_usd":0.25,"session_id":"s"}"#;
        let done = r#"{"type":"user","message":{"content":[{"tool_use_id":"toolu_1","type":"tool_result","content":"Wrote a.txt"}]},"parent_tool_use_id":null}"#;
        let mut out = t.translate(text);
        out.extend(t.translate(tool));
        assert_eq!(kinds(&out), ["step_start", "text"], "the tool has not run");
        out.extend(t.translate(done));
        out.extend(t.translate(next));
        out.extend(t.translate(result));
        assert_eq!(
            kinds(&out),
            [
                "step_start",
                "text",
                "tool_use",
                "step_finish",
                "step_start",
                "text",
                "step_finish"
            ]
        );
        let first: Value = serde_json::from_str(&out[3]).unwrap();
        assert_eq!(first["part"]["reason"], "tool-calls");
        assert_eq!(first["part"]["tokens"]["cache"]["read"], 29900);
        assert_eq!(first["sessionID"], "ses_0123abcd0123456789ab012345");
        let tool: Value = serde_json::from_str(&out[2]).unwrap();
        assert_eq!(tool["part"]["tool"], "write");
        assert_eq!(tool["part"]["state"]["input"]["filePath"], "a.txt");
        assert_eq!(tool["part"]["state"]["output"], "Wrote a.txt");
        let last: Value = serde_json::from_str(&out[6]).unwrap();
        assert_eq!(last["part"]["reason"], "stop");
        assert_eq!(last["part"]["cost"], 0.25);
        assert_eq!(last["part"]["tokens"]["cache"]["read"], 40000);
    }

    #[test]
    fn an_api_error_is_an_error_line_and_a_stop_ends_mid_step() {
        let mut t = Translator::new(Format::Opencode, &codex::Shared::default());
        let error = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"quota","session_id":"s"}"#;
        let out = t.translate(error);
        let line: Value = serde_json::from_str(&out[0]).unwrap();
        assert_eq!(line["type"], "error");
        assert_eq!(line["error"]["data"]["statusCode"], 429);
        let aborted = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"session_id":"s"}"#;
        assert!(t.translate(aborted).is_empty());
    }
}
