//! The figures of one run, gathered from what ralph recorded: the event log
//! (every event has a time; `context` events carry the per-turn readings)
//! and, for the run `.ralph/state.json` holds, its iteration history (plan
//! item, items checked, commits). Pure: records in, [`RunReport`] out.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::context::{Level, Thresholds};
use crate::events::{Event, Record};
use crate::state::{IterationOutcome, RunState};

/// Everything the report shows about one run (also its `--json` form).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    pub(crate) run_id: String,
    pub(crate) objective: Option<String>,
    pub(crate) plan: Option<String>,
    pub(crate) started_at: Option<String>,
    pub(crate) ended_at: Option<String>,
    /// Wall time from the first start to the end (or the last event).
    pub(crate) seconds: f64,
    /// `completed`, `breaker_open`, …, or `running` while it goes on.
    pub(crate) outcome: String,
    pub(crate) reason: Option<String>,
    pub(crate) exit_code: Option<i32>,
    /// Supervisor starts: 1, plus one per `ralph run` that continued it.
    pub(crate) sessions: u32,
    pub(crate) cost_usd: f64,
    pub(crate) items_done: Option<usize>,
    pub(crate) items_open: Option<usize>,
    /// The WIP commits ralph made, oldest first.
    pub(crate) commits: Vec<String>,
    pub thresholds: Thresholds,
    pub budgets: Budgets,
    pub iterations: Vec<IterationRow>,
    pub waits: Vec<Wait>,
    pub breaker: Vec<BreakerChange>,
    /// The runs of the `[verify]` commands, oldest first.
    pub verify: Vec<super::story::VerifyRow>,
    /// What changed overnight (from git: `changes::read_git`).
    pub story: super::story::Story,
    pub metrics: Metrics,
    /// The subscription's windows as the agent last reported them (the
    /// quota guard); empty when it reported none.
    pub(crate) quota: Vec<crate::rules::quota::WindowView>,
}

/// The limits the run was held to, as far as they are known.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Budgets {
    pub(crate) max_iterations: Option<u32>,
    pub(crate) max_cost_usd: Option<f64>,
    pub(crate) max_duration_secs: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IterationRow {
    pub(crate) iteration: u32,
    pub(crate) started_at: Option<String>,
    pub(crate) ended_at: Option<String>,
    /// Seconds from the run's start to this iteration's start and end.
    pub(crate) start_offset: Option<f64>,
    pub(crate) end_offset: Option<f64>,
    pub(crate) seconds: f64,
    pub(crate) item: Option<String>,
    pub(crate) items_checked: Vec<String>,
    pub(crate) items_done: Option<usize>,
    pub(crate) items_open: Option<usize>,
    pub(crate) outcome: IterationOutcome,
    pub(crate) progress: bool,
    pub(crate) error: Option<String>,
    pub(crate) cost_usd: f64,
    pub(crate) cumulative_cost_usd: f64,
    pub(crate) peak_percent: f64,
    pub(crate) peak_tokens: u64,
    /// The usable window (tokens) its readings are a percentage of.
    pub(crate) usable_tokens: u64,
    /// Its agent was not metered live (Gemini CLI): `peak_percent` and the
    /// readings are no measure of its context.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) not_metered: bool,
    /// Why ralph checkpointed it (`context`, `manual`, `budget`, …).
    pub(crate) trigger: Option<String>,
    pub(crate) level: Option<Level>,
    pub(crate) handoff: Option<String>,
    pub(crate) commit: Option<String>,
    /// The handoff it resumed from.
    pub(crate) resumed_from: Option<String>,
    /// What it changed, its commits, its agent session (`story.rs`).
    #[serde(flatten)]
    pub(crate) story: super::story::IterationStory,
    pub(crate) readings: Vec<Reading>,
    pub(crate) marks: Vec<Mark>,
}

impl IterationRow {
    fn mark(&mut self, at: f64, kind: MarkKind, label: String) {
        self.marks.push(Mark { at, kind, label });
    }

