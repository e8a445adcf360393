//! A run's figures gathered from what ralph recorded: the event log (every
//! event has a time; `context` events carry the per-turn readings) and, for
//! the run `.ralph/state.json` holds, its iteration history (plan item,
//! items checked, commits). Pure: records in, [`RunReport`] out.
//!
//! A parallel run (`ralph run --workers N`) is its workers' iterations: the
//! coordinator runs none, and puts every worker's records in the run's log,
//! each naming its worker. A worker's loops number their iterations from 1
//! for each unit, so its rows are keyed by the loop (its run id) and
//! numbered in the order they started over the whole run.

use std::collections::BTreeMap;

use super::model::{
    BreakerChange, Budgets, HumanRow, IterationRow, MarkKind, Metrics, Reading, RunReport, Wait,
    WarningRow,
};
use crate::context::Thresholds;
use crate::formats::RunState;
use crate::formats::{Event, FleetEvent, Record};

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
    build_in(run_id, None, records, state, thresholds, budgets)
}

/// The report of `run_id` from records that are all that run's, with no
/// start of its own among them (a fleet's: `ralph report --fleet`).
pub(crate) fn build_of(
    run_id: &str,
    records: &[Record],
    thresholds: Thresholds,
    budgets: Budgets,
) -> RunReport {
    build_in(run_id, Some(run_id), records, None, thresholds, budgets)
}

