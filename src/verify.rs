//! `[verify]`: the project's own checks (tests, lints, a build), run by
//! ralph itself in the work tree — never by the agent's word. A completion
//! (the promise, past the plan gate) is accepted only when every command
//! passes; optionally they also run after an item is checked off and at
//! checkpoints (`on`). A failure is kept in the state and told to the next
//! prompt as the first thing to fix (docs/verify.md).
//!
//! Each command runs with `sh -c` in its own process group (the hooks'
//! runner, `hooks::process`): its output drained and kept to the tail,
//! killed with everything it started at the timeout or on SIGINT/SIGTERM.
//! Commands run in order and stop at the first that fails. What is kept of
//! the output is made printable and stripped of secrets before it is
//! stored, logged or put in a prompt.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::span::Span;
use crate::hooks::process::{self, End, INTERRUPTS};

/// Characters of a command's output kept (its end).
const OUTPUT_CHARS: usize = 3_000;
/// Characters of one output line shown in a prompt.
const LINE_CHARS: usize = 240;

/// `[verify]` in ralph.toml.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct VerifyConfig {
    /// Shell commands, run in order in the project root (`sh -c`).
    pub commands: Vec<String>,
    /// How long each command may run before it (and its group) is killed.
    pub timeout: Span,
    /// When they run besides a completion, which is always verified.
    pub on: Vec<When>,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        VerifyConfig {
            commands: Vec::new(),
            timeout: Span::secs(10 * 60),
            on: vec![When::Completion],
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
pub enum When {
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
pub enum Status {
    Passed,
    Failed,
    TimedOut,
    CannotStart,
    /// ralph got SIGINT/SIGTERM while it ran.
    Interrupted,
}

/// One command's run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub command: String,
    pub status: Status,
    pub exit_code: Option<i32>,
    pub seconds: f64,
    /// The end of its output (stdout and stderr interleaved), printable,
    /// without secrets, at most [`OUTPUT_CHARS`] characters.
    pub output: String,
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
        };
        format!("`{}` {what}", crate::text::printable(&self.command))
    }
}

/// One run of the `[verify]` commands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verification {
    pub iteration: u32,
    pub when: When,
    pub passed: bool,
    /// The commands run, in order; the last is the one that failed, if any.
    pub checks: Vec<Check>,
    /// Commands not run after the one that failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// The items checked off that it verified (`when = item`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<String>,
}

