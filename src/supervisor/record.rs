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
use crate::events::Bus;
use crate::formats::Event;
use crate::formats::{
    ContextCheckpoint, HistoryEntry, IterationRecord, RunState, RunStatus, Trigger, now_rfc3339,
};
use crate::plan::Plan;
use crate::plan::items;
use crate::rules::breaker::{self, BreakerConfig, Trip};

/// A new run's id: the local start time (ids sort by time, as transcripts
/// and snapshot pruning expect), then a few hex digits that tell apart runs
/// started in the same second in other work trees or projects.
pub(crate) fn new_run_id(root: &std::path::Path, repo: Option<&crate::repo::Repo>) -> String {
    use sha2::Digest as _;
    let now = jiff::Zoned::now();
    let mut hasher = sha2::Sha256::new();
    hasher.update(repo.map(crate::repo::Repo::scope_key).unwrap_or_default());
    hasher.update(root.as_os_str().as_encoded_bytes());
    hasher.update(std::process::id().to_le_bytes());
    hasher.update(now.timestamp().as_nanosecond().to_le_bytes());
    let tag: String = hasher.finalize()[..2]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{}-{tag}", now.strftime("%Y%m%d-%H%M%S"))
}

/// What `ralph run` makes of the state it finds.
#[derive(Debug, PartialEq)]
pub(super) enum Start {
    /// Go on with this unfinished run of the same plan.
    Continue(Box<RunState>),
    /// A new run.
    New {
        /// The new run starts from this checkpoint, made outside a run
        /// (`ralph checkpoint`, Claude Code's PreCompact hook): its
        /// `context_checkpoint`, `last_handoff` and `last_commit`.
        resume: Option<Box<RunState>>,
        /// An unfinished run whose supervisor died: its last iteration is
        /// taken over (crash handoff, WIP commit) before the new run starts.
        replaced: Option<Box<RunState>>,
        /// Why the previous run is not continued, for the user.
        notice: Option<String>,
        /// What the previous run learnt of the account, which a new run
        /// inherits: the quota guard's reading, a usage-limit wait not
        /// over yet (`waiting_until`).
        account: Option<(crate::rules::quota::Usage, Option<String>)>,
    },
}

impl Start {
    /// The run this one continues, if it does.
    pub(super) fn continued(&self) -> Option<&RunState> {
        match self {
            Start::Continue(s) => Some(s),
            Start::New { .. } => None,
        }
    }

    /// The run's state (the one continued, or a new one named `run_id`,
    /// resuming from a checkpoint made outside a run if there is one), and
    /// the run it replaces; the notice, if any, is emitted.
    pub(super) fn into_state(self, run_id: &str, bus: &mut Bus) -> (RunState, Option<RunState>) {
        let (resume, replaced, notice, account) = match self {
            Start::Continue(s) => return (*s, None),
            Start::New {
                resume,
                replaced,
                notice,
                account,
            } => (resume, replaced, notice, account),
        };
        if let Some(message) = notice {
            bus.emit(Event::Warning { message });
        }
        let mut state = RunState {
            run_id: run_id.to_string(),
            started_at: now_rfc3339(),
            ..RunState::default()
        };
        if let Some((quota, waiting_until)) = account {
            state.quota = quota;
            state.waiting_until = waiting_until;
        }
        if let Some(from) = resume {
            state.context_checkpoint = from.context_checkpoint;
            state.last_handoff = from.last_handoff;
            state.last_commit = from.last_commit;
        }
        (state, replaced.map(|s| *s))
    }
}

/// Whether to continue the previous run (`previous`, the state on disk)
/// or start a new one: a new one with `--fresh`, after a completed run, when
/// the state names no run yet (only a checkpoint made outside a run, or
/// older ralph's `manual` run), or when the run was on another plan (`plan`,
/// as `ralph.toml` or the command line names it).
pub(super) fn start_from(previous: Option<RunState>, fresh: bool, plan: &str) -> Start {
    let Some(previous) = previous else {
        return Start::New {
            resume: None,
            replaced: None,
            notice: None,
            account: None,
        };
    };
    let account = Some((previous.quota.clone(), previous.waiting_until.clone()));
    // What an older ralph wrote for a checkpoint before any run.
    let no_run = previous.run_id.is_empty()
        || (previous.run_id == "manual" && previous.started_at.is_empty());
    // SessionStart's rule: a completed run's own checkpoint is history.
    let carried =
        (!fresh && crate::checkpoint::to_resume(&previous).is_ok()).then(|| previous.clone());
    if no_run || previous.is_finished() {
        return Start::New {
            resume: carried.map(Box::new),
            replaced: None,
            notice: None,
            account,
        };
    }
    let other_plan = match previous.plan.as_str() {
        "" => !previous.task_name.is_empty() && previous.task_name != plan_stem(plan),
        was => was != plan,
    };
    if !fresh && !other_plan {
        return Start::Continue(Box::new(previous));
    }
    let notice = other_plan.then(|| {
        format!(
            "the unfinished run {} was on {}, not {plan}: a new run starts on {plan} (the old run's state is kept in .ralph/runs/{}/state.json)",
            previous.run_id,
            previous_plan(&previous),
            previous.run_id,
        )
    });
    let died = previous.status.is_active();
    Start::New {
        resume: None,
        replaced: died.then(|| Box::new(previous)),
        notice,
        account,
    }
}

