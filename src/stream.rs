//! Decoding of the agent's `stream-json` output: one line → one typed
//! [`StreamEvent`], reading only the fields ralph needs, with bounded memory
//! however long the line (tool results can be many megabytes).

use std::collections::BTreeMap;
use std::io::BufRead;

use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

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
/// line and its newline; every byte consumed is passed to `sink` too.
/// Memory use does not depend on the line's length. Returns `None` at end
/// of input.
pub fn decode_from<R: BufRead>(reader: &mut R, sink: &mut dyn FnMut(&[u8])) -> Option<StreamEvent> {
    let mut decoder = LineDecoder::new();
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return decoder.finish(),
        };
        if available.is_empty() {
            return decoder.finish();
        }
        let (used, event) = decoder.push(available);
        sink(&available[..used]);
        reader.consume(used);
        if event.is_some() {
            return event;
        }
    }
}

/// Lines up to this length that arrive whole are decoded in place, from the
/// reader's buffer, without a copy.
pub const DIRECT_LINE: usize = 16 << 10;
/// Strings ralph does not read in full (tool results, file contents, ids)
/// are kept up to this many bytes when a line is compacted.
const SHORT_STRING: usize = 4 << 10;
/// The model's own words (`text` blocks, a result's `result`) are kept up to
/// this many bytes; a model turn is far shorter (max output tokens).
const LONG_STRING: usize = 1 << 20;
/// Past this much kept, strings other than the model's words are kept empty.
const SOFT_LIMIT: usize = 1 << 20;
/// Most a compacted line may hold: the memory bound of decoding one line,
/// however long. A line with more JSON structure than this outside its
/// strings (never seen in practice) is reported as invalid.
pub const MAX_COMPACTED: usize = 4 << 20;
/// serde_json's own nesting limit.
const MAX_DEPTH: usize = 128;

/// Incremental decoder of a stream of lines, fed with whatever chunks the
/// pipe gives; its memory does not depend on the length of a line.
///
/// A line that arrives whole and short ([`DIRECT_LINE`]) is decoded where it
/// lies. Any other line is *compacted* while it streams past: its JSON
/// structure and short strings are copied; long strings are cut (the model's
/// `text`/`result` at 1 MiB, everything else, above all tool results, at
/// 4 KiB) and what is cut is skipped with `memchr`, neither parsed nor
/// allocated; containers ralph never reads (`tool_use_result`, the body of a
/// `user` line) are replaced by `null`, and a `user` line is left for its
/// newline once its `parent_tool_use_id` is read. The compacted line, a few
/// KiB, is then decoded like a short one. The one difference to decoding the
/// whole line: skipped bytes are not checked for valid JSON, which only
/// matters for bytes ralph does not read.
#[derive(Debug)]
pub struct LineDecoder {
    /// The compacted line so far.
    kept: Vec<u8>,
    /// Bytes of the current line seen (0: at the start of a line).
    seen: u64,
    depth: usize,
    /// Container kinds (`{` or `[`) up to [`MAX_DEPTH`].
    stack: Vec<u8>,
    /// In an object, the next string is a key.
    expect_key: bool,
    /// The last key read at the current object level (its first 32 bytes).
    key: [u8; 32],
    key_len: usize,
    string: Option<StringState>,
    /// Inside a container that is dropped: the depth it was opened at.
    skip_from: Option<usize>,
    /// `"type":"user"` seen at the top level: nothing below it is read.
    user_line: bool,
    /// Everything ralph reads of this line is kept: skip to its end.
    done: bool,
    overflow: bool,
}

#[derive(Debug, Clone, Copy)]
struct StringState {
    is_key: bool,
    /// Start of the string's content in `kept`.
    start: usize,
    cap: usize,
    /// Nothing more of this string is kept (cap reached, or dropped).
    full: bool,
    /// Inside a dropped container: not even the quotes are kept.
    dropped: bool,
    /// The bytes seen so far end in an odd run of backslashes: the next
    /// byte is escaped.
    odd_backslashes: bool,
}

