//! `ralph watch --fleet NAME`: the fleet as its remote has it, as the
//! `events::view::RunView` that `ralph watch` draws — a loop per machine
//! (its item, its item loop's live reading from its status ref: context,
//! last tool, state; its cost and iterations from its share of the
//! ledger), and the run's totals (items done of the plan's, the ledger's
//! cost against `max_cost_usd`, iterations, the merges on the run branch).
//!
//! What a machine is doing is `ralph status --fleet`'s judgement
//! (`status::describe`: a busy machine silent past its lease and the clock
//! skew is dead), never worked out again here. The fetch is `status`'s:
//! an observer that never pushes.

use std::path::Path;
use std::time::Duration;

use jiff::Timestamp;

use super::remote::{Fleet, WorkerState, WorkerStatus};
use super::status::{self, FleetStatus};
use crate::error::Result;
use crate::events::view::{LoopState, LoopView, MergeView, RunView};

/// Items and merges of the view are cut to this many characters.
const TEXT: usize = 200;
/// The merges kept for the view (the report has them all).
const MERGES: usize = 20;

/// The fleet's budgets as this clone's ralph.toml says them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Budgets {
    pub(crate) max_iterations: u32,
    pub(crate) max_cost_usd: Option<f64>,
}

/// One machine's loop (pure): its judged state, and while it works its
/// item loop's live reading.
fn machine(w: &WorkerStatus, limited: Option<Timestamp>, now: Timestamp) -> LoopView {
    let mut l = LoopView::new(&w.worker);
    l.item = (!w.item_text.is_empty()).then(|| crate::text::cut(&w.item_text, TEXT));
    l.cost_usd = w.spent.cost_usd;
    l.iterations = u32::try_from(w.spent.iterations).unwrap_or(u32::MAX);
    // Between items, the iterations it ran; on one, its item loop's.
    l.iteration = l.iterations;
    if let Some(live) = &w.live {
        live.fill(&mut l);
    }
    l.state = match w.state {
        WorkerState::Working if w.live.is_some() => l.state,
        WorkerState::Working => LoopState::Starting,
        WorkerState::Merging => LoopState::Done,
        WorkerState::Waiting => match limited {
            Some(until) => LoopState::Waiting(until.to_string()),
            None if w.item.is_some() => LoopState::Paused(crate::text::cut(&w.note, TEXT)),
            None => LoopState::Idle,
        },
        WorkerState::Dead => LoopState::Dead(now.duration_since(w.at).as_secs().max(0) as u64),
        WorkerState::Stopped | WorkerState::Finished | WorkerState::Failed => {
            LoopState::Ended(w.state.as_str().to_string())
        }
    };
    l
}

/// The fleet as `ralph watch` draws it (pure).
pub(crate) fn view_of(st: &FleetStatus, budgets: Budgets, now: Timestamp) -> RunView {
    let mut view = RunView::default();
    view.fleet = Some(format!("{} on {}", st.fleet, st.remote));
    view.parallel = true;
    view.max_iterations = budgets.max_iterations;
    view.max_cost_usd = budgets.max_cost_usd;
    if st.run.is_none() {
        return view;
    }
    view.run_id = Some(format!("fleet-{}", st.fleet));
    view.items = (st.items.iter())
        .map(|i| (i.state == "done", crate::text::cut(&i.text, TEXT)))
        .collect();
    let limited = st
        .ledger
        .as_ref()
        .and_then(|l| l.limited(now))
        .map(|l| l.until);
    if let Some(ledger) = &st.ledger {
        view.started = ledger.created_at;
        view.cost_usd = ledger.cost_usd;
        view.set_iterations(u32::try_from(ledger.iterations).unwrap_or(u32::MAX));
    }
    for w in &st.workers {
        view.loops
            .insert(w.worker.clone(), machine(w, limited, now));
        if w.state == WorkerState::Merging {
            let item = crate::text::cut(&w.item_text, TEXT);
            view.queue.push((w.worker.clone(), item));
        }
    }
    let start = st.merged.len().saturating_sub(MERGES);
    view.merges = st.merged[start..]
        .iter()
        .map(|m| MergeView {
            at: m.at.to_string(),
            worker: Some(m.record.worker.clone()),
            item: crate::text::cut(&m.record.text, TEXT),
            result: "merged",
        })
        .collect();
    for i in st.items.iter().filter(|i| i.state == "given_up") {
        let who = i.holder.as_deref().unwrap_or("a worker");
        let why = i.given_up.as_deref().unwrap_or_default();
        view.warn(
            &now.to_string(),
            format!(
                "{} given up by {who}: {}",
                crate::text::cut(&i.text, 60),
                crate::text::cut(why, TEXT)
            ),
        );
    }
    if let Some(l) = st.ledger.as_ref().and_then(|l| l.limited(now)) {
        view.warn(
            &now.to_string(),
            format!(
                "usage limit hit by {}: the fleet waits until {}",
                l.by, l.until
            ),
        );
    }
    let open = st
        .items
        .iter()
        .filter(|i| !matches!(i.state, "done" | "cancelled"))
        .count();
    let every_machine_ended = !st.workers.is_empty()
        && st
            .workers
            .iter()
            .all(|w| matches!(view.loops[&w.worker].state, LoopState::Ended(_)));
    view.ended = if open == 0 && !st.items.is_empty() {
        Some((
            "completed",
            0,
            format!("every item is merged ({} merges)", st.merged.len()),
        ))
    } else if every_machine_ended {
        Some((
            "stopped",
            1,
            format!("{open} item(s) left; every machine ended"),
        ))
    } else {
        None
    }
    .map(
        |(outcome, exit_code, reason)| crate::events::view::EndView {
            outcome: outcome.into(),
            exit_code,
            reason,
            report: None,
        },
    );
    view
}

