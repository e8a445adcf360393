//! The run's bookkeeping in [`RunState`]: what an iteration adds to the
//! history, the error fingerprints, the context history and the checkpoint
//! fields, and what the circuit breaker makes of it. The supervisor and
//! this file are the only writers of the state during a run.

use super::Now;
use super::facts::{CheckpointMark, Facts, first_line};
use super::verdict::Verdict;
use crate::checkpoint::{Moment, Saved};
use crate::config::Config;
use crate::context::round1;
use crate::events::Event;
use crate::plan::Plan;
use crate::plan::items;
use crate::rules::breaker::{self, BreakerConfig, Trip};
use crate::state::{
    ContextCheckpoint, HistoryEntry, IterationRecord, RunState, RunStatus, Trigger,
};

/// The meter's part, once the agent is gone.
pub(super) fn meter(state: &mut RunState, facts: &Facts) {
    let Some(m) = &facts.meter else {
        return;
    };
    state.context_window = m.window;
    state.known_windows.clone_from(&m.known_windows);
    // A dead supervisor may have recorded it before the takeover does.
    state
        .context_history
        .retain(|h| h.iteration != facts.number);
    state.context_history.push(HistoryEntry {
        iteration: facts.number,
        peak_percent: round1(m.peak_percent),
        checkpoint: facts.checkpoint.is_some(),
        level: Some(facts.checkpoint.map_or(m.peak_level, |c| c.level)),
        handoff: None,
        peak_tokens: m.peak_tokens,
    });
}

/// A checkpoint was saved: where to resume from.
pub(super) fn checkpoint(
    state: &mut RunState,
    facts: &Facts,
    mark: CheckpointMark,
    moment: &Moment,
    saved: &Saved,
    timestamp: String,
) {
    state.context_checkpoint = ContextCheckpoint {
        active: true,
        level: Some(mark.level),
        percent_at_checkpoint: round1(moment.percent),
        timestamp: Some(timestamp),
        handoff_file: saved.handoff.clone(),
        resume_summary: Some(saved.resume_summary.clone()),
        files_in_progress: saved.files_in_progress.clone(),
        current_todo_item: saved.current_item.clone(),
        progress_on_item: facts
            .text_at_checkpoint
            .as_deref()
            .or(facts.last_text.as_deref())
            .map(first_line),
        trigger: Some(mark.trigger),
        commit: saved.commit.clone(),
        commit_note: saved.commit_note.clone(),
        stashed: crate::checkpoint::stash_names(&saved.stashed),
        left_out: saved.left_out.iter().map(|l| l.path.clone()).collect(),
    };
    if let Some(h) = state.context_history.last_mut() {
        h.checkpoint = true;
        h.level = Some(mark.level);
        h.handoff.clone_from(&saved.handoff);
    }
    if saved.commit.is_some() {
        state.last_commit.clone_from(&saved.commit);
    }
    if saved.handoff.is_some() {
        state.last_handoff.clone_from(&saved.handoff);
    }
}

/// What the iteration adds to the run: cost, plan, breaker, history. The
/// breaker's trip, if it opened, is returned.
#[allow(clippy::too_many_arguments)]
pub(super) fn iteration(
    state: &mut RunState,
    facts: &Facts,
    verdict: &Verdict,
    plan_after: &Plan,
    diff_before: Option<&str>,
    cfg: &BreakerConfig,
    now: &Now,
    events: &mut Vec<Event>,
) -> Option<Trip> {
    state.cost_usd += facts.cost_usd;
    state.todo_items = plan_after.open().map(|i| i.text.clone()).collect();
    state.completed_items = plan_after.done().map(|i| i.text.clone()).collect();
    let was = state.breaker.status;
    let trip = state
        .breaker
        .record(&verdict.breaker, cfg, now.wall.as_second());
    if was == breaker::Status::HalfOpen && state.breaker.status == breaker::Status::Closed {
        events.push(Event::Breaker {
            status: "closed".into(),
            rule: None,
            message: "the trial iteration made progress".into(),
        });
    }
    state.no_change_count = state.breaker.no_progress;
    state.consecutive_failures = state.breaker.consecutive_failures;
    let error_hash = verdict.error.as_deref().map(breaker::fingerprint);
    if let Some(h) = &error_hash {
        state.error_hashes.push(h.clone());
        let excess = state
            .error_hashes
            .len()
            .saturating_sub(breaker::KEEP_ERROR_HASHES);
        state.error_hashes.drain(..excess);
    }
    if let Some(d) = diff_before {
        state.last_diff_hash = Some(d.to_string());
    }
    let commit = verdict
        .checkpoint
        .and_then(|_| state.context_checkpoint.commit.clone());
    let outcome = verdict.outcome.to_string();
    let items = facts.items.as_ref();
    if let Some(o) = items {
        let cut = facts.checkpoint.is_some_and(|c| cut_off(c.trigger));
        items::account(&mut state.items, o, cut, o.split.then_some(facts.number));
    }
    state.history.push(IterationRecord {
        iteration: facts.number,
        started_at: facts.started_at.clone(),
        ended_at: now.wall.to_string(),
        outcome: outcome.clone(),
        exit_code: facts.exit_code,
        progress: verdict.progress,
        cost_usd: facts.cost_usd,
        error: verdict.error.clone(),
        error_hash,
        commit,
        item: items.and_then(|o| o.item.clone()),
        items_checked: items.map(|o| o.checked.clone()).unwrap_or_default(),
        items_done: plan_after.done_count(),
        items_open: plan_after.open_count(),
        item_tokens: items.map_or(0, |o| {
            o.spent
                .iter()
                .filter(|(i, _)| Some(i) == o.item.as_ref())
                .map(|(_, t)| t)
                .sum()
        }),
        split: items.is_some_and(|o| o.split),
    });
    events.push(Event::IterationEnded {
        iteration: facts.number,
        outcome,
        progress: verdict.progress,
        cost_usd: facts.cost_usd,
        peak_percent: state.context_history.last().map_or(0.0, |h| h.peak_percent),
        seconds: facts.seconds,
        error: verdict.error.clone(),
        invalid_lines: facts.invalid_lines,
        skipped_lines: facts.skipped_lines,
    });
    trip
}

