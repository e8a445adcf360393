//! End-to-end: ralph's `SessionStart` and `PreCompact` hooks, installed by
//! `ralph init --claude`, run by the real Claude Code CLI (`claude -p`, its
//! model the mock Messages API of `tests/suite/real_claude/`). The settings name
//! `ralph`, found on the PATH as the built binary, as a user's would be.
//!
//! Needs the CLI like `tests/suite/real_claude.rs` (skipped without it unless
//! `RALPH_E2E_REQUIRE=1`; `RALPH_E2E_KEEP=1` keeps each test's directory).

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::real_claude::harness::{self, Claude, Project, Setup};
use crate::real_claude::mock_api::{MockApi, Reply};

/// The built ralph, by the name the settings use.
fn ralph(p: &Project, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args(args)
        .current_dir(&p.root)
        .env("HOME", &p.home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("RALPH_ITERATION")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ralph {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `ralph init --claude`, committed as a user would before working.
fn install_committed(p: &Project) {
    ralph(p, &["init", "--claude"]);
    p.git(&["add", "-A"]);
    p.git(&["commit", "-q", "-m", "ralph init --claude"]);
}

/// `ralph statusline` with Claude Code's status line input for the
/// project's newest session transcript (the CLI's own file).
fn statusline(p: &Project) -> String {
    let projects = p.home.join(".claude/projects");
    let transcript = std::fs::read_dir(&projects)
        .unwrap()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .map(|e| e.path())
        .filter(|f| f.extension().is_some_and(|e| e == "jsonl"))
        .max_by_key(|f| f.metadata().unwrap().modified().unwrap())
        .expect("the CLI wrote a transcript");
    let input = json!({
        "session_id": "s", "transcript_path": transcript, "cwd": p.root,
        "model": {"id": harness::MODEL, "display_name": "Sonnet 4.5"},
        "workspace": {"current_dir": p.root, "project_dir": p.root},
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_ralph"))
        .arg("statusline")
        .current_dir(&p.root)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `claude -p PROMPT [args]` in the project, talking to the mock, with the
/// built ralph first on the PATH. Returns its stream-json lines.
fn claude_p(
    p: &Project,
    claude: &Claude,
    api: &MockApi,
    prompt: &str,
    args: &[&str],
) -> Vec<Value> {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_ralph")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new(&claude.path);
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("ANTHROPIC_") || k.starts_with("CLAUDE") || k.starts_with("RALPH_") {
            cmd.env_remove(k.as_ref());
        }
    }
    let out = cmd
        .args(["-p", prompt, "--model", harness::MODEL])
        .args(["--output-format", "stream-json", "--verbose"])
        .arg("--dangerously-skip-permissions")
        .args(args)
        .current_dir(&p.root)
        .env("PATH", path)
        .env("HOME", &p.home)
        .env("IS_SANDBOX", "1")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("ANTHROPIC_BASE_URL", api.url())
        .env("ANTHROPIC_API_KEY", "dummy-e2e-key")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    std::fs::write(p.base.join("claude.stdout"), stdout.as_bytes()).ok();
    assert!(
        out.status.success(),
        "claude -p {prompt}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The stdout of each `ralph hook` run the CLI reports, by hook name
/// (`SessionStart:startup`, `PreCompact`, …).
fn hook_outputs(lines: &[Value], event: &str) -> Vec<(String, String)> {
    lines
        .iter()
        .filter(|l| l["subtype"] == "hook_response" && l["hook_event"] == event)
        .map(|l| {
            (
                l["hook_name"].as_str().unwrap_or("").to_string(),
                l["stdout"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// (1) A session started in a project with a handoff gets the resume
/// block: the CLI puts the hook's `additionalContext` in the request.
#[test]
fn session_start_hook_hands_the_resume_block_to_the_model() {
    let _serial = harness::serial();
    let Some(claude) = harness::claude("session_start_hook_hands_the_resume_block_to_the_model")
    else {
        return;
    };
    let p = Project::new("session-start", &claude, &Setup::default());
    let api = p.serve(|_| Reply::turn(20_000).text("Resuming."));
    let installed = ralph(&p, &["init", "--claude"]);
    assert!(
        installed.contains("added     hooks.SessionStart"),
        "{installed}"
    );
    let saved = ralph(&p, &["checkpoint", "--reason", "end of the day"]);
    let handoff = p
        .handoffs()
        .pop()
        .unwrap_or_else(|| panic!("no handoff: {saved}"));

    let lines = claude_p(&p, &claude, &api, "Go on.", &[]);
    let reqs = api.main_requests();
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(reqs.len(), 1, "{}", diag());
    let sent = reqs[0].all_text();
    assert!(
        sent.contains("SessionStart hook additional context: # Resume from a ralph checkpoint"),
        "the request carries the resume block:\n{sent}"
    );
    assert!(sent.contains(&handoff), "names {handoff}:\n{sent}");
    assert!(
        sent.contains("**Create hello.txt saying hello**"),
        "names the plan item:\n{sent}"
    );
    assert!(
        sent.contains("checkpoint by hand"),
        "carries the handoff:\n{sent}"
    );
    let outputs = hook_outputs(&lines, "SessionStart");
    assert_eq!(outputs.len(), 1, "{outputs:?}");
    assert_eq!(outputs[0].0, "SessionStart:startup");
    p.keep_if_asked();
}

/// (2) Claude Code compacts (forced with `/compact`): `ralph hook
/// pre-compact` runs first and leaves a handoff and a WIP commit of the
/// session's work; the session after the compaction gets the resume block.
#[test]
fn compaction_runs_pre_compact_which_leaves_a_handoff_and_a_wip_commit() {
    let _serial = harness::serial();
    let Some(claude) =
        harness::claude("compaction_runs_pre_compact_which_leaves_a_handoff_and_a_wip_commit")
    else {
        return;
    };
    let p = Project::new("pre-compact", &claude, &Setup::default());
    let hello = p.path("hello.txt");
    let api = p.serve(move |req| match req.assistant_turns() {
        0 => Reply::turn(120_000)
            .text("I'll create hello.txt.")
            .tool("Write", json!({"file_path": hello, "content": "hello\n"})),
        _ => Reply::turn(125_000).text("hello.txt is written; next: check the item off."),
    });
    install_committed(&p);

    claude_p(&p, &claude, &api, "Create hello.txt.", &[]);
    assert_eq!(p.read("hello.txt"), "hello\n");
    // The status line reads the CLI's own transcript: the newest turn's 125k.
    assert_eq!(
        statusline(&p),
        "[CTX: ███████░░░ 75% L1] 125k/167k · Create hello.txt saying hello\n"
    );
    assert!(
        p.handoffs().is_empty(),
        "no checkpoint before the compaction"
    );
    let lines = claude_p(&p, &claude, &api, "/compact", &["--continue"]);
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    // After the compaction, what it kept.
    let after = statusline(&p);
    assert!(after.contains("(compacted)"), "{after}");

    // The CLI reports PreCompact hooks in its compaction message, not as
    // hook_response lines.
    let reported = lines.iter().any(|l| {
        l["type"] == "user"
            && l["message"]["content"].as_str().is_some_and(|c| {
                c.contains("PreCompact [ralph hook pre-compact] completed successfully")
            })
    });
    assert!(reported, "the CLI ran the PreCompact hook\n{}", diag());
    let handoffs = p.handoffs();
    assert_eq!(handoffs.len(), 1, "{}", diag());
    let handoff = p.read(&handoffs[0]);
    assert!(handoff.contains("trigger: compact"), "{handoff}");
    assert!(handoff.contains("(manual compaction)"), "{handoff}");
    // The meter read the transcript: 125k of a usable 167k.
    assert!(handoff.contains("context_tokens: 125000"), "{handoff}");
    assert!(handoff.contains("level: L1"), "{handoff}");
    assert!(handoff.contains("hello.txt is written"), "{handoff}");
    assert!(handoff.contains("- `hello.txt`"), "{handoff}");
    let log = p.log();
    assert_eq!(
        log[0], "ralph: checkpoint iter 0 (L1 at 75%)",
        "the WIP commit: {log:?}"
    );
    let committed = p.git(&["show", "--name-only", "--format=", "HEAD"]);
    assert!(committed.contains("hello.txt"), "{committed}");
    assert!(committed.contains(&handoffs[0]), "{committed}");

    // After the compaction, the session starts again with the resume block.
    let start = hook_outputs(&lines, "SessionStart");
    let after = start
        .iter()
        .find(|(name, _)| name == "SessionStart:compact")
        .unwrap_or_else(|| panic!("no SessionStart:compact: {start:?}"));
    let out: Value = serde_json::from_str(after.1.trim()).unwrap();
    let context = out["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert!(context.contains(&handoffs[0]), "{context}");
    p.keep_if_asked();
}

/// (3) An automatic compaction: usage past the window. Claude Code 2.1.328
/// does not compact before a request at its threshold here (its
/// `autocompact_state` calls that "reactive mode"): it compacts when the
/// API refuses the prompt as too long. Either way `ralph hook pre-compact`
/// runs first (trigger `auto`) and saves the work, at ralph's L3.
#[test]
fn auto_compaction_past_the_threshold_runs_pre_compact() {
    let _serial = harness::serial();
    let Some(claude) = harness::claude("auto_compaction_past_the_threshold_runs_pre_compact")
    else {
        return;
    };
    let p = Project::new("auto-compact", &claude, &Setup::default());
    let hello = p.path("hello.txt");
    let api = p.serve(move |req| match req.main_seq {
        // 190k of a 200k window: past ralph's L3 and Claude Code's ~167k.
        Some(0) => Reply::turn(190_000)
            .text("Writing hello.txt.")
            .tool("Write", json!({"file_path": hello, "content": "hello\n"})),
        // The next turn no longer fits: the API says so, and the CLI
        // compacts in reaction (2.1.328 compacts on this answer, not
        // before its request).
        Some(1) => Reply::error(
            400,
            "invalid_request_error",
            "prompt is too long: 203512 tokens > 200000 maximum",
        ),
        // The compaction's summary request.
        Some(2) => Reply::turn(190_500).text("Summary: hello.txt was written."),
        _ => Reply::turn(6_000).text("Done."),
    });
    install_committed(&p);

    let lines = claude_p(&p, &claude, &api, "Create hello.txt.", &[]);
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    let compacted = lines
        .iter()
        .find(|l| l["subtype"] == "compact_boundary")
        .unwrap_or_else(|| {
            let kinds: Vec<String> = lines
                .iter()
                .map(|l| format!("{}/{} {}", l["type"], l["subtype"], l["status"]))
                .collect();
            panic!("the CLI did not compact: {kinds:?}\n{}", diag())
        });
    assert_eq!(compacted["compact_metadata"]["trigger"], "auto");
    let handoffs = p.handoffs();
    assert_eq!(handoffs.len(), 1, "{}", diag());
    let handoff = p.read(&handoffs[0]);
    assert!(handoff.contains("(auto compaction)"), "{handoff}");
    assert!(handoff.contains("level: L3"), "{handoff}");
    assert!(handoff.contains("context_tokens: 190000"), "{handoff}");
    assert!(
        p.log()[0].starts_with("ralph: checkpoint iter 0 (L3 at "),
        "{:?}",
        p.log()
    );
    let committed = p.git(&["show", "--name-only", "--format=", "HEAD"]);
    assert!(committed.contains("hello.txt"), "{committed}");
    p.keep_if_asked();
}

/// (4) A subagent's own compaction (Claude Code 2.1.323 and later fire
/// `PreCompact` and `SessionStart` for it, with `agent_id`): the main
/// session delegates to a subagent whose context overflows, the CLI
/// compacts the subagent's conversation and runs ralph's hooks for it —
/// which leave no handoff and no WIP commit, since the session's own
/// context was not compacted.
#[test]
fn a_subagents_compaction_is_not_taken_for_the_sessions() {
    let _serial = harness::serial();
    let Some(claude) = harness::claude("a_subagents_compaction_is_not_taken_for_the_sessions")
    else {
        return;
    };
    let p = Project::new("subagent-compact", &claude, &Setup::default());
    let hello = p.path("hello.txt");
    let sub_turns = std::sync::atomic::AtomicUsize::new(0);
    let api = p.serve(move |req| {
        let first = req.first_user_text();
        let tool = ["Agent", "Task"]
            .into_iter()
            .find(|t| {
                req.body["tools"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x["name"] == *t))
            })
            .unwrap_or("Agent");
        if first.contains("[[sub]]") || first.contains("Summary: the subagent") {
            let n = sub_turns.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            return match n {
                // 190k of a 200k window: past Claude Code's threshold.
                0 => Reply::turn(190_000)
                    .text("Writing hello.txt.")
                    .tool("Write", json!({"file_path": hello, "content": "hello\n"})),
                // The next turn no longer fits: the CLI compacts the
                // subagent's conversation in reaction.
                1 => Reply::error(
                    400,
                    "invalid_request_error",
                    "prompt is too long: 203512 tokens > 200000 maximum",
                ),
                _ => Reply::turn(8_000).text("Subagent done: hello.txt written."),
            };
        }
        if req.last_user_text().contains("summary") && req.assistant_turns() > 0 {
            return Reply::turn(190_500).text("Summary: the subagent wrote hello.txt.");
        }
        match req.assistant_turns() {
            0 => Reply::turn(20_000).text("Delegating.").tool(
                tool,
                json!({
                    "description": "Write hello",
                    "prompt": "[[sub]] Create hello.txt saying hello.",
                    "subagent_type": "general-purpose",
                    "run_in_background": false,
                }),
            ),
            _ => Reply::turn(22_000).text("Done."),
        }
    });
    install_committed(&p);
    let before = p.log();

    let lines = claude_p(&p, &claude, &api, "Delegate hello.txt.", &[]);
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    // The subagent's conversation was compacted (its own transcript says
    // so), and the CLI ran ralph's SessionStart hook for it.
    let compactions: usize = walk(&p.home.join(".claude/projects"))
        .iter()
        .filter(|f| f.to_string_lossy().contains("/subagents/"))
        .map(|f| std::fs::read_to_string(f).unwrap_or_default())
        .map(|t| t.matches("\"compact_boundary\"").count())
        .sum();
    assert_eq!(compactions, 1, "{}", diag());
    // What the hook said (on stderr: nothing for the model).
    let sub = lines
        .iter()
        .find(|l| l["subtype"] == "hook_response" && l["hook_name"] == "SessionStart:compact")
        .unwrap_or_else(|| panic!("no SessionStart:compact hook\n{}", diag()));
    let said = sub["stderr"].as_str().unwrap_or("");
    assert!(
        said.starts_with("ralph: subagent ") && said.contains("no resume block"),
        "{sub}"
    );
    assert_eq!(sub["stdout"], "", "{sub}");
    assert!(p.read("hello.txt").contains("hello"), "{}", diag());
    assert!(p.handoffs().is_empty(), "{:?}\n{}", p.handoffs(), diag());
    assert_eq!(p.log(), before, "no WIP commit\n{}", diag());
    p.keep_if_asked();
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = e.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