fn build_in<'a>(
    run_id: &str,
    mut current: Option<&'a str>,
    records: &'a [Record],
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
        needs_human: Vec::new(),
        verify: Vec::new(),
        story: super::story::Story::of(state),
        metrics: Metrics::default(),
        quota: Vec::new(),
        warnings: Vec::new(),
    };
    let mut rows: Rows = BTreeMap::new();
    let mut starts: BTreeMap<RowKey, jiff::Timestamp> = BTreeMap::new();
    let mut last_ts: Option<String> = None;
    // A parallel run's workers: the loop each runs now, the unit it was
    // given; and each loop's worker and unit.
    let mut loops: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
    let mut owners: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
    let mut seen = crate::formats::Heard::default();
    for r in records.iter().filter(|r| seen.first(r)) {
        if let (None, Event::RunStarted { run_id: id, .. }) = (&r.worker, &r.event) {
            current = Some(id);
        }
        if current != Some(run_id) {
            continue;
        }
        last_ts = Some(r.ts.clone());
        let ts = parse(&r.ts);
        if let Some(w) = r.worker.as_deref() {
            let (run, unit) = loops.entry(w).or_insert((w, ""));
            match &r.event {
                // Its loop's own start and end; the run's are the coordinator's.
                Event::RunStarted { run_id, .. } => {
                    *run = run_id;
                    owners.insert(run_id, (w, unit));
                }
                Event::WorkerStarted { item, .. } => *unit = item,
                Event::Fleet(FleetEvent::Claimed { text, .. }) => *unit = text,
                Event::ItemChecked {
                    iteration, items, ..
                } => row(&mut rows, (Some(run.to_string()), *iteration))
                    .items_checked
                    .extend(items.iter().cloned()),
                _ => {}
            }
        }
        let key = |iteration: u32| -> RowKey {
            let run = r.worker.as_deref().and_then(|w| loops.get(w)).map(|l| l.0);
            (run.map(str::to_string), iteration)
        };
        match &r.event {
            _ if r.worker.is_some()
                && matches!(r.event, Event::RunStarted { .. } | Event::RunEnded { .. }) => {}
            Event::RunStarted {
                plan,
                max_iterations,
                deadline,
                max_cost_usd,
                ..
            } => {
                report.sessions += 1;
                report.started_at.get_or_insert(r.ts.clone());
                report.plan = Some(plan.clone());
                report.budgets.max_iterations.get_or_insert(*max_iterations);
                // The run's own count, over what ralph.toml says now.
                if max_cost_usd.is_some() {
                    report.budgets.max_cost_usd = *max_cost_usd;
                }
                report.budgets.deadline.clone_from(deadline);
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
                    starts.insert(key(*iteration), t);
                }
                let row = row(&mut rows, key(*iteration));
                row.started_at = Some(r.ts.clone());
                row.resumed_from.clone_from(resume_from);
            }
            Event::Context {
                iteration, reading, ..
            } => {
                let (row, at) = row_at(&mut rows, &starts, key(*iteration), ts);
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
                let (row, at) = row_at(&mut rows, &starts, key(*iteration), ts);
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
                let (row, at) = row_at(&mut rows, &starts, key(*iteration), ts);
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
                let (row, at) = row_at(&mut rows, &starts, key(*iteration), ts);
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
                let (row, at) = row_at(&mut rows, &starts, key(*iteration), ts);
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
                session_id,
                ..
            } => {
                let row = row(&mut rows, key(*iteration));
                row.story.session_id.clone_from(session_id);
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
                message: match &r.worker {
                    Some(w) => format!("{w}: {message}"),
                    None => message.clone(),
                },
            }),
            Event::NeedsHuman {
                reason, message, ..
            } => report.needs_human.push(HumanRow {
                at: r.ts.clone(),
                offset: None,
                worker: r.worker.clone(),
                reason: reason.clone(),
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
            Event::Warning { message } => {
                let message = match &r.worker {
                    Some(w) => format!("{w}: {message}"),
                    None => message.clone(),
                };
                match report.warnings.iter_mut().find(|w| w.message == message) {
                    Some(seen) => seen.count += 1,
                    None => report.warnings.push(WarningRow {
                        message,
                        count: 1,
                        at: r.ts.clone(),
                    }),
                }
            }
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
    for ((run, _), row) in &mut rows {
        if let Some((w, unit)) = run.as_deref().and_then(|r| owners.get(r)) {
            row.worker = Some(w.to_string());
            row.item = (!unit.is_empty()).then(|| unit.to_string());
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

/// A row's key: its loop (a worker's run id; `None` for a single loop) and
/// its iteration in that loop.
type RowKey = (Option<String>, u32);
type Rows = BTreeMap<RowKey, IterationRow>;

/// The row of `key`, and `ts` as seconds since the iteration started.
fn row_at<'a>(
    rows: &'a mut Rows,
    starts: &BTreeMap<RowKey, jiff::Timestamp>,
    key: RowKey,
    ts: Option<jiff::Timestamp>,
) -> (&'a mut IterationRow, f64) {
    let at = between(starts.get(&key).copied(), ts).unwrap_or(0.0);
    (row(rows, key), at)
}

fn row(rows: &mut Rows, key: RowKey) -> &mut IterationRow {
    let iteration = key.1;
    rows.entry(key).or_insert_with(|| IterationRow {
        iteration,
        ..IterationRow::default()
    })
}

/// What only the state records: items, commits, peaks; and how the run
/// stands when its log says nothing (yet) about its end.
fn merge_state(report: &mut RunReport, rows: &mut Rows, s: &RunState) {
    for h in &s.history {
        let row = row(rows, (None, h.iteration));
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
        let row = row(rows, (None, h.iteration));
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
fn finish(report: &mut RunReport, rows: Rows) {
    let start = report.started_at.as_deref().and_then(parse);
    report.seconds = report
        .ended_at
        .as_deref()
        .and_then(|e| secs(start, e))
        .unwrap_or(0.0);
    let parallel = rows.keys().any(|(run, _)| run.is_some());
    let mut rows: Vec<IterationRow> = rows.into_values().collect();
    if parallel {
        // The workers' iterations, numbered in the order they started (or
        // ended, when their start was not recorded).
        rows.sort_by_key(|r| {
            r.started_at
                .as_ref()
                .or(r.ended_at.as_ref())
                .and_then(|t| parse(t))
        });
        for (n, row) in (1..).zip(&mut rows) {
            row.iteration = n;
        }
    }
    let mut total = 0.0;
    for mut row in rows {
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
    for h in &mut report.needs_human {
        h.offset = secs(start, &h.at);
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
    use crate::context::{Level, MeterReading};
    use crate::formats::IterationRecord;

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
                deadline: None,
                max_cost_usd: None,
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
                session_id: None,
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
                    window_source: None,
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
                    trigger: crate::formats::Trigger::Context,
                    level: Level::L2,
                    percent: 86.8,
                    notes_path: None,
                },
            ),
            rec(
                150,
                Event::AgentSignalled {
                    iteration: 1,
                    signal: crate::formats::StopStep::Sigint,
                    reason: "grace period over".into(),
                },
            ),
            rec(
                155,
                Event::Checkpoint {
                    iteration: 1,
                    trigger: crate::formats::Trigger::Context,
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

    /// `record` as worker `w`'s (the coordinator tags them so).
    fn of(w: &str, mut record: Record) -> Record {
        record.worker = Some(w.into());
        record
    }

    fn given(w: &str, secs: i64, item: &str) -> Record {
        of(
            w,
            rec(
                secs,
                Event::WorkerStarted {
                    item: item.into(),
                    task: "item".into(),
                    branch: format!("ralph/par/{w}"),
                    worktree: String::new(),
                },
            ),
        )
    }

    #[test]
    fn a_parallel_run_is_its_workers_iterations_numbered_as_they_started() {
        let run_ended = |secs, outcome: &str| {
            rec(
                secs,
                Event::RunEnded {
                    outcome: outcome.into(),
                    exit_code: 0,
                    reason: String::new(),
                    iterations: 3,
                    cost_usd: 0.85,
                    report: None,
                },
            )
        };
        let records = vec![
            started("par", 0),
            given("w1", 1, "alpha"),
            of("w1", started("loop-a", 2)),
            given("w2", 3, "bravo"),
            of("w2", started("loop-b", 4)),
            of("w1", iteration(1, 10, None)),
            of("w2", iteration(1, 11, None)),
            of("w1", context(1, 12, 40_000)),
            of(
                "w2",
                rec(
                    20,
                    Event::ItemChecked {
                        iteration: 1,
                        items: vec!["bravo".into()],
                        next: None,
                        percent: 20.0,
                        next_estimate: None,
                        remaining: 0,
                    },
                ),
            ),
            of("w2", ended(1, 21, "promise", 0.25, 20.0)),
            of("w1", ended(1, 22, "promise", 0.5, 24.0)),
            of("w1", run_ended(23, "completed")),
            of(
                "w1",
                rec(
                    24,
                    Event::Breaker {
                        status: crate::rules::breaker::Status::Open,
                        rule: None,
                        message: "stuck".into(),
                    },
                ),
            ),
            given("w1", 25, "delta"),
            of("w1", started("loop-c", 26)),
            // Its own numbering starts again at 1.
            of("w1", iteration(1, 30, None)),
            of("w1", ended(1, 40, "promise", 0.1, 5.0)),
            run_ended(41, "completed"),
        ];
        let r = report(&records, None, "par");
        assert_eq!(r.sessions, 1, "the workers' loops are not the run's starts");
        assert_eq!(r.outcome, "completed");
        let rows: Vec<(u32, Option<&str>, Option<&str>)> = (r.iterations.iter())
            .map(|i| (i.iteration, i.worker.as_deref(), i.item.as_deref()))
            .collect();
        assert_eq!(
            rows,
            [
                (1, Some("w1"), Some("alpha")),
                (2, Some("w2"), Some("bravo")),
                (3, Some("w1"), Some("delta")),
            ]
        );
        assert_eq!(r.iterations[0].readings.len(), 1);
        assert_eq!(r.iterations[1].items_checked, ["bravo"]);
        assert_eq!(r.iterations[2].start_offset, Some(30.0));
        assert!((r.cost_usd - 0.85).abs() < 1e-9);
        assert!((r.iterations[2].cumulative_cost_usd - 0.85).abs() < 1e-9);
        assert_eq!(r.iterations[2].item_label(), "w1: delta");
        assert_eq!(r.breaker.len(), 1);
        assert_eq!(r.breaker[0].message, "w1: stuck");
        assert_eq!(r.metrics.items_checked, 1);
    }
}