    /// A resume that checked off the item it started on.
    pub(crate) fn completed_its_item(&self) -> bool {
        self.item
            .as_ref()
            .is_some_and(|i| self.items_checked.contains(i))
    }
}

/// One per-turn context reading.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Reading {
    /// Seconds since the iteration started.
    pub(crate) at: f64,
    pub(crate) tokens: u64,
    pub(crate) percent: f64,
}

/// Something ralph did or saw during an iteration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Mark {
    /// Seconds since the iteration started.
    pub(crate) at: f64,
    pub(crate) kind: MarkKind,
    pub(crate) label: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum MarkKind {
    /// Asked the agent for its handoff.
    Nudge,
    /// Signalled the agent to stop.
    Stop,
    /// Saved the work: handoff and WIP commit.
    Checkpoint,
    /// The agent's CLI compacted its context.
    Compaction,
}

/// A wait for a usage limit to reset.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Wait {
    pub(crate) at: String,
    pub(crate) offset: Option<f64>,
    pub(crate) seconds: u64,
    pub(crate) until: String,
    pub(crate) source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakerChange {
    pub(crate) at: String,
    pub(crate) offset: Option<f64>,
    pub(crate) status: String,
    pub(crate) rule: Option<String>,
    pub(crate) message: String,
}

/// The figures that say how well the loop worked.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Metrics {
    pub checkpoints: u32,
    pub(crate) checkpoints_by_level: BTreeMap<String, u32>,
    pub(crate) checkpoints_by_trigger: BTreeMap<String, u32>,
    pub(crate) nudges: u32,
    pub(crate) stops: u32,
    pub(crate) compactions: u32,
    /// Tokens the agent's CLI dropped when it compacted.
    pub(crate) context_lost_tokens: u64,
    pub(crate) resumes: u32,
    /// Resumes that checked off the item they started on (`None` when the
    /// run did not record items).
    pub(crate) resumes_completed: Option<u32>,
    pub(crate) items_checked: usize,
    pub(crate) items_per_iteration: f64,
    /// Items checked per agent session (each starts a fresh context window).
    pub(crate) items_per_context_window: f64,
    pub(crate) peak_percent_max: f64,
    pub(crate) peak_percent_median: f64,
    pub(crate) peak_tokens_max: u64,
    pub(crate) breaker_trips: u32,
    pub(crate) limit_waits: u32,
    pub(crate) waited_seconds: u64,
}

/// The run ids in the log, oldest first (a continued run appears once).
pub(crate) fn run_ids(records: &[Record]) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for r in records.iter().filter(|r| r.worker.is_none()) {
        if let Event::RunStarted { run_id, .. } = &r.event
            && !ids.contains(run_id)
        {
            ids.push(run_id.clone());
        }
    }
    ids
}

fn parse(ts: &str) -> Option<jiff::Timestamp> {
    ts.parse().ok()
}

fn secs(from: Option<jiff::Timestamp>, to: &str) -> Option<f64> {
    between(from, parse(to))
}

fn between(from: Option<jiff::Timestamp>, to: Option<jiff::Timestamp>) -> Option<f64> {
    Some(to?.duration_since(from?).as_secs_f64().max(0.0))
}

