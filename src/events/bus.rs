//! The one event stream: the [`Bus`] every event of a run is published on,
//! and the [`Sink`]s that consume it (the log `.ralph/events.jsonl`, JSON
//! lines on stdout). The records themselves are `formats::event`'s.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::formats::{Event, Record};

/// A consumer of events: the event log, JSON output, the terminal.
pub(crate) trait Sink {
    fn event(&mut self, record: &Record);
    /// Called about once a second while a run is going (live displays).
    fn tick(&mut self) {}
    /// The terminal went away (SIGHUP): stop drawing.
    fn detach(&mut self) {}
    /// What the sink has to say itself (a notification it could not
    /// deliver), published to every sink after the record or tick at hand.
    fn said(&mut self) -> Vec<Event> {
        Vec::new()
    }
    /// The run is ending: finish what is under way (bounded) before the
    /// last [`Sink::said`].
    fn settle(&mut self) {}
}

/// `.ralph/events.jsonl`: append-only, one record per line, each written
/// with a single `write` so that a killed supervisor loses nothing already
/// reported and tears at most the record it was writing.
pub(crate) struct EventLog {
    out: File,
    /// Re-opened when the file was deleted under the run (`git clean -fdx`).
    path: std::path::PathBuf,
    /// A write failed (disk full): warned once.
    failed: bool,
    /// The last write may have been partial: the next record starts a line.
    torn: bool,
}

impl EventLog {
    pub(crate) fn open(path: &Path) -> Result<EventLog> {
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| Error::io("cannot open the event log", path, e))?;
        // A supervisor killed mid-record left a torn line: end it, or this
        // run's first record would be glued to it and lost to every reader.
        if ends_torn(&mut file).unwrap_or(false) {
            file.write_all(b"\n")
                .map_err(|e| Error::io("cannot write to the event log", path, e))?;
        }
        Ok(EventLog {
            out: file,
            path: path.to_path_buf(),
            failed: false,
            torn: false,
        })
    }
}

/// Whether a non-empty file's last byte is not a newline.
fn ends_torn(file: &mut File) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    if file.metadata()?.len() == 0 {
        return Ok(false);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8];
    file.read_exact(&mut last)?;
    Ok(last[0] != b'\n')
}

impl Sink for EventLog {
    fn event(&mut self, record: &Record) {
        use std::os::unix::fs::MetadataExt as _;
        if self.out.metadata().is_ok_and(|m| m.nlink() == 0)
            && let Ok(reopened) = EventLog::open(&self.path)
        {
            *self = reopened;
        }
        let mut line = if self.torn { vec![b'\n'] } else { Vec::new() };
        if serde_json::to_writer(&mut line, record).is_err() {
            return;
        }
        line.push(b'\n');
        // A full disk must not stop the run; the state file still records it.
        self.torn = self.out.write_all(&line).is_err();
        if self.torn && !self.failed {
            self.failed = true;
            tracing::warn!("cannot append to .ralph/events.jsonl; events may be missing");
        }
    }
}

/// `ralph run --json`: the same records on stdout.
pub(crate) struct JsonLines<W: Write> {
    out: W,
}

impl<W: Write> JsonLines<W> {
    pub(crate) fn new(out: W) -> Self {
        JsonLines { out }
    }
}

impl<W: Write> Sink for JsonLines<W> {
    fn event(&mut self, record: &Record) {
        // stdout may be a closed pipe; never fail the run for it. Records
        // quote the agent: no raw C1 control reaches a terminal.
        if let Ok(json) = serde_json::to_string(record) {
            let _ = self
                .out
                .write_all(crate::text::printable_json(&json).as_bytes());
        }
        let _ = self.out.write_all(b"\n");
        let _ = self.out.flush();
    }
}

/// Fan-out to every sink.
#[derive(Default)]
pub(crate) struct Bus {
    sinks: Vec<Box<dyn Sink>>,
}

impl Bus {
    pub(crate) fn new() -> Self {
        Bus::default()
    }
    pub(crate) fn add(&mut self, sink: Box<dyn Sink>) {
        self.sinks.push(sink);
    }
    pub(crate) fn emit(&mut self, event: Event) {
        self.publish(&Record::new(event));
    }
    /// `event` as worker `worker`'s (`ralph run --workers N`).
    pub(crate) fn emit_from(&mut self, worker: &str, event: Event) {
        let mut record = Record::new(event);
        record.worker = Some(worker.to_string());
        self.publish(&record);
    }
    /// Hand a record made by [`Record::new`] to every sink.
    pub(crate) fn publish(&mut self, record: &Record) {
        tracing::trace!(event = ?record.event, "event");
        for s in &mut self.sinks {
            s.event(record);
        }
        self.publish_said();
    }
    pub(crate) fn tick(&mut self) {
        for s in &mut self.sinks {
            s.tick();
        }
        self.publish_said();
    }
    /// What the sinks had to say themselves, to every sink.
    fn publish_said(&mut self) {
        let said: Vec<Event> = self.sinks.iter_mut().flat_map(|s| s.said()).collect();
        for event in said {
            self.publish(&Record::new(event));
        }
    }
    pub(crate) fn detach(&mut self) {
        for s in &mut self.sinks {
            s.detach();
        }
    }
}

impl Drop for Bus {
    /// The run is over: what the sinks still finish (a notification being
    /// delivered) may have something to say, while every sink is there.
    fn drop(&mut self) {
        for s in &mut self.sinks {
            s.settle();
        }
        self.publish_said();
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::read_log;

    #[test]
    fn log_appends_and_reads_back_skipping_torn_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut bus = Bus::new();
        bus.add(Box::new(EventLog::open(&path).unwrap()));
        bus.emit(Event::Warning {
            message: "one".into(),
        });
        bus.emit(Event::Warning {
            message: "two".into(),
        });
        drop(bus);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"ts\":\"x\",\"event\":\"warn").unwrap();
        let records = read_log(&path);
        assert_eq!(records.len(), 2);
        assert!(matches!(&records[1].event, Event::Warning { message } if message == "two"));
    }
}