/// The fleet, fetched again and again through one remote by an observer.
pub(crate) struct Watcher {
    fleet: Fleet,
    lease: Duration,
    budgets: Budgets,
}

impl Watcher {
    /// The first fetch: an unknown remote, a clone that is not one, a name
    /// that cannot be a fleet's fail here, before the screen opens.
    pub(crate) fn open(
        root: &Path,
        remote: &str,
        fleet: &str,
        config: &crate::config::Config,
    ) -> Result<(Watcher, RunView)> {
        let f = &config.fleet;
        // Bounded well below a night: the screen says when a fetch failed.
        let timeout = f.network_timeout.0.min(Duration::from_secs(20));
        let (fleet, v) = status::fetch_with(root, remote, fleet, f.clock_skew.0, timeout)?;
        let mut w = Watcher {
            fleet,
            lease: f.lease.0,
            budgets: Budgets {
                max_iterations: config.loop_.max_iterations,
                max_cost_usd: config.loop_.max_cost_usd,
            },
        };
        let view = w.describe(&v);
        Ok((w, view))
    }

    fn describe(&mut self, v: &super::remote::View) -> RunView {
        let st = status::describe(&self.fleet, v, self.lease);
        view_of(&st, self.budgets, Timestamp::now())
    }

    /// Fetch again; what went wrong, in words, when it could not.
    pub(crate) fn poll(&mut self) -> std::result::Result<RunView, String> {
        match self.fleet.sync() {
            Ok(v) => Ok(self.describe(&v)),
            Err(e) => Err(format!(
                "cannot fetch from `{}`: {e}",
                self.fleet.wire().remote()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::view::SINGLE;
    use crate::workers::fleet::live::Live;
    use crate::workers::fleet::remote::{Ledger, Spent};
    use crate::workers::fleet::status::ItemStatus;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn item(text: &str, state: &'static str) -> ItemStatus {
        ItemStatus {
            key: format!("i-{}", text.len()),
            text: text.into(),
            state,
            given_up: None,
            holder: None,
            generation: None,
            lease_expires_at: None,
            pushed: false,
        }
    }

    fn worker(name: &str, state: WorkerState, item: &str) -> WorkerStatus {
        WorkerStatus {
            worker: name.into(),
            state,
            item: (!item.is_empty()).then(|| "i-1".into()),
            item_text: item.into(),
            at: at("2026-11-27T07:01:00Z"),
            unreachable_since: None,
            note: String::new(),
            spent: Spent {
                iterations: 2,
                cost_usd: 0.5,
                items_done: 0,
            },
            live: None,
        }
    }

    fn live() -> Live {
        let mut v = RunView::default();
        for line in [
            r#"{"ts":"2026-11-27T07:00:01Z","event":"iteration_started","iteration":3,"command":[],"transcript":"t","resume_from":null}"#,
            r#"{"ts":"2026-11-27T07:01:00Z","event":"context","iteration":3,"reading":{"tokens":103540,"usable":167000,"window":200000,"percent":62.0,"level":"L0","peak_percent":62.0,"rate_per_min":4100.0,"eta_to_checkpoint_secs":560},"tool":"Edit src/parser.rs"}"#,
        ] {
            v.apply(&serde_json::from_str(line).unwrap());
        }
        Live::of(&v.loops[SINGLE])
    }

    fn fleet() -> FleetStatus {
        let mut ledger = Ledger {
            created_at: Some(at("2026-11-27T07:00:00Z")),
            ..Ledger::default()
        };
        ledger.add(
            "wa",
            Spent {
                iterations: 5,
                cost_usd: 1.25,
                items_done: 1,
            },
        );
        FleetStatus {
            fleet: "night".into(),
            remote: "origin".into(),
            run: Some("abc".into()),
            items: vec![
                item("alpha: the parser", "done"),
                item("bravo: the writer", "claimed"),
                item("charlie: docs", "open"),
            ],
            workers: vec![
                WorkerStatus {
                    live: Some(live()),
                    ..worker("wa", WorkerState::Working, "bravo: the writer")
                },
                worker("wb", WorkerState::Dead, "charlie: docs"),
                worker("wc", WorkerState::Waiting, ""),
                worker("wd", WorkerState::Finished, ""),
            ],
            ledger: Some(ledger),
            ..FleetStatus::default()
        }
    }

    const BUDGETS: Budgets = Budgets {
        max_iterations: 50,
        max_cost_usd: Some(10.0),
    };

    #[test]
    fn a_machine_is_a_loop_with_its_live_reading_and_the_run_is_the_ledgers() {
        let now = at("2026-11-27T07:02:00Z");
        let v = view_of(&fleet(), BUDGETS, now);
        assert_eq!(v.fleet.as_deref(), Some("night on origin"));
        assert_eq!(v.loops.keys().collect::<Vec<_>>(), ["wa", "wb", "wc", "wd"]);
        let wa = &v.loops["wa"];
        assert_eq!(v.item_of(wa), Some("bravo: the writer"));
        assert_eq!(wa.state, LoopState::Working);
        assert_eq!((wa.iteration, wa.iterations, wa.cost_usd), (3, 2, 0.5));
        assert_eq!(wa.tool.as_deref(), Some("Edit src/parser.rs"));
        assert_eq!(wa.checkpoint_in(now), Some(500));
        // `status --fleet`'s judgement, with how long it has been silent.
        assert_eq!(v.loops["wb"].state, LoopState::Dead(60));
        assert_eq!(v.loops["wb"].reading, None);
        assert_eq!(v.loops["wc"].state, LoopState::Idle);
        assert_eq!(v.loops["wd"].state, LoopState::Ended("finished".into()));
        assert_eq!(v.loops["wd"].iteration, 2, "the iterations it ran");
        assert_eq!((v.items_done(), v.items.len()), (1, 3));
        assert_eq!((v.iterations(), v.cost_usd), (5, 1.25));
        assert_eq!(v.max_cost_usd, Some(10.0));
        assert_eq!(v.started, Some(at("2026-11-27T07:00:00Z")));
        assert_eq!(v.ended, None);
    }

    #[test]
    fn a_fleet_ends_when_every_item_is_merged_or_every_machine_ended() {
        let now = at("2026-11-27T07:02:00Z");
        let mut st = fleet();
        for i in &mut st.items {
            i.state = "done";
        }
        let v = view_of(&st, BUDGETS, now);
        assert_eq!(v.ended.unwrap().outcome, "completed");
        let mut st = fleet();
        for w in &mut st.workers {
            w.state = WorkerState::Stopped;
        }
        let v = view_of(&st, BUDGETS, now);
        assert_eq!(v.ended.unwrap().outcome, "stopped");
        // No run on the remote: no loops, no items, nothing ended.
        let none = FleetStatus {
            fleet: "nigth".into(),
            remote: "origin".into(),
            ..FleetStatus::default()
        };
        let v = view_of(&none, BUDGETS, now);
        assert!(v.run_id.is_none() && v.loops.is_empty() && v.ended.is_none());
    }

    #[test]
    fn a_usage_limit_and_a_given_up_item_are_said() {
        let now = at("2026-11-27T07:02:00Z");
        let mut st = fleet();
        st.items[2].state = "given_up";
        st.items[2].holder = Some("wb".into());
        st.items[2].given_up = Some("conflicts twice".into());
        st.ledger
            .as_mut()
            .unwrap()
            .limit_until(crate::workers::fleet::remote::Limit {
                until: at("2026-11-27T09:00:00Z"),
                by: "wa".into(),
                source: "result".into(),
            });
        let v = view_of(&st, BUDGETS, now);
        assert_eq!(
            v.loops["wc"].state,
            LoopState::Waiting("2026-11-27T09:00:00Z".into())
        );
        let said: Vec<&str> = v.warnings.iter().map(|(_, t)| t.as_str()).collect();
        assert!(
            said.iter()
                .any(|t| t.contains("given up by wb: conflicts twice")),
            "{said:?}"
        );
        assert!(
            said.iter().any(|t| t.contains("usage limit hit by wa")),
            "{said:?}"
        );
    }
}