/// Build the report of `run_id` from the log, with the state's history when
/// the state is that run's.
pub fn build(
    run_id: &str,
    records: &[Record],
    state: Option<&RunState>,
    thresholds: Thresholds,
    budgets: Budgets,
) -> RunReport {
    let state = state.filter(|s| s.run_id == run_id);
    let mut report = RunReport {
        run_id: run_id.to_string(),
        objective: state.map(|s| s.objective.clone()).filter(|o| !o.is_empty()),
        plan: None,
        started_at: state
            .map(|s| s.started_at.clone())
            .filter(|s| !s.is_empty()),
        ended_at: None,
        seconds: 0.0,
        outcome: "unknown".into(),
        reason: None,
        exit_code: None,
        sessions: 0,
        cost_usd: 0.0,
        items_done: None,
        items_open: None,
        commits: Vec::new(),
        thresholds,
        budgets,
        iterations: Vec::new(),
        waits: Vec::new(),
        breaker: Vec::new(),
        verify: Vec::new(),
        story: super::story::Story::of(state),
        metrics: Metrics::default(),
        quota: Vec::new(),
    };
    let mut rows: BTreeMap<u32, IterationRow> = BTreeMap::new();
    let mut starts: BTreeMap<u32, jiff::Timestamp> = BTreeMap::new();
    let mut current: Option<&str> = None;
    let mut last_ts: Option<String> = None;
    for r in records.iter().filter(|r| r.worker.is_none()) {
        if let Event::RunStarted { run_id: id, .. } = &r.event {
            current = Some(id);
        }
        if current != Some(run_id) {
            continue;
        }
        last_ts = Some(r.ts.clone());
        let ts = parse(&r.ts);
        match &r.event {
            Event::RunStarted {
                plan,
                max_iterations,
                ..
            } => {
                report.sessions += 1;
                report.started_at.get_or_insert(r.ts.clone());
                report.plan = Some(plan.clone());
                report.budgets.max_iterations.get_or_insert(*max_iterations);
                // A continued run: it is running again until it ends again.
                report.outcome = "running".into();
                report.reason = None;
                report.exit_code = None;
            }
            Event::IterationStarted {
                iteration,
                resume_from,
                ..
            } => {
                if let Some(t) = ts {
                    starts.insert(*iteration, t);
                }
                let row = row(&mut rows, *iteration);
                row.started_at = Some(r.ts.clone());
                row.resumed_from.clone_from(resume_from);
            }
            Event::Context {
                iteration, reading, ..
            } => {
                let (row, at) = row_at(&mut rows, &starts, *iteration, ts);
                row.usable_tokens = reading.usable;
                row.not_metered |= reading.not_metered;
                row.readings.push(Reading {
                    at,
                    tokens: reading.tokens,
                    percent: reading.percent,
                });
            }
            Event::Compacted {
                iteration,
                pre_tokens,
                post_tokens,
            } => {
                report.metrics.compactions += 1;
                report.metrics.context_lost_tokens += pre_tokens.saturating_sub(*post_tokens);
                let (row, at) = row_at(&mut rows, &starts, *iteration, ts);
                row.mark(
                    at,
                    MarkKind::Compaction,
                    format!("the agent compacted its context: {pre_tokens} → {post_tokens} tokens"),
                );
            }
            Event::CheckpointRequested {
                iteration,
                trigger,
                level,
                percent,
                ..
            } => {
                report.metrics.nudges += 1;
                let (row, at) = row_at(&mut rows, &starts, *iteration, ts);
                row.mark(
                    at,
                    MarkKind::Nudge,
                    format!("asked for a handoff ({trigger}, {level} at {percent:.1}%)"),
                );
            }
            Event::AgentSignalled {
                iteration,
                signal,
                reason,
            } => {
                report.metrics.stops += 1;
                let (row, at) = row_at(&mut rows, &starts, *iteration, ts);
                row.mark(at, MarkKind::Stop, format!("sent {signal}: {reason}"));
            }
            Event::Checkpoint {
                iteration,
                trigger,
                level,
                percent,
                commit,
                handoff,
                ..
            } => {
                let (row, at) = row_at(&mut rows, &starts, *iteration, ts);
                row.trigger = Some(trigger.to_string());
                row.level = Some(*level);
                row.handoff.clone_from(handoff);
                row.commit.clone_from(commit);
                row.mark(
                    at,
                    MarkKind::Checkpoint,
                    format!("checkpoint ({trigger}, {level} at {percent:.1}%)"),
                );
            }
            Event::IterationEnded {
                iteration,
                outcome,
                progress,
                cost_usd,
                peak_percent,
                seconds,
                error,
                ..
            } => {
                let row = row(&mut rows, *iteration);
                row.ended_at = Some(r.ts.clone());
                row.outcome.clone_from(outcome);
                row.progress = *progress;
                row.cost_usd = *cost_usd;
                row.peak_percent = *peak_percent;
                row.seconds = *seconds;
                row.error.clone_from(error);
            }
            Event::Breaker {
                status,
                rule,
                message,
            } => report.breaker.push(BreakerChange {
                at: r.ts.clone(),
                offset: None,
                status: status.to_string(),
                rule: rule.clone(),
                message: message.clone(),
            }),
            Event::Verify { .. } => report
                .verify
                .extend(super::story::VerifyRow::of(&r.ts, &r.event)),
            Event::LimitWait {
                until,
                seconds,
                source,
                ..
            } => report.waits.push(Wait {
                at: r.ts.clone(),
                offset: None,
                seconds: *seconds,
                until: until.clone(),
                source: source.to_string(),
            }),
            Event::RunEnded {
                outcome,
                exit_code,
                reason,
                ..
            } => {
                report.outcome = outcome.to_string();
                report.exit_code = Some(*exit_code);
                report.reason = Some(reason.clone());
                report.ended_at = Some(r.ts.clone());
            }
            _ => {}
        }
    }
    match state {
        Some(s) => merge_state(&mut report, &mut rows, s),
        // Not the state's run, and no end in the log: it cannot still be
        // going, so its supervisor died (or its log was cut).
        None if report.outcome == "running" => {
            report.outcome = "interrupted".into();
            report.reason = Some("the log ends before the run did".into());
        }
        None => {}
    }
    if report.ended_at.is_none() {
        report.ended_at = last_ts.or_else(|| state.map(|s| s.updated_at.clone()));
    }
    finish(&mut report, rows);
    report
}