/// Bytes that end a run of JSON outside strings.
const STRUCTURE: [bool; 256] = {
    let mut t = [false; 256];
    let special = b"\"\n{}[]:,";
    let mut i = 0;
    while i < special.len() {
        t[special[i] as usize] = true;
        i += 1;
    }
    t
};

impl Default for LineDecoder {
    fn default() -> Self {
        LineDecoder::new()
    }
}

impl LineDecoder {
    pub fn new() -> LineDecoder {
        LineDecoder {
            kept: Vec::new(),
            seen: 0,
            depth: 0,
            stack: Vec::new(),
            expect_key: false,
            key: [0; 32],
            key_len: 0,
            string: None,
            skip_from: None,
            user_line: false,
            done: false,
            overflow: false,
        }
    }

    /// Feed the next bytes of the stream. Consumes up to and including the
    /// end of the current line; returns how many bytes were consumed and the
    /// decoded line if it ended there. Call again with the rest.
    pub fn push(&mut self, bytes: &[u8]) -> (usize, Option<StreamEvent>) {
        if self.seen == 0 {
            let direct = &bytes[..bytes.len().min(DIRECT_LINE + 1)];
            if let Some(end) = memchr::memchr(b'\n', direct) {
                return (end + 1, Some(decode_line(&bytes[..end])));
            }
        }
        let (used, ended) = self.scan(bytes);
        self.seen += used as u64;
        if ended {
            (used, Some(self.end_line()))
        } else {
            (used, None)
        }
    }

    /// End of input: the last line, if it had no newline.
    pub fn finish(&mut self) -> Option<StreamEvent> {
        (self.seen > 0).then(|| self.end_line())
    }

    fn end_line(&mut self) -> StreamEvent {
        let event = if self.overflow {
            StreamEvent::Invalid {
                reason: format!(
                    "line of {} bytes has more than {} MiB of JSON outside its strings",
                    self.seen,
                    MAX_COMPACTED >> 20
                ),
            }
        } else {
            decode_line(&self.kept)
        };
        self.kept.clear();
        if self.kept.capacity() > 2 * LONG_STRING {
            self.kept.shrink_to(64 << 10);
        }
        self.seen = 0;
        self.depth = 0;
        self.stack.clear();
        self.expect_key = false;
        self.key_len = 0;
        self.string = None;
        self.skip_from = None;
        self.user_line = false;
        self.done = false;
        self.overflow = false;
        event
    }

    fn keep(&mut self, bytes: &[u8]) {
        if self.skip_from.is_some() {
            return;
        }
        if self.kept.len() + bytes.len() <= MAX_COMPACTED {
            self.kept.extend_from_slice(bytes);
        } else {
            self.overflow = true;
        }
    }

    fn top(&self) -> Option<u8> {
        if self.depth <= MAX_DEPTH {
            self.stack.last().copied()
        } else {
            None
        }
    }

    fn key_is(&self, name: &[u8]) -> bool {
        &self.key[..self.key_len] == name
    }

