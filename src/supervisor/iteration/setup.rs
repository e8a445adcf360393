//! What one iteration may do, fixed when it starts: its limits and the
//! meter it starts with.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Config;
use crate::context::ContextMeter;
use crate::formats::RunState;
use crate::supervisor::budget::Budgets;

/// What one iteration may do, fixed when it starts.
#[derive(Debug, Clone)]
pub(in crate::supervisor) struct IterationLimits {
    pub(crate) number: u32,
    pub(crate) root: PathBuf,
    pub(crate) iteration_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) grace: Duration,
    /// Ask the agent for handoff notes before stopping it.
    pub(crate) agent_handoff: bool,
    pub(crate) promise: String,
    pub(crate) budgets: Budgets,
    /// The run's cost before this iteration.
    pub(crate) cost_before: f64,
    /// The subscription's usage last reported (the quota guard).
    pub(crate) quota_before: crate::rules::quota::Usage,
    /// For reset times written as local times.
    pub(crate) tz: jiff::tz::TimeZone,
    /// `git.snapshot_interval`; `None`: no snapshots.
    pub(crate) snapshot_every: Option<Duration>,
}

impl IterationLimits {
    pub(in crate::supervisor) fn new(
        config: &Config,
        number: u32,
        root: &Path,
        budgets: &Budgets,
        state: &RunState,
        tz: jiff::tz::TimeZone,
    ) -> IterationLimits {
        IterationLimits {
            number,
            root: root.to_path_buf(),
            iteration_timeout: config.loop_.iteration_timeout.0,
            idle_timeout: config.loop_.idle_timeout.0,
            grace: config.context.grace.0,
            // Only an agent that takes a message mid-session can be asked.
            agent_handoff: config.context.agent_handoff && config.agent.kind.capabilities().message,
            promise: config.loop_.completion_promise.clone(),
            budgets: budgets.clone(),
            cost_before: state.cost_usd,
            quota_before: state.quota.clone(),
            tz,
            snapshot_every: Some(config.git.snapshot_interval.0).filter(|d| !d.is_zero()),
        }
    }
}

/// The meter for the next agent: the configured window, the kind's own
/// before it reports one, what earlier results of the run told about the
/// model's, and what earlier runs did (`state.remembered_windows`).
/// The one window choice: the live meter, the prompt's estimates and
/// `ralph context --estimate` all start from it.
pub(crate) fn meter(config: &Config, state: &RunState) -> ContextMeter {
    let per_process = !config.agent.kind.capabilities().metered_live();
    let mut meter = config
        .meter()
        .with_window_before_report(config.agent.kind.window_before_report())
        .with_known_windows(&state.known_windows)
        .with_remembered_windows(&state.remembered_windows)
        .not_metered_live(per_process);
    if let Some(m) = &config.agent.model {
        meter.set_model(m);
    }
    meter
}
