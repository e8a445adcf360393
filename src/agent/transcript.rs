//! The agent's raw transcripts under `.ralph/runs/<run>/`: written as they
//! come up to a cap, then with every long string cut (each line's JSON
//! structure kept), and, once their run is over, gzipped; only the last
//! `runs.keep` runs are kept.

use std::fs::File;
use std::io::Write;
use std::path::Path;

use crate::config::RunsConfig;

/// Past the cap, strings keep this many bytes of their JSON form (and say
/// how many were cut).
pub(crate) const ELIDED_STRING: usize = 256;

/// Where a JSON scan stands, carried from one chunk to the next.
#[derive(Debug, Default, Clone, Copy)]
struct Scan {
    in_string: bool,
    /// The previous byte was a backslash inside a string.
    escaped: bool,
    /// Hex digits of a `\uXXXX` escape still to come.
    hex_left: u8,
    /// Bytes of the current string copied.
    kept: usize,
    /// Bytes of the current string cut.
    cut: u64,
}

/// A transcript file: bytes as they came up to the cap, then each line
/// with its long strings cut. Never fails the agent: a write error (disk
/// full) stops the writing and is kept for the supervisor to report.
pub(crate) struct Writer {
    file: File,
    written: u64,
    cap: u64,
    scan: Scan,
    out: Vec<u8>,
    /// Strings cut past the cap.
    pub(crate) cut_strings: u64,
    /// The first write error; nothing is written after it.
    pub(crate) error: Option<std::io::Error>,
    redact: crate::text::secrets::StreamRedactor,
}

impl Writer {
    pub(crate) fn new(file: File, cap: u64) -> Writer {
        Writer {
            file,
            written: 0,
            cap,
            scan: Scan::default(),
            out: Vec::new(),
            cut_strings: 0,
            error: None,
            redact: crate::text::secrets::StreamRedactor::json_lines(),
        }
    }

    /// Append a chunk of the agent's stdout, known secrets redacted.
    pub(crate) fn write(&mut self, chunk: &[u8]) {
        let mut redact = std::mem::take(&mut self.redact);
        self.put(redact.feed(chunk));
        self.redact = redact;
    }

    /// The end of the stream: what the redaction still held back.
    pub(crate) fn finish(&mut self) {
        let mut redact = std::mem::take(&mut self.redact);
        self.put(redact.finish());
        self.redact = redact;
    }

    fn put(&mut self, chunk: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let result = if self.written < self.cap {
            // As it came; the scan only follows the strings, so that the
            // cut can start in the middle of a line.
            track(&mut self.scan, chunk);
            self.written += chunk.len() as u64;
            self.file.write_all(chunk)
        } else {
            self.out.clear();
            self.cut_strings += elide(&mut self.scan, chunk, &mut self.out);
            self.written += self.out.len() as u64;
            self.file.write_all(&self.out)
        };
        if let Err(e) = result {
            self.error = Some(e);
        }
    }
}

/// Follow `bytes` (strings, escapes, line ends) without copying them.
fn track(scan: &mut Scan, bytes: &[u8]) {
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        i += if !scan.in_string {
            memchr::memchr2(b'"', b'\n', rest).unwrap_or(rest.len())
        } else if scan.hex_left == 0 {
            string_run(scan, rest)
        } else {
            0
        };
        if let Some(&b) = bytes.get(i) {
            step(scan, b);
            i += 1;
        }
    }
}

/// Inside a string (no `\uXXXX` digits due): how many of `bytes` come
/// before the byte that ends it, its closing quote or a line end (all of
/// them if none does), with `scan.escaped` brought up to there. Only quotes
/// and line ends are searched for: a quote is escaped when an odd number of
/// backslashes comes right before it, so the backslashes of a string full
/// of escapes (`\n`, `\"`, `\\`) cost nothing.
fn string_run(scan: &mut Scan, bytes: &[u8]) -> usize {
    let mut from = 0;
    while let Some(k) = memchr::memchr2(b'"', b'\n', &bytes[from..]) {
        let at = from + k;
        if bytes[at] == b'\n' || !escaped_at(bytes, at, scan.escaped) {
            scan.escaped = false;
            return at;
        }
        from = at + 1;
    }
    scan.escaped = escaped_at(bytes, bytes.len(), scan.escaped);
    bytes.len()
}

