//! `ralph status`: where the run recorded in `.ralph/state.json` stands
//! (running, waiting, or how it ended), its iteration, time, cost, breaker,
//! and its last handoff and commit.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::Report;
use crate::config::Config;
use crate::error::Result;
use crate::formats::{IterationRecord, Layout, RunState, RunStatus};
use crate::project::Project;
use crate::rules::breaker::{BreakerState, Status as BreakerStatus};
use crate::text::format_duration;

/// The run's status, from the state file and the lock together.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Phase {
    /// `none`, `new`, `running`, `waiting`, `completed`, `breaker_open`,
    /// `iteration_limit`, `budget_spent`, `stopped`, `interrupted`.
    pub(crate) status: String,
    /// The pid of the supervisor holding `.ralph/lock`, if one does.
    pub(crate) supervisor_pid: Option<i32>,
}

impl Phase {
    /// The lock, then the state. In this order a run that ends in between
    /// shows as still running (and as ended at the next look), never as
    /// interrupted. A state that says running while no supervisor holds the
    /// lock is a run whose supervisor died: interrupted, and `ralph run`
    /// takes it over.
    pub(crate) fn load(layout: &Layout) -> Result<(Phase, Option<RunState>)> {
        let supervisor_pid = crate::project::running_supervisor(layout).map(|l| l.pid);
        let state = RunState::load(&layout.state())?;
        let status = match (&state, supervisor_pid) {
            (None, None) => "none",
            (Some(s), Some(_)) if s.status == RunStatus::Waiting => "waiting",
            (_, Some(_)) => "running",
            (Some(s), None) if s.status.is_active() => "interrupted",
            (Some(s), None) => s.status.name(),
        };
        let phase = Phase {
            status: status.to_string(),
            supervisor_pid,
        };
        Ok((phase, state))
    }

    /// A supervisor is at work (an iteration, or waiting between them).
    pub(crate) fn is_live(&self) -> bool {
        self.supervisor_pid.is_some()
    }

    /// One line for people: what the run is doing or why it stopped.
    pub(crate) fn headline(
        &self,
        waiting_until: Option<&str>,
        exit_reason: Option<&str>,
    ) -> String {
        let why = exit_reason.map(|r| format!(": {r}")).unwrap_or_default();
        match (self.status.as_str(), self.supervisor_pid) {
            ("none", _) => "no ralph run here yet (start one with `ralph run`)".into(),
            ("waiting", Some(pid)) => format!(
                "waiting for the usage limit to reset{} (supervisor pid {pid})",
                waiting_until
                    .map(|t| format!(" until {}", super::local_time(t)))
                    .unwrap_or_default()
            ),
            (_, Some(pid)) => format!("running (supervisor pid {pid})"),
            ("interrupted", None) if exit_reason.is_none() => {
                "interrupted: the supervisor is gone; `ralph run` continues this run".into()
            }
            ("breaker_open", None) => format!("stopped by the circuit breaker{why}"),
            (status, None) => format!("{}{why}", status.replace('_', " ")),
        }
    }
}

/// The breaker as `ralph status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct BreakerView {
    /// `closed`, `half-open` or `open`.
    pub(crate) status: &'static str,
    pub(crate) rule: Option<String>,
    pub(crate) message: Option<String>,
    pub(crate) opened_at: Option<String>,
    /// When an open breaker allows one trial iteration (needs ralph.toml's
    /// `breaker.cooldown`; null when unknown).
    pub(crate) cooldown_ends_at: Option<String>,
}

impl BreakerView {
    fn new(b: &BreakerState, config: Option<&Config>) -> BreakerView {
        let opened = b
            .opened_at
            .and_then(|s| jiff::Timestamp::from_second(s).ok());
        let cooldown_ends_at = match (b.status, opened, config) {
            (BreakerStatus::Open, Some(at), Some(c)) => {
                jiff::SignedDuration::try_from(c.breaker.cooldown.0)
                    .ok()
                    .and_then(|d| at.checked_add(d).ok())
                    .map(|t| t.to_string())
            }
            _ => None,
        };
        BreakerView {
            status: b.status.name(),
            rule: b.rule.clone(),
            message: b.message.clone(),
            opened_at: opened.map(|t| t.to_string()),
            cooldown_ends_at,
        }
    }
}

