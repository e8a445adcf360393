//! Paid sessions only for work (issue 35): a plan with nothing open ends
//! the run without another session (its checks pass), a fatal agent error
//! stops the run at its first occurrence. Sessions are counted from what
//! the sim itself records (`record_messages`: one prompt per session).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::Project;

const LIMIT: Duration = Duration::from_secs(90);

/// The sessions the sim played: the distinct iterations it got a prompt in.
fn sessions(p: &Project) -> usize {
    let Ok(text) = std::fs::read_to_string(p.path(".ralph/messages.jsonl")) else {
        return 0;
    };
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["iteration"].clone())
        .map(|i| i.to_string())
        .collect::<BTreeSet<_>>()
        .len()
}

const PLAN: &str = "# Ship it\n\n- [ ] parser\n";

/// Checks its only item off and writes the code, and forgets the promise.
const CHECK_OFF_NO_PROMISE: &str = r#"
record_messages = ".ralph/messages.jsonl"

[[step]]
context = 30000
path = "parser.py"
content = "def parse(s):\n    return s.split(',')\n"
[[step]]
context = 40000
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[step]]
result = "Done with the parser."
"#;

#[test]
fn a_plan_checked_off_without_the_promise_completes_without_another_session() {
    let p = Project::new(PLAN, CHECK_OFF_NO_PROMISE, "");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(sessions(&p), 1, "{}", run.describe());
    let ended = run.ended();
    assert_eq!(ended["outcome"], "completed", "{}", run.describe());
    let reason = ended["reason"].as_str().unwrap();
    assert!(
        reason.contains("no open items") && reason.contains("did not say the promise"),
        "{reason}"
    );
    // The agent's work is committed with the completion.
    assert!(
        p.repo()
            .statuses(None)
            .unwrap()
            .iter()
            .all(|s| s.path() != Some("parser.py"))
    );
}

#[test]
fn a_finished_plan_is_completed_at_the_start_of_a_run_with_no_session() {
    let p = Project::new(
        "# Ship it\n\n- [x] parser\n- [x] lexer\n",
        CHECK_OFF_NO_PROMISE,
        "",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(sessions(&p), 0, "{}", run.describe());
    assert!(run.of("iteration_started").is_empty(), "{}", run.describe());
    let reason = run.ended()["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("no open items"), "{reason}");
}

const CHECK: &str = "[verify]\ncommands = [\"test -f parser.py\"]\n";

#[test]
fn a_finished_plan_whose_checks_fail_gets_a_session_to_fix_them_then_completes() {
    // Checked off by hand, but the checks fail: there is work (the fix).
    let p = Project::new("# Ship it\n\n- [x] parser\n", CHECK_OFF_NO_PROMISE, CHECK);
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(sessions(&p), 1, "{}", run.describe());
    let verifies = run.of("verify");
    assert_eq!(verifies.len(), 2, "{}", run.describe());
    assert_eq!(verifies[0]["passed"], false);
    assert_eq!(verifies[1]["passed"], true);
    let reason = run.ended()["reason"].as_str().unwrap();
    assert!(reason.contains("checks pass"), "{reason}");
}

#[test]
fn a_plan_checked_off_over_failing_checks_is_not_completed() {
    // The checks never pass: sessions go on until the breaker, never "completed".
    let p = Project::new(
        PLAN,
        CHECK_OFF_NO_PROMISE,
        "[verify]\ncommands = [\"false\"]\n[loop]\nmax_iterations = 3\n",
    );
    let run = p.run(&[], LIMIT);
    assert_ne!(run.code, Some(0), "{}", run.describe());
    assert_ne!(run.ended()["outcome"], "completed");
}
