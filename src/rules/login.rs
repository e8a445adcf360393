//! A login about to end: Claude Code's `-p` results carry
//! `credential_expires_at` (2.1.33x) for a claude.ai login — the end of its
//! refresh chain as stored at sign-in, which may come up to 3 days earlier
//! (Claude Code's own words: a 30-day estimate when the server sent none;
//! a date in the past means the login has probably ended). A session
//! refused for it is fatal (`rules::fatal`, the run stops at the first);
//! this says it ahead, while the user can still sign in again.

use jiff::{SignedDuration, Timestamp};

/// How much earlier than the reported date the login may really end.
const EARLIER_BY: SignedDuration = SignedDuration::from_hours(72);

/// Without a deadline, how far ahead a run is taken to go on: one night.
const NIGHT: SignedDuration = SignedDuration::from_hours(12);

/// What to tell the user of a login reported to end at `expires`, at
/// `now`, for a run that ends by `run_ends` (its deadline or
/// `max_duration`, if any): nothing while it outlives the run.
pub(crate) fn warning(
    expires: Timestamp,
    now: Timestamp,
    run_ends: Option<Timestamp>,
) -> Option<String> {
    let fix = "sign in again (`claude auth login`, or `/login` in claude) to keep the run's sessions working; a session refused for it stops the run (fatal) rather than paying for more";
    if expires <= now {
        return Some(format!(
            "the claude.ai login has probably ended (Claude Code reports it ending at {}): {fix}",
            expires.round(jiff::Unit::Minute).unwrap_or(expires)
        ));
    }
    let earliest = expires.checked_sub(EARLIER_BY).unwrap_or(expires);
    let horizon = run_ends.unwrap_or_else(|| now.checked_add(NIGHT).unwrap_or(now));
    (earliest <= horizon).then(|| {
        format!(
            "the claude.ai login may end during this run (between {} and {}, Claude Code reports; the run goes on until {}): {fix}",
            earliest.max(now).round(jiff::Unit::Minute).unwrap_or(earliest),
            expires.round(jiff::Unit::Minute).unwrap_or(expires),
            horizon.round(jiff::Unit::Minute).unwrap_or(horizon),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_login_that_may_end_before_the_run_does_is_said() {
        let now = at("2026-11-27T22:00:00Z");
        let morning = Some(at("2026-11-28T07:00:00Z"));
        // (expires, the run's end) → said, and how it starts
        let cases: [(&str, Option<Timestamp>, Option<&str>); 6] = [
            // Weeks left: nothing to say.
            ("2026-12-20T00:00:00Z", morning, None),
            // Ends in 4 days: may end 3 days earlier, after the morning.
            ("2026-12-02T00:00:00Z", morning, None),
            // Ends in 3.25 days: its earliest end is before the morning.
            (
                "2026-12-01T04:00:00Z",
                morning,
                Some(
                    "the claude.ai login may end during this run (between 2026-11-28T04:00:00Z and 2026-12-01T04:00:00Z",
                ),
            ),
            // No deadline: one night ahead is the horizon.
            (
                "2026-12-01T04:00:00Z",
                None,
                Some("the claude.ai login may end during this run"),
            ),
            ("2026-12-03T00:00:00Z", None, None),
            // Already past.
            (
                "2026-11-27T21:00:00Z",
                morning,
                Some(
                    "the claude.ai login has probably ended (Claude Code reports it ending at 2026-11-27T21:00:00Z)",
                ),
            ),
        ];
        for (expires, ends, said) in cases {
            let got = warning(at(expires), now, ends);
            match said {
                None => assert_eq!(got, None, "{expires}"),
                Some(start) => {
                    let got = got.unwrap_or_else(|| panic!("{expires}: nothing said"));
                    assert!(got.starts_with(start), "{expires}: {got}");
                    assert!(got.contains("claude auth login"), "{got}");
                }
            }
        }
    }
}
