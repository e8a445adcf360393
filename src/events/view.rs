//! The run as its event stream tells it: one [`LoopView`] per loop (the
//! single loop, or each worker of a parallel run) and the run's totals,
//! built record by record from `.ralph/events.jsonl` (or the live bus).
//! Pure: time comes in as a value; the plan's items come in from the one
//! plan loader ([`RunView::set_plan`]). Read by the live line of
//! `ralph run` (`terminal`) and by `ralph watch`.
//!
//! A parallel run's log holds the coordinator's records (no `worker`) and
//! every worker's (with one): the coordinator has no iterations of its
//! own, so it is never a loop; its `run_started` and `run_ended` are the
//! run's.

use std::collections::{BTreeMap, VecDeque};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::context::MeterReading;
use crate::formats::Merged;
use crate::formats::{Event, Record};

/// The name of a single run's loop (its records carry no `worker`).
pub(crate) const SINGLE: &str = "loop";
/// Warnings kept for the view.
const WARNINGS: usize = 5;
/// Merges kept for the view (the report has them all).
const MERGES: usize = 20;

/// What a loop is doing, as people say it. On the wire too: a fleet
/// worker's status ref carries its loop's (`workers::fleet::live`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", content = "detail", rename_all = "snake_case")]
pub(crate) enum LoopState {
    /// Given an item, no iteration started yet.
    Starting,
    Working,
    /// A checkpoint was asked for: the agent writes its handoff.
    HandingOff,
    /// A usage limit: waiting until this time (RFC 3339).
    Waiting(String),
    /// Between two iterations.
    Between,
    /// Stopped before its item was done; a later run resumes it (why).
    Paused(String),
    /// Left to a person (why).
    Left(String),
    /// Its item is done: its branch waits for the merge queue.
    Done,
    /// Its branch was merged into the run branch.
    Merged,
    /// Its loop ended (how).
    Ended(String),
    /// A fleet machine with no item: waiting for one to be ready.
    Idle,
    /// A fleet machine that says it is busy and has been silent past its
    /// lease and the clock skew (`ralph status --fleet`'s rule): seconds.
    Dead(u64),
}

impl LoopState {
    pub(crate) fn label(&self) -> String {
        match self {
            LoopState::Starting => "starting".into(),
            LoopState::Working => "working".into(),
            LoopState::HandingOff => "handing off".into(),
            LoopState::Waiting(until) => format!("waiting for a limit until {}", clock(until)),
            LoopState::Between => "between iterations".into(),
            LoopState::Paused(why) => format!("paused ({})", why.replace('_', " ")),
            LoopState::Left(why) => format!("left to a person ({why})"),
            LoopState::Done => "done, to merge".into(),
            LoopState::Merged => "merged".into(),
            LoopState::Ended(how) => format!("ended: {}", how.replace('_', " ")),
            LoopState::Idle => "waiting for an item".into(),
            LoopState::Dead(silent) => format!(
                "dead: silent {} (killed, or cut off)",
                crate::text::format_duration(std::time::Duration::from_secs(*silent))
            ),
        }
    }
}

/// `HH:MM` of an RFC 3339 time in local time, or the text as it is.
pub(crate) fn clock(at: &str) -> String {
    at.parse::<Timestamp>()
        .map(|t| {
            t.to_zoned(jiff::tz::TimeZone::system())
                .strftime("%H:%M")
                .to_string()
        })
        .unwrap_or_else(|_| at.to_string())
}

/// One loop: the single loop, or one worker.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LoopView {
    /// `loop`, or the worker's name (`w1`).
    pub(crate) name: String,
    /// The item it works on: a worker's unit, or the item the loop's
    /// plan named last (`item_checked`'s `next`).
    pub(crate) item: Option<String>,
    pub(crate) branch: Option<String>,
    /// Its loop's latest iteration.
    pub(crate) iteration: u32,
    pub(crate) iteration_started: Option<Timestamp>,
    /// The iteration's raw stdout, relative to the loop's project.
    pub(crate) transcript: Option<String>,
    /// The latest reading of this iteration, and when it was read.
    pub(crate) reading: Option<(MeterReading, Timestamp)>,
    /// The latest tool call of this iteration.
    pub(crate) tool: Option<String>,
    pub(crate) iterations: u32,
    pub(crate) cost_usd: f64,
    pub(crate) state: LoopState,
}

