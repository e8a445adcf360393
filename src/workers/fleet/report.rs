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

use super::loops::{self, LoopRecord};
use super::status::{self, FleetStatus};
use crate::config::Config;
use crate::context::Thresholds;
use crate::error::{Error, Result};
use crate::formats::{Merged, Record};
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
    let records: Vec<(LoopRecord, Vec<Record>)> = loops::read(f.repo(), f.names())
        .into_iter()
        .map(|(oid, r)| {
            let said = loops::records(f.repo(), oid, &r.worker);
            (r, said)
        })
        .collect();
    let budgets = Budgets {
        max_iterations: config.map(|c| c.loop_.max_iterations),
        max_cost_usd: config.and_then(|c| c.loop_.max_cost_usd),
        max_duration_secs: None,
        deadline: None,
    };
    let id = format!("fleet-{fleet}");
    let log = one_log(&records, &loops::ends(f.repo(), f.names()));
    let thresholds = config.map_or(Thresholds::DEFAULT, Config::thresholds);
    let mut report = gather::build_of(&id, &log, thresholds, budgets.clone());
    report.sessions = 1;
    report.plan = Some(ledger.plan.clone());
    report.started_at = ledger
        .created_at
        .or_else(|| records.first().map(|(r, _)| r.started_at))
        .map(|t| t.to_string());
    report.budgets.max_cost_usd = budgets.max_cost_usd;
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
    let mut lanes = lanes(&st, &records, &log, &view.backups);
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

/// The records the loops' records on the remote carry, and the workers'
/// end records (`ends`: what each said after its last loop record), as
/// one log in time order (pure): each worker's own (its claims, merges,
/// conflicts, its end…) and each round's loop log, all naming their
/// worker. `report::gather` numbers the iterations across the fleet in
/// the order they began, as for `ralph run --workers N`.
pub(crate) fn one_log(records: &[(LoopRecord, Vec<Record>)], ends: &[Record]) -> Vec<Record> {
    let mut log: Vec<(Timestamp, &Record)> = Vec::new();
    for (r, said) in records {
        for record in said {
            let at = record.ts.parse().unwrap_or(r.started_at);
            log.push((at, record));
        }
    }
    for record in ends {
        if let Ok(at) = record.ts.parse() {
            log.push((at, record));
        }
    }
    // Stable: records of one time stay in the order they were written.
    log.sort_by_key(|(at, _)| *at);
    log.into_iter().map(|(_, r)| r.clone()).collect()
}

