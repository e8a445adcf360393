//! Shared budgets granted before a session starts (docs/workers.md,
//! "Budgets"): a worker's loop starts a session only once the coordinator
//! has granted it one, and the coordinator grants one only while the
//! shared budget still covers it.
//!
//! Theory: `loop.max_iterations`, `max_cost_usd` and `max_duration` count
//! across workers. Counted after the fact, each worker's loop had already
//! started its next session when the coordinator heard the last one end (a
//! budget of 4 iterations paid 7 or 8). So the decision comes first
//! ([`decide`], pure, time passed in): a session may start while the
//! iterations ended plus the sessions running stay under the limit, and
//! while the cost spent plus what the running sessions are expected to
//! cost (the average so far) stays under the cost budget. What a running
//! session costs is known only at its end: the overshoot is at most the
//! sessions already running when the budget was spent.
//!
//! The grant travels as a file in the worker's own `.ralph/`
//! (`formats::Grant`):
//! the number of sessions its loop (this process) may start. A loop with no
//! such file (a worker started by hand) is not held.

use std::time::Duration;

/// The shared limits (`[loop]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Limits {
    pub(crate) max_iterations: u32,
    pub(crate) max_cost: Option<f64>,
    pub(crate) max_duration: Option<Duration>,
}

/// What the run has spent where its budgets count from, and what runs now.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Spent {
    /// Sessions ended (their `iteration_ended` heard).
    pub(crate) iterations: u32,
    pub(crate) cost: f64,
    pub(crate) elapsed: Duration,
    /// Sessions granted and not ended yet.
    pub(crate) running: u32,
}

/// Whether one more session may start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Decision {
    Go,
    /// The budget that does not cover it.
    Spent(Budget),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Budget {
    Iterations,
    Cost,
    Duration,
}

/// One more session, decided before it starts.
pub(crate) fn decide(limits: &Limits, spent: &Spent) -> Decision {
    if spent.iterations + spent.running >= limits.max_iterations {
        return Decision::Spent(Budget::Iterations);
    }
    if let Some(max) = limits.max_cost {
        let average = match spent.iterations {
            0 => 0.0,
            n => spent.cost / f64::from(n),
        };
        if spent.cost + average * f64::from(spent.running) >= max {
            return Decision::Spent(Budget::Cost);
        }
    }
    if limits.max_duration.is_some_and(|d| spent.elapsed >= d) {
        return Decision::Spent(Budget::Duration);
    }
    Decision::Go
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECS: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_session_starts_only_while_the_shared_budget_covers_it() {
        let limits = Limits {
            max_iterations: 4,
            max_cost: Some(2.5),
            max_duration: Some(SECS(600)),
        };
        let spent = |iterations, cost, running, elapsed| Spent {
            iterations,
            cost,
            elapsed: SECS(elapsed),
            running,
        };
        use Budget::*;
        use Decision::Go;
        let table = [
            // Nothing spent: the first workers start.
            (spent(0, 0.0, 0, 0), Go),
            (spent(0, 0.0, 3, 0), Go),
            // Ended and running count together against max_iterations.
            (spent(1, 0.1, 2, 0), Go),
            (spent(1, 0.1, 3, 0), Decision::Spent(Iterations)),
            (spent(4, 0.1, 0, 0), Decision::Spent(Iterations)),
            // Cost: what the running sessions will cost at the average so far.
            (spent(1, 1.0, 1, 0), Go),
            (spent(1, 1.0, 2, 0), Decision::Spent(Cost)),
            (spent(2, 2.0, 0, 0), Go),
            (spent(2, 2.5, 0, 0), Decision::Spent(Cost)),
            // Time.
            (spent(1, 0.1, 0, 600), Decision::Spent(Duration)),
            (spent(1, 0.1, 0, 599), Go),
        ];
        for (spent, decision) in table {
            assert_eq!(decide(&limits, &spent), decision, "{spent:?}");
        }
    }

    #[test]
    fn without_cost_or_time_limits_only_iterations_count() {
        let limits = Limits {
            max_iterations: 50,
            max_cost: None,
            max_duration: None,
        };
        let spent = Spent {
            iterations: 10,
            cost: 1e9,
            elapsed: SECS(1 << 30),
            running: 39,
        };
        assert_eq!(decide(&limits, &spent), Decision::Go);
        let full = Spent {
            running: 40,
            ..spent
        };
        assert_eq!(decide(&limits, &full), Decision::Spent(Budget::Iterations));
    }
}
