//! `[verify]`: the project's own checks (tests, lints, a build), run by
//! ralph itself in the work tree — never by the agent's word. A completion
//! (the promise, past the plan gate) is accepted only when every command
//! passes; optionally they also run after an item is checked off and at
//! checkpoints (`on`). A failure is kept in the state and told to the next
//! prompt as the first thing to fix (docs/verify.md).
//!
//! Each command runs with `sh -c` in its own process group (the hooks'
//! runner, `agent::shell`): its output drained and kept to the tail,
//! killed with everything it started at the timeout or on SIGINT/SIGTERM.
//! Commands run in order and stop at the first that fails. What is kept of
//! the output is made printable and stripped of secrets before it is
//! stored, logged or put in a prompt.
//! The keys are `config::verify`; what a run of the checks was, as the
//! state, events and prompt keep it, is `formats::verification`.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::config::VerifyConfig;
use crate::formats::verification::{Check, Status, Verification, When};

use crate::agent::shell::{self, End, Shell};
use crate::platform::signals::INTERRUPTS;

/// Characters of a command's output kept (its end).
const OUTPUT_CHARS: usize = 3_000;

/// Run `config.commands` in `root` in `shell` (the agent's box when there
/// is one: the checks run code the agent wrote), in order, stopping at
/// the first that fails. `env` is added to each command's environment.
/// A command whose script changed since the run's start (`untrusted`
/// names them) is not run.
pub(crate) fn run(
    config: &VerifyConfig,
    shell: &Shell,
    untrusted: &dyn Fn(&str) -> Vec<String>,
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
        let changed = untrusted(command);
        if !changed.is_empty() {
            checks.push(Check {
                command: command.clone(),
                status: Status::Untrusted,
                exit_code: None,
                seconds: 0.0,
                output: format!(
                    "not run: changed since the run started, not trusted: {}",
                    changed.join(", ")
                ),
            });
            continue;
        }
        let t0 = Instant::now();
        // One stream, in the order it was written: test runners put the
        // summary on one and the failure on the other.
        let script = format!("exec 2>&1\n{command}");
        let done = shell::run_in(
            shell,
            &script,
            root,
            env,
            b"",
            config.timeout.0,
            &interrupted,
        );
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::formats::verification::view;
    use crate::text::Span;

    /// The checks outside any box, nothing untrusted, no extra environment.
    fn run_here(c: &VerifyConfig, root: &Path, iteration: u32, when: When) -> Verification {
        run(
            c,
            &Shell::default(),
            &|_| Vec::new(),
            root,
            &[],
            iteration,
            when,
        )
    }

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
        let v = run_here(&c, dir.path(), 4, When::Completion);
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
        let ok = run_here(
            &config(&["true"], Duration::from_secs(5)),
            dir.path(),
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
        let v = run_here(&c, dir.path(), 2, When::Completion);
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
        let gone = crate::platform::gone;
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

    /// A check that prints a 1 MB line wrapped in escape sequences: the
    /// prompt gets a printable line with its verdict (the end) kept.
    #[test]
    fn a_megabyte_line_with_escape_sequences_keeps_its_end_and_nothing_raw() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(
            &[
                "printf '\\033]0;title\\007\\033[2J'; head -c 1000000 /dev/zero | tr '\\0' A; printf '\\033[31m FAILED: 3 tests\\n'; exit 1",
            ],
            Duration::from_secs(20),
        );
        let v = run_here(&c, dir.path(), 1, When::Completion);
        assert_eq!(v.checks[0].status, Status::Failed);
        assert!(v.checks[0].output.chars().count() <= OUTPUT_CHARS);
        let shown = view(&v, 40, c.timeout.0).unwrap();
        let output = shown.get_attr("output").unwrap().to_string();
        assert!(output.ends_with("A FAILED: 3 tests"), "{output}");
        assert!(output.starts_with("AAA"), "{output}");
        assert!(output.contains('…'), "{output}");
        assert!(output.chars().count() <= 250, "{}", output.len());
        assert!(!output.contains('\x1b') && !output.contains('\x07'));
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
