//! Usage and rate limits: recognising them in the agent's own lines and
//! working out when they reset, so the loop can sleep exactly that long.

use std::sync::LazyLock;

use jiff::{Timestamp, Zoned, civil, tz::TimeZone};
use regex::Regex;

use crate::rules::quota::Usage;
use crate::stream::{AssistantMessage, ResultMessage};

/// Which signal told of a limit (`limit_wait.source` in the event log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitSource {
    /// A `rate_limit_event` line with status `rejected`.
    RateLimitEvent,
    /// A synthetic assistant message whose `error` is `rate_limit`.
    SyntheticError,
    /// A result with HTTP 429.
    #[serde(rename = "http_429")]
    Http429,
    /// Limit wording in the agent's own short result text.
    ResultText,
    /// The wait a supervisor recorded in `state.json` (`waiting_until`)
    /// before it was killed, or before `--fresh`: the account's limit holds.
    Recorded,
}

impl LimitSource {
    pub(crate) fn name(self) -> &'static str {
        match self {
            LimitSource::RateLimitEvent => "rate_limit_event",
            LimitSource::SyntheticError => "synthetic_error",
            LimitSource::Http429 => "http_429",
            LimitSource::ResultText => "result_text",
            LimitSource::Recorded => "recorded",
        }
    }
}

impl std::fmt::Display for LimitSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A limit the agent ran into, and when it lifts (if known).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LimitHit {
    pub(crate) resets_at: Option<Timestamp>,
    /// Which signal told us.
    pub(crate) source: LimitSource,
    pub(crate) detail: String,
}

/// A usage-limit wait recorded in the state (`waiting_until`) that has not
/// ended yet at `now`: the account is still limited, whatever became of
/// the supervisor that recorded it.
pub(crate) fn recorded(waiting_until: Option<&str>, now: Timestamp) -> Option<LimitHit> {
    let until: Timestamp = waiting_until?.parse().ok()?;
    (until > now).then(|| LimitHit {
        resets_at: Some(until),
        source: LimitSource::Recorded,
        detail: format!("the usage-limit wait recorded until {until}"),
    })
}

/// A `rate_limit_event` line with status `rejected`.
pub(crate) fn from_event(status: &str, resets_at: Option<i64>) -> Option<LimitHit> {
    (status == "rejected").then(|| LimitHit {
        resets_at: resets_at.and_then(|s| Timestamp::from_second(s).ok()),
        source: LimitSource::RateLimitEvent,
        detail: format!("usage limit reached (status {status})"),
    })
}

/// A synthetic assistant message whose `error` is `rate_limit`.
pub(crate) fn from_assistant(msg: &AssistantMessage, now: &Zoned) -> Option<LimitHit> {
    if !msg.is_main_thread() || msg.error.as_deref() != Some("rate_limit") {
        return None;
    }
    let text = msg.text.join("\n");
    Some(LimitHit {
        resets_at: parse_reset(&text, now),
        source: LimitSource::SyntheticError,
        detail: first_line(&text, "rate limit"),
    })
}

/// A result with HTTP 429, or (last resort) limit wording in the agent's
/// own result text.
pub(crate) fn from_result(r: &ResultMessage, now: &Zoned) -> Option<LimitHit> {
    let text = r.text.as_deref().unwrap_or("");
    if r.api_error_status == Some(429) {
        return Some(LimitHit {
            resets_at: parse_reset(text, now),
            source: LimitSource::Http429,
            detail: first_line(text, "HTTP 429 rate limited"),
        });
    }
    // Only short error-ish results: a long success text that mentions a
    // limit is the agent talking about its work, not hitting one. A short
    // success text counts only with the reset moment the CLI's limit text
    // carries ("· resets 3pm", "|1795300000"): "Implemented the session
    // limit check." is a summary, not a limit.
    let short_enough = text.len() < if r.is_error { 600 } else { 200 };
    if !short_enough || !LIMIT_WORDING.is_match(text) {
        return None;
    }
    let resets_at = parse_reset(text, now);
    if !r.is_error && resets_at.is_none() {
        return None;
    }
    Some(LimitHit {
        resets_at,
        source: LimitSource::ResultText,
        detail: first_line(text, "usage limit"),
    })
}