/// Whether the byte at `at` is escaped: an odd number of backslashes comes
/// right before it (`escaped`: one more before `bytes`).
fn escaped_at(bytes: &[u8], at: usize, escaped: bool) -> bool {
    let run = bytes[..at]
        .iter()
        .rev()
        .take_while(|&&b| b == b'\\')
        .count();
    (run + usize::from(run == at && escaped)) % 2 == 1
}

/// Advance the scan over one byte; true when it closes a string.
fn step(scan: &mut Scan, b: u8) -> bool {
    if b == b'\n' {
        // A raw newline is never inside a JSON string: a new line starts
        // (whatever a broken line left open).
        *scan = Scan::default();
        return false;
    }
    if !scan.in_string {
        if b == b'"' {
            scan.in_string = true;
            scan.kept = 0;
            scan.cut = 0;
        }
        return false;
    }
    if scan.hex_left > 0 {
        scan.hex_left -= 1;
    } else if scan.escaped {
        scan.escaped = false;
        if b == b'u' {
            scan.hex_left = 4;
        }
    } else if b == b'\\' {
        scan.escaped = true;
    } else if b == b'"' {
        scan.in_string = false;
        return true;
    }
    false
}

/// Copy `bytes` to `out` with every string cut after [`ELIDED_STRING`]
/// bytes (never inside an escape or a UTF-8 character), the cut counted
/// in the string itself: `"abc…[+1234 bytes]"`. Returns how many strings
/// were cut. Runs of bytes that change nothing (outside strings: all but
/// quotes and line ends; inside: all but quotes, backslashes and line
/// ends) are copied or skipped whole; only the bytes around them go
/// through [`elide_byte`].
fn elide(scan: &mut Scan, bytes: &[u8], out: &mut Vec<u8>) -> u64 {
    let mut strings = 0;
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        let plain = !scan.escaped && scan.hex_left == 0;
        let run = if !scan.in_string {
            let n = memchr::memchr2(b'"', b'\n', rest).unwrap_or(rest.len());
            out.extend_from_slice(&rest[..n]);
            n
        } else if scan.hex_left == 0 && scan.cut > 0 {
            let n = string_run(scan, rest);
            scan.cut += n as u64;
            n
        } else if plain && scan.kept < ELIDED_STRING {
            let room = ELIDED_STRING - scan.kept;
            let n = memchr::memchr3(b'"', b'\\', b'\n', &rest[..room.min(rest.len())])
                .unwrap_or(room.min(rest.len()));
            out.extend_from_slice(&rest[..n]);
            scan.kept += n;
            n
        } else {
            0
        };
        i += run;
        if run == 0 {
            strings += elide_byte(scan, bytes[i], out);
            i += 1;
        }
    }
    strings
}

/// [`elide`] for one byte; 1 when it closes a cut string.
fn elide_byte(scan: &mut Scan, b: u8, out: &mut Vec<u8>) -> u64 {
    let plain = !scan.escaped && scan.hex_left == 0;
    let closes = scan.in_string && b == b'"' && plain;
    let at_boundary = plain && (b & 0xC0) != 0x80;
    if scan.in_string
        && !closes
        && b != b'\n'
        && (scan.cut > 0 || (scan.kept >= ELIDED_STRING && at_boundary))
    {
        scan.cut += 1;
        step(scan, b);
        return 0;
    }
    let mut cut = 0;
    if closes && scan.cut > 0 {
        let _ = write!(out, "…[+{} bytes]", scan.cut);
        cut = 1;
    }
    if scan.in_string {
        scan.kept += 1;
    }
    step(scan, b);
    out.push(b);
    cut
}

