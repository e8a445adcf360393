//! Reading a Claude Code session transcript (`~/.claude/projects/…/<session>.jsonl`)
//! from its end: the newest main-thread usage for the status line, and the
//! recent work for a handoff, without reading the whole file.
//!
//! The transcript is JSON lines of session entries, not `stream-json`:
//! assistant entries carry the same `message` (id, model, usage, content)
//! that [`crate::stream::decode_line`] reads, but a sub-agent's entries are
//! marked `isSidechain: true` (there is no `parent_tool_use_id`), and a
//! compaction is a `system`/`compact_boundary` entry with camel-case
//! `compactMetadata {preTokens, postTokens}`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::stream::{AssistantMessage, StreamEvent, ToolCall};

/// The first read from the end; each further read is at least as large as
/// what is held, so a long line costs O(n) copying, not O(n²).
const CHUNK: usize = 64 << 10;
/// How far back from the end a search looks before it gives up.
const SCAN_LIMIT: u64 = 64 << 20;
/// Lines longer than this are skipped, not decoded.
const MAX_LINE: usize = 16 << 20;

/// The lines of a file, last first, read backwards in chunks.
struct Backwards {
    file: File,
    /// File offset of `held[0]`.
    start: u64,
    /// The not yet returned bytes just before the returned ones.
    held: Vec<u8>,
    scanned: u64,
    /// Inside a line too long to keep: its bytes are dropped until its start.
    skipping: bool,
}

impl Backwards {
    fn open(path: &Path) -> std::io::Result<Backwards> {
        // The path comes from stdin: opening a FIFO (or a tty) for reading
        // would wait for a writer forever, and a status line must not hang.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(path)?;
        if !file.metadata()?.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        let start = file.seek(SeekFrom::End(0))?;
        Ok(Backwards {
            file,
            start,
            held: Vec::new(),
            scanned: 0,
            skipping: false,
        })
    }

    /// Read the chunk before `held`; false at the start of the file or
    /// past the scan limit.
    fn read_before(&mut self) -> bool {
        if self.start == 0 || self.scanned >= SCAN_LIMIT {
            return false;
        }
        let want = CHUNK.max(self.held.len()) as u64;
        let n = want.min(self.start);
        let mut chunk = vec![0; n as usize];
        let from = self.start - n;
        if self.file.seek(SeekFrom::Start(from)).is_err()
            || self.file.read_exact(&mut chunk).is_err()
        {
            return false;
        }
        self.start = from;
        self.scanned += n;
        if self.skipping {
            // Only the start of the long line matters: where it ends here.
            match memchr::memrchr(b'\n', &chunk) {
                Some(nl) => {
                    chunk.truncate(nl + 1);
                    self.skipping = false;
                }
                None => chunk.clear(),
            }
            self.held = chunk;
        } else {
            chunk.extend_from_slice(&self.held);
            self.held = chunk;
        }
        true
    }
}

impl Iterator for Backwards {
    /// A line without its newline; `None` for a line too long to keep.
    type Item = Option<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            while self.held.last() == Some(&b'\n') && !self.skipping {
                self.held.pop();
            }
            if !self.skipping
                && let Some(nl) = memchr::memrchr(b'\n', &self.held)
            {
                let line = self.held.split_off(nl + 1);
                self.held.pop();
                return Some((line.len() <= MAX_LINE).then_some(line));
            }
            if self.held.len() > MAX_LINE {
                self.held.clear();
                self.skipping = true;
                return Some(None);
            }
            if !self.read_before() {
                if self.skipping || self.held.is_empty() {
                    return None;
                }
                // The first line of the file (or of the scanned part).
                let line = std::mem::take(&mut self.held);
                return Some((line.len() <= MAX_LINE).then_some(line));
            }
        }
    }
}

/// One entry of the transcript, as far as ralph reads it.
#[derive(Debug, Clone, PartialEq)]
enum Entry {
    /// A main-thread message of the model (not a sub-agent's, not synthetic).
    Assistant(AssistantMessage),
    Compacted {
        pre_tokens: u64,
        post_tokens: u64,
    },
}

/// The transcript-only fields of an entry.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Envelope {
    #[serde(rename = "type")]
    kind: String,
    subtype: Option<String>,
    #[serde(rename = "isSidechain")]
    is_sidechain: bool,
    #[serde(rename = "compactMetadata")]
    compact: Option<CompactMetadata>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CompactMetadata {
    #[serde(rename = "preTokens")]
    pre_tokens: u64,
    #[serde(rename = "postTokens")]
    post_tokens: u64,
}