fn plan_stem(plan: &str) -> String {
    std::path::Path::new(plan)
        .file_stem()
        .map_or_else(|| plan.to_string(), |s| s.to_string_lossy().into_owned())
}

fn previous_plan(state: &RunState) -> String {
    match state.plan.as_str() {
        "" => format!("a plan named {}", state.task_name),
        plan => plan.to_string(),
    }
}

/// The iteration a dead supervisor left unfinished: started, not recorded.
pub(super) fn dead_iteration(state: &RunState) -> Option<u32> {
    (state.status.is_active()
        && state.iteration > 0
        && state.history.last().map(|h| h.iteration) != Some(state.iteration))
    .then_some(state.iteration)
}

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
pub(super) fn checkpoint(state: &mut RunState, moment: &Moment, saved: &Saved, timestamp: String) {
    state
        .commits
        .count(moment.iteration, saved.commit_outcome());
    if let Some(h) = state.context_history.last_mut() {
        h.checkpoint = true;
        h.level = Some(moment.level);
        h.handoff.clone_from(&saved.handoff);
    }
    resume_point(state, moment, saved, timestamp);
}

/// Where the next iteration resumes after the checkpoint `saved` made at
/// `moment` (by the loop, or outside a run: `ralph checkpoint`, the
/// PreCompact hook): the active `context_checkpoint`, the last handoff and
/// commit.
fn resume_point(state: &mut RunState, moment: &Moment, saved: &Saved, timestamp: String) {
    state.context_checkpoint = ContextCheckpoint {
        active: true,
        level: Some(moment.level),
        percent_at_checkpoint: round1(moment.percent),
        timestamp: Some(timestamp),
        handoff_file: saved.handoff.clone(),
        resume_summary: Some(saved.resume_summary.clone()),
        files_in_progress: saved.files_in_progress.clone(),
        // A finished item is not resumed: the next prompt takes the first
        // open one, and its last words are not progress on that one.
        current_todo_item: saved.current_item.clone().filter(|_| !saved.item_done),
        progress_on_item: (moment.last_text.as_deref())
            .filter(|_| !saved.item_done)
            .map(first_line),
        trigger: Some(moment.trigger),
        commit: saved.commit.clone(),
        commit_note: saved.commit_note.clone(),
        stashed: crate::checkpoint::stash_names(&saved.stashed),
        left_out: saved.left_out.iter().map(|l| l.path.clone()).collect(),
    };
    if saved.commit.is_some() {
        state.last_commit.clone_from(&saved.commit);
    }
    if saved.handoff.is_some() {
        state.last_handoff.clone_from(&saved.handoff);
    }
}

