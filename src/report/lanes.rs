//! A parallel run in the morning report (`ralph run --workers N`): a lane
//! per worker (the units it was given, its iterations, cost, checkpoints,
//! how each of its loops ended) and the merge queue's history. Pure:
//! records in, rows and markup out.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde::Serialize;

use super::svg::esc;
use crate::formats::{Event, Record};
use crate::formats::{FleetEvent, Merged};
use crate::text::printable;

/// One worker's lane.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct WorkerLane {
    pub(crate) worker: String,
    /// The units it was given, in order (an `update` task marked so).
    pub(crate) items: Vec<String>,
    pub(crate) iterations: u32,
    pub(crate) cost_usd: f64,
    pub(crate) checkpoints: u32,
    /// Dead iterations taken over (after kill -9).
    pub(crate) crashes: u32,
    /// How each of its loops ended (`worker_ended`), in order.
    pub(crate) ended: Vec<String>,
    /// A fleet machine's own exit code, once it has said it ended
    /// (`fleet_finished`, its end record on the remote).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) exit_code: Option<i32>,
}

/// One step of the merge queue.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct MergeRow {
    pub(crate) at: String,
    pub(crate) worker: String,
    pub(crate) item: String,
    pub(crate) branch: String,
    pub(crate) attempt: u32,
    #[serde(flatten)]
    pub(crate) merged: Merged,
    pub(crate) backup: Option<String>,
}

/// What the lanes gather from a run's records.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Lanes {
    pub(crate) workers: Vec<WorkerLane>,
    pub(crate) merges: Vec<MergeRow>,
    /// A fleet's totals against its budgets (`ralph report --fleet`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fleet: Option<FleetTotals>,
    /// The items not done when the report was made, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) left: Vec<LeftItem>,
    /// A fleet item's text by its key, from its claims (a conflict names
    /// only the key).
    #[serde(skip)]
    texts: std::collections::BTreeMap<String, String>,
}

/// A fleet's totals, as its ledger on the remote has them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct FleetTotals {
    pub(crate) fleet: String,
    pub(crate) remote: String,
    pub(crate) run_branch: String,
    pub(crate) iterations: u64,
    pub(crate) max_iterations: Option<u64>,
    pub(crate) cost_usd: f64,
    pub(crate) max_cost_usd: Option<f64>,
    pub(crate) items_done: usize,
    pub(crate) items: usize,
    /// A usage limit that pauses the fleet (who hit it, until when).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) limit: Option<String>,
}

/// An item left undone.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct LeftItem {
    pub(crate) item: String,
    pub(crate) why: String,
}

impl Lanes {
    fn lane(&mut self, worker: &str) -> &mut WorkerLane {
        match self.workers.iter().position(|l| l.worker == worker) {
            Some(i) => &mut self.workers[i],
            None => {
                self.workers.push(WorkerLane {
                    worker: worker.to_string(),
                    ..WorkerLane::default()
                });
                self.workers.last_mut().expect("just pushed")
            }
        }
    }