/// Decode one transcript line; `None` for what ralph does not read.
fn decode(line: &[u8]) -> Option<Entry> {
    // Most entries (attachments, tool results, request blobs) are neither:
    // a byte search is cheaper than parsing them.
    let assistant = memchr::memmem::find(line, b"\"assistant\"").is_some();
    if !assistant && memchr::memmem::find(line, b"\"compact_boundary\"").is_none() {
        return None;
    }
    let envelope: Envelope = serde_json::from_slice(line).ok()?;
    if envelope.is_sidechain {
        return None;
    }
    match (envelope.kind.as_str(), envelope.subtype.as_deref()) {
        ("assistant", _) => match crate::stream::decode_line(line) {
            StreamEvent::Assistant(m) if !m.is_synthetic() => Some(Entry::Assistant(m)),
            _ => None,
        },
        ("system", Some("compact_boundary")) => {
            let meta = envelope.compact.unwrap_or_default();
            Some(Entry::Compacted {
                pre_tokens: meta.pre_tokens,
                post_tokens: meta.post_tokens,
            })
        }
        _ => None,
    }
}

/// The entries ralph reads, newest first.
fn entries_from_end(path: &Path) -> std::io::Result<impl Iterator<Item = Entry>> {
    Ok(Backwards::open(path)?.filter_map(|line| decode(&line?)))
}

/// The newest main-thread context occupancy of a session.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Occupancy {
    /// The newest assistant message with usage, unless a compaction came after it.
    pub(crate) message: Option<AssistantMessage>,
    /// Set when the newest event is a compaction: tokens left after it.
    pub(crate) compacted_to: Option<u64>,
}

/// Find the newest usage (or compaction) from the end of the transcript.
pub(crate) fn occupancy(path: &Path) -> std::io::Result<Occupancy> {
    for entry in entries_from_end(path)? {
        match entry {
            Entry::Assistant(m) if m.usage.occupancy() > 0 => {
                return Ok(Occupancy {
                    message: Some(m),
                    compacted_to: None,
                });
            }
            Entry::Compacted { post_tokens, .. } => {
                return Ok(Occupancy {
                    message: None,
                    compacted_to: Some(post_tokens),
                });
            }
            Entry::Assistant(_) => {}
        }
    }
    Ok(Occupancy::default())
}

/// What the session did since its last compaction, for a handoff.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Recent {
    /// The newest message with usage (occupancy and model).
    pub(crate) latest: Option<AssistantMessage>,
    pub(crate) last_text: Option<String>,
    /// Oldest first.
    pub(crate) last_tools: Vec<ToolCall>,
    /// Files written or edited, oldest first, each once.
    pub(crate) files_touched: Vec<String>,
}

/// How many messages back a handoff looks.
const RECENT_MESSAGES: usize = 200;
/// Tools that change the file they name.
const WRITING_TOOLS: [&str; 4] = ["Write", "Edit", "MultiEdit", "NotebookEdit"];

/// Read the recent work of the session, back to its last compaction.
pub(crate) fn recent(path: &Path) -> std::io::Result<Recent> {
    let mut r = Recent::default();
    let mut tools_newest_first = Vec::new();
    let mut files_newest_first: Vec<String> = Vec::new();
    for entry in entries_from_end(path)?.take(RECENT_MESSAGES) {
        let Entry::Assistant(m) = entry else { break };
        if r.last_text.is_none() {
            r.last_text = m.text.iter().rev().find(|t| !t.trim().is_empty()).cloned();
        }
        for call in m.tool_calls.iter().rev() {
            if WRITING_TOOLS.contains(&call.name.as_str())
                && let Some(p) = &call.path
                && !files_newest_first.contains(p)
            {
                files_newest_first.push(p.clone());
            }
            tools_newest_first.push(call.clone());
        }
        if r.latest.is_none() && m.usage.occupancy() > 0 {
            r.latest = Some(m);
        }
    }
    tools_newest_first.truncate(8);
    tools_newest_first.reverse();
    files_newest_first.reverse();
    r.last_tools = tools_newest_first;
    r.files_touched = files_newest_first;
    Ok(r)
}

