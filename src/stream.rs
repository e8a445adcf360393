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
/// In a line longer than [`MAX_BUFFERED_LINE`], every JSON string is cut to
/// its first this many bytes before decoding: the decoder holds a whole
/// string in memory, and a 64 MiB text or result must not cost 64 MiB
/// (or several times that, once copied). The agent's real messages are far
/// shorter (its output is capped in tokens); tool results are not kept.
pub const MAX_KEPT_STRING: usize = 64 * 1024;

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
    decode_from_with(reader, sink, Limits::DEFAULT)
}

/// Where [`decode_from`] switches to streaming, and how much of a string it
/// keeps then (small in tests, so that the slow path is fuzzed cheaply).
#[derive(Clone, Copy, Debug)]
struct Limits {
    line: usize,
    string: usize,
}

impl Limits {
    const DEFAULT: Limits = Limits {
        line: MAX_BUFFERED_LINE,
        string: MAX_KEPT_STRING,
    };
}

fn decode_from_with<R: BufRead>(
    reader: &mut R,
    sink: &mut dyn FnMut(&[u8]),
    limits: Limits,
) -> Option<StreamEvent> {
    let mut head = Vec::new();
    // Fast path: the whole line fits in the buffer limit.
    let complete = read_until_capped(reader, &mut head, limits.line, sink);
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
            CapStrings::new(
                std::io::Cursor::new(&head[..]).chain(&mut rest),
                limits.string,
            ),
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

/// Passes JSON text through with every string literal cut to its first
/// `max` bytes (at a character and escape boundary, marked with "…").
/// Bytes outside strings pass unchanged and only the tail of a long string
/// is dropped, so valid JSON stays valid; what is dropped is not judged
/// (a bad escape or byte in it does not make the line invalid).
struct CapStrings<R> {
    inner: R,
    max: usize,
    buf: Vec<u8>,
    /// Filtered bytes, handed out from `done` on.
    ready: Vec<u8>,
    done: usize,
    /// Where we are in the JSON text.
    at: Where,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Where {
    Outside,
    /// Inside a string: bytes kept so far, and bytes of an escape sequence
    /// still to come (after `\`: 1, or 4 for the digits of `\uXXXX`).
    Keeping {
        kept: usize,
        escape: u8,
    },
    /// Past the cut: dropping until the closing quote; true right after a
    /// backslash (the next byte is escaped, never the end).
    Dropping {
        after_backslash: bool,
    },
}

impl<R: Read> CapStrings<R> {
    fn new(inner: R, max: usize) -> Self {
        CapStrings {
            inner,
            max,
            buf: vec![0; 64 * 1024],
            ready: Vec::new(),
            done: 0,
            at: Where::Outside,
        }
    }

    /// Filter `input` into `out`, updating the position.
    fn filter(&mut self, input: &[u8], out: &mut Vec<u8>) {
        let mut i = 0;
        while i < input.len() {
            match self.at {
                Where::Outside => {
                    // Copy up to and including the next quote.
                    match memchr(b'"', &input[i..]) {
                        Some(p) => {
                            out.extend_from_slice(&input[i..=i + p]);
                            i += p + 1;
                            self.at = Where::Keeping { kept: 0, escape: 0 };
                        }
                        None => {
                            out.extend_from_slice(&input[i..]);
                            i = input.len();
                        }
                    }
                }
                Where::Keeping { kept, escape } => {
                    let b = input[i];
                    let boundary = escape == 0 && !(0x80..0xC0).contains(&b);
                    if kept >= self.max && boundary && b != b'"' {
                        out.extend_from_slice("…".as_bytes());
                        self.at = Where::Dropping {
                            after_backslash: false,
                        };
                        continue;
                    }
                    out.push(b);
                    i += 1;
                    self.at = match (escape, b) {
                        (0, b'"') => Where::Outside,
                        (0, b'\\') => Where::Keeping {
                            kept: kept + 1,
                            escape: 1,
                        },
                        (1, b'u') => Where::Keeping {
                            kept: kept + 1,
                            escape: 4,
                        },
                        (e, _) => Where::Keeping {
                            kept: kept + 1,
                            escape: e.saturating_sub(1),
                        },
                    };
                }
                Where::Dropping { after_backslash } => {
                    if after_backslash {
                        i += 1;
                        self.at = Where::Dropping {
                            after_backslash: false,
                        };
                        continue;
                    }
                    // Skip to the next quote or backslash (the 4 digits of
                    // `\uXXXX` are neither).
                    match input[i..].iter().position(|&b| b == b'"' || b == b'\\') {
                        Some(p) if input[i + p] == b'"' => {
                            out.push(b'"');
                            i += p + 1;
                            self.at = Where::Outside;
                        }
                        Some(p) => {
                            i += p + 1;
                            self.at = Where::Dropping {
                                after_backslash: true,
                            };
                        }
                        None => i = input.len(),
                    }
                }
            }
        }
    }
}

impl<R: Read> Read for CapStrings<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.done == self.ready.len() {
            let n = self.inner.read(&mut self.buf)?;
            if n == 0 {
                return Ok(0);
            }
            let input = std::mem::take(&mut self.buf);
            let mut ready = std::mem::take(&mut self.ready);
            ready.clear();
            self.filter(&input[..n], &mut ready);
            (self.buf, self.ready, self.done) = (input, ready, 0);
        }
        let n = out.len().min(self.ready.len() - self.done);
        out[..n].copy_from_slice(&self.ready[self.done..self.done + n]);
        self.done += n;
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

    #[test]
    fn long_strings_are_cut_at_a_boundary_and_short_ones_kept() {
        let cut = |json: &str, max: usize| {
            let mut out = String::new();
            CapStrings::new(json.as_bytes(), max)
                .read_to_string(&mut out)
                .unwrap();
            out
        };
        assert_eq!(
            cut(r#"{"a":"12345","b":[1,"x"]}"#, 5),
            r#"{"a":"12345","b":[1,"x"]}"#
        );
        assert_eq!(cut(r#"{"a":"123456"}"#, 5), r#"{"a":"12345…"}"#);
        // Never inside an escape or a character.
        assert_eq!(cut(r#"["1234\u00e9xyz"]"#, 5), r#"["1234\u00e9…"]"#);
        assert_eq!(cut(r#"["1234\"\\zz"]"#, 5), r#"["1234\"…"]"#);
        assert_eq!(cut("[\"1234éé\"]", 5), "[\"1234é…\"]");
        // Dropped escapes and quotes do not end the string early.
        assert_eq!(
            cut(r#"["123456\"\\\"7", "next"]"#, 3),
            r#"["123…", "nex…"]"#
        );
        // A line that is not JSON stays as broken as it was.
        assert_eq!(cut(r#"{"a":"12345678"#, 5), r#"{"a":"12345…"#);
    }

    // ---- fuzzing: structured stream-json lines, random chunkings ----

    use proptest::prelude::*;
    use proptest::test_runner::{Config as RunnerConfig, TestRunner};
    use serde_json::{Value, json};

    /// Any JSON value, nested a few levels, with strings that need escapes
    /// and non-ASCII text.
    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "\\PC{0,12}|[\"\\\\\n\t\u{0}\u{7f}é✓😀]{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// A value of the field's usual type most of the time, anything else
    /// sometimes (field types change between CLI versions).
    fn usually<S: Strategy<Value = Value> + 'static>(usual: S) -> BoxedStrategy<Value> {
        prop_oneof![4 => usual, 1 => any_json()].boxed()
    }

    fn text() -> BoxedStrategy<Value> {
        usually("\\PC{0,40}".prop_map(Value::from))
    }

    fn count() -> BoxedStrategy<Value> {
        usually(any::<u32>().prop_map(Value::from))
    }

    fn block() -> impl Strategy<Value = Value> {
        prop_oneof![
            text().prop_map(|t| json!({"type": "text", "text": t})),
            (text(), text(), text()).prop_map(|(name, path, command)| json!({
                "type": "tool_use", "id": "toolu_1", "name": name,
                "input": {"file_path": path, "command": command}
            })),
            any_json().prop_map(|c| json!({"type": "tool_result", "content": c})),
            any_json(),
        ]
    }

    /// A runner for `cases` cases (no failure file: the seed is printed).
    fn runner(cases: u32) -> TestRunner {
        TestRunner::new(RunnerConfig {
            cases,
            failure_persistence: None,
            ..RunnerConfig::default()
        })
    }

    /// A line shaped like the CLI's: a known type with its fields, of the
    /// right types or not, with unknown fields around them.
    fn stream_line() -> impl Strategy<Value = Value> {
        let kind = prop_oneof![
            Just("system"),
            Just("assistant"),
            Just("user"),
            Just("result"),
            Just("rate_limit_event"),
            Just("stream_event"),
        ];
        let subtype = prop_oneof![
            Just(Value::Null),
            Just(json!("init")),
            Just(json!("api_retry")),
            Just(json!("compact_boundary")),
            Just(json!("success")),
            Just(json!("error_during_execution")),
            text(),
        ];
        let usage = usually(
            (count(), count(), count(), count()).prop_map(|(i, o, c, r)| {
                json!({
                    "input_tokens": i, "output_tokens": o,
                    "cache_creation_input_tokens": c, "cache_read_input_tokens": r
                })
            }),
        );
        let message = usually(
            (
                text(),
                text(),
                usage,
                usually(prop::collection::vec(block(), 0..4).prop_map(Value::from)),
            )
                .prop_map(|(id, model, usage, content)| {
                    json!({
                        "id": id, "model": model, "usage": usage, "content": content
                    })
                }),
        );
        let extra = prop::collection::btree_map("[a-z_]{1,10}", any_json(), 0..3);
        (
            kind,
            subtype,
            message,
            text(),
            usually(any::<bool>().prop_map(Value::from)),
            (
                count(),
                any_json(),
                any_json(),
                any_json(),
                any_json(),
                any_json(),
            ),
            extra,
        )
            .prop_map(
                |(
                    kind,
                    subtype,
                    message,
                    result,
                    is_error,
                    (n, errors, denials, usage, limit, compact),
                    extra,
                )| {
                    let mut line = json!({
                        "type": kind, "subtype": subtype, "message": message,
                        "parent_tool_use_id": null, "result": result, "is_error": is_error,
                        "total_cost_usd": 0.5, "num_turns": n, "errors": errors,
                        "permission_denials": denials, "modelUsage": usage,
                        "rate_limit_info": limit, "compact_metadata": compact,
                        "attempt": n, "error_status": n,
                    });
                    line.as_object_mut().unwrap().extend(extra);
                    line
                },
            )
    }

    /// A line as bytes: the JSON, sometimes damaged (cut short, a byte
    /// changed, JSON whitespace around it).
    fn line_bytes() -> impl Strategy<Value = Vec<u8>> {
        (
            stream_line(),
            0usize..4,
            any::<prop::sample::Index>(),
            any::<u8>(),
            0usize..3,
        )
            .prop_map(|(v, damage, at, byte, pad)| {
                let mut b = serde_json::to_vec(&v).unwrap();
                let i = at.index(b.len());
                match damage {
                    1 => b.truncate(i),
                    2 if byte != b'\n' => b[i] = byte,
                    _ => {}
                }
                let ws: &[u8] = [&b""[..], b"  ", b"\t\r"][pad];
                [ws, &b[..], ws].concat()
            })
    }

    /// Hands out its bytes in chunks of the given sizes, in turn.
    struct Chunked<'a> {
        bytes: &'a [u8],
        sizes: Vec<usize>,
        n: usize,
    }

    impl Read for Chunked<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let size = self.sizes[self.n % self.sizes.len()]
                .min(out.len())
                .min(self.bytes.len());
            self.n += 1;
            out[..size].copy_from_slice(&self.bytes[..size]);
            self.bytes = &self.bytes[size..];
            Ok(size)
        }
    }

    /// Events compared without the wording of an invalid line's reason
    /// (positions differ between the in-memory and the streaming decoder).
    fn comparable(e: StreamEvent) -> StreamEvent {
        match e {
            StreamEvent::Invalid { .. } => StreamEvent::Invalid {
                reason: String::new(),
            },
            e => e,
        }
    }

    /// Decoding a stream of lines chunk by chunk, through the buffered
    /// path and the streaming one (small limits, so that both run), equals
    /// decoding each line in memory once its strings are capped; every
    /// byte reaches the transcript sink.
    fn check_chunked_decoding(cases: u32) {
        let input = (
            prop::collection::vec(line_bytes(), 1..6),
            prop::collection::vec(1usize..300, 1..5),
            1usize..200,
            prop_oneof![Just(usize::MAX), 8usize..400],
            4usize..64,
            any::<bool>(),
        );
        let mut runner = runner(cases);
        runner
            .run(
                &input,
                |(lines, sizes, capacity, line_limit, string_limit, last_newline)| {
                    let mut stream = lines.join(&b'\n');
                    if last_newline {
                        stream.push(b'\n');
                    }
                    let limits = Limits {
                        line: line_limit,
                        string: string_limit,
                    };
                    let mut reader = std::io::BufReader::with_capacity(
                        capacity,
                        Chunked {
                            bytes: &stream,
                            sizes,
                            n: 0,
                        },
                    );
                    let mut seen = 0;
                    let mut got = Vec::new();
                    while let Some(e) =
                        decode_from_with(&mut reader, &mut |b| seen += b.len(), limits)
                    {
                        got.push(comparable(e));
                    }
                    prop_assert_eq!(seen, stream.len());
                    // An empty last line with no newline after it is no line.
                    let mut lines = lines;
                    if !last_newline && lines.last().is_some_and(Vec::is_empty) {
                        lines.pop();
                    }
                    let want: Vec<StreamEvent> = lines
                        .iter()
                        .map(|l| {
                            if l.len() < line_limit {
                                return decode_line(l);
                            }
                            // The streaming path judges the line with its
                            // strings capped.
                            let mut capped = Vec::new();
                            CapStrings::new(&l[..], string_limit)
                                .read_to_end(&mut capped)
                                .unwrap();
                            let first = l.iter().copied().find(|b| !b.is_ascii_whitespace());
                            classify(serde_json::from_slice::<RawLine>(&capped), first)
                        })
                        .map(comparable)
                        .collect();
                    prop_assert_eq!(got, want);
                    Ok(())
                },
            )
            .unwrap();
    }

    #[test]
    fn chunked_decoding_equals_line_decoding() {
        check_chunked_decoding(600);
    }

    #[test]
    #[ignore = "long mode"]
    fn chunked_decoding_equals_line_decoding_long() {
        check_chunked_decoding(10_000);
    }

    /// What a well-formed assistant line says is what the decoder reads.
    fn check_assistant_lines(cases: u32) {
        let input = (
            "[a-z0-9_]{1,20}",
            "\\PC{1,30}",
            (any::<u32>(), any::<u32>(), any::<u32>()),
            prop::collection::vec("\\PC{0,50}", 0..3),
            prop::collection::vec(("[A-Za-z]{1,12}", "\\PC{1,40}"), 0..3),
            prop::option::of("[a-z0-9_]{1,12}"),
        );
        let mut runner = runner(cases);
        runner
            .run(&input, |(id, model, (i, c, r), texts, tools, parent)| {
                let mut content: Vec<Value> =
                    texts.iter().map(|t| json!({"type": "text", "text": t})).collect();
                content.extend(tools.iter().map(|(name, path)| json!({
                    "type": "tool_use", "id": "t", "name": name, "input": {"file_path": path}
                })));
                let line = json!({
                    "type": "assistant",
                    "message": {"id": id, "model": model, "content": content,
                        "usage": {"input_tokens": i, "cache_creation_input_tokens": c, "cache_read_input_tokens": r, "output_tokens": 1}},
                    "parent_tool_use_id": parent,
                });
                let StreamEvent::Assistant(m) = decode_line(&serde_json::to_vec(&line).unwrap()) else {
                    return Err(TestCaseError::fail("not an assistant line"));
                };
                prop_assert_eq!(&m.id, &id);
                prop_assert_eq!(&m.model, &model);
                prop_assert_eq!(m.usage.occupancy(), u64::from(i) + u64::from(c) + u64::from(r));
                prop_assert_eq!(&m.text, &texts);
                let names: Vec<&str> = m.tool_calls.iter().map(|t| t.name.as_str()).collect();
                let want: Vec<&str> = tools.iter().map(|(n, _)| n.as_str()).collect();
                prop_assert_eq!(names, want);
                let paths: Vec<Option<&str>> = m.tool_calls.iter().map(|t| t.path.as_deref()).collect();
                let want: Vec<Option<&str>> = tools.iter().map(|(_, p)| Some(p.as_str())).collect();
                prop_assert_eq!(paths, want);
                prop_assert_eq!(m.parent_tool_use_id, parent);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn assistant_lines_decode_to_what_they_say() {
        check_assistant_lines(500);
    }

    #[test]
    #[ignore = "long mode"]
    fn assistant_lines_decode_to_what_they_say_long() {
        check_assistant_lines(20_000);
    }

    /// Capping keeps valid JSON valid, the same shape, each string a
    /// prefix of the original, short strings whole.
    fn check_capping(cases: u32) {
        // The cap counts bytes as written in JSON (escapes included).
        fn encoded(s: &str) -> usize {
            serde_json::to_string(s).unwrap().len() - 2
        }
        fn same_shape(a: &Value, b: &Value, max: usize) -> bool {
            match (a, b) {
                // Kept whole: short enough (a character or escape begun
                // before the cap is kept whole, up to 5 bytes more).
                (Value::String(a), Value::String(b)) if a == b => encoded(a) <= max + 5,
                (Value::String(a), Value::String(b)) => b
                    .strip_suffix('…')
                    .is_some_and(|p| a.starts_with(p) && encoded(p) >= max),
                (Value::Array(a), Value::Array(b)) => {
                    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_shape(a, b, max))
                }
                (Value::Object(a), Value::Object(b)) => {
                    a.len() == b.len()
                        && a.iter().zip(b).all(|((ka, a), (kb, b))| {
                            same_shape(&Value::from(ka.as_str()), &Value::from(kb.as_str()), max)
                                && same_shape(a, b, max)
                        })
                }
                (a, b) => a == b,
            }
        }
        // Keys are at most 8 bytes: cut keys could collide, changing the shape.
        let input = (any_json(), 8usize..24);
        let mut runner = runner(cases);
        runner
            .run(&input, |(v, max)| {
                let text = serde_json::to_vec(&v).unwrap();
                let mut out = Vec::new();
                CapStrings::new(&text[..], max)
                    .read_to_end(&mut out)
                    .unwrap();
                let back: Value = serde_json::from_slice(&out).map_err(|e| {
                    TestCaseError::fail(format!("{e}: {}", String::from_utf8_lossy(&out)))
                })?;
                // Parsed the same way as the capped text (float printing
                // does not round-trip exactly).
                let v: Value = serde_json::from_slice(&text).unwrap();
                prop_assert!(same_shape(&v, &back, max), "{} -> {}", v, back);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn capping_keeps_json_valid_and_strings_prefixes() {
        check_capping(1000);
    }

    #[test]
    #[ignore = "long mode"]
    fn capping_keeps_json_valid_and_strings_prefixes_long() {
        check_capping(50_000);
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
