//! ralph inside Claude Code, on the built binary: `ralph statusline` (one
//! snapshot per level and window), `ralph hook pre-compact|session-start`
//! on a transcript in Claude Code's format, and `ralph init --claude`.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use assert_cmd::cargo::CommandCargoExt;
use serde_json::json;

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `ralph ARGS` in `dir` with `stdin` written to its stdin.
fn ralph(dir: &Path, args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::cargo_bin("ralph").unwrap();
    cmd.args(args)
        .current_dir(dir)
        .env_remove("RALPH_ITERATION")
        .env_remove("RALPH_LOG")
        .env_remove("NO_COLOR")
        .env("TZ", "UTC")
        .env("GIT_AUTHOR_NAME", "Test Author")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env("GIT_COMMITTER_NAME", "Test Author")
        .env("GIT_COMMITTER_EMAIL", "author@example.com")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// One transcript entry of the kind Claude Code writes under ~/.claude/projects.
fn assistant(
    id: &str,
    occupancy: u64,
    sidechain: bool,
    model: &str,
    content: serde_json::Value,
) -> String {
    json!({
        "parentUuid": "p", "isSidechain": sidechain, "userType": "external",
        "cwd": "/w", "sessionId": "s", "version": "2.1.328", "type": "assistant",
        "message": {"id": id, "type": "message", "role": "assistant", "model": model,
            "content": content,
            "usage": {"input_tokens": 2, "cache_creation_input_tokens": 500,
                      "cache_read_input_tokens": occupancy - 502, "output_tokens": 80}},
        "requestId": "r", "uuid": "u", "timestamp": "2026-11-23T10:00:00Z"
    })
    .to_string()
}

fn text(t: &str) -> serde_json::Value {
    json!([{"type": "text", "text": t}])
}

/// A project with a plan and a transcript whose newest main-thread usage is
/// `occupancy`, followed by a bigger sub-agent turn that must not count.
fn session(occupancy: u64, model: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("fix_plan.md"),
        "# Demo\n\n- [x] parser\n- [ ] writer: join fields with the delimiter\n",
    )
    .unwrap();
    let mut lines = vec![
        json!({"type": "user", "isSidechain": false, "message": {"role": "user", "content": "go"}}).to_string(),
        assistant("msg_1", 12_000, false, model, text("starting")),
        assistant("msg_2", occupancy, false, model, text("working")),
        assistant("msg_3", 190_000, true, model, text("sub-agent")),
        json!({"type": "user", "isSidechain": false, "message": {"role": "user", "content": [{"type": "tool_result", "content": "ok"}]}}).to_string(),
    ];
    lines.push(String::new());
    let transcript = dir.path().join("session.jsonl");
    std::fs::write(&transcript, lines.join("\n")).unwrap();
    let input = json!({
        "hook_event_name": "Status", "session_id": "s",
        "transcript_path": transcript, "cwd": dir.path(),
        "model": {"id": model, "display_name": "Sonnet"},
        "workspace": {"current_dir": dir.path(), "project_dir": dir.path()},
        "version": "2.1.328", "cost": {"total_cost_usd": 0.5}
    })
    .to_string();
    (dir, input)
}

