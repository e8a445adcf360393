//! Decoding of the agent's `stream-json` output: one line → one typed
//! [`StreamEvent`], reading only the fields ralph needs, with bounded memory
//! however long the line (tool results can be many megabytes).

use std::collections::BTreeMap;
use std::io::{BufRead, Read};

use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// Lines up to this size are decoded from memory; longer ones are decoded
/// while they stream past, so memory stays bounded.
pub const MAX_BUFFERED_LINE: usize = 1 << 20;

/// Token usage of one API message, as the CLI reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// Context occupancy: the formula of Claude Code's own status line.
    pub fn occupancy(&self) -> u64 {
        self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens
    }
}

/// A tool call the agent made, with the fields ralph reports on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The file the tool works on (Write/Edit/Read/NotebookEdit), if any.
    pub path: Option<String>,
    /// A Bash command or a short description, cut to a reportable length.
    pub summary: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    Init {
        model: Option<String>,
        session_id: Option<String>,
    },
    Assistant(AssistantMessage),
    /// A user line (tool results, echoed input); content is never kept.
    User {
        parent_tool_use_id: Option<String>,
    },
    ApiRetry {
        attempt: u64,
        max_retries: u64,
        error_status: Option<u64>,
        error: Option<String>,
    },
    Compacted {
        pre_tokens: u64,
        post_tokens: u64,
    },
    RateLimit {
        status: String,
        resets_at: Option<i64>,
        kind: Option<String>,
    },
    Result(ResultMessage),
    /// Valid JSON of a type or subtype ralph does not use (skipped, counted).
    Other {
        kind: String,
    },
    /// Not JSON, not an object, or not UTF-8 (skipped, counted, reported).
    Invalid {
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssistantMessage {
    pub id: String,
    pub model: String,
    pub parent_tool_use_id: Option<String>,
    pub usage: Usage,
    pub text: Vec<String>,
    pub tool_calls: Vec<ToolCall>,
    /// Set on synthetic error messages (`rate_limit`, `invalid_request`, …).
    pub error: Option<String>,
}

impl AssistantMessage {
    pub fn is_main_thread(&self) -> bool {
        self.parent_tool_use_id.is_none()
    }

    pub fn is_synthetic(&self) -> bool {
        self.model == "<synthetic>"
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResultMessage {
    pub subtype: String,
    pub is_error: bool,
    pub api_error_status: Option<u64>,
    pub text: Option<String>,
    pub total_cost_usd: f64,
    pub num_turns: u64,
    pub terminal_reason: Option<String>,
    pub errors: Vec<String>,
    pub permission_denials: Vec<String>,
    /// `modelUsage.<model>.contextWindow` for each model that reported one.
    pub context_windows: BTreeMap<String, u64>,
}

/// Decode one line held in memory.
pub fn decode_line(line: &[u8]) -> StreamEvent {
    let line = trim_line(line);
    if line.is_empty() {
        return StreamEvent::Invalid {
            reason: "empty line".into(),
        };
    }
    classify(
        serde_json::from_slice::<RawLine>(line),
        line.first().copied(),
    )
}

/// Decode one line from a reader positioned at its start, consuming the
/// line and its newline. Memory use does not depend on the line's length.
/// Returns `None` at end of input.
pub fn decode_from<R: BufRead>(reader: &mut R, sink: &mut dyn FnMut(&[u8])) -> Option<StreamEvent> {
    let mut head = Vec::new();
    // Fast path: the whole line fits in the buffer limit.
    let complete = read_until_capped(reader, &mut head, MAX_BUFFERED_LINE, sink);
    if head.is_empty() && !complete.found_newline && complete.eof {
        return None;
    }
    if complete.found_newline || complete.eof {
        return Some(decode_line(&head));
    }
    // Slow path: stream the rest of the line through the decoder.
    let first = head.iter().copied().find(|b| !b.is_ascii_whitespace());
    let mut rest = LineRest {
        inner: reader,
        sink,
        done: false,
    };
    let parsed = {
        let chained = std::io::BufReader::with_capacity(
            64 * 1024,
            std::io::Cursor::new(&head[..]).chain(&mut rest),
        );
        let mut de = serde_json::Deserializer::from_reader(chained);
        RawLine::deserialize(&mut de).and_then(|raw| de.end().map(|()| raw))
    };
    // Whatever happened, skip to the end of this line.
    let _ = std::io::copy(&mut rest, &mut std::io::sink());
    Some(classify(parsed, first))
}

struct Capped {
    found_newline: bool,
    eof: bool,
}

/// Read up to and including a newline into `buf`, at most `cap` bytes.
fn read_until_capped<R: BufRead>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    cap: usize,
    sink: &mut dyn FnMut(&[u8]),
) -> Capped {
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => {
                return Capped {
                    found_newline: false,
                    eof: true,
                };
            }
        };
        if available.is_empty() {
            return Capped {
                found_newline: false,
                eof: true,
            };
        }
        let room = cap.saturating_sub(buf.len());
        let window = &available[..available.len().min(room)];
        if let Some(pos) = memchr(b'\n', window) {
            buf.extend_from_slice(&window[..=pos]);
            sink(&window[..=pos]);
            reader.consume(pos + 1);
            return Capped {
                found_newline: true,
                eof: false,
            };
        }
        let n = window.len();
        buf.extend_from_slice(window);
        sink(window);
        reader.consume(n);
        if buf.len() >= cap {
            return Capped {
                found_newline: false,
                eof: false,
            };
        }
    }
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

/// The rest of one line: reads until (and consumes) the newline, then EOF.
struct LineRest<'a, R> {
    inner: &'a mut R,
    sink: &'a mut dyn FnMut(&[u8]),
    done: bool,
}

