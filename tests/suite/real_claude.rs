//! End-to-end: `ralph run` supervising the real Claude Code CLI, whose
//! model is a mock of the Anthropic Messages API served by the test
//! (`ANTHROPIC_BASE_URL`). The CLI really runs the scripted tool calls
//! (Write, Read, Edit, Bash) in a throwaway git repository, and the usage
//! the mock reports is what ralph's context meter reads.
//!
//! Needs the CLI: `scripts/install-claude.sh` installs the version pinned in
//! `scripts/claude-version` (or set `RALPH_E2E_CLAUDE` to a binary). Without
//! it every test prints "skipped: …" and passes; `RALPH_E2E_REQUIRE=1`
//! makes that a failure. `RALPH_E2E_KEEP=1` keeps each test's directory
//! (repo, HOME, ralph's output, the mock's request log).

mod current;
pub mod harness;
pub mod mock_api;

use std::time::Duration;

use regex::Regex;
use serde_json::json;

use harness::{Project, Setup};
use mock_api::{ApiRequest, Reply};

/// What ralph's checkpoint request says (prompts/checkpoint-request.md.j2).
const CHECKPOINT_MARK: &str = "This session is being checkpointed";

fn iteration_of(req: &ApiRequest) -> u32 {
    harness::iteration_of(&req.first_user_text())
}

fn distinct_sessions(reqs: &[ApiRequest]) -> Vec<String> {
    let mut sessions: Vec<String> = Vec::new();
    for r in reqs {
        let s = r.session().unwrap_or("-").to_string();
        if !sessions.contains(&s) {
            sessions.push(s);
        }
    }
    sessions
}

/// Tool results the CLI reported as errors, over all main requests.
fn tool_errors(reqs: &[ApiRequest]) -> Vec<String> {
    reqs.iter()
        .flat_map(|r| r.last_tool_results())
        .filter(|(_, _, is_error)| *is_error)
        .map(|(id, content, _)| format!("{id}: {content}"))
        .collect()
}

