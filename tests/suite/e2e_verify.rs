//! `[verify]` end to end (issue 23, case 1): a completion is accepted only
//! over passing checks, the next prompt carries the failure, a hanging
//! check is killed at its timeout, and a completion never leaves the tree
//! dirty without saying so.

use std::time::Duration;

use crate::common::{self, Project, processes_matching};

const PLAN: &str = "# Ship the parser\n\n- [ ] parser\n";
const LIMIT: Duration = Duration::from_secs(90);

/// Iteration 1 writes a parser with a syntax error, checks its item,
/// commits nothing and promises; iteration 2 fixes it and promises again.
const BROKEN_THEN_FIXED: &str = r#"
record_messages = ".ralph/messages.jsonl"

[[iteration]]
[[iteration.step]]
context = 30000
path = "parser.py"
content = "def parse(s)\n    return s.split(',')\n"
[[iteration.step]]
context = 40000
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[iteration.step]]
result = "Done.\n\n<promise>COMPLETE</promise>"

[[iteration]]
[[iteration.step]]
context = 30000
path = "parser.py"
content = "def parse(s):\n    return s.split(',')\n"
[[iteration.step]]
result = "Fixed the syntax error.\n\n<promise>COMPLETE</promise>"
"#;

const CHECK: &str = "[verify]\ncommands = [\"python3 -c 'import ast; ast.parse(open(\\\"parser.py\\\").read())'\"]\n";

fn messages(p: &Project) -> Vec<serde_json::Value> {
    p.read(".ralph/messages.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn status_short(p: &Project) -> Vec<String> {
    let repo = p.repo();
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true).recurse_untracked_dirs(true);
    repo.statuses(Some(&mut opts))
        .unwrap()
        .iter()
        .map(|s| s.path().unwrap().to_string())
        .filter(|p| !p.starts_with(".ralph/") && p != "PROMPT.md")
        .collect()
}

