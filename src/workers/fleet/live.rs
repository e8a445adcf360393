//! A fleet worker's live reading of its item's loop, carried on its status
//! ref (`workers/<id>`) for `ralph watch --fleet`: the loop's iteration,
//! context reading, last tool call, state and cost, as `events::view`
//! folds them from the loop's own log (the worker tails that log anyway:
//! `meter.rs`). Pure.
//!
//! Bounded and printable before it leaves the machine: the tool label and
//! the state's words are cut short and stripped of escape sequences (a
//! 1 MB line or a terminal escape in the loop's log stays on the machine);
//! the status's JSON is redacted as every record is (`Fleet::say`). The
//! transcript's path is not sent: the transcript stays where it was made.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::context::MeterReading;
use crate::events::view::{LoopState, LoopView};

/// The longest tool label sent, in characters.
const TOOL: usize = 160;
/// The longest word of a state (a limit's time, why it paused) sent.
const STATE: usize = 120;

/// One item loop as its worker last saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Live {
    /// The loop's iteration (its own count on the item).
    pub(crate) iteration: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) iteration_started: Option<Timestamp>,
    /// The latest reading of the iteration, and when it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reading: Option<(MeterReading, Timestamp)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tool: Option<String>,
    #[serde(flatten)]
    pub(crate) state: LoopState,
}

/// Text fit to leave the machine: printable, at most `max` characters
/// (cut before the escapes are stripped too: a 1 MB label is not copied),
/// every well-known token shape scrubbed as in what ralph commits (the
/// status is a commit on the remote).
fn bounded(text: &str, max: usize) -> String {
    use crate::text::{cut, printable, secrets::scrub_keeping};
    let cut_once = cut(text, max * 4);
    cut(&scrub_keeping(&printable(&cut_once), ""), max)
}

impl Live {
    /// The reading of `l` (the single loop of an item loop's log).
    pub(crate) fn of(l: &LoopView) -> Live {
        let state = match &l.state {
            LoopState::Waiting(s) => LoopState::Waiting(bounded(s, STATE)),
            LoopState::Paused(s) => LoopState::Paused(bounded(s, STATE)),
            LoopState::Left(s) => LoopState::Left(bounded(s, STATE)),
            LoopState::Ended(s) => LoopState::Ended(bounded(s, STATE)),
            other => other.clone(),
        };
        Live {
            iteration: l.iteration,
            iteration_started: l.iteration_started,
            reading: l.reading,
            tool: l.tool.as_deref().map(|t| bounded(t, TOOL)),
            state,
        }
    }

    /// Whether `other` tells something this one does not: the reading's
    /// time alone is no news (the worker sends a change, not a clock).
    pub(crate) fn news(&self, other: Option<&Live>) -> bool {
        let Some(o) = other else { return true };
        let reading = |l: &Live| l.reading.map(|(r, _)| r);
        self.iteration != o.iteration
            || self.state != o.state
            || self.tool != o.tool
            || reading(self) != reading(o)
    }

    /// Fill machine `l`'s loop from this reading.
    pub(crate) fn fill(&self, l: &mut LoopView) {
        l.iteration = self.iteration;
        l.iteration_started = self.iteration_started;
        l.reading = self.reading;
        l.tool.clone_from(&self.tool);
        l.state = self.state.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::Record;

    fn loop_of(log: &str) -> LoopView {
        let mut v = crate::events::view::RunView::default();
        for line in log.lines() {
            v.apply(&serde_json::from_str::<Record>(line).unwrap());
        }
        v.loops[crate::events::view::SINGLE].clone()
    }

    const LOG: &str = r#"{"ts":"2026-11-27T07:00:00Z","event":"run_started","run_id":"r","resumed":false,"first_iteration":1,"max_iterations":50,"plan":".ralph/worker-plan.md","pid":1}
{"ts":"2026-11-27T07:00:01Z","event":"iteration_started","iteration":1,"command":[],"transcript":".ralph/runs/r/iter-001.jsonl","resume_from":null}
{"ts":"2026-11-27T07:01:00Z","event":"context","iteration":1,"reading":{"tokens":103540,"usable":167000,"window":200000,"percent":62.0,"level":"L0","peak_percent":62.0,"rate_per_min":4100.0,"eta_to_checkpoint_secs":560},"tool":"Edit src/parser.rs"}"#;

    #[test]
    fn an_item_loops_reading_goes_on_the_wire_and_comes_back_as_its_loop() {
        let l = loop_of(LOG);
        let live = Live::of(&l);
        let json = serde_json::to_string(&live).unwrap();
        assert!(json.contains(r#""state":"working""#), "{json}");
        assert!(!json.contains("iter-001"), "the transcript stays: {json}");
        let back: Live = serde_json::from_str(&json).unwrap();
        assert_eq!(back, live);
        let mut machine = LoopView::new("wa");
        back.fill(&mut machine);
        assert_eq!(
            (
                machine.iteration,
                machine.tool.as_deref(),
                machine.state.clone()
            ),
            (1, Some("Edit src/parser.rs"), LoopState::Working)
        );
        let now: Timestamp = "2026-11-27T07:02:00Z".parse().unwrap();
        assert_eq!(machine.checkpoint_in(now), Some(500));
        assert_eq!(machine.reading.unwrap().0.percent, 62.0);
        // A state with words: tagged, its words beside.
        let waiting = Live {
            state: LoopState::Waiting("2026-11-27T09:00:00Z".into()),
            ..live.clone()
        };
        let json = serde_json::to_string(&waiting).unwrap();
        assert!(
            json.contains(r#""state":"waiting","detail":"2026-11-27T09:00:00Z""#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Live>(&json).unwrap(), waiting);
    }

    #[test]
    fn a_huge_or_hostile_tool_call_leaves_bounded_and_printable() {
        let mut l = loop_of(LOG);
        l.tool = Some(format!(
            "Bash echo \u{1b}]0;pwned\u{7}\u{1b}[2J{}",
            "x".repeat(1 << 20)
        ));
        l.state = LoopState::Paused("y".repeat(1 << 20));
        let live = Live::of(&l);
        let json = serde_json::to_string(&live).unwrap();
        assert!(json.len() < 1024, "{} bytes", json.len());
        let tool = live.tool.unwrap();
        assert!(tool.starts_with("Bash echo"), "{tool}");
        assert!(
            !tool.contains('\u{1b}') && !tool.contains('\u{7}'),
            "{tool:?}"
        );
    }

    #[test]
    fn a_token_in_a_tool_call_does_not_leave_the_machine() {
        let mut l = loop_of(LOG);
        l.tool = Some("Bash git push https://x:hunter2@github.com/o/r && echo ghp_0123456789abcdefghijABCDEFGHIJ".into());
        let json = serde_json::to_string(&Live::of(&l)).unwrap();
        assert!(!json.contains("ghp_0123456789"), "{json}");
        assert!(!json.contains("hunter2"), "{json}");
        assert!(json.contains("Bash git push"), "{json}");
    }

    #[test]
    fn only_a_change_is_news_not_the_time_of_the_reading() {
        let live = Live::of(&loop_of(LOG));
        assert!(live.news(None));
        let mut later = live.clone();
        later.reading.as_mut().unwrap().1 = "2026-11-27T07:05:00Z".parse().unwrap();
        assert!(!later.news(Some(&live)));
        later.reading.as_mut().unwrap().0.percent = 63.0;
        assert!(later.news(Some(&live)));
        let mut handing_off = live.clone();
        handing_off.state = LoopState::HandingOff;
        assert!(handing_off.news(Some(&live)));
    }
}
