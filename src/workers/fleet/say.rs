//! What a fleet worker tells its user: its events (`formats::FleetEvent`)
//! on the one bus, as `Event::Fleet` records from this worker, through the
//! sinks every run has: `.ralph/fleet/<name>/events.jsonl` in its clone
//! (0600, redacted like every log), `--json` on stdout or a line on stderr,
//! and `[notify]`.

use std::io::Write as _;
use std::path::Path;

use crate::config::Config;
use crate::error::Result;
use crate::events::{Bus, EventLog, JsonLines, Sink};
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

/// Where a worker's events go: the bus; and the records it said that no
/// loop record on the remote carries yet (`loops.rs`: each round's record
/// takes them along, so the morning report reads them from the remote).
pub(crate) struct Say {
    worker: String,
    bus: Bus,
    unpushed: Vec<Record>,
}

impl Say {
    /// The bus of worker `worker` whose log is `log`.
    pub(crate) fn new(
        worker: &str,
        json: bool,
        log: &Path,
        config: &Config,
        root: &Path,
    ) -> Result<Say> {
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| crate::error::Error::io("cannot create", dir, e))?;
        }
        let mut bus = Bus::new();
        bus.add(Box::new(EventLog::open(log)?));
        if json {
            bus.add(Box::new(JsonLines::new(std::io::stdout())));
        } else {
            bus.add(Box::new(Lines));
        }
        if let Some(notifier) = crate::events::notify::Notifier::start(&config.notify, root)? {
            bus.add(Box::new(notifier));
        }
        Ok(Say {
            worker: worker.to_string(),
            bus,
            unpushed: Vec::new(),
        })
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