impl LoopView {
    pub(crate) fn new(name: &str) -> LoopView {
        LoopView {
            name: name.to_string(),
            item: None,
            branch: None,
            iteration: 0,
            iteration_started: None,
            transcript: None,
            reading: None,
            tool: None,
            iterations: 0,
            cost_usd: 0.0,
            state: LoopState::Starting,
        }
    }

    /// Seconds left to the checkpoint level at `now`, from the latest
    /// reading's estimate (None without a rising rate, or past it).
    pub(crate) fn checkpoint_in(&self, now: Timestamp) -> Option<u64> {
        let (r, at) = self.reading.as_ref()?;
        if r.level >= crate::context::Level::L2 || self.state != LoopState::Working {
            return None;
        }
        let eta = r.eta_to_checkpoint_secs?;
        let since = now.duration_since(*at).as_secs().max(0) as u64;
        Some(eta.saturating_sub(since))
    }

    /// Seconds since the iteration started.
    pub(crate) fn elapsed(&self, now: Timestamp) -> Option<u64> {
        let at = self.iteration_started?;
        Some(now.duration_since(at).as_secs().max(0) as u64)
    }
}

/// One merge of the queue's history.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MergeView {
    pub(crate) at: String,
    pub(crate) worker: Option<String>,
    pub(crate) item: String,
    /// `merged`, `fast-forward`, `already merged`, `conflict`, `blocked`.
    pub(crate) result: &'static str,
}

/// A worker branch with commits the run branch does not have yet.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BranchView {
    pub(crate) branch: String,
    pub(crate) worker: String,
    pub(crate) item: String,
}

/// How the run ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EndView {
    pub(crate) outcome: String,
    pub(crate) exit_code: i32,
    pub(crate) reason: String,
    pub(crate) report: Option<String>,
}

/// The run, record by record.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RunView {
    pub(crate) run_id: Option<String>,
    /// The plan file, relative to the project.
    pub(crate) plan: Option<String>,
    pub(crate) started: Option<Timestamp>,
    /// The number of the last iteration the run may start (`run_started`).
    pub(crate) max_iterations: u32,
    /// When the run's time is up, and the cost at which it stops, as its
    /// `run_started` said (the run's own count, whatever ralph.toml says now).
    pub(crate) deadline: Option<Timestamp>,
    pub(crate) max_cost_usd: Option<f64>,
    /// Iterations of the run before this invocation, and those started since.
    iterations_before: u32,
    iterations_since: u32,
    pub(crate) cost_usd: f64,
    /// A parallel run: some record named a worker.
    pub(crate) parallel: bool,
    pub(crate) loops: BTreeMap<String, LoopView>,
    pub(crate) merges: VecDeque<MergeView>,
    /// Worker branches done and waiting for their merge: (worker, item).
    pub(crate) queue: Vec<(String, String)>,
    pub(crate) unmerged: BTreeMap<String, BranchView>,
    pub(crate) warnings: VecDeque<(String, String)>,
    pub(crate) ended: Option<EndView>,
    /// The plan's items as last read: (done, text).
    pub(crate) items: Vec<(bool, String)>,
    /// A fleet's view (`ralph watch --fleet`): its name and remote.
    pub(crate) fleet: Option<String>,
}

impl RunView {
    /// Iterations started in the run (over every worker).
    pub(crate) fn iterations(&self) -> u32 {
        self.iterations_before + self.iterations_since
    }

    /// A view made from another source than the log (a fleet's ledger):
    /// the iterations it counts.
    pub(crate) fn set_iterations(&mut self, n: u32) {
        self.iterations_before = n;
        self.iterations_since = 0;
    }

    pub(crate) fn items_done(&self) -> usize {
        self.items.iter().filter(|(done, _)| *done).count()
    }

    /// The plan as read now (`Plan::load` of [`RunView::plan`]).
    pub(crate) fn set_plan(&mut self, plan: &crate::plan::Plan) {
        self.items = (plan.items.iter())
            .map(|i| (i.done, i.text.clone()))
            .collect();
    }

    /// The first open item of the plan.
    pub(crate) fn current_item(&self) -> Option<&str> {
        (self.items.iter())
            .find(|(done, _)| !done)
            .map(|(_, t)| t.as_str())
    }