/// (1) One iteration of several turns: the CLI writes a file, reads and
/// edits the plan, commits with git, and ends with the promise.
#[test]
fn multi_turn_iteration_edits_commits_and_completes() {
    let _serial = harness::serial();
    let Some(claude) = harness::claude("multi_turn_iteration_edits_commits_and_completes") else {
        return;
    };
    let p = Project::new("complete", &claude, &Setup::default());
    let (hello, plan) = (p.path("hello.txt"), p.path("fix_plan.md"));
    let api = p.serve(move |req| match req.assistant_turns() {
        0 => Reply::turn(20_000)
            .text("I'll create hello.txt.")
            .tool("Write", json!({"file_path": hello, "content": "hello\n"})),
        1 => Reply::turn(24_000).tool("Read", json!({"file_path": plan})),
        2 => Reply::turn(28_000).tool(
            "Edit",
            json!({
                "file_path": plan,
                "old_string": "- [ ] Create hello.txt saying hello",
                "new_string": "- [x] Create hello.txt saying hello",
            }),
        ),
        3 => Reply::turn(31_000).tool(
            "Bash",
            json!({
                "command": "git add hello.txt fix_plan.md && git commit -q -m 'Create hello.txt' && git log --oneline -1",
                "description": "Commit the item",
            }),
        ),
        _ => Reply::turn(33_000).text("hello.txt exists and the plan is done.\n\n<promise>COMPLETE</promise>"),
    });

    let (code, took) = p.run_ralph(&["--json"], Duration::from_secs(55));
    let reqs = api.main_requests();
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(code, 0, "ralph should complete\n{}", diag());
    eprintln!(
        "complete: ralph took {took:.1?}, {} main requests",
        reqs.len()
    );

    // The CLI really ran the tools, without errors.
    assert_eq!(reqs.len(), 5, "one request per turn\n{}", diag());
    assert_eq!(
        distinct_sessions(&reqs).len(),
        1,
        "one agent process\n{}",
        diag()
    );
    assert!(
        tool_errors(&reqs).is_empty(),
        "tool errors: {:?}",
        tool_errors(&reqs)
    );
    assert!(reqs.iter().all(|r| r.model() == harness::MODEL));
    assert_eq!(p.read("hello.txt"), "hello\n");
    assert!(
        p.read("fix_plan.md")
            .contains("- [x] Create hello.txt saying hello")
    );
    assert_eq!(p.log(), ["Create hello.txt", "initial"], "{}", diag());

    // The first request carries ralph's prompt (PROMPT.md) as the user message.
    let first = reqs[0].first_user_text();
    assert!(first.contains("# Iteration 1:"), "prompt: {first}");
    assert!(
        first.contains("- [ ] Create hello.txt saying hello"),
        "prompt: {first}"
    );
    assert!(
        first.contains("<promise>COMPLETE</promise>"),
        "prompt: {first}"
    );

    // ralph closed stdin after the result: the CLI ended at once, long
    // before the idle timeout (40s) would have stopped it.
    assert!(took < Duration::from_secs(30), "took {took:?}\n{}", diag());
    assert!(p.events_named("agent_signalled").is_empty(), "{}", diag());

    let state = p.state();
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(state["iteration"], 1);
    assert_eq!(state["context_window"], 200_000);
    assert_eq!(
        state["completed_items"],
        json!(["Create hello.txt saying hello"])
    );
    let peak = state["context_history"][0]["peak_percent"]
        .as_f64()
        .unwrap();
    assert!(
        (peak - 19.8).abs() < 0.2,
        "peak {peak}% should be 33000/167000"
    );
    assert!(p.handoffs().is_empty());
    let exited = p.events_named("agent_exited");
    assert_eq!(exited.len(), 1);
    assert_eq!(exited[0]["code"], 0, "{exited:?}");
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// (2) The context climbs over the checkpoint level mid-iteration: ralph
/// asks for handoff notes through stdin, the CLI delivers that with the
/// next tool result, the agent writes its notes and stops; ralph makes the
/// WIP commit and the handoff, and the next iteration resumes from it.
#[test]
fn checkpoint_mid_iteration_then_resume() {
    let _serial = harness::serial();
    let Some(claude) = harness::claude("checkpoint_mid_iteration_then_resume") else {
        return;
    };
    let setup = Setup {
        plan: "# E2E plan\n\n- [ ] Finish the parser\n",
        ..Setup::default()
    };
    let p = Project::new("checkpoint", &claude, &setup);
    let root = p.root.clone();
    let parser = p.path("src/parser.txt");
    let api = p.serve(move |req| {
        let notes_re = Regex::new(r"\.ralph/notes/iter-\d{3}\.md").unwrap();
        let handoff_re = Regex::new(r"\.ralph/handoffs/[0-9-]+-iter\d{3}(-\d+)?\.md").unwrap();
        match iteration_of(req) {
            1 => {
                let all = req.all_text();
                if all.contains(CHECKPOINT_MARK) {
                    let Some(notes) = notes_re.find(&all) else {
                        return Reply::turn(152_000).text("no notes path in the checkpoint request");
                    };
                    let wrote = req
                        .assistant_tool_uses()
                        .iter()
                        .any(|(_, input)| input["file_path"].as_str().is_some_and(|f| f.contains(".ralph/notes/")));
                    if wrote {
                        return Reply::turn(153_000).text("Handoff notes written; stopping here.");
                    }
                    return Reply::turn(152_000).text("Writing my handoff notes.").tool(
                        "Write",
                        json!({
                            "file_path": root.join(notes.as_str()),
                            "content": "## Done\n- parser skeleton\n\n## In progress\n- src/parser.txt: E2E-NOTES-MARKER half done\n\n## Next\n- finish the parser\n",
                        }),
                    );
                }
                match req.assistant_turns() {
                    0 => Reply::turn(20_000)
                        .text("Starting on the parser.")
                        .tool("Write", json!({"file_path": parser, "content": "half done\n"})),
                    // 150k of the usable 167k: 89.9%, over L2 (85%), under L3 (95%).
                    // The tool runs long enough for the request to arrive meanwhile.
                    1 => Reply::turn(150_000).tool(
                        "Bash",
                        json!({"command": "sleep 3; echo parsed", "description": "Run the parser tests"}),
                    ),
                    _ => Reply::turn(151_000).text("E2E: no checkpoint request arrived"),
                }
            }
            2 => match req.assistant_turns() {
                0 => {
                    let first = req.first_user_text();
                    match handoff_re.find(&first) {
                        Some(h) => Reply::turn(30_000)
                            .text("Resuming from the handoff.")
                            .tool("Read", json!({"file_path": root.join(h.as_str())})),
                        None => Reply::turn(30_000).text("E2E: no handoff named in the prompt"),
                    }
                }
                1 => Reply::turn(34_000).tool(
                    "Bash",
                    json!({
                        "command": "printf 'done\\n' > src/parser.txt && sed -i 's/- \\[ \\] Finish the parser/- [x] Finish the parser/' fix_plan.md && git add src/parser.txt fix_plan.md && git commit -q -m 'Finish the parser'",
                        "description": "Finish and commit",
                    }),
                ),
                _ => Reply::turn(36_000).text("The parser is finished.\n\n<promise>COMPLETE</promise>"),
            },
            _ => Reply::turn(10_000).text("E2E: unexpected iteration"),
        }
    });

    let (code, took) = p.run_ralph(&["--json"], Duration::from_secs(58));
    let reqs = api.main_requests();
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(code, 0, "ralph should complete in iteration 2\n{}", diag());
    eprintln!(
        "checkpoint: ralph took {took:.1?}, {} main requests",
        reqs.len()
    );
    assert!(
        tool_errors(&reqs).is_empty(),
        "tool errors: {:?}",
        tool_errors(&reqs)
    );
    let sessions = distinct_sessions(&reqs);
    assert_eq!(sessions.len(), 2, "two agent processes\n{}", diag());

    // The checkpoint request went through stdin and reached the model, with
    // the result of the tool that was running when it was sent.
    let asked: Vec<&ApiRequest> = reqs
        .iter()
        .filter(|r| r.last_user_text().contains(CHECKPOINT_MARK))
        .collect();
    assert_eq!(
        asked.len(),
        1,
        "one request delivers the checkpoint request\n{}",
        diag()
    );
    let asked_text = asked[0].last_user_text();
    assert!(asked_text.contains("handoff notes"), "{asked_text}");
    assert!(
        asked_text.contains(".ralph/notes/iter-001.md"),
        "{asked_text}"
    );
    assert!(
        asked_text.contains("parsed"),
        "delivered with the Bash result: {asked_text}"
    );
    assert_eq!(asked[0].session(), Some(sessions[0].as_str()));

    let requested = p.events_named("checkpoint_requested");
    assert_eq!(requested.len(), 1, "{}", diag());
    assert_eq!(requested[0]["iteration"], 1);
    assert_eq!(requested[0]["trigger"], "context");
    assert_eq!(requested[0]["level"], "L2");
    assert_eq!(requested[0]["notes_path"], ".ralph/notes/iter-001.md");
    // With stdin closed the agent ended its turn by itself, within the grace.
    assert!(p.events_named("agent_signalled").is_empty(), "{}", diag());

    // The WIP commit carries the unfinished work and the handoff.
    let handoffs = p.handoffs();
    assert_eq!(handoffs.len(), 1, "{handoffs:?}");
    let handoff = &handoffs[0];
    assert!(
        Regex::new(r"^\.ralph/handoffs/\d{4}-\d{2}-\d{2}-\d{4}-iter001\.md$")
            .unwrap()
            .is_match(handoff),
        "{handoff}"
    );
    let log = p.log();
    assert_eq!(log.len(), 3, "{log:?}");
    assert_eq!(log[0], "Finish the parser");
    assert!(
        log[1].starts_with("ralph: checkpoint iter 1 (L2 at 9"),
        "{log:?}"
    );
    assert_eq!(log[2], "initial");
    let wip_files = p.git(&["show", "--name-only", "--format=", "HEAD~1"]);
    assert!(
        wip_files.lines().any(|f| f == "src/parser.txt"),
        "{wip_files}"
    );
    assert!(wip_files.lines().any(|f| f == handoff), "{wip_files}");
    assert_eq!(p.git(&["show", "HEAD~1:src/parser.txt"]), "half done\n");
    let doc = p.read(handoff);
    for needle in [
        "trigger: context",
        "level: L2",
        "E2E-NOTES-MARKER",
        "src/parser.txt",
        "Finish the parser",
    ] {
        assert!(doc.contains(needle), "handoff lacks {needle:?}:\n{doc}");
    }

    // The next iteration's first request carries the resume block.
    let second = reqs
        .iter()
        .find(|r| r.session() == Some(sessions[1].as_str()))
        .unwrap();
    let prompt = second.first_user_text();
    assert!(prompt.contains("# Iteration 2:"), "{prompt}");
    assert!(prompt.contains("Resume from a checkpoint"), "{prompt}");
    assert!(
        prompt.contains(handoff.as_str()),
        "resume names {handoff}:\n{prompt}"
    );
    assert!(prompt.contains("Finish the parser"), "{prompt}");
    // The files in progress are the agent's work, not its notes.
    assert!(prompt.contains("`src/parser.txt`"), "{prompt}");
    assert!(
        !prompt.contains("`.ralph/notes/"),
        "notes are not work in progress:\n{prompt}"
    );
    assert!(
        doc.contains("starting from `src/parser.txt`"),
        "the handoff's next step names the work file:\n{doc}"
    );

    let state = p.state();
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(state["iteration"], 2);
    assert_eq!(state["context_window"], 200_000);
    let cp = &state["context_checkpoint"];
    assert_eq!(cp["active"], false, "handed over to iteration 2: {cp:#}");
    assert_eq!(cp["handoff_file"], handoff.as_str());
    assert_eq!(cp["level"], "L2");
    let history = state["context_history"].as_array().unwrap();
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(history[0]["checkpoint"], true);
    let peak = history[0]["peak_percent"].as_f64().unwrap();
    assert!(
        (peak - 91.6).abs() < 0.2,
        "peak {peak}% should be 153000/167000"
    );
    assert_eq!(history[1]["checkpoint"], false);
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// (6) Issue 14: item one is checked off (an Edit of the plan) at 62% and
/// item two, which names a 200 kB spec, will not fit in the 23% left: ralph
/// re-reads the plan on the Edit's result and checkpoints at the boundary
/// (trigger `boundary`); iteration 2 starts on item two in a fresh window.
#[test]
fn boundary_checkpoint_after_an_item_is_checked_off() {
    let _serial = harness::serial();
    let Some(claude) = harness::claude("boundary_checkpoint_after_an_item_is_checked_off") else {
        return;
    };
    let setup = Setup {
        plan: "# E2E plan\n\n- [ ] item one\n- [ ] item two: implement `specs/big.md`\n",
        ..Setup::default()
    };
    let p = Project::new("boundary", &claude, &setup);
    std::fs::create_dir_all(p.path("specs")).unwrap();
    std::fs::write(p.path("specs/big.md"), "x".repeat(200_000)).unwrap();
    p.git(&["add", "specs/big.md"]);
    p.git(&["commit", "-q", "-m", "spec"]);
    let root = p.root.clone();
    let (one, plan) = (p.path("one.txt"), p.path("fix_plan.md"));
    let api = p.serve(move |req| {
        let notes_re = Regex::new(r"\.ralph/notes/iter-\d{3}\.md").unwrap();
        match iteration_of(req) {
            1 => {
                let all = req.all_text();
                if all.contains(CHECKPOINT_MARK) {
                    let wrote = req.assistant_tool_uses().iter().any(|(_, input)| {
                        input["file_path"].as_str().is_some_and(|f| f.contains(".ralph/notes/"))
                    });
                    return match (wrote, notes_re.find(&all)) {
                        (true, _) => Reply::turn(106_000).text("Notes written; stopping."),
                        (false, Some(notes)) => Reply::turn(105_000).tool(
                            "Write",
                            json!({
                                "file_path": root.join(notes.as_str()),
                                "content": "## Done\n- item one\n\n## Next\n- item two\n",
                            }),
                        ),
                        (false, None) => Reply::turn(105_000).text("no notes path"),
                    };
                }
                match req.assistant_turns() {
                    0 => Reply::turn(40_000)
                        .text("Item one.")
                        .tool("Write", json!({"file_path": one, "content": "one\n"})),
                    1 => Reply::turn(60_000).tool("Read", json!({"file_path": plan})),
                    // 103,540 of the usable 167,000: 62%.
                    2 => Reply::turn(103_540).tool(
                        "Edit",
                        json!({
                            "file_path": plan,
                            "old_string": "- [ ] item one",
                            "new_string": "- [x] item one",
                        }),
                    ),
                    // Room for the request to arrive, as a model thinks.
                    3 => Reply::turn(104_000).tool(
                        "Bash",
                        json!({"command": "sleep 3", "description": "Look at item two"}),
                    ),
                    _ => Reply::turn(110_000).text("E2E: no boundary checkpoint request arrived"),
                }
            }
            2 => match req.assistant_turns() {
                0 if req.first_user_text().contains("(now: **item two") => Reply::turn(30_000).tool(
                    "Bash",
                    json!({
                        "command": "sed -i 's/- \\[ \\] item two/- [x] item two/' fix_plan.md && git add fix_plan.md && git commit -q -m 'item two'",
                        "description": "Item two",
                    }),
                ),
                0 => Reply::turn(30_000).text("E2E: iteration 2 is not on item two"),
                _ => Reply::turn(32_000).text("Done.\n\n<promise>COMPLETE</promise>"),
            },
            _ => Reply::turn(10_000).text("E2E: unexpected iteration"),
        }
    });

    let (code, _) = p.run_ralph(&["--json"], Duration::from_secs(58));
    let reqs = api.main_requests();
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(code, 0, "ralph should complete in iteration 2\n{}", diag());
    assert!(
        tool_errors(&reqs).is_empty(),
        "tool errors: {:?}",
        tool_errors(&reqs)
    );
    assert_eq!(distinct_sessions(&reqs).len(), 2, "{}", diag());

    let checked = p.events_named("item_checked");
    assert_eq!(checked[0]["items"][0], "item one", "{}", diag());
    assert_eq!(checked[0]["percent"], 62.0);
    let requested = p.events_named("checkpoint_requested");
    assert_eq!(requested.len(), 1, "{}", diag());
    assert_eq!(requested[0]["trigger"], "boundary");
    assert_eq!(requested[0]["notes_path"], ".ralph/notes/iter-001.md");
    let cp = p.events_named("checkpoint");
    assert_eq!(cp.len(), 1, "{}", diag());
    assert_eq!(cp[0]["trigger"], "boundary");
    assert!(cp[0]["commit"].is_string(), "{}", diag());
    let log = p.log();
    assert!(
        log.iter()
            .any(|l| l.starts_with("ralph: checkpoint iter 1")),
        "{log:?}"
    );
    assert_eq!(p.git(&["show", "HEAD~1:one.txt"]), "one\n");

    let state = p.state();
    let hist = state["history"].as_array().unwrap();
    assert_eq!(hist[0]["item"], "item one");
    assert_eq!(hist[0]["items_checked"][0], "item one");
    assert_eq!(hist[1]["item"], "item two: implement `specs/big.md`");
    let peak2 = state["context_history"][1]["peak_percent"]
        .as_f64()
        .unwrap();
    assert!(
        peak2 < 25.0,
        "iteration 2 starts in a fresh window: {peak2}%"
    );
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// (3) The API refuses every request with the same 400: each iteration
/// fails the same way, and the breaker opens after `breaker.same_error`.
#[test]
fn repeated_api_error_opens_the_breaker() {
    let _serial = harness::serial();
    let Some(claude) = harness::claude("repeated_api_error_opens_the_breaker") else {
        return;
    };
    let setup = Setup {
        max_iterations: 6,
        breaker: "same_error = 2\nconsecutive_failures = 10\nno_progress = 10",
        ..Setup::default()
    };
    let p = Project::new("breaker", &claude, &setup);
    let api = p.serve(|_| {
        Reply::error(
            400,
            "invalid_request_error",
            "E2E: messages.0: this request is always refused",
        )
    });

    let (code, took) = p.run_ralph(&["--json"], Duration::from_secs(55));
    let reqs = api.main_requests();
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(code, 3, "breaker open\n{}", diag());
    eprintln!(
        "breaker: ralph took {took:.1?}, {} main requests",
        reqs.len()
    );
    assert_eq!(
        distinct_sessions(&reqs).len(),
        2,
        "two iterations\n{}",
        diag()
    );

    let state = p.state();
    assert_eq!(state["status"], "breaker_open", "{state:#}");
    assert_eq!(state["iteration"], 2);
    assert_eq!(state["breaker"]["status"], "open");
    assert_eq!(state["breaker"]["rule"], "same_error");
    let history = state["history"].as_array().unwrap();
    assert_eq!(history.len(), 2);
    for h in history {
        let error = h["error"].as_str().unwrap_or("");
        assert!(error.contains("400"), "{h}");
        assert!(error.contains("always refused"), "{h}");
    }
    assert_eq!(history[0]["error_hash"], history[1]["error_hash"]);
    let hashes = state["error_hashes"].as_array().unwrap();
    assert_eq!(hashes.len(), 2);
    assert_eq!(p.log(), ["initial"], "nothing to commit");
    assert!(p.handoffs().is_empty());
    let ended = p.events_named("run_ended");
    assert_eq!(ended[0]["exit_code"], 3);
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// (4) SIGINT to ralph while a tool runs `sleep`: ralph stops the agent,
/// whose tool dies with it, saves the work and exits 130; nothing is left.
#[test]
fn sigint_during_a_long_tool_call() {
    let _serial = harness::serial();
    let Some(claude) = harness::claude("sigint_during_a_long_tool_call") else {
        return;
    };
    let p = Project::new("sigint", &claude, &Setup::default());
    // A command line no other process on the machine has.
    let sleep = format!("sleep 30.{:05}", std::process::id() % 100_000);
    // Not a leading `sleep`: Claude Code 2.1.330 refuses a Bash command that
    // starts with `sleep N`, N ≥ 25 ("Blocked: standalone sleep …").
    let command = format!("echo started > progress.txt; {sleep}; echo slept");
    let api = p.serve(move |req| match req.assistant_turns() {
        0 => Reply::turn(20_000)
            .text("Running the long test suite.")
            .tool(
                "Bash",
                json!({"command": command, "description": "Long test suite"}),
            ),
        _ => Reply::turn(21_000).text("E2E: the tool was not interrupted"),
    });

    let mut ralph = p.spawn_ralph(&["--json"]);
    let started = harness::wait_until(Duration::from_secs(40), || {
        !harness::pids_matching(&sleep).is_empty()
    });
    if !started {
        let _ = ralph.kill();
        let _ = ralph.wait();
        panic!(
            "the tool's sleep never started\n{}\n{}",
            p.diagnostics(),
            api.describe()
        );
    }
    let signalled = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(ralph.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = p.wait(&mut ralph, Duration::from_secs(25));
    let took = signalled.elapsed();
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(status.code(), Some(130), "interrupted\n{}", diag());
    eprintln!("sigint: ralph exited {took:.1?} after SIGINT");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let left = harness::pids_matching(&sleep);
    assert!(left.is_empty(), "`{sleep}` still runs: {left:?}");
    p.assert_nothing_left();

    let signals = p.events_named("agent_signalled");
    assert_eq!(
        signals.first().map(|s| s["signal"].clone()),
        Some(json!("SIGINT")),
        "{signals:?}"
    );
    let state = p.state();
    assert_eq!(state["status"], "interrupted", "{state:#}");
    assert_eq!(state["iteration"], 1);
    // The work in the tree (progress.txt) is saved at the interruption.
    let checkpoints = p.events_named("checkpoint");
    assert_eq!(checkpoints.len(), 1, "{}", diag());
    assert_eq!(checkpoints[0]["trigger"], "signal");
    assert_eq!(p.handoffs().len(), 1);
    let log = p.log();
    assert!(log[0].starts_with("ralph: checkpoint iter 1"), "{log:?}");
    let wip_files = p.git(&["show", "--name-only", "--format=", "HEAD"]);
    assert!(
        wip_files.lines().any(|f| f == "progress.txt"),
        "{wip_files}"
    );
    // The agent was not asked for more after the interruption.
    assert_eq!(api.main_requests().len(), 1, "{}", diag());
    p.keep_if_asked();
}

/// (5) The context jumps straight past the emergency level: no time to ask
/// for notes, ralph stops the agent at once (SIGINT, the running tool dies
/// with it), saves the work as an L3 checkpoint, and the next iteration
/// resumes from it.
#[test]
fn emergency_level_stops_at_once_then_resume() {
    let _serial = harness::serial();
    let Some(claude) = harness::claude("emergency_level_stops_at_once_then_resume") else {
        return;
    };
    let setup = Setup {
        plan: "# E2E plan\n\n- [ ] Load the big file\n",
        ..Setup::default()
    };
    let p = Project::new("emergency", &claude, &setup);
    // Leading, so under the 25 s from which Claude Code 2.1.330 blocks it.
    let sleep = format!("sleep 20.{:05}", std::process::id() % 100_000);
    let big = p.path("big.txt");
    let command = format!("{sleep}; echo loaded");
    let api = p.serve(move |req| match (iteration_of(req), req.assistant_turns()) {
        (1, 0) => Reply::turn(20_000)
            .text("Loading the big file.")
            .tool("Write", json!({"file_path": big, "content": "partial\n"})),
        // 165k of the usable 167k: 98.8%, over L3 (95%).
        (1, 1) => Reply::turn(165_000).tool(
            "Bash",
            json!({"command": command, "description": "Load everything"}),
        ),
        (1, _) => Reply::turn(166_000).text("E2E: the agent was not stopped"),
        (2, 0) => Reply::turn(25_000).tool(
            "Bash",
            json!({
                "command": "printf 'complete\\n' > big.txt && sed -i 's/- \\[ \\]/- [x]/' fix_plan.md && git add big.txt fix_plan.md && git commit -q -m 'Load the big file'",
                "description": "Finish and commit",
            }),
        ),
        (2, _) => Reply::turn(27_000).text("Loaded.\n\n<promise>COMPLETE</promise>"),
        _ => Reply::turn(10_000).text("E2E: unexpected iteration"),
    });

    let (code, took) = p.run_ralph(&["--json"], Duration::from_secs(55));
    let reqs = api.main_requests();
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(code, 0, "completes in iteration 2\n{}", diag());
    eprintln!(
        "emergency: ralph took {took:.1?}, {} main requests",
        reqs.len()
    );
    let sessions = distinct_sessions(&reqs);
    assert_eq!(sessions.len(), 2, "{}", diag());
    let first_session = reqs
        .iter()
        .filter(|r| r.session() == Some(sessions[0].as_str()))
        .count();
    assert_eq!(
        first_session,
        2,
        "iteration 1 ends at the L3 turn\n{}",
        diag()
    );
    assert!(
        reqs.iter().all(|r| !r.all_text().contains(CHECKPOINT_MARK)),
        "no handoff request at L3\n{}",
        diag()
    );
    assert!(
        harness::pids_matching(&sleep).is_empty(),
        "`{sleep}` still runs"
    );

    let changed = p.events_named("level_changed");
    assert_eq!(changed[0]["to"], "L3", "{changed:?}");
    let signals = p.events_named("agent_signalled");
    assert_eq!(signals.len(), 1, "{signals:?}");
    assert_eq!(signals[0]["signal"], "SIGINT");
    assert!(
        signals[0]["reason"].as_str().unwrap().contains("L3"),
        "{signals:?}"
    );
    let checkpoints = p.events_named("checkpoint");
    assert_eq!(checkpoints.len(), 1);
    assert_eq!(checkpoints[0]["level"], "L3");
    assert_eq!(checkpoints[0]["trigger"], "context");

    let log = p.log();
    assert_eq!(log.len(), 3, "{log:?}");
    assert_eq!(log[0], "Load the big file");
    assert!(
        log[1].starts_with("ralph: checkpoint iter 1 (L3 at 99%)"),
        "{log:?}"
    );
    assert_eq!(p.git(&["show", "HEAD~1:big.txt"]), "partial\n");
    let handoffs = p.handoffs();
    assert_eq!(handoffs.len(), 1);
    let doc = p.read(&handoffs[0]);
    assert!(doc.contains("level: L3"), "{doc}");
    assert!(doc.contains("The agent wrote no notes"), "{doc}");

    let second = reqs
        .iter()
        .find(|r| r.session() == Some(sessions[1].as_str()))
        .unwrap();
    let prompt = second.first_user_text();
    assert!(prompt.contains("Resume from a checkpoint"), "{prompt}");
    assert!(prompt.contains(&handoffs[0]), "{prompt}");
    assert!(prompt.contains("L3 at"), "{prompt}");

    let state = p.state();
    assert_eq!(state["status"], "completed");
    assert_eq!(state["context_history"][0]["level"], "L3");
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// (7) The quota guard: the CLI, logged in as a subscriber, turns the API's
/// `anthropic-ratelimit-unified-7d-*` headers (93% of the weekly limit
/// used) into a `rate_limit_event`; with `quota.weekly_percent = 90` ralph
/// finishes the iteration through a checkpoint (the work is committed) and
/// ends the run as a spent budget (exit 5), saying which window and how
/// full; `ralph status` shows the windows.
#[test]
fn the_quota_guard_stops_the_run_at_the_weekly_share() {
    let _serial = harness::serial();
    let Some(claude) = harness::claude("the_quota_guard_stops_the_run_at_the_weekly_share") else {
        return;
    };
    let setup = Setup {
        subscriber: true,
        extra: "[quota]\nweekly_percent = 90\n",
        ..Setup::default()
    };
    let p = Project::new("quota", &claude, &setup);
    let hello = p.path("hello.txt");
    let api = p.serve(move |req| {
        if req.last_user_text().contains(CHECKPOINT_MARK) {
            Reply::turn(22_000).text("Handoff: hello.txt is written; the plan item is still open.")
        } else if req.assistant_turns() == 0 {
            Reply::turn(20_000)
                .usage_limits(0.30, 0.93)
                .text("I'll create hello.txt.")
                .tool("Write", json!({"file_path": hello, "content": "hello\n"}))
        } else {
            // Long enough for ralph to see the usage and ask for a handoff.
            Reply::turn(21_000)
                .after(Duration::from_secs(4))
                .text("hello.txt is written.")
        }
    });

    let (code, took) = p.run_ralph(&["--json"], Duration::from_secs(55));
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(code, 5, "stopped on the quota\n{}", diag());
    eprintln!("quota: ralph took {took:.1?}");
    let ended = p.events_named("run_ended");
    let reason = ended[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(
            "quota guard: the weekly limit is 93% used (quota.weekly_percent 90%), resets "
        ),
        "{reason}\n{}",
        diag()
    );
    assert_eq!(ended[0]["outcome"], "budget_spent");
    assert_eq!(p.events_named("iteration_started").len(), 1, "{}", diag());
    let cp = p.events_named("checkpoint");
    assert_eq!(cp.len(), 1, "{}", diag());
    assert_eq!(cp[0]["trigger"], "budget");
    assert_eq!(
        p.git(&["show", "HEAD:hello.txt"]),
        "hello\n",
        "the work is committed"
    );
    let state = p.state();
    assert_eq!(state["quota"]["weekly"]["percent"], 93.0, "{state:#}");
    assert_eq!(state["quota"]["five_hour"]["percent"], 30.0, "{state:#}");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_ralph"))
        .arg("status")
        .current_dir(&p.root)
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("quota      weekly 93% (stop at 90%), resets "),
        "{status}"
    );
    assert!(
        status.contains("quota      5-hour 30%, resets "),
        "{status}"
    );
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// (8) The sandbox with the real CLI: `[agent] sandbox = "bwrap"`; the
/// scripted model writes its work in the project, then tries to write
/// outside it, to read a planted `~/.ssh/id_ed25519` and another
/// repository's file. The CLI's own tools fail inside the box (the tool
/// results say so), the work is committed at the checkpoint, and the
/// handoff carries the agent's notes naming what was refused.
#[test]
fn the_sandbox_keeps_the_real_cli_inside_the_project() {
    let _serial = harness::serial();
    let Some(claude) = harness::claude("the_sandbox_keeps_the_real_cli_inside_the_project") else {
        return;
    };
    if !crate::common::bwrap_works() {
        return;
    }
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("secret.txt"), "OTHER-REPO-CANARY").unwrap();
    let outside = tempfile::tempdir_in(crate::common::outside_base()).unwrap();
    // No `[sandbox]` section: Claude Code's own home entries and keys.
    let setup = Setup {
        max_iterations: 1,
        ..Setup::default()
    };
    let p = Project::new("sandbox", &claude, &setup);
    std::fs::create_dir_all(p.home.join(".ssh")).unwrap();
    std::fs::write(p.home.join(".ssh/id_ed25519"), "PRIVATE-KEY-CANARY").unwrap();
    let (hello, escape) = (p.path("hello.txt"), outside.path().join("escaped.txt"));
    let key = p.home.join(".ssh/id_ed25519");
    let secret = other.path().join("secret.txt");
    let (escape_s, key_s, secret_s) = (
        escape.display().to_string(),
        key.display().to_string(),
        secret.display().to_string(),
    );
    let api = p.serve(move |req| {
        if req.last_user_text().contains(CHECKPOINT_MARK) {
            // The notes: what the tools answered, as a model would put it.
            let refused = tool_errors_of(req);
            let notes = format!("# Handoff\n\n## Refused\n- {}\n", refused.join("\n- "));
            let path = Regex::new(r"`([^`]+\.md)`")
                .unwrap()
                .captures(&req.last_user_text())
                .map(|c| c[1].to_string())
                .unwrap_or_else(|| "handoff.md".into());
            return Reply::turn(150_000).tool("Write", json!({"file_path": path, "content": notes}));
        }
        match req.assistant_turns() {
            0 => Reply::turn(20_000).tool("Write", json!({"file_path": hello, "content": "hello\n"})),
            1 => Reply::turn(22_000).tool("Write", json!({"file_path": escape_s, "content": "out\n"})),
            2 => Reply::turn(24_000).tool("Bash", json!({"command": format!("cat {key_s}"), "description": "read the key"})),
            3 => Reply::turn(26_000).tool("Bash", json!({"command": format!("cat {secret_s}"), "description": "read the other repository"})),
            // Past L2: ralph asks for the handoff.
            4 => Reply::turn(146_000).tool("Bash", json!({"command": "true", "description": "wait"})).after(Duration::from_secs(2)),
            _ => Reply::turn(151_000).text("Stopping here."),
        }
    });
    let toml = std::fs::read_to_string(p.root.join("ralph.toml")).unwrap();
    std::fs::write(
        p.root.join("ralph.toml"),
        toml.replacen("[agent]\n", "[agent]\nsandbox = \"bwrap\"\n", 1),
    )
    .unwrap();
    p.git(&["commit", "-q", "-am", "sandbox on"]);

    let (code, took) = p.run_ralph(&["--json"], Duration::from_secs(55));
    let reqs = api.main_requests();
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    eprintln!(
        "sandbox: ralph took {took:.1?}, {} main requests",
        reqs.len()
    );
    assert_eq!(code, 4, "one iteration, checkpointed\n{}", diag());
    let started = p.events_named("iteration_started");
    assert!(
        started[0]["command"][0]
            .as_str()
            .unwrap()
            .ends_with("bwrap"),
        "{}",
        diag()
    );
    let errors = tool_errors(&reqs).join("\n");
    assert!(
        errors.to_lowercase().contains("read-only file system"),
        "{errors}\n{}",
        diag()
    );
    assert!(
        errors.contains("id_ed25519: No such file or directory"),
        "{errors}\n{}",
        diag()
    );
    assert!(
        errors.contains("secret.txt: No such file or directory"),
        "{errors}\n{}",
        diag()
    );
    assert!(!escape.exists(), "nothing got out");
    assert!(!errors.contains("PRIVATE-KEY-CANARY") && !errors.contains("OTHER-REPO-CANARY"));
    assert_eq!(
        p.git(&["show", "HEAD:hello.txt"]),
        "hello\n",
        "the work is committed\n{}",
        diag()
    );
    let handoff = p.read(p.handoffs().last().expect("a handoff"));
    assert!(handoff.contains("## Refused"), "{handoff}");
    assert!(
        handoff.contains("id_ed25519: No such file or directory"),
        "{handoff}"
    );
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// The error tool results of the request's conversation, first lines.
fn tool_errors_of(req: &ApiRequest) -> Vec<String> {
    req.messages()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result" && b["is_error"] == true)
        .map(|b| {
            mock_api::text_of(&b["content"])
                .lines()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// (Issue 25) Two workers at once, each the real CLI in its own worktree:
/// each does its item with Bash (its `RALPH_ITEM`, its own plan), both
/// branches are merged, the coordinator checks the plan off.
#[test]
fn two_workers_run_the_real_cli_side_by_side_and_are_merged() {
    let _serial = harness::serial();
    let Some(claude) = harness::claude("two_workers_run_the_real_cli_side_by_side_and_are_merged")
    else {
        return;
    };
    let setup = Setup {
        plan: "# Two things\n\n- [ ] alpha\n- [ ] bravo\n",
        ..Setup::default()
    };
    let p = Project::new("workers", &claude, &setup);
    let api = p.serve(move |req| match req.assistant_turns() {
        0 => Reply::turn(20_000).tool(
            "Bash",
            json!({
                "command": "printf '%s by %s\\n' \"$RALPH_ITEM\" \"$RALPH_WORKER\" > \"$RALPH_ITEM.txt\" && sed -i 's/- \\[ \\]/- [x]/' .ralph/worker-plan.md",
                "description": "Do my item and check it off",
            }),
        ),
        _ => Reply::turn(22_000).text("Done.\n\n<promise>COMPLETE</promise>"),
    });
    let (code, took) = p.run_ralph(&["--json", "--workers", "2"], Duration::from_secs(120));
    let reqs = api.main_requests();
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(code, 0, "both workers' work merged\n{}", diag());
    eprintln!(
        "workers: ralph took {took:.1?}, {} main requests",
        reqs.len()
    );
    assert_eq!(
        distinct_sessions(&reqs).len(),
        2,
        "two agent processes\n{}",
        diag()
    );
    assert!(tool_errors(&reqs).is_empty(), "{:?}", tool_errors(&reqs));
    for item in ["alpha", "bravo"] {
        let text = p.git(&["show", &format!("HEAD:{item}.txt")]);
        assert!(
            text.starts_with(&format!("{item} by w")),
            "{text}\n{}",
            diag()
        );
    }
    let plan = p.git(&["show", "HEAD:fix_plan.md"]);
    assert!(
        plan.contains("- [x] alpha") && plan.contains("- [x] bravo"),
        "{plan}"
    );
    assert_eq!(
        p.git(&["branch", "--list", "ralph/*"]).trim(),
        "",
        "{}",
        diag()
    );
    let merges = p.events_named("merge");
    assert_eq!(merges.len(), 2, "{}", diag());
    let workers: std::collections::BTreeSet<String> = p
        .events_named("iteration_started")
        .iter()
        .filter_map(|e| e["worker"].as_str().map(str::to_string))
        .collect();
    assert_eq!(workers.len(), 2, "{workers:?}");
    p.assert_nothing_left();
    p.keep_if_asked();
}
