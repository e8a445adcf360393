//! What Claude Code's recent releases changed, against the real CLI: a
//! billing refusal (`is_error: true` on a `success` result) stops the run
//! after one session; the retry watchdog, set in the user's environment,
//! does not make a rate-limited session wait quietly; a subagent's
//! compaction is not taken for the main session's.

use std::time::Duration;

use super::harness::{self, Project, Setup};
use super::mock_api::Reply;

fn sessions(reqs: &[super::mock_api::ApiRequest]) -> usize {
    let mut seen: Vec<&str> = reqs.iter().map(|r| r.session().unwrap_or("-")).collect();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

/// The account cannot pay: the API's 400 "Credit balance is too low". No
/// later session gets past it, so the run stops after the first (exit 3,
/// the breaker's `fatal` rule) with the fix in its reason, instead of
/// trying again until `same_error` or the iteration limit.
#[test]
fn a_billing_refusal_stops_the_run_after_one_session() {
    let _serial = harness::serial();
    let Some(claude) = harness::claude("a_billing_refusal_stops_the_run_after_one_session") else {
        return;
    };
    let setup = Setup {
        max_iterations: 5,
        breaker: "same_error = 4\nconsecutive_failures = 10\nno_progress = 10",
        ..Setup::default()
    };
    let p = Project::new("billing", &claude, &setup);
    let api = p.serve(|_| {
        Reply::error(
            400,
            "invalid_request_error",
            "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.",
        )
    });
    let (code, _) = p.run_ralph(&["--json"], Duration::from_secs(90));
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(code, 3, "{}", diag());
    assert_eq!(sessions(&api.main_requests()), 1, "{}", diag());
    let state = p.state();
    assert_eq!(state["iteration"], 1, "{state:#}");
    assert_eq!(state["breaker"]["rule"], "fatal", "{state:#}");
    let ended = p.events_named("run_ended");
    let reason = ended[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("circuit breaker opened (fatal)"),
        "{reason}"
    );
    assert!(reason.to_lowercase().contains("credit"), "{reason}");
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// The retry watchdog (`CLAUDE_CODE_RETRY_WATCHDOG`, in the user's shell)
/// makes `claude -p` wait quietly through a 429 that says come back in an
/// hour (measured: one request in 45 s and more, until ralph's iteration
/// timeout killed it). ralph removes it from the agent's environment, so
/// the limit comes back at once: the session ends, ralph waits the limit
/// out itself (`limit_wait`), visibly.
#[test]
fn a_rate_limit_comes_back_to_ralph_although_the_retry_watchdog_is_set() {
    let _serial = harness::serial();
    let Some(claude) =
        harness::claude("a_rate_limit_comes_back_to_ralph_although_the_retry_watchdog_is_set")
    else {
        return;
    };
    let setup = Setup {
        max_iterations: 1,
        idle_timeout: "40s",
        iteration_timeout: "50s",
        subscriber: true,
        ..Setup::default()
    };
    let mut p = Project::new("watchdog", &claude, &setup);
    for (k, v) in [
        ("CLAUDE_CODE_RETRY_WATCHDOG", "1"),
        ("CLAUDE_CODE_RETRY_WATCHDOG_MAX_WAIT_MS", "21600000"),
    ] {
        p.ralph_env.push((k.into(), v.into()));
    }
    let api = p.serve(|_| Reply::limited(429, Duration::from_secs(3600)));
    let started = std::time::Instant::now();
    let mut child = p.spawn_ralph(&["--json"]);
    let back = harness::wait_until(Duration::from_secs(30), || {
        !p.events_named("limit_wait").is_empty()
    });
    let took = started.elapsed();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    p.wait(&mut child, Duration::from_secs(30));
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert!(back, "no limit_wait within 30 s ({took:?})\n{}", diag());
    eprintln!("watchdog: the limit came back to ralph in {took:.1?}");
    let ended = p.events_named("iteration_ended");
    assert_eq!(ended[0]["outcome"], "usage limit", "{}", diag());
    assert!(
        p.events_named("checkpoint_requested").is_empty(),
        "{}",
        diag()
    );
    assert_eq!(api.main_requests().len(), 1, "{}", diag());
    assert_eq!(
        p.events_named("limit_wait")[0]["source"],
        "rate_limit_event"
    );
    p.assert_nothing_left();
    p.keep_if_asked();
}