    /// Scan up to the end of the line: (bytes used, line ended).
    fn scan(&mut self, bytes: &[u8]) -> (usize, bool) {
        let mut i = 0;
        while i < bytes.len() {
            if self.done {
                return match memchr::memchr(b'\n', &bytes[i..]) {
                    Some(end) => (i + end + 1, true),
                    None => (bytes.len(), false),
                };
            }
            if let Some(mut st) = self.string {
                let (used, end) = self.scan_string(&mut st, &bytes[i..]);
                i += used;
                match end {
                    StringEnd::Open => self.string = Some(st),
                    StringEnd::Closed => {
                        self.string = None;
                        self.close_string(&st);
                    }
                    StringEnd::Newline => {
                        // A raw newline cannot be inside a JSON string: the
                        // line ends here, malformed.
                        self.string = None;
                        return (i, true);
                    }
                }
                continue;
            }
            // Outside strings: structure, numbers, literals, whitespace.
            let rest = &bytes[i..];
            let stop = rest
                .iter()
                .position(|&b| STRUCTURE[b as usize])
                .unwrap_or(rest.len());
            self.keep(&rest[..stop]);
            i += stop;
            let Some(&c) = rest.get(stop) else { break };
            i += 1;
            match c {
                b'\n' => return (i, true),
                b'"' => self.open_string(),
                b'{' | b'[' => {
                    let value_of = self.top() == Some(b'{') && !self.expect_key;
                    if self.skip_from.is_none()
                        && value_of
                        && self.depth == 1
                        && (self.user_line || self.key_is(b"tool_use_result"))
                    {
                        // Nothing in here is read: keep `null` in its place.
                        self.keep(b"null");
                        self.skip_from = Some(self.depth + 1);
                    }
                    self.keep(&[c]);
                    self.depth += 1;
                    if self.depth <= MAX_DEPTH {
                        self.stack.push(c);
                    }
                    self.expect_key = c == b'{';
                    self.key_len = 0;
                }
                b'}' | b']' => {
                    self.keep(&[c]);
                    if self.depth <= MAX_DEPTH {
                        self.stack.pop();
                    }
                    if self.skip_from == Some(self.depth) {
                        self.skip_from = None;
                    }
                    self.depth = self.depth.saturating_sub(1);
                    self.expect_key = false;
                }
                b':' => {
                    self.keep(b":");
                    self.expect_key = false;
                }
                _ => {
                    if self.user_line && self.depth == 1 && self.key_is(b"parent_tool_use_id") {
                        // All a user line gives ralph; Claude Code puts it
                        // before `tool_use_result`, a second copy of the
                        // tool's output: no need to scan that.
                        self.keep(b"}");
                        self.done = true;
                        continue;
                    }
                    self.keep(b",");
                    self.expect_key = self.top() == Some(b'{');
                }
            }
        }
        (bytes.len(), false)
    }

    fn open_string(&mut self) {
        let dropped = self.skip_from.is_some();
        let is_key = self.expect_key && self.top() == Some(b'{');
        let words = !self.user_line
            && !is_key
            && self.top() == Some(b'{')
            && (self.key_is(b"text") || self.key_is(b"result"));
        let cap = if dropped {
            0
        } else if words {
            LONG_STRING.min(MAX_COMPACTED.saturating_sub(self.kept.len() + SOFT_LIMIT))
        } else if self.kept.len() > SOFT_LIMIT && !is_key {
            0
        } else {
            SHORT_STRING
        };
        self.keep(b"\"");
        self.string = Some(StringState {
            is_key,
            start: self.kept.len(),
            cap,
            full: dropped,
            dropped,
            odd_backslashes: false,
        });
    }

    fn close_string(&mut self, st: &StringState) {
        if st.dropped {
            return;
        }
        let content = self.kept.get(st.start..).unwrap_or_default();
        if st.is_key {
            let n = content.len().min(self.key.len());
            self.key[..n].copy_from_slice(&content[..n]);
            self.key_len = n;
        } else if self.depth == 1 && self.key_is(b"type") {
            self.user_line = content == b"user";
        }
        self.keep(b"\"");
    }

    /// Inside a string: keep what fits under its cap, skip the rest. Escape
    /// sequences need no decoding here: a quote ends the string unless an
    /// odd run of backslashes precedes it.
    fn scan_string(&mut self, st: &mut StringState, bytes: &[u8]) -> (usize, StringEnd) {
        let mut from = 0;
        loop {
            let Some(k) = memchr::memchr2(b'"', b'\n', &bytes[from..]).map(|k| from + k) else {
                self.keep_string(st, &bytes[from..]);
                st.odd_backslashes = odd_run_before(bytes, bytes.len(), st.odd_backslashes);
                return (bytes.len(), StringEnd::Open);
            };
            if bytes[k] == b'\n' {
                return (k + 1, StringEnd::Newline);
            }
            if odd_run_before(bytes, k, st.odd_backslashes) {
                // An escaped quote: part of the content.
                self.keep_string(st, &bytes[from..=k]);
                st.odd_backslashes = false;
                from = k + 1;
                continue;
            }
            self.keep_string(st, &bytes[from..k]);
            return (k + 1, StringEnd::Closed);
        }
    }

