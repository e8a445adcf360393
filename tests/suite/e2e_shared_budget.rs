//! Shared budgets granted before a session starts (issue 36,
//! docs/workers.md "Budgets"): with `--workers N`, `loop.max_iterations`
//! and `max_cost_usd` count across workers, and no worker's loop starts a
//! session the shared budget no longer covers. Sessions are counted by the
//! sim's `record_messages` (one line per prompt).

use crate::common;
use crate::e2e_workers::{LIMIT, SIX};

use std::path::Path;

use common::Project;

/// Works on its item for ever: each session appends to its file (progress,
/// so no breaker opens), costs $1.00, never checks off nor promises.
fn endless(log: &Path) -> String {
    format!(
        r#"record_messages = "{}"
cost_usd = 1.0

[[step]]
context = 20000
text = "Working."
command = 'mkdir -p out && date +%s%N >> "out/$RALPH_ITEM.log"'

[[step]]
sleep_ms = 300

[[step]]
result = "Still working."
"#,
        log.display()
    )
}

fn sessions(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn max_iterations_across_three_workers_pays_exactly_that_many_sessions() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("sessions.jsonl");
    let p = Project::new(SIX, &endless(&log), "[loop]\nmax_iterations = 4\n");
    let run = p.run(&["--workers", "3"], LIMIT);
    let paid = sessions(&log);
    eprintln!(
        "max_iterations = 4, three workers: exit {:?}, {paid} session(s)",
        run.code
    );
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert_eq!(run.ended()["outcome"], "iteration_limit");
    assert_eq!(paid, 4, "{}", run.describe());
    assert_eq!(run.ended()["iterations"], 4);
}

#[test]
fn max_cost_across_three_workers_overshoots_at_most_the_sessions_running() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("sessions.jsonl");
    let p = Project::new(SIX, &endless(&log), "[loop]\nmax_cost_usd = 2.5\n");
    let run = p.run(&["--workers", "3"], LIMIT);
    let paid = sessions(&log);
    let cost = run.ended()["cost_usd"].as_f64().unwrap();
    eprintln!(
        "max_cost_usd = 2.50, three workers: exit {:?}, {paid} session(s), ${cost:.2}",
        run.code
    );
    assert_eq!(run.code, Some(5), "{}", run.describe());
    // The three first sessions start with nothing spent; once one ends at
    // $1.00, the two running are expected to reach $3.00: none more.
    assert_eq!(paid, 3, "{}", run.describe());
    assert!(cost <= 3.0 + 1e-9, "${cost}");
}
