//! End-to-end tests of loop safety (issue 4): the circuit breaker, usage
//! limits, budgets, timeouts and signals, on the built `ralph run` with
//! `ralph sim` as the agent. Timeouts are short so the file stays fast.

use crate::common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{
    IDLE, Project, Run, processes_matching, wait_for_event, wait_for_file, wait_for_process,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const PLAN: &str = "# Ship the parser\n\n- [ ] parser\n- [ ] tests\n";
const LIMIT: Duration = Duration::from_secs(60);

/// A second iteration that finishes the plan and keeps its promise; the
/// first one (and only it) does nothing.
const IDLE_THEN_COMPLETE: &str = r#"
[[iteration]]
[[iteration.step]]
context = 20000
text = "Looking around."
[[iteration.step]]
result = "Nothing changed."

[[iteration]]
[[iteration.step]]
context = 20000
path = "parser.py"
content = "def parse(s):\n    return s.split(',')\n"
[[iteration.step]]
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[iteration.step]]
path = "fix_plan.md"
old = "- [ ] tests"
new = "- [x] tests"
[[iteration.step]]
result = "All items are done.\n\n<promise>COMPLETE</promise>"
"#;

/// Finishes the plan and keeps its promise over a second or two: time to
/// do something to ralph while it runs.
const UNHURRIED: &str = r#"
step_delay_ms = 300
[[step]]
context = 20000
text = "Working."
[[step]]
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[step]]
text = "More."
[[step]]
path = "fix_plan.md"
old = "- [ ] tests"
new = "- [x] tests"
[[step]]
result = "<promise>COMPLETE</promise>"
"#;

fn pid(child: &Child) -> Pid {
    Pid::from_raw(child.id() as i32)
}

