//! Decoding of the agent's `stream-json` output: one line → one typed
//! [`StreamEvent`], reading only the fields ralph needs, with bounded memory
//! however long the line (tool results can be many megabytes).

use std::io::BufRead;

use super::Decoder;
use super::event::*;
use super::raw::{RawLine, classify};

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

/// Decode one Claude Code line from a reader positioned at its start,
/// consuming the line and its newline; every byte consumed is passed to
/// `sink` too. Memory use does not depend on the line's length. Returns
/// `None` at end of input.
pub fn decode_from<R: BufRead>(reader: &mut R, sink: &mut dyn FnMut(&[u8])) -> Option<StreamEvent> {
    Decoder::claude().next_from(reader, sink)
}

/// Lines up to this length that arrive whole are decoded in place, from the
/// reader's buffer, without a copy.
pub(crate) const DIRECT_LINE: usize = 16 << 10;
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
pub(crate) const MAX_COMPACTED: usize = 4 << 20;
/// serde_json's own nesting limit.
const MAX_DEPTH: usize = 128;

/// What a kind's lines hold for ralph, as far as compacting a long line
/// needs to know (each kind's decoder has one; Claude Code's is
/// [`Shape::CLAUDE`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    /// Keys whose strings are the model's own words, kept up to 1 MiB
    /// (every other string: 4 KiB).
    pub(crate) words: &'static [&'static [u8]],
    /// Top-level keys whose values ralph never reads: replaced by `null`.
    pub(crate) unread: &'static [&'static [u8]],
    /// Lines of which ralph reads one top-level field: (`type`, field).
    /// Their top-level containers are replaced by `null`, and once the
    /// field's value is read the rest of the line is skipped to its newline
    /// (it is found only if the CLI prints the field before the bulk).
    pub(crate) sparse: &'static [(&'static [u8], &'static [u8])],
}

impl Shape {
    /// Claude Code's `stream-json`: the model's `text` blocks and the
    /// result's `result`; `tool_use_result` (a second copy of a tool's
    /// output) never read; of a `user` line (a tool result) only
    /// `parent_tool_use_id`, which Claude Code prints before
    /// `tool_use_result`.
    pub(crate) const CLAUDE: Shape = Shape {
        words: &[b"text", b"result"],
        unread: &[b"tool_use_result"],
        sparse: &[(b"user", b"parent_tool_use_id")],
    };
}

/// Incremental decoder of a stream of lines, fed with whatever chunks the
/// pipe gives; its memory does not depend on the length of a line. Every
/// kind's decoder reads its lines through one, with the kind's [`Shape`].
///
/// A line that arrives whole and short ([`DIRECT_LINE`]) is decoded where it
/// lies. Any other line is *compacted* while it streams past: its JSON
/// structure and short strings are copied; long strings are cut (the model's
/// words at 1 MiB, everything else, above all tool results, at 4 KiB) and
/// what is cut is skipped with `memchr`, neither parsed nor allocated;
/// containers ralph never reads (Claude Code's `tool_use_result`, the body
/// of a `user` line) are replaced by `null`, and a sparse line (Claude
/// Code's `user`) is left for its newline once its one field is read. The
/// compacted line, a few KiB, is then decoded like a short one. The one
/// difference to decoding the whole line: skipped bytes are not checked for
/// valid JSON, which only matters for bytes ralph does not read.
#[derive(Debug)]
pub struct LineDecoder {
    shape: Shape,
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
    /// A sparse line (its `type` seen at the top level): the one field
    /// read; nothing below the top level is.
    sparse: Option<&'static [u8]>,
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
    /// Claude Code's lines.
    pub(crate) fn new() -> LineDecoder {
        LineDecoder::of(Shape::CLAUDE)
    }

    /// Lines of the given shape.
    pub(crate) fn of(shape: Shape) -> LineDecoder {
        LineDecoder {
            shape,
            kept: Vec::new(),
            seen: 0,
            depth: 0,
            stack: Vec::new(),
            expect_key: false,
            key: [0; 32],
            key_len: 0,
            string: None,
            skip_from: None,
            sparse: None,
            done: false,
            overflow: false,
        }
    }

