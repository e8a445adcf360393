//! The fleet's morning report (`ralph report --fleet NAME`), made from
//! what is on the remote, in any clone, as `ralph status --fleet` is: the
//! loops' records (`loops.rs`: each round's own event log), the merge
//! history on the run branch, the claims, the ledger and the plan.
//!
//! It is the report of one run (`crate::report`'s `RunReport`, so the page,
//! the text and `--json` are the report's own renderers): the loops' logs
//! become one log whose iterations are numbered across the fleet, each
//! labelled with its worker and item; and the parallel workers' lanes
//! (`report::lanes`) get a lane per fleet worker (items claimed, taken
//! over, how each round ended), the merge history, the items left and why,
//! and the totals against the fleet's budgets.

use std::path::Path;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;

use super::loops::{self, LoopRecord};
use super::status::{self, FleetStatus};
use crate::config::Config;
use crate::context::Thresholds;
use crate::error::{Error, Result};
use crate::formats::Merged;
use crate::formats::{Event, Record};
use crate::report::lanes::{FleetTotals, Lanes, LeftItem};
use crate::report::{Budgets, RunReport, gather};

/// The report of fleet `fleet`, fetched through `remote`.
pub(crate) fn report(
    root: &Path,
    remote: &str,
    fleet: &str,
    config: Option<&Config>,
) -> Result<RunReport> {
    let skew = config.map_or(Duration::from_secs(60), |c| c.fleet.clock_skew.0);
    let (f, view) = status::fetch(root, remote, fleet, skew)?;
    let lease = config.map_or(Duration::from_secs(5 * 60), |c| c.fleet.lease.0);
    let st = status::describe(&f, &view, lease);
    let Some((_, ledger)) = &view.ledger else {
        return Err(
            Error::usage(format!("no fleet `{fleet}` on `{remote}` yet"))
                .with_hint("its first worker creates it: `ralph run --remote R --fleet NAME`"),
        );
    };
    let records = loops::read(f.repo(), f.names());
    let logs: Vec<(&LoopRecord, Vec<Value>)> = records
        .iter()
        .map(|(oid, r)| (r, lines(&loops::events(f.repo(), *oid))))
        .collect();
    let budgets = Budgets {
        max_iterations: config.map(|c| c.loop_.max_iterations),
        max_cost_usd: config.and_then(|c| c.loop_.max_cost_usd),
        max_duration_secs: None,
        deadline: None,
    };
    let id = format!("fleet-{fleet}");
    let log = one_log(&id, ledger.created_at, &ledger.plan, &budgets, &logs);
    let thresholds = config.map_or(Thresholds::DEFAULT, Config::thresholds);
    let mut report = gather::build(&id, &log, None, thresholds, budgets.clone());
    // The page would say "per session": the fleet's limit is in its totals.
    report.budgets.max_iterations = None;
    let done = st.items.iter().filter(|i| i.state == "done").count();
    let open = st
        .items
        .iter()
        .filter(|i| !matches!(i.state, "done" | "cancelled"))
        .count();
    report.items_done = Some(done);
    report.items_open = Some(open);
    // An item is done when it is merged (the loops check off only their own plans).
    let sessions = report.iterations.len().max(1) as f64;
    report.metrics.items_checked = done;
    report.metrics.items_per_iteration = done as f64 / sessions;
    report.metrics.items_per_context_window = done as f64 / sessions;
    report.cost_usd = ledger.cost_usd;
    report.objective = Some(format!(
        "fleet {fleet} on {remote}: {} worker(s), {} merge(s) into {}",
        st.workers.len().max(ledger.by_worker.len()),
        st.merged.len(),
        st.run_branch
    ));
    let now = Timestamp::now();
    let spent = spent(ledger, &budgets);
    let live = st.items.iter().any(|i| i.state == "claimed");
    let (outcome, reason) = if open == 0 {
        (
            "completed",
            format!("every item is merged ({} merges)", st.merged.len()),
        )
    } else if let Some(what) = spent {
        (
            "budget_spent",
            format!("the fleet's budget is spent: {what}"),
        )
    } else if live || ledger.limited(now).is_some() {
        ("running", format!("{open} item(s) not merged yet"))
    } else {
        ("stopped", format!("{open} item(s) left: see Items left"))
    };
    report.outcome = outcome.into();
    report.reason = Some(reason);
    report.exit_code = None;
    let mut lanes = lanes(&st, &logs, &view.backups);
    lanes.fleet = Some(FleetTotals {
        fleet: fleet.to_string(),
        remote: remote.to_string(),
        run_branch: st.run_branch.trim_start_matches("refs/heads/").to_string(),
        iterations: ledger.iterations,
        max_iterations: budgets.max_iterations.map(u64::from),
        cost_usd: ledger.cost_usd,
        max_cost_usd: budgets.max_cost_usd,
        items_done: done,
        items: done + open,
        limit: ledger
            .limited(now)
            .map(|l| format!("usage limit hit by {} until {}", l.by, l.until)),
    });
    for (worker, spent) in &ledger.by_worker {
        // Iterations of a worker killed mid-item are on the ledger only.
        let lane = lanes.lane_of(worker);
        if spent.iterations > u64::from(lane.iterations) {
            lane.iterations = spent.iterations as u32;
            lane.cost_usd = spent.cost_usd;
        }
    }
    report.story.lanes = lanes;
    Ok(report)
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Which budget the ledger shows spent.
fn spent(ledger: &super::remote::Ledger, budgets: &Budgets) -> Option<String> {
    if let Some(max) = budgets.max_iterations
        && ledger.iterations >= u64::from(max)
    {
        return Some(format!("{} of {max} iterations", ledger.iterations));
    }
    match budgets.max_cost_usd {
        Some(max) if ledger.cost_usd >= max => {
            Some(format!("${:.2} of ${max:.2}", ledger.cost_usd))
        }
        _ => None,
    }
}

/// The loops' logs as one parallel run's log (pure), as a coordinator
/// writes it: a start at the fleet's creation, then each round's records
/// tagged with its worker, led by the item it was given and a start of its
/// own (its ref's name), all in time order. `report::gather` numbers their
/// iterations across the fleet in the order they began, as for
/// `ralph run --workers N`.
pub(crate) fn one_log(
    id: &str,
    created_at: Option<Timestamp>,
    plan: &str,
    budgets: &Budgets,
    logs: &[(&LoopRecord, Vec<Value>)],
) -> Vec<Record> {
    let start = created_at
        .or_else(|| logs.first().map(|(r, _)| r.started_at))
        .unwrap_or_default();
    let started = |run_id: String, max_iterations: u32| Event::RunStarted {
        run_id,
        resumed: false,
        first_iteration: 1,
        max_iterations,
        plan: plan.to_string(),
        pid: 0,
        deadline: None,
        max_cost_usd: budgets.max_cost_usd,
    };
    let mut records = vec![Record {
        ts: start.to_string(),
        worker: None,
        event: started(id.to_string(), budgets.max_iterations.unwrap_or(0)),
    }];
    let mut rest: Vec<(Timestamp, Record)> = Vec::new();
    for (r, lines) in logs {
        let tagged = |at: Timestamp, event: Event| {
            let worker = Some(r.worker.clone());
            let ts = at.to_string();
            (at, Record { ts, worker, event })
        };
        rest.push(tagged(
            r.started_at,
            Event::WorkerStarted {
                item: r.text.clone(),
                task: "item".into(),
                branch: String::new(),
                worktree: String::new(),
            },
        ));
        rest.push(tagged(r.started_at, started(r.ref_name(), 0)));
        for v in lines {
            if matches!(v["event"].as_str(), Some("run_started" | "run_ended")) {
                continue;
            }
            if let Ok(record) = serde_json::from_value::<Record>(v.clone())
                && record.worker.is_none()
            {
                let at = record.ts.parse().unwrap_or(r.started_at);
                rest.push(tagged(at, record.event));
            }
        }
    }
    // Stable: a round's item and start stay before its records of that time.
    rest.sort_by_key(|(at, _)| *at);
    records.extend(rest.into_iter().map(|(_, r)| r));
    records
}

/// A lane per worker, the merge history and the items left (pure).
pub(crate) fn lanes(
    st: &FleetStatus,
    logs: &[(&LoopRecord, Vec<Value>)],
    backups: &[String],
) -> Lanes {
    let mut lanes = Lanes::default();
    let tagged = |worker: &str, ts: String, event: Event| Record {
        ts,
        worker: Some(worker.to_string()),
        event,
    };
    for (r, lines) in logs {
        let at = r.started_at.to_string();
        if r.round == 1 {
            let item = match &r.took_over_from {
                Some(from) => format!("{} (taken over from {from})", r.text),
                None => r.text.clone(),
            };
            if let Some(from) = &r.took_over_from
                && !logs
                    .iter()
                    .any(|(o, _)| &o.worker == from && o.item == r.item)
            {
                // Its holder left no record (killed): its lane says so.
                let lane = lanes.lane_of(from);
                lane.items.push(r.text.clone());
                lane.ended
                    .push(format!("lost to {} (its lease expired)", r.worker));
            }
            lanes.record(&tagged(
                &r.worker,
                at.clone(),
                Event::WorkerStarted {
                    item,
                    task: "item".into(),
                    branch: format!("items/{}", r.item),
                    worktree: String::new(),
                },
            ));
        }
        for v in lines {
            if let Ok(mut record) = serde_json::from_value::<Record>(v.clone()) {
                record.worker = Some(r.worker.clone());
                lanes.record(&record);
            }
        }
        let why = if r.why.is_empty() {
            String::new()
        } else {
            format!(": {}", r.why)
        };
        lanes.record(&tagged(
            &r.worker,
            r.ended_at.to_string(),
            Event::WorkerEnded {
                item: r.text.clone(),
                exit_code: r.exit_code.unwrap_or(-1),
                outcome: format!("{}{why}", r.end.as_str()),
            },
        ));
    }
    for m in &st.merged {
        let backup = backups
            .iter()
            .find(|b| b.ends_with(&format!("-{}", m.record.item)))
            .cloned();
        lanes.record(&tagged(
            &m.record.worker,
            m.at.to_string(),
            Event::Merge {
                item: m.record.text.clone(),
                branch: format!("items/{}", m.record.item),
                attempt: m.record.generation,
                merged: Merged::MergeCommit {
                    from: String::new(),
                    id: m.commit.clone(),
                },
                backup,
            },
        ));
    }
    for i in &st.items {
        let last = logs
            .iter()
            .rev()
            .find(|(r, _)| r.item == i.key)
            .map(|(r, _)| r);
        let why = match (i.state, &i.holder, last) {
            ("done" | "cancelled", _, _) => continue,
            ("claimed", Some(h), _) => format!(
                "claimed by {h} (generation {}), lease until {}",
                i.generation.unwrap_or(1),
                i.lease_expires_at
                    .map(|t| t.to_string())
                    .unwrap_or_default()
            ),
            ("given_up", Some(h), _) => format!(
                "given up for the fleet by {h}: {}",
                i.given_up.as_deref().unwrap_or_default()
            ),
            ("expired", Some(h), _) => {
                format!("{h}'s lease expired: the next worker takes it over from what it pushed")
            }
            (_, _, Some(r)) => format!(
                "{} by {}{}{}",
                r.end.as_str(),
                r.worker,
                if r.why.is_empty() { "" } else { ": " },
                r.why
            ),
            _ if i.pushed => "work pushed on its branch, not merged".into(),
            _ => "not started".into(),
        };
        let pushed = if i.pushed && i.state != "open" {
            " (work pushed)"
        } else {
            ""
        };
        lanes.left.push(LeftItem {
            item: i.text.clone(),
            why: format!("{why}{pushed}"),
        });
    }
    lanes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::fleet::loops::LoopEnd;

    fn rec(worker: &str, text: &str, at: &str) -> LoopRecord {
        LoopRecord {
            item: format!("i-{text}"),
            text: text.into(),
            worker: worker.into(),
            generation: 1,
            took_over_from: None,
            round: 1,
            started_at: at.parse().unwrap(),
            ended_at: at.parse().unwrap(),
            exit_code: Some(0),
            iterations: 0,
            cost_usd: 0.0,
            end: LoopEnd::Merged,
            why: String::new(),
        }
    }

    fn line(ts: &str, event: &str, iteration: Option<u32>) -> Value {
        let mut v = serde_json::json!({ "ts": ts, "event": event });
        match event {
            "iteration_ended" => {
                v = serde_json::json!({"ts": ts, "event": event, "iteration": iteration,
                    "outcome": "promise", "progress": true, "cost_usd": 0.5, "peak_percent": 10.0,
                    "seconds": 1.0, "error": null, "invalid_lines": 0, "skipped_lines": 0});
            }
            "run_started" => {
                v = serde_json::json!({"ts": ts, "event": event, "run_id": "x", "resumed": false,
                    "first_iteration": 1, "max_iterations": 9, "plan": "p", "pid": 1});
            }
            _ => {}
        }
        v
    }

    #[test]
    fn the_loops_logs_become_one_run_numbered_across_the_fleet() {
        let a = rec("wa", "one", "2026-11-24T03:00:00Z");
        let b = rec("wb", "two", "2026-11-24T03:00:01Z");
        let logs = vec![
            (
                &a,
                vec![
                    line("2026-11-24T03:00:00Z", "run_started", None),
                    line("2026-11-24T03:00:05Z", "iteration_ended", Some(1)),
                    line("2026-11-24T03:00:09Z", "iteration_ended", Some(2)),
                ],
            ),
            (
                &b,
                vec![
                    line("2026-11-24T03:00:01Z", "run_started", None),
                    line("2026-11-24T03:00:07Z", "iteration_ended", Some(1)),
                ],
            ),
        ];
        let budgets = Budgets::default();
        let created = "2026-11-24T02:59:59Z".parse().ok();
        let log = one_log("fleet-n", created, "fix_plan.md", &budgets, &logs);
        // The fleet's start, then each round's item and start (its own
        // start from its log left out), in time order, tagged.
        let starts: Vec<(Option<&str>, &str)> = (log.iter())
            .filter_map(|r| match &r.event {
                Event::RunStarted { run_id, .. } => Some((r.worker.as_deref(), run_id.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(starts.len(), 3, "{starts:?}");
        assert_eq!(starts[0], (None, "fleet-n"));
        assert_eq!(starts[1], (Some("wa"), a.ref_name().as_str()));
        assert_eq!(log.len(), 8);
        assert!(log[1..].iter().all(|r| r.worker.is_some()));
        let report = gather::build("fleet-n", &log, None, Thresholds::DEFAULT, budgets);
        let rows: Vec<(u32, Option<&str>, Option<&str>)> = (report.iterations.iter())
            .map(|i| (i.iteration, i.worker.as_deref(), i.item.as_deref()))
            .collect();
        // wa's 1 and 2 and wb's 1, numbered by when they ended here (the
        // lines have no starts): wa 1 at :05, wb 1 at :07, wa 2 at :09.
        assert_eq!(
            rows,
            [
                (1, Some("wa"), Some("one")),
                (2, Some("wb"), Some("two")),
                (3, Some("wa"), Some("one")),
            ]
        );
        assert!((report.cost_usd - 1.5).abs() < 1e-9);
    }
}