/// When a run starts: delete the run directories under `runs_dir` but the
/// newest `keep` (`current` always stays), and gzip the transcripts of the
/// others kept. What could not be done is returned, for warnings.
pub(crate) fn tidy(runs_dir: &Path, current: &str, config: &RunsConfig) -> Vec<String> {
    let mut problems = Vec::new();
    let Ok(entries) = std::fs::read_dir(runs_dir) else {
        return problems;
    };
    let mut runs: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| name != current)
        .collect();
    // Run ids are timestamps: newest last.
    runs.sort();
    let old = runs
        .len()
        .saturating_sub(config.keep.saturating_sub(1) as usize);
    for name in &runs[..old] {
        if let Err(e) = std::fs::remove_dir_all(runs_dir.join(name)) {
            problems.push(format!("cannot delete the old run .ralph/runs/{name}: {e}"));
        }
    }
    if !config.compress {
        return problems;
    }
    for name in &runs[old..] {
        let dir = runs_dir.join(name);
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path
                .extension()
                .is_some_and(|e| e == "jsonl" || e == "stderr")
                && let Err(e) = gzip(&path)
            {
                problems.push(format!("cannot compress {}: {e}", path.display()));
            }
        }
    }
    problems
}

/// `path` → `path.gz` (user-only), the original removed once the copy is
/// whole; on failure (disk full) the partial copy goes, the original stays.
fn gzip(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut gz_name = path.as_os_str().to_owned();
    gz_name.push(".gz");
    let gz_path = std::path::PathBuf::from(gz_name);
    let result = (|| {
        let out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&gz_path)?;
        let mut encoder = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
        std::io::copy(&mut File::open(path)?, &mut encoder)?;
        encoder.finish()?.sync_all()
    })();
    match result {
        Ok(()) => std::fs::remove_file(path),
        Err(e) => {
            let _ = std::fs::remove_file(&gz_path);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elided(input: &str) -> String {
        let mut out = Vec::new();
        let mut scan = Scan::default();
        // Fed in small pieces: the cut may start anywhere in a chunk.
        for piece in input.as_bytes().chunks(7) {
            elide(&mut scan, piece, &mut out);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn long_strings_are_cut_and_every_line_stays_json() {
        let long = format!(
            "{}\\\"é\\u00e9{}",
            "a".repeat(ELIDED_STRING - 1),
            "b".repeat(5000)
        );
        let line = format!(
            "{{\"type\":\"user\",\"n\":12,\"content\":[\"{long}\",\"short\"],\"{long}\":true}}\n"
        );
        let input = format!("{line}{line}");
        let out = elided(&input);
        assert!(out.len() < 2 * 2 * (ELIDED_STRING + 64), "{}", out.len());
        for l in out.lines() {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            assert_eq!(v["type"], "user");
            assert_eq!(v["n"], 12);
            assert_eq!(v["content"][1], "short");
            let cut = v["content"][0].as_str().unwrap();
            assert!(cut.starts_with(&"a".repeat(ELIDED_STRING - 1)), "{cut}");
            assert!(cut.ends_with(" bytes]"), "{cut}");
        }
    }

    #[test]
    fn any_text_cut_keeps_valid_json_lines_valid() {
        use proptest::prelude::*;
        proptest!(|(values in proptest::collection::vec("\\PC{0,600}", 1..5), chunk in 1usize..50)| {
            let line = serde_json::to_string(&values).unwrap() + "\n";
            let mut out = Vec::new();
            let mut scan = Scan::default();
            for piece in line.as_bytes().chunks(chunk) {
                elide(&mut scan, piece, &mut out);
            }
            let text = String::from_utf8(out).unwrap();
            let back: Vec<String> = serde_json::from_str(text.trim_end()).unwrap();
            prop_assert_eq!(back.len(), values.len());
            for (b, v) in back.iter().zip(&values) {
                // The cap is of the string as written, escapes included.
                if serde_json::to_string(v).unwrap().len() - 2 <= ELIDED_STRING {
                    prop_assert_eq!(b, v);
                } else {
                    // Cut, unless the string ended inside its last character.
                    prop_assert!(b == v || b.ends_with(" bytes]"), "{}", b);
                }
            }
        });
    }

    #[test]
    fn a_cut_string_keeps_its_first_bytes_and_counts_the_rest_however_it_is_read() {
        use proptest::prelude::*;
        proptest!(|(values in proptest::collection::vec("\\PC{0,700}", 1..4), chunk in 1usize..700)| {
            let line = serde_json::to_string(&values).unwrap() + "\n";
            let mut whole = Vec::new();
            elide(&mut Scan::default(), line.as_bytes(), &mut whole);
            let mut out = Vec::new();
            let mut scan = Scan::default();
            for piece in line.as_bytes().chunks(chunk) {
                elide(&mut scan, piece, &mut out);
            }
            prop_assert_eq!(&out, &whole);
            let text = String::from_utf8(out).unwrap();
            let back: Vec<String> = serde_json::from_str(text.trim_end()).unwrap();
            for (b, v) in back.iter().zip(&values) {
                let written = serde_json::to_string(v).unwrap();
                let written = &written[1..written.len() - 1];
                if b == v {
                    prop_assert!(written.len() <= ELIDED_STRING + 6, "{} not cut", written.len());
                    continue;
                }
                // `prefix…[+N bytes]`: the prefix is the string as written
                // up to the first whole character at or past the limit.
                let (prefix, count) = b.rsplit_once("…[+").unwrap();
                let cut: usize = count.strip_suffix(" bytes]").unwrap().parse().unwrap();
                let kept = serde_json::to_string(prefix).unwrap();
                let kept = &kept[1..kept.len() - 1];
                prop_assert_eq!(kept, &written[..written.len() - cut]);
                prop_assert!((ELIDED_STRING..ELIDED_STRING + 6).contains(&kept.len()), "{}", kept.len());
            }
        });
    }

    #[test]
    fn past_a_cap_crossed_anywhere_every_line_stays_json() {
        use proptest::prelude::*;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("iter-001.jsonl");
        // Strings dense with escapes: quotes, backslashes, line ends, tabs.
        let text = "[a-z\"\\\\\n\té\u{1}]{0,700}";
        proptest!(|(lines in proptest::collection::vec(proptest::collection::vec(text, 1..4), 1..4), cap in 0u64..3000, chunk in 1usize..400)| {
            let input: String = lines.iter().map(|l| serde_json::to_string(l).unwrap() + "\n").collect();
            let mut w = Writer::new(File::create(&path).unwrap(), cap);
            for piece in input.as_bytes().chunks(chunk) {
                w.write(piece);
            }
            w.finish();
            let out = std::fs::read(&path).unwrap();
            let cap = (cap as usize).min(input.len());
            prop_assert_eq!(&out[..cap], &input.as_bytes()[..cap]);
            let out = String::from_utf8(out).unwrap();
            prop_assert_eq!(out.lines().count(), lines.len());
            for (l, values) in out.lines().zip(&lines) {
                let back: Vec<String> = serde_json::from_str(l).unwrap();
                prop_assert_eq!(back.len(), values.len());
            }
        });
    }

    #[test]
    fn writer_passes_bytes_up_to_the_cap_then_cuts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("iter-001.jsonl");
        let mut w = Writer::new(File::create(&path).unwrap(), 100);
        let big = format!("{{\"text\":\"{}\"}}\n", "x".repeat(10_000));
        // The cap is crossed in the middle of the first line's string.
        w.write(&big.as_bytes()[..50]);
        w.write(&big.as_bytes()[50..]);
        w.write(big.as_bytes());
        w.finish();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].len(), big.len() - 1, "the first chunk as it came");
        assert!(lines[1].len() < 400, "{}", lines[1]);
        let v: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert!(v["text"].as_str().unwrap().ends_with("…[+9744 bytes]"));
        assert_eq!(w.cut_strings, 1);
    }

    #[test]
    fn tidy_keeps_the_newest_runs_and_gzips_the_earlier_ones() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        for run in [
            "20260101-000000",
            "20260102-000000",
            "20260103-000000",
            "20260104-000000",
        ] {
            std::fs::create_dir(dir.path().join(run)).unwrap();
            std::fs::write(
                dir.path().join(run).join("iter-001.jsonl"),
                "{}\n".repeat(100),
            )
            .unwrap();
        }
        let config = RunsConfig {
            keep: 3,
            ..RunsConfig::default()
        };
        assert!(tidy(dir.path(), "20260104-000000", &config).is_empty());
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["20260102-000000", "20260103-000000", "20260104-000000"]
        );
        let gz = dir.path().join("20260103-000000/iter-001.jsonl.gz");
        let mut text = String::new();
        flate2::read::GzDecoder::new(File::open(gz).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "{}\n".repeat(100));
        assert!(!dir.path().join("20260103-000000/iter-001.jsonl").exists());
        // The current run's transcripts stay as they are.
        assert!(dir.path().join("20260104-000000/iter-001.jsonl").exists());
    }
}
