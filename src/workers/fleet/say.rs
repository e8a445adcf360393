//! What a fleet worker tells its user: its events (`formats::FleetEvent`)
//! on the one bus, as `Event::Fleet` records from this worker, through the
//! sinks every run has: `.ralph/fleet/<name>/events.jsonl` in its clone
//! (0600, redacted like every log), `--json` on stdout or a line on stderr,
//! and `[notify]`.

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
            eprintln!("ralph fleet [{worker}]: {}", crate::text::printable(&human));
        }
    }
}

/// Where a worker's events go: the bus.
pub(crate) struct Say {
    worker: String,
    bus: Bus,
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
        })
    }

    pub(crate) fn say(&mut self, event: FleetEvent) {
        self.bus.emit_from(&self.worker, Event::Fleet(event));
    }

    pub(crate) fn warn(&mut self, message: String) {
        self.bus.emit_from(&self.worker, Event::Warning { message });
    }
}
