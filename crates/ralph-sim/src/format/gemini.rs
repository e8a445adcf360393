//! Gemini CLI's `-o stream-json` (0.61.0, tests/fixtures/gemini-0.61.0): `init`, the
//! model's text as `message` deltas, `tool_use` and `tool_result`, and one `result` whose
//! `stats` sum the whole run (no usage per call: Gemini CLI is not metered live). An API
//! error is an error result quoting it (`[API Error: {"error":{"code":429,…}}]`).

use serde_json::{Value, json};

use super::{blocks, is_synthetic, type_first};
use crate::lines::timestamp;

/// Claude's tool names in Gemini CLI's vocabulary.
fn tool_name(name: &str) -> &str {
    match name {
        "Write" => "write_file",
        "Edit" | "MultiEdit" => "replace",
        "Bash" => "run_shell_command",
        "Read" => "read_file",
        other => other,
    }
}

/// Gemini CLI's lines; keeps the model's last text (the result repeats it).
#[derive(Default)]
pub(crate) struct Translator {
    last_text: String,
}

impl Translator {
    pub(crate) fn translate(&mut self, v: &Value) -> Vec<String> {
        let said = self.last_text.clone();
        for b in blocks(v).iter().filter(|b| b["type"] == "text") {
            if v["type"] == "assistant" {
                self.last_text = b["text"].as_str().unwrap_or_default().to_string();
            }
        }
        let mut lines = translate(v);
        let text = v["result"].as_str().unwrap_or_default();
        if v["type"] == "result" && v["is_error"] != true && !text.is_empty() && text != said {
            let message = json!({"type": "message", "timestamp": timestamp(), "role": "assistant",
                "content": text, "delta": true});
            lines.insert(0, message.to_string());
        }
        lines
    }
}

fn translate(v: &Value) -> Vec<String> {
    let ts = timestamp();
    let lines: Vec<Value> = match (v["type"].as_str(), v["subtype"].as_str()) {
        (Some("system"), Some("init")) => vec![
            json!({"type": "init", "timestamp": ts, "session_id": v["session_id"], "model": v["model"]}),
        ],
        (Some("assistant"), _) if !is_synthetic(v) => blocks(v)
            .iter()
            .filter_map(|b| match b["type"].as_str() {
                Some("text") => Some(json!({"type": "message", "timestamp": ts,
                    "role": "assistant", "content": b["text"], "delta": true})),
                Some("tool_use") => Some(json!({"type": "tool_use", "timestamp": ts,
                    "tool_name": tool_name(b["name"].as_str().unwrap_or("")),
                    "tool_id": b["id"], "parameters": b["input"]})),
                _ => None,
            })
            .collect(),
        (Some("user"), _) => blocks(v)
            .iter()
            .filter(|b| b["type"] == "tool_result")
            .map(|b| {
                let status = if b["is_error"] == true {
                    "error"
                } else {
                    "success"
                };
                json!({"type": "tool_result", "timestamp": ts, "tool_id": b["tool_use_id"],
                    "status": status, "output": super::result_text(&b["content"])})
            })
            .collect(),
        (Some("result"), _) => {
            let u = &v["usage"];
            let n = |k: &str| u[k].as_u64().unwrap_or(0);
            let input =
                n("input_tokens") + n("cache_read_input_tokens") + n("cache_creation_input_tokens");
            let stats = json!({"total_tokens": input + n("output_tokens"), "input_tokens": input,
                "output_tokens": n("output_tokens"), "cached": n("cache_read_input_tokens"),
                "input": n("input_tokens"), "duration_ms": v["duration_ms"], "tool_calls": 0});
            if v["is_error"] == true {
                let message = match v["api_error_status"].as_u64() {
                    Some(code) => format!(
                        "[API Error: {}]",
                        json!({"error": {"code": code, "message": v["result"]}})
                    ),
                    None => "Operation cancelled.".to_string(),
                };
                vec![json!({"type": "result", "timestamp": ts, "status": "error",
                    "error": {"type": "unknown", "message": message}, "stats": stats})]
            } else {
                vec![
                    json!({"type": "result", "timestamp": ts, "status": "success", "stats": stats}),
                ]
            }
        }
        _ => Vec::new(),
    };
    lines.iter().map(type_first).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_its_tools_and_the_result() {
        let line = r#"{"type":"assistant","message":{"id":"msg_1","usage":{"input_tokens":100},"content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]},"parent_tool_use_id":null,"session_id":"s"}"#;
        let out = translate(&serde_json::from_str(line).unwrap());
        let tool: Value = serde_json::from_str(&out[0]).unwrap();
        assert_eq!(tool["tool_name"], "run_shell_command");
        assert_eq!(tool["parameters"]["command"], "ls");
        let error = r#"{"type":"result","is_error":true,"api_error_status":429,"result":"quota","usage":{}}"#;
        let out = translate(&serde_json::from_str(error).unwrap());
        let result: Value = serde_json::from_str(&out[0]).unwrap();
        assert_eq!(result["status"], "error");
        assert!(
            result["error"]["message"]
                .as_str()
                .unwrap()
                .contains(r#""code":429"#)
        );
        let init =
            r#"{"type":"system","subtype":"init","session_id":"s","model":"gemini-2.5-flash"}"#;
        let out = translate(&serde_json::from_str(init).unwrap());
        assert!(out[0].contains(r#""type":"init""#));
    }
}