/// Iteration `n`'s row, and `ts` as seconds since the iteration started.
fn row_at<'a>(
    rows: &'a mut BTreeMap<u32, IterationRow>,
    starts: &BTreeMap<u32, jiff::Timestamp>,
    n: u32,
    ts: Option<jiff::Timestamp>,
) -> (&'a mut IterationRow, f64) {
    let at = between(starts.get(&n).copied(), ts).unwrap_or(0.0);
    (row(rows, n), at)
}

fn row(rows: &mut BTreeMap<u32, IterationRow>, n: u32) -> &mut IterationRow {
    rows.entry(n).or_insert_with(|| IterationRow {
        iteration: n,
        ..IterationRow::default()
    })
}

/// What only the state records: items, commits, peaks; and how the run
/// stands when its log says nothing (yet) about its end.
fn merge_state(report: &mut RunReport, rows: &mut BTreeMap<u32, IterationRow>, s: &RunState) {
    for h in &s.history {
        let row = row(rows, h.iteration);
        if row.started_at.is_none() && !h.started_at.is_empty() {
            row.started_at = Some(h.started_at.clone());
        }
        if row.ended_at.is_none() && !h.ended_at.is_empty() {
            row.ended_at = Some(h.ended_at.clone());
        }
        if row.outcome.is_empty() {
            row.outcome.clone_from(&h.outcome);
            row.cost_usd = h.cost_usd;
            row.progress = h.progress;
        }
        row.item.clone_from(&h.item);
        row.items_checked.clone_from(&h.items_checked);
        if h.items_done + h.items_open > 0 {
            // Records from before these fields existed have none.
            row.items_done = Some(h.items_done);
            row.items_open = Some(h.items_open);
        }
        if row.commit.is_none() {
            row.commit.clone_from(&h.commit);
        }
        row.story = super::story::IterationStory::of(h);
    }
    for h in &s.context_history {
        let row = row(rows, h.iteration);
        row.peak_tokens = h.peak_tokens;
        if row.peak_percent == 0.0 {
            row.peak_percent = h.peak_percent;
        }
        if h.checkpoint {
            row.level = row.level.or(h.level);
            if row.handoff.is_none() {
                row.handoff.clone_from(&h.handoff);
            }
        }
    }
    report.items_done = Some(s.completed_items.len());
    report.items_open = Some(s.todo_items.len());
    if report.outcome == "running" || report.outcome == "unknown" {
        report.outcome = s.status.to_string();
        report.reason.clone_from(&s.exit_reason);
    }
}