/// The exact reset of a limit whose words give it to the minute: Codex
/// writes "try again at 6:06 AM" for 06:06:50, and waiting only until
/// 06:06 retries before the limit lifts, is refused, and backs off for
/// 15 minutes. The windows the agent reported (the quota guard's readings:
/// Codex's `account/rateLimits/updated`) carry the second: the reset of
/// one that falls within the minute named wins; without a time in the
/// words, the latest reset of a window used up. A reset already exact (a
/// `rate_limit_event`, an epoch in the text, a recorded wait) is kept.
pub(crate) fn to_the_second(mut hit: LimitHit, quota: &Usage, now: Timestamp) -> LimitHit {
    let worded = matches!(
        hit.source,
        LimitSource::SyntheticError | LimitSource::Http429 | LimitSource::ResultText
    );
    if !worded {
        return hit;
    }
    let resets = quota
        .current(now.as_second())
        .filter_map(|(_, r)| Some((r.percent, r.resets_at?)));
    let exact = match hit.resets_at.map(|t| t.as_second()) {
        Some(minute) if minute % 60 == 0 => resets
            .map(|(_, at)| at)
            .filter(|at| (minute..minute + 60).contains(at))
            .min(),
        Some(_) => None,
        None => resets
            .filter(|&(percent, _)| percent >= 100.0)
            .map(|(_, at)| at)
            .max(),
    };
    if let Some(at) = exact.and_then(|s| Timestamp::from_second(s).ok()) {
        hit.resets_at = Some(at);
    }
    hit
}

fn first_line(text: &str, default: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or(default)
        .chars()
        .take(200)
        .collect()
}

static LIMIT_WORDING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)(hit your (session |weekly |usage |opus |5-hour )?limit|usage limit reached|session limit|weekly limit|5-hour limit|limit reached\s*[·∙•|]|rate limit(ed)? (exceeded|reached))",
    )
    .expect("limit regex")
});

static EPOCH: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"limit reached\|(\d{9,11})").expect("epoch regex"));

static RESET: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)(?:resets?|try again)\s+(?:at\s+)?(?:(?P<mon>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?:(?P<year>\d{4}),?\s+)?(?:at\s+)?)?(?P<h>\d{1,2})(?::(?P<m>\d{2}))?\s*(?P<ampm>am|pm)?(?:\s*\((?P<tz>[A-Za-z_]+(?:/[A-Za-z_+\-0-9]+)*)\))?",
    )
    .expect("reset regex")
});

/// How far in the past a written reset moment may lie and still be the one
/// meant. The text gives the time to the minute (or hour) and the clocks of
/// the API and of this machine differ: "resets 3:45pm" read at 3:45:20pm is
/// the reset that is happening now, not tomorrow's.
const JUST_PASSED: jiff::SignedDuration = jiff::SignedDuration::from_secs(5 * 60);