impl<R: BufRead> Read for LineRest<'_, R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        let available = self.inner.fill_buf()?;
        if available.is_empty() {
            self.done = true;
            return Ok(0);
        }
        // Look no further than the caller can take: a byte-sized read must
        // not scan the whole buffer.
        let window = &available[..available.len().min(out.len())];
        let (n, end) = match memchr(b'\n', window) {
            Some(pos) => (pos, true),
            None => (window.len(), false),
        };
        out[..n].copy_from_slice(&available[..n]);
        let consumed = if end { n + 1 } else { n };
        (self.sink)(&available[..consumed]);
        self.inner.consume(consumed);
        self.done = end;
        Ok(n)
    }
}

fn trim_line(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |p| p + 1);
    let start = line[..end]
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(end);
    &line[start..end]
}

fn classify(parsed: serde_json::Result<RawLine>, first: Option<u8>) -> StreamEvent {
    match parsed {
        Ok(raw) => raw.into_event(),
        Err(e) => StreamEvent::Invalid {
            reason: if first == Some(b'{') {
                format!("malformed JSON line: {e}")
            } else {
                format!("not a JSON object: {e}")
            },
        },
    }
}

// ---- the wire shapes, with only the fields ralph reads ----

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawLine {
    #[serde(rename = "type")]
    kind: String,
    subtype: Option<String>,
    model: Option<String>,
    session_id: Option<String>,
    message: Option<RawMessage>,
    parent_tool_use_id: Option<String>,
    error: Option<Lenient>,
    // result
    is_error: Option<bool>,
    api_error_status: Option<Lenient>,
    result: Option<Lenient>,
    total_cost_usd: Option<f64>,
    num_turns: Option<u64>,
    terminal_reason: Option<String>,
    errors: Option<Vec<Lenient>>,
    permission_denials: Option<Vec<RawDenial>>,
    #[serde(rename = "modelUsage")]
    model_usage: Option<BTreeMap<String, RawModelUsage>>,
    // system/api_retry
    attempt: Option<u64>,
    max_retries: Option<u64>,
    error_status: Option<Lenient>,
    // system/compact_boundary
    compact_metadata: Option<RawCompact>,
    // rate_limit_event
    rate_limit_info: Option<RawRateLimit>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawMessage {
    id: String,
    model: String,
    usage: Usage,
    #[serde(deserialize_with = "blocks")]
    content: Vec<RawBlock>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawBlock {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<RawToolInput>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawToolInput {
    file_path: Option<Lenient>,
    notebook_path: Option<Lenient>,
    path: Option<Lenient>,
    command: Option<Lenient>,
    description: Option<Lenient>,
    pattern: Option<Lenient>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawDenial {
    tool_name: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawModelUsage {
    #[serde(rename = "contextWindow")]
    context_window: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawCompact {
    pre_tokens: u64,
    post_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawRateLimit {
    status: String,
    #[serde(rename = "resetsAt")]
    resets_at: Option<Lenient>,
    #[serde(rename = "rateLimitType")]
    kind: Option<String>,
}

/// A scalar of any JSON type, kept as text; objects and arrays are skipped
/// without being built. Fields whose type changed between CLI versions must
/// not make the whole line undecodable.
#[derive(Debug, Default)]
struct Lenient(Option<String>);

impl<'de> Deserialize<'de> for Lenient {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Lenient;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E>(self, v: &str) -> Result<Lenient, E> {
                Ok(Lenient(Some(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Lenient, E> {
                Ok(Lenient(Some(v)))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Lenient, E> {
                Ok(Lenient(Some(v.to_string())))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Lenient, E> {
                Ok(Lenient(Some(v.to_string())))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Lenient, E> {
                Ok(Lenient(Some(v.to_string())))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Lenient, E> {
                Ok(Lenient(Some(v.to_string())))
            }
            fn visit_unit<E>(self) -> Result<Lenient, E> {
                Ok(Lenient(None))
            }
            fn visit_none<E>(self) -> Result<Lenient, E> {
                Ok(Lenient(None))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Lenient, D::Error> {
                d.deserialize_any(V)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Lenient, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Lenient(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Lenient, A::Error> {
                // Keep an error object's "message" or "type", the useful part.
                let mut found = None;
                while let Some(key) = map.next_key::<String>()? {
                    if (key == "message" || key == "type") && found.is_none() {
                        found = map.next_value::<Lenient>()?.0;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Lenient(found))
            }
        }
        d.deserialize_any(V)
    }
}

impl Lenient {
    fn text(self) -> Option<String> {
        self.0
    }
    fn number(self) -> Option<u64> {
        self.0.and_then(|s| s.parse::<f64>().ok()).map(|f| f as u64)
    }
}

/// `content` is an array of blocks, or a plain string (skipped).
fn blocks<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<RawBlock>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<RawBlock>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("content blocks")
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(block) = seq.next_element::<RawBlock>()? {
                // Tool results and unknown block types carry nothing ralph reads.
                if block.kind == "text" || block.kind == "tool_use" {
                    out.push(block);
                }
            }
            Ok(out)
        }
    }
    d.deserialize_any(V)
}

const SUMMARY_LEN: usize = 200;

fn cut(text: String) -> String {
    if text.len() <= SUMMARY_LEN {
        return text;
    }
    let mut end = SUMMARY_LEN;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

impl RawLine {
    fn into_event(self) -> StreamEvent {
        let subtype = self.subtype.as_deref().unwrap_or("");
        match (self.kind.as_str(), subtype) {
            ("system", "init") => StreamEvent::Init {
                model: self.model,
                session_id: self.session_id,
            },
            ("system", "api_retry") => StreamEvent::ApiRetry {
                attempt: self.attempt.unwrap_or(0),
                max_retries: self.max_retries.unwrap_or(0),
                error_status: self.error_status.and_then(Lenient::number),
                error: self.error.and_then(Lenient::text),
            },
            ("system", "compact_boundary") => {
                let meta = self.compact_metadata.unwrap_or_default();
                StreamEvent::Compacted {
                    pre_tokens: meta.pre_tokens,
                    post_tokens: meta.post_tokens.unwrap_or(0),
                }
            }
            ("assistant", _) => {
                let message = self.message.unwrap_or_default();
                let mut text = Vec::new();
                let mut tool_calls = Vec::new();
                for block in message.content {
                    match block.kind.as_str() {
                        "text" => text.extend(block.text),
                        _ => {
                            let input = block.input.unwrap_or_default();
                            let path = [input.file_path, input.notebook_path, input.path]
                                .into_iter()
                                .flatten()
                                .find_map(Lenient::text);
                            let summary = [input.command, input.description, input.pattern]
                                .into_iter()
                                .flatten()
                                .find_map(Lenient::text)
                                .map(cut);
                            tool_calls.push(ToolCall {
                                id: block.id.unwrap_or_default(),
                                name: block.name.unwrap_or_default(),
                                path,
                                summary,
                            });
                        }
                    }
                }
                StreamEvent::Assistant(AssistantMessage {
                    id: message.id,
                    model: message.model,
                    parent_tool_use_id: self.parent_tool_use_id,
                    usage: message.usage,
                    text,
                    tool_calls,
                    error: self.error.and_then(Lenient::text),
                })
            }
            ("user", _) => StreamEvent::User {
                parent_tool_use_id: self.parent_tool_use_id,
            },
            ("rate_limit_event", _) => {
                let info = self.rate_limit_info.unwrap_or_default();
                StreamEvent::RateLimit {
                    status: info.status,
                    resets_at: info.resets_at.and_then(Lenient::number).map(|n| n as i64),
                    kind: info.kind,
                }
            }
            ("result", _) => StreamEvent::Result(ResultMessage {
                subtype: self.subtype.unwrap_or_default(),
                is_error: self.is_error.unwrap_or(false),
                api_error_status: self.api_error_status.and_then(Lenient::number),
                text: self.result.and_then(Lenient::text),
                total_cost_usd: self.total_cost_usd.unwrap_or(0.0),
                num_turns: self.num_turns.unwrap_or(0),
                terminal_reason: self.terminal_reason,
                errors: self
                    .errors
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(Lenient::text)
                    .collect(),
                permission_denials: self
                    .permission_denials
                    .unwrap_or_default()
                    .into_iter()
                    .map(|d| d.tool_name)
                    .collect(),
                context_windows: self
                    .model_usage
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|(m, u)| u.context_window.map(|w| (m, w)))
                    .collect(),
            }),
            (kind, sub) => StreamEvent::Other {
                kind: if sub.is_empty() {
                    kind.to_string()
                } else {
                    format!("{kind}/{sub}")
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufReader;
    use std::path::PathBuf;

    fn fixtures() -> Vec<(String, Vec<u8>)> {
        // A copy of ../shared/fixtures, so the crate tests on its own.
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude-2.1.197");
        let mut out: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("fixtures at {}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .map(|p| {
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read(&p).unwrap(),
                )
            })
            .collect();
        out.sort();
        out
    }

    fn decode_all(bytes: &[u8]) -> Vec<StreamEvent> {
        let mut reader = BufReader::new(bytes);
        let mut out = Vec::new();
        while let Some(e) = decode_from(&mut reader, &mut |_| {}) {
            out.push(e);
        }
        out
    }

    #[test]
    fn every_fixture_line_decodes() {
        let all = fixtures();
        assert!(all.len() >= 7, "fixtures missing");
        for (name, bytes) in all {
            for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
                if line.is_empty() {
                    continue;
                }
                let event = decode_line(line);
                assert!(
                    !matches!(event, StreamEvent::Invalid { .. }),
                    "{name}:{}: {event:?}",
                    i + 1
                );
            }
        }
    }

    #[test]
    fn tool_loop_fixture_shape() {
        let (_, bytes) = fixtures()
            .into_iter()
            .find(|(n, _)| n == "tool-loop-with-promise.jsonl")
            .unwrap();
        let events = decode_all(&bytes);
        let StreamEvent::Init { model, .. } = &events[0] else {
            panic!("{:?}", events[0])
        };
        assert_eq!(model.as_deref(), Some("claude-sonnet-4-5"));
        let writes: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Assistant(m) => Some(m.tool_calls.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(writes[0].name, "Bash");
        assert_eq!(writes[0].summary.as_deref(), Some("cat fix_plan.md"));
        assert_eq!(writes[1].name, "Write");
        assert_eq!(
            writes[1].path.as_deref(),
            Some("/home/user/project/parser.py")
        );
        let StreamEvent::Result(r) = events.last().unwrap() else {
            panic!()
        };
        assert!(
            r.text
                .as_deref()
                .unwrap()
                .contains("<promise>COMPLETE</promise>")
        );
        assert_eq!(r.context_windows["claude-sonnet-4-5"], 200_000);
        assert!((r.total_cost_usd - 0.255075).abs() < 1e-9);
    }

    #[test]
    fn error_fixtures() {
        let all = fixtures();
        let bytes = &all
            .iter()
            .find(|(n, _)| n == "api-error-prompt-too-long.jsonl")
            .unwrap()
            .1;
        let events = decode_all(bytes);
        let StreamEvent::Assistant(m) = &events[1] else {
            panic!()
        };
        assert!(m.is_synthetic());
        assert_eq!(m.error.as_deref(), Some("invalid_request"));
        let StreamEvent::Result(r) = &events[2] else {
            panic!()
        };
        assert!(r.is_error);
        assert_eq!(r.api_error_status, Some(400));
        assert_eq!(r.subtype, "success");

        let bytes = &all
            .iter()
            .find(|(n, _)| n == "sigint-during-tool.jsonl")
            .unwrap()
            .1;
        let StreamEvent::Result(r) = decode_all(bytes).pop().unwrap() else {
            panic!()
        };
        assert_eq!(r.subtype, "error_during_execution");
        assert_eq!(r.terminal_reason.as_deref(), Some("aborted_tools"));
        assert_eq!(r.errors.len(), 1);

        let bytes = &all
            .iter()
            .find(|(n, _)| n == "api-retry-then-success.jsonl")
            .unwrap()
            .1;
        let retries: Vec<_> = decode_all(bytes)
            .into_iter()
            .filter(|e| matches!(e, StreamEvent::ApiRetry { .. }))
            .collect();
        assert_eq!(
            retries[0],
            StreamEvent::ApiRetry {
                attempt: 1,
                max_retries: 10,
                error_status: Some(529),
                error: Some("overloaded".into())
            }
        );
    }

    #[test]
    fn subagent_lines_carry_their_parent() {
        let all = fixtures();
        let bytes = &all
            .iter()
            .find(|(n, _)| n == "subagent-task.jsonl")
            .unwrap()
            .1;
        let events = decode_all(bytes);
        let sub: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Assistant(m) if !m.is_main_thread() => Some(m),
                _ => None,
            })
            .collect();
        assert_eq!(sub.len(), 1);
        assert_eq!(sub[0].usage.occupancy(), 90_500);
        assert!(
            events.iter().any(
                |e| matches!(e, StreamEvent::Other { kind } if kind == "system/task_progress")
            )
        );
    }

    #[test]
    fn rate_limit_and_compaction_lines() {
        let e = decode_line(
            br#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1795300000,"rateLimitType":"five_hour"},"session_id":"x"}"#,
        );
        assert_eq!(
            e,
            StreamEvent::RateLimit {
                status: "rejected".into(),
                resets_at: Some(1_795_300_000),
                kind: Some("five_hour".into())
            }
        );
        let e = decode_line(
            br#"{"type":"system","subtype":"compact_boundary","compact_metadata":{"trigger":"auto","pre_tokens":167000,"post_tokens":21000}}"#,
        );
        assert_eq!(
            e,
            StreamEvent::Compacted {
                pre_tokens: 167_000,
                post_tokens: 21_000
            }
        );
    }

    #[test]
    fn garbage_is_invalid_not_fatal() {
        for line in [
            &b"not json"[..],
            b"{\"type\":",
            b"[1,2,3]",
            b"\xff\xfe\x00garbage",
            b"{\"type\":\"assistant\",\"message\":{\"usage\":\"weird\"}}",
        ] {
            assert!(
                matches!(decode_line(line), StreamEvent::Invalid { .. }),
                "{line:?}"
            );
        }
        assert!(matches!(
            decode_line(br#"{"type":"stream_event","event":{}}"#),
            StreamEvent::Other { .. }
        ));
    }

    #[test]
    fn changed_field_types_do_not_lose_the_line() {
        let e = decode_line(
            br#"{"type":"result","subtype":"error_max_turns","is_error":true,"api_error_status":"429","errors":[{"message":"max turns"}, "x"],"result":null}"#,
        );
        let StreamEvent::Result(r) = e else {
            panic!("{e:?}")
        };
        assert_eq!(r.api_error_status, Some(429));
        assert_eq!(r.errors, vec!["max turns".to_string(), "x".into()]);
        assert_eq!(r.text, None);
    }

    #[test]
    fn huge_line_streams_and_keeps_the_lines_around_it() {
        let mut stream = Vec::new();
        stream.extend_from_slice(br#"{"type":"system","subtype":"init","model":"m"}"#);
        stream.push(b'\n');
        stream.extend_from_slice(br#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":""#);
        stream.extend(std::iter::repeat_n(b'x', 5 * MAX_BUFFERED_LINE));
        stream.extend_from_slice(br#""}]},"parent_tool_use_id":null}"#);
        stream.push(b'\n');
        stream.extend_from_slice(b"garbage that is long");
        stream.extend(std::iter::repeat_n(b'y', 2 * MAX_BUFFERED_LINE));
        stream.push(b'\n');
        stream.extend_from_slice(br#"{"type":"result","subtype":"success","result":"done"}"#);
        let mut seen = 0usize;
        let mut reader = BufReader::new(&stream[..]);
        let mut events = Vec::new();
        while let Some(e) = decode_from(&mut reader, &mut |b| seen += b.len()) {
            events.push(e);
        }
        assert_eq!(seen, stream.len(), "every byte passes through the sink");
        assert_eq!(events.len(), 4, "{events:?}");
        assert!(matches!(
            events[1],
            StreamEvent::User {
                parent_tool_use_id: None
            }
        ));
        assert!(matches!(events[2], StreamEvent::Invalid { .. }));
        assert!(matches!(events[3], StreamEvent::Result(_)));
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(2000))]
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = decode_line(&bytes);
            let mut reader = BufReader::new(&bytes[..]);
            let mut n = 0usize;
            while decode_from(&mut reader, &mut |b| n += b.len()).is_some() {}
            proptest::prop_assert_eq!(n, bytes.len());
        }

        #[test]
        fn mutated_fixture_lines_never_panic(idx in 0usize..40, cut_at in 0usize..4000, flip in proptest::num::u8::ANY) {
            let all: Vec<Vec<u8>> = fixtures().into_iter().flat_map(|(_, b)| b.split(|&c| c == b'\n').map(<[u8]>::to_vec).collect::<Vec<_>>()).collect();
            let mut line = all[idx % all.len()].clone();
            if !line.is_empty() {
                let at = cut_at % line.len();
                line[at] ^= flip;
                let _ = decode_line(&line);
                let _ = decode_line(&line[..at]);
            }
        }
    }
}