fn reason(run: &Run) -> String {
    run.ended()["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `ralph run` (human output) with a pseudo-terminal as its controlling
/// terminal, as in an ssh session; returns the terminal's master side,
/// non-blocking. Closing it hangs the terminal up: SIGHUP, then every write
/// to it fails with EIO.
fn spawn_on_terminal(p: &Project) -> (Child, std::fs::File) {
    use std::os::unix::process::CommandExt;
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave = std::fs::File::from(pty.slave);
    let mut cmd = p.ralph();
    cmd.arg("run")
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave);
    // SAFETY: setsid and ioctl are async-signal-safe. (TIOCSCTTY is a
    // c_uint on macOS, the request a c_ulong.)
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            if nix::libc::ioctl(0, nix::libc::TIOCSCTTY as _, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    drop(cmd); // our copies of the slave side
    let master = std::fs::File::from(pty.master);
    let flags = nix::fcntl::fcntl(&master, nix::fcntl::FcntlArg::F_GETFL).unwrap();
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&master, nix::fcntl::FcntlArg::F_SETFL(flags)).unwrap();
    (child, master)
}

/// Whatever the terminal has to show right now.
fn read_terminal(master: &std::fs::File, into: &mut Vec<u8>) {
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = std::io::Read::read(&mut &*master, &mut buf) {
        into.extend_from_slice(&buf[..n]);
    }
}

fn wait_exit(child: Child) -> std::process::ExitStatus {
    common::wait_exit(child, LIMIT)
}

// ---------------------------------------------------------------------------------------
// Circuit breaker

#[test]
fn no_progress_opens_the_breaker_after_exactly_n_iterations() {
    let p = Project::new(
        PLAN,
        IDLE,
        "[loop]\nmax_iterations = 10\n[breaker]\nno_progress = 3\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(3), "{}", run.describe());
    assert_eq!(run.of("iteration_started").len(), 3);
    let opened = run.of("breaker");
    assert_eq!(opened.len(), 1, "{}", run.describe());
    assert_eq!(opened[0]["status"], "open");
    assert_eq!(opened[0]["rule"], "no_progress");
    assert!(reason(&run).contains("no_progress"), "{}", reason(&run));
    assert!(reason(&run).contains("--reset-breaker"), "{}", reason(&run));
    let state = p.state();
    assert_eq!(state["status"], "breaker_open");
    assert_eq!(state["breaker"]["status"], "open");
    assert_eq!(state["no_change_count"], 3);
    // ralph's own writes (PROMPT.md, .ralph/) were never taken for progress.
    assert!(
        run.of("iteration_ended")
            .iter()
            .all(|e| e["progress"] == false)
    );
}

#[test]
fn the_same_error_opens_the_breaker() {
    // The errors differ only in volatile parts: one fingerprint.
    let scenario = r#"
[[iteration]]
[[iteration.step]]
error = "overloaded"
text = "API Error: 500 upstream failed at 2026-11-21T22:18:40Z (req_abc123) in /srv/a/x.rs"

[[iteration]]
[[iteration.step]]
error = "overloaded"
text = "API Error: 502 upstream failed at 2026-11-22T01:02:03Z (req_zz9) in /srv/b/y.rs"
"#;
    let p = Project::new(
        PLAN,
        scenario,
        "[loop]\nmax_iterations = 10\n[breaker]\nsame_error = 3\nconsecutive_failures = 9\nno_progress = 9\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(3), "{}", run.describe());
    assert_eq!(run.of("iteration_started").len(), 3);
    assert_eq!(run.of("breaker")[0]["rule"], "same_error");
    assert!(reason(&run).contains("same error"), "{}", reason(&run));
    let state = p.state();
    let hashes = state["error_hashes"].as_array().unwrap();
    assert_eq!(hashes.len(), 3);
    assert!(hashes.iter().all(|h| *h == hashes[0]), "{hashes:?}");
}

#[test]
fn differing_errors_do_not_trip_same_error() {
    let scenario = r#"
[[iteration]]
[[iteration.step]]
error = "overloaded"
text = "API Error: 529 overloaded"

[[iteration]]
[[iteration.step]]
error = "invalid_request"
text = "Prompt is too long"

[[iteration]]
[[iteration.step]]
error = "overloaded"
text = "API Error: 500 Internal server error"
"#;
    let p = Project::new(
        PLAN,
        scenario,
        "[loop]\nmax_iterations = 3\n[breaker]\nsame_error = 2\nconsecutive_failures = 9\nno_progress = 9\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(run.of("breaker").is_empty(), "{}", run.describe());
    let ended = run.of("iteration_ended");
    assert_eq!(ended.len(), 3);
    assert!(ended.iter().all(|e| e["error"].is_string()), "{ended:?}");
    let state = p.state();
    assert_eq!(state["breaker"]["status"], "closed");
    assert_eq!(state["breaker"]["same_error"], 1);
    assert_eq!(state["consecutive_failures"], 3);
}

#[test]
fn agent_crashes_in_a_row_open_the_breaker() {
    // Different crashes (no result line, exit 1) so that only
    // consecutive_failures can trip.
    let scenario = r#"
[[iteration]]
[[iteration.step]]
stderr = "panic: disk full"
[[iteration.step]]
exit = 1

[[iteration]]
[[iteration.step]]
stderr = "segfault in the tokenizer"
[[iteration.step]]
exit = 1
"#;
    let p = Project::new(
        PLAN,
        scenario,
        "[loop]\nmax_iterations = 10\n[breaker]\nconsecutive_failures = 2\nsame_error = 9\nno_progress = 9\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(3), "{}", run.describe());
    assert_eq!(run.of("iteration_started").len(), 2);
    assert_eq!(run.of("breaker")[0]["rule"], "consecutive_failures");
    let errors: Vec<_> = run
        .of("iteration_ended")
        .iter()
        .map(|e| e["error"].as_str().unwrap().to_string())
        .collect();
    assert!(
        errors[0].contains("code 1") && errors[0].contains("disk full"),
        "{errors:?}"
    );
    assert!(reason(&run).contains("ralph doctor"), "{}", reason(&run));
}

#[test]
fn repeated_permission_denials_open_the_breaker_naming_the_tool() {
    // The agent makes progress each time (a new file), so only the denial rule can trip.
    let scenario = r#"
[[iteration]]
[[iteration.step]]
path = "one.txt"
content = "1\n"
[[iteration.step]]
result = "I could not run the tests: Bash was denied."
permission_denials = [{ tool_name = "Bash" }]

[[iteration]]
[[iteration.step]]
path = "two.txt"
content = "2\n"
[[iteration.step]]
result = "Bash was denied again."
permission_denials = [{ tool_name = "Bash" }]
"#;
    let p = Project::new(PLAN, scenario, "[loop]\nmax_iterations = 10\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(3), "{}", run.describe());
    assert_eq!(run.of("iteration_started").len(), 2);
    assert_eq!(run.of("breaker")[0]["rule"], "permission_denials");
    let why = reason(&run);
    assert!(why.contains("`Bash`"), "{why}");
    assert!(why.contains("--allowedTools"), "{why}");
}

#[test]
fn an_open_breaker_refuses_a_new_run_during_the_cooldown() {
    let p = Project::new(
        PLAN,
        IDLE,
        "[breaker]\nno_progress = 1\ncooldown = \"1h\"\n",
    );
    assert_eq!(p.run(&[], LIMIT).code, Some(3));
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(3), "{}", run.describe());
    assert!(run.of("iteration_started").is_empty());
    let why = reason(&run);
    assert!(why.contains("cooldown ends in"), "{why}");
    assert!(why.contains("--reset-breaker"), "{why}");
}

#[test]
fn half_open_after_the_cooldown_closes_on_progress() {
    let p = Project::new(
        PLAN,
        IDLE_THEN_COMPLETE,
        "[breaker]\nno_progress = 1\ncooldown = \"1s\"\n",
    );
    assert_eq!(p.run(&[], LIMIT).code, Some(3));
    std::thread::sleep(Duration::from_millis(1100));
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let statuses: Vec<_> = run
        .of("breaker")
        .iter()
        .map(|e| e["status"].clone())
        .collect();
    assert_eq!(statuses, ["half-open", "closed"], "{}", run.describe());
    let state = p.state();
    assert_eq!(state["breaker"]["status"], "closed");
    let path: Vec<_> = state["breaker"]["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["to"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(path, ["open", "half_open", "closed"]);
}

#[test]
fn half_open_after_the_cooldown_reopens_without_progress() {
    let p = Project::new(
        PLAN,
        IDLE,
        "[loop]\nmax_iterations = 10\n[breaker]\nno_progress = 1\ncooldown = \"1s\"\n",
    );
    assert_eq!(p.run(&[], LIMIT).code, Some(3));
    std::thread::sleep(Duration::from_millis(1100));
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(3), "{}", run.describe());
    // One trial iteration, no more.
    assert_eq!(run.of("iteration_started").len(), 1);
    let breaker = run.of("breaker");
    assert_eq!(breaker[0]["status"], "half-open");
    assert_eq!(breaker[1]["status"], "open");
    assert_eq!(breaker[1]["rule"], "half_open_trial");
    assert_eq!(p.state()["breaker"]["status"], "open");
}

#[test]
fn reset_breaker_closes_it_by_hand() {
    let p = Project::new(
        PLAN,
        IDLE_THEN_COMPLETE,
        "[breaker]\nno_progress = 1\ncooldown = \"1h\"\n",
    );
    assert_eq!(p.run(&[], LIMIT).code, Some(3));
    let run = p.run(&["--reset-breaker"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let breaker = run.of("breaker");
    assert_eq!(breaker[0]["status"], "closed");
    assert!(breaker[0]["message"].as_str().unwrap().contains("by hand"));
    assert_eq!(p.state()["breaker"]["status"], "closed");
}

// ---------------------------------------------------------------------------------------
// Usage limits

/// A usage limit as the CLI reports it: a rejected `rate_limit_event`, then
/// the synthetic error message and an `is_error` result.
fn usage_limit(resets_in_secs: u64) -> String {
    format!(
        "[[iteration.step]]\nrate_limit = \"rejected\"\nresets_in_secs = {resets_in_secs}\n[[iteration.step]]\nerror = \"rate_limit\"\nresets_in_secs = {resets_in_secs}\n"
    )
}

/// Iteration 1 starts a file, then hits the usage limit of `limit_step`;
/// iteration 2 finishes the plan.
fn limit_then_complete(limit_step: &str) -> String {
    format!(
        r#"
[[iteration]]
exit_code = 1
[[iteration.step]]
context = 20000
path = "parser.py"
content = "def parse(s):\n"
{limit_step}

[[iteration]]
[[iteration.step]]
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[iteration.step]]
path = "fix_plan.md"
old = "- [ ] tests"
new = "- [x] tests"
[[iteration.step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#
    )
}

#[test]
fn a_usage_limit_event_is_waited_out_then_the_run_completes() {
    let scenario = limit_then_complete(&usage_limit(1));
    let p = Project::new(
        PLAN,
        &scenario,
        "[breaker]\nno_progress = 1\nconsecutive_failures = 1\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let waits = run.of("limit_wait");
    assert_eq!(waits.len(), 1, "{}", run.describe());
    assert_eq!(waits[0]["source"], "rate_limit_event");
    let seconds = waits[0]["seconds"].as_u64().unwrap();
    assert!(seconds >= 1, "{seconds}");
    assert!(
        run.elapsed >= Duration::from_secs(seconds),
        "{:?}",
        run.elapsed
    );
    // Neither a failure nor "no progress" for the breaker (both limits are 1).
    assert!(run.of("breaker").is_empty(), "{}", run.describe());
    let ended = run.of("iteration_ended");
    assert_eq!(ended[0]["outcome"], "usage limit");
    assert!(ended[0]["error"].is_null());
    // The work in the tree was saved before the wait.
    let cp = run.of("checkpoint");
    assert_eq!(cp[0]["trigger"], "rate_limit");
    assert!(cp[0]["commit"].is_string(), "{}", run.describe());
    let kinds: Vec<_> = run
        .events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    let at = |k: &str| kinds.iter().position(|x| *x == k).unwrap();
    assert!(at("checkpoint") < at("limit_wait"), "{kinds:?}");
}

#[test]
fn a_limit_known_only_from_the_synthetic_error_text_is_waited_out() {
    // No rate_limit_event: the reset time comes from "resets 3:45pm", a
    // time of day to the minute that may already have begun.
    let scenario =
        limit_then_complete("[[iteration.step]]\nerror = \"rate_limit\"\nresets_in_secs = 1\n");
    let p = Project::new(PLAN, &scenario, "[rate_limit]\nmax_wait = \"5m\"\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let waits = run.of("limit_wait");
    assert_eq!(waits.len(), 1, "{}", run.describe());
    assert_eq!(waits[0]["source"], "synthetic_error");
    assert!(
        waits[0]["seconds"].as_u64().unwrap() <= 70,
        "{}",
        run.describe()
    );
}

#[test]
fn a_limit_that_outlives_its_reset_time_is_not_retried_every_few_seconds() {
    // Every iteration hits a limit that "resets" in the current minute.
    let scenario = "[[step]]\ncontext = 20000\ntext = \"Trying.\"\n[[step]]\nerror = \"rate_limit\"\nresets_in_secs = 0\n";
    let p = Project::new(PLAN, scenario, "[rate_limit]\nmax_wait = \"5m\"\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(5), "{}", run.describe());
    // One short wait; then the back-off for an unknown reset (15m) is over max_wait.
    assert_eq!(run.of("limit_wait").len(), 1, "{}", run.describe());
    assert_eq!(run.of("iteration_started").len(), 2);
    assert!(reason(&run).contains("max_wait"), "{}", reason(&run));
}

#[test]
fn a_limit_event_the_session_gets_past_is_not_waited_for() {
    // Rejected for one limit, the session goes on (extra usage, a fallback
    // model) and ends well: nothing to wait for.
    let scenario = r#"
[[step]]
rate_limit = "rejected"
resets_in_secs = 7200
rate_limit_type = "seven_day_opus"
[[step]]
context = 20000
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[step]]
result = "Parser done."
"#;
    let p = Project::new(
        PLAN,
        scenario,
        "[loop]\nmax_iterations = 1\n[rate_limit]\nmax_wait = \"1h\"\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert_eq!(run.of("iteration_ended")[0]["outcome"], "done");
}

#[test]
fn a_limit_over_max_wait_ends_the_run_with_exit_5() {
    let scenario = limit_then_complete(&usage_limit(7200));
    let p = Project::new(PLAN, &scenario, "[rate_limit]\nmax_wait = \"1h\"\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(5), "{}", run.describe());
    assert!(run.of("limit_wait").is_empty());
    assert!(reason(&run).contains("max_wait"), "{}", reason(&run));
    assert!(run.elapsed < Duration::from_secs(20), "{:?}", run.elapsed);
}

#[test]
fn a_limit_that_resets_after_the_run_time_is_over_ends_the_run_now() {
    let scenario = limit_then_complete(&usage_limit(600));
    let p = Project::new(PLAN, &scenario, "[loop]\nmax_duration = \"5m\"\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(5), "{}", run.describe());
    assert!(run.of("limit_wait").is_empty());
    assert!(reason(&run).contains("max_duration"), "{}", reason(&run));
}

#[test]
fn a_limit_with_waiting_off_ends_the_run_with_exit_5() {
    let scenario = limit_then_complete(&usage_limit(1));
    let p = Project::new(PLAN, &scenario, "[rate_limit]\nwait = false\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(5), "{}", run.describe());
    assert!(run.of("limit_wait").is_empty());
    assert!(
        reason(&run).contains("rate_limit.wait is off"),
        "{}",
        reason(&run)
    );
}

#[test]
fn limit_wording_in_a_tool_result_is_not_a_limit() {
    // The agent reads a file and runs a command whose output reads like a
    // usage limit; only its own lines count.
    let scenario = r#"
[[step]]
context = 20000
text = "Checking the error page."
command = "echo \"You've hit your session limit · resets 3:45pm\""
[[step]]
tool = "Read"
input = { file_path = "limit.txt" }
output = "Claude AI usage limit reached|1795300000"
[[step]]
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[step]]
path = "fix_plan.md"
old = "- [ ] tests"
new = "- [x] tests"
[[step]]
result = "The error page shows the limit message now.\n\n<promise>COMPLETE</promise>"
"#;
    let p = Project::new(PLAN, scenario, "[rate_limit]\nwait = false\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(run.of("limit_wait").is_empty());
}

#[test]
fn a_short_summary_of_work_on_limits_is_not_a_limit() {
    let scenario = "[[step]]\ncontext = 20000\npath = \"limit.py\"\ncontent = \"LIMIT = 5\\n\"\n[[step]]\nresult = \"Implemented the session limit check; all tests pass.\"\n";
    let p = Project::new(
        PLAN,
        scenario,
        "[loop]\nmax_iterations = 1\n[rate_limit]\nwait = false\n",
    );
    let run = p.run(&[], LIMIT);
    // With waiting off, a limit would have been exit 5.
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert_eq!(run.of("iteration_ended")[0]["outcome"], "done");
}

#[test]
fn api_retries_are_shown_not_counted() {
    let scenario = r#"
[[step]]
api_retry = 1
retry_delay_ms = 10.0
[[step]]
api_retry = 2
retry_delay_ms = 20.0
[[step]]
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[step]]
path = "fix_plan.md"
old = "- [ ] tests"
new = "- [x] tests"
[[step]]
result = "<promise>COMPLETE</promise>"
"#;
    let p = Project::new(
        PLAN,
        scenario,
        "[breaker]\nconsecutive_failures = 1\nsame_error = 1\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.of("api_retry").len(), 2);
    assert!(run.of("iteration_ended")[0]["error"].is_null());
}

// ---------------------------------------------------------------------------------------
// Budgets

#[test]
fn the_cost_budget_ends_the_run_and_is_kept_across_restarts() {
    let scenario = "cost_usd = 0.4\n[[step]]\npath = \"work.txt\"\ncontent = \"x\"\n[[step]]\nresult = \"Some work done.\"\n";
    let p = Project::new(
        PLAN,
        scenario,
        "[loop]\nmax_iterations = 10\nmax_cost_usd = 1.0\n[breaker]\nno_progress = 9\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(5), "{}", run.describe());
    // 0.4 + 0.4 + 0.4 reaches 1.0 in the third iteration.
    assert_eq!(run.of("iteration_started").len(), 3);
    assert!(reason(&run).contains("max_cost_usd"), "{}", reason(&run));
    let cost = p.state()["cost_usd"].as_f64().unwrap();
    assert!((cost - 1.2).abs() < 1e-9, "{cost}");
    // A second run continues the spent budget: it stops before starting anything.
    let again = p.run(&[], LIMIT);
    assert_eq!(again.code, Some(5), "{}", again.describe());
    assert!(again.of("iteration_started").is_empty());
    assert!(
        reason(&again).contains("max_cost_usd"),
        "{}",
        reason(&again)
    );
    assert!((p.state()["cost_usd"].as_f64().unwrap() - 1.2).abs() < 1e-9);
}

#[test]
fn max_duration_finishes_the_iteration_through_a_checkpoint_and_exits_5() {
    // A turn every half second for 15 s: the agent never goes quiet.
    let mut scenario = String::from(
        "step_delay_ms = 500\n[[step]]\ncontext = 20000\npath = \"work.txt\"\ncontent = \"started\"\n",
    );
    for _ in 0..30 {
        scenario.push_str("[[step]]\ntext = \"Still working.\"\n");
    }
    let p = Project::new(
        PLAN,
        &scenario,
        "[loop]\nmax_duration = \"2s\"\n[context]\ngrace = \"5s\"\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(5), "{}", run.describe());
    assert_eq!(run.of("iteration_started").len(), 1);
    assert!(reason(&run).contains("max_duration"), "{}", reason(&run));
    let requested = run.of("checkpoint_requested");
    assert_eq!(requested.len(), 1, "{}", run.describe());
    assert_eq!(requested[0]["trigger"], "budget");
    // The agent was asked for notes and complied: no signal was needed.
    assert!(requested[0]["notes_path"].is_string());
    assert!(run.of("agent_signalled").is_empty(), "{}", run.describe());
    let cp = run.of("checkpoint");
    assert_eq!(cp[0]["trigger"], "budget");
    assert!(cp[0]["commit"].is_string(), "{}", run.describe());
    assert!(run.elapsed < Duration::from_secs(8), "{:?}", run.elapsed);
}

#[test]
fn a_bad_deadline_is_a_usage_error() {
    let p = Project::new(PLAN, IDLE, "");
    let out = p
        .ralph()
        .args(["run", "--deadline", "7pm"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("HH:MM"));
}

// ---------------------------------------------------------------------------------------
// Timeouts

#[test]
fn idle_timeout_ends_a_hanging_iteration_as_a_failure() {
    let scenario = "[[step]]\ncontext = 20000\ntext = \"Thinking.\"\n[[step]]\nhang = true\n";
    let p = Project::new(
        PLAN,
        scenario,
        "[loop]\nmax_iterations = 1\nidle_timeout = \"1s\"\n[context]\ngrace = \"1s\"\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let ended = run.of("iteration_ended");
    let error = ended[0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("idle_timeout"), "{}", run.describe());
    assert_eq!(ended[0]["progress"], false);
    assert_eq!(p.state()["consecutive_failures"], 1);
    assert_eq!(run.of("checkpoint_requested")[0]["trigger"], "timeout");
    assert_eq!(run.of("checkpoint")[0]["trigger"], "timeout");
    // idle 1s, grace 1s, then SIGINT ends the sim.
    assert!(run.elapsed < Duration::from_secs(10), "{:?}", run.elapsed);
}

#[test]
fn iteration_timeout_ends_a_busy_iteration() {
    // Output keeps coming (no idle timeout), but the iteration runs too long.
    // The sim ignores the checkpoint request so that ralph has to stop it.
    let mut scenario = String::from("on_message = \"ignore\"\nstep_delay_ms = 300\n");
    for text in ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"] {
        scenario.push_str(&format!("[[step]]\ntext = \"{text}\"\n"));
    }
    scenario.push_str("[[step]]\nhang = true\n");
    let p = Project::new(
        PLAN,
        &scenario,
        "[loop]\nmax_iterations = 1\niteration_timeout = \"1s\"\nidle_timeout = \"1m\"\n[context]\ngrace = \"1s\"\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let error = run.of("iteration_ended")[0]["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(error.contains("iteration timeout"), "{}", run.describe());
    assert_eq!(run.of("agent_signalled")[0]["signal"], "SIGINT");
    assert!(run.elapsed < Duration::from_secs(10), "{:?}", run.elapsed);
}

#[test]
fn a_timeout_in_an_iteration_that_committed_is_progress_not_failure() {
    let scenario = r#"
[[step]]
context = 20000
path = "parser.py"
content = "def parse(s):\n    return s.split(',')\n"
[[step]]
command = "git add parser.py && git -c user.name=t -c user.email=t@t commit -qm parser"
[[step]]
hang = true
"#;
    let p = Project::new(
        PLAN,
        scenario,
        "[loop]\nmax_iterations = 1\nidle_timeout = \"1s\"\n[context]\ngrace = \"1s\"\n[breaker]\nconsecutive_failures = 1\nno_progress = 1\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let ended = run.of("iteration_ended");
    assert_eq!(ended[0]["progress"], true, "{}", run.describe());
    assert!(ended[0]["error"].is_null(), "{}", run.describe());
    assert!(run.of("breaker").is_empty());
    assert_eq!(p.state()["consecutive_failures"], 0);
    assert!(p.log().contains(&"parser".to_string()), "{:?}", p.log());
}

// ---------------------------------------------------------------------------------------
// Signals and `ralph stop`

#[test]
fn sigint_during_a_long_tool_checkpoints_and_leaves_no_process() {
    // A duration no other test uses, to find exactly this tool's process.
    let sleep = "sleep 600.4711";
    let scenario = format!(
        "[[step]]\ncontext = 20000\npath = \"work.txt\"\ncontent = \"half done\\n\"\n[[step]]\ncommand = \"{sleep}\"\ndescription = \"slow tests\"\n[[step]]\nresult = \"never reached\"\n"
    );
    let p = Project::new(PLAN, &scenario, "[context]\ngrace = \"1s\"\n");
    let child = p.spawn_run(&[]);
    wait_for_process(sleep, Duration::from_secs(20));
    let signalled = Instant::now();
    kill(pid(&child), Signal::SIGINT).unwrap();
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(130), "{}", run.describe());
    assert!(
        signalled.elapsed() < Duration::from_secs(4),
        "{:?}",
        signalled.elapsed()
    );
    assert!(
        processes_matching(sleep).is_empty(),
        "the tool outlived the run"
    );
    // The checkpoint: no handoff request (the agent is interrupted at once),
    // the work in a WIP commit, the state saved.
    let requested = run.of("checkpoint_requested");
    assert_eq!(requested[0]["trigger"], "signal");
    assert!(requested[0]["notes_path"].is_null());
    let cp = run.of("checkpoint");
    assert_eq!(cp.len(), 1, "{}", run.describe());
    assert!(cp[0]["commit"].is_string(), "{}", run.describe());
    assert!(p.head_files().contains(&"work.txt".to_string()));
    assert_eq!(run.ended()["outcome"], "interrupted");
    let state = p.state();
    assert_eq!(state["status"], "interrupted");
    assert_eq!(state["context_checkpoint"]["active"], true);
    assert!(state["supervisor_pid"].is_null());
    // An interruption by us is not the agent's failure.
    assert!(
        run.of("iteration_ended")[0]["error"].is_null(),
        "{}",
        run.describe()
    );
}

#[test]
fn a_second_sigint_stops_an_agent_that_ignores_signals_at_once() {
    let sleep = "sleep 600.4712";
    let scenario = format!(
        "on_message = \"ignore\"\non_sigint = \"ignore\"\non_sigterm = \"ignore\"\n[[step]]\ncontext = 20000\ncommand = \"{sleep}\"\n[[step]]\nhang = true\n"
    );
    let p = Project::new(PLAN, &scenario, "[context]\ngrace = \"1s\"\n");
    let child = p.spawn_run(&[]);
    wait_for_process(sleep, Duration::from_secs(20));
    kill(pid(&child), Signal::SIGINT).unwrap();
    wait_for_event(&p, "agent_signalled", Duration::from_secs(5));
    let second = Instant::now();
    kill(pid(&child), Signal::SIGINT).unwrap();
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(130), "{}", run.describe());
    // SIGINT would have been followed by SIGTERM after 5s: the second
    // interrupt skipped straight to SIGKILL.
    assert!(
        second.elapsed() < Duration::from_secs(4),
        "{:?}",
        second.elapsed()
    );
    let signals: Vec<_> = run
        .of("agent_signalled")
        .iter()
        .map(|e| e["signal"].clone())
        .collect();
    assert_eq!(signals, ["SIGINT", "SIGKILL"], "{}", run.describe());
    assert!(
        processes_matching(sleep).is_empty(),
        "the tool outlived the run"
    );
    assert_eq!(p.state()["status"], "interrupted");
}

#[test]
fn sigterm_is_an_interrupt_too() {
    let scenario = "[[step]]\ncontext = 20000\ntext = \"Thinking.\"\n[[step]]\nhang = true\n";
    let p = Project::new(PLAN, scenario, "");
    let child = p.spawn_run(&[]);
    wait_for_event(&p, "context", Duration::from_secs(20));
    kill(pid(&child), Signal::SIGTERM).unwrap();
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(130), "{}", run.describe());
    assert_eq!(run.of("checkpoint_requested")[0]["trigger"], "signal");
}

#[test]
fn sighup_lets_the_run_go_on_even_with_the_terminal_gone() {
    // Plain (non-JSON) output to pipes that are closed, as by a dropped ssh session.
    let p = Project::new(PLAN, UNHURRIED, "");
    let mut child = p
        .ralph()
        .arg("run")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_event(&p, "context", Duration::from_secs(20));
    kill(pid(&child), Signal::SIGHUP).unwrap();
    drop(child.stdout.take());
    drop(child.stderr.take());
    let status = wait_exit(child);
    assert_eq!(status.code(), Some(0));
    let log = p.read(".ralph/events.jsonl");
    assert!(log.contains("\"outcome\":\"completed\""), "{log}");
    assert_eq!(p.state()["status"], "completed");
}

#[test]
fn ralph_stop_finishes_the_iteration_through_a_checkpoint_and_exits_6() {
    let scenario = r#"
[[step]]
context = 20000
path = "work.txt"
content = "half done\n"
[[step]]
sleep_ms = 20000
[[step]]
result = "never reached"
"#;
    let p = Project::new(PLAN, scenario, "[context]\ngrace = \"5s\"\n");
    let child = p.spawn_run(&[]);
    wait_for_event(&p, "context", Duration::from_secs(20));
    let out = p.ralph().arg("stop").output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(6), "{}", run.describe());
    assert_eq!(run.ended()["outcome"], "stopped");
    // The agent was asked for its notes and complied: a graceful end.
    let requested = run.of("checkpoint_requested");
    assert_eq!(requested[0]["trigger"], "stop");
    assert!(requested[0]["notes_path"].is_string());
    assert!(run.of("agent_signalled").is_empty(), "{}", run.describe());
    let cp = run.of("checkpoint");
    assert!(cp[0]["handoff"].is_string(), "{}", run.describe());
    assert!(cp[0]["commit"].is_string(), "{}", run.describe());
    assert_eq!(p.state()["status"], "stopped");
    assert!(run.elapsed < Duration::from_secs(10), "{:?}", run.elapsed);
}

#[test]
fn ralph_stop_without_a_run_is_a_usage_error() {
    let p = Project::new(PLAN, IDLE, "");
    let out = p.ralph().arg("stop").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn sigint_between_iterations_starts_no_new_agent() {
    // The signal arrives while an iteration-end hook runs, between two agents.
    let p = Project::new(
        PLAN,
        IDLE,
        "[breaker]\nno_progress = 9\n[hooks]\non_iteration_end = [\"touch hook-started; sleep 1\"]\n",
    );
    let child = p.spawn_run(&[]);
    wait_for_file(&p, "hook-started", Duration::from_secs(20));
    kill(pid(&child), Signal::SIGINT).unwrap();
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(130), "{}", run.describe());
    assert_eq!(run.of("iteration_started").len(), 1, "{}", run.describe());
}

#[test]
fn ralph_stop_between_iterations_starts_no_new_agent() {
    let p = Project::new(
        PLAN,
        IDLE,
        "[breaker]\nno_progress = 9\n[hooks]\non_iteration_end = [\"touch hook-started; sleep 1\"]\n",
    );
    let child = p.spawn_run(&[]);
    wait_for_file(&p, "hook-started", Duration::from_secs(20));
    let out = p.ralph().arg("stop").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(6), "{}", run.describe());
    assert_eq!(run.of("iteration_started").len(), 1, "{}", run.describe());
}

#[test]
fn signals_end_a_usage_limit_wait() {
    let scenario = limit_then_complete(&usage_limit(600));
    for (how, code) in [("stop", 6), ("sigint", 130)] {
        let p = Project::new(PLAN, &scenario, "");
        let child = p.spawn_run(&[]);
        wait_for_event(&p, "limit_wait", Duration::from_secs(20));
        assert_eq!(p.state()["status"], "waiting");
        assert!(p.state()["waiting_until"].is_string());
        let asked = Instant::now();
        if how == "stop" {
            assert_eq!(
                p.ralph().arg("stop").output().unwrap().status.code(),
                Some(0)
            );
        } else {
            kill(pid(&child), Signal::SIGINT).unwrap();
        }
        let run = Run::wait(child, LIMIT);
        assert_eq!(run.code, Some(code), "{how}: {}", run.describe());
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "{how}: {:?}",
            asked.elapsed()
        );
        assert!(p.state()["waiting_until"].is_null());
    }
}

/// Issue 22: during a usage-limit wait no agent runs; `ralph checkpoint`
/// must not promise to ask one for its notes.
#[test]
fn a_checkpoint_during_a_usage_limit_wait_says_no_agent_is_asked() {
    let scenario = limit_then_complete(&usage_limit(600));
    let p = Project::new(PLAN, &scenario, "");
    let child = p.spawn_run(&[]);
    wait_for_event(&p, "limit_wait", Duration::from_secs(20));
    let out = p.ralph().arg("checkpoint").output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(!said.contains("ask the agent"), "{said}");
    assert!(said.contains("no agent runs"), "{said}");
    p.ralph().arg("stop").output().unwrap();
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(6), "{}", run.describe());
}

#[test]
fn a_hangup_of_the_controlling_terminal_does_not_end_the_run() {
    // ralph on a pseudo-terminal as its controlling terminal; closing the
    // master side is a dropped ssh session: SIGHUP, then every write to the
    // terminal fails with EIO.
    let p = Project::new(PLAN, UNHURRIED, "");
    let (child, master) = spawn_on_terminal(&p);
    // Drain the terminal (so ralph's drawing never blocks) until the first
    // turn, then close it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut screen = Vec::new();
    while !std::fs::read_to_string(p.path(".ralph/events.jsonl"))
        .is_ok_and(|l| l.contains("\"event\":\"context\""))
    {
        assert!(Instant::now() < deadline, "no context event");
        read_terminal(&master, &mut screen);
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(master);
    let status = wait_exit(child);
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_eq!(p.state()["status"], "completed");
    assert!(
        p.read(".ralph/events.jsonl")
            .contains("\"outcome\":\"completed\"")
    );
}

#[test]
fn a_usage_limit_wait_counts_down_on_the_terminal() {
    let scenario = limit_then_complete(&usage_limit(1));
    let p = Project::new(PLAN, &scenario, "");
    let (mut child, master) = spawn_on_terminal(&p);
    let mut screen = Vec::new();
    let started = Instant::now();
    let status = loop {
        read_terminal(&master, &mut screen);
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(started.elapsed() < LIMIT, "the run did not end");
        std::thread::sleep(Duration::from_millis(20));
    };
    read_terminal(&master, &mut screen);
    let screen = String::from_utf8_lossy(&screen);
    assert_eq!(status.code(), Some(0), "{screen}");
    assert!(
        screen.contains("waiting for the usage limit to reset · "),
        "{screen}"
    );
}

#[test]
fn only_the_agents_own_final_text_completes_the_run() {
    // The plan is done, and the promise shows up everywhere but as the
    // agent's own claim in its result: in a tool result (the prompt, read
    // back), in a sub-agent's words, in an earlier assistant turn, and in
    // the result as a quoted instruction.
    let scenario = r#"
[[step]]
context = 20000
text = "Reading my instructions."
command = "cat PROMPT.md"
[[step]]
text = "Asking a helper."
tool = "Task"
description = "Check"
prompt = "Check the plan."
[[step]]
subagent = true
text = "All done. <promise>COMPLETE</promise>"
[[step]]
text = "<promise>COMPLETE</promise>"
[[step]]
result = "The prompt says: \"<promise>COMPLETE</promise>\" once everything is verified. I will verify next time."
"#;
    // One item open, the plan gate off: a promise seen would complete.
    let p = Project::new(
        "- [ ] parser\n- [x] tests\n",
        scenario,
        "[loop]\nmax_iterations = 1\nrequire_plan_complete = false\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(run.of("premature_promise").is_empty());
    // The tool result really held the tag.
    let state = p.state();
    let run_id = state["run_id"].as_str().unwrap();
    let transcript = p.read(&format!(".ralph/runs/{run_id}/iter-001.jsonl"));
    assert!(
        transcript.contains("tool_result") && transcript.contains("<promise>COMPLETE</promise>")
    );
}

#[test]
fn outside_git_progress_is_plan_items_and_file_times() {
    // An idle agent: no progress, the breaker opens.
    let p = Project::bare(
        PLAN,
        IDLE,
        "[loop]\nmax_iterations = 5\n[breaker]\nno_progress = 2\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(3), "{}", run.describe());
    assert_eq!(run.of("iteration_started").len(), 2);
    // An agent that writes a file each time makes progress each time.
    let scenario = "[[step]]\ncontext = 20000\npath = \"work.txt\"\ncontent = \"x\"\n[[step]]\nresult = \"More work.\"\n";
    let p = Project::bare(
        PLAN,
        scenario,
        "[loop]\nmax_iterations = 2\n[breaker]\nno_progress = 1\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(
        run.of("iteration_ended")
            .iter()
            .all(|e| e["progress"] == true),
        "{}",
        run.describe()
    );
}

#[test]
fn an_iteration_cut_short_by_the_user_or_a_budget_is_not_held_against_the_agent() {
    // no_progress = 1: were the cut iteration counted, the breaker would
    // open, the run end in exit 3 and the next run be refused.
    let scenario = "[[step]]\ncontext = 20000\ntext = \"Thinking.\"\n[[step]]\nsleep_ms = 20000\n";
    for (how, code) in [("stop", 6), ("sigint", 130), ("max_duration", 5)] {
        let max_duration = if how == "max_duration" { "1s" } else { "1h" };
        let p = Project::new(
            PLAN,
            scenario,
            &format!(
                "[loop]\nmax_duration = \"{max_duration}\"\n[breaker]\nno_progress = 1\nconsecutive_failures = 1\ncooldown = \"1h\"\n[context]\ngrace = \"5s\"\n"
            ),
        );
        let child = p.spawn_run(&[]);
        wait_for_event(&p, "context", Duration::from_secs(20));
        match how {
            "stop" => assert_eq!(
                p.ralph().arg("stop").output().unwrap().status.code(),
                Some(0)
            ),
            "sigint" => kill(pid(&child), Signal::SIGINT).unwrap(),
            _ => {}
        }
        let run = Run::wait(child, LIMIT);
        assert_eq!(run.code, Some(code), "{how}: {}", run.describe());
        assert!(run.of("breaker").is_empty(), "{how}: {}", run.describe());
        assert_eq!(p.state()["breaker"]["status"], "closed", "{how}");
    }
}