/// The reset moment written in limit text ("resets 3:45pm",
/// "resets Nov 22, 3pm (Europe/Berlin)", "limit reached|1795300000",
/// Codex's "try again at 3:05 PM" and "try again at Sep 26th, 2026 3:05 PM"),
/// as the next such moment after `now` (or one that just passed), in the
/// named time zone or `now`'s.
pub(crate) fn parse_reset(text: &str, now: &Zoned) -> Option<Timestamp> {
    if let Some(c) = EPOCH.captures(text) {
        return c[1]
            .parse()
            .ok()
            .and_then(|s| Timestamp::from_second(s).ok());
    }
    let c = RESET.captures(text)?;
    let tz = match c.name("tz") {
        Some(name) => TimeZone::get(name.as_str()).ok()?,
        None => now.time_zone().clone(),
    };
    let mut hour: i8 = c["h"].parse().ok()?;
    let minute: i8 = c.name("m").map_or(Some(0), |m| m.as_str().parse().ok())?;
    match c.name("ampm").map(|m| m.as_str().to_ascii_lowercase()) {
        Some(ref p) if p == "pm" && hour < 12 => hour += 12,
        Some(ref p) if p == "am" && hour == 12 => hour = 0,
        _ => {}
    }
    let time = civil::Time::new(hour, minute, 0, 0).ok()?;
    let local_now = now.with_time_zone(tz.clone());
    let recent = local_now.checked_sub(JUST_PASSED).ok()?;
    let date = match (c.name("mon"), c.name("day")) {
        (Some(mon), Some(day)) => {
            let month = month_number(mon.as_str())?;
            let day: i8 = day.as_str().parse().ok()?;
            let this_year = civil::Date::new(local_now.year(), month, day).ok()?;
            if let Some(year) = c.name("year") {
                civil::Date::new(year.as_str().parse().ok()?, month, day).ok()?
            } else if this_year.to_datetime(time).to_zoned(tz.clone()).ok()? < recent {
                civil::Date::new(local_now.year() + 1, month, day).ok()?
            } else {
                this_year
            }
        }
        _ => {
            let today = local_now.date();
            if today.to_datetime(time).to_zoned(tz.clone()).ok()? < recent {
                today.tomorrow().ok()?
            } else {
                today
            }
        }
    };
    Some(date.to_datetime(time).to_zoned(tz).ok()?.timestamp())
}

