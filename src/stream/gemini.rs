//! Gemini CLI's `-o stream-json` output, one JSON object a line, into
//! ralph's events. What a line says (0.61.0, recorded in
//! tests/fixtures/gemini-0.61.0/):
//!
//! - `init {session_id, model}` → [`StreamEvent::Init`];
//! - `message {role, content, delta}`: the user's prompt echoed (skipped),
//!   or a chunk of the model's text → an assistant message with the turn's
//!   text so far;
//! - `tool_use {tool_name, tool_id, parameters}` → its tool call;
//! - `tool_result {tool_id, status}` → a tool result;
//! - `error {severity, message}` (warnings the run survives) → skipped;
//! - `result {status, error?, stats}` → the result. `stats` sums the
//!   tokens of every model call of the run, which is not what the context
//!   holds: Gemini CLI is not metered live, and no usage is passed on.
//!   An error result's status is read from the API error it quotes
//!   (`"code":400`), and a quota the CLI gave up on is a usage limit (429).

use serde::Deserialize;

use super::raw::ToolInput;
use super::{AssistantMessage, LineDecoder, ResultMessage, Shape, StreamEvent, ToolCall};

/// Most of a turn's text kept for the result (a turn is far shorter).
const TURN_TEXT: usize = 1 << 20;

/// What ralph reads of a long line: a `message`'s `content` in full; of a
/// `tool_result` only that it is one (Gemini CLI prints `type` first, so
/// the tool's `output` after it is skipped to the newline).
const SHAPE: Shape = Shape {
    words: &[b"content"],
    unread: &[],
    sparse: &[(b"tool_result", b"type")],
};

/// The decoder of one `gemini -p` process.
#[derive(Debug)]
pub struct GeminiDecoder {
    lines: LineDecoder,
    state: State,
}

#[derive(Debug, Default)]
struct State {
    turns: u64,
    /// The model's text in the current turn.
    text: String,
    /// The next model text begins a new turn (after tool results).
    new_turn: bool,
}

#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: String,
    session_id: Option<String>,
    model: Option<String>,
    role: Option<String>,
    content: Option<String>,
    tool_name: Option<String>,
    tool_id: Option<String>,
    parameters: Option<ToolInput>,
    status: Option<String>,
    error: Option<ErrorBody>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorBody {
    message: Option<String>,
}

/// Gemini CLI's tool names in ralph's vocabulary.
fn tool_name(name: &str) -> String {
    match name {
        "write_file" => "Write",
        "replace" => "Edit",
        "run_shell_command" => "Bash",
        "read_file" | "read_many_files" => "Read",
        "glob" => "Glob",
        "grep_search" | "search_file_content" => "Grep",
        "web_fetch" => "WebFetch",
        "write_todos" => "TodoWrite",
        other => other,
    }
    .to_string()
}

/// Wording of the quota errors Gemini CLI gives up on (TerminalQuotaError).
const QUOTA_WORDS: [&str; 4] = [
    "exhausted your daily quota",
    "exhausted your capacity",
    "RESOURCE_EXHAUSTED",
    "Quota exceeded",
];