/// Offsets, running totals, metrics.
fn finish(report: &mut RunReport, rows: BTreeMap<u32, IterationRow>) {
    let start = report.started_at.as_deref().and_then(parse);
    report.seconds = report
        .ended_at
        .as_deref()
        .and_then(|e| secs(start, e))
        .unwrap_or(0.0);
    let mut total = 0.0;
    for mut row in rows.into_values() {
        total += row.cost_usd;
        row.cumulative_cost_usd = total;
        row.start_offset = row.started_at.as_deref().and_then(|t| secs(start, t));
        row.end_offset = row.ended_at.as_deref().and_then(|t| secs(start, t));
        if row.peak_tokens == 0 {
            row.peak_tokens = row.readings.iter().map(|r| r.tokens).max().unwrap_or(0);
        }
        if let Some(c) = &row.commit {
            report.commits.push(c.clone());
        }
        report.iterations.push(row);
    }
    report.cost_usd = total;
    // What git cannot tell (no repository, a history rewritten): ralph's
    // own commits as recorded. `changes::read_git` counts them from git.
    report.story.ralph_commits = report.commits.len();
    for w in &mut report.waits {
        w.offset = secs(start, &w.at);
    }
    for b in &mut report.breaker {
        b.offset = secs(start, &b.at);
    }
    if report.items_done.is_none() {
        let last = report
            .iterations
            .iter()
            .rev()
            .find(|r| r.items_done.is_some());
        report.items_done = last.and_then(|r| r.items_done);
        report.items_open = last.and_then(|r| r.items_open);
    }
    report.metrics = metrics(report);
}

fn metrics(report: &RunReport) -> Metrics {
    let rows = &report.iterations;
    let mut m = Metrics {
        nudges: report.metrics.nudges,
        stops: report.metrics.stops,
        compactions: report.metrics.compactions,
        context_lost_tokens: report.metrics.context_lost_tokens,
        ..Metrics::default()
    };
    for r in rows {
        if let Some(level) = r
            .level
            .filter(|_| r.trigger.is_some() || r.handoff.is_some())
        {
            m.checkpoints += 1;
            *m.checkpoints_by_level
                .entry(level.name().to_string())
                .or_default() += 1;
            let trigger = r.trigger.clone().unwrap_or_else(|| "context".into());
            *m.checkpoints_by_trigger.entry(trigger).or_default() += 1;
        }
    }
    let resumes: Vec<&IterationRow> = rows.iter().filter(|r| r.resumed_from.is_some()).collect();
    m.resumes = resumes.len() as u32;
    let items_known = rows.iter().any(|r| r.item.is_some());
    m.resumes_completed =
        items_known.then(|| resumes.iter().filter(|r| r.completed_its_item()).count() as u32);
    m.items_checked = rows.iter().map(|r| r.items_checked.len()).sum();
    if !rows.is_empty() {
        m.items_per_iteration = m.items_checked as f64 / rows.len() as f64;
    }
    let windows = rows.iter().filter(|r| r.peak_tokens > 0).count().max(1);
    m.items_per_context_window = m.items_checked as f64 / windows as f64;
    let mut peaks: Vec<f64> = rows.iter().map(|r| r.peak_percent).collect();
    peaks.sort_by(f64::total_cmp);
    m.peak_percent_max = peaks.last().copied().unwrap_or(0.0);
    m.peak_percent_median = median(&peaks);
    m.peak_tokens_max = rows.iter().map(|r| r.peak_tokens).max().unwrap_or(0);
    m.breaker_trips = report.breaker.iter().filter(|b| b.status == "open").count() as u32;
    m.limit_waits = report.waits.len() as u32;
    m.waited_seconds = report.waits.iter().map(|w| w.seconds).sum();
    m
}

fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::MeterReading;
    use crate::state::IterationRecord;

    fn rec(secs: i64, event: Event) -> Record {
        let t0: jiff::Timestamp = "2026-11-20T22:00:00Z".parse().unwrap();
        Record {
            ts: (t0 + jiff::SignedDuration::from_secs(secs)).to_string(),
            worker: None,
            event,
        }
    }

    fn started(run_id: &str, secs: i64) -> Record {
        rec(
            secs,
            Event::RunStarted {
                run_id: run_id.into(),
                resumed: false,
                first_iteration: 1,
                max_iterations: 5,
                plan: "fix_plan.md".into(),
                pid: 1,
            },
        )
    }

    fn iteration(n: u32, secs: i64, resume: Option<&str>) -> Record {
        rec(
            secs,
            Event::IterationStarted {
                iteration: n,
                command: vec![],
                transcript: String::new(),
                resume_from: resume.map(str::to_string),
            },
        )
    }

    fn ended(n: u32, secs: i64, outcome: &str, cost: f64, peak: f64) -> Record {
        rec(
            secs,
            Event::IterationEnded {
                iteration: n,
                outcome: outcome.into(),
                progress: true,
                cost_usd: cost,
                peak_percent: peak,
                seconds: 50.0,
                error: None,
                invalid_lines: 0,
                skipped_lines: 0,
                not_metered: false,
            },
        )
    }

    fn context(n: u32, secs: i64, tokens: u64) -> Record {
        rec(
            secs,
            Event::Context {
                iteration: n,
                reading: MeterReading {
                    tokens,
                    usable: 167_000,
                    window: 200_000,
                    percent: tokens as f64 / 1670.0,
                    level: Level::L0,
                    peak_percent: 0.0,
                    rate_per_min: None,
                    eta_to_checkpoint_secs: None,
                    not_metered: false,
                },
                tool: None,
            },
        )
    }

    /// Two runs in one log; the second is the state's: a compaction, a
    /// checkpoint with its nudge and stop, a resume that finished its item,
    /// a breaker trip and a usage-limit wait.
    fn night() -> (Vec<Record>, RunState) {
        let records = vec![
            started("old", 0),
            iteration(1, 1, None),
            ended(1, 9, "done", 0.5, 10.0),
            started("new", 100),
            iteration(1, 110, None),
            context(1, 120, 90_000),
            rec(
                125,
                Event::Compacted {
                    iteration: 1,
                    pre_tokens: 150_000,
                    post_tokens: 40_000,
                },
            ),
            context(1, 130, 145_000),
            rec(
                131,
                Event::CheckpointRequested {
                    iteration: 1,
                    trigger: crate::state::Trigger::Context,
                    level: Level::L2,
                    percent: 86.8,
                    notes_path: None,
                },
            ),
            rec(
                150,
                Event::AgentSignalled {
                    iteration: 1,
                    signal: crate::events::StopStep::Sigint,
                    reason: "grace period over".into(),
                },
            ),
            rec(
                155,
                Event::Checkpoint {
                    iteration: 1,
                    trigger: crate::state::Trigger::Context,
                    level: Level::L2,
                    percent: 86.8,
                    tokens: 145_000,
                    commit: Some("abcdef0123456789".into()),
                    commit_note: None,
                    handoff: Some(".ralph/handoffs/h1.md".into()),
                },
            ),
            ended(1, 156, "checkpoint (context, L2)", 1.0, 86.8),
            iteration(2, 160, Some(".ralph/handoffs/h1.md")),
            context(2, 170, 30_000),
            ended(2, 200, "done", 0.25, 18.0),
            rec(
                201,
                Event::Breaker {
                    status: crate::rules::breaker::Status::Open,
                    rule: Some("no_progress".into()),
                    message: "no progress".into(),
                },
            ),
            rec(
                202,
                Event::LimitWait {
                    until: "2026-11-20T23:00:00Z".into(),
                    seconds: 300,
                    source: crate::rules::limits::LimitSource::RateLimitEvent,
                    detail: String::new(),
                },
            ),
            rec(
                600,
                Event::RunEnded {
                    outcome: "breaker_open".into(),
                    exit_code: 3,
                    reason: "circuit breaker opened".into(),
                    iterations: 2,
                    cost_usd: 1.25,
                    report: None,
                },
            ),
        ];
        let record = |n: u32, item: &str, checked: &[&str], done: usize| IterationRecord {
            iteration: n,
            started_at: "2026-11-20T22:01:50Z".into(),
            item: Some(item.into()),
            items_checked: checked.iter().map(|s| s.to_string()).collect(),
            items_done: done,
            items_open: 3 - done,
            ..IterationRecord::default()
        };
        let state = RunState {
            run_id: "new".into(),
            status: "breaker_open".into(),
            history: vec![record(1, "a", &[], 0), record(2, "a", &["a"], 1)],
            completed_items: vec!["a".into()],
            todo_items: vec!["b".into(), "c".into()],
            ..RunState::default()
        };
        (records, state)
    }

    fn report(records: &[Record], state: Option<&RunState>, id: &str) -> RunReport {
        build(id, records, state, Thresholds::DEFAULT, Budgets::default())
    }

    #[test]
    fn lists_each_run_once() {
        let (mut records, _) = night();
        records.push(started("new", 700));
        assert_eq!(run_ids(&records), ["old", "new"]);
    }

    #[test]
    fn gathers_a_run_from_its_events_and_the_state() {
        let (records, state) = night();
        let r = report(&records, Some(&state), "new");
        assert_eq!(r.outcome, "breaker_open");
        assert_eq!(r.exit_code, Some(3));
        assert_eq!(r.seconds, 500.0);
        assert_eq!(r.iterations.len(), 2, "only this run's iterations");
        assert_eq!(r.cost_usd, 1.25);
        assert_eq!((r.items_done, r.items_open), (Some(1), Some(2)));
        assert_eq!(r.commits, ["abcdef0123456789"]);
        let first = &r.iterations[0];
        assert_eq!(first.start_offset, Some(10.0));
        assert_eq!(first.readings.len(), 2);
        assert_eq!(first.readings[1].at, 20.0);
        assert_eq!(first.peak_tokens, 145_000);
        assert_eq!(first.handoff.as_deref(), Some(".ralph/handoffs/h1.md"));
        let kinds: Vec<MarkKind> = first.marks.iter().map(|m| m.kind).collect();
        assert_eq!(
            kinds,
            [
                MarkKind::Compaction,
                MarkKind::Nudge,
                MarkKind::Stop,
                MarkKind::Checkpoint
            ]
        );
        assert_eq!(r.iterations[1].cumulative_cost_usd, 1.25);
        assert_eq!(r.iterations[1].item.as_deref(), Some("a"));
    }

    #[test]
    fn metrics_of_the_night() {
        let (records, state) = night();
        let m = report(&records, Some(&state), "new").metrics;
        assert_eq!(m.checkpoints, 1);
        assert_eq!(m.checkpoints_by_level.get("L2"), Some(&1));
        assert_eq!((m.nudges, m.stops), (1, 1));
        assert_eq!((m.compactions, m.context_lost_tokens), (1, 110_000));
        assert_eq!((m.resumes, m.resumes_completed), (1, Some(1)));
        assert_eq!(m.items_checked, 1);
        assert_eq!(m.items_per_iteration, 0.5);
        assert_eq!((m.peak_percent_max, m.peak_percent_median), (86.8, 52.4));
        assert_eq!(
            (m.breaker_trips, m.limit_waits, m.waited_seconds),
            (1, 1, 300)
        );
    }

    #[test]
    fn without_the_state_items_are_unknown() {
        let (records, _) = night();
        let r = report(&records, None, "new");
        assert_eq!(r.items_done, None);
        assert_eq!(r.metrics.resumes_completed, None);
        let old = report(&records, None, "old");
        assert_eq!(old.iterations.len(), 1);
        assert_eq!(old.outcome, "interrupted", "no end recorded");
    }
}