#[test]
fn a_promise_over_failing_checks_is_refused_and_the_next_prompt_fixes_them() {
    let p = Project::new(PLAN, BROKEN_THEN_FIXED, CHECK);
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    // Iteration 1's promise was refused, iteration 2's accepted.
    let refused = run.of("completion_refused");
    assert_eq!(refused.len(), 1, "{}", run.describe());
    assert_eq!(refused[0]["iteration"], 1);
    let verify = run.of("verify");
    assert_eq!(verify.len(), 2);
    assert_eq!(verify[0]["when"], "completion");
    assert_eq!(verify[0]["passed"], false);
    assert_eq!(verify[0]["checks"][0]["status"], "failed");
    assert!(
        verify[0]["checks"][0]["output"]
            .as_str()
            .unwrap()
            .contains("SyntaxError"),
        "{}",
        verify[0]
    );
    assert_eq!(verify[1]["passed"], true);
    let ended = run.ended();
    assert_eq!(ended["outcome"], "completed");
    assert_eq!(ended["iterations"], 2);
    let iterations = run.of("iteration_ended");
    assert_eq!(iterations[0]["outcome"], "refused");
    assert!(
        iterations[0]["error"]
            .as_str()
            .unwrap()
            .starts_with("verify failed: `python3 -c")
    );
    // The second prompt opens with the failure, before the plan.
    let prompt2 = messages(&p)
        .into_iter()
        .find(|m| m["iteration"] == 2)
        .unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    let fix = prompt2
        .find("## Fix first: the project's checks fail")
        .unwrap_or_else(|| panic!("{prompt2}"));
    assert!(fix < prompt2.find("## Plan").unwrap());
    assert!(prompt2.contains("SyntaxError"), "{prompt2}");
    assert!(prompt2.contains("when it claimed the work was complete"));
    // The completion left nothing uncommitted: ralph committed it.
    assert_eq!(status_short(&p), Vec::<String>::new());
    assert!(
        p.log()[0].starts_with("ralph: final commit at completion (iteration 2)"),
        "{:?}",
        p.log()
    );
    assert!(
        ended["reason"]
            .as_str()
            .unwrap()
            .contains("uncommitted changes were committed"),
        "{}",
        ended["reason"]
    );
    // The state keeps the latest verification; the prompt no longer asks.
    assert_eq!(p.state()["verify"]["passed"], true);
    // The morning report's verify lane: text, JSON and the page.
    let out = p.ralph().arg("report").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "verify         ✗✓  2 run(s), 1 failed · last (iteration 2): passed (1 command)"
        ),
        "{text}"
    );
    let out = p.ralph().args(["report", "--json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["verify"][0]["passed"], false);
    assert_eq!(json["verify"][0]["iteration"], 1);
    assert_eq!(json["verify"][1]["passed"], true);
    let page = p.read(".ralph/report.html");
    assert!(page.contains("<h2>Verify</h2>"));
    assert!(page.contains("2 run(s) of the project's checks: 1 passed, 1 failed."));
}

#[test]
fn checks_that_never_pass_never_complete_the_run() {
    // The agent claims completion every time over the same failing check.
    let scenario = r#"
[[step]]
context = 30000
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[step]]
result = "<promise>COMPLETE</promise>"
"#;
    let p = Project::new(
        PLAN,
        scenario,
        "[loop]\nmax_iterations = 8\n[verify]\ncommands = [\"echo 'test_parse FAILED'; exit 1\"]\n[hooks]\non_verify = [\"echo $RALPH_VERIFY $RALPH_VERIFY_WHEN >> .ralph/hooks.txt\"]\n",
    );
    let run = p.run(&[], LIMIT);
    let ended = run.ended();
    assert_ne!(ended["outcome"], "completed", "{}", run.describe());
    // Iteration 1 ticks the item (progress); 2 to 4 change nothing: the
    // breaker's no-progress rule ends the night (exit 3), each promise refused.
    assert_eq!(run.code, Some(3), "{}", run.describe());
    assert_eq!(run.of("completion_refused").len(), 4);
    assert!(
        ended["reason"]
            .as_str()
            .unwrap()
            .starts_with("circuit breaker opened"),
        "{}",
        ended["reason"]
    );
    assert_eq!(p.state()["status"], "breaker_open");
    // `ralph status` says why.
    let out = p.ralph().arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("verify     failed: `echo 'test_parse FAILED'; exit 1` exited with 1 after iteration 4 (completion)"),
        "{text}"
    );
    let out = p.ralph().args(["status", "--json"]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["verify"]["passed"], false);
    // Each result reached the on_verify hook.
    assert_eq!(p.read(".ralph/hooks.txt"), "failed completion\n".repeat(4));
}

#[test]
fn passing_checks_complete_as_before() {
    let scenario = r#"
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
command = "git add -A && git -c user.name=a -c user.email=a@b commit -qm parser"
[[step]]
result = "<promise>COMPLETE</promise>"
"#;
    let p = Project::new(PLAN, scenario, CHECK);
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(
        run.ended()["reason"],
        "the agent kept its promise in iteration 1"
    );
    assert_eq!(run.of("verify")[0]["passed"], true);
    assert_eq!(p.log()[0], "parser");
}

#[test]
fn a_hanging_check_is_killed_at_its_timeout_with_nothing_left() {
    let marker = format!("verify-hang-{}", std::process::id());
    let scenario = r#"
[[step]]
context = 30000
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[step]]
result = "<promise>COMPLETE</promise>"
"#;
    let p = Project::new(
        PLAN,
        scenario,
        &format!(
            "[loop]\nmax_iterations = 1\n[verify]\ntimeout = \"1s\"\ncommands = [\"sh -c 'sleep 300; : {marker}' & sleep 300\"]\n"
        ),
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let v = run.of("verify");
    assert_eq!(v[0]["checks"][0]["status"], "timed_out");
    assert!(v[0]["checks"][0]["seconds"].as_f64().unwrap() < 10.0);
    assert!(run.elapsed < Duration::from_secs(30));
    assert_eq!(
        run.of("completion_refused")[0]["reason"],
        "verify failed: `sh -c 'sleep 300; : ".to_string() + &marker + "' & sleep 300` timed out"
    );
    assert_eq!(processes_matching(&marker), Vec::<i32>::new());
}

