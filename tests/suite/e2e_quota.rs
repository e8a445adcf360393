//! The quota guard (`[quota]`, docs/quota.md) end to end with `ralph sim`:
//! the agent reports its subscription usage in `rate_limit_event` lines as
//! Claude Code does; past the configured share the run stops (exit 5).

use crate::common;

use std::time::Duration;

use common::Project;

const PLAN: &str = "# Ship the parser\n\n- [ ] parser\n- [ ] tests\n";
const LIMIT: Duration = Duration::from_secs(60);

/// One iteration: starts the parser, then the agent's usage report says
/// the weekly window is `weekly` used, then it keeps working for a while.
fn usage_report(weekly: f64) -> String {
    format!(
        r#"
[[step]]
context = 20000
path = "parser.py"
content = "def parse(s):\n"
[[step]]
rate_limit = "allowed_warning"
rate_limit_type = "seven_day"
resets_in_secs = 86400
utilization = {weekly}
[[step]]
delay_ms = 2500
text = "Still on the parser."
[[step]]
result = "Parser started."
"#
    )
}

#[test]
fn usage_past_the_weekly_share_checkpoints_and_ends_the_run_with_exit_5() {
    let p = Project::new(
        PLAN,
        &usage_report(0.93),
        "[quota]\nweekly_percent = 90\n[loop]\nmax_iterations = 5\n[breaker]\nno_progress = 9\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(5), "{}", run.describe());
    let reason = run.ended()["reason"].as_str().unwrap().to_string();
    assert!(
        reason.starts_with(
            "quota guard: the weekly limit is 93% used (quota.weekly_percent 90%), resets "
        ),
        "{reason}"
    );
    assert_eq!(run.ended()["outcome"], "budget_spent");
    // The guard acted inside the iteration: a checkpoint, the work committed.
    assert_eq!(run.of("iteration_started").len(), 1, "{}", run.describe());
    let cp = run.of("checkpoint");
    assert_eq!(cp.len(), 1, "{}", run.describe());
    assert_eq!(cp[0]["trigger"], "budget");
    assert!(
        p.head_files().contains(&"parser.py".to_string()),
        "{:?}",
        p.head_files()
    );
    let requested = run.of("checkpoint_requested");
    assert_eq!(requested[0]["trigger"], "budget");

    // The state, `ralph status` and the report say how full the windows are.
    assert_eq!(p.state()["quota"]["weekly"]["percent"], 93.0);
    let status = p.ralph().arg("status").output().unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("quota      weekly 93% (stop at 90%), resets "),
        "{status}"
    );
    let json = p.ralph().args(["status", "--json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["quota"][0]["window"], "weekly");
    assert_eq!(json["quota"][0]["stop_at_percent"], 90.0);
    let report = p.ralph().args(["report", "--json"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["quota"][0]["percent"], 93.0, "{report:#}");
    assert!(p.read(".ralph/report.html").contains("Weekly quota"));

    // A second run does not start an agent while the window has not reset.
    let again = p.run(&[], LIMIT);
    assert_eq!(again.code, Some(5), "{}", again.describe());
    assert!(
        again.of("iteration_started").is_empty(),
        "{}",
        again.describe()
    );
}

#[test]
fn usage_under_the_share_or_unguarded_changes_nothing() {
    for (usage, config) in [
        (0.5, "[quota]\nweekly_percent = 90\n"),
        (0.99, ""),
        (0.99, "[quota]\nfive_hour_percent = 90\n"),
    ] {
        let p = Project::new(
            PLAN,
            &usage_report(usage),
            &format!("{config}[loop]\nmax_iterations = 2\n[breaker]\nno_progress = 9\n"),
        );
        let run = p.run(&[], LIMIT);
        assert_eq!(run.code, Some(4), "{config}: {}", run.describe());
        assert!(run.of("checkpoint").is_empty(), "{}", run.describe());
    }
}
