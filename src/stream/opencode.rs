//! opencode's `run --format json` output, one JSON object a line, into
//! ralph's events. What a line says (1.18.33, recorded in
//! tests/fixtures/opencode-1.18.33/):
//!
//! - `step_start`: a model call begins (its `sessionID`: the session that
//!   `run --session` continues) → [`StreamEvent::Init`] for the first one,
//!   else skipped;
//! - `text` (`part.text`, `part.messageID`) → an assistant message's text;
//! - `tool_use` (`part.tool`, `part.state.input`, already run) → its tool call;
//! - `step_finish` (`part.tokens {input, output, reasoning, cache {read,
//!   write}}`, `part.cost`, `part.reason`) → the message's usage: the
//!   context meter reads every model step;
//! - `error` (`error.data {message, statusCode}`) → an error result (429:
//!   a usage limit, after opencode's own five retries);
//! - `reasoning` and anything else → skipped.
//!
//! opencode prints no final result: the run is over when a step finishes
//! for another reason than `tool-calls` and the output ends. Then, at the
//! end of the output, the decoder gives the result (the last step's text,
//! the summed cost); output that ends mid-step (a kill) has none.

use serde::Deserialize;

use super::raw::ToolInput;
use super::{AssistantMessage, LineDecoder, ResultMessage, Shape, StreamEvent, ToolCall, Usage};

/// What ralph reads of a long line: a `text` part in full; the rest (a
/// tool's `output`, its `metadata`, a written file's content) is cut.
const SHAPE: Shape = Shape {
    words: &[b"text"],
    unread: &[],
    sparse: &[],
};

/// The decoder of one `opencode run` process.
#[derive(Debug)]
pub struct OpencodeDecoder {
    lines: LineDecoder,
    state: State,
}

#[derive(Debug, Default)]
struct State {
    session: Option<String>,
    steps: u64,
    cost: f64,
    /// The text of the current step.
    text: Vec<String>,
    /// Why the last step ended (`stop`, `tool-calls`, `length`…).
    last_reason: Option<String>,
    last_text: Option<String>,
    result_sent: bool,
}