    /// A loop's item: its own, or for the single loop the plan's first open one.
    pub(crate) fn item_of<'a>(&'a self, l: &'a LoopView) -> Option<&'a str> {
        l.item
            .as_deref()
            .or_else(|| (l.name == SINGLE).then(|| self.current_item()).flatten())
    }

    /// Seconds since the run started.
    pub(crate) fn elapsed(&self, now: Timestamp) -> Option<u64> {
        Some(now.duration_since(self.started?).as_secs().max(0) as u64)
    }

    pub(crate) fn warn(&mut self, ts: &str, text: String) {
        if self.warnings.len() == WARNINGS {
            self.warnings.pop_front();
        }
        self.warnings.push_back((ts.to_string(), text));
    }

    fn loop_mut(&mut self, name: &str) -> &mut LoopView {
        self.loops
            .entry(name.to_string())
            .or_insert_with(|| LoopView::new(name))
    }

    /// Take in one record.
    pub(crate) fn apply(&mut self, record: &Record) {
        let ts = record.ts.parse::<Timestamp>().ok();
        let Some(worker) = record.worker.as_deref() else {
            return self.apply_run(record, ts);
        };
        self.parallel = true;
        match &record.event {
            Event::WorkerStarted { item, branch, .. } => {
                let l = self.loop_mut(worker);
                l.item = Some(item.clone());
                l.branch = Some(branch.clone());
                l.state = LoopState::Starting;
                l.reading = None;
                l.tool = None;
                self.unmerged.insert(
                    branch.clone(),
                    BranchView {
                        branch: branch.clone(),
                        worker: worker.to_string(),
                        item: item.clone(),
                    },
                );
            }
            Event::WorkerEnded { item, outcome, .. } => {
                let l = self.loop_mut(worker);
                l.state = match outcome.as_str() {
                    "completed" => LoopState::Done,
                    "failed" | "breaker_open" => LoopState::Left(outcome.clone()),
                    _ => LoopState::Paused(outcome.clone()),
                };
                if outcome == "completed" {
                    self.queue.push((worker.to_string(), item.clone()));
                }
            }
            Event::Merge {
                item,
                branch,
                merged,
                ..
            } => {
                self.queue.retain(|(w, i)| !(w == worker && i == item));
                let result = match merged {
                    Merged::AlreadyMerged => "already merged",
                    Merged::FastForward { .. } => "fast-forward",
                    Merged::MergeCommit { .. } => "merged",
                    Merged::Conflict { .. } => "conflict",
                    Merged::Blocked { .. } => "blocked",
                };
                if !matches!(merged, Merged::Conflict { .. } | Merged::Blocked { .. }) {
                    self.unmerged.remove(branch);
                    let l = self.loop_mut(worker);
                    if l.state == LoopState::Done {
                        l.state = LoopState::Merged;
                    }
                }
                if self.merges.len() == MERGES {
                    self.merges.pop_front();
                }
                self.merges.push_back(MergeView {
                    at: record.ts.clone(),
                    worker: Some(worker.to_string()),
                    item: item.clone(),
                    result,
                });
            }
            Event::NeedsHuman {
                reason, message, ..
            } => {
                self.loop_mut(worker).state = LoopState::Left(reason.clone());
                self.warn(&record.ts, format!("{worker}: {message}"));
            }
            // A worker's loop: its own start and end are not the run's.
            Event::RunStarted { .. } => {}
            Event::RunEnded { outcome, .. } => {
                let l = self.loop_mut(worker);
                if matches!(
                    l.state,
                    LoopState::Working | LoopState::Between | LoopState::HandingOff
                ) {
                    l.state = LoopState::Ended(outcome.name().to_string());
                }
            }
            _ => self.apply_loop(worker, record, ts),
        }
    }

