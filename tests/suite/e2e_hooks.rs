//! End-to-end tests of the user's hooks (docs/hooks.md): what a hook gets
//! (RALPH_* variables, the event's line on stdin), the new hook points, the
//! example tracker hooks in dry-run mode, and the process rules: big
//! output, background children, timeouts and signals never hold up ralph.

use crate::common;

use std::time::{Duration, Instant};

use common::{
    IDLE, Project, QUICK_L2, Run, processes_matching, wait_for_event, wait_for_file,
    wait_for_process,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

const PLAN: &str = "# Ship the parser\n\n- [ ] parser (#123, ENG-42)\n- [ ] tests\n";
const LIMIT: Duration = Duration::from_secs(60);

/// The lines of `.ralph/events.jsonl` for events named `kind`, as written.
fn log_lines(p: &Project, kind: &str) -> Vec<String> {
    let needle = format!("\"event\":\"{kind}\"");
    p.read(".ralph/events.jsonl")
        .lines()
        .filter(|l| l.contains(&needle))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn assert_hooks_ok(run: &Run) {
    let failed = run
        .of("hook")
        .into_iter()
        .filter(|h| h["ok"] != true)
        .count();
    assert_eq!(failed, 0, "{}", run.describe());
}

fn hook_events<'a>(run: &'a Run, hook: &str) -> Vec<&'a Value> {
    run.of("hook")
        .into_iter()
        .filter(|e| e["hook"] == hook)
        .collect()
}

#[test]
fn hooks_get_the_plan_item_the_reason_and_the_event_line_on_stdin() {
    let hooks = r#"[hooks]
on_checkpoint = ["printf '%s|%s|%s|%s' \"$RALPH_HOOK\" \"$RALPH_ITEM\" \"$RALPH_REASON\" \"$RALPH_HANDOFF\" > .ralph/checkpoint.env; cat > .ralph/checkpoint.json"]
on_level = ["sleep 0.5; printf '%s|%s|%s\n' \"$RALPH_LEVEL\" \"$RALPH_FROM_LEVEL\" \"$RALPH_PERCENT\" >> .ralph/level.env; cat >> .ralph/level.json"]
on_iteration_end = ["cat > .ralph/iteration.json"]
on_exit = ["printf '%s|%s|%s' \"$RALPH_OUTCOME\" \"$RALPH_EXIT_CODE\" \"$RALPH_HANDOFF\" > .ralph/exit.env; cat > .ralph/exit.json"]
"#;
    let p = Project::new(PLAN, QUICK_L2, hooks);
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert_hooks_ok(&run);
    let handoff = run.of("checkpoint")[0]["handoff"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        p.read(".ralph/checkpoint.env"),
        format!(
            "on_checkpoint|parser (#123, ENG-42)|context reached L2 at 87.4% of the usable window|{handoff}"
        )
    );
    // stdin holds exactly the event's line of events.jsonl.
    for (file, kind) in [
        (".ralph/checkpoint.json", "checkpoint"),
        (".ralph/level.json", "level_changed"),
        (".ralph/iteration.json", "iteration_ended"),
        (".ralph/exit.json", "run_ended"),
    ] {
        assert_eq!(p.read(file), log_lines(&p, kind).concat(), "{kind}");
    }
    // on_level runs in the background: the agent was gone before it
    // ended, and what the agent left behind is ended only after it.
    assert_eq!(p.read(".ralph/level.env"), "L2|L0|87\n");
    assert_eq!(hook_events(&run, "on_level").len(), 1, "{}", run.describe());
    // The latest handoff is there for the hooks after the checkpoint too,
    // and run_ended is still the last event.
    assert_eq!(
        p.read(".ralph/exit.env"),
        format!("iteration_limit|4|{handoff}")
    );
    assert_eq!(run.events.last().unwrap()["event"], "run_ended");
}

