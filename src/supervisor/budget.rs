//! The run's budgets: iterations, cost, duration and `--deadline`, and
//! when one of them is spent. One rule for all of them: each counts from
//! the start of the run (a `ralph run` that continues a run continues its
//! budgets; the duration is wall time since the run's `started_at`), or,
//! with `ralph run --budget-per-invocation`, each from the start of this
//! invocation. Pure: the moment and the cost come in as values.

use std::time::{Duration, Instant};

use super::Now;
use crate::config::{AgentKind, Config};
use crate::error::{Error, Result};
use crate::formats::RunState;
use crate::rules::quota::{QuotaConfig, Reached, Usage};
use crate::text::format_duration;

/// Which budget is spent; shown as the run's end reason.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum BudgetSpent {
    Cost {
        spent: f64,
        max: f64,
    },
    Duration(Duration),
    Deadline(jiff::Timestamp),
    /// The quota guard: a subscription window used past its share.
    Quota(Reached),
}

impl std::fmt::Display for BudgetSpent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BudgetSpent::Cost { spent, max } => write!(
                f,
                "cost budget spent: ${spent:.2} of loop.max_cost_usd ${max:.2}"
            ),
            BudgetSpent::Duration(max) => {
                write!(f, "loop.max_duration {} reached", format_duration(*max))
            }
            BudgetSpent::Deadline(t) => write!(f, "deadline {t} reached"),
            BudgetSpent::Quota(reached) => write!(f, "{reached}"),
        }
    }
}

/// The limits a run was started with.
#[derive(Debug, Clone)]
pub(super) struct Budgets {
    pub(crate) max_iterations: u32,
    pub(crate) max_cost: Option<f64>,
    pub(crate) max_duration: Option<Duration>,
    pub(crate) deadline: Option<jiff::Timestamp>,
    pub(crate) quota: QuotaConfig,
    /// When this invocation started (the duration counts from here, plus
    /// `counted_from.elapsed`).
    pub(crate) started: Instant,
    pub(crate) counted_from: CountedFrom,
}

/// What the run had spent where the counting starts: nothing when the
/// budgets are the run's (the default), the run's figures so far when
/// they are this invocation's.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CountedFrom {
    /// Iterations of the run before the count (the count's first is the next).
    pub(crate) iteration: u32,
    pub(crate) cost: f64,
    /// Time of the run before this invocation that counts.
    pub(crate) elapsed: Duration,
}

impl CountedFrom {
    /// Where the counting starts for a run recorded as `state`, at `now`.
    pub(super) fn of(state: &RunState, per_invocation: bool, now: jiff::Timestamp) -> Self {
        Self::of_run(
            &state.started_at,
            state.iteration,
            state.cost_usd,
            per_invocation,
            now,
        )
    }

    /// The same for a run started at `started_at` (RFC 3339) that has had
    /// `iteration` iterations costing `cost` (a parallel run's ledger).
    pub(crate) fn of_run(
        started_at: &str,
        iteration: u32,
        cost: f64,
        per_invocation: bool,
        now: jiff::Timestamp,
    ) -> Self {
        let run_age = started_at
            .parse::<jiff::Timestamp>()
            .ok()
            .and_then(|t| Duration::try_from(now.duration_since(t)).ok())
            .unwrap_or_default();
        CountedFrom::new(per_invocation, iteration, cost, run_age)
    }

    /// Per run: the iterations, cost and time the run has had so far all
    /// count (`elapsed` is the wall time since it started, `run_age`).
    /// Per invocation: the run's figures so far are the base.
    pub(super) fn new(per_invocation: bool, iteration: u32, cost: f64, run_age: Duration) -> Self {
        if per_invocation {
            CountedFrom {
                iteration,
                cost,
                elapsed: Duration::ZERO,
            }
        } else {
            CountedFrom {
                iteration: 0,
                cost: 0.0,
                elapsed: run_age,
            }
        }
    }
}

/// Where a run's budgets end, as its `run_started` says them: the run's
/// cost at which it stops, and when its time is up.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Ends {
    pub(crate) max_cost_usd: Option<f64>,
    pub(crate) deadline: Option<jiff::Timestamp>,
}

