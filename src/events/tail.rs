//! `.ralph/events.jsonl` followed as it grows: the records appended since
//! the last read, whole lines only (`ralph context --watch`, `ralph watch`).

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::formats::Record;

/// `.ralph/events.jsonl` read incrementally: complete lines only, each
/// read starting where the previous one stopped.
pub(crate) struct LogTail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl LogTail {
    pub(crate) fn new(path: PathBuf) -> LogTail {
        LogTail {
            path,
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// The records appended since the last call; `None` when the log was
    /// replaced or truncated (start over from what it holds now).
    pub(crate) fn read_new(&mut self) -> Result<Option<Vec<Record>>> {
        let mut file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Some(Vec::new())),
            Err(e) => return Err(Error::io("cannot read", &self.path, e)),
        };
        let len = file
            .metadata()
            .map_err(|e| Error::io("cannot read", &self.path, e))?
            .len();
        if len < self.offset {
            self.offset = 0;
            self.partial.clear();
            return Ok(None);
        }
        // `partial` holds the bytes after the last newline, already counted in `offset`.
        let mut bytes = std::mem::take(&mut self.partial);
        let read = file
            .seek(SeekFrom::Start(self.offset))
            .and_then(|_| file.read_to_end(&mut bytes))
            .map_err(|e| Error::io("cannot read", &self.path, e))?;
        self.offset += read as u64;
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        self.partial = bytes.split_off(complete);
        // A line that does not parse (torn by a crash) is skipped, as by formats::read_log.
        Ok(Some(
            bytes
                .split(|&b| b == b'\n')
                .filter_map(|line| serde_json::from_slice(line).ok())
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::Event;

    #[test]
    fn tail_reads_complete_lines_once_and_restarts_on_truncation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut tail = LogTail::new(path.clone());
        assert_eq!(tail.read_new().unwrap().unwrap().len(), 0);
        let line = |m: &str| {
            format!(
                "{}\n",
                serde_json::to_string(&Record {
                    ts: "t".into(),
                    worker: None,
                    event: Event::Warning { message: m.into() },
                })
                .unwrap()
            )
        };
        let torn = line("two");
        std::fs::write(&path, format!("{}{}", line("one"), &torn[..10])).unwrap();
        assert_eq!(tail.read_new().unwrap().unwrap().len(), 1);
        std::fs::write(&path, format!("{}{}{}", line("one"), torn, line("three"))).unwrap();
        let got = tail.read_new().unwrap().unwrap();
        assert_eq!(got.len(), 2);
        assert!(matches!(&got[0].event, Event::Warning { message } if message == "two"));
        assert_eq!(tail.read_new().unwrap().unwrap().len(), 0);
        std::fs::write(&path, line("new")).unwrap();
        assert!(tail.read_new().unwrap().is_none());
        assert_eq!(tail.read_new().unwrap().unwrap().len(), 1);
    }
}