/// Claude Code writes its transcript in batches: a hook that fires right
/// after a turn (PreCompact on a "prompt is too long" answer, a second
/// into a session) can find the file not created yet, or the turn's
/// messages not on disk (the real CLI's hook found no file in 5 of 20
/// runs). Read again, for at most `within`, until a message with usage is
/// there; a session that has none yet costs the whole wait.
pub(crate) fn recent_when_written(path: &Path, within: Duration) -> std::io::Result<Recent> {
    let deadline = Instant::now() + within;
    loop {
        let read = recent(path);
        let done = match &read {
            Ok(r) => r.latest.is_some(),
            Err(e) => e.kind() != std::io::ErrorKind::NotFound,
        };
        if done || Instant::now() >= deadline {
            return read;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn assistant(id: &str, tokens: u64, sidechain: bool, model: &str, content: &str) -> String {
        serde_json::json!({
            "parentUuid": "p", "isSidechain": sidechain, "type": "assistant",
            "message": {"id": id, "type": "message", "role": "assistant", "model": model,
                "content": serde_json::from_str::<serde_json::Value>(content).unwrap(),
                "usage": {"input_tokens": 10, "cache_creation_input_tokens": 0,
                          "cache_read_input_tokens": tokens.saturating_sub(10), "output_tokens": 5}},
            "uuid": "u", "timestamp": "2026-01-01T00:00:00Z"
        })
        .to_string()
    }

    fn file(lines: &[String]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
        f
    }

    const TEXT: &str = r#"[{"type":"text","text":"working"}]"#;

    #[test]
    fn backwards_yields_lines_last_first_across_chunks() {
        let lines: Vec<String> = (0..20_000).map(|i| format!("line {i}")).collect();
        let f = file(&lines);
        let got: Vec<Vec<u8>> = Backwards::open(f.path()).unwrap().flatten().collect();
        assert_eq!(got.len(), 20_000);
        assert_eq!(got[0], b"line 19999");
        assert_eq!(got[19_999], b"line 0");
    }

    #[test]
    fn backwards_skips_a_line_too_long_to_keep() {
        let long = "x".repeat(MAX_LINE + 10);
        let f = file(&["first".into(), long, "last".into()]);
        let got: Vec<Option<Vec<u8>>> = Backwards::open(f.path()).unwrap().collect();
        assert_eq!(got, [Some(b"last".to_vec()), None, Some(b"first".to_vec())]);
    }

    #[test]
    fn newest_main_thread_usage_wins_over_sidechains_and_synthetic() {
        let f = file(&[
            assistant("a", 50_000, false, "claude-sonnet-4-5", TEXT),
            assistant("b", 90_000, true, "claude-haiku-4-5", TEXT),
            assistant("c", 0, false, "<synthetic>", TEXT),
            r#"{"type":"user","isSidechain":false,"message":{"role":"user","content":"x"}}"#.into(),
        ]);
        let o = occupancy(f.path()).unwrap();
        let m = o.message.unwrap();
        assert_eq!((m.id.as_str(), m.usage.occupancy()), ("a", 50_000));
        assert_eq!(o.compacted_to, None);
    }

    #[test]
    fn a_compaction_after_the_last_usage_resets_it() {
        let f = file(&[
            assistant("a", 150_000, false, "m", TEXT),
            r#"{"type":"system","subtype":"compact_boundary","isSidechain":false,"compactMetadata":{"trigger":"auto","preTokens":150000,"postTokens":4000}}"#.into(),
        ]);
        let o = occupancy(f.path()).unwrap();
        assert_eq!(o.message, None);
        assert_eq!(o.compacted_to, Some(4000));
    }

    #[test]
    fn a_transcript_written_late_is_waited_for() {
        // Created late, and its turn appended later still.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        let late = assistant("a", 150_000, false, "m", TEXT);
        let p = path.clone();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            std::fs::write(&p, "{}\n").unwrap();
            std::thread::sleep(Duration::from_millis(200));
            let mut out = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
            writeln!(out, "{late}").unwrap();
        });
        assert!(recent(&path).is_err());
        let r = recent_when_written(&path, Duration::from_secs(5)).unwrap();
        writer.join().unwrap();
        assert_eq!(r.latest.map(|m| m.usage.occupancy()), Some(150_000));
        // Nothing ever written: the wait is bounded.
        let empty = file(&[]);
        let started = Instant::now();
        let r = recent_when_written(empty.path(), Duration::from_millis(200)).unwrap();
        assert_eq!(r, Recent::default());
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn empty_or_foreign_files_have_no_usage() {
        let f = file(&["not json".into(), "{}".into()]);
        assert_eq!(occupancy(f.path()).unwrap(), Occupancy::default());
        assert!(occupancy(Path::new("/nonexistent/t.jsonl")).is_err());
    }

    #[test]
    fn recent_work_stops_at_the_compaction() {
        let write = |p: &str| {
            format!(
                r#"[{{"type":"tool_use","id":"t","name":"Write","input":{{"file_path":"{p}","content":"x"}}}}]"#
            )
        };
        let f = file(&[
            assistant("old", 10_000, false, "m", &write("/r/before.rs")),
            r#"{"type":"system","subtype":"compact_boundary","compactMetadata":{"preTokens":1,"postTokens":1}}"#.into(),
            assistant("a", 20_000, false, "m", &write("/r/a.rs")),
            assistant("s", 20_000, true, "m", &write("/r/sub.rs")),
            assistant("b", 30_000, false, "m", &write("/r/b.rs")),
            assistant("c", 31_000, false, "m", r#"[{"type":"text","text":"b.rs is half done"}]"#),
        ]);
        let r = recent(f.path()).unwrap();
        assert_eq!(r.latest.unwrap().id, "c");
        assert_eq!(r.last_text.as_deref(), Some("b.rs is half done"));
        assert_eq!(r.files_touched, ["/r/a.rs", "/r/b.rs"]);
        assert_eq!(r.last_tools.len(), 2);
    }
}
