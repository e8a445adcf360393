//! End-to-end tests of context checkpoints (issue 3): L2 with and without
//! the agent's cooperation, L3 mid-tool, sub-agents, repositories where no
//! commit can be made, `ralph checkpoint`, hooks, and the resume prompt.

use crate::common;

use std::time::{Duration, Instant};

use common::{Project, QUICK_L2, Run};

const PLAN: &str = "# Ship the parser\n\nSee `specs/parser.md`.\n\n- [ ] parser\n- [ ] tests\n";
const LIMIT: Duration = Duration::from_secs(60);

/// Iteration 1 climbs past L2 while writing the parser, then (asked for
/// notes) complies; iteration 2 finishes and keeps the promise. (Also
/// played as each other agent kind: e2e_kinds.)
pub const CLIMB_AND_RESUME: &str = r##"
record_messages = ".ralph/messages.jsonl"
# An agent takes time between turns; the request lands in between.
step_delay_ms = 300

[[iteration]]
handoff_notes = "# Notes\n\n## Done\n- parser.py written\n\n## In progress\n- parser.py:2 quoting\n\n## Next\n- tests\n"
[[iteration.step]]
context = 60000
text = "Implementing the parser."
path = "parser.py"
content = "def parse(s):\n    return s.split(',')\n"

[[iteration.step]]
context = 120000
command = "true"
description = "run the tests"

[[iteration.step]]
context = 146000
text = "Handling quoting in the parser."
path = "parser.py"
old = "split(',')"
new = "split(',')  # TODO quoting"

[[iteration.step]]
context = 150000
text = "This step must never run: the checkpoint came first."
path = "never.txt"
content = "x"

[[iteration]]
[[iteration.step]]
context = 30000
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[iteration.step]]
context = 34000
path = "fix_plan.md"
old = "- [ ] tests"
new = "- [x] tests"
[[iteration.step]]
result = "<promise>COMPLETE</promise>"
"##;