    /// Take in one record of the run (the coordinator's or a worker's).
    pub(crate) fn record(&mut self, r: &Record) {
        let Some(worker) = &r.worker else {
            return;
        };
        match &r.event {
            Event::IterationEnded { cost_usd, .. } => {
                let lane = self.lane(worker);
                lane.iterations += 1;
                lane.cost_usd += cost_usd;
            }
            Event::Checkpoint { trigger, .. } => {
                let lane = self.lane(worker);
                lane.checkpoints += 1;
                if *trigger == crate::formats::Trigger::Crash {
                    lane.crashes += 1;
                }
            }
            Event::WorkerStarted { item, task, .. } => {
                let item = if task == "update" {
                    format!("{item} (update)")
                } else {
                    item.clone()
                };
                self.lane(worker).items.push(item);
            }
            Event::WorkerEnded { outcome, .. } => self.lane(worker).ended.push(outcome.clone()),
            // A fleet machine's own records (`ralph report --fleet`).
            Event::Fleet(FleetEvent::Claimed {
                item: key,
                text,
                took_over_from,
                ..
            }) => {
                self.texts.insert(key.clone(), text.clone());
                let item = match took_over_from {
                    Some(from) => format!("{text} (taken over from {from})"),
                    None => text.clone(),
                };
                self.lane(worker).items.push(item);
            }
            Event::Fleet(FleetEvent::Merged { item, text, commit }) => {
                let merged = Merged::MergeCommit {
                    from: String::new(),
                    id: commit.clone(),
                };
                self.fleet_merge(r, worker, item, text.clone(), merged);
            }
            Event::Fleet(FleetEvent::Finished { exit_code }) => {
                self.lane(worker).exit_code = Some(*exit_code);
            }
            Event::Fleet(FleetEvent::Conflict { item, files }) => {
                let merged = Merged::Conflict {
                    files: files.clone(),
                };
                let text = self.texts.get(item).unwrap_or(item).clone();
                self.fleet_merge(r, worker, item, text, merged);
            }
            Event::Merge {
                item,
                branch,
                attempt,
                merged,
                backup,
            } => self.merges.push(MergeRow {
                at: r.ts.clone(),
                worker: worker.clone(),
                item: item.clone(),
                branch: branch.clone(),
                attempt: *attempt,
                merged: merged.clone(),
                backup: backup.clone(),
            }),
            _ => {}
        }
    }

    /// A fleet machine's merge of item `key` (its attempts counted from
    /// the rows before it).
    fn fleet_merge(&mut self, r: &Record, worker: &str, key: &str, text: String, merged: Merged) {
        let branch = format!("items/{key}");
        let attempt = 1 + self.merges.iter().filter(|m| m.branch == branch).count() as u32;
        self.merges.push(MergeRow {
            at: r.ts.clone(),
            worker: worker.to_string(),
            item: text,
            branch,
            attempt,
            merged,
            backup: None,
        });
    }

    /// The lanes of run `run_id`: its workers' records and the
    /// coordinator's about them, from the run's starts to its end.
    pub(crate) fn of(run_id: &str, records: &[Record]) -> Lanes {
        let mut lanes = Lanes::default();
        let mut current = None;
        let mut seen = crate::formats::Heard::default();
        for r in records {
            if let (None, Event::RunStarted { run_id: id, .. }) = (&r.worker, &r.event) {
                current = Some(id.as_str());
            }
            if current == Some(run_id) && seen.first(r) {
                lanes.record(r);
            }
        }
        lanes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.workers.is_empty() && self.merges.is_empty() && self.fleet.is_none()
    }

    /// The lane of `worker` (made if it has none yet).
    pub(crate) fn lane_of(&mut self, worker: &str) -> &mut WorkerLane {
        self.lane(worker)
    }
}

/// Items as shown: plan text, its escape sequences and control characters
/// removed each on its own (a cut one must not eat the next).
fn shown(items: &[String], sep: &str) -> String {
    let shown: Vec<Cow<str>> = items.iter().map(|i| printable(i)).collect();
    shown.join(sep)
}

fn merged_text(m: &Merged) -> String {
    match m {
        Merged::AlreadyMerged => "already merged".into(),
        Merged::FastForward { to, .. } => format!("fast-forward to {}", &to[..to.len().min(10)]),
        Merged::MergeCommit { id, .. } => format!("merge commit {}", &id[..id.len().min(10)]),
        Merged::Conflict { files } => format!("conflict in {}: handed back", files.join(", ")),
        Merged::Blocked { reason } => format!("blocked: {reason}"),
    }
}

