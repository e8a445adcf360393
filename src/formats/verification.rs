//! What a run of the `[verify]` checks was, as `state.json`, the events,
//! the report and the prompt keep it: the moment, each command's result,
//! and the prompt's view of a failure. Running the commands is
//! `hooks::verify`; the keys are `config::verify`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Characters of one output line shown in a prompt.
const LINE_CHARS: usize = 240;

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
                Some(t) => format!("timed out after {}", crate::text::format_duration(t)),
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