#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: String,
    #[serde(rename = "sessionID")]
    session_id: Option<String>,
    #[serde(default)]
    part: Part,
    error: Option<ErrorBody>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Part {
    #[serde(rename = "messageID")]
    message_id: String,
    text: Option<String>,
    tool: Option<String>,
    #[serde(rename = "callID")]
    call_id: Option<String>,
    state: Option<ToolState>,
    reason: Option<String>,
    tokens: Option<Tokens>,
    cost: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ToolState {
    input: ToolInput,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Tokens {
    input: u64,
    output: u64,
    cache: Cache,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Cache {
    read: u64,
    write: u64,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorBody {
    name: Option<String>,
    data: ErrorData,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorData {
    message: Option<String>,
    #[serde(rename = "statusCode")]
    status_code: Option<u64>,
}

/// opencode's tool names in ralph's vocabulary (the iteration machine
/// knows `Write`/`Edit` as edits, `Bash` as commands).
fn tool_name(name: &str) -> String {
    match name {
        "write" => "Write",
        "edit" | "patch" | "multiedit" => "Edit",
        "bash" => "Bash",
        "read" => "Read",
        "glob" => "Glob",
        "grep" => "Grep",
        "task" => "Task",
        "todowrite" => "TodoWrite",
        "webfetch" => "WebFetch",
        other => other,
    }
    .to_string()
}

impl Default for OpencodeDecoder {
    fn default() -> OpencodeDecoder {
        OpencodeDecoder::new()
    }
}

impl OpencodeDecoder {
    pub(crate) fn new() -> OpencodeDecoder {
        OpencodeDecoder {
            lines: LineDecoder::of(SHAPE),
            state: State::default(),
        }
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) -> (usize, Option<StreamEvent>) {
        let state = &mut self.state;
        self.lines.push_with(bytes, |line| state.decode(line))
    }

    /// End of output: the last line, or the run's result if its last step
    /// ended the turn.
    pub(crate) fn finish(&mut self) -> Option<StreamEvent> {
        let state = &mut self.state;
        let last = self.lines.finish_with(|line| state.decode(line));
        last.or_else(|| self.state.result())
    }
}

impl State {
    fn decode(&mut self, line: &[u8]) -> StreamEvent {
        let line: Line = match super::parse_object(line) {
            Ok(l) => l,
            Err(reason) => return StreamEvent::Invalid { reason },
        };
        if self.session.is_none() {
            self.session = line.session_id.clone();
        }
        let part = line.part;
        match line.kind.as_str() {
            "step_start" => {
                self.steps += 1;
                self.text.clear();
                if self.steps == 1 {
                    return StreamEvent::Init {
                        model: None,
                        session_id: self.session.clone(),
                    };
                }
                StreamEvent::Other { kind: line.kind }
            }
            "text" => {
                let text = part.text.unwrap_or_default();
                self.text.push(text.clone());
                StreamEvent::Assistant(AssistantMessage {
                    id: part.message_id,
                    text: vec![text],
                    ..AssistantMessage::default()
                })
            }
            "tool_use" => {
                let name = part.tool.unwrap_or_default();
                let input = part.state.unwrap_or_default().input;
                StreamEvent::Assistant(AssistantMessage {
                    id: part.message_id,
                    tool_calls: vec![ToolCall {
                        id: part.call_id.unwrap_or_default(),
                        name: tool_name(&name),
                        path: input.path(),
                        summary: input.summary(),
                    }],
                    ..AssistantMessage::default()
                })
            }
            "step_finish" => {
                let tokens = part.tokens.unwrap_or_default();
                self.cost += part.cost.unwrap_or(0.0);
                self.last_reason = part.reason;
                self.last_text = (!self.text.is_empty()).then(|| self.text.join("\n"));
                StreamEvent::Assistant(AssistantMessage {
                    id: part.message_id,
                    usage: Usage {
                        input_tokens: tokens.input,
                        output_tokens: tokens.output,
                        cache_creation_input_tokens: tokens.cache.write,
                        cache_read_input_tokens: tokens.cache.read,
                    },
                    ..AssistantMessage::default()
                })
            }
            "error" => {
                self.result_sent = true;
                let e = line.error.unwrap_or_default();
                // The error's name (`ProviderAuthError`) says what kind of
                // error it is where no status does (`rules::fatal`).
                let errors: Vec<String> = e.name.iter().cloned().collect();
                let text = e.data.message.or(e.name).unwrap_or_else(|| "error".into());
                StreamEvent::Result(ResultMessage {
                    subtype: "error".into(),
                    is_error: true,
                    api_error_status: e.data.status_code,
                    text: Some(text),
                    errors,
                    total_cost_usd: self.cost,
                    num_turns: self.steps,
                    ..ResultMessage::default()
                })
            }
            _ => StreamEvent::Other { kind: line.kind },
        }
    }

    /// The run's result, once: when the last step ended the turn.
    fn result(&mut self) -> Option<StreamEvent> {
        let ended = self
            .last_reason
            .as_deref()
            .is_some_and(|r| r != "tool-calls");
        if self.result_sent || !ended {
            return None;
        }
        self.result_sent = true;
        Some(StreamEvent::Result(ResultMessage {
            subtype: "success".into(),
            is_error: false,
            text: self.last_text.clone(),
            total_cost_usd: self.cost,
            num_turns: self.steps,
            ..ResultMessage::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> Vec<StreamEvent> {
        let mut d = OpencodeDecoder::new();
        let mut out = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let (used, e) = d.push(rest);
            out.extend(e);
            rest = &rest[used..];
        }
        out.extend(d.finish());
        out
    }

    fn fixture(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/opencode-1.18.33")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn assistants(events: &[StreamEvent]) -> Vec<&AssistantMessage> {
        events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Assistant(m) => Some(m),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_run_that_writes_a_file() {
        let events = decode(&fixture("write-file.jsonl"));
        let StreamEvent::Init { session_id, .. } = &events[0] else {
            panic!("{:?}", events[0]);
        };
        assert!(session_id.as_deref().unwrap().starts_with("ses_"));
        let msgs = assistants(&events);
        // The context of every model step, as the mock reported it.
        let occupancy: Vec<u64> = msgs
            .iter()
            .map(|m| m.usage.occupancy())
            .filter(|&t| t > 0)
            .collect();
        assert_eq!(occupancy, [12_000, 12_600, 13_100]);
        let calls: Vec<_> = msgs.iter().flat_map(|m| &m.tool_calls).collect();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].name, "Write");
        assert_eq!(calls[0].path.as_deref(), Some("hello.txt"));
        assert_eq!(calls[1].name, "Bash");
        assert_eq!(calls[1].summary.as_deref(), Some("cat hello.txt"));
        let StreamEvent::Result(r) = events.last().unwrap() else {
            panic!("no result: {:?}", events.last());
        };
        assert!(!r.is_error);
        assert_eq!(r.text.as_deref(), Some("Done: hello.txt says hello."));
        assert_eq!(r.num_turns, 3);
        // 3 steps at $3/M in, $15/M out, $0.30/M cached.
        assert!(r.total_cost_usd > 0.0, "{}", r.total_cost_usd);
    }

    #[test]
    fn errors_and_limits_end_the_run() {
        for (file, status, words) in [
            ("api-error.jsonl", 400, "does not accept"),
            ("usage-limit.jsonl", 429, "exceeded your current quota"),
        ] {
            let events = decode(&fixture(file));
            let results: Vec<_> = events
                .iter()
                .filter_map(|e| match e {
                    StreamEvent::Result(r) => Some(r),
                    _ => None,
                })
                .collect();
            assert_eq!(results.len(), 1, "{file}: {events:?}");
            assert!(results[0].is_error, "{file}");
            assert_eq!(results[0].api_error_status, Some(status), "{file}");
            assert!(
                results[0].text.as_deref().unwrap().contains(words),
                "{file}"
            );
        }
    }

    #[test]
    fn a_run_cut_mid_step_has_no_result() {
        let all = fixture("write-file.jsonl");
        let text = String::from_utf8(all).unwrap();
        // Up to the first tool call's step end: the model wanted tools.
        let cut: String = text.lines().take(4).map(|l| format!("{l}\n")).collect();
        let events = decode(cut.as_bytes());
        assert!(!events.iter().any(|e| matches!(e, StreamEvent::Result(_))));
        // Killed before any step finished.
        let events = decode(text.lines().next().unwrap().as_bytes());
        assert!(!events.iter().any(|e| matches!(e, StreamEvent::Result(_))));
    }

    #[test]
    fn odd_lines_are_skipped_or_invalid() {
        let events = decode(b"{\"type\":\"reasoning\",\"part\":{}}\nnot json\n{\"type\":\"step_finish\",\"part\":{\"tokens\":\"weird\"}}\n");
        assert!(matches!(&events[0], StreamEvent::Other { kind } if kind == "reasoning"));
        assert!(matches!(events[1], StreamEvent::Invalid { .. }));
        assert!(matches!(events[2], StreamEvent::Invalid { .. }));
    }
}
