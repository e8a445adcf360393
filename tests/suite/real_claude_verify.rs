//! `[verify]` with the real Claude Code CLI (issue 23, case 1): the CLI,
//! driven by the mock API, writes a parser with a syntax error, checks its
//! item off and claims completion; ralph runs the project's check, refuses
//! the completion and sends the next session back with the failure first;
//! that session fixes and commits, and the run completes over passing
//! checks. Skipped without the CLI, as `real_claude.rs` says.

use std::time::Duration;

use regex::Regex;
use serde_json::json;

use crate::real_claude::harness::{self, Project, Setup};
use crate::real_claude::mock_api::{ApiRequest, Reply};

fn iteration_of(req: &ApiRequest) -> u32 {
    let re = Regex::new(r"# Iteration (\d+):").unwrap();
    re.captures(&req.first_user_text())
        .and_then(|c| c[1].parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_completion_claimed_over_failing_tests_is_sent_back_to_fix_them() {
    let _serial = harness::serial();
    let Some(claude) =
        harness::claude("a_completion_claimed_over_failing_tests_is_sent_back_to_fix_them")
    else {
        return;
    };
    let setup = Setup {
        plan: "# E2E plan\n\n- [ ] Write parser.py: parse(s) splits s on commas\n",
        extra: "[verify]\ncommands = [\"python3 -c 'import ast; ast.parse(open(\\\"parser.py\\\").read())'\"]\n",
        ..Setup::default()
    };
    let p = Project::new("verify", &claude, &setup);
    let (parser, plan) = (p.path("parser.py"), p.path("fix_plan.md"));
    let api = p.serve(move |req| match (iteration_of(req), req.assistant_turns()) {
        (1, 0) => Reply::turn(20_000)
            .text("I'll write the parser.")
            .tool(
                "Write",
                json!({"file_path": parser, "content": "def parse(s)\n    return s.split(',')\n"}),
            ),
        (1, 1) => Reply::turn(22_000).tool("Read", json!({"file_path": plan})),
        (1, 2) => Reply::turn(24_000).tool(
            "Edit",
            json!({
                "file_path": plan,
                "old_string": "- [ ] Write parser.py",
                "new_string": "- [x] Write parser.py",
            }),
        ),
        (1, _) => Reply::turn(26_000).text("The parser is done.\n\n<promise>COMPLETE</promise>"),
        (_, 0) => Reply::turn(20_000)
            .text("The check fails with a SyntaxError; reading the parser.")
            .tool("Read", json!({"file_path": parser})),
        (_, 1) => Reply::turn(22_000)
            .text("The colon is missing.")
            .tool(
                "Write",
                json!({"file_path": parser, "content": "def parse(s):\n    return s.split(',')\n"}),
            ),
        (_, 2) => Reply::turn(24_000).tool(
            "Bash",
            json!({
                "command": "python3 -c 'import ast; ast.parse(open(\"parser.py\").read())' && git add parser.py fix_plan.md && git commit -q -m 'parser: fix the syntax error'",
                "description": "Check and commit the fix",
            }),
        ),
        (_, _) => Reply::turn(26_000).text("Fixed and committed.\n\n<promise>COMPLETE</promise>"),
    });

    let (code, took) = p.run_ralph(&["--json"], Duration::from_secs(90));
    let reqs = api.main_requests();
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    eprintln!(
        "verify: ralph took {took:.1?}, {} main requests",
        reqs.len()
    );
    assert_eq!(code, 0, "completes once the checks pass\n{}", diag());

    // The first claim was refused: the check ran and failed.
    let refused = p.events_named("completion_refused");
    assert_eq!(refused.len(), 1, "{}", diag());
    assert_eq!(refused[0]["iteration"], 1);
    let verify = p.events_named("verify");
    assert_eq!(verify.len(), 2, "{}", diag());
    assert_eq!(verify[0]["passed"], false);
    assert!(
        verify[0]["checks"][0]["output"]
            .as_str()
            .unwrap()
            .contains("SyntaxError"),
        "{}",
        verify[0]
    );
    assert_eq!(verify[1]["passed"], true);

    // A second session, whose prompt opens with the failure.
    let second: Vec<_> = reqs.iter().filter(|r| iteration_of(r) == 2).collect();
    assert!(!second.is_empty(), "a second iteration ran\n{}", diag());
    let prompt = second[0].first_user_text();
    let fix = prompt
        .find("## Fix first: the project's checks fail")
        .unwrap_or_else(|| panic!("prompt: {prompt}"));
    assert!(fix < prompt.find("## Plan").unwrap(), "prompt: {prompt}");
    assert!(prompt.contains("SyntaxError"), "prompt: {prompt}");
    assert_ne!(reqs[0].session(), second[0].session(), "a fresh session");

    // The fix is the agent's commit; the tree is clean; "completed" is true.
    assert_eq!(
        p.read("parser.py"),
        "def parse(s):\n    return s.split(',')\n"
    );
    assert!(
        p.log().iter().any(|s| s == "parser: fix the syntax error"),
        "{:?}",
        p.log()
    );
    let state = p.state();
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(state["verify"]["passed"], true);
    let ended = p.events_named("run_ended");
    assert_eq!(ended[0]["outcome"], "completed");
    p.keep_if_asked();
}