impl Verification {
    /// The failed command, if one failed.
    pub(crate) fn failure(&self) -> Option<&Check> {
        self.checks.iter().find(|c| c.status != Status::Passed)
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

/// Run `config.commands` in `root`, in order, stopping at the first that
/// fails. `env` is added to each command's environment.
pub(crate) fn run(
    config: &VerifyConfig,
    root: &Path,
    env: &[(String, String)],
    iteration: u32,
    when: When,
) -> Verification {
    let started = INTERRUPTS.load(Ordering::SeqCst);
    let interrupted = || INTERRUPTS.load(Ordering::SeqCst) != started;
    let mut checks = Vec::new();
    let mut skipped = Vec::new();
    for command in &config.commands {
        if checks.iter().any(|c: &Check| c.status != Status::Passed) {
            skipped.push(command.clone());
            continue;
        }
        let t0 = Instant::now();
        // One stream, in the order it was written: test runners put the
        // summary on one and the failure on the other.
        let script = format!("exec 2>&1\n{command}");
        let done = process::run(&script, root, env, b"", config.timeout.0, &interrupted);
        let (status, exit_code) = match &done.end {
            End::Exited(s) if s.success() => (Status::Passed, Some(0)),
            End::Exited(s) => (Status::Failed, s.code()),
            End::TimedOut => (Status::TimedOut, None),
            End::Interrupted => (Status::Interrupted, None),
            End::CannotStart(_) | End::Lost(_) => (Status::CannotStart, None),
        };
        let mut output = String::from_utf8_lossy(&done.stdout).into_owned();
        if let End::CannotStart(e) | End::Lost(e) = &done.end {
            output = e.to_string();
        }
        checks.push(Check {
            command: command.clone(),
            status,
            exit_code,
            seconds: (t0.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            output: clean_tail(&output),
        });
    }
    Verification {
        iteration,
        when,
        passed: checks.iter().all(|c| c.status == Status::Passed),
        checks,
        skipped,
        items: Vec::new(),
    }
}

/// The end of `output`: printable lines, without secrets, at most
/// [`OUTPUT_CHARS`] characters, starting at a line.
fn clean_tail(output: &str) -> String {
    let text = crate::text::secrets::redact(output);
    let text = crate::text::printable_lines(&text);
    let text = text.trim_end();
    let chars = text.chars().count();
    if chars <= OUTPUT_CHARS {
        return text.to_string();
    }
    let skip = text
        .char_indices()
        .nth(chars - OUTPUT_CHARS)
        .map_or(0, |(at, _)| at);
    let rest = &text[skip..];
    match rest.find('\n') {
        Some(nl) if nl + 1 < rest.len() => rest[nl + 1..].to_string(),
        _ => rest.to_string(),
    }
}

/// What the prompt's "fix first" block shows of a failed verification:
/// the failed command, the last `lines` lines of its output (each cut to
/// [`LINE_CHARS`]), and the commands not run after it.
pub(crate) fn view(v: &Verification, lines: usize, timeout: Duration) -> Option<minijinja::Value> {
    let failed = v.failure()?;
    let all: Vec<&str> = failed.output.lines().collect();
    let from = all.len().saturating_sub(lines);
    let tail: Vec<String> = all[from..]
        .iter()
        .map(|l| crate::text::cut(l, LINE_CHARS))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(commands: &[&str], timeout: Duration) -> VerifyConfig {
        VerifyConfig {
            commands: commands.iter().map(|c| c.to_string()).collect(),
            timeout: Span(timeout),
            ..VerifyConfig::default()
        }
    }

    #[test]
    fn commands_run_in_order_and_stop_at_the_first_failure() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(
            &[
                "echo one > a",
                "echo out; echo err >&2; exit 3",
                "touch never",
            ],
            Duration::from_secs(10),
        );
        let v = run(&c, dir.path(), &[], 4, When::Completion);
        assert!(!v.passed);
        assert_eq!(v.checks.len(), 2);
        assert_eq!(v.checks[0].status, Status::Passed);
        assert_eq!(v.checks[1].status, Status::Failed);
        assert_eq!(v.checks[1].exit_code, Some(3));
        assert_eq!(v.checks[1].output, "out\nerr");
        assert_eq!(v.skipped, ["touch never"]);
        assert!(!dir.path().join("never").exists());
        assert_eq!(
            v.summary(),
            "verify failed: `echo out; echo err >&2; exit 3` exited with 3"
        );
        let shown = view(&v, 1, c.timeout.0).unwrap();
        assert_eq!(shown.get_attr("output").unwrap().to_string(), "err");
        assert_eq!(shown.get_attr("lines_hidden").unwrap().to_string(), "1");
        let ok = run(
            &config(&["true"], Duration::from_secs(5)),
            dir.path(),
            &[],
            1,
            When::Item,
        );
        assert!(ok.passed && view(&ok, 10, Duration::ZERO).is_none());
        assert_eq!(ok.summary(), "verify passed (1 command)");
    }

    #[test]
    fn a_hanging_command_and_what_it_started_are_killed_at_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(
            &["sleep 300 & echo $! > bg.pid; echo started; sleep 300"],
            Duration::from_millis(500),
        );
        let t0 = Instant::now();
        let v = run(&c, dir.path(), &[], 2, When::Completion);
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert_eq!(v.checks[0].status, Status::TimedOut);
        assert_eq!(v.checks[0].output, "started");
        assert!(
            v.checks[0]
                .summary(Some(c.timeout.0))
                .ends_with("timed out after 0s")
        );
        let pid: i32 = std::fs::read_to_string(dir.path().join("bg.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let gone = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        while !gone(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(gone(pid), "the background sleep {pid} outlived the timeout");
    }

    #[test]
    fn output_is_kept_to_its_end_printable() {
        let long: String = (0..2000).map(|i| format!("line {i}\n")).collect();
        let tail = clean_tail(&format!("\x1b[31mred\x1b[0m\n{long}"));
        assert!(tail.chars().count() <= OUTPUT_CHARS);
        assert!(tail.starts_with("line "), "{}", &tail[..20]);
        assert!(tail.ends_with("line 1999"));
        assert_eq!(clean_tail("\x1b[31mred\x1b[0m\n"), "red");
    }

    #[test]
    fn completion_always_runs_the_others_when_asked() {
        let mut c = VerifyConfig::default();
        assert!(!c.runs_on(When::Completion), "no commands, nothing to run");
        c.commands = vec!["true".into()];
        assert!(c.runs_on(When::Completion));
        assert!(!c.runs_on(When::Item));
        c.on = vec![When::Item];
        assert!(c.runs_on(When::Completion) && c.runs_on(When::Item));
        assert!(!c.runs_on(When::Checkpoint));
    }
}