    /// Keep `part` of a string's content as far as its cap allows, cut at
    /// a character boundary and never inside an escape sequence.
    fn keep_string(&mut self, st: &mut StringState, part: &[u8]) {
        if st.full || part.is_empty() {
            return;
        }
        let room = (st.start + st.cap).saturating_sub(self.kept.len());
        if part.len() <= room {
            self.keep(part);
            return;
        }
        st.full = true;
        let mut cut = room;
        while cut > 0 && (part[cut] & 0xC0) == 0x80 {
            cut -= 1;
        }
        self.keep(&part[..cut]);
        if self.kept.len() > st.start {
            let safe = st.start + escape_safe_len(&self.kept[st.start..]);
            self.kept.truncate(safe);
        }
    }
}

enum StringEnd {
    Open,
    Closed,
    Newline,
}

/// Whether the backslashes right before `end` in `bytes` form an odd run;
/// `carry` is that parity for the bytes before `bytes` (same string).
fn odd_run_before(bytes: &[u8], end: usize, carry: bool) -> bool {
    let run = bytes[..end]
        .iter()
        .rev()
        .take_while(|&&b| b == b'\\')
        .count();
    if run == end {
        carry ^ (run % 2 == 1)
    } else {
        run % 2 == 1
    }
}

/// The longest prefix of a string's raw content (`content`, cut anywhere
/// at a character boundary) that ends neither inside an escape sequence nor
/// after the first half of a surrogate pair.
fn escape_safe_len(content: &[u8]) -> usize {
    let starts_escape = |c: &[u8], p: usize| c[p] == b'\\' && !odd_run_before(c, p, false);
    let mut len = content.len();
    for p in (len.saturating_sub(6)..len).rev() {
        if starts_escape(content, p) {
            let need = if content.get(p + 1) == Some(&b'u') {
                6
            } else {
                2
            };
            if p + need > len {
                len = p;
            }
            break;
        }
    }
    if len >= 6
        && starts_escape(content, len - 6)
        && is_high_surrogate_escape(&content[len - 6..len])
    {
        len -= 6;
    }
    len
}

