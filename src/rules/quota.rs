//! The quota guard (`[quota]`, docs/quota.md): the run stops before it
//! spends the share of a subscription's 5-hour or weekly limit the team
//! wants to keep, from the usage the agent itself reports. Pure: readings
//! and the moment come in as values.
//!
//! Claude Code reports usage in `rate_limit_event` lines
//! (`rate_limit_info.unifiedWindows.{five_hour,seven_day}.utilization`, a
//! fraction, with `resetsAt`; and the top-level `utilization` of the
//! window named by `rateLimitType`), read by `stream` into
//! [`crate::stream::WindowUsage`]s. Another agent kind feeds the guard the
//! same way: its decoder emits `StreamEvent::RateLimit` with the windows
//! it knows (Codex: the primary window is the 5-hour one, the secondary
//! the weekly one). A reading whose window has reset counts no more.

use serde::{Deserialize, Serialize};

use crate::stream::WindowUsage;

/// `[quota]`: unset keys guard nothing.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct QuotaConfig {
    /// Stop once the 5-hour window is this many percent used.
    pub(crate) five_hour_percent: Option<f64>,
    /// Stop once the weekly window is this many percent used.
    pub(crate) weekly_percent: Option<f64>,
}

impl QuotaConfig {
    /// The key that is wrong, and why.
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        for (key, v) in [
            ("five_hour_percent", self.five_hour_percent),
            ("weekly_percent", self.weekly_percent),
        ] {
            if let Some(v) = v
                && !(v > 0.0 && v <= 100.0)
            {
                return Err((key, format!("{v} is not a percentage in (0, 100]")));
            }
        }
        Ok(())
    }
}

/// A subscription window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Window {
    FiveHour,
    Weekly,
}

impl Window {
    /// The window an agent names: Claude Code's `five_hour`, `seven_day`
    /// and the per-model weekly ones.
    pub(crate) fn of(name: &str) -> Option<Window> {
        match name {
            "five_hour" => Some(Window::FiveHour),
            "seven_day" | "seven_day_opus" | "seven_day_sonnet" => Some(Window::Weekly),
            _ => None,
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Window::FiveHour => "5-hour",
            Window::Weekly => "weekly",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Window::FiveHour => "quota.five_hour_percent",
            Window::Weekly => "quota.weekly_percent",
        }
    }
}

/// How much of one window is used.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Reading {
    pub(crate) percent: f64,
    /// Epoch seconds.
    pub(crate) resets_at: Option<i64>,
}

/// The latest reading of each window (`state.json`'s `quota`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) five_hour: Option<Reading>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) weekly: Option<Reading>,
}

/// A window used past its share: why the run stops.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reached {
    pub(crate) window: Window,
    pub(crate) percent: f64,
    pub(crate) max: f64,
    pub(crate) resets_at: Option<i64>,
}

impl std::fmt::Display for Reached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "quota guard: the {} limit is {:.0}% used ({} {:.0}%)",
            self.window.label(),
            self.percent,
            self.window.key(),
            self.max
        )?;
        if let Some(t) = self
            .resets_at
            .and_then(|s| jiff::Timestamp::from_second(s).ok())
        {
            write!(f, ", resets {t}")?;
        }
        Ok(())
    }
}

impl Usage {
    /// Take in what the agent reported; the newest reading of a window wins.
    pub(crate) fn observe(&mut self, windows: &[WindowUsage]) -> bool {
        let mut changed = false;
        for w in windows {
            let Some(window) = Window::of(&w.name) else {
                continue;
            };
            let reading = Some(Reading {
                percent: w.utilization * 100.0,
                resets_at: w.resets_at,
            });
            let slot = match window {
                Window::FiveHour => &mut self.five_hour,
                Window::Weekly => &mut self.weekly,
            };
            changed |= *slot != reading;
            *slot = reading;
        }
        changed
    }

    /// The readings whose window has not reset by `now` (epoch seconds).
    pub(crate) fn current(&self, now: i64) -> impl Iterator<Item = (Window, Reading)> {
        [
            (Window::FiveHour, self.five_hour),
            (Window::Weekly, self.weekly),
        ]
        .into_iter()
        .filter_map(move |(w, r)| {
            r.filter(|r| r.resets_at.is_none_or(|t| t > now))
                .map(|r| (w, r))
        })
    }