fn month_number(name: &str) -> Option<i8> {
    let m = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let lower = name.to_ascii_lowercase();
    m.iter()
        .position(|x| lower.starts_with(x))
        .map(|i| i as i8 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_wait_holds_until_its_time() {
        let now: Timestamp = "2026-11-27T03:00:00Z".parse().unwrap();
        // (waiting_until) → still limited
        for (until, limited) in [
            (None, false),
            (Some("garbage"), false),
            (Some("2026-11-27T02:59:59Z"), false),
            (Some("2026-11-27T03:00:00Z"), false),
            (Some("2026-11-27T03:20:00Z"), true),
        ] {
            let hit = recorded(until, now);
            assert_eq!(hit.is_some(), limited, "{until:?}");
            if let Some(hit) = hit {
                assert_eq!(hit.source, LimitSource::Recorded);
                assert_eq!(hit.resets_at.map(|t| t.to_string()).as_deref(), until);
            }
        }
    }

    fn at(s: &str) -> Zoned {
        s.parse().unwrap()
    }

    #[test]
    fn a_reset_worded_to_the_minute_is_made_exact_by_the_reported_windows() {
        use crate::rules::quota::Reading;
        let now: Timestamp = "2026-11-27T06:00:00Z".parse().unwrap();
        let ts = |s: &str| s.parse::<Timestamp>().unwrap();
        let at = |s: &str| Some(ts(s).as_second());
        let usage = |five_hour: Option<(f64, Option<i64>)>, weekly: Option<(f64, Option<i64>)>| {
            let reading = |(percent, resets_at)| Reading { percent, resets_at };
            Usage {
                five_hour: five_hour.map(reading),
                weekly: weekly.map(reading),
            }
        };
        let hit = |source, resets_at: Option<&str>| LimitHit {
            resets_at: resets_at.map(ts),
            source,
            detail: String::new(),
        };
        let exhausted = usage(
            Some((100.0, at("2026-11-27T06:06:50Z"))),
            Some((40.0, at("2026-11-30T00:00:00Z"))),
        );
        // (the limit, the windows reported) → the reset waited for
        for (limit, quota, reset) in [
            // "try again at 6:06 AM" for 06:06:50.
            (
                hit(LimitSource::Http429, Some("2026-11-27T06:06:00Z")),
                &exhausted,
                Some("2026-11-27T06:06:50Z"),
            ),
            (
                hit(LimitSource::SyntheticError, Some("2026-11-27T06:06:00Z")),
                &exhausted,
                Some("2026-11-27T06:06:50Z"),
            ),
            // No window resets in the minute named: the words stand.
            (
                hit(LimitSource::ResultText, Some("2026-11-27T06:07:00Z")),
                &exhausted,
                Some("2026-11-27T06:07:00Z"),
            ),
            (
                hit(LimitSource::Http429, Some("2026-11-27T06:05:00Z")),
                &exhausted,
                Some("2026-11-27T06:05:00Z"),
            ),
            // No time in the words: the window used up.
            (
                hit(LimitSource::Http429, None),
                &exhausted,
                Some("2026-11-27T06:06:50Z"),
            ),
            (
                hit(LimitSource::Http429, None),
                &usage(Some((80.0, at("2026-11-27T06:06:50Z"))), None),
                None,
            ),
            // A window that has reset already says nothing.
            (
                hit(LimitSource::Http429, None),
                &usage(Some((100.0, at("2026-11-27T05:59:00Z"))), None),
                None,
            ),
            // Exact already: kept.
            (
                hit(LimitSource::RateLimitEvent, Some("2026-11-27T06:06:00Z")),
                &exhausted,
                Some("2026-11-27T06:06:00Z"),
            ),
            (
                hit(LimitSource::Recorded, Some("2026-11-27T06:06:00Z")),
                &exhausted,
                Some("2026-11-27T06:06:00Z"),
            ),
            (
                hit(LimitSource::ResultText, Some("2026-11-27T06:06:30Z")),
                &exhausted,
                Some("2026-11-27T06:06:30Z"),
            ),
            // Nothing reported: the words stand.
            (
                hit(LimitSource::Http429, Some("2026-11-27T06:06:00Z")),
                &Usage::default(),
                Some("2026-11-27T06:06:00Z"),
            ),
        ] {
            let source = limit.source;
            let got = to_the_second(limit, quota, now);
            assert_eq!(got.resets_at, reset.map(ts), "{source:?} {quota:?}");
            assert_eq!(got.source, source);
        }
    }

    #[test]
    fn event_rejected_only() {
        assert!(from_event("allowed", Some(1)).is_none());
        assert!(from_event("allowed_warning", Some(1)).is_none());
        let hit = from_event("rejected", Some(1_795_300_000)).unwrap();
        assert_eq!(hit.resets_at.unwrap().as_second(), 1_795_300_000);
    }

    #[test]
    fn reset_later_today_and_tomorrow() {
        let now = at("2026-11-21T14:00:00[America/New_York]");
        let t = parse_reset("You've hit your session limit · resets 3:45pm", &now).unwrap();
        assert_eq!(t.to_string(), "2026-11-21T20:45:00Z");
        let t = parse_reset("You've hit your limit · resets 9am", &now).unwrap();
        assert_eq!(t.to_string(), "2026-11-22T14:00:00Z");
    }

    #[test]
    fn a_reset_time_that_just_passed_is_now_not_tomorrow() {
        // Written to the minute: read 20 s into that minute, or a little
        // later on a clock that runs ahead.
        let now = at("2026-11-21T15:45:20[America/New_York]");
        let t = parse_reset("You've hit your session limit · resets 3:45pm", &now).unwrap();
        assert_eq!(t.to_string(), "2026-11-21T20:45:00Z");
        let now = at("2026-11-21T15:03:00[America/New_York]");
        let t = parse_reset("5-hour limit reached ∙ resets 3pm", &now).unwrap();
        assert_eq!(t.to_string(), "2026-11-21T20:00:00Z");
        let t = parse_reset("weekly limit · resets Nov 21, 3pm", &now).unwrap();
        assert_eq!(t.to_string(), "2026-11-21T20:00:00Z");
        // Longer ago than that, it is the next one.
        let now = at("2026-11-21T15:10:00[America/New_York]");
        let t = parse_reset("resets 3pm", &now).unwrap();
        assert_eq!(t.to_string(), "2026-11-22T20:00:00Z");
        let t = parse_reset("weekly limit · resets Nov 21, 3pm", &now).unwrap();
        assert_eq!(t.to_string(), "2027-11-21T20:00:00Z");
    }

    #[test]
    fn codex_try_again_at() {
        let now = at("2026-11-24T22:30:00[UTC]");
        let t = parse_reset("You’ve hit your usage limit. Try again at 11:05 PM.", &now).unwrap();
        assert_eq!(t.to_string(), "2026-11-24T23:05:00Z");
        let t = parse_reset(
            "You’ve hit your usage limit. Upgrade to Pro, or try again at Nov 25th, 2026 1:05 AM.",
            &now,
        )
        .unwrap();
        assert_eq!(t.to_string(), "2026-11-25T01:05:00Z");
        assert!(parse_reset("You’ve hit your usage limit. Try again later.", &now).is_none());
    }

    #[test]
    fn reset_with_time_zone_and_date() {
        let now = at("2026-11-21T22:00:00[UTC]");
        let t = parse_reset("5-hour limit reached ∙ resets 2am (Europe/Berlin)", &now).unwrap();
        assert_eq!(t.to_string(), "2026-11-22T01:00:00Z");
        let t = parse_reset(
            "weekly limit · resets Nov 24, 3pm (America/Los_Angeles)",
            &now,
        )
        .unwrap();
        assert_eq!(t.to_string(), "2026-11-24T23:00:00Z");
        let t = parse_reset("Claude AI usage limit reached|1795300000", &now).unwrap();
        assert_eq!(t.as_second(), 1_795_300_000);
        assert!(parse_reset("resets 2am (Not/AZone)", &now).is_none());
    }

    #[test]
    fn result_text_and_429() {
        let now = at("2026-11-21T14:00:00[UTC]");
        let r = ResultMessage {
            is_error: true,
            text: Some("You've hit your session limit · resets 3pm".into()),
            ..ResultMessage::default()
        };
        let hit = from_result(&r, &now).unwrap();
        assert_eq!(hit.source, LimitSource::ResultText);
        assert_eq!(hit.resets_at.unwrap().to_string(), "2026-11-21T15:00:00Z");
        let r = ResultMessage {
            is_error: true,
            api_error_status: Some(429),
            ..ResultMessage::default()
        };
        assert_eq!(from_result(&r, &now).unwrap().source, LimitSource::Http429);
    }

    #[test]
    fn limit_words_in_the_agents_work_are_not_a_limit() {
        let now = at("2026-11-21T14:00:00[UTC]");
        let r = ResultMessage {
            text: Some(format!(
                "I implemented the rate limiter so that clients see \"You've hit your session limit · resets 3pm\" when they exceed quota. {}",
                "Details follow. ".repeat(20)
            )),
            ..ResultMessage::default()
        };
        assert!(from_result(&r, &now).is_none());
        // Short summaries of work on limits, from a session that went well.
        for text in [
            "Implemented the session limit check; all tests pass.",
            "Added a weekly limit setting to the config.",
            "Done: rate limit exceeded errors are now retried.",
        ] {
            let r = ResultMessage {
                text: Some(text.into()),
                ..ResultMessage::default()
            };
            assert!(from_result(&r, &now).is_none(), "{text}");
        }
        // The CLI's own limit text counts even without is_error.
        for text in [
            "Claude AI usage limit reached|1795300000",
            "You've hit your session limit · resets 3pm",
        ] {
            let r = ResultMessage {
                text: Some(text.into()),
                ..ResultMessage::default()
            };
            assert!(from_result(&r, &now).is_some(), "{text}");
        }
        let r = ResultMessage {
            is_error: true,
            text: Some("Error: tests failed".into()),
            ..ResultMessage::default()
        };
        assert!(from_result(&r, &now).is_none());
    }

    #[test]
    fn synthetic_rate_limit_message() {
        let now = at("2026-11-21T14:00:00[UTC]");
        let msg = AssistantMessage {
            model: "<synthetic>".into(),
            error: Some("rate_limit".into()),
            text: vec!["API Error: Rate limit reached".into()],
            ..AssistantMessage::default()
        };
        assert_eq!(
            from_assistant(&msg, &now).unwrap().source,
            LimitSource::SyntheticError
        );
        let other = AssistantMessage {
            error: Some("invalid_request".into()),
            ..msg
        };
        assert!(from_assistant(&other, &now).is_none());
    }
}
