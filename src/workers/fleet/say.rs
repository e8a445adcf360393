//! What a fleet worker tells its user: its events (`formats::FleetEvent`)
//! on the one bus, as `Event::Fleet` records from this worker, through the
//! sinks every run has: `--json` on stdout or a line on stderr (`display`),
//! and, added by the run's start (`supervisor::start`),
//! `.ralph/fleet/<name>/events.jsonl` in its clone (0600, redacted like
//! every log) and `[notify]`.

use std::io::Write as _;

use crate::events::{Bus, JsonLines, Sink};
pub(crate) use crate::formats::FleetEvent;
use crate::formats::{Event, Record};

/// A person's view of a fleet worker: its own events as lines on stderr
/// (the loops' records go to their own logs).
struct Lines;

impl Sink for Lines {
    fn event(&mut self, record: &Record) {
        if let (Event::Fleet(event), Some(worker)) = (&record.event, &record.worker) {
            let human = event.human();
            // Not `eprintln!`: a terminal hung up (SIGHUP) fails every
            // write, and the worker goes on without it.
            let _ = writeln!(
                std::io::stderr(),
                "ralph fleet [{worker}]: {}",
                crate::text::printable(&human)
            );
        }
    }
}

/// Where a worker's events are shown: `--json` on stdout, else a line on
/// stderr.
pub(crate) fn display(json: bool) -> Box<dyn Sink> {
    if json {
        Box::new(JsonLines::new(std::io::stdout()))
    } else {
        Box::new(Lines)
    }
}

/// Where a worker's events go: the bus; and the records it said that no
/// loop record on the remote carries yet (`loops.rs`: each round's record
/// takes them along, so the morning report reads them from the remote).
pub(crate) struct Say {
    worker: String,
    bus: Bus,
    unpushed: Vec<Record>,
}

impl Say {
    /// Worker `worker`'s voice on `bus` (its display from [`display`],
    /// its log and notify added by the run's start).
    pub(crate) fn new(worker: &str, bus: Bus) -> Say {
        Say {
            worker: worker.to_string(),
            bus,
            unpushed: Vec::new(),
        }
    }

    pub(crate) fn say(&mut self, event: FleetEvent) {
        let record = self.record(event);
        self.said(record);
    }

    pub(crate) fn warn(&mut self, message: String) {
        let record = self.tagged(Event::Warning { message });
        self.said(record);
    }

    /// `event` as this worker's record (redacted), not said yet: for a
    /// loop record pushed with what it tells (a merge), said once pushed.
    pub(crate) fn record(&self, event: FleetEvent) -> Record {
        self.tagged(Event::Fleet(event))
    }

    fn tagged(&self, event: Event) -> Record {
        let mut record = Record::new(event);
        record.worker = Some(self.worker.clone());
        record
    }

    /// Say a record made by [`Say::record`].
    pub(crate) fn said(&mut self, record: Record) {
        self.bus.publish(&record);
        self.unpushed.push(record);
    }

    /// What no loop record on the remote carries yet.
    pub(crate) fn unpushed(&self) -> &[Record] {
        &self.unpushed
    }

    /// The first `n` of [`Say::unpushed`] are on the remote now.
    pub(crate) fn pushed(&mut self, n: usize) {
        self.unpushed.drain(..n.min(self.unpushed.len()));
    }
}