    /// A record of the single loop or of the coordinator.
    fn apply_run(&mut self, record: &Record, ts: Option<Timestamp>) {
        match &record.event {
            Event::RunStarted {
                run_id,
                first_iteration,
                max_iterations,
                plan,
                deadline,
                max_cost_usd,
                ..
            } => {
                if self.run_id.as_ref() != Some(run_id) {
                    *self = RunView {
                        run_id: Some(run_id.clone()),
                        started: ts,
                        items: std::mem::take(&mut self.items),
                        ..RunView::default()
                    };
                }
                self.plan = Some(plan.clone());
                self.max_iterations = *max_iterations;
                self.deadline = deadline.as_deref().and_then(|d| d.parse().ok());
                self.max_cost_usd = *max_cost_usd;
                self.iterations_before = first_iteration.saturating_sub(1);
                self.iterations_since = 0;
                self.ended = None;
            }
            Event::RunEnded {
                outcome,
                exit_code,
                reason,
                report,
                ..
            } => {
                self.ended = Some(EndView {
                    outcome: outcome.name().to_string(),
                    exit_code: *exit_code,
                    reason: reason.clone(),
                    report: report.clone(),
                });
                if let Some(l) = self.loops.get_mut(SINGLE) {
                    l.state = LoopState::Ended(outcome.name().to_string());
                }
            }
            Event::NeedsHuman { message, .. } => self.warn(&record.ts, message.clone()),
            // The coordinator's own records are never a loop.
            _ if self.parallel => self.apply_loop_free(record),
            _ => self.apply_loop(SINGLE, record, ts),
        }
    }

    /// The coordinator's records other than its start and end.
    fn apply_loop_free(&mut self, record: &Record) {
        if let Event::Warning { message } = &record.event {
            self.warn(&record.ts, message.clone());
        }
    }