/// `\uD800`–`\uDBFF`: the first half of a surrogate pair.
fn is_high_surrogate_escape(esc: &[u8]) -> bool {
    esc.len() == 6
        && esc[1] == b'u'
        && matches!(esc[2], b'd' | b'D')
        && matches!(esc[3], b'8' | b'9' | b'a' | b'b' | b'A' | b'B')
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
        stream.extend(std::iter::repeat_n(b'x', 5 * MAX_COMPACTED));
        stream.extend_from_slice(br#""}]},"parent_tool_use_id":null}"#);
        stream.push(b'\n');
        stream.extend_from_slice(b"garbage that is long");
        stream.extend(std::iter::repeat_n(b'y', 2 * MAX_COMPACTED));
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

    /// Feed `bytes` to a [`LineDecoder`] in chunks of `chunk` bytes.
    fn decode_chunked(bytes: &[u8], chunk: usize) -> Vec<StreamEvent> {
        let mut d = LineDecoder::new();
        let mut out = Vec::new();
        for part in bytes.chunks(chunk.max(1)) {
            let mut rest = part;
            while !rest.is_empty() {
                let (used, event) = d.push(rest);
                out.extend(event);
                rest = &rest[used..];
            }
        }
        out.extend(d.finish());
        out
    }

    fn all_fixture_bytes() -> Vec<u8> {
        fixtures().into_iter().flat_map(|(_, b)| b).collect()
    }

    #[test]
    fn chunk_boundaries_do_not_change_the_events() {
        let bytes = all_fixture_bytes();
        let whole: Vec<_> = bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(decode_line)
            .collect();
        for chunk in [1, 2, 3, 5, 17, 64, 1000, 4096, 1 << 20] {
            assert_eq!(decode_chunked(&bytes, chunk), whole, "chunks of {chunk}");
        }
    }

    fn assistant_text_line(text_json: &str) -> Vec<u8> {
        format!(
            r#"{{"type":"assistant","message":{{"id":"m1","model":"claude-sonnet-4-5","content":[{{"type":"text","text":"{text_json}"}}],"usage":{{"input_tokens":5,"cache_read_input_tokens":100}}}},"parent_tool_use_id":null}}"#
        )
        .into_bytes()
    }

    #[test]
    fn long_model_text_is_kept_whole_in_any_chunking() {
        // 300 KiB of text with escapes, quotes and multi-byte characters.
        let text: String = (0..6000)
            .map(|i| format!("line {i} with \"quotes\", a tab\t, é → ✓ 😀 and \\ end\n"))
            .collect();
        let escaped = serde_json::to_string(&text).unwrap();
        let mut line = assistant_text_line(&escaped[1..escaped.len() - 1]);
        line.push(b'\n');
        assert!(line.len() > DIRECT_LINE);
        for chunk in [7, 4096, 1 << 20] {
            let events = decode_chunked(&line, chunk);
            let [StreamEvent::Assistant(m)] = &events[..] else {
                panic!("{events:?}")
            };
            assert_eq!(m.text, vec![text.clone()], "chunks of {chunk}");
            assert_eq!(m.usage.occupancy(), 105);
        }
    }

    #[test]
    fn cut_strings_stay_valid_wherever_the_cut_falls() {
        // Text over LONG_STRING made of escapes: whatever the offset, the
        // cut must not split an escape sequence or a surrogate pair.
        let unit = r#"\ud83d\ude00\\\"\n\u00e9é"#;
        for pad in 0..12 {
            let mut body = "x".repeat(pad);
            while body.len() < LONG_STRING + 64 {
                body.push_str(unit);
            }
            let mut line = assistant_text_line(&body);
            line.push(b'\n');
            let events = decode_chunked(&line, 64 << 10);
            let [StreamEvent::Assistant(m)] = &events[..] else {
                panic!("pad {pad}: {events:?}")
            };
            let text = &m.text[0];
            // The cap counts raw bytes; escapes decode to fewer.
            assert!(text.len() <= LONG_STRING && text.len() > LONG_STRING / 3);
            assert!(text.ends_with(['😀', '\\', '"', '\n', 'é']), "pad {pad}");
        }
    }

    #[test]
    fn result_text_over_the_cap_is_cut_not_lost() {
        let mut text = String::from("All done. <promise>COMPLETE</promise> ");
        text.push_str(&"and more words ".repeat(LONG_STRING / 10));
        let line = format!(
            r#"{{"type":"result","subtype":"success","result":{},"total_cost_usd":0.5,"modelUsage":{{"m":{{"contextWindow":200000}}}}}}"#,
            serde_json::to_string(&text).unwrap()
        );
        let events = decode_chunked(line.as_bytes(), 1 << 20);
        let [StreamEvent::Result(r)] = &events[..] else {
            panic!("{events:?}")
        };
        let kept = r.text.as_deref().unwrap();
        assert!(kept.starts_with("All done. <promise>COMPLETE</promise>"));
        assert!(kept.len() <= LONG_STRING);
        assert_eq!(r.context_windows["m"], 200_000);
    }

    #[test]
    fn what_ralph_never_reads_is_dropped_not_kept() {
        let big = "y".repeat(3 * DIRECT_LINE);
        let line = format!(
            r#"{{"type":"user","message":{{"role":"user","content":[{{"type":"tool_result","content":[{{"type":"text","text":"{big}"}}]}}]}},"parent_tool_use_id":"toolu_1","tool_use_result":{{"stdout":"{big}","lines":["{big}","{big}"]}}}}"#
        );
        let mut d = LineDecoder::new();
        let (used, event) = d.push(line.as_bytes());
        assert_eq!((used, event), (line.len(), None));
        assert!(d.kept.len() < 200, "{}", String::from_utf8_lossy(&d.kept));
        assert_eq!(
            d.finish(),
            Some(StreamEvent::User {
                parent_tool_use_id: Some("toolu_1".into())
            })
        );
        // Once parent_tool_use_id is read, the rest of a user line is not
        // even looked at (Claude Code repeats the tool output there).
        let line = format!(
            r#"{{"type":"user","message":{{"content":"{big}"}},"parent_tool_use_id":"toolu_2","tool_use_result":{{"stdout":"{big}" [not json]}}"#
        );
        assert_eq!(
            decode_chunked(line.as_bytes(), 1000),
            vec![StreamEvent::User {
                parent_tool_use_id: Some("toolu_2".into())
            }]
        );
        // Key order does not matter for the result, only for the cost.
        let line = format!(
            r#"{{"message":{{"content":[{{"type":"text","text":"{big}"}}]}},"parent_tool_use_id":null,"type":"user"}}"#
        );
        assert_eq!(
            decode_chunked(line.as_bytes(), 999),
            vec![StreamEvent::User {
                parent_tool_use_id: None
            }]
        );
    }

    #[test]
    fn memory_is_bounded_by_the_compacted_size() {
        let mut stream = b"{\"type\":\"x\",\"numbers\":[".to_vec();
        while stream.len() < MAX_COMPACTED + 1000 {
            stream.extend_from_slice(b"1234567,");
        }
        stream.extend_from_slice(
            b"0]}\n{\"type\":\"system\",\"subtype\":\"init\",\"model\":\"m\"}\n",
        );
        let events = decode_chunked(&stream, 1 << 20);
        assert!(
            matches!(&events[0], StreamEvent::Invalid { reason } if reason.contains("MiB of JSON")),
            "{:?}",
            events[0]
        );
        assert!(matches!(events[1], StreamEvent::Init { .. }));
        // Many short strings past the soft limit are kept empty.
        let mut line = b"{\"type\":\"assistant\",\"message\":{\"id\":\"m\",\"x\":[".to_vec();
        while line.len() < 3 * MAX_COMPACTED {
            line.extend_from_slice(b"\"0123456789abcdef0123456789abcdef\",");
        }
        line.extend_from_slice(b"\"\"]}}\n");
        let mut d = LineDecoder::new();
        let mut rest = &line[..];
        let mut events = Vec::new();
        while !rest.is_empty() {
            let (used, e) = d.push(&rest[..rest.len().min(1 << 20)]);
            assert!(d.kept.len() <= MAX_COMPACTED);
            events.extend(e);
            rest = &rest[used..];
        }
        assert!(
            matches!(&events[..], [StreamEvent::Assistant(m)] if m.id == "m"),
            "{events:?}"
        );
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

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(200))]
        #[test]
        fn any_chunking_gives_the_same_events(cuts in proptest::collection::vec(1usize..5000, 1..40)) {
            let mut bytes = all_fixture_bytes();
            // A long line too, so that the compacting path is crossed.
            bytes.extend_from_slice(&assistant_text_line(&"ab\\\"c\\u00e9 ".repeat(4000)));
            bytes.push(b'\n');
            let reference = decode_chunked(&bytes, bytes.len());
            let mut d = LineDecoder::new();
            let mut events = Vec::new();
            let mut at = 0;
            for cut in cuts.iter().cycle() {
                if at >= bytes.len() {
                    break;
                }
                let end = (at + cut).min(bytes.len());
                let mut rest = &bytes[at..end];
                while !rest.is_empty() {
                    let (used, e) = d.push(rest);
                    events.extend(e);
                    rest = &rest[used..];
                }
                at = end;
            }
            events.extend(d.finish());
            proptest::prop_assert_eq!(events, reference);
        }
    }
}