/// Everything `ralph status` reports (`--json`: this object).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct StatusReport {
    #[serde(flatten)]
    pub(crate) phase: Phase,
    pub(crate) run_id: Option<String>,
    pub(crate) objective: Option<String>,
    /// The latest iteration started (0 before the first).
    pub(crate) iteration: u32,
    pub(crate) max_iterations: u32,
    pub(crate) started_at: Option<String>,
    pub(crate) updated_at: Option<String>,
    /// From the start of the run to now (live) or to its last update.
    pub(crate) elapsed_secs: Option<u64>,
    pub(crate) cost_usd: f64,
    pub(crate) waiting_until: Option<String>,
    pub(crate) breaker: BreakerView,
    pub(crate) exit_reason: Option<String>,
    pub(crate) last_iteration: Option<IterationRecord>,
    pub(crate) last_handoff: Option<String>,
    pub(crate) last_commit: Option<String>,
    /// Plan items open and done, as of the end of the last iteration.
    pub(crate) plan_open: usize,
    pub(crate) plan_done: usize,
    /// The subscription's windows as the agent last reported them (the
    /// quota guard), those not reset yet.
    pub(crate) quota: Vec<crate::rules::quota::WindowView>,
    /// The latest run of the `[verify]` commands, if any ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) verify: Option<VerifyView>,
    /// A parallel run (`ralph run --workers N`): every worker and every
    /// branch not merged yet, with its commits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) workers: Option<crate::report::WorkersView>,
    /// The figures above are the parallel run's (`workers`), not a loop's.
    #[serde(skip)]
    pub(crate) parallel: bool,
}

/// The latest verification as `ralph status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct VerifyView {
    pub(crate) iteration: u32,
    /// `completion`, `item` or `checkpoint`.
    pub(crate) when: &'static str,
    pub(crate) passed: bool,
    /// "verify passed (2 commands)", "verify failed: `make` exited with 2".
    pub(crate) summary: String,
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

impl StatusReport {
    pub(crate) fn load(root: &Path) -> Result<StatusReport> {
        let (phase, state) = Phase::load(&Layout::new(root))?;
        let s = state.unwrap_or_default();
        // The cooldown is the only thing read from ralph.toml: a broken
        // config must not hide the run (`ralph doctor` reports it).
        let config = Config::load(root).ok();
        let started = s.started_at.parse::<jiff::Timestamp>().ok();
        let end = if phase.is_live() {
            Some(jiff::Timestamp::now())
        } else {
            s.updated_at.parse::<jiff::Timestamp>().ok()
        };
        let elapsed_secs = started
            .zip(end)
            .map(|(a, b)| b.duration_since(a).as_secs().max(0) as u64);
        Ok(StatusReport {
            phase,
            run_id: non_empty(&s.run_id),
            objective: non_empty(&s.objective),
            iteration: s.iteration,
            max_iterations: s.max_iterations,
            started_at: non_empty(&s.started_at),
            updated_at: non_empty(&s.updated_at),
            elapsed_secs,
            cost_usd: s.cost_usd,
            waiting_until: s.waiting_until.clone(),
            breaker: BreakerView::new(&s.breaker, config.as_ref()),
            exit_reason: s.exit_reason.clone(),
            last_iteration: s.history.last().cloned(),
            last_handoff: s.last_handoff.clone(),
            last_commit: s.last_commit.clone(),
            plan_open: s.todo_items.len(),
            plan_done: s.completed_items.len(),
            quota: crate::rules::quota::WindowView::all(
                &s.quota,
                config.as_ref().map(|c| &c.quota),
                jiff::Timestamp::now().as_second(),
            ),
            verify: s.verify.as_ref().map(|v| VerifyView {
                iteration: v.iteration,
                when: v.when.name(),
                passed: v.passed,
                summary: v.summary(),
            }),
            workers: crate::report::WorkersView::load(root),
            parallel: false,
        }
        .of_the_workers(config.as_ref()))
    }

    /// A parallel run's figures are its workers', not the coordinator's:
    /// it keeps no state of its own, and `.ralph/state.json` may be an
    /// earlier single run's. Its iterations and cost are those of every
    /// worker (ended, as the shared budgets count them), its limit
    /// `loop.max_iterations` over all of them.
    fn of_the_workers(mut self, config: Option<&Config>) -> StatusReport {
        let Some(w) = &self.workers else { return self };
        // An earlier parallel run's record is not this run's.
        let time = |t: &str| t.parse::<jiff::Timestamp>().ok();
        if self.started_at.as_deref().and_then(time) > time(&w.started_at) {
            return self;
        }
        self.parallel = true;
        if self.run_id.as_ref().is_some_and(|id| *id != w.run_id) || self.phase.is_live() {
            let ledger_start = w.started_at.parse::<jiff::Timestamp>().ok();
            let end = if self.phase.is_live() {
                Some(jiff::Timestamp::now())
            } else {
                None
            };
            self.run_id = Some(w.run_id.clone());
            self.started_at = Some(w.started_at.clone());
            self.elapsed_secs = ledger_start
                .zip(end)
                .map(|(a, b)| b.duration_since(a).as_secs().max(0) as u64);
            self.last_iteration = None;
            self.last_handoff = None;
            self.last_commit = None;
            self.exit_reason = None;
        }
        self.iteration = w.iterations;
        self.cost_usd = w.cost_usd;
        self.max_iterations = config.map_or(0, |c| c.loop_.max_iterations);
        self
    }
}