fn redact(text: &str, p: &Project) -> String {
    let root = p.root().display().to_string();
    let mut s = text.replace(&root, "[ROOT]");
    for (re, with) in [
        (r"\d{4}-\d{2}-\d{2}-\d{4}-iter", "[STAMP]-iter"),
        (r"date: \d{4}-\d{2}-\d{2}", "date: [DATE]"),
        (r#"time: "[^"]*""#, "time: \"[TIME]\""),
        (r"\b[0-9a-f]{40}\b", "[COMMIT]"),
        (r"\b[0-9a-f]{10}\b", "[SHORT]"),
        (r"branch: \S+", "branch: [BRANCH]"),
    ] {
        s = regex::Regex::new(re)
            .unwrap()
            .replace_all(&s, with)
            .into_owned();
    }
    s
}

#[test]
fn l2_with_agent_notes_commits_hands_off_and_resumes() {
    // The L1 nudge (e2e_seams) would be the second message: this test is about L2.
    let p = Project::new(
        PLAN,
        CLIMB_AND_RESUME,
        "[context]\ngrace = \"20s\"\nnudge_at_l1 = false\n",
    );
    p.write("specs/parser.md", "# spec\n");
    p.write("CLAUDE.md", "# conventions\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());

    // The request reached the agent on stdin and named the notes file.
    let messages = p.read(".ralph/messages.jsonl");
    let request: serde_json::Value =
        serde_json::from_str(messages.lines().nth(1).expect("a second message")).unwrap();
    let request = request["text"].as_str().unwrap();
    assert!(request.contains("`.ralph/notes/iter-001.md`"), "{request}");
    insta::assert_snapshot!("checkpoint_request", request);

    // It stopped before the step after the checkpoint.
    assert!(!p.path("never.txt").exists());
    let cp = run.of("checkpoint");
    assert_eq!(cp.len(), 1, "{}", run.describe());
    assert_eq!(cp[0]["level"], "L2");
    assert_eq!(cp[0]["trigger"], "context");
    assert!(
        run.of("agent_signalled").is_empty(),
        "the agent exited by itself"
    );

    // The WIP commit carries the work, the plan, the prompt and the handoff,
    // and nothing of ralph's runtime files.
    // Iteration 2 completed with its plan edits uncommitted: ralph's final
    // commit (issue 23) comes after the checkpoint's.
    let log = p.log();
    assert_eq!(
        log[0], "ralph: final commit at completion (iteration 2)",
        "{log:?}"
    );
    assert_eq!(log[1], "ralph: checkpoint iter 1 (L2 at 87%)", "{log:?}");
    let repo = p.repo();
    let wip = repo
        .head()
        .unwrap()
        .peel_to_commit()
        .unwrap()
        .parent(0)
        .unwrap();
    assert!(
        wip.message()
            .unwrap()
            .contains("Context Checkpoint L2 at 87% - parser")
    );
    let files: Vec<String> = repo
        .diff_tree_to_tree(
            Some(&wip.parent(0).unwrap().tree().unwrap()),
            Some(&wip.tree().unwrap()),
            None,
        )
        .unwrap()
        .deltas()
        .map(|d| d.new_file().path().unwrap().display().to_string())
        .collect();
    let handoff = p.handoffs().pop().expect("a handoff");
    let handoff_rel = handoff
        .strip_prefix(p.root())
        .unwrap()
        .display()
        .to_string();
    assert!(files.contains(&"parser.py".to_string()), "{files:?}");
    assert!(files.contains(&handoff_rel), "{files:?}");
    assert!(
        !files
            .iter()
            .any(|f| f.contains("state.json") || f.contains("notes/") || f.contains("runs/")),
        "{files:?}"
    );
    assert!(handoff_rel.ends_with("-iter001.md"));

    let doc = std::fs::read_to_string(&handoff).unwrap();
    assert!(
        doc.contains("parser.py:2 quoting"),
        "the agent's notes are in the handoff"
    );
    assert!(
        doc.contains("- `specs/parser.md`") && doc.contains("- `CLAUDE.md`"),
        "{doc}"
    );
    insta::assert_snapshot!("handoff_l2", redact(&doc, &p));

    // State: the checkpoint and the history of both iterations.
    let state = p.state();
    let ccp = &state["context_checkpoint"];
    assert_eq!(
        ccp["active"], false,
        "cleared once the resume prompt was handed over"
    );
    assert_eq!(ccp["level"], "L2");
    assert_eq!(ccp["percent_at_checkpoint"], 87.4);
    assert_eq!(ccp["handoff_file"], handoff_rel.as_str());
    assert_eq!(ccp["current_todo_item"], "parser");
    assert_eq!(ccp["files_in_progress"][0]["path"], "parser.py");
    let hist = state["context_history"].as_array().unwrap();
    assert_eq!(hist.len(), 2);
    assert_eq!(hist[0]["checkpoint"], true);
    assert_eq!(hist[1]["checkpoint"], false);

    // The second iteration's prompt resumed from the handoff.
    let first_message: serde_json::Value = serde_json::from_str(
        messages
            .lines()
            .find(|l| l.contains("\"iteration\":2"))
            .expect("iteration 2's prompt"),
    )
    .unwrap();
    let prompt = first_message["text"].as_str().unwrap();
    assert!(
        prompt.contains(&format!("Read the handoff first: `{handoff_rel}`")),
        "{prompt}"
    );
    insta::assert_snapshot!("resume_prompt", redact(prompt, &p));
}

/// Issue 35: one pass over the work tree per event. The supervisor logs
/// its running count of full work-tree passes (status walks and work-tree
/// diffs that look at every file) after each iteration; that count is what
/// costs on a large repository, so it must not grow again.
///
/// Iteration 1 (3): the run's start, one event (the untracked files it
/// warns about, the user's edits it commits first, the boundary tree and
/// snapshot at the iteration's start), the safety net's snapshot before the agent
/// is stopped at L2, and the walk after the agent (progress, the checkpoint's
/// file list, diffstat and limits, the WIP commit's staging, the boundary
/// tree, the next iteration's start; it refreshes the index's stat data as
/// it goes, as `git status` does, so the staging needs no walk of its own).
/// Iteration 2 (1): the walk after the agent (progress, boundary tree, the
/// final commit's list, limits and staging).
///
/// And the repositories opened (`repo::repositories_opened`): each reads
/// the whole index and keeps a parsed copy of its own. The run holds one
/// for its life (`Repo::hold`), opened at its start: 1, then 0.
#[test]
fn an_iteration_walks_the_work_tree_a_fixed_number_of_times() {
    let p = Project::new(
        PLAN,
        CLIMB_AND_RESUME,
        "[context]\ngrace = \"20s\"\nnudge_at_l1 = false\n",
    );
    let child = p
        .ralph()
        .args(["run", "--json"])
        .env("RALPH_LOG", "ralph::supervisor=debug")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let run = Run::wait_or(child, LIMIT, || p.diagnose());
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.of("checkpoint").len(), 1, "{}", run.describe());
    assert_eq!(
        p.log()[..2],
        [
            "ralph: final commit at completion (iteration 2)",
            "ralph: checkpoint iter 1 (L2 at 87%)"
        ]
    );
    // Running totals, one line per iteration.
    let per_iteration = |counter: &str| {
        let totals: Vec<u64> = run
            .stderr
            .lines()
            .filter(|l| l.contains("bookkeeping"))
            .filter_map(|l| {
                l.split(&format!("{counter}="))
                    .nth(1)?
                    .split(' ')
                    .next()?
                    .parse()
                    .ok()
            })
            .collect();
        assert_eq!(totals.len(), 2, "{counter}\n{}", run.stderr);
        [totals[0], totals[1] - totals[0]]
    };
    let passes = per_iteration("work_tree_passes");
    assert_eq!(passes, [3, 1], "passes per iteration\n{}", run.stderr);
    let opened = per_iteration("repositories_opened");
    assert_eq!(opened, [1, 0], "repositories opened\n{}", run.stderr);
}

#[test]
fn l2_ignored_by_the_agent_is_stopped_at_grace() {
    let scenario = r#"
on_message = "ignore"
[[step]]
context = 146000
text = "Running the slow suite."
command = "sleep 600"
description = "slow tests"
"#;
    let p = Project::new(
        PLAN,
        scenario,
        "[context]\ngrace = \"1s\"\n[loop]\nmax_iterations = 1\n",
    );
    let started = Instant::now();
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(started.elapsed() < Duration::from_secs(15));
    let signals: Vec<_> = run
        .of("agent_signalled")
        .iter()
        .map(|e| e["signal"].clone())
        .collect();
    assert_eq!(signals, ["SIGINT"], "{}", run.describe());
    assert_eq!(run.of("checkpoint").len(), 1);
    assert!(p.log()[0].starts_with("ralph: checkpoint iter 1 (L2 at 87%)"));
    assert!(
        p.processes_matching("sleep 600").is_empty(),
        "the tool's child is gone"
    );
}

#[test]
fn l3_mid_tool_stops_at_once_and_leaves_no_process() {
    // The Bash tool blocks in `sleep 701` with a background `sleep 700`
    // when the turn's usage lands past L3.
    let scenario = r#"
[[step]]
context = 165000
text = "Starting a server and the suite."
command = "sleep 700 & sleep 701"
description = "suite"
[[step]]
hang = true
"#;
    let p = Project::new(
        PLAN,
        scenario,
        "[context]\ngrace = \"60s\"\n[loop]\nmax_iterations = 1\n",
    );
    let started = Instant::now();
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "no grace at L3"
    );
    let cp = run.of("checkpoint_requested");
    assert_eq!(cp[0]["level"], "L3");
    assert_eq!(
        cp[0]["notes_path"],
        serde_json::Value::Null,
        "no handoff request at L3"
    );
    assert_eq!(run.of("checkpoint")[0]["level"], "L3");
    assert!(
        p.processes_matching("sleep 70").is_empty(),
        "tool children and background jobs are gone"
    );
}