    /// Feed the next bytes of the stream. Consumes up to and including the
    /// end of the current line; returns how many bytes were consumed and the
    /// decoded line if it ended there. Call again with the rest.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> (usize, Option<StreamEvent>) {
        self.push_with(bytes, decode_line)
    }

    /// End of input: the last line, if it had no newline.
    pub(crate) fn finish(&mut self) -> Option<StreamEvent> {
        self.finish_with(decode_line)
    }

    /// [`Self::push`] with another kind's line decoder: lines are bounded
    /// the same way (strings other than `text`/`result` cut to 4 KiB), then
    /// `decode` reads the line or its compacted form.
    pub(crate) fn push_with(
        &mut self,
        bytes: &[u8],
        mut decode: impl FnMut(&[u8]) -> StreamEvent,
    ) -> (usize, Option<StreamEvent>) {
        if self.seen == 0 {
            let direct = &bytes[..bytes.len().min(DIRECT_LINE + 1)];
            if let Some(end) = memchr::memchr(b'\n', direct) {
                return (end + 1, Some(decode(&bytes[..end])));
            }
        }
        let (used, ended) = self.scan(bytes);
        self.seen += used as u64;
        if ended {
            (used, Some(self.end_line(decode)))
        } else {
            (used, None)
        }
    }

    /// [`Self::finish`] with another kind's line decoder.
    pub(crate) fn finish_with(
        &mut self,
        decode: impl FnMut(&[u8]) -> StreamEvent,
    ) -> Option<StreamEvent> {
        (self.seen > 0).then(|| self.end_line(decode))
    }

    fn end_line(&mut self, mut decode: impl FnMut(&[u8]) -> StreamEvent) -> StreamEvent {
        let event = if self.overflow {
            StreamEvent::Invalid {
                reason: format!(
                    "line of {} bytes has more than {} MiB of JSON outside its strings",
                    self.seen,
                    MAX_COMPACTED >> 20
                ),
            }
        } else {
            decode(&self.kept)
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
        self.sparse = None;
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

    fn key_in(&self, names: &[&[u8]]) -> bool {
        names.iter().any(|n| self.key_is(n))
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
                        && (self.sparse.is_some() || self.key_in(self.shape.unread))
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
                    if self.depth == 1 && self.sparse.is_some_and(|f| self.key_is(f)) {
                        // All a sparse line gives ralph (Claude Code's
                        // `user` line: its `parent_tool_use_id`, before
                        // `tool_use_result`, a second copy of the tool's
                        // output): no need to scan the rest.
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
        let words = self.sparse.is_none()
            && !is_key
            && self.top() == Some(b'{')
            && self.key_in(self.shape.words);
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
            self.sparse = self
                .shape
                .sparse
                .iter()
                .find(|(kind, _)| content == *kind)
                .map(|&(_, field)| field);
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

/// One line of a kind other than Claude Code, read into `T`; an empty
/// line, or one that is not a JSON object of that shape, is
/// [`StreamEvent::Invalid`] for the reason returned.
pub(crate) fn parse_object<'a, T: serde::Deserialize<'a>>(line: &'a [u8]) -> Result<T, String> {
    let line = trim_line(line);
    if line.is_empty() {
        return Err("empty line".into());
    }
    serde_json::from_slice(line).map_err(|e| {
        if line.first() == Some(&b'{') {
            format!("unexpected JSON: {e}")
        } else {
            "not a JSON object".into()
        }
    })
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::io::BufReader;
    use std::path::PathBuf;

    pub(crate) fn fixtures() -> Vec<(String, Vec<u8>)> {
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

    pub(crate) fn decode_all(bytes: &[u8]) -> Vec<StreamEvent> {
        let mut reader = BufReader::new(bytes);
        let mut out = Vec::new();
        while let Some(e) = decode_from(&mut reader, &mut |_| {}) {
            out.push(e);
        }
        out
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
