//! The run's budgets: cost, duration and `--deadline`, and when one of
//! them is spent. Pure: the moment and the cost come in as values.

use std::time::{Duration, Instant};

use super::Now;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::span::format_duration;

/// Which budget is spent; shown as the run's end reason.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum BudgetSpent {
    Cost { spent: f64, max: f64 },
    Duration(Duration),
    Deadline(jiff::Timestamp),
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
        }
    }
}

/// The limits a run was started with.
#[derive(Debug, Clone)]
pub(super) struct Budgets {
    pub max_cost: Option<f64>,
    pub max_duration: Option<Duration>,
    pub deadline: Option<jiff::Timestamp>,
    /// When this invocation started (the duration counts from here).
    pub started: Instant,
}

impl Budgets {
    pub(super) fn new(
        config: &Config,
        deadline: Option<jiff::Timestamp>,
        started: Instant,
    ) -> Budgets {
        Budgets {
            max_cost: config.loop_.max_cost_usd,
            max_duration: config.loop_.max_duration.map(|d| d.0),
            deadline,
            started,
        }
    }

    /// The budget spent at `now`, with `cost` spent so far in the run.
    pub(super) fn spent(&self, now: &Now, cost: f64) -> Option<BudgetSpent> {
        if let Some(max) = self.max_cost
            && cost >= max
        {
            return Some(BudgetSpent::Cost { spent: cost, max });
        }
        self.time_spent_within(now, Duration::ZERO)
    }

    /// The time budget (max_duration, deadline) reached `within` from now.
    pub(super) fn time_spent_within(&self, now: &Now, within: Duration) -> Option<BudgetSpent> {
        if let Some(max) = self.max_duration
            && now.mono.saturating_duration_since(self.started) + within >= max
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
            started: start,
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
        assert_eq!(b.spent(&early, 4.99), None);
        // Cost first, shown with what was spent.
        let cost = b.spent(&early, 5.0).unwrap();
        assert_eq!(
            cost.to_string(),
            "cost budget spent: $5.00 of loop.max_cost_usd $5.00"
        );
        let late = now(start, 3600, "2026-11-22T05:00:00Z");
        assert_eq!(
            b.spent(&late, 0.0).unwrap().to_string(),
            "loop.max_duration 1h00m reached"
        );
        let past = now(start, 60, "2026-11-22T06:30:00Z");
        assert_eq!(
            b.spent(&past, 0.0).unwrap().to_string(),
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
            started: start,
        };
        assert_eq!(none.spent(&past, 1e9), None);
        assert_eq!(none.time_spent_within(&past, Duration::MAX), None);
    }
}