    /// A loop's own record.
    fn apply_loop(&mut self, name: &str, record: &Record, ts: Option<Timestamp>) {
        let prefix = if name == SINGLE {
            String::new()
        } else {
            format!("{name}: ")
        };
        match &record.event {
            Event::IterationStarted {
                iteration,
                transcript,
                ..
            } => {
                self.iterations_since += 1;
                let l = self.loop_mut(name);
                l.iteration = *iteration;
                l.iteration_started = ts;
                l.transcript = Some(transcript.clone());
                l.reading = None;
                l.tool = None;
                l.state = LoopState::Working;
            }
            Event::Context { reading, tool, .. } => {
                let l = self.loop_mut(name);
                if let Some(ts) = ts {
                    l.reading = Some((*reading, ts));
                }
                if tool.is_some() {
                    l.tool.clone_from(tool);
                }
            }
            Event::ItemChecked { next, .. } if name == SINGLE => {
                self.loop_mut(name).item.clone_from(next);
            }
            Event::CheckpointRequested { .. } => {
                self.loop_mut(name).state = LoopState::HandingOff;
            }
            Event::IterationEnded { cost_usd, .. } => {
                self.cost_usd += cost_usd;
                let l = self.loop_mut(name);
                l.cost_usd += cost_usd;
                l.iterations += 1;
                l.state = LoopState::Between;
            }
            Event::LimitWait { until, .. } => {
                self.loop_mut(name).state = LoopState::Waiting(until.clone());
            }
            Event::Warning { message } => self.warn(&record.ts, format!("{prefix}{message}")),
            Event::Compacted { iteration, .. } => self.warn(
                &record.ts,
                format!("{prefix}the agent compacted its context in iteration {iteration}: context was lost"),
            ),
            Event::Breaker {
                status, message, ..
            } if *status == crate::rules::breaker::Status::Open => {
                self.warn(&record.ts, format!("{prefix}breaker open: {message}"));
            }
            Event::CompletionRefused { reason, .. } => {
                self.warn(&record.ts, format!("{prefix}completion refused: {reason}"));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Level;
    use crate::formats::{IterationOutcome, RunStatus};

    fn rec(ts: &str, worker: Option<&str>, event: Event) -> Record {
        Record {
            ts: format!("2026-11-27T07:{ts}Z"),
            worker: worker.map(str::to_string),
            event,
        }
    }

    fn started(run_id: &str, first: u32) -> Event {
        Event::RunStarted {
            run_id: run_id.into(),
            resumed: first > 1,
            first_iteration: first,
            max_iterations: 50,
            plan: "fix_plan.md".into(),
            pid: 1,
            deadline: None,
            max_cost_usd: None,
        }
    }

    fn iteration(n: u32) -> Event {
        Event::IterationStarted {
            iteration: n,
            command: vec![],
            transcript: format!(".ralph/runs/r/iter-{n:03}.jsonl"),
            resume_from: None,
        }
    }

    fn context(percent: f64, eta: Option<u64>, tool: Option<&str>) -> Event {
        Event::Context {
            iteration: 1,
            reading: MeterReading {
                tokens: 1000,
                usable: 167_000,
                window: 200_000,
                percent,
                level: crate::context::Thresholds::DEFAULT.level(percent),
                peak_percent: percent,
                rate_per_min: eta.map(|_| 4000.0),
                eta_to_checkpoint_secs: eta,
                not_metered: false,
                window_source: None,
            },
            tool: tool.map(str::to_string),
        }
    }

    fn ended(n: u32, cost: f64) -> Event {
        Event::IterationEnded {
            iteration: n,
            outcome: IterationOutcome::Done,
            progress: true,
            cost_usd: cost,
            peak_percent: 40.0,
            seconds: 60.0,
            error: None,
            invalid_lines: 0,
            skipped_lines: 0,
            not_metered: false,
            session_id: None,
        }
    }

    fn view(records: &[Record]) -> RunView {
        let mut v = RunView::default();
        for r in records {
            v.apply(r);
        }
        v
    }

    fn now(mmss: &str) -> Timestamp {
        format!("2026-11-27T07:{mmss}Z").parse().unwrap()
    }

    #[test]
    fn a_single_loop_is_one_loop_with_the_runs_totals() {
        let v = view(&[
            rec("00:00", None, started("r1", 1)),
            rec("00:01", None, iteration(1)),
            rec("00:30", None, context(40.0, Some(600), Some("Edit a.rs"))),
            rec("00:40", None, context(41.0, Some(590), None)),
            rec("01:00", None, ended(1, 0.5)),
            rec("01:01", None, iteration(2)),
            rec("01:30", None, context(10.0, Some(1200), Some("Read b.rs"))),
        ]);
        assert!(!v.parallel);
        assert_eq!(v.loops.len(), 1);
        let l = &v.loops[SINGLE];
        assert_eq!(
            (l.iteration, l.iterations, l.state.clone()),
            (2, 1, LoopState::Working)
        );
        assert_eq!(l.tool.as_deref(), Some("Read b.rs"));
        assert_eq!((v.iterations(), v.cost_usd), (2, 0.5));
        // 1200 s from 07:01:30, read at 07:02:30: 1140 s left.
        assert_eq!(l.checkpoint_in(now("02:30")), Some(1140));
        assert_eq!(l.elapsed(now("02:01")), Some(60));
        assert_eq!(v.elapsed(now("10:00")), Some(600));
    }

    #[test]
    fn states_follow_the_loops_events() {
        let mut v = view(&[
            rec("00:00", None, started("r1", 1)),
            rec("00:01", None, iteration(1)),
        ]);
        let mut state = |event: Event| {
            v.apply(&rec("00:02", None, event));
            v.loops[SINGLE].state.clone()
        };
        assert_eq!(
            state(Event::CheckpointRequested {
                iteration: 1,
                trigger: crate::formats::Trigger::Manual,
                level: Level::L0,
                percent: 10.0,
                notes_path: None,
            }),
            LoopState::HandingOff
        );
        assert_eq!(state(ended(1, 0.1)), LoopState::Between);
        let wait = Event::LimitWait {
            until: "2026-11-27T09:00:00Z".into(),
            seconds: 3600,
            source: crate::rules::limits::LimitSource::Http429,
            detail: String::new(),
        };
        assert!(matches!(state(wait), LoopState::Waiting(u) if u.starts_with("2026-11-27T09")));
        assert_eq!(state(iteration(2)), LoopState::Working);
        let end = Event::RunEnded {
            outcome: RunStatus::Stopped,
            exit_code: 6,
            reason: "stopped".into(),
            iterations: 2,
            cost_usd: 0.1,
            report: Some(".ralph/report.html".into()),
        };
        assert_eq!(state(end), LoopState::Ended("stopped".into()));
        assert_eq!(
            v.ended.as_ref().unwrap().report.as_deref(),
            Some(".ralph/report.html")
        );
    }

    #[test]
    fn a_parallel_run_is_its_workers_never_the_coordinator() {
        let ws = |w: &str, item: &str| Event::WorkerStarted {
            item: item.into(),
            task: "item".into(),
            branch: format!("ralph/r1/{w}"),
            worktree: format!(".ralph/worktrees/r1/{w}"),
        };
        let merge = |item: &str, w: &str, merged| Event::Merge {
            item: item.into(),
            branch: format!("ralph/r1/{w}"),
            attempt: 1,
            merged,
            backup: None,
        };
        let done = |item: &str, outcome: &str| Event::WorkerEnded {
            item: item.into(),
            exit_code: 0,
            outcome: outcome.into(),
        };
        let v = view(&[
            rec("00:00", None, started("r1", 1)),
            rec("00:01", Some("w1"), ws("w1", "alpha")),
            rec("00:01", Some("w2"), ws("w2", "bravo")),
            rec("00:01", Some("w3"), ws("w3", "charlie")),
            rec("00:02", Some("w1"), started("w-r", 1)),
            rec("00:02", Some("w1"), iteration(1)),
            rec("00:02", Some("w2"), iteration(1)),
            rec("00:02", Some("w3"), iteration(1)),
            rec("00:03", Some("w2"), context(30.0, None, Some("Bash make"))),
            rec("01:00", Some("w1"), ended(1, 0.25)),
            rec("01:00", Some("w2"), ended(1, 0.5)),
            rec("01:01", Some("w1"), done("alpha", "completed")),
            rec("01:01", Some("w2"), done("bravo", "completed")),
            rec(
                "01:02",
                Some("w1"),
                merge(
                    "alpha",
                    "w1",
                    Merged::FastForward {
                        from: "a".into(),
                        to: "b".into(),
                    },
                ),
            ),
            rec("01:03", Some("w3"), done("charlie", "failed")),
            rec(
                "01:04",
                None,
                Event::Warning {
                    message: "hm".into(),
                },
            ),
        ]);
        assert!(v.parallel);
        assert_eq!(v.loops.keys().collect::<Vec<_>>(), ["w1", "w2", "w3"]);
        assert_eq!((v.iterations(), v.cost_usd), (3, 0.75));
        assert_eq!(v.loops["w1"].state, LoopState::Merged);
        assert_eq!(v.loops["w2"].state, LoopState::Done);
        assert_eq!(v.loops["w2"].tool.as_deref(), Some("Bash make"));
        assert_eq!(v.loops["w3"].state, LoopState::Left("failed".into()));
        assert_eq!(v.queue, [("w2".to_string(), "bravo".to_string())]);
        assert_eq!(
            v.unmerged.keys().collect::<Vec<_>>(),
            ["ralph/r1/w2", "ralph/r1/w3"]
        );
        assert_eq!(v.merges.len(), 1);
        assert_eq!(v.merges[0].result, "fast-forward");
        assert_eq!(v.warnings.back().unwrap().1, "hm");
    }

    #[test]
    fn a_new_run_starts_over_and_a_continued_one_keeps_counting() {
        let mut v = view(&[
            rec("00:00", None, started("r1", 1)),
            rec("00:01", None, iteration(1)),
            rec("00:02", None, ended(1, 1.0)),
            rec("00:03", None, started("r1", 2)),
            rec("00:04", None, iteration(2)),
        ]);
        assert_eq!((v.iterations(), v.cost_usd), (2, 1.0));
        v.apply(&rec("00:05", None, started("r2", 1)));
        assert_eq!((v.iterations(), v.cost_usd, v.loops.len()), (0, 0.0, 0));
    }

    #[test]
    fn the_single_loops_item_is_the_plans_until_a_check_off_names_one() {
        let mut v = view(&[
            rec("00:00", None, started("r1", 1)),
            rec("00:01", None, iteration(1)),
        ]);
        v.set_plan(&crate::plan::Plan::parse(
            "- [x] one\n- [ ] two\n- [ ] three\n",
        ));
        assert_eq!(v.item_of(&v.loops[SINGLE]), Some("two"));
        assert_eq!(v.items_done(), 1);
        v.apply(&rec(
            "00:02",
            None,
            Event::ItemChecked {
                iteration: 1,
                items: vec!["two".into()],
                next: Some("three".into()),
                percent: 20.0,
                next_estimate: None,
                remaining: 1000,
            },
        ));
        assert_eq!(v.item_of(&v.loops[SINGLE]), Some("three"));
    }
}
