//! What an item's loop spends, read as it goes from the loop's own event
//! log (`.ralph/events.jsonl` in the item's worktree), from where the round
//! began: every iteration's end (its cost) is owed to the shared ledger at
//! once, not when the loop ends, and a usage limit the loop waits for is
//! owed to every worker. The round's lines are what its loop record
//! carries (`loops.rs`). Every record is folded into the loop's view
//! (`events::view`, as `ralph watch` folds a log): its live reading
//! (`live.rs`) for the worker's status ref.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::PathBuf;
use std::time::Instant;

use jiff::Timestamp;

use super::live::Live;
use super::remote::{Limit, Spent};
use crate::events::view::{RunView, SINGLE};
use crate::formats::{Event, Record};

/// One loop's log, tailed.
pub(crate) struct Meter {
    path: PathBuf,
    /// Bytes of the log read so far.
    offset: u64,
    /// The round's complete lines.
    round: String,
    /// A line not complete yet.
    partial: String,
    /// This round's spending, and the part not on the ledger yet.
    pub(crate) counted: Spent,
    pub(crate) owed: Spent,
    /// A usage limit the loop reported, not on the ledger yet; and the
    /// latest the loop itself waits for (it pauses by itself).
    pub(crate) limit_owed: Option<Limit>,
    pub(crate) own_limit: Option<Timestamp>,
    /// Not before: the remote was unreachable.
    pub(crate) retry_at: Option<Instant>,
    /// The loop as its log tells it.
    view: RunView,
}

/// What a line of the loop's log means to the fleet.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Seen {
    Iteration { cost_usd: f64 },
    Limit { until: Timestamp, source: String },
}

/// The fleet's reading of one record of the loop's log (pure).
pub(crate) fn seen(r: &Record) -> Option<Seen> {
    match &r.event {
        Event::IterationEnded { cost_usd, .. } => Some(Seen::Iteration {
            cost_usd: *cost_usd,
        }),
        Event::LimitWait { until, source, .. } => Some(Seen::Limit {
            until: until.parse().ok()?,
            source: source.to_string(),
        }),
        _ => None,
    }
}

impl Meter {
    pub(crate) fn new(log: PathBuf) -> Meter {
        Meter {
            path: log,
            offset: 0,
            round: String::new(),
            partial: String::new(),
            counted: Spent::default(),
            owed: Spent::default(),
            limit_owed: None,
            own_limit: None,
            retry_at: None,
            view: RunView::default(),
        }
    }

    /// The loop's live reading, once it has begun.
    pub(crate) fn live(&self) -> Option<Live> {
        self.view.loops.get(SINGLE).map(Live::of)
    }

    /// A new round of the loop: what the log has so far is not its.
    pub(crate) fn begin_round(&mut self) {
        self.offset = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        self.round.clear();
        self.partial.clear();
        self.counted = Spent::default();
    }