/// Whether a checkpoint cut its item off (and counts towards a split): the
/// context filled, or the time ran out, while the item was being worked on.
fn cut_off(trigger: Trigger) -> bool {
    matches!(trigger, Trigger::Context | Trigger::Timeout)
}

/// A run starts (or takes over): what the state says about it. Returns the
/// iteration a dead supervisor left unfinished: its state still says it
/// was at work, and that iteration never reached the history.
/// `max_iterations` is the run-wide limit (`Budgets::iteration_limit`).
pub(super) fn start(
    state: &mut RunState,
    config: &Config,
    plan: &Plan,
    max_iterations: u32,
) -> Option<u32> {
    let dead = (state.status.is_active()
        && state.iteration > 0
        && state.history.last().map(|h| h.iteration) != Some(state.iteration))
    .then_some(state.iteration);
    state.status = RunStatus::Running;
    state.exit_reason = None;
    state.supervisor_pid = Some(std::process::id());
    state.max_iterations = max_iterations;
    state.completion_promise = config.loop_.completion_promise.clone();
    state.task_name = config
        .plan
        .file_stem()
        .map_or("plan".into(), |s| s.to_string_lossy().into_owned());
    state.objective = plan
        .title
        .clone()
        .unwrap_or_else(|| format!("work through {}", config.plan.display()));
    dead
}

/// Everything known about the moment of a checkpoint, from the facts and
/// the context history (its peak when the mark has no percent of its own).
pub(super) fn moment(
    state: &RunState,
    facts: &Facts,
    mark: CheckpointMark,
    reserve: u64,
) -> Moment {
    let entry = state.context_history.last().cloned().unwrap_or_default();
    Moment {
        iteration: facts.number,
        trigger: mark.trigger,
        level: mark.level,
        percent: if mark.percent > 0.0 {
            mark.percent
        } else {
            entry.peak_percent
        },
        tokens: entry.peak_tokens,
        usable: state.context_window.saturating_sub(reserve),
        window: state.context_window,
        reason: facts
            .stop_reason
            .clone()
            .unwrap_or_else(|| format!("{} checkpoint", mark.trigger)),
        last_text: facts.text_at_checkpoint.clone().or(facts.last_text.clone()),
        last_tools: facts.tool_calls.clone(),
        files_touched: facts.files_touched.clone(),
        notes_path: facts.notes_path.clone(),
        unasked: None,
        stash_before: facts.stash_before.clone(),
    }
}

/// The run's last event, from the state it ends with; `report` is the
/// morning report's page (`crate::report`) when it was written.
pub(super) fn ended(
    state: &RunState,
    exit_code: i32,
    reason: String,
    report: Option<String>,
) -> Event {
    Event::RunEnded {
        outcome: state.status.name().to_string(),
        exit_code,
        reason,
        iterations: state.iteration,
        cost_usd: state.cost_usd,
        report,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::IterationRecord;

    #[test]
    fn a_dead_supervisors_unfinished_iteration_is_named() {
        let at = |status: RunStatus, iteration: u32, recorded: &[u32]| RunState {
            status,
            iteration,
            history: recorded
                .iter()
                .map(|&n| IterationRecord {
                    iteration: n,
                    ..IterationRecord::default()
                })
                .collect(),
            ..RunState::default()
        };
        let dead = |mut state: RunState| {
            let found = start(&mut state, &Config::default(), &Plan::default(), 50);
            assert_eq!(state.status, RunStatus::Running);
            found
        };
        assert_eq!(dead(at(RunStatus::Running, 3, &[1, 2])), Some(3));
        assert_eq!(dead(at(RunStatus::Running, 1, &[])), Some(1));
        // Recorded (killed after the history, or between iterations).
        assert_eq!(dead(at(RunStatus::Running, 3, &[1, 2, 3])), None);
        assert_eq!(dead(at(RunStatus::Waiting, 3, &[1, 2, 3])), None);
        // Ended by ralph itself (a failure mid-iteration), or never started.
        assert_eq!(dead(at(RunStatus::Failed, 3, &[1, 2])), None);
        assert_eq!(dead(at(RunStatus::New, 0, &[])), None);
    }
}