    /// The first window used at or past its configured share at `now`.
    pub(crate) fn reached(&self, config: &QuotaConfig, now: i64) -> Option<Reached> {
        self.current(now).find_map(|(window, r)| {
            let max = match window {
                Window::FiveHour => config.five_hour_percent,
                Window::Weekly => config.weekly_percent,
            }?;
            (r.percent >= max).then_some(Reached {
                window,
                percent: r.percent,
                max,
                resets_at: r.resets_at,
            })
        })
    }
}

/// One window as `ralph status` and the report show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct WindowView {
    /// `five_hour` or `weekly`.
    pub(crate) window: Window,
    pub(crate) percent: f64,
    /// RFC 3339.
    pub(crate) resets_at: Option<String>,
    /// The guard's share for this window (`[quota]`), if any.
    pub(crate) stop_at_percent: Option<f64>,
}

impl WindowView {
    /// The windows of `usage` that have not reset by `now`.
    pub(crate) fn all(usage: &Usage, config: Option<&QuotaConfig>, now: i64) -> Vec<WindowView> {
        usage
            .current(now)
            .map(|(window, r)| WindowView {
                window,
                percent: r.percent,
                resets_at: r
                    .resets_at
                    .and_then(|s| jiff::Timestamp::from_second(s).ok())
                    .map(|t| t.to_string()),
                stop_at_percent: config.and_then(|c| match window {
                    Window::FiveHour => c.five_hour_percent,
                    Window::Weekly => c.weekly_percent,
                }),
            })
            .collect()
    }

    /// "weekly 91% (stop at 90%), resets 2026-11-26T09:00:00Z"
    pub(crate) fn line(&self, local: impl Fn(&str) -> String) -> String {
        let mut s = format!("{} {:.0}%", self.window.label(), self.percent);
        if let Some(max) = self.stop_at_percent {
            s.push_str(&format!(" (stop at {max:.0}%)"));
        }
        if let Some(t) = &self.resets_at {
            s.push_str(&format!(", resets {}", local(t)));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(name: &str, utilization: f64, resets_at: Option<i64>) -> WindowUsage {
        WindowUsage {
            name: name.into(),
            utilization,
            resets_at,
        }
    }

    #[test]
    fn a_window_past_its_share_is_reached_until_it_resets() {
        let config = QuotaConfig {
            five_hour_percent: None,
            weekly_percent: Some(90.0),
        };
        let mut u = Usage::default();
        assert!(u.observe(&[
            w("five_hour", 0.99, Some(2000)),
            w("seven_day", 0.89, Some(5000))
        ]));
        // The 5-hour window is not guarded; the weekly one is under its share.
        assert_eq!(u.reached(&config, 1000), None);
        assert!(u.observe(&[w("seven_day", 0.9, Some(5000))]));
        assert!(!u.observe(&[w("seven_day", 0.9, Some(5000))]), "no change");
        let reached = u.reached(&config, 1000).unwrap();
        assert_eq!(reached.window, Window::Weekly);
        assert_eq!(
            reached.to_string(),
            "quota guard: the weekly limit is 90% used (quota.weekly_percent 90%), resets 1970-01-01T01:23:20Z"
        );
        // Once the window has reset, the old reading says nothing.
        assert_eq!(u.reached(&config, 5000), None);
    }

    #[test]
    fn unknown_windows_are_ignored_and_per_model_weekly_ones_count_as_weekly() {
        let mut u = Usage::default();
        assert!(!u.observe(&[w("overage", 1.0, None)]));
        u.observe(&[w("seven_day_opus", 0.5, None)]);
        assert_eq!(u.weekly.unwrap().percent, 50.0);
    }

    #[test]
    fn shares_must_be_percentages() {
        let bad = QuotaConfig {
            five_hour_percent: Some(0.0),
            weekly_percent: None,
        };
        assert_eq!(bad.check().unwrap_err().0, "five_hour_percent");
        assert!(QuotaConfig::default().check().is_ok());
    }
}