fn statusline(occupancy: u64, model: &str) -> String {
    let (dir, input) = session(occupancy, model);
    let out = ralph(dir.path(), &["statusline"], &input, &[("NO_COLOR", "1")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    out.stdout
}

// 200k window: usable 167k (reserve 33k); L1 70%, L2 85%, L3 95%.
#[test]
fn statusline_l0_200k() {
    insta::assert_snapshot!(statusline(50_100, "claude-sonnet-4-5"));
}

#[test]
fn statusline_l1_200k() {
    insta::assert_snapshot!(statusline(120_000, "claude-sonnet-4-5"));
}

#[test]
fn statusline_l2_200k() {
    insta::assert_snapshot!(statusline(145_000, "claude-sonnet-4-5"));
}

#[test]
fn statusline_l3_200k() {
    insta::assert_snapshot!(statusline(160_000, "claude-sonnet-4-5"));
}

// 1M window (`[1m]` model): usable 967k.
#[test]
fn statusline_l0_1m() {
    insta::assert_snapshot!(statusline(160_000, "claude-sonnet-4-5[1m]"));
}

#[test]
fn statusline_l2_1m() {
    insta::assert_snapshot!(statusline(830_000, "claude-sonnet-4-5[1m]"));
}

#[test]
fn statusline_follows_ralph_toml_thresholds_and_window() {
    let (dir, input) = session(100_000, "claude-sonnet-4-5");
    std::fs::write(
        dir.path().join("ralph.toml"),
        "[agent]\ncontext_window = 400000\nreserve_tokens = 0\n[context]\nwarn_percent = 20\ncheckpoint_percent = 24\nemergency_percent = 30\n",
    )
    .unwrap();
    let out = ralph(dir.path(), &["statusline"], &input, &[("NO_COLOR", "1")]);
    assert_eq!(
        out.stdout,
        "[CTX: ███░░░░░░░ 25% ⚠️ L2] 100k/400k · writer: join fields with the delimiter\n"
    );
}

#[test]
fn statusline_is_coloured_unless_no_color() {
    let (dir, input) = session(160_000, "claude-sonnet-4-5");
    let coloured = ralph(dir.path(), &["statusline"], &input, &[]);
    assert!(coloured.stdout.contains("\x1b["), "{:?}", coloured.stdout);
    let plain = ralph(dir.path(), &["statusline"], &input, &[("NO_COLOR", "1")]);
    assert!(!plain.stdout.contains('\x1b'), "{:?}", plain.stdout);
}

#[test]
fn statusline_never_fails() {
    let dir = tempfile::tempdir().unwrap();
    for input in [
        "",
        "{broken",
        r#"{"transcript_path": "/nonexistent/x.jsonl"}"#,
        "[1,2]",
    ] {
        let out = ralph(dir.path(), &["statusline"], input, &[("NO_COLOR", "1")]);
        assert_eq!(out.code, 0, "{input}: {}", out.stderr);
        assert_eq!(out.stdout.lines().count(), 1, "{input}: {}", out.stdout);
        assert!(out.stdout.starts_with("[CTX:"), "{input}: {}", out.stdout);
    }
    // A broken ralph.toml: the defaults, and a word about it.
    let (dir, input) = session(50_100, "claude-sonnet-4-5");
    std::fs::write(
        dir.path().join("ralph.toml"),
        "[context]\nwarn_percent = \"x\"\n",
    )
    .unwrap();
    let out = ralph(dir.path(), &["statusline"], &input, &[("NO_COLOR", "1")]);
    assert_eq!(out.code, 0);
    assert!(
        out.stdout
            .starts_with("[CTX: ███░░░░░░░ 30%] 50k/167k · writer"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains(" · ralph.toml: "), "{}", out.stdout);
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn git_project(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.name", "t"]);
    git(dir, &["config", "user.email", "t@example.com"]);
    std::fs::write(dir.join("ralph.toml"), "").unwrap();
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "initial"]);
}

#[test]
fn pre_compact_leaves_a_handoff_and_a_wip_commit_then_session_start_resumes_it() {
    let (dir, _) = session(150_000, "claude-sonnet-4-5");
    let root = dir.path();
    git_project(root);
    // Work the session did since the last commit, as the transcript says.
    std::fs::write(root.join("writer.rs"), "fn join() {}\n").unwrap();
    let transcript = root.join("session.jsonl");
    let mut t = std::fs::OpenOptions::new()
        .append(true)
        .open(&transcript)
        .unwrap();
    let write = json!([{"type": "tool_use", "id": "t1", "name": "Write",
        "input": {"file_path": root.join("writer.rs"), "content": "fn join() {}\n"}}]);
    writeln!(
        t,
        "{}",
        assistant("msg_4", 150_000, false, "claude-sonnet-4-5", write)
    )
    .unwrap();
    writeln!(
        t,
        "{}",
        assistant(
            "msg_5",
            151_000,
            false,
            "claude-sonnet-4-5",
            text("join() is stubbed; next: quoting")
        )
    )
    .unwrap();
    let hook_input = json!({"session_id": "s", "transcript_path": transcript, "cwd": root,
        "hook_event_name": "PreCompact", "trigger": "auto", "custom_instructions": null})
    .to_string();

    let out = ralph(root, &["hook", "pre-compact"], &hook_input, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.starts_with("ralph: handoff .ralph/handoffs/"),
        "{}",
        out.stdout
    );
    let log = git(root, &["log", "--format=%s"]);
    assert!(
        log.starts_with("ralph: checkpoint iter 0 (L2 at 90%)"),
        "{log}"
    );
    let files = git(root, &["show", "--name-only", "--format=", "HEAD"]);
    assert!(
        files.contains("writer.rs") && files.contains(".ralph/handoffs/"),
        "{files}"
    );
    let handoff_name = files
        .lines()
        .find(|l| l.starts_with(".ralph/handoffs/"))
        .unwrap();
    let handoff = std::fs::read_to_string(root.join(handoff_name)).unwrap();
    assert!(handoff.contains("trigger: compact"), "{handoff}");
    assert!(handoff.contains("auto compaction"), "{handoff}");
    assert!(
        handoff.contains("join() is stubbed; next: quoting"),
        "{handoff}"
    );
    assert!(handoff.contains("- `writer.rs`"), "{handoff}");

    let start = json!({"session_id": "s", "transcript_path": transcript, "cwd": root,
        "hook_event_name": "SessionStart", "source": "compact"})
    .to_string();
    let out = ralph(root, &["hook", "session-start"], &start, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "SessionStart");
    let context = v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert!(context.contains(handoff_name), "{context}");
    assert!(
        context.contains("**writer: join fields with the delimiter**"),
        "{context}"
    );
    assert!(
        context.contains("join() is stubbed; next: quoting"),
        "{context}"
    );

    // Inside one of ralph's own iterations the supervisor owns both.
    let out = ralph(
        root,
        &["hook", "session-start"],
        &start,
        &[("RALPH_ITERATION", "3")],
    );
    assert_eq!((out.code, out.stdout.as_str()), (0, ""));
    let out = ralph(
        root,
        &["hook", "pre-compact"],
        &hook_input,
        &[("RALPH_ITERATION", "3")],
    );
    assert_eq!((out.code, out.stdout.as_str()), (0, ""));
    assert_eq!(git(root, &["log", "--format=%s"]).lines().count(), 2);
}

#[test]
fn hooks_do_nothing_outside_a_project_and_never_fail() {
    let dir = tempfile::tempdir().unwrap();
    for event in ["pre-compact", "session-start"] {
        for input in [
            json!({"cwd": dir.path(), "source": "startup", "trigger": "manual"}).to_string(),
            "{bad".into(),
            String::new(),
        ] {
            let out = ralph(dir.path(), &["hook", event], &input, &[]);
            assert_eq!(out.code, 0, "{event} {input}: {}", out.stderr);
            assert_eq!(out.stdout, "", "{event} {input}");
        }
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
}

#[test]
fn pre_compact_outside_git_writes_only_the_handoff() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ralph.toml"), "").unwrap();
    let input = json!({"cwd": dir.path(), "trigger": "manual"}).to_string();
    let out = ralph(dir.path(), &["hook", "pre-compact"], &input, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains("no commit (not a git repository)"),
        "{}",
        out.stdout
    );
    assert_eq!(
        std::fs::read_dir(dir.path().join(".ralph/handoffs"))
            .unwrap()
            .count(),
        1
    );
}

const EXISTING: &str = r#"{
  "model": "opus",
  "permissions": {
    "allow": ["Bash(cargo test:*)"]
  },
  "hooks": {
    "PreCompact": [
      {
        "hooks": [{"type": "command", "command": "./scripts/save-notes.sh"}]
      }
    ],
    "PostToolUse": [
      {
        "matcher": "Edit|Write",
        "hooks": [{"type": "command", "command": "cargo fmt"}]
      }
    ]
  }
}
"#;

#[test]
fn init_claude_merges_keeps_existing_hooks_and_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(".claude")).unwrap();
    let settings = dir.path().join(".claude/settings.json");
    std::fs::write(&settings, EXISTING).unwrap();

    let out = ralph(dir.path(), &["init", "--claude"], "", &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let merged = std::fs::read_to_string(&settings).unwrap();
    insta::assert_snapshot!("init_claude_merged", merged);
    insta::assert_snapshot!("init_claude_output", out.stdout);
    let v: serde_json::Value = serde_json::from_str(&merged).unwrap();
    assert_eq!(
        v["hooks"]["PreCompact"][0]["hooks"][0]["command"],
        "./scripts/save-notes.sh"
    );
    assert_eq!(
        v["hooks"]["PostToolUse"][0]["hooks"][0]["command"],
        "cargo fmt"
    );

    let again = ralph(dir.path(), &["init", "--claude"], "", &[]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(
        std::fs::read_to_string(&settings).unwrap(),
        merged,
        "a second run changes nothing"
    );
    assert!(
        again.stdout.ends_with("nothing to change\n"),
        "{}",
        again.stdout
    );
    let report: serde_json::Value =
        serde_json::from_str(&ralph(dir.path(), &["init", "--claude", "--json"], "", &[]).stdout)
            .unwrap();
    assert_eq!(report["changed"], false);
    assert_eq!(report["already_installed"].as_array().unwrap().len(), 3);
}

#[test]
fn init_claude_creates_the_file_and_refuses_broken_json() {
    let dir = tempfile::tempdir().unwrap();
    let out = ralph(dir.path(), &["init", "--claude"], "", &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(".claude/settings.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(v["statusLine"]["command"], "ralph statusline");
    assert_eq!(
        v["hooks"]["SessionStart"][0]["matcher"],
        "startup|resume|compact"
    );
    assert!(
        !dir.path().join("ralph.toml").exists(),
        "--claude touches only the settings"
    );

    std::fs::write(dir.path().join(".claude/settings.json"), "{ not json").unwrap();
    let out = ralph(dir.path(), &["init", "--claude"], "", &[]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("nothing was written"), "{}", out.stderr);
    assert_eq!(
        std::fs::read_to_string(dir.path().join(".claude/settings.json")).unwrap(),
        "{ not json"
    );
}

#[test]
fn doctor_reports_whether_the_claude_code_parts_are_installed() {
    let dir = tempfile::tempdir().unwrap();
    let check = |dir: &Path| -> serde_json::Value {
        let out = ralph(dir, &["doctor", "--json"], "", &[]);
        let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "claude code")
            .cloned()
            .unwrap_or(serde_json::Value::Null)
    };
    assert_eq!(
        check(dir.path()),
        serde_json::Value::Null,
        "no .claude/: not reported"
    );
    std::fs::create_dir(dir.path().join(".claude")).unwrap();
    let c = check(dir.path());
    assert_eq!(c["verdict"], "warning");
    assert!(
        c["fix"].as_str().unwrap().contains("ralph init --claude"),
        "{c}"
    );
    ralph(dir.path(), &["init", "--claude"], "", &[]);
    let c = check(dir.path());
    assert_eq!(c["verdict"], "ok", "{c}");
}

/// The status line and the PreCompact hook meter a transcript as `ralph
/// run` meters it: the same window, thresholds and `checkpoint_tokens`. Here
/// a 1M window puts 250k tokens at 26% (L0 by percentage), and
/// `checkpoint_tokens = 200000` makes it L2 for all three.
#[test]
fn statusline_and_pre_compact_agree_with_the_runs_meter() {
    use crate::common::Project;
    let scenario = "[[step]]\ncontext = 250000\ntext = \"Working.\"\npath = \"work.txt\"\ncontent = \"w\\n\"\n";
    let p = Project::new(
        "# Demo\n\n- [ ] parser\n",
        scenario,
        "[context]\ncheckpoint_tokens = 200000\n",
    );
    // common::config's [agent] has the sim as its command; the window joins it.
    let toml = p
        .read("ralph.toml")
        .replace("[agent]\n", "[agent]\ncontext_window = 1000000\n");
    p.write("ralph.toml", &toml);
    let run = p.run(
        &["--max-iterations", "1"],
        std::time::Duration::from_secs(60),
    );
    let readings = run.of("context");
    let last = readings.last().expect("the run metered the agent");
    let run_level = last["reading"]["level"].as_str().unwrap().to_string();
    assert_eq!(run_level, "L2", "{}", run.describe());
    let transcript = std::fs::read_dir(p.path(".ralph/runs"))
        .unwrap()
        .map(|d| d.unwrap().path().join("iter-001.jsonl"))
        .find(|t| t.is_file())
        .expect("the run's transcript");

    let status_input = json!({"session_id": "s", "transcript_path": transcript, "cwd": p.root(),
        "model": {"id": "claude-sonnet-4-5", "display_name": "Sonnet"}})
    .to_string();
    let out = ralph(
        p.root(),
        &["statusline"],
        &status_input,
        &[("NO_COLOR", "1")],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!(" {run_level}]")),
        "the status line says {} where ralph run said {run_level}",
        out.stdout
    );

    let hook_input = json!({"session_id": "s", "transcript_path": transcript, "cwd": p.root(),
        "hook_event_name": "PreCompact", "trigger": "auto"})
    .to_string();
    let out = ralph(p.root(), &["hook", "pre-compact"], &hook_input, &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let subject = git(p.root(), &["log", "-1", "--format=%s"]);
    assert!(
        subject.contains(&format!("({run_level} at ")),
        "the PreCompact checkpoint says {subject:?} where ralph run said {run_level}"
    );
}
