//! End-to-end tests of the loop (issue 2): the built `ralph run` on temp git
//! repos with `ralph sim` as the agent.

use crate::common;

use std::time::Duration;

use common::{Project, Run};

const PLAN: &str = "# Ship the parser\n\n- [ ] parser\n- [ ] tests\n";
const LIMIT: Duration = Duration::from_secs(60);

const ONE_ITERATION: &str = r#"
[[step]]
context = 30000
text = "Implementing the parser."
path = "parser.py"
content = "def parse(s):\n    return s.split(',')\n"

[[step]]
context = 42000
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"

[[step]]
context = 48000
path = "fix_plan.md"
old = "- [ ] tests"
new = "- [x] tests"

[[step]]
result = "All items are done.\n\n<promise>COMPLETE</promise>"
cost_usd = 0.25
"#;

#[test]
fn completes_in_one_iteration() {
    let p = Project::new(PLAN, ONE_ITERATION, "");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.ended()["outcome"], "completed");
    assert_eq!(run.of("iteration_started").len(), 1);
    let state = p.state();
    assert_eq!(state["status"], "completed");
    assert_eq!(state["iteration"], 1);
    assert_eq!(state["todo_items"].as_array().unwrap().len(), 0);
    assert_eq!(state["completed_items"][0], "parser");
    assert!((state["cost_usd"].as_f64().unwrap() - 0.25).abs() < 1e-9);
    assert_eq!(state["context_history"][0]["iteration"], 1);
    // 48000 of the usable 167000.
    assert_eq!(state["context_history"][0]["peak_percent"], 28.7);
    // The prompt went to the agent and is on disk; the raw transcript is kept.
    assert!(p.read("PROMPT.md").contains("<promise>COMPLETE</promise>"));
    assert!(p.read("PROMPT.md").contains("- [ ] parser"));
    let run_id = state["run_id"].as_str().unwrap();
    let transcript = p.read(&format!(".ralph/runs/{run_id}/iter-001.jsonl"));
    assert!(transcript.lines().count() >= 5);
    assert!(transcript.contains("\"type\":\"result\""));
    // The context was reported turn by turn.
    let peaks: Vec<f64> = run
        .of("context")
        .iter()
        .map(|e| e["reading"]["percent"].as_f64().unwrap())
        .collect();
    assert!(peaks.windows(2).all(|w| w[0] <= w[1]), "{peaks:?}");
    assert_eq!(*peaks.last().unwrap(), 28.7);
    // The event log holds the same events as --json output.
    let log = p.read(".ralph/events.jsonl");
    assert_eq!(log.lines().count(), run.events.len());
}

#[test]
fn completes_over_several_iterations_with_state_carried() {
    let scenario = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/sim/three-iterations.toml"),
    )
    .unwrap();
    let p = Project::new(PLAN, &scenario, "");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    // Iteration 2 checks the last item off: no third session to hear the
    // promise (issue 35).
    assert_eq!(run.of("iteration_started").len(), 2);
    let state = p.state();
    assert_eq!(state["iteration"], 2);
    assert_eq!(state["context_history"].as_array().unwrap().len(), 2);
    assert_eq!(state["history"].as_array().unwrap().len(), 2);
    // The agent's own commit (iteration 1) is in history.
    assert!(p.log().contains(&"parser".to_string()), "{:?}", p.log());
    // The second prompt knew about the first iteration.
    let prompt = p.read("PROMPT.md");
    assert!(prompt.contains("# Iteration 2"), "{prompt}");
    assert!(prompt.contains("iteration 1:"), "{prompt}");
    assert!(prompt.contains("- [x] parser"), "{prompt}");
}

