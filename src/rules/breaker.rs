//! The circuit breaker: the rules that stop a loop going round in circles
//! (no progress, the same error, repeated failures, permission denials),
//! its closed / half-open / open states, and error fingerprints.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::text::Span;
use crate::text::cut;

/// `[breaker]` in ralph.toml: how many iterations of each kind open the
/// breaker, and how long it stays open.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfig {
    pub(crate) no_progress: u32,
    pub(crate) same_error: u32,
    pub(crate) consecutive_failures: u32,
    pub(crate) cooldown: Span,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            no_progress: 3,
            same_error: 5,
            consecutive_failures: 3,
            cooldown: Span::secs(30 * 60),
        }
    }
}

/// Iterations in a row in which the same tool was denied before the breaker opens.
pub(crate) const PERMISSION_DENIAL_ITERATIONS: u32 = 2;
/// How many recent error fingerprints state.json keeps.
pub(crate) const KEEP_ERROR_HASHES: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    #[default]
    Closed,
    HalfOpen,
    Open,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Status {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Status::Closed => "closed",
            Status::HalfOpen => "half-open",
            Status::Open => "open",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Transition {
    pub(crate) at: String,
    pub(crate) from: Status,
    pub(crate) to: Status,
    pub(crate) reason: String,
}

/// Persisted in state.json under `breaker`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BreakerState {
    pub(crate) status: Status,
    /// Epoch seconds when it last opened.
    pub(crate) opened_at: Option<i64>,
    /// The rule that opened it: no_progress, same_error, consecutive_failures, permission_denials.
    pub(crate) rule: Option<String>,
    pub(crate) message: Option<String>,
    pub(crate) no_progress: u32,
    pub(crate) same_error: u32,
    pub(crate) last_error_hash: Option<String>,
    pub(crate) consecutive_failures: u32,
    /// Per tool: iterations in a row in which it was denied.
    pub(crate) denials: BTreeMap<String, u32>,
    pub(crate) transitions: Vec<Transition>,
}

/// What one iteration amounted to, as far as the breaker cares.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Outcome {
    pub(crate) progress: bool,
    /// The agent failed: could not start, crashed, non-zero exit without a
    /// result, an `is_error` result, a timeout without progress.
    pub(crate) failed: bool,
    /// The error text, when it failed with one.
    pub(crate) error: Option<String>,
    pub(crate) permission_denials: Vec<String>,
    /// Usage limits are waited out, not held against the agent.
    pub(crate) rate_limited: bool,
    /// The user (a signal, `ralph stop`) or a budget ended the iteration
    /// early: it says nothing about the agent unless it got somewhere.
    pub(crate) cut_short: bool,
    /// An error no further session gets past (`rules::fatal`): opens at once.
    pub(crate) fatal: Option<super::fatal::Fatal>,
}

/// The breaker opened: which rule and what the user should do.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Trip {
    pub(crate) rule: &'static str,
    pub(crate) message: String,
    pub(crate) hint: String,
}

/// Whether the next run may start an iteration.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Admission {
    Go,
    /// The cooldown is over: one trial iteration.
    Trial,
    /// Still open: how long until the cooldown ends.
    Wait(Duration),
}

impl BreakerState {
    /// Decide at the start of a run (and of each iteration) whether to go on.
    pub(crate) fn admit(&mut self, cfg: &BreakerConfig, now: i64) -> Admission {
        match self.status {
            Status::Closed => Admission::Go,
            Status::HalfOpen => Admission::Trial,
            Status::Open => {
                let opened = self.opened_at.unwrap_or(now);
                let elapsed = (now - opened).max(0) as u64;
                let cooldown = cfg.cooldown.0.as_secs();
                if elapsed >= cooldown {
                    self.transition(Status::HalfOpen, "cooldown over: one trial iteration", now);
                    Admission::Trial
                } else {
                    Admission::Wait(Duration::from_secs(cooldown - elapsed))
                }
            }
        }
    }

    /// Close it by hand (`ralph run --reset-breaker`).
    pub(crate) fn reset(&mut self, now: i64) {
        if self.status != Status::Closed {
            self.transition(Status::Closed, "reset by hand", now);
        }
        self.clear_counters();
    }