/// A checkpoint with no supervisor running (`ralph checkpoint` without a
/// run, Claude Code's PreCompact hook): perform it and record its handoff
/// and commit in the state, as the point the next `ralph run` resumes
/// from. Before any run the state names no run: the next `ralph run`
/// starts one (and resumes from here), none is invented.
pub(crate) fn checkpoint_outside_a_run(
    root: &std::path::Path,
    moment: impl FnOnce(&Config, &RunState) -> Moment,
) -> crate::error::Result<Saved> {
    let config = Config::load(root)?;
    crate::text::secrets::remember(&config.agent.env);
    if let Ok(text) = crate::project::Project::at(root).plan_text(&config) {
        crate::text::secrets::note_plan(&text);
    }
    let templates = crate::prompt::Templates::load(root)?;
    let layout = crate::formats::Layout::new(root);
    layout.ensure()?;
    let mut state = RunState::load(&layout.state())?.unwrap_or_default();
    let moment = moment(&config, &state);
    let saved = crate::checkpoint::perform(root, &config, &templates, &moment);
    if saved.handoff.is_some() {
        resume_point(&mut state, &moment, &saved, now_rfc3339());
    } else if saved.commit.is_some() {
        state.last_commit.clone_from(&saved.commit);
    }
    state.save(&layout.state())?;
    Ok(saved)
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
    state.quota = facts.quota.clone();
    state.todo_items = plan_after.open().map(|i| i.text.clone()).collect();
    state.completed_items = plan_after.done().map(|i| i.text.clone()).collect();
    let was = state.breaker.status;
    let trip = state
        .breaker
        .record(&verdict.breaker, cfg, now.wall.as_second());
    if was == breaker::Status::HalfOpen && state.breaker.status == breaker::Status::Closed {
        events.push(Event::Breaker {
            status: breaker::Status::Closed,
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
    let outcome = verdict.outcome.clone();
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
        session_id: facts.session_id.clone(),
        head: None,
        tree_start: None,
        tree_end: None,
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
        not_metered: facts.meter.as_ref().is_some_and(|m| m.not_metered),
        session_id: facts.session_id.clone(),
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
    let dead = dead_iteration(state);
    state.status = RunStatus::Running;
    state.exit_reason = None;
    state.ended_at = None;
    state.supervisor_pid = Some(std::process::id());
    state.max_iterations = max_iterations;
    state.plan = config.plan.display().to_string();
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
        usable: crate::context::usable_window(state.context_window, reserve),
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
        item: facts.items.as_ref().and_then(|o| o.end.clone()),
        item_done: facts.items.as_ref().is_some_and(|o| o.end_done),
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
        outcome: state.status.clone(),
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
    use crate::formats::IterationRecord;

    #[test]
    fn a_run_continues_only_its_own_unfinished_plan() {
        let state = |run_id: &str, status: RunStatus, plan: &str| RunState {
            run_id: run_id.into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            status,
            plan: plan.into(),
            task_name: "fix_plan".into(),
            ..RunState::default()
        };
        let continues = |s: RunState, fresh: bool, plan: &str| {
            matches!(start_from(Some(s), fresh, plan), Start::Continue(_))
        };
        let unfinished = state("r1", RunStatus::IterationLimit, "fix_plan.md");
        assert!(continues(unfinished.clone(), false, "fix_plan.md"));
        assert!(!continues(unfinished.clone(), true, "fix_plan.md"));
        assert!(!continues(unfinished.clone(), false, "other.md"));
        // A state of an older ralph (no plan recorded): the plan's name tells.
        let older = state("r1", RunStatus::IterationLimit, "");
        assert!(continues(older.clone(), false, "fix_plan.md"));
        assert!(!continues(older, false, "docs/other.md"));
        assert!(!continues(
            state("r1", RunStatus::Completed, "fix_plan.md"),
            false,
            "fix_plan.md"
        ));
        // Another plan: a new run, said why; nothing to take over.
        let mut unfinished = unfinished;
        let reading = crate::rules::quota::Reading {
            percent: 92.0,
            resets_at: Some(1_795_000_000),
        };
        unfinished.quota.five_hour = Some(reading);
        unfinished.waiting_until = Some("2026-11-27T03:20:00Z".into());
        let Start::New {
            replaced,
            notice,
            resume,
            account,
        } = start_from(Some(unfinished), true, "other.md")
        else {
            panic!()
        };
        assert!(replaced.is_none() && resume.is_none());
        // The account's readings go on (issue 35: `--fresh` paid a session).
        let (quota, waiting_until) = account.unwrap();
        assert_eq!(quota.five_hour, Some(reading));
        assert_eq!(waiting_until.as_deref(), Some("2026-11-27T03:20:00Z"));
        assert!(notice.unwrap().contains("was on fix_plan.md, not other.md"));
        // A dead supervisor's run is taken over before --fresh starts anew.
        let died = state("r1", RunStatus::Running, "fix_plan.md");
        let Start::New {
            replaced, notice, ..
        } = start_from(Some(died), true, "fix_plan.md")
        else {
            panic!()
        };
        assert_eq!(replaced.unwrap().run_id, "r1");
        assert!(notice.is_none());
    }

    #[test]
    fn a_checkpoint_before_any_run_is_resumed_by_a_new_run() {
        let mut only_checkpoint = RunState::default();
        only_checkpoint.context_checkpoint.active = true;
        only_checkpoint.last_handoff = Some(".ralph/handoffs/h.md".into());
        let mut older = only_checkpoint.clone();
        older.run_id = "manual".into();
        for s in [only_checkpoint, older] {
            let Start::New {
                resume, replaced, ..
            } = start_from(Some(s.clone()), false, "p.md")
            else {
                panic!("{s:?} is no run to continue")
            };
            assert_eq!(resume.unwrap().last_handoff, s.last_handoff);
            assert!(replaced.is_none());
            let Start::New { resume, .. } = start_from(Some(s), true, "p.md") else {
                panic!()
            };
            assert!(resume.is_none(), "--fresh starts from nothing");
        }
    }

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