/// A lane per worker from the log, how each round ended (its record), the
/// merges' backups and the items left (pure).
pub(crate) fn lanes(
    st: &FleetStatus,
    records: &[(LoopRecord, Vec<Record>)],
    log: &[Record],
    backups: &[String],
) -> Lanes {
    let mut lanes = Lanes::default();
    let mut ends = records.iter().map(|(r, _)| r).peekable();
    for record in log {
        // Each round's end in its place among the records.
        while let Some(r) = ends.next_if(|r| record.ts.parse().is_ok_and(|at| r.ended_at < at)) {
            ended(&mut lanes, r, records);
        }
        lanes.record(record);
    }
    for r in ends {
        ended(&mut lanes, r, records);
    }
    // The run branch's backup before each merge (a conflict wrote nothing).
    for m in (lanes.merges.iter_mut()).filter(|m| matches!(m.merged, Merged::MergeCommit { .. })) {
        let key = m.branch.trim_start_matches("items/");
        m.backup = backups
            .iter()
            .find(|b| b.ends_with(&format!("-{key}")))
            .cloned();
    }
    for i in &st.items {
        let last = records
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

/// How round `r` ended, on its worker's lane; and the lane of a worker it
/// took the item over from that left no record (killed).
fn ended(lanes: &mut Lanes, r: &LoopRecord, records: &[(LoopRecord, Vec<Record>)]) {
    if r.round == 1
        && let Some(from) = &r.took_over_from
        && !records
            .iter()
            .any(|(o, _)| &o.worker == from && o.item == r.item)
    {
        let lane = lanes.lane_of(from);
        lane.items.push(r.text.clone());
        lane.ended
            .push(format!("lost to {} (its lease expired)", r.worker));
    }
    let why = if r.why.is_empty() {
        String::new()
    } else {
        format!(": {}", r.why)
    };
    lanes
        .lane_of(&r.worker)
        .ended
        .push(format!("{}{why}", r.end.as_str()));
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

    /// A record as its line on the remote: worker-less for a loop's own.
    fn line(worker: Option<&str>, json: serde_json::Value) -> Record {
        let mut r: Record = serde_json::from_value(json).unwrap();
        r.worker = worker.map(str::to_string);
        r
    }

    fn ended(ts: &str, iteration: u32) -> serde_json::Value {
        serde_json::json!({"ts": ts, "event": "iteration_ended", "iteration": iteration,
            "outcome": "promise", "progress": true, "cost_usd": 0.5, "peak_percent": 10.0,
            "seconds": 1.0, "error": null, "invalid_lines": 0, "skipped_lines": 0})
    }

    fn started(ts: &str, run_id: &str) -> serde_json::Value {
        serde_json::json!({"ts": ts, "event": "run_started", "run_id": run_id, "resumed": false,
            "first_iteration": 1, "max_iterations": 9, "plan": "p", "pid": 1})
    }

    fn claimed(ts: &str, key: &str, text: &str) -> serde_json::Value {
        serde_json::json!({"ts": ts, "event": "fleet_claimed", "item": key, "text": text,
            "generation": 1})
    }

    #[test]
    fn the_machines_records_become_one_run_numbered_across_the_fleet_a_lane_each() {
        let mut a = rec("wa", "one", "2026-11-24T03:00:00Z");
        a.ended_at = "2026-11-24T03:00:10Z".parse().unwrap();
        let b = rec("wb", "two", "2026-11-24T03:00:01Z");
        let conflict = serde_json::json!({"ts": "2026-11-24T03:00:06Z", "event": "fleet_conflict",
            "item": "i-one", "files": ["f"]});
        let merged = serde_json::json!({"ts": "2026-11-24T03:00:10Z", "event": "fleet_merged",
            "item": "i-one", "text": "one", "commit": "abc"});
        let records = vec![
            (
                a.clone(),
                vec![
                    line(Some("wa"), claimed("2026-11-24T02:59:59Z", "i-one", "one")),
                    line(Some("wa"), conflict),
                    line(Some("wa"), merged),
                    line(None, started("2026-11-24T03:00:00Z", "ra")),
                    line(None, ended("2026-11-24T03:00:05Z", 1)),
                    line(None, ended("2026-11-24T03:00:09Z", 2)),
                ],
            ),
            (
                b.clone(),
                vec![
                    line(Some("wb"), claimed("2026-11-24T03:00:00Z", "i-two", "two")),
                    line(None, started("2026-11-24T03:00:01Z", "rb")),
                    line(None, ended("2026-11-24T03:00:07Z", 1)),
                ],
            ),
        ];
        // As `loops::records` reads them: every record names its worker.
        let records: Vec<(LoopRecord, Vec<Record>)> = (records.into_iter())
            .map(|(r, lines)| {
                let w = r.worker.clone();
                let tagged = lines.into_iter().map(|mut l| {
                    l.worker = Some(w.clone());
                    l
                });
                (r, tagged.collect())
            })
            .collect();
        let log = one_log(&records, &[]);
        assert_eq!(log.len(), 9);
        assert!(log.windows(2).all(|w| w[0].ts <= w[1].ts), "in time order");
        let report = gather::build_of("fleet-n", &log, Thresholds::DEFAULT, Budgets::default());
        let rows: Vec<(u32, Option<&str>, Option<&str>)> = (report.iterations.iter())
            .map(|i| (i.iteration, i.worker.as_deref(), i.item.as_deref()))
            .collect();
        // wa's 1 and 2 and wb's 1, numbered by when they ended here (the
        // lines have no starts): wa 1 at :05, wb 1 at :07, wa 2 at :09;
        // each row's item is the one its machine claimed.
        assert_eq!(
            rows,
            [
                (1, Some("wa"), Some("one")),
                (2, Some("wb"), Some("two")),
                (3, Some("wa"), Some("one")),
            ]
        );
        assert!((report.cost_usd - 1.5).abs() < 1e-9);
        let st = FleetStatus::default();
        let lanes = lanes(&st, &records, &log, &["123-i-one".into()]);
        let names: Vec<&str> = lanes.workers.iter().map(|l| l.worker.as_str()).collect();
        assert_eq!(names, ["wa", "wb"]);
        assert_eq!(lanes.workers[0].items, ["one"]);
        assert_eq!(lanes.workers[0].iterations, 2);
        assert_eq!(lanes.workers[0].ended, ["merged"]);
        // The conflict then the merge, named by the item's text, counted.
        let merges: Vec<(&str, &str, u32, bool)> = (lanes.merges.iter())
            .map(|m| {
                let clean = matches!(m.merged, Merged::MergeCommit { .. });
                (m.worker.as_str(), m.item.as_str(), m.attempt, clean)
            })
            .collect();
        assert_eq!(merges, [("wa", "one", 1, false), ("wa", "one", 2, true)]);
        let backups: Vec<Option<&str>> = lanes.merges.iter().map(|m| m.backup.as_deref()).collect();
        assert_eq!(backups, [None, Some("123-i-one")]);
    }
}