    fn clear_counters(&mut self) {
        self.no_progress = 0;
        self.same_error = 0;
        self.last_error_hash = None;
        self.consecutive_failures = 0;
        self.denials.clear();
        self.rule = None;
        self.message = None;
    }

    fn transition(&mut self, to: Status, reason: &str, now: i64) {
        self.transitions.push(Transition {
            at: jiff::Timestamp::from_second(now)
                .map(|t| t.to_string())
                .unwrap_or_default(),
            from: self.status,
            to,
            reason: reason.to_string(),
        });
        if to == Status::Open {
            self.opened_at = Some(now);
        }
        self.status = to;
    }

    /// Apply one iteration's outcome; `Some` when the breaker opens.
    pub(crate) fn record(&mut self, o: &Outcome, cfg: &BreakerConfig, now: i64) -> Option<Trip> {
        if (o.rate_limited || o.cut_short) && !o.progress {
            return None;
        }
        if let Some(f) = &o.fatal {
            let trip = Trip {
                rule: "fatal",
                message: f.message.clone(),
                hint: f.hint.clone(),
            };
            return Some(self.open(trip, now));
        }
        if self.status == Status::HalfOpen {
            if o.progress {
                self.clear_counters();
                self.transition(Status::Closed, "trial iteration made progress", now);
                return None;
            }
            let trip = Trip {
                rule: "half_open_trial",
                message: "the trial iteration after the cooldown made no progress either".into(),
                hint: "look at the last handoff and transcript in .ralph/, fix what blocks the agent, then `ralph run --reset-breaker`".into(),
            };
            return Some(self.open(trip, now));
        }

        self.no_progress = if o.progress { 0 } else { self.no_progress + 1 };
        self.consecutive_failures = if o.failed && !o.progress {
            self.consecutive_failures + 1
        } else {
            0
        };
        match o.error.as_deref().filter(|_| o.failed) {
            Some(err) => {
                let hash = fingerprint(err);
                if self.last_error_hash.as_deref() == Some(hash.as_str()) {
                    self.same_error += 1;
                } else {
                    self.same_error = 1;
                    self.last_error_hash = Some(hash);
                }
            }
            None => {
                self.same_error = 0;
                self.last_error_hash = None;
            }
        }
        let denied: std::collections::BTreeSet<&String> = o.permission_denials.iter().collect();
        self.denials.retain(|tool, _| denied.contains(tool));
        for tool in denied {
            *self.denials.entry(tool.clone()).or_insert(0) += 1;
        }

        let trip = if let Some((tool, n)) = self
            .denials
            .iter()
            .find(|(_, n)| **n >= PERMISSION_DENIAL_ITERATIONS)
        {
            Some(Trip {
                rule: "permission_denials",
                message: format!(
                    "the agent was denied permission to use `{tool}` in {n} iterations in a row"
                ),
                hint: format!(
                    "allow the tool in ralph.toml, e.g. `[agent] args = [\"--allowedTools\", \"{tool}\"]` (or a permission rule in .claude/settings.json); then `ralph run --reset-breaker`"
                ),
            })
        } else if self.same_error >= cfg.same_error {
            Some(Trip {
                rule: "same_error",
                message: format!(
                    "{} iterations in a row failed with the same error: {}",
                    self.same_error,
                    o.error.as_deref().map(short).unwrap_or_default()
                ),
                hint: "fix the cause (see the transcript under .ralph/runs/), then `ralph run --reset-breaker`".into(),
            })
        } else if self.consecutive_failures >= cfg.consecutive_failures {
            Some(Trip {
                rule: "consecutive_failures",
                message: format!(
                    "the agent failed {} iterations in a row{}",
                    self.consecutive_failures,
                    o.error
                        .as_deref()
                        .map(|e| format!(" (last: {})", short(e)))
                        .unwrap_or_default()
                ),
                hint:
                    "check that the agent runs (`ralph doctor`), then `ralph run --reset-breaker`"
                        .into(),
            })
        } else if self.no_progress >= cfg.no_progress {
            Some(Trip {
                rule: "no_progress",
                message: format!(
                    "{} iterations in a row made no progress (no commit, no change, no plan item checked)",
                    self.no_progress
                ),
                hint: "the agent may be stuck or the plan may be done without the promise; read the last handoff, adjust fix_plan.md or PROMPT template, then `ralph run --reset-breaker`".into(),
            })
        } else {
            None
        };
        trip.map(|t| self.open(t, now))
    }

