//! What to do about a usage limit: wait until it resets (with a backoff
//! when it gives no time, or keeps holding on), or end the run when waiting
//! is off or would take too long. Pure: the sleeping is the supervisor's.

use std::time::Duration;

use super::Now;
use super::budget::Budgets;
use crate::config::RateLimitConfig;
use crate::rules::limits::LimitHit;
use crate::text::format_duration;

/// Added to a usage limit's reset time before going on.
const LIMIT_MARGIN: Duration = Duration::from_secs(5);
/// Wait when a limit gives no reset time (doubles each time, up to max_wait).
const LIMIT_FALLBACK: Duration = Duration::from_secs(15 * 60);

/// What the next limit without a reset time waits, and whether the last
/// iteration ended on a limit too.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct LimitBackoff {
    next: Duration,
    limited_before: bool,
}

/// The plan for one usage limit.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum LimitPlan {
    Wait(Duration),
    /// Do not wait: the run ends (budget spent) for this reason.
    End(String),
}

impl Default for LimitBackoff {
    fn default() -> Self {
        LimitBackoff {
            next: LIMIT_FALLBACK,
            limited_before: false,
        }
    }
}

impl LimitBackoff {
    /// An iteration ended without a limit.
    pub(super) fn clear(&mut self) {
        self.limited_before = false;
    }

    pub(super) fn plan(
        &mut self,
        hit: &LimitHit,
        now: &Now,
        rl: &RateLimitConfig,
        budgets: &Budgets,
    ) -> LimitPlan {
        let passed = hit.resets_at.is_some_and(|t| t <= now.wall);
        // A reset time that has passed while the limit holds on, right after
        // a wait: retrying every few seconds would only burn iterations, so
        // back off as when no reset time is known.
        let retry_soon = !(passed && self.limited_before);
        self.limited_before = true;
        let wait = match hit.resets_at.filter(|_| retry_soon) {
            Some(t) => {
                self.next = LIMIT_FALLBACK;
                let secs = (t.as_second() - now.wall.as_second()).max(0) as u64;
                Duration::from_secs(secs) + LIMIT_MARGIN
            }
            None => {
                let w = self.next;
                self.next = (w * 2).min(rl.max_wait.0);
                w
            }
        };
        if !rl.wait {
            return LimitPlan::End(format!(
                "usage limit hit ({}) and rate_limit.wait is off",
                hit.detail
            ));
        }
        if wait > rl.max_wait.0 {
            return LimitPlan::End(format!(
                "usage limit hit ({}); it resets in {}, longer than rate_limit.max_wait {}",
                hit.detail,
                format_duration(wait),
                format_duration(rl.max_wait.0)
            ));
        }
        // Sleeping past the end of the run's time would only hold the lock
        // until after it: stop now.
        if let Some(why) = budgets.time_spent_within(now, wait) {
            return LimitPlan::End(format!(
                "usage limit hit ({}); it resets in {}, but before that the {why}",
                hit.detail,
                format_duration(wait)
            ));
        }
        LimitPlan::Wait(wait)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::text::Span;

    const HOUR: Duration = Duration::from_secs(3600);

    fn rl(wait: bool, max_wait: Duration) -> RateLimitConfig {
        RateLimitConfig {
            wait,
            max_wait: Span(max_wait),
        }
    }

    fn hit(resets_at: Option<&str>) -> LimitHit {
        LimitHit {
            resets_at: resets_at.map(|t| t.parse().unwrap()),
            source: crate::rules::limits::LimitSource::RateLimitEvent,
            detail: "5-hour limit".into(),
        }
    }

    fn open(started: Instant) -> Budgets {
        Budgets {
            max_cost: None,
            max_duration: None,
            deadline: None,
            quota: Default::default(),
            started,
            max_iterations: 50,
            counted_from: Default::default(),
        }
    }

    #[test]
    fn the_backoff_plan() {
        let start = Now::read().mono;
        let now = Now {
            mono: start,
            wall: "2026-11-22T02:00:00Z".parse().unwrap(),
        };
        let budgets = open(start);
        let five_hours = rl(true, 5 * HOUR);
        let in_ten_minutes = hit(Some("2026-11-22T02:10:00Z"));
        let passed = hit(Some("2026-11-22T01:59:00Z"));
        let unknown = hit(None);
        let minutes = |m: u64| LimitPlan::Wait(Duration::from_secs(m * 60));
        let margin = |d: Duration| LimitPlan::Wait(d + LIMIT_MARGIN);
        let mut b = LimitBackoff::default();
        // (the limit, the plan), in order, one backoff.
        let steps = [
            // A known reset time: until then, plus the margin.
            (&in_ten_minutes, margin(Duration::from_secs(600))),
            // No reset time: 15 minutes, doubling.
            (&unknown, minutes(15)),
            (&unknown, minutes(30)),
            (&unknown, minutes(60)),
            // A reset time resets the backoff...
            (&in_ten_minutes, margin(Duration::from_secs(600))),
            // ...and a passed one right after a wait backs off instead of
            // retrying at once.
            (&passed, minutes(15)),
            (&passed, minutes(30)),
        ];
        for (i, (limit, plan)) in steps.into_iter().enumerate() {
            assert_eq!(b.plan(limit, &now, &five_hours, &budgets), plan, "step {i}");
        }
        // A passed reset time after an iteration without a limit: retry now.
        b.clear();
        assert_eq!(
            b.plan(&passed, &now, &five_hours, &budgets),
            margin(Duration::ZERO)
        );
        // The backoff never exceeds max_wait.
        let mut b = LimitBackoff::default();
        let short = rl(true, Duration::from_secs(20 * 60));
        assert_eq!(b.plan(&unknown, &now, &short, &budgets), minutes(15));
        assert_eq!(b.plan(&unknown, &now, &short, &budgets), minutes(20));
        assert_eq!(b.plan(&unknown, &now, &short, &budgets), minutes(20));
    }

    #[test]
    fn when_not_to_wait() {
        let start = Now::read().mono;
        let now = Now {
            mono: start,
            wall: "2026-11-22T02:00:00Z".parse().unwrap(),
        };
        let end = |plan: LimitPlan| match plan {
            LimitPlan::End(why) => why,
            LimitPlan::Wait(d) => panic!("waits {d:?}"),
        };
        let soon = hit(Some("2026-11-22T02:10:00Z"));
        let budgets = open(start);
        let why = end(LimitBackoff::default().plan(&soon, &now, &rl(false, HOUR), &budgets));
        assert_eq!(
            why,
            "usage limit hit (5-hour limit) and rate_limit.wait is off"
        );
        let late = hit(Some("2026-11-22T04:00:00Z"));
        let why = end(LimitBackoff::default().plan(&late, &now, &rl(true, HOUR), &budgets));
        assert_eq!(
            why,
            "usage limit hit (5-hour limit); it resets in 2h00m, longer than rate_limit.max_wait 1h00m"
        );
        let deadline = Budgets {
            deadline: Some("2026-11-22T02:05:00Z".parse().unwrap()),
            ..open(start)
        };
        let why = end(LimitBackoff::default().plan(&soon, &now, &rl(true, HOUR), &deadline));
        assert_eq!(
            why,
            "usage limit hit (5-hour limit); it resets in 10m05s, but before that the deadline 2026-11-22T02:05:00Z reached"
        );
    }
}