#[test]
fn a_completion_over_a_dirty_tree_says_so_when_it_cannot_commit() {
    // No [verify] at all: the dirty tree rule holds on its own.
    let scenario = r#"
[[step]]
context = 30000
path = "parser.py"
content = "def parse(s):\n    return s\n"
[[step]]
context = 40000
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[step]]
result = "<promise>COMPLETE</promise>"
"#;
    let p = Project::new(PLAN, scenario, "[git]\nwip_commit = false\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let reason = run.ended()["reason"].as_str().unwrap().to_string();
    assert!(
        reason.contains("NOT committed: 2 file(s) left uncommitted (git.wip_commit is off)"),
        "{reason}"
    );
    assert!(reason.contains("parser.py"), "{reason}");
    assert!(
        p.state()["exit_reason"]
            .as_str()
            .unwrap()
            .contains("NOT committed")
    );
}

#[test]
fn doctor_runs_the_checks_once_and_init_proposes_them() {
    let p = Project::new(
        PLAN,
        common::IDLE,
        "[verify]\ncommands = [\"echo ran >> ran.txt\", \"echo boom; exit 2\", \"echo never\"]\n",
    );
    let out = p.ralph().args(["doctor", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let verify: Vec<&serde_json::Value> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == "verify")
        .collect();
    assert_eq!(verify.len(), 3, "{report}");
    assert_eq!(verify[0]["verdict"], "ok");
    assert_eq!(verify[1]["verdict"], "problem");
    assert_eq!(
        verify[1]["detail"],
        "`echo boom; exit 2` exited with 2: boom"
    );
    assert_eq!(verify[2]["verdict"], "warning");
    assert_eq!(p.read("ran.txt"), "ran\n");

    // `ralph init` in a Rust project proposes `cargo test`.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("Cargo.toml"), "[package]\nname = \"x\"\n").unwrap();
    let out = std::process::Command::new(common::BIN)
        .arg("init")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("proposed [verify] commands (ralph runs them before it accepts a completion): cargo test"),
        "{stdout}"
    );
    let toml = std::fs::read_to_string(dir.path().join("ralph.toml")).unwrap();
    assert!(toml.contains("\ncommands = [\"cargo test\"]"), "{toml}");
}

#[test]
fn checks_run_after_a_check_off_when_asked_and_are_booked_to_the_item() {
    let scenario = r#"
[[iteration]]
[[iteration.step]]
context = 30000
path = "parser.py"
content = "x = 1\n"
[[iteration.step]]
context = 40000
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[iteration.step]]
result = "parser done"

[[iteration]]
[[iteration.step]]
context = 30000
path = "fix_plan.md"
old = "- [ ] tests"
new = "- [x] tests"
[[iteration.step]]
result = "<promise>COMPLETE</promise>"
"#;
    let p = Project::new(
        "# Ship\n\n- [ ] parser\n- [ ] tests\n",
        scenario,
        "[verify]\ncommands = [\"test -f parser.py\"]\non = [\"completion\", \"item\"]\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let v = run.of("verify");
    assert_eq!(v.len(), 2, "{}", run.describe());
    assert_eq!(v[0]["when"], "item");
    assert_eq!(v[0]["iteration"], 1);
    assert_eq!(v[0]["items"][0], "parser");
    assert_eq!(v[1]["when"], "completion");
    let items = p.state()["items"].clone();
    let parser = items
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["item"] == "parser")
        .unwrap_or_else(|| panic!("{items}"));
    assert_eq!(parser["verified"], true);
}