#[test]
fn the_example_tracker_hooks_print_the_exact_request_in_dry_run() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/hooks");
    let hooks = format!(
        "[hooks]\non_checkpoint = [\"RALPH_HOOK_DRY_RUN=1 sh {examples}/github.sh > .ralph/github.out\", \"RALPH_HOOK_DRY_RUN=1 sh {examples}/linear.sh > .ralph/linear.out\"]\n"
    );
    let p = Project::new(PLAN, QUICK_L2, &hooks);
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert_hooks_ok(&run);
    let cp = run.of("checkpoint")[0];
    let commit = cp["commit"].as_str().unwrap();
    let handoff = cp["handoff"].as_str().unwrap();
    // The shell's $(cat …) drops the handoff's final newlines.
    let text = p.read(handoff).trim_end_matches('\n').to_string();
    assert!(text.contains("parser (#123, ENG-42)"), "{text}");
    let head = format!(
        "**ralph** `on_checkpoint`, iteration 1: context reached L2 at 87.4% of the usable window\n\nWIP commit: {commit}"
    );
    assert_eq!(
        p.read(".ralph/github.out"),
        format!(
            "gh issue comment 123 --body-file - <<'RALPH_BODY'\n{head}\n\n<details><summary>Handoff {handoff}</summary>\n\n{text}\n\n</details>\nRALPH_BODY\n"
        )
    );
    let string = |s: &str| serde_json::to_string(s).unwrap();
    let request = format!(
        r#"{{"query":{},"variables":{{"input":{{"issueId":"ENG-42","body":{}}}}}}}"#,
        string(
            "mutation($input: CommentCreateInput!) { commentCreate(input: $input) { success comment { url } } }"
        ),
        string(&format!("{head}\n\n{text}"))
    );
    let linear = p.read(".ralph/linear.out");
    assert_eq!(
        linear,
        format!(
            "curl -sS -X POST https://api.linear.app/graphql -H 'Content-Type: application/json' -H \"Authorization: $LINEAR_API_KEY\" --data-binary @- <<'RALPH_BODY'\n{request}\nRALPH_BODY\n"
        )
    );
}

#[test]
fn the_example_hooks_do_nothing_without_an_issue_in_the_item() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/hooks");
    for script in ["github.sh", "linear.sh"] {
        let out = std::process::Command::new("sh")
            .arg(format!("{examples}/{script}"))
            .env("RALPH_ITEM", "tests for the parser")
            .env("RALPH_HOOK", "on_exit")
            .env_remove("RALPH_HOOK_DRY_RUN")
            .env_remove("LINEAR_API_KEY")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{script}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("nothing to comment on"),
            "{script}"
        );
    }
}

#[test]
fn sigint_during_a_long_hook_ends_ralph_at_once_and_the_hooks_processes() {
    let hooks = r#"[hooks]
on_checkpoint = ["touch .ralph/hook-started; sleep 631 & sleep 632"]
on_iteration_end = ["sleep 633"]
timeout = "10m"
"#;
    let p = Project::new(PLAN, QUICK_L2, hooks);
    let child = p.spawn_run(&[]);
    wait_for_file(&p, ".ralph/hook-started", Duration::from_secs(30));
    wait_for_process("sleep 632", Duration::from_secs(10));
    let signalled = Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(130), "{}", run.describe());
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "{:?}",
        signalled.elapsed()
    );
    for sleep in ["sleep 631", "sleep 632", "sleep 633"] {
        assert!(processes_matching(sleep).is_empty(), "{sleep} left running");
    }
    let cp = hook_events(&run, "on_checkpoint");
    assert!(
        cp[0]["detail"].as_str().unwrap().contains("got a signal"),
        "{}",
        run.describe()
    );
    let end = hook_events(&run, "on_iteration_end");
    assert_eq!(end[0]["detail"], "not run: ralph was interrupted");
    assert_eq!(run.of("iteration_started").len(), 1);
}

#[test]
fn big_output_and_background_children_do_not_hold_up_the_run() {
    let hooks = r#"[hooks]
on_iteration_end = ["head -c 200000 /dev/zero | tr '\\0' x >&2; printf '\\nfailed\\n' >&2; exit 1", "sleep 634 & echo started"]
timeout = "30s"
"#;
    let p = Project::new(PLAN, IDLE, hooks);
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(
        run.elapsed < Duration::from_secs(15),
        "{:?}\n{}",
        run.elapsed,
        run.describe()
    );
    // The noisy hook failed on its own (not by the timeout); the second
    // one ended at once although its child lived on, and the child is gone.
    let end: Vec<(bool, &str)> = hook_events(&run, "on_iteration_end")
        .iter()
        .map(|e| (e["ok"].as_bool().unwrap(), e["detail"].as_str().unwrap()))
        .collect();
    assert_eq!(end, [(false, "exit status: 1: failed"), (true, "started")]);
    assert!(processes_matching("sleep 634").is_empty());
}