impl CountedFrom {
    /// Where `max_cost`, `max_duration` and `deadline` end as this count
    /// has them, at `now`, `running` after this invocation started: the
    /// cost on top of what came before the count, the duration's end from
    /// the time it has counted so far; the earlier of the two times.
    pub(crate) fn ends(
        &self,
        max_cost: Option<f64>,
        max_duration: Option<Duration>,
        deadline: Option<jiff::Timestamp>,
        running: Duration,
        now: jiff::Timestamp,
    ) -> Ends {
        let by_duration = max_duration.and_then(|max| {
            let left = max.saturating_sub(self.elapsed + running);
            now.checked_add(jiff::SignedDuration::try_from(left).ok()?)
                .ok()
        });
        Ends {
            max_cost_usd: max_cost.map(|max| self.cost + max),
            deadline: match (by_duration, deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }
}

impl Budgets {
    /// Where this run's budgets end, at `now`.
    pub(super) fn ends(&self, now: &Now) -> Ends {
        self.counted_from.ends(
            self.max_cost,
            self.max_duration,
            self.deadline,
            now.mono.saturating_duration_since(self.started),
            now.wall,
        )
    }

    pub(super) fn new(
        config: &Config,
        deadline: Option<jiff::Timestamp>,
        started: Instant,
        counted_from: CountedFrom,
    ) -> Budgets {
        Budgets {
            max_iterations: config.loop_.max_iterations,
            max_cost: config.loop_.max_cost_usd,
            max_duration: config.loop_.max_duration.map(|d| d.0),
            deadline,
            quota: config.quota.clone(),
            started,
            counted_from,
        }
    }

    /// Iterations the iteration limit counts when the run's latest is
    /// `iteration`.
    pub(super) fn iterations_counted(&self, iteration: u32) -> u32 {
        iteration.saturating_sub(self.counted_from.iteration)
    }

    /// The number of the last iteration `loop.max_iterations` allows, as
    /// the run counts them: what `state.json` and `ralph status` show.
    pub(super) fn iteration_limit(&self) -> u32 {
        self.counted_from
            .iteration
            .saturating_add(self.max_iterations)
    }

    /// The budget spent at `now`, with `cost` spent so far in the run and
    /// the subscription's windows used as `usage` says.
    pub(super) fn spent(&self, now: &Now, cost: f64, usage: &Usage) -> Option<BudgetSpent> {
        let spent = cost - self.counted_from.cost;
        if let Some(max) = self.max_cost
            && spent >= max
        {
            return Some(BudgetSpent::Cost { spent, max });
        }
        if let Some(reached) = usage.reached(&self.quota, now.wall.as_second()) {
            return Some(BudgetSpent::Quota(reached));
        }
        self.time_spent_within(now, Duration::ZERO)
    }

    /// When the time budget (max_duration, deadline) ends, if there is one.
    pub(super) fn ends_at(&self, now: &Now) -> Option<jiff::Timestamp> {
        let by_duration = self.max_duration.and_then(|max| {
            let used = self.counted_from.elapsed + now.mono.saturating_duration_since(self.started);
            let left = jiff::SignedDuration::try_from(max.saturating_sub(used)).ok()?;
            now.wall.checked_add(left).ok()
        });
        match (by_duration, self.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The time budget (max_duration, deadline) reached `within` from now.
    pub(super) fn time_spent_within(&self, now: &Now, within: Duration) -> Option<BudgetSpent> {
        if let Some(max) = self.max_duration
            && self.counted_from.elapsed + now.mono.saturating_duration_since(self.started) + within
                >= max
        {
            return Some(BudgetSpent::Duration(max));
        }
        let then = jiff::SignedDuration::try_from(within)
            .ok()
            .and_then(|d| now.wall.checked_add(d).ok());
        if let Some(deadline) = self.deadline
            && then.is_none_or(|t| t >= deadline)
        {
            return Some(BudgetSpent::Deadline(deadline));
        }
        None
    }
}

/// A cost budget that can never bind: the agent kind reports no cost, so
/// the run's cost stays $0.00. Said at the start, not found in the morning.
pub(super) fn unbindable_cost(kind: AgentKind, max_cost_usd: Option<f64>) -> Option<String> {
    let max = max_cost_usd.filter(|_| !kind.reports_cost())?;
    Some(format!(
        "loop.max_cost_usd (${max:.2}) cannot limit this run: {} reports no cost, so ralph counts $0.00; limit it with loop.max_iterations, loop.max_duration or the quota guard ([quota]) instead",
        kind.product()
    ))
}

/// Parse `--deadline HH:MM`: the next such local time after `now`.
pub(super) fn parse_deadline(text: &str, now: &jiff::Zoned) -> Result<jiff::Timestamp> {
    let bad = || {
        Error::usage(format!("--deadline `{text}` is not a time of day"))
            .with_hint("write it as HH:MM in local time, e.g. --deadline 07:30")
    };
    let time: jiff::civil::Time = text.trim().parse().map_err(|_| bad())?;
    let today = now
        .date()
        .to_datetime(time)
        .to_zoned(now.time_zone().clone())
        .map_err(|_| bad())?;
    let at = if today > *now {
        today
    } else {
        today.tomorrow().map_err(|_| bad())?
    };
    Ok(at.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_budget_the_agent_cannot_report_is_said() {
        // (kind, max_cost_usd) → said
        for (kind, max, said) in [
            (AgentKind::Claude, Some(5.0), false),
            (AgentKind::Opencode, Some(5.0), false),
            (AgentKind::Codex, Some(5.0), true),
            (AgentKind::Gemini, Some(5.0), true),
            (AgentKind::Codex, None, false),
        ] {
            let why = unbindable_cost(kind, max);
            assert_eq!(why.is_some(), said, "{kind:?} {max:?}");
            if let Some(why) = why {
                assert!(
                    why.starts_with("loop.max_cost_usd ($5.00) cannot limit this run"),
                    "{why}"
                );
                assert!(why.contains(kind.product()), "{why}");
            }
        }
    }
    use crate::text::Span;

    #[test]
    fn where_the_budgets_end_is_counted_as_the_run_counts_them() {
        let now: jiff::Timestamp = "2026-11-27T03:00:00Z".parse().unwrap();
        let at = |s: &str| Some(s.parse::<jiff::Timestamp>().unwrap());
        let hour = Some(Duration::from_secs(3600));
        let min = Duration::from_secs(60);
        // (counted from, max_cost, max_duration, --deadline, running) → ends
        for (from, cost, duration, deadline, running, want) in [
            // Nothing set: nothing ends.
            (
                CountedFrom::default(),
                None,
                None,
                None,
                min,
                Ends::default(),
            ),
            // A run continued after 20 minutes and $1.50: the hour ends
            // 40 minutes after its first start, not an hour from now.
            (
                CountedFrom::new(false, 3, 1.5, 20 * min),
                Some(2.0),
                hour,
                None,
                Duration::ZERO,
                Ends {
                    max_cost_usd: Some(2.0),
                    deadline: at("2026-11-27T03:40:00Z"),
                },
            ),
            // Per invocation: the run's $1.50 so far comes on top, the
            // hour counts from this start (one minute ago).
            (
                CountedFrom::new(true, 3, 1.5, 20 * min),
                Some(2.0),
                hour,
                None,
                min,
                Ends {
                    max_cost_usd: Some(3.5),
                    deadline: at("2026-11-27T03:59:00Z"),
                },
            ),
            // The earlier of --deadline and max_duration.
            (
                CountedFrom::default(),
                None,
                hour,
                at("2026-11-27T03:30:00Z"),
                Duration::ZERO,
                Ends {
                    max_cost_usd: None,
                    deadline: at("2026-11-27T03:30:00Z"),
                },
            ),
            (
                CountedFrom::default(),
                None,
                hour,
                at("2026-11-27T07:30:00Z"),
                Duration::ZERO,
                Ends {
                    max_cost_usd: None,
                    deadline: at("2026-11-27T04:00:00Z"),
                },
            ),
            // Spent already: the time is up now.
            (
                CountedFrom::new(false, 0, 0.0, 2 * 3600 * min / 60),
                None,
                hour,
                None,
                Duration::ZERO,
                Ends {
                    max_cost_usd: None,
                    deadline: Some(now),
                },
            ),
        ] {
            assert_eq!(
                from.ends(cost, duration, deadline, running, now),
                want,
                "{from:?} {cost:?} {duration:?} {deadline:?}"
            );
        }
    }

    fn limits(counted_from: CountedFrom, start: &Now) -> Budgets {
        let mut config = Config::default();
        config.loop_.max_iterations = 2;
        config.loop_.max_duration = Some(Span::secs(3600));
        config.loop_.max_cost_usd = Some(1.0);
        Budgets::new(&config, None, start.mono, counted_from)
    }

    #[test]
    fn every_budget_counts_from_the_start_of_the_run() {
        // A run continued after 2 iterations, $0.99 and 2 hours.
        let now = Now::read();
        let b = limits(
            CountedFrom::new(false, 2, 0.99, Duration::from_secs(7200)),
            &now,
        );
        assert_eq!(b.iteration_limit(), 2);
        assert_eq!(b.iterations_counted(2), 2);
        assert_eq!(
            b.spent(&now, 0.99, &Usage::default()),
            Some(BudgetSpent::Duration(Duration::from_secs(3600)))
        );
        let fresh = limits(CountedFrom::new(false, 2, 0.99, Duration::ZERO), &now);
        assert_eq!(fresh.spent(&now, 0.99, &Usage::default()), None);
        assert!(matches!(
            fresh.spent(&now, 1.0, &Usage::default()),
            Some(BudgetSpent::Cost { .. })
        ));
    }

    #[test]
    fn or_every_budget_from_the_start_of_this_invocation() {
        let now = Now::read();
        let b = limits(
            CountedFrom::new(true, 2, 0.99, Duration::from_secs(7200)),
            &now,
        );
        assert_eq!(b.iteration_limit(), 4, "run-wide: iteration 4 of at most 4");
        assert_eq!(b.iterations_counted(3), 1);
        assert_eq!(b.spent(&now, 1.98, &Usage::default()), None);
        assert_eq!(
            b.spent(&now, 1.99, &Usage::default())
                .map(|s| s.to_string()),
            Some("cost budget spent: $1.00 of loop.max_cost_usd $1.00".into())
        );
        assert!(
            b.time_spent_within(&now, Duration::from_secs(3599))
                .is_none()
        );
        assert!(
            b.time_spent_within(&now, Duration::from_secs(3600))
                .is_some()
        );
    }

    fn at(s: &str) -> jiff::Zoned {
        s.parse().unwrap()
    }

    #[test]
    fn deadline_is_the_next_such_local_time() {
        let evening = at("2026-11-21T22:00:00[Europe/Berlin]");
        let t = parse_deadline("07:30", &evening).unwrap();
        assert_eq!(t.to_string(), "2026-11-22T06:30:00Z");
        let early = at("2026-11-22T05:00:00[Europe/Berlin]");
        let t = parse_deadline(" 07:30 ", &early).unwrap();
        assert_eq!(t.to_string(), "2026-11-22T06:30:00Z");
        // The very minute now is over: tomorrow's.
        let now = at("2026-11-22T07:30:00[Europe/Berlin]");
        let t = parse_deadline("07:30", &now).unwrap();
        assert_eq!(t.to_string(), "2026-11-23T06:30:00Z");
    }

    #[test]
    fn deadline_across_a_clock_change() {
        // The night the clocks go back: 07:30 is 8 hours of wall time away
        // but 9 hours of real time.
        let now = at("2026-10-24T23:30:00[Europe/Berlin]");
        let t = parse_deadline("07:30", &now).unwrap();
        assert_eq!(t.to_string(), "2026-10-25T06:30:00Z");
        assert_eq!(t.duration_since(now.timestamp()).as_hours(), 9);
    }

    #[test]
    fn bad_deadlines_are_usage_errors_with_a_hint() {
        let now = at("2026-11-21T22:00:00[UTC]");
        for text in ["7pm", "25:00", "07:60", "", "tomorrow"] {
            let err = parse_deadline(text, &now).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{text}");
            assert!(err.render().contains("HH:MM"), "{text}");
        }
    }

    fn budgets(start: Instant) -> Budgets {
        Budgets {
            max_cost: Some(5.0),
            max_duration: Some(Duration::from_secs(3600)),
            deadline: Some("2026-11-22T06:30:00Z".parse().unwrap()),
            quota: Default::default(),
            started: start,
            max_iterations: 50,
            counted_from: CountedFrom::default(),
        }
    }

    fn now(start: Instant, after: u64, wall: &str) -> Now {
        Now {
            mono: start + Duration::from_secs(after),
            wall: wall.parse().unwrap(),
        }
    }

    #[test]
    fn each_budget_in_turn() {
        let start = Now::read().mono;
        let b = budgets(start);
        let early = now(start, 60, "2026-11-22T05:00:00Z");
        assert_eq!(b.spent(&early, 4.99, &Usage::default()), None);
        // Cost first, shown with what was spent.
        let cost = b.spent(&early, 5.0, &Usage::default()).unwrap();
        assert_eq!(
            cost.to_string(),
            "cost budget spent: $5.00 of loop.max_cost_usd $5.00"
        );
        let late = now(start, 3600, "2026-11-22T05:00:00Z");
        assert_eq!(
            b.spent(&late, 0.0, &Usage::default()).unwrap().to_string(),
            "loop.max_duration 1h00m reached"
        );
        let past = now(start, 60, "2026-11-22T06:30:00Z");
        assert_eq!(
            b.spent(&past, 0.0, &Usage::default()).unwrap().to_string(),
            "deadline 2026-11-22T06:30:00Z reached"
        );
        // Reached within a wait: the wait would end after the deadline.
        let hour = Duration::from_secs(3600);
        assert_eq!(b.time_spent_within(&early, Duration::from_secs(60)), None);
        assert!(matches!(
            b.time_spent_within(&early, hour),
            Some(BudgetSpent::Duration(_))
        ));
        let open = Budgets {
            max_duration: None,
            ..budgets(start)
        };
        assert!(matches!(
            open.time_spent_within(&early, Duration::from_secs(5400)),
            Some(BudgetSpent::Deadline(_))
        ));
        let none = Budgets {
            max_cost: None,
            max_duration: None,
            deadline: None,
            quota: Default::default(),
            started: start,
            max_iterations: 50,
            counted_from: CountedFrom::default(),
        };
        assert_eq!(none.spent(&past, 1e9, &Usage::default()), None);
        assert_eq!(none.time_spent_within(&past, Duration::MAX), None);
    }
}