/// How a lane's loops ended, and a fleet machine's own exit.
fn ended_text(l: &WorkerLane) -> String {
    let exited = l.exit_code.map(|c| format!("the worker exited {c}"));
    (l.ended.iter().cloned().chain(exited))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The fleet's two lines: what was merged, and what it spent against its budgets.
fn totals_text(t: &FleetTotals) -> [String; 2] {
    let of = |max: Option<String>| max.map(|m| format!(" of {m}")).unwrap_or_default();
    let limit = t
        .limit
        .as_deref()
        .map(|l| format!("; paused: {l}"))
        .unwrap_or_default();
    [
        format!(
            "{} on {}: {} of {} items merged into {}",
            t.fleet, t.remote, t.items_done, t.items, t.run_branch
        ),
        format!(
            "{} iteration(s){}, ${:.2}{}{limit}",
            t.iterations,
            of(t.max_iterations.map(|m| m.to_string())),
            t.cost_usd,
            of(t.max_cost_usd.map(|m| format!("${m:.2}"))),
        ),
    ]
}

/// The page's section: a lane per worker, then the merge queue.
pub(crate) fn lanes_html(out: &mut String, lanes: &Lanes) {
    if lanes.is_empty() {
        return;
    }
    out.push_str(r#"<section class="workers">"#);
    if let Some(t) = &lanes.fleet {
        let _ = write!(
            out,
            r#"<h2>Fleet</h2><p class="fleet">{}<br/>spent: {}</p>"#,
            esc(&totals_text(t)[0]),
            esc(&totals_text(t)[1])
        );
    }
    out.push_str(r#"<h2>Workers</h2><table><thead><tr><th>worker</th><th>items</th><th>iterations</th><th>cost</th><th>checkpoints</th><th>its loops ended</th></tr></thead><tbody>"#);
    for l in &lanes.workers {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>${:.2}</td><td>{}{}</td><td>{}</td></tr>",
            esc(&l.worker),
            esc(&shown(&l.items, " · ")),
            l.iterations,
            l.cost_usd,
            l.checkpoints,
            if l.crashes > 0 {
                format!(" ({} taken over after a crash)", l.crashes)
            } else {
                String::new()
            },
            esc(&ended_text(l))
        );
    }
    out.push_str(r#"</tbody></table><h2>Merge queue</h2><table><thead><tr><th>at</th><th>worker</th><th>item</th><th>attempt</th><th>outcome</th><th>backup ref</th></tr></thead><tbody>"#);
    for m in &lanes.merges {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&m.at),
            esc(&m.worker),
            esc(&printable(&m.item)),
            m.attempt,
            esc(&merged_text(&m.merged)),
            esc(m.backup.as_deref().unwrap_or(""))
        );
    }
    out.push_str("</tbody></table>");
    if !lanes.left.is_empty() {
        out.push_str(
            r#"<h2>Items left</h2><table><thead><tr><th>item</th><th>why</th></tr></thead><tbody>"#,
        );
        for l in &lanes.left {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td></tr>",
                esc(&printable(&l.item)),
                esc(&l.why)
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("</section>\n");
}

/// The text summary's lines.
pub(crate) fn lanes_text(lanes: &Lanes) -> String {
    let mut out = String::new();
    if let Some(t) = &lanes.fleet {
        let [merged, spent] = totals_text(t);
        let _ = writeln!(out, "{:<15}{merged}", "fleet");
        let _ = writeln!(out, "{:<15}{spent}", "fleet spent");
    }
    for l in &lanes.workers {
        let ended = match ended_text(l) {
            e if e.is_empty() => e,
            e => format!(" (ended: {e})"),
        };
        let _ = writeln!(
            out,
            "{:<15}{}: {} iteration(s), ${:.2}, {} checkpoint(s); {}{ended}",
            "worker",
            l.worker,
            l.iterations,
            l.cost_usd,
            l.checkpoints,
            shown(&l.items, ", ")
        );
    }
    for m in &lanes.merges {
        let _ = writeln!(
            out,
            "{:<15}{} \"{}\" (attempt {}): {}",
            "merge",
            m.worker,
            printable(&m.item),
            m.attempt,
            merged_text(&m.merged)
        );
    }
    for l in &lanes.left {
        let _ = writeln!(out, "{:<15}\"{}\": {}", "left", printable(&l.item), l.why);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(worker: Option<&str>, event: Event) -> Record {
        Record {
            ts: "2026-11-24T03:00:00Z".into(),
            worker: worker.map(str::to_string),
            event,
        }
    }

    #[test]
    fn a_lane_per_worker_and_the_merge_history() {
        let mut lanes = Lanes::default();
        let records = [
            rec(
                Some("w1"),
                Event::WorkerStarted {
                    item: "alpha".into(),
                    task: "item".into(),
                    branch: "ralph/r/w1".into(),
                    worktree: "/x".into(),
                },
            ),
            rec(
                Some("w1"),
                Event::IterationEnded {
                    iteration: 1,
                    outcome: crate::formats::IterationOutcome::Promise,
                    progress: true,
                    cost_usd: 0.5,
                    peak_percent: 10.0,
                    seconds: 1.0,
                    error: None,
                    invalid_lines: 0,
                    skipped_lines: 0,
                    not_metered: false,
                    session_id: None,
                },
            ),
            rec(
                Some("w1"),
                Event::Merge {
                    item: "alpha".into(),
                    branch: "ralph/r/w1".into(),
                    attempt: 1,
                    merged: Merged::Conflict {
                        files: vec!["a.txt".into()],
                    },
                    backup: None,
                },
            ),
        ];
        for r in &records {
            lanes.record(r);
        }
        // As the log holds them: every record reads back.
        for r in &records {
            let line = serde_json::to_string(r).unwrap();
            let back: Record =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            assert_eq!(back.event, r.event);
        }
        assert_eq!(lanes.workers.len(), 1);
        assert_eq!(lanes.workers[0].items, ["alpha"]);
        assert_eq!(lanes.workers[0].iterations, 1);
        assert_eq!(lanes.merges.len(), 1);
        let mut html = String::new();
        lanes_html(&mut html, &lanes);
        assert!(
            html.contains("Merge queue") && html.contains("conflict in a.txt"),
            "{html}"
        );
        assert!(lanes_text(&lanes).contains("w1: 1 iteration(s), $0.50"));
    }

    #[test]
    fn plan_text_is_shown_without_its_escape_sequences_and_cuts_nothing_after_it() {
        let lanes = Lanes {
            workers: vec![WorkerLane {
                worker: "w2".into(),
                // A title sequence whose end was lost: it must not eat the
                // items after it.
                items: vec![
                    "\x1b[31mred\x1b[0m item \x1b]0;title bell".into(),
                    "bravo".into(),
                ],
                ended: vec!["completed".into()],
                ..WorkerLane::default()
            }],
            ..Lanes::default()
        };
        let text = lanes_text(&lanes);
        assert!(!text.contains('\x1b'), "{text:?}");
        assert!(text.contains("red item"), "{text:?}");
        assert!(text.contains(", bravo (ended: completed)"), "{text:?}");
        let mut html = String::new();
        lanes_html(&mut html, &lanes);
        assert!(!html.contains("[31m") && html.contains("bravo"), "{html}");
    }

    #[test]
    fn a_fleet_machines_end_is_on_its_lane_after_its_loops() {
        let mut lanes = Lanes::default();
        lanes.lane_of("wa").ended.push("merged".into());
        lanes.record(&rec(
            Some("wa"),
            Event::Fleet(FleetEvent::Finished { exit_code: 4 }),
        ));
        assert_eq!(lanes.workers[0].exit_code, Some(4));
        assert!(
            lanes_text(&lanes).contains("(ended: merged, the worker exited 4)"),
            "{}",
            lanes_text(&lanes)
        );
        // A parallel run's worker says no such thing.
        lanes.lane_of("w1").ended.push("completed".into());
        assert!(lanes_text(&lanes).contains("(ended: completed)\n"));
    }

    #[test]
    fn a_workers_record_written_again_counts_once() {
        let at = |w: &str, ts: &str| Record {
            ts: ts.into(),
            worker: Some(w.into()),
            event: Event::Warning {
                message: String::new(),
            },
        };
        let mut seen = crate::formats::Heard::default();
        let records = [
            (at("w1", "2026-11-24T03:00:01Z"), true),
            (at("w1", "2026-11-24T03:00:02Z"), true),
            (at("w1", "2026-11-24T03:00:02Z"), false),
            (at("w1", "2026-11-24T03:00:01Z"), false),
            // Another record of the same time is not the same record.
            (
                Record {
                    event: Event::Warning {
                        message: "other".into(),
                    },
                    ..at("w1", "2026-11-24T03:00:02Z")
                },
                true,
            ),
            (at("w2", "2026-11-24T03:00:01Z"), true),
            (
                rec(
                    None,
                    Event::Warning {
                        message: String::new(),
                    },
                ),
                true,
            ),
        ];
        for (r, first) in records {
            assert_eq!(seen.first(&r), first, "{r:?}");
        }
    }
}