#[test]
fn a_failing_hook_is_retried_and_every_attempt_logged() {
    let hooks = r#"[hooks]
on_iteration_end = ["n=$(cat .ralph/n 2>/dev/null || echo 0); echo $((n+1)) > .ralph/n; [ $n -ge 1 ] || { echo flaky >&2; exit 1; }"]
on_exit = ["exit 3"]
retries = 1
"#;
    let p = Project::new(PLAN, IDLE, hooks);
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let attempts = |hook| -> Vec<(bool, u64, String)> {
        hook_events(&run, hook)
            .iter()
            .map(|e| {
                (
                    e["ok"].as_bool().unwrap(),
                    e["attempt"].as_u64().unwrap(),
                    e["detail"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    assert_eq!(
        attempts("on_iteration_end"),
        [
            (false, 1, "exit status: 1: flaky; retrying in 1s".into()),
            (true, 2, String::new()),
        ]
    );
    assert_eq!(
        attempts("on_exit"),
        [
            (false, 1, "exit status: 3; retrying in 1s".into()),
            (false, 2, "exit status: 3".into()),
        ]
    );
    assert_eq!(
        run.ended()["exit_code"],
        4,
        "a failing hook changes nothing"
    );
}

#[test]
fn on_breaker_and_on_limit_wait_fire_with_their_facts() {
    let hooks = r#"[breaker]
no_progress = 1
[hooks]
on_breaker = ["printf '%s|%s|%s' \"$RALPH_BREAKER\" \"$RALPH_RULE\" \"$RALPH_REASON\" > .ralph/breaker.env"]
"#;
    let p = Project::new(PLAN, IDLE, hooks);
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(3), "{}", run.describe());
    let opened = &run.of("breaker")[0];
    assert_eq!(
        p.read(".ralph/breaker.env"),
        format!("open|no_progress|{}", opened["message"].as_str().unwrap())
    );

    let limit = "[[step]]\nrate_limit = \"rejected\"\nresets_in_secs = 600\n[[step]]\nerror = \"rate_limit\"\nresets_in_secs = 600\n";
    let hooks = r#"[hooks]
on_limit_wait = ["printf '%s|%s|%s' \"$RALPH_UNTIL\" \"$RALPH_WAIT_SECONDS\" \"$RALPH_REASON\" > .ralph/wait.env; cat > .ralph/wait.json"]
"#;
    let p = Project::new(PLAN, limit, hooks);
    let child = p.spawn_run(&[]);
    wait_for_event(&p, "limit_wait", Duration::from_secs(30));
    // The hook has finished once its report is in the log.
    wait_for_event(&p, "hook", Duration::from_secs(10));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(130), "{}", run.describe());
    let wait = &run.of("limit_wait")[0];
    assert_eq!(
        p.read(".ralph/wait.env"),
        format!(
            "{}|{}|{}",
            wait["until"].as_str().unwrap(),
            wait["seconds"],
            wait["detail"].as_str().unwrap()
        )
    );
    assert_eq!(
        p.read(".ralph/wait.json"),
        log_lines(&p, "limit_wait").concat()
    );
}

/// One publisher: a hook is told the plan's current item as it is when the
/// hook fires, whichever part of the run published its event. Here the
/// agent checks off the first item, then crosses L2: `on_level` (published
/// while the agent runs) and `on_checkpoint` (after it) both name the second
/// item; `on_level` used to be told the item the iteration started with.
#[test]
fn every_hook_is_told_the_same_plan_item() {
    let scenario = r##"
[[step]]
context = 20000
text = "Parser done."
path = "fix_plan.md"
content = "# Ship the parser\n\n- [x] parser (#123, ENG-42)\n- [ ] tests\n"
[[step]]
context = 146000
text = "Writing tests."
path = "work.txt"
content = "work in progress\n"
"##;
    let hooks = r#"[hooks]
on_level = ["printf 'on_level|%s\n' \"$RALPH_ITEM\" >> .ralph/items"]
on_checkpoint = ["printf 'on_checkpoint|%s\n' \"$RALPH_ITEM\" >> .ralph/items"]
"#;
    let p = Project::new(PLAN, scenario, hooks);
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert_hooks_ok(&run);
    let mut told: Vec<String> = p.read(".ralph/items").lines().map(String::from).collect();
    told.sort();
    assert_eq!(
        told,
        ["on_checkpoint|tests", "on_level|tests"],
        "{}",
        run.describe()
    );
}
