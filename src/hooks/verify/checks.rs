//! What a run of the checks was, as the state, the events, the report and
//! the prompt keep it: `[verify]`'s config, the moment, each command's
//! result, and the prompt's view of a failure. A leaf (the state imports
//! it; running the commands is `verify.rs`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::span::Span;

/// Characters of one output line shown in a prompt.
const LINE_CHARS: usize = 240;

/// `[verify]` in ralph.toml.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct VerifyConfig {
    /// Shell commands, run in order in the project root (`sh -c`).
    pub(crate) commands: Vec<String>,
    /// How long each command may run before it (and its group) is killed.
    pub(crate) timeout: Span,
    /// When they run besides a completion, which is always verified.
    pub(crate) on: Vec<When>,
    /// After this many failed runs of the checks in a row, the run asks for
    /// a person once (`needs_human`, reason `verify_failing`); 0: never.
    pub(crate) needs_human_after: u32,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        VerifyConfig {
            commands: Vec::new(),
            timeout: Span::secs(10 * 60),
            on: vec![When::Completion],
            needs_human_after: 3,
        }
    }
}

impl VerifyConfig {
    /// Whether the checks run at `when` (a completion: whenever there are any).
    pub(crate) fn runs_on(&self, when: When) -> bool {
        !self.commands.is_empty() && (when == When::Completion || self.on.contains(&when))
    }

    /// The key that is wrong and why, if one is.
    pub(crate) fn problem(&self) -> Option<(&'static str, String)> {
        if self.commands.iter().any(|c| c.trim().is_empty()) {
            return Some(("commands", "a command is empty".into()));
        }
        if self.timeout.0.is_zero() {
            return Some(("timeout", "must be longer than 0s".into()));
        }
        self.on.contains(&When::Doctor).then(|| {
            (
                "on",
                "`doctor` is not a moment of a run: use completion, item, checkpoint".into(),
            )
        })
    }
}

/// The moment a verification ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum When {
    /// The agent kept its promise: the completion waits on the checks.
    Completion,
    /// An item was checked off during the iteration.
    Item,
    /// A checkpoint was saved.
    Checkpoint,
    /// `ralph doctor` ran them once.
    Doctor,
}

impl When {
    pub(crate) fn name(self) -> &'static str {
        match self {
            When::Completion => "completion",
            When::Item => "item",
            When::Checkpoint => "checkpoint",
            When::Doctor => "doctor",
        }
    }
}

/// How one command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    Passed,
    Failed,
    TimedOut,
    CannotStart,
    /// ralph got SIGINT/SIGTERM while it ran.
    Interrupted,
    /// Not run: a script it names changed since the run started
    /// (`config::trust`); the output names it.
    Untrusted,
}

/// One command's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Check {
    pub(crate) command: String,
    pub(crate) status: Status,
    pub(crate) exit_code: Option<i32>,
    pub(crate) seconds: f64,
    /// The end of its output (stdout and stderr interleaved), printable,
    /// without secrets, at most [`OUTPUT_CHARS`] characters.
    pub(crate) output: String,
}

impl Check {
    /// "`cargo test` exited with 101", "`make` timed out after 10m00s".
    pub(crate) fn summary(&self, timeout: Option<Duration>) -> String {
        let what = match (self.status, self.exit_code) {
            (Status::Passed, _) => "passed".to_string(),
            (Status::Failed, Some(c)) => format!("exited with {c}"),
            (Status::Failed, None) => "was killed by a signal".to_string(),
            (Status::TimedOut, _) => match timeout {
                Some(t) => format!(
                    "timed out after {}",
                    crate::config::span::format_duration(t)
                ),
                None => "timed out".to_string(),
            },
            (Status::CannotStart, _) => "could not start".to_string(),
            (Status::Interrupted, _) => "was interrupted".to_string(),
            (Status::Untrusted, _) => {
                "was not run: a script it names changed during the run".to_string()
            }
        };
        format!("`{}` {what}", crate::text::printable(&self.command))
    }
}

/// One run of the `[verify]` commands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verification {
    pub(crate) iteration: u32,
    pub(crate) when: When,
    pub(crate) passed: bool,
    /// The commands run, in order; the last is the one that failed, if any.
    pub(crate) checks: Vec<Check>,
    /// Commands not run after the one that failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) skipped: Vec<String>,
    /// The items checked off that it verified (`when = item`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) items: Vec<String>,
}

impl Verification {
    /// The failed command, if one failed.
    pub(crate) fn failure(&self) -> Option<&Check> {
        self.checks.iter().find(|c| c.status != Status::Passed)
    }

    /// The check not run because a script it names changed during the
    /// run: no session can make it pass (`config::trust`).
    pub(crate) fn untrusted(&self) -> Option<&Check> {
        self.failure().filter(|c| c.status == Status::Untrusted)
    }

    /// One line: "passed (2 commands)" or the failed command's summary —
    /// stable across runs of the same failure (the breaker's fingerprint).
    pub(crate) fn summary(&self) -> String {
        match self.failure() {
            Some(c) => format!("verify failed: {}", c.summary(None)),
            None => format!(
                "verify passed ({} command{})",
                self.checks.len(),
                if self.checks.len() == 1 { "" } else { "s" }
            ),
        }
    }
}

/// What the prompt's "fix first" block shows of a failed verification:
/// the failed command, the last `lines` lines of its output (each cut to
/// [`LINE_CHARS`], both ends kept: a 1 MB line's verdict is at its end),
/// and the commands not run after it.
pub(crate) fn view(v: &Verification, lines: usize, timeout: Duration) -> Option<minijinja::Value> {
    let failed = v.failure()?;
    let all: Vec<&str> = failed.output.lines().collect();
    let from = all.len().saturating_sub(lines);
    let tail: Vec<String> = all[from..]
        .iter()
        .map(|l| crate::text::cut_middle(l, LINE_CHARS))
        .collect();
    // A fence longer than any run of backticks in the output.
    let longest = tail
        .iter()
        .flat_map(|l| l.split(|c| c != '`'))
        .map(str::len)
        .max()
        .unwrap_or(0);
    Some(minijinja::context! {
        fence => "`".repeat(longest.max(2) + 1),
        iteration => v.iteration,
        when => v.when.name(),
        summary => failed.summary(Some(timeout)),
        command => &failed.command,
        output => tail.join("\n"),
        lines_hidden => from,
        skipped => &v.skipped,
    })
}