    fn open(&mut self, trip: Trip, now: i64) -> Trip {
        self.rule = Some(trip.rule.to_string());
        self.message = Some(trip.message.clone());
        self.transition(Status::Open, &trip.message, now);
        trip
    }
}

fn short(text: &str) -> String {
    cut(text.lines().next().unwrap_or("").trim(), 160)
}

static VOLATILE: LazyLock<Vec<(regex::Regex, &'static str)>> = LazyLock::new(|| {
    [
        // timestamps and dates before numbers, so they go as one unit
        (
            r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?",
            "<time>",
        ),
        (r"\b\d{1,2}:\d{2}(:\d{2})?\s*(am|pm|AM|PM)?", "<time>"),
        (
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
            "<id>",
        ),
        (r"\b(msg|toolu|req|srvtoolu)_[A-Za-z0-9]+", "<id>"),
        (r"\b[0-9a-fA-F]{7,}\b", "<hex>"),
        (r"(?:[A-Za-z]:)?(?:/[^\s/:'`]+)+/?", "<path>"),
        (r"\d+(\.\d+)?", "<n>"),
        (r"\s+", " "),
    ]
    .into_iter()
    .map(|(re, with)| (regex::Regex::new(re).expect("volatile regex"), with))
    .collect()
});

/// A stable hash of an error with its volatile parts (numbers, ids, paths,
/// timestamps) normalised, so "the same error" means the same failure.
pub(crate) fn fingerprint(error: &str) -> String {
    let mut text = error.trim().to_string();
    for (re, with) in VOLATILE.iter() {
        text = re.replace_all(&text, *with).into_owned();
    }
    let digest = Sha256::digest(text.to_lowercase().as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> BreakerConfig {
        BreakerConfig {
            no_progress: 3,
            same_error: 3,
            consecutive_failures: 4,
            cooldown: Span::secs(600),
        }
    }

    fn idle() -> Outcome {
        Outcome::default()
    }

    fn failed(err: &str) -> Outcome {
        Outcome {
            failed: true,
            error: Some(err.into()),
            ..Outcome::default()
        }
    }

    #[test]
    fn no_progress_opens_after_exactly_n() {
        let mut b = BreakerState::default();
        assert_eq!(b.record(&idle(), &cfg(), 0), None);
        assert_eq!(b.record(&idle(), &cfg(), 1), None);
        let trip = b.record(&idle(), &cfg(), 2).unwrap();
        assert_eq!(trip.rule, "no_progress");
        assert_eq!(b.status, Status::Open);
        assert_eq!(b.transitions.len(), 1);
    }

    #[test]
    fn progress_resets_the_count() {
        let mut b = BreakerState::default();
        b.record(&idle(), &cfg(), 0);
        b.record(&idle(), &cfg(), 0);
        b.record(
            &Outcome {
                progress: true,
                ..idle()
            },
            &cfg(),
            0,
        );
        b.record(&idle(), &cfg(), 0);
        assert_eq!(b.record(&idle(), &cfg(), 0), None);
    }

    #[test]
    fn same_error_with_volatile_parts_trips() {
        let mut c = cfg();
        c.no_progress = 99;
        let mut b = BreakerState::default();
        b.record(
            &failed("API Error 500 at 2026-11-21T22:18:40Z req_abc123: /tmp/x/a.rs line 12"),
            &c,
            0,
        );
        b.record(
            &failed("API Error 500 at 2026-11-21T23:01:02Z req_zz9: /tmp/y/b.rs line 99"),
            &c,
            0,
        );
        let trip = b.record(
            &failed("API Error 502 at 2026-11-22T01:00:00Z req_q: /home/u/c.rs line 1"),
            &c,
            0,
        );
        assert_eq!(trip.unwrap().rule, "same_error");
    }

    #[test]
    fn differing_errors_do_not_trip_same_error() {
        let mut c = cfg();
        c.no_progress = 99;
        c.consecutive_failures = 99;
        let mut b = BreakerState::default();
        for e in [
            "disk full",
            "permission denied on socket",
            "disk full",
            "timeout talking to api",
        ] {
            assert_eq!(b.record(&failed(e), &c, 0), None, "{e}");
        }
    }

    #[test]
    fn consecutive_failures_trip() {
        let mut c = cfg();
        c.no_progress = 99;
        let mut b = BreakerState::default();
        let errs = ["a crashed", "b exploded", "c vanished"];
        for e in errs {
            assert_eq!(b.record(&failed(e), &c, 0), None);
        }
        assert_eq!(
            b.record(&failed("d broke"), &c, 0).unwrap().rule,
            "consecutive_failures"
        );
    }

    #[test]
    fn a_timeout_that_made_commits_is_progress_not_failure() {
        let mut c = cfg();
        c.consecutive_failures = 1;
        c.no_progress = 1;
        let mut b = BreakerState::default();
        let o = Outcome {
            progress: true,
            failed: true,
            error: Some("iteration timed out".into()),
            ..idle()
        };
        assert_eq!(b.record(&o, &c, 0), None);
        assert_eq!(b.consecutive_failures, 0);
    }

    #[test]
    fn rate_limits_are_not_held_against_the_agent() {
        let mut c = cfg();
        c.no_progress = 1;
        let mut b = BreakerState::default();
        let o = Outcome {
            rate_limited: true,
            failed: true,
            error: Some("limit".into()),
            ..idle()
        };
        assert_eq!(b.record(&o, &c, 0), None);
        assert_eq!(b.status, Status::Closed);
    }

    #[test]
    fn an_iteration_cut_short_counts_only_its_progress() {
        let mut c = cfg();
        c.no_progress = 1;
        let mut b = BreakerState::default();
        let cut = Outcome {
            cut_short: true,
            ..idle()
        };
        assert_eq!(b.record(&cut, &c, 0), None);
        assert_eq!((b.status, b.no_progress), (Status::Closed, 0));
        // A half-open trial cut short stays a trial.
        b.record(&idle(), &c, 0);
        assert_eq!(b.admit(&c, 600), Admission::Trial);
        assert_eq!(b.record(&cut, &c, 610), None);
        assert_eq!(b.status, Status::HalfOpen);
        // Progress made before the cut still closes it.
        let cut_with_progress = Outcome {
            progress: true,
            ..cut
        };
        assert_eq!(b.record(&cut_with_progress, &c, 620), None);
        assert_eq!(b.status, Status::Closed);
    }

    #[test]
    fn repeated_permission_denials_name_the_tool() {
        let mut c = cfg();
        c.no_progress = 99;
        let mut b = BreakerState::default();
        let o = Outcome {
            progress: true,
            permission_denials: vec!["Bash".into()],
            ..idle()
        };
        assert_eq!(b.record(&o, &c, 0), None);
        let trip = b.record(&o, &c, 0).unwrap();
        assert_eq!(trip.rule, "permission_denials");
        assert!(trip.message.contains("`Bash`"));
        assert!(trip.hint.contains("--allowedTools"));
    }

    #[test]
    fn denials_must_be_of_the_same_tool_in_a_row() {
        let mut c = cfg();
        c.no_progress = 99;
        let mut b = BreakerState::default();
        let denied = |tools: &[&str]| Outcome {
            progress: true,
            permission_denials: tools.iter().map(|t| t.to_string()).collect(),
            ..idle()
        };
        assert_eq!(b.record(&denied(&["Bash"]), &c, 0), None);
        assert_eq!(b.record(&denied(&["WebFetch"]), &c, 0), None);
        assert_eq!(b.record(&denied(&[]), &c, 0), None);
        assert_eq!(b.record(&denied(&["WebFetch"]), &c, 0), None);
        let trip = b.record(&denied(&["Bash", "WebFetch"]), &c, 0).unwrap();
        assert!(trip.message.contains("`WebFetch`"), "{}", trip.message);
    }

    #[test]
    fn a_success_between_the_same_errors_starts_the_count_again() {
        let mut c = cfg();
        c.no_progress = 99;
        c.consecutive_failures = 99;
        let mut b = BreakerState::default();
        b.record(&failed("disk full"), &c, 0);
        b.record(&failed("disk full"), &c, 0);
        b.record(&idle(), &c, 0);
        assert_eq!(b.same_error, 0);
        b.record(&failed("disk full"), &c, 0);
        assert_eq!(b.record(&failed("disk full"), &c, 0), None);
        assert_eq!(
            b.record(&failed("disk full"), &c, 0).unwrap().rule,
            "same_error"
        );
    }

    #[test]
    fn a_rate_limited_trial_neither_closes_nor_reopens() {
        let mut c = cfg();
        c.no_progress = 1;
        let mut b = BreakerState::default();
        b.record(&idle(), &c, 0);
        assert_eq!(b.admit(&c, 600), Admission::Trial);
        let limited = Outcome {
            rate_limited: true,
            ..idle()
        };
        assert_eq!(b.record(&limited, &c, 610), None);
        assert_eq!(b.status, Status::HalfOpen);
        // The next iteration is the trial again.
        assert_eq!(b.admit(&c, 9999), Admission::Trial);
    }

    #[test]
    fn cooldown_half_open_then_close_or_reopen() {
        let mut c = cfg();
        c.no_progress = 1;
        let mut b = BreakerState::default();
        b.record(&idle(), &c, 1000);
        assert_eq!(b.admit(&c, 1300), Admission::Wait(Duration::from_secs(300)));
        assert_eq!(b.admit(&c, 1600), Admission::Trial);
        assert_eq!(b.status, Status::HalfOpen);
        // no progress in the trial: open again
        assert_eq!(b.record(&idle(), &c, 1700).unwrap().rule, "half_open_trial");
        assert_eq!(b.status, Status::Open);
        assert_eq!(b.admit(&c, 2300), Admission::Trial);
        // progress in the trial: closed
        assert_eq!(
            b.record(
                &Outcome {
                    progress: true,
                    ..idle()
                },
                &c,
                2400
            ),
            None
        );
        assert_eq!(b.status, Status::Closed);
        let path: Vec<_> = b.transitions.iter().map(|t| t.to.name()).collect();
        assert_eq!(path, ["open", "half-open", "open", "half-open", "closed"]);
    }

    #[test]
    fn a_fatal_error_opens_at_once_in_every_state() {
        let fatal = crate::rules::fatal::Fatal {
            kind: crate::rules::fatal::FatalKind::Billing,
            message: "Claude Code's account cannot pay for the session: Credit balance is too low"
                .into(),
            hint: "add credit; then `ralph run --reset-breaker`".into(),
        };
        let o = Outcome {
            fatal: Some(fatal),
            ..failed("Credit balance is too low")
        };
        // (state before, progress) → opens with the fatal rule
        for (status, progress) in [
            (Status::Closed, false),
            (Status::Closed, true),
            (Status::HalfOpen, false),
            (Status::HalfOpen, true),
        ] {
            let mut b = BreakerState {
                status,
                ..BreakerState::default()
            };
            let o = Outcome {
                progress,
                ..o.clone()
            };
            let trip = b.record(&o, &cfg(), 5).expect("opens");
            assert_eq!(trip.rule, "fatal");
            assert!(trip.message.ends_with("Credit balance is too low"));
            assert_eq!(b.status, Status::Open, "{status:?} {progress}");
        }
        // The user's stop outranks it: nothing is held against the agent.
        let mut b = BreakerState::default();
        let stopped = Outcome {
            cut_short: true,
            ..o
        };
        assert_eq!(b.record(&stopped, &cfg(), 5), None);
    }

    #[test]
    fn reset_closes_by_hand() {
        let mut c = cfg();
        c.no_progress = 1;
        let mut b = BreakerState::default();
        b.record(&idle(), &c, 0);
        b.reset(5);
        assert_eq!(b.status, Status::Closed);
        assert_eq!(b.no_progress, 0);
        assert_eq!(b.admit(&c, 6), Admission::Go);
    }

    #[test]
    fn fingerprints_normalise_volatile_parts_only() {
        assert_eq!(
            fingerprint("Error at /src/a.rs:12 (id 3f2a9c1d): 500"),
            fingerprint("Error  at /lib/b.rs:99 (id 9e8d7c6b): 502")
        );
        assert_ne!(fingerprint("disk full"), fingerprint("permission denied"));
        assert_eq!(fingerprint("x").len(), 16);
    }
}