impl Report for StatusReport {
    fn human(&self) -> String {
        let mut out = String::new();
        let headline = match &self.workers {
            // A parallel run's coordinator keeps no state.json of its own.
            Some(w) if self.phase.status == "none" => format!(
                "parallel run {}",
                w.outcome
                    .as_deref()
                    .unwrap_or("interrupted")
                    .replace('_', " ")
            ),
            _ => self
                .phase
                .headline(self.waiting_until.as_deref(), self.exit_reason.as_deref()),
        };
        let _ = writeln!(out, "status     {headline}");
        if let Some(w) = &self.workers {
            out.push_str(&w.human());
        }
        if self.phase.status == "none" {
            return out;
        }
        let mut row = |key: &str, value: String| {
            let _ = writeln!(out, "{key:<10} {value}");
        };
        if let Some(id) = &self.run_id {
            row(
                "run",
                match &self.objective {
                    Some(o) => format!("{id}: {o}"),
                    None => id.clone(),
                },
            );
        }
        let parallel = self.parallel;
        row(
            if parallel { "iterations" } else { "iteration" },
            if parallel {
                format!(
                    "{} ended, over every worker{}",
                    self.iteration,
                    if self.max_iterations > 0 {
                        format!(" (at most {})", self.max_iterations)
                    } else {
                        String::new()
                    }
                )
            } else if self.max_iterations > 0 {
                format!("{} of at most {}", self.iteration, self.max_iterations)
            } else {
                self.iteration.to_string()
            },
        );
        if let Some(secs) = self.elapsed_secs {
            row(
                "elapsed",
                format!(
                    "{} since {}",
                    format_duration(Duration::from_secs(secs)),
                    super::local_time(self.started_at.as_deref().unwrap_or_default())
                ),
            );
        }
        row("cost", format!("${:.2}", self.cost_usd));
        // The rest is one loop's: each worker's is in its worktree.
        if parallel {
            return out;
        }
        if self.plan_open + self.plan_done > 0 {
            row(
                "plan",
                format!("{} done, {} open", self.plan_done, self.plan_open),
            );
        }
        for w in &self.quota {
            row("quota", w.line(super::local_time));
        }
        let b = &self.breaker;
        row(
            "breaker",
            format!(
                "{}{}{}{}",
                b.status,
                b.rule
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default(),
                b.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default(),
                b.cooldown_ends_at
                    .as_deref()
                    .map(|t| format!(
                        "; a trial iteration may start after {}",
                        super::local_time(t)
                    ))
                    .unwrap_or_default()
            ),
        );
        if let Some(it) = &self.last_iteration {
            row(
                "last iter",
                format!(
                    "{}: {}, {}, ${:.2}{}",
                    it.iteration,
                    it.outcome,
                    if it.progress {
                        "progress"
                    } else {
                        "no progress"
                    },
                    it.cost_usd,
                    it.error
                        .as_deref()
                        .map(|e| format!(", error: {e}"))
                        .unwrap_or_default()
                ),
            );
        }
        if let Some(v) = &self.verify {
            row(
                "verify",
                format!(
                    "{} after iteration {} ({})",
                    v.summary.trim_start_matches("verify "),
                    v.iteration,
                    v.when
                ),
            );
        }
        row(
            "handoff",
            self.last_handoff.clone().unwrap_or_else(|| "none".into()),
        );
        row(
            "commit",
            self.last_commit
                .as_deref()
                .map_or("none".into(), |c| c[..c.len().min(10)].to_string()),
        );
        out
    }
}

/// `ralph status [--json]`: always exit 0 (it reports; it judges nothing).
pub(crate) fn status(project: &Project, json: bool) -> Result<i32> {
    let root = project.root();
    let report = StatusReport::load(root)?;
    super::print(&report.render(json))?;
    Ok(0)
}

impl Report for crate::workers::fleet::FleetStatus {
    fn human(&self) -> String {
        crate::workers::fleet::FleetStatus::human(self)
    }
}

/// `ralph status --fleet NAME`: the fleet as its remote has it (docs/fleet.md).
pub(crate) fn fleet_status(
    project: &Project,
    remote: &str,
    fleet: &str,
    json: bool,
) -> Result<i32> {
    let config = project.config()?;
    let report = crate::workers::fleet::status(
        project.root(),
        remote,
        fleet,
        config.fleet.lease.0,
        config.fleet.clock_skew.0,
    )?;
    super::print(&report.render(json))?;
    Ok(0)
}