/// The HTTP status an error result stands for: the `"code":N` of the API
/// error it quotes, or 429 for the quota wording.
fn status_of(message: &str) -> Option<u64> {
    if let Some(at) = message.find("\"code\":") {
        let digits: String = message[at + 7..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if let Ok(code) = digits.parse() {
            return Some(code);
        }
    }
    QUOTA_WORDS
        .iter()
        .any(|w| message.contains(w))
        .then_some(429)
}

impl Default for GeminiDecoder {
    fn default() -> GeminiDecoder {
        GeminiDecoder::new()
    }
}

impl GeminiDecoder {
    pub(crate) fn new() -> GeminiDecoder {
        GeminiDecoder {
            lines: LineDecoder::of(SHAPE),
            state: State::default(),
        }
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) -> (usize, Option<StreamEvent>) {
        let state = &mut self.state;
        self.lines.push_with(bytes, |line| state.decode(line))
    }

    pub(crate) fn finish(&mut self) -> Option<StreamEvent> {
        let state = &mut self.state;
        self.lines.finish_with(|line| state.decode(line))
    }
}

impl State {
    fn turn_id(&self) -> String {
        format!("gemini-turn-{}", self.turns)
    }

    fn decode(&mut self, line: &[u8]) -> StreamEvent {
        let line: Line = match super::parse_object(line) {
            Ok(l) => l,
            Err(reason) => return StreamEvent::Invalid { reason },
        };
        match (line.kind.as_str(), line.role.as_deref()) {
            ("init", _) => StreamEvent::Init {
                model: line.model,
                session_id: line.session_id,
            },
            ("message", Some("assistant")) => {
                if self.new_turn || self.turns == 0 {
                    self.turns += 1;
                    self.text.clear();
                    self.new_turn = false;
                }
                let chunk = line.content.unwrap_or_default();
                if self.text.len() + chunk.len() <= TURN_TEXT {
                    self.text.push_str(&chunk);
                }
                StreamEvent::Assistant(AssistantMessage {
                    id: self.turn_id(),
                    text: vec![self.text.clone()],
                    ..AssistantMessage::default()
                })
            }
            ("tool_use", _) => {
                if self.turns == 0 {
                    self.turns = 1;
                }
                let input = line.parameters.unwrap_or_default();
                StreamEvent::Assistant(AssistantMessage {
                    id: self.turn_id(),
                    tool_calls: vec![ToolCall {
                        id: line.tool_id.unwrap_or_default(),
                        name: tool_name(line.tool_name.as_deref().unwrap_or_default()),
                        path: input.path(),
                        summary: input.summary(),
                    }],
                    ..AssistantMessage::default()
                })
            }
            ("tool_result", _) => {
                self.new_turn = true;
                StreamEvent::User {
                    parent_tool_use_id: None,
                }
            }
            ("result", _) => {
                let ok = line.status.as_deref() == Some("success");
                let text = if ok {
                    (!self.text.is_empty()).then(|| self.text.clone())
                } else {
                    line.error
                        .unwrap_or_default()
                        .message
                        .or(line.status)
                        .or_else(|| Some("error".into()))
                };
                StreamEvent::Result(ResultMessage {
                    subtype: if ok { "success" } else { "error" }.into(),
                    is_error: !ok,
                    api_error_status: if ok {
                        None
                    } else {
                        text.as_deref().and_then(status_of)
                    },
                    text,
                    num_turns: self.turns,
                    ..ResultMessage::default()
                })
            }
            (kind, Some(role)) => StreamEvent::Other {
                kind: format!("{kind}/{role}"),
            },
            _ => StreamEvent::Other { kind: line.kind },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> Vec<StreamEvent> {
        let mut d = GeminiDecoder::new();
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
            .join("tests/fixtures/gemini-0.61.0")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn a_run_that_writes_a_file() {
        let events = decode(&fixture("write-file.jsonl"));
        assert!(matches!(
            &events[0],
            StreamEvent::Init { model: Some(m), session_id: Some(_) } if m == "gemini-2.5-flash"
        ));
        assert!(matches!(&events[1], StreamEvent::Other { kind } if kind == "message/user"));
        let msgs: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Assistant(m) => Some(m),
                _ => None,
            })
            .collect();
        // Not metered live: no usage on any message.
        assert!(msgs.iter().all(|m| m.usage.occupancy() == 0));
        let calls: Vec<_> = msgs.iter().flat_map(|m| &m.tool_calls).collect();
        assert_eq!(calls[0].name, "Write");
        assert_eq!(calls[0].path.as_deref(), Some("hello.txt"));
        assert_eq!(calls[1].name, "Bash");
        assert_eq!(calls[1].summary.as_deref(), Some("cat hello.txt"));
        let results = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::User { .. }))
            .count();
        assert_eq!(results, 2);
        let StreamEvent::Result(r) = events.last().unwrap() else {
            panic!("{:?}", events.last());
        };
        assert!(!r.is_error);
        assert_eq!(r.text.as_deref(), Some("Done: hello.txt says hello."));
        assert_eq!(r.num_turns, 2);
    }

    #[test]
    fn errors_and_limits() {
        for (file, status, words) in [
            ("api-error.jsonl", 400, "invalid argument"),
            ("usage-limit.jsonl", 429, "daily quota"),
        ] {
            let events = decode(&fixture(file));
            let StreamEvent::Result(r) = events.last().unwrap() else {
                panic!("{file}: {events:?}");
            };
            assert!(r.is_error, "{file}");
            assert_eq!(r.api_error_status, Some(status), "{file}");
            assert!(r.text.as_deref().unwrap().contains(words), "{file}: {r:?}");
        }
    }

    #[test]
    fn statuses_of_error_texts() {
        for (text, status) in [
            (
                "[API Error: {\"error\":{\"code\":500,\"message\":\"x\"}}]",
                Some(500),
            ),
            (
                "[API Error: You have exhausted your daily quota on this model.]",
                Some(429),
            ),
            ("Model stream ended with an invalid chunk", None),
            ("\"code\": 503 overloaded", Some(503)),
        ] {
            assert_eq!(status_of(text), status, "{text}");
        }
    }

    #[test]
    fn long_lines_keep_the_words_and_skip_tool_output() {
        // A turn's text over the 4 KiB every other string is cut at, and a
        // tool result of 8 MiB (skipped from its `type` on).
        let words = "Fixed the parser; ".repeat(2_000);
        let output = "\\\"x\\\" ".repeat(1 << 20);
        let stream = format!(
            "{{\"type\":\"message\",\"role\":\"assistant\",\"content\":\"{words}\",\"delta\":true}}\n\
             {{\"type\":\"tool_result\",\"tool_id\":\"t1\",\"status\":\"success\",\"output\":\"{output}\"}}\n"
        );
        let mut d = GeminiDecoder::new();
        let mut events = Vec::new();
        for mut rest in stream.as_bytes().chunks(64 << 10) {
            while !rest.is_empty() {
                let (used, e) = d.push(rest);
                events.extend(e);
                rest = &rest[used..];
            }
        }
        let [StreamEvent::Assistant(m), StreamEvent::User { .. }] = &events[..] else {
            panic!("{events:?}")
        };
        assert_eq!(m.text, [words]);
    }

    #[test]
    fn odd_lines() {
        let events = decode(
            b"{\"type\":\"error\",\"severity\":\"warning\",\"message\":\"Loop detected\"}\n[1]\n\n",
        );
        assert!(matches!(&events[0], StreamEvent::Other { kind } if kind == "error"));
        assert!(matches!(events[1], StreamEvent::Invalid { .. }));
        assert!(matches!(events[2], StreamEvent::Invalid { .. }));
    }
}