#[test]
fn a_subagents_large_context_triggers_nothing() {
    let scenario = r#"
[[step]]
context = 40000
text = "Delegating the search."
tool = "Task"
description = "Find TODOs"
prompt = "List TODO comments."
[[step]]
subagent = true
context = 160000
command = "grep -rn TODO . || true"
[[step]]
context = 42000
text = "The sub-agent found nothing."
[[step]]
result = "<promise>COMPLETE</promise>"
"#;
    let p = Project::new(
        "- [ ] search\n",
        scenario,
        "[loop]\nrequire_plan_complete = false\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(run.of("level_changed").is_empty(), "{}", run.describe());
    assert!(run.of("checkpoint").is_empty());
    assert_eq!(p.state()["context_history"][0]["peak_percent"], 25.1);
}

fn assert_checkpoint_without_commit(p: &Project, why: &str) {
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let cp = run.of("checkpoint");
    assert_eq!(cp.len(), 1, "{}", run.describe());
    assert_eq!(cp[0]["commit"], serde_json::Value::Null);
    let note = cp[0]["commit_note"].as_str().unwrap_or("");
    assert!(note.contains(why), "{note}");
    assert!(
        cp[0]["handoff"].is_string(),
        "the handoff is written anyway"
    );
    assert!(p.handoffs().len() == 1);
    assert_eq!(p.read("work.txt"), "work in progress\n", "nothing lost");
}

#[test]
fn index_lock_means_no_commit_and_the_run_goes_on() {
    let p = Project::new(PLAN, QUICK_L2, "");
    p.write(".git/index.lock", "");
    assert_checkpoint_without_commit(&p, "index.lock");
    assert_eq!(p.log(), ["initial"]);
}

#[test]
fn detached_head_means_no_commit() {
    let p = Project::new(PLAN, QUICK_L2, "");
    let repo = p.repo();
    let head = repo.head().unwrap().target().unwrap();
    repo.set_head_detached(head).unwrap();
    assert_checkpoint_without_commit(&p, "detached");
    assert_eq!(repo.head().unwrap().target().unwrap(), head);
}

#[test]
fn outside_git_the_handoff_is_still_written() {
    let p = Project::bare(PLAN, QUICK_L2, "");
    assert_checkpoint_without_commit(&p, "not a git repository");
}

#[test]
fn hooks_get_the_checkpoint_facts_and_failures_do_not_stop_the_run() {
    let hooks = r#"[hooks]
on_checkpoint = ["printf '%s|%s|%s|%s|%s' \"$RALPH_ITERATION\" \"$RALPH_LEVEL\" \"$RALPH_PERCENT\" \"$RALPH_HANDOFF\" \"$RALPH_COMMIT\" > .ralph/hook.out", "exit 7", "sleep 30"]
timeout = "1s"
"#;
    let p = Project::new(PLAN, QUICK_L2, hooks);
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let out = p.read(".ralph/hook.out");
    let fields: Vec<&str> = out.split('|').collect();
    assert_eq!(&fields[..3], ["1", "L2", "87"]);
    assert!(fields[3].starts_with(".ralph/handoffs/"), "{out}");
    assert_eq!(fields[4].len(), 40, "{out}");
    let hooks = run.of("hook");
    assert_eq!(hooks.len(), 3);
    assert_eq!(hooks[0]["ok"], true);
    assert_eq!(hooks[1]["ok"], false);
    assert!(hooks[2]["detail"].as_str().unwrap().contains("timed out"));
}

#[test]
fn ralph_checkpoint_without_a_run_commits_the_tree() {
    let p = Project::new(PLAN, QUICK_L2, "");
    p.write("draft.txt", "unsaved work\n");
    let out = p
        .ralph()
        .args(["checkpoint", "--reason", "end of day"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no run in progress"), "{text}");
    assert!(p.head_files().contains(&"draft.txt".to_string()));
    let doc = std::fs::read_to_string(p.handoffs().pop().unwrap()).unwrap();
    assert!(doc.contains("end of day"), "{doc}");
}

#[test]
fn ralph_checkpoint_during_a_run_acts_within_a_second() {
    let scenario = r#"
record_messages = ".ralph/messages.jsonl"
[[iteration]]
[[iteration.step]]
context = 30000
text = "Long task."
path = "work.txt"
content = "half done\n"
[[iteration.step]]
sleep_ms = 20000
[[iteration]]
[[iteration.step]]
result = "<promise>COMPLETE</promise>"
"#;
    let p = Project::new(
        "- [ ] all\n",
        scenario,
        "[loop]\nrequire_plan_complete = false\n",
    );
    let child = p.spawn_run(&[]);
    common::wait_for_file(&p, ".ralph/messages.jsonl", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(300));
    let asked = Instant::now();
    let out = p
        .ralph()
        .args(["checkpoint", "--reason", "lunch"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("running supervisor"));
    while !p.read(".ralph/messages.jsonl").contains("handoff notes") {
        assert!(
            asked.elapsed() < Duration::from_secs(1),
            "no request within a second"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let cp = run.of("checkpoint");
    assert_eq!(cp[0]["trigger"], "manual");
    assert!(
        p.log()
            .iter()
            .any(|s| s.starts_with("ralph: checkpoint iter 1"))
    );
}

/// `ralph.toml` for the sim playing `kind`, with `extra` sections.
fn as_kind(p: &Project, kind: &str, extra: &str) {
    p.write(
        "ralph.toml",
        &format!("[agent]\nkind = \"{kind}\"\ncommand = \"ralph sim scenario.toml\"\n\n{extra}\n"),
    );
}

/// A checkpoint's level, percent and tokens as its event, its request
/// and its handoff give them: one reading each time.
fn one_reading(p: &Project, run: &Run, kind: &str) -> (String, f64, u64) {
    let cp = &run.of("checkpoint")[0];
    let requested = &run.of("checkpoint_requested")[0];
    let level = cp["level"].as_str().unwrap().to_string();
    let percent = cp["percent"].as_f64().unwrap();
    let tokens = cp["tokens"].as_u64().unwrap();
    // 200k less the 33k reserve.
    let of_usable = (tokens as f64 * 1000.0 / 167_000.0).round() / 10.0;
    assert_eq!(
        percent,
        of_usable,
        "{kind}: {tokens} tokens\n{}",
        run.describe()
    );
    assert_eq!(requested["level"], cp["level"], "{kind}");
    assert_eq!(requested["percent"], cp["percent"], "{kind}");
    let handoff = p.read(cp["handoff"].as_str().unwrap());
    for line in [
        format!("\nlevel: {level}\n"),
        format!("\ncontext_percent: {percent:?}\n"),
        format!("\ncontext_tokens: {tokens}\n"),
    ] {
        assert!(handoff.contains(&line), "{kind}: {line:?} in\n{handoff}");
    }
    (level, percent, tokens)
}

/// Issue 35: a checkpoint's level, percent and tokens come from one
/// reading of the meter, for every agent kind: an agent that goes on past
/// the request (to 153k) does not pair the 87.4% of the request with the
/// tokens read later; a checkpoint on SIGINT at 18% is called L0, not L2.
#[test]
fn a_checkpoints_level_percent_and_tokens_are_one_reading() {
    let past_the_request = r#"
on_message = "ignore"
step_delay_ms = 300
[[step]]
context = 60000
text = "Writing the parser."
[[step]]
context = 146000
text = "Handling quoting."
[[step]]
context = 153000
text = "Still going after the request."
[[step]]
result = "Stopping here."
"#;
    let sleep = format!("sleep 30.{:03}", std::process::id() % 1000);
    let interrupted = format!(
        "[[step]]\ncontext = 30000\ntext = \"Running the suite.\"\ncommand = \"{sleep}\"\n"
    );
    for kind in ["claude", "codex"] {
        let p = Project::bare(PLAN, past_the_request, "");
        as_kind(
            &p,
            kind,
            "[context]\nnudge_at_l1 = false\n[loop]\nmax_iterations = 1\n",
        );
        p.git_init();
        let run = p.run(&[], LIMIT);
        assert_eq!(run.of("checkpoint").len(), 1, "{kind}: {}", run.describe());
        let reading = one_reading(&p, &run, kind);
        assert_eq!(reading, ("L2".into(), 87.4, 146_000), "{kind}");

        let p = Project::bare(PLAN, &interrupted, "");
        as_kind(&p, kind, "");
        p.git_init();
        let child = p.spawn_run(&[]);
        common::wait_for_process(&sleep, LIMIT);
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        let run = Run::wait(child, LIMIT);
        assert_eq!(run.code, Some(130), "{kind}: {}", run.describe());
        assert_eq!(run.of("checkpoint")[0]["trigger"], "signal", "{kind}");
        let (level, percent, _) = one_reading(&p, &run, kind);
        assert_eq!(level, "L0", "{kind}: a signal at {percent}% is no L2");
    }
}
