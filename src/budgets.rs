//! The run's budgets — `loop.max_iterations`, `max_duration` and
//! `max_cost_usd` — under one rule: each counts from the start of the run
//! (a `ralph run` that continues a run continues its budgets), or, with
//! `ralph run --budget-per-invocation`, each from the start of this
//! invocation. The iteration limit is kept as a run-wide number, so that
//! `ralph status` says "iteration N of at most M" in one sense only.

use std::time::Duration;

use crate::config::{LoopConfig, format_duration};
use crate::state::RunState;

#[derive(Debug, Clone)]
pub struct Budgets {
    max_iterations: u32,
    max_duration: Option<Duration>,
    max_cost_usd: Option<f64>,
    /// What was spent before the counting starts: nothing for a run, the
    /// run's figures so far for an invocation.
    base_iteration: u32,
    base_cost: f64,
    since: jiff::Timestamp,
}

impl Budgets {
    pub fn new(l: &LoopConfig, state: &RunState, per_invocation: bool) -> Budgets {
        let now = jiff::Timestamp::now();
        let (base_iteration, base_cost, since) = if per_invocation {
            (state.iteration, state.cost_usd, now)
        } else {
            let started = state.started_at.parse().unwrap_or(now);
            (0, 0.0, started)
        };
        Budgets {
            max_iterations: l.max_iterations,
            max_duration: l.max_duration.map(|d| d.0),
            max_cost_usd: l.max_cost_usd,
            base_iteration,
            base_cost,
            since,
        }
    }

    /// The number of the last iteration the budget allows.
    pub fn iteration_limit(&self) -> u32 {
        self.base_iteration.saturating_add(self.max_iterations)
    }

    /// Whether no other iteration may start after `iteration`.
    pub fn iterations_spent(&self, iteration: u32) -> Option<String> {
        (iteration >= self.iteration_limit()).then(|| {
            format!(
                "iteration limit reached: {} iterations (loop.max_iterations)",
                iteration - self.base_iteration.min(iteration)
            )
        })
    }

    pub fn cost_spent(&self, cost_usd: f64) -> Option<String> {
        let max = self.max_cost_usd?;
        let spent = cost_usd - self.base_cost;
        (spent >= max)
            .then(|| format!("cost budget spent: ${spent:.2} of loop.max_cost_usd ${max:.2}"))
    }

    /// Whether `loop.max_duration` is reached `within` from now.
    pub fn duration_spent_within(&self, within: Duration) -> Option<String> {
        let max = self.max_duration?;
        let elapsed = jiff::Timestamp::now()
            .duration_since(self.since)
            .try_into()
            .unwrap_or(Duration::ZERO);
        (elapsed + within >= max)
            .then(|| format!("loop.max_duration {} reached", format_duration(max)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Span;

    fn state(iteration: u32, cost: f64, started_secs_ago: i64) -> RunState {
        RunState {
            iteration,
            cost_usd: cost,
            started_at: (jiff::Timestamp::now()
                - jiff::SignedDuration::from_secs(started_secs_ago))
            .to_string(),
            ..RunState::default()
        }
    }

    fn limits() -> LoopConfig {
        LoopConfig {
            max_iterations: 2,
            max_duration: Some(Span::secs(3600)),
            max_cost_usd: Some(1.0),
            ..LoopConfig::default()
        }
    }

    #[test]
    fn every_budget_counts_from_the_start_of_the_run() {
        // A run continued after 2 iterations, $0.99 and 2 hours.
        let b = Budgets::new(&limits(), &state(2, 0.99, 7200), false);
        assert_eq!(b.iteration_limit(), 2);
        assert!(b.iterations_spent(2).is_some());
        assert!(b.cost_spent(0.99).is_none());
        assert!(b.cost_spent(1.0).is_some());
        assert!(b.duration_spent_within(Duration::ZERO).is_some());
    }

    #[test]
    fn or_every_budget_from_the_start_of_this_invocation() {
        let b = Budgets::new(&limits(), &state(2, 0.99, 7200), true);
        assert_eq!(b.iteration_limit(), 4, "run-wide: iteration 4 of at most 4");
        assert!(b.iterations_spent(3).is_none());
        assert_eq!(
            b.iterations_spent(4).unwrap(),
            "iteration limit reached: 2 iterations (loop.max_iterations)"
        );
        assert!(b.cost_spent(1.98).is_none());
        assert!(b.cost_spent(1.99).is_some());
        assert!(b.duration_spent_within(Duration::ZERO).is_none());
        assert!(b.duration_spent_within(Duration::from_secs(3600)).is_some());
    }
}