#[test]
fn promise_with_open_items_is_premature_and_the_limit_ends_the_run() {
    let scenario = r#"
[[step]]
context = 20000
text = "Nothing to do, I think."
[[step]]
result = "<promise>COMPLETE</promise>"
"#;
    let p = Project::new(
        PLAN,
        scenario,
        "[loop]\nmax_iterations = 2\n[breaker]\nno_progress = 10\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert_eq!(run.of("premature_promise").len(), 2);
    assert_eq!(run.of("iteration_started").len(), 2);
    assert_eq!(p.state()["status"], "iteration_limit");
    assert!(
        run.ended()["reason"]
            .as_str()
            .unwrap()
            .contains("iteration limit")
    );
}

#[test]
fn without_require_plan_complete_the_promise_is_enough() {
    let scenario = "[[step]]\nresult = \"<promise>COMPLETE</promise>\"\n";
    let p = Project::new(PLAN, scenario, "[loop]\nrequire_plan_complete = false\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
}

#[test]
fn bad_config_exits_2_naming_key_and_line() {
    let p = Project::new(PLAN, ONE_ITERATION, "[loop]\nmax_iteration = 3\n");
    let out = p.ralph().arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains("max_iteration"), "{err}");
    assert!(err.contains("ralph.toml:5"), "{err}");
    assert!(err.contains("hint: "), "{err}");
    assert!(
        !p.path(".ralph").exists(),
        "nothing written on a config error"
    );
}

#[test]
fn missing_plan_exits_2() {
    let p = Project::new(PLAN, ONE_ITERATION, "");
    let out = p.ralph().args(["run", "nope.md"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope.md does not exist"));
}

#[test]
fn second_instance_is_refused_while_one_runs() {
    let scenario = "[[step]]\ncontext = 20000\ntext = \"working\"\n[[step]]\nsleep_ms = 3000\n[[step]]\npath = \"fix_plan.md\"\nold = \"- [ ] done\"\nnew = \"- [x] done\"\n[[step]]\nresult = \"<promise>COMPLETE</promise>\"\n";
    let p = Project::new("- [ ] done\n", scenario, "");
    let first = p.spawn_run(&[]);
    // Wait until the first one holds the lock and runs its agent.
    common::wait_for_event(&p, "iteration_started", Duration::from_secs(20));
    let second = p.ralph().arg("run").output().unwrap();
    assert_eq!(second.status.code(), Some(2));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains("already supervising"), "{err}");
    assert!(err.contains("hint: "), "{err}");
    let first = Run::wait(first, LIMIT);
    assert_eq!(first.code, Some(0), "{}", first.describe());
}

/// A mistyped `agent.command` is bad input before the first iteration
/// (issue 13; it used to fail every iteration until the breaker opened).
#[test]
fn agent_that_cannot_start_is_bad_input_before_the_first_iteration() {
    let p = Project::new(PLAN, ONE_ITERATION, "");
    p.write(
        "ralph.toml",
        "[agent]\ncommand = \"/nonexistent/claude\"\n[breaker]\nconsecutive_failures = 2\nsame_error = 9\nno_progress = 9\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert!(run.of("iteration_started").is_empty(), "{}", run.describe());
    assert!(
        run.stderr.starts_with(
            "error: `/nonexistent/claude` (agent.command) is not an executable file\nhint: install Claude Code"
        ),
        "{}",
        run.stderr
    );
    assert!(!p.path(".ralph/state.json").exists());
}

#[test]
fn a_new_run_continues_the_old_one_unless_fresh() {
    let scenario = "[[step]]\ncontext = 20000\ntext = \"hm\"\n[[step]]\nresult = \"still going\"\n";
    let p = Project::new(
        PLAN,
        scenario,
        "[loop]\nmax_iterations = 2\n[breaker]\nno_progress = 9\n",
    );
    assert_eq!(p.run(&[], LIMIT).code, Some(4));
    // Budgets count from the run's start (issue 13): two more iterations
    // need the per-invocation count.
    let run = p.run(&["--budget-per-invocation"], LIMIT);
    assert_eq!(run.code, Some(4));
    assert_eq!(run.of("run_started")[0]["first_iteration"], 3);
    assert_eq!(run.of("run_started")[0]["resumed"], true);
    assert_eq!(p.state()["iteration"], 4);
    let run = p.run(&["--fresh"], LIMIT);
    assert_eq!(run.of("run_started")[0]["first_iteration"], 1);
    assert_eq!(p.state()["iteration"], 2);
}

#[test]
fn human_output_off_a_terminal_is_plain_lines() {
    let p = Project::new(PLAN, ONE_ITERATION, "");
    let out = p.ralph().arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains('\x1b'), "no control characters: {err:?}");
    assert!(err.lines().all(|l| l.starts_with('[')), "{err}");
    assert!(err.contains("iter 1 ▕"), "{err}");
    assert!(err.contains("run ended: completed (exit 0)"), "{err}");
}
