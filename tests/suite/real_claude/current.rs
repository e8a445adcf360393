//! What Claude Code's recent releases changed, against the real CLI: a
//! billing refusal (`is_error: true` on a `success` result) stops the run
//! after one session; the retry watchdog, set in the user's environment,
//! does not make a rate-limited session wait quietly.

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