    /// Read what the loop wrote since; tally it for `worker`.
    pub(crate) fn read(&mut self, worker: &str) {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return;
        };
        if file.metadata().is_ok_and(|m| m.len() < self.offset) {
            // Shorter than what was read: a new log (never so far); read it whole.
            self.offset = 0;
            self.partial.clear();
        }
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut bytes = Vec::new();
        if file.read_to_end(&mut bytes).is_err() || bytes.is_empty() {
            return;
        }
        self.offset += bytes.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&bytes));
        while let Some(end) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=end).collect();
            let record = serde_json::from_str::<Record>(line.trim_end()).ok();
            if let Some(r) = &record {
                self.view.apply(r);
            }
            match record.as_ref().and_then(seen) {
                Some(Seen::Iteration { cost_usd }) => {
                    let one = Spent {
                        iterations: 1,
                        cost_usd,
                        items_done: 0,
                    };
                    self.counted = self.counted.plus(one);
                    self.owed = self.owed.plus(one);
                }
                Some(Seen::Limit { until, source }) => {
                    self.own_limit = Some(self.own_limit.map_or(until, |t| t.max(until)));
                    self.limit_owed = Some(Limit {
                        until,
                        by: worker.to_string(),
                        source,
                    });
                }
                None => {}
            }
            self.round.push_str(&line);
        }
    }

    /// Something to put on the ledger, and not waiting for the remote.
    pub(crate) fn due(&self) -> bool {
        (!self.owed.is_zero() || self.limit_owed.is_some())
            && self.retry_at.is_none_or(|t| Instant::now() >= t)
    }

    /// The ledger has what was owed.
    pub(crate) fn paid(&mut self) {
        self.owed = Spent::default();
        self.limit_owed = None;
        self.retry_at = None;
    }

    /// The round's lines so far.
    pub(crate) fn round_log(&self) -> &str {
        &self.round
    }

    /// Whether the loop waits for a usage limit of its own at `now`.
    pub(crate) fn waiting_itself(&self, now: Timestamp) -> bool {
        self.own_limit.is_some_and(|t| t > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENDED: &str = r#"{"ts":"2026-11-24T03:00:00Z","event":"iteration_ended","iteration":1,"outcome":"promise","progress":true,"cost_usd":0.25,"peak_percent":10.0,"seconds":1.0,"error":null,"invalid_lines":0,"skipped_lines":0}"#;
    const WAIT: &str = r#"{"ts":"2026-11-24T03:00:00Z","event":"limit_wait","until":"2026-11-24T04:00:00Z","seconds":3600,"source":"rate_limit_event","detail":"x"}"#;
    const OTHER: &str = r#"{"ts":"2026-11-24T03:00:00Z","event":"warning","message":"hi"}"#;

    fn seen_line(line: &str) -> Option<Seen> {
        seen(&serde_json::from_str(line).ok()?)
    }

    #[test]
    fn an_iterations_end_and_a_usage_limit_are_what_the_fleet_reads() {
        assert_eq!(seen_line(ENDED), Some(Seen::Iteration { cost_usd: 0.25 }));
        assert!(matches!(seen_line(WAIT), Some(Seen::Limit { .. })));
        assert_eq!(seen_line(OTHER), None);
        assert_eq!(seen_line("not json"), None);
    }

    #[test]
    fn the_tail_counts_each_line_once_and_waits_for_a_line_to_be_complete() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events.jsonl");
        std::fs::write(&log, format!("{ENDED}\n")).unwrap();
        let mut m = Meter::new(log.clone());
        // What was there before the round is not the round's.
        m.begin_round();
        m.read("w1");
        assert!(m.counted.is_zero() && !m.due());
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        write!(f, "{ENDED}\n{OTHER}\n{}", &WAIT[..20]).unwrap();
        m.read("w1");
        assert_eq!(m.counted.iterations, 1);
        assert!(m.due() && m.limit_owed.is_none());
        writeln!(f, "{}", &WAIT[20..]).unwrap();
        m.read("w1");
        m.read("w1");
        assert_eq!(m.counted.iterations, 1, "counted once");
        assert_eq!(m.limit_owed.as_ref().unwrap().by, "w1");
        assert!(m.waiting_itself("2026-11-24T03:30:00Z".parse().unwrap()));
        assert_eq!(m.round_log().lines().count(), 3);
        m.paid();
        assert!(!m.due() && m.owed.is_zero());
        assert_eq!(m.counted.iterations, 1, "the round's total stays");
        // A log that starts over (shorter than what was read) is read whole.
        std::fs::write(&log, format!("{ENDED}\n")).unwrap();
        m.read("w1");
        assert_eq!(m.counted.iterations, 2);
    }

    #[test]
    fn the_tail_keeps_the_loops_live_reading() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("events.jsonl");
        let started = r#"{"ts":"2026-11-24T03:00:00Z","event":"iteration_started","iteration":2,"command":[],"transcript":"t","resume_from":null}"#;
        let context = r#"{"ts":"2026-11-24T03:00:05Z","event":"context","iteration":2,"reading":{"tokens":50000,"usable":167000,"window":200000,"percent":29.9,"level":"L0","peak_percent":29.9,"rate_per_min":null,"eta_to_checkpoint_secs":null},"tool":"Read a.rs"}"#;
        std::fs::write(&log, "").unwrap();
        let mut m = Meter::new(log.clone());
        m.begin_round();
        assert_eq!(m.live(), None, "nothing before the loop begins");
        std::fs::write(&log, format!("{started}\n{context}\n")).unwrap();
        m.read("w1");
        let live = m.live().unwrap();
        assert_eq!(live.iteration, 2);
        assert_eq!(live.tool.as_deref(), Some("Read a.rs"));
        assert_eq!(live.reading.unwrap().0.tokens, 50000);
        assert_eq!(live.state, crate::events::view::LoopState::Working);
        std::fs::write(&log, format!("{started}\n{context}\n{ENDED}\n")).unwrap();
        m.read("w1");
        assert_eq!(
            m.live().unwrap().state,
            crate::events::view::LoopState::Between
        );
    }
}
