//! Paid sessions only for work (issue 35): a plan with nothing open ends
//! the run without another session (its checks pass), a fatal agent error
//! stops the run at its first occurrence. Sessions are counted from what
//! the sim itself records (`record_messages`: one prompt per session).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::Project;

const LIMIT: Duration = Duration::from_secs(90);

/// The sessions the sim played: the distinct iterations it got a prompt in.
fn sessions(p: &Project) -> usize {
    let Ok(text) = std::fs::read_to_string(p.path(".ralph/messages.jsonl")) else {
        return 0;
    };
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["iteration"].clone())
        .map(|i| i.to_string())
        .collect::<BTreeSet<_>>()
        .len()
}

const PLAN: &str = "# Ship it\n\n- [ ] parser\n";

/// Checks its only item off and writes the code, and forgets the promise.
const CHECK_OFF_NO_PROMISE: &str = r#"
record_messages = ".ralph/messages.jsonl"

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
result = "Done with the parser."
"#;

#[test]
fn a_plan_checked_off_without_the_promise_completes_without_another_session() {
    let p = Project::new(PLAN, CHECK_OFF_NO_PROMISE, "");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(sessions(&p), 1, "{}", run.describe());
    let ended = run.ended();
    assert_eq!(ended["outcome"], "completed", "{}", run.describe());
    let reason = ended["reason"].as_str().unwrap();
    assert!(
        reason.contains("no open items") && reason.contains("did not say the promise"),
        "{reason}"
    );
    // The agent's work is committed with the completion.
    assert!(
        p.repo()
            .statuses(None)
            .unwrap()
            .iter()
            .all(|s| s.path() != Some("parser.py"))
    );
}

#[test]
fn a_finished_plan_is_completed_at_the_start_of_a_run_with_no_session() {
    let p = Project::new(
        "# Ship it\n\n- [x] parser\n- [x] lexer\n",
        CHECK_OFF_NO_PROMISE,
        "",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(sessions(&p), 0, "{}", run.describe());
    assert!(run.of("iteration_started").is_empty(), "{}", run.describe());
    let reason = run.ended()["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("no open items"), "{reason}");
}

const CHECK: &str = "[verify]\ncommands = [\"test -f parser.py\"]\n";

#[test]
fn a_finished_plan_whose_checks_fail_gets_a_session_to_fix_them_then_completes() {
    // Checked off by hand, but the checks fail: there is work (the fix).
    let p = Project::new("# Ship it\n\n- [x] parser\n", CHECK_OFF_NO_PROMISE, CHECK);
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(sessions(&p), 1, "{}", run.describe());
    let verifies = run.of("verify");
    assert_eq!(verifies.len(), 2, "{}", run.describe());
    assert_eq!(verifies[0]["passed"], false);
    assert_eq!(verifies[1]["passed"], true);
    let reason = run.ended()["reason"].as_str().unwrap();
    assert!(reason.contains("checks pass"), "{reason}");
}

#[test]
fn a_plan_checked_off_over_failing_checks_is_not_completed() {
    // The checks never pass: sessions go on until the breaker, never "completed".
    let p = Project::new(
        PLAN,
        CHECK_OFF_NO_PROMISE,
        "[verify]\ncommands = [\"false\"]\n[loop]\nmax_iterations = 3\n",
    );
    let run = p.run(&[], LIMIT);
    assert_ne!(run.code, Some(0), "{}", run.describe());
    assert_ne!(run.ended()["outcome"], "completed");
}

/// One session that fails with `error` (the sim's API error step).
fn failing(error_step: &str) -> String {
    format!(
        "record_messages = \".ralph/messages.jsonl\"\n\n[[step]]\ncontext = 20000\ntext = \"Starting.\"\n[[step]]\n{error_step}\n"
    )
}

/// `ralph run` with agent `kind`, playing `scenario`.
fn run_kind(kind: &str, scenario: &str) -> (Project, crate::common::Run) {
    let p = Project::new(PLAN, scenario, "");
    p.write(
        "ralph.toml",
        &format!("[agent]\nkind = \"{kind}\"\ncommand = \"ralph sim scenario.toml\"\n\n[loop]\nmax_iterations = 6\n"),
    );
    let run = p.run(&[], LIMIT);
    (p, run)
}

#[test]
fn fatal_agent_errors_stop_the_run_after_the_first_session() {
    // (kind, the failing step, words of the reason)
    let cases = [
        (
            "claude",
            // Claude Code's billing refusal: `subtype: "success"`, `is_error: true`.
            "error = \"invalid_request\"\ntext = \"Credit balance is too low · Add funds: https://console.anthropic.com/settings/billing\"\napi_error_status = 400",
            "account cannot pay",
        ),
        (
            "claude",
            "error = \"authentication_failed\"",
            "refused the login",
        ),
        (
            "codex",
            "error = \"authentication_failed\"",
            "run `codex login`",
        ),
        (
            "opencode",
            "error = \"authentication_failed\"",
            "opencode auth login",
        ),
        ("gemini", "exit = 41", "Gemini CLI exited with 41"),
    ];
    for (kind, step, words) in cases {
        let (p, run) = run_kind(kind, &failing(step));
        let started = run.of("iteration_started").len();
        assert_eq!(started, 1, "{kind} {step}\n{}", run.describe());
        assert!(sessions(&p) <= 1, "{kind}: {} sessions", sessions(&p));
        assert_eq!(run.code, Some(3), "{kind}\n{}", run.describe());
        let reason = run.ended()["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("circuit breaker opened (fatal): "),
            "{reason}"
        );
        assert!(reason.contains(words), "{kind}: {reason}");
        assert!(reason.ends_with("`ralph run --reset-breaker`"), "{reason}");
    }
}

#[test]
fn retryable_errors_keep_the_breakers_counting() {
    let (p, run) = run_kind("claude", &failing("error = \"overloaded\""));
    // breaker.consecutive_failures (3) sessions, as before.
    assert_eq!(run.of("iteration_started").len(), 3, "{}", run.describe());
    assert_eq!(sessions(&p), 3);
    assert_eq!(run.code, Some(3));
    let reason = run.ended()["reason"].as_str().unwrap();
    assert!(reason.contains("(consecutive_failures)"), "{reason}");
}

#[test]
fn an_agent_that_can_no_longer_be_started_stops_the_run_at_once() {
    // The first session takes its own program's execute bit away (an
    // update gone wrong): the next cannot start, and no third is tried.
    let scenario = "[[step]]\ncontext = 20000\ncommand = \"chmod -x agent.sh\"\n[[step]]\nresult = \"Working.\"\n";
    let p = Project::new(PLAN, scenario, "");
    p.write(
        "agent.sh",
        &format!(
            "#!/bin/sh\nexec {} sim scenario.toml \"$@\"\n",
            crate::common::BIN
        ),
    );
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(p.path("agent.sh"))
        .status()
        .unwrap();
    p.write(
        "ralph.toml",
        "[agent]\ncommand = \"./agent.sh\"\n\n[loop]\nmax_iterations = 6\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.of("iteration_started").len(), 2, "{}", run.describe());
    assert_eq!(run.code, Some(3), "{}", run.describe());
    let reason = run.ended()["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("circuit breaker opened (fatal): Claude Code cannot start"),
        "{reason}"
    );
    assert!(reason.contains("agent.command"), "{reason}");
}

/// A small tmpfs mounted for the test (root only), unmounted on drop.
struct SmallDisk {
    path: std::path::PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let mut disk = SmallDisk::mount_at(dir.path(), size)?;
        disk._dir = Some(dir);
        Some(disk)
    }

    /// Over the directory `path` (hiding what it holds).
    fn mount_at(path: &std::path::Path, size: &str) -> Option<SmallDisk> {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!(
                "skipped: cannot mount a small tmpfs here (needs root); the full-disk test did not run"
            );
            return None;
        }
        Some(SmallDisk {
            path: path.to_path_buf(),
            _dir: None,
        })
    }

    /// Fill it to the last byte.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.path.join("filler")).unwrap();
        let block = vec![0u8; 4096];
        while f.write_all(&block).is_ok() {}
        while f.write_all(&[0]).is_ok() {}
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(&self.path)
            .status();
    }
}

#[test]
fn a_full_disk_never_destroys_the_last_good_state() {
    let Some(disk) = SmallDisk::mount("256k") else {
        return;
    };
    let path = disk.path.join("state.json");
    // The last good state, compact and padded to a whole page (as an
    // earlier in-place save leaves it).
    let mut good = br#"{"version":1,"run_id":"20261127-0300-abcd","iteration":7,"status":"running","cost_usd":4.25}"#.to_vec();
    good.resize(4096, b' ');
    std::fs::write(&path, &good).unwrap();
    disk.fill();
    // The run's end, with more to say than the page holds.
    let ended = serde_json::json!({
        "version": 1,
        "run_id": "20261127-0300-abcd",
        "iteration": 8,
        "status": "completed",
        "cost_usd": 4.75,
        "exit_reason": "x".repeat(6000),
    });
    let mut state: ralph::formats::RunState = serde_json::from_value(ended).unwrap();
    let saved = state.save(&path);
    assert!(saved.is_err(), "nothing can be written on a full disk");
    // The old file is whole: `ralph status` and `ralph report` still read it.
    let text = std::fs::read(&path).unwrap();
    let kept: serde_json::Value = serde_json::from_slice(&text).unwrap_or_else(|e| {
        panic!(
            "state.json destroyed ({e}): {}",
            String::from_utf8_lossy(&text[..200])
        )
    });
    assert_eq!(kept["iteration"], 7);
    assert!(ralph::formats::RunState::load(&path).unwrap().is_some());
}

/// Iteration 1 takes a moment, then is checkpointed; iteration 2 takes a
/// moment and ends without a checkpoint.
const CHECKPOINT_THEN_IDLE: &str = r#"
[[iteration]]
[[iteration.step]]
sleep_ms = 2000
[[iteration.step]]
context = 146000
text = "Writing."
path = "work.txt"
content = "work in progress\n"
[[iteration]]
[[iteration.step]]
sleep_ms = 2000
[[iteration.step]]
context = 20000
text = "Looking around."
[[iteration.step]]
result = "Nothing changed."
"#;

/// The git directory's disk fills up during iteration 1 (a full disk at
/// the start is refused: ralph cannot write its scope claim), so its
/// checkpoint's WIP commit fails, and has room again during iteration 2:
/// the failed WIP commit is made at iteration 2's end, and the run says it
/// was degraded (warnings, the morning report, the outcome).
#[test]
fn a_wip_commit_that_failed_on_a_full_disk_is_made_when_space_returns() {
    let p = Project::new(PLAN, CHECKPOINT_THEN_IDLE, "[loop]\nmax_iterations = 2\n");
    let head = p.repo().head().unwrap().target().unwrap();
    // `.git` on a 1 MiB tmpfs of its own, filled to the last byte.
    let (git, saved) = (p.path(".git"), p.path("git-saved"));
    std::fs::rename(&git, &saved).unwrap();
    std::fs::create_dir(&git).unwrap();
    let Some(disk) = SmallDisk::mount_at(&git, "1m") else {
        std::fs::remove_dir(&git).unwrap();
        std::fs::rename(&saved, &git).unwrap();
        return;
    };
    let copied = std::process::Command::new("cp")
        .args(["-a", "git-saved/.", ".git/"])
        .current_dir(p.root())
        .status()
        .unwrap();
    assert!(copied.success());
    std::fs::remove_dir_all(&saved).unwrap();
    let child = p.spawn_run(&[]);
    crate::common::wait_for_event(&p, "iteration_started", LIMIT);
    disk.fill();
    crate::common::wait_for_event(&p, "checkpoint", LIMIT);
    std::fs::remove_file(disk.path.join("filler")).unwrap();
    let run = crate::common::Run::wait_or(child, LIMIT, || p.diagnose());
    let checkpoint = run.of("checkpoint")[0].clone();
    assert!(checkpoint["commit"].is_null(), "{}", run.describe());
    let warnings: Vec<&str> = (run.of("warning").into_iter())
        .map(|w| w["message"].as_str().unwrap())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w
                .starts_with("degraded: the work of iteration 1's checkpoint is not committed")),
        "{warnings:#?}"
    );
    assert!(
        warnings.iter().any(|w| w.starts_with(
            "no longer degraded: the work of iteration 1's checkpoint is committed now"
        )),
        "{warnings:#?}"
    );
    // The work is in a commit on the branch, made after the disk had room.
    let repo = p.repo();
    let now = repo.head().unwrap().peel_to_commit().unwrap();
    assert_ne!(now.id(), head);
    assert!(
        now.tree()
            .unwrap()
            .get_path(std::path::Path::new("work.txt"))
            .is_ok(),
        "{}",
        run.describe()
    );
    assert!(now.message().unwrap().starts_with("ralph: late WIP commit"));
    let reason = run.ended()["reason"].as_str().unwrap();
    assert!(
        reason.contains("; 1 of 1 checkpoints committed, 1 of them late: the run was degraded"),
        "{reason}"
    );
    let state = p.state();
    assert_eq!(state["commits"]["late"], 1, "{state}");
    assert!(state["commits"].get("pending").is_none(), "{state}");
    // A line in the morning report.
    let out = p.ralph().args(["report", "--json"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let said = report["warnings"].as_array().unwrap().iter().any(|w| {
        w["message"]
            .as_str()
            .unwrap()
            .starts_with("degraded: the work of iteration 1's checkpoint")
    });
    assert!(said, "{}", report["warnings"]);
    drop(disk);
}

/// The morning after a night that filled the disk: `ralph report` cannot
/// write its page, and still prints the summary (before, it printed only
/// the error), then says what it could not write and exits 1.
#[test]
fn a_report_on_a_full_disk_still_prints_its_summary() {
    let p = Project::new(PLAN, CHECK_OFF_NO_PROMISE, "");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    // `.ralph` on a small tmpfs of its own, holding the night's record,
    // filled to the last byte.
    let (dir, saved) = (p.path(".ralph"), p.path("ralph-saved"));
    std::fs::rename(&dir, &saved).unwrap();
    std::fs::create_dir(&dir).unwrap();
    let Some(disk) = SmallDisk::mount_at(&dir, "1m") else {
        std::fs::remove_dir(&dir).unwrap();
        std::fs::rename(&saved, &dir).unwrap();
        return;
    };
    let copied = std::process::Command::new("cp")
        .args(["-a", "ralph-saved/.", ".ralph/"])
        .current_dir(p.root())
        .status()
        .unwrap();
    assert!(copied.success());
    std::fs::remove_file(dir.join("report.html")).unwrap();
    disk.fill();
    let out = p.ralph().arg("report").output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        stdout.starts_with("ralph report · run "),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("Completed"), "{stdout}");
    assert!(
        !stdout.contains("report: "),
        "no page was written: {stdout}"
    );
    assert!(
        stderr.contains("cannot write") && stderr.contains("report.html"),
        "{stderr}"
    );
    assert_eq!(out.status.code(), Some(1));
    drop(disk);
}

/// `.ralph/` fills up while the agent works (it writes its notes and
/// ralph its handoff onto a full disk), `.git` has room. A write that
/// fails leaves nothing behind: before, an empty handoff file stayed in
/// `.ralph/handoffs/`, went into the WIP commit as if it were one, and
/// the agent's notes, rewritten without their secrets, could be emptied.
#[test]
fn a_handoff_that_cannot_be_written_leaves_no_empty_file() {
    let scenario = r#"
[[step]]
context = 60000
text = "Writing, then filling the disk."
path = "work.txt"
content = "work in progress\n"
[[step]]
context = 70000
command = "head -c 8388608 /dev/zero > .ralph/filler"
[[step]]
context = 146000
text = "Saving."
"#;
    let p = Project::new(PLAN, scenario, "[loop]\nmax_iterations = 1\n");
    std::fs::create_dir(p.path(".ralph")).unwrap();
    let Some(disk) = SmallDisk::mount_at(&p.path(".ralph"), "512k") else {
        return;
    };
    let run = p.run(&[], LIMIT);
    let warned = |start: &str| {
        run.of("warning")
            .iter()
            .any(|w| w["message"].as_str().unwrap().starts_with(start))
    };
    assert!(warned("cannot write the handoff"), "{}", run.describe());
    let checkpoint = run.of("checkpoint")[0];
    assert!(checkpoint["handoff"].is_null(), "{checkpoint}");
    assert_eq!(checkpoint["commit"].as_str().map(str::len), Some(40));
    let committed = p.head_files();
    assert!(committed.contains(&"work.txt".to_string()), "{committed:?}");
    assert!(
        !committed.iter().any(|f| f.starts_with(".ralph/")),
        "no empty handoff in the WIP commit: {committed:?}"
    );
    // (The agent's own notes may be empty: its Write met the full disk.)
    let mut left = Vec::new();
    crate::common::files_under(&p.path(".ralph/handoffs"), &mut left);
    assert!(left.is_empty(), "handoffs left: {left:?}");
    drop(disk);
}

/// Claude Code's result says when the claude.ai login ends
/// (`credential_expires_at`): one that may end before the run does is
/// said once, before the next session; one that outlives it is not.
#[test]
fn a_login_that_may_end_during_the_run_is_said_once() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for (days, said) in [(2, true), (30, false)] {
        let expires = jiff::Timestamp::from_second(now + days * 86400).unwrap();
        let result = serde_json::json!({
            "type": "result", "subtype": "success", "is_error": false,
            "result": "Working on the parser.", "total_cost_usd": 0.01, "num_turns": 1,
            "session_id": "s", "credential_expires_at": expires.to_string(),
        });
        let scenario = format!(
            "[[step]]\ncontext = 30000\ntext = \"Working.\"\npath = \"parser.py\"\ncontent = \"x = {days}\\n\"\n[[step]]\nraw = '{result}'\n[[step]]\nexit = 0\n"
        );
        let p = Project::new(
            PLAN,
            &scenario,
            "[loop]\nmax_iterations = 2\nmax_duration = \"8h\"\n",
        );
        let run = p.run(&[], LIMIT);
        assert_eq!(run.of("iteration_started").len(), 2, "{}", run.describe());
        let warned: Vec<usize> = (run.events.iter().enumerate())
            .filter(|(_, e)| {
                e["event"] == "warning"
                    && e["message"]
                        .as_str()
                        .unwrap()
                        .starts_with("the claude.ai login may end during this run")
            })
            .map(|(i, _)| i)
            .collect();
        assert_eq!(
            warned.len(),
            usize::from(said),
            "{days} days\n{}",
            run.describe()
        );
        if said {
            let second = (run.events.iter().enumerate())
                .filter(|(_, e)| e["event"] == "iteration_started")
                .nth(1)
                .unwrap()
                .0;
            assert!(warned[0] < second, "{}", run.describe());
            let message = run.events[warned[0]]["message"].as_str().unwrap();
            assert!(message.contains("claude auth login"), "{message}");
        }
    }
}

#[test]
fn a_cost_budget_that_cannot_bind_is_said_at_the_start() {
    for (kind, said) in [("codex", true), ("gemini", true), ("claude", false)] {
        let p = Project::new(PLAN, CHECK_OFF_NO_PROMISE, "");
        p.write(
            "ralph.toml",
            &format!("[agent]\nkind = \"{kind}\"\ncommand = \"ralph sim scenario.toml\"\n\n[loop]\nmax_cost_usd = 5.0\n"),
        );
        let run = p.run(&[], LIMIT);
        let warned = run.of("warning").into_iter().any(|w| {
            w["message"]
                .as_str()
                .unwrap()
                .starts_with("loop.max_cost_usd ($5.00) cannot limit this run")
        });
        assert_eq!(warned, said, "{kind}\n{}", run.describe());
        if said {
            // Before the first session.
            let first = |name: &str| run.events.iter().position(|e| e["event"] == name);
            assert!(
                first("warning") < first("iteration_started"),
                "{}",
                run.describe()
            );
            // And on the terminal of a run without --json.
            let out = p.ralph().args(["run", "--fresh"]).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("cannot limit this run"), "{err}");
        }
    }
}

#[test]
fn a_stale_index_lock_is_said_before_the_first_session_and_counted_at_the_end() {
    let p = Project::new(
        "- [ ] parser\n",
        crate::common::QUICK_L2,
        "[loop]\nmax_iterations = 1\n",
    );
    let lock = p.path(".git/index.lock");
    std::fs::write(&lock, "").unwrap();
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&lock)
        .unwrap()
        .set_modified(hour_ago)
        .unwrap();
    // `ralph doctor` names it (it said ok).
    let out = p.ralph().arg("doctor").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("index.lock is left from a git process that ended"),
        "{text}"
    );
    let run = p.run(&[], LIMIT);
    let first = |name: &str| run.events.iter().position(|e| e["event"] == name);
    let warned = run.events.iter().position(|e| {
        e["event"] == "warning"
            && e["message"]
                .as_str()
                .unwrap()
                .starts_with("no checkpoint of this run can be committed: ")
    });
    assert!(
        warned.is_some() && warned < first("iteration_started"),
        "{}",
        run.describe()
    );
    assert_eq!(run.of("checkpoint").len(), 1, "{}", run.describe());
    let reason = run.ended()["reason"].as_str().unwrap();
    assert!(reason.starts_with("iteration limit reached"), "{reason}");
    assert!(
        reason.contains("; 0 of 1 checkpoints committed (the last failure: "),
        "{reason}"
    );
    assert_eq!(p.state()["commits"]["committed"], 0);
}

#[test]
fn a_detached_head_is_said_before_the_first_session() {
    let p = Project::new(
        "- [ ] parser\n",
        crate::common::QUICK_L2,
        "[loop]\nmax_iterations = 1\n",
    );
    let repo = p.repo();
    let head = repo.head().unwrap().target().unwrap();
    repo.set_head_detached(head).unwrap();
    let run = p.run(&[], LIMIT);
    let warning = run
        .of("warning")
        .into_iter()
        .find_map(|w| {
            w["message"]
                .as_str()
                .filter(|m| m.contains("HEAD is detached"))
                .map(String::from)
        })
        .unwrap_or_else(|| panic!("{}", run.describe()));
    assert!(
        warning.starts_with("no checkpoint of this run can be committed"),
        "{warning}"
    );
    let reason = run.ended()["reason"].as_str().unwrap();
    assert!(reason.contains("0 of 1 checkpoints committed"), "{reason}");
}

/// A directory bind-mounted read-only over itself (root only: chmod does
/// not stop root, a read-only mount does), unmounted on drop.
struct ReadOnly {
    path: std::path::PathBuf,
}

impl ReadOnly {
    fn mount(path: std::path::PathBuf) -> Option<ReadOnly> {
        let mount = |args: &[&str]| {
            std::process::Command::new("mount")
                .args(args)
                .arg(&path)
                .arg(&path)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !mount(&["--bind"]) {
            eprintln!(
                "skipped: cannot bind-mount here (needs root); the read-only .git test did not run"
            );
            return None;
        }
        let ro = mount(&["-o", "remount,bind,ro"]);
        let mounted = ReadOnly { path };
        assert!(ro, "cannot remount {} read-only", mounted.path.display());
        Some(mounted)
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(&self.path)
            .status();
    }
}

/// A read-only `.git` (a read-only mount, which binds root too): with WIP
/// commits on, the run is refused before any session (nothing in the run
/// makes the repository writable) and says what to do; with
/// `git.wip_commit = false` the user has said otherwise and it runs.
#[test]
fn a_read_only_git_dir_is_refused_before_the_first_session() {
    let p = Project::new(
        "- [ ] parser\n",
        crate::common::QUICK_L2,
        "[loop]\nmax_iterations = 1\n",
    );
    let head = p.repo().head().unwrap().target().unwrap();
    let Some(_ro) = ReadOnly::mount(p.path(".git")) else {
        return;
    };
    let out = p.ralph().arg("doctor").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(".git/ is not writable (`ralph run` refuses to start"),
        "{text}"
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert!(run.of("iteration_started").is_empty(), "{}", run.describe());
    let reason = run.ended()["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(
            "refused before any session: no checkpoint of this run could be committed: "
        ),
        "{reason}"
    );
    assert!(
        reason.contains("is not writable") && reason.contains("git.wip_commit = false"),
        "{reason}"
    );
    assert_eq!(p.state()["status"], "failed");
    // The user says otherwise: the session runs, its work stays in the tree.
    p.write(
        "ralph.toml",
        &format!(
            "{}\n[git]\nwip_commit = false\n",
            std::fs::read_to_string(p.path("ralph.toml")).unwrap()
        ),
    );
    // ...and doctor agrees: a warning, not a problem (before: "every WIP
    // commit will be skipped", exit 1, for a run that starts).
    let out = p.ralph().arg("doctor").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("off (git.wip_commit = false), so `ralph run` starts; still, ")
            && text.contains(".git/ is not writable"),
        "{text}"
    );
    assert!(!text.contains("every WIP commit will be skipped"), "{text}");
    assert_eq!(out.status.code(), Some(0), "{text}");
    let run = p.run(&["--fresh"], LIMIT);
    assert_eq!(run.of("iteration_started").len(), 1, "{}", run.describe());
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert_eq!(p.read("work.txt"), "work in progress\n");
    assert_eq!(p.repo().head().unwrap().target().unwrap(), head);
}

/// Only the object database is read-only (as a `sudo git commit` leaves
/// it for its user, or a read-only mount of it): the git directory itself
/// is writable, so before only doctor's check of `.git` passed, the run
/// paid for a session and no checkpoint could be committed. Now it is
/// refused as a read-only `.git` is.
#[test]
fn a_read_only_object_database_is_refused_before_the_first_session() {
    let p = Project::new(
        "- [ ] parser\n",
        &format!(
            "record_messages = \".ralph/messages.jsonl\"\n{}",
            crate::common::QUICK_L2
        ),
        "[loop]\nmax_iterations = 1\n",
    );
    let Some(_ro) = ReadOnly::mount(p.path(".git/objects")) else {
        return;
    };
    let out = p.ralph().arg("doctor").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(".git/objects is not writable (`ralph run` refuses to start"),
        "{text}"
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert_eq!(sessions(&p), 0, "{}", run.describe());
    let reason = run.ended()["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("refused before any session: ")
            && reason.contains(".git/objects is not writable"),
        "{reason}"
    );
}

#[test]
fn a_usage_limit_wait_is_honoured_after_kill_9_and_after_fresh() {
    // Iteration 1 hits a usage limit that resets in 40 s; every later one works.
    let scenario = r#"
record_messages = ".ralph/messages.jsonl"
[[iteration]]
exit_code = 1
[[iteration.step]]
context = 30000
text = "Starting."
[[iteration.step]]
rate_limit = "rejected"
resets_in_secs = 40
rate_limit_type = "five_hour"
[[iteration.step]]
error = "rate_limit"
resets_in_secs = 40
[[iteration]]
[[iteration.step]]
context = 30000
text = "Back."
"#;
    let p = Project::new(PLAN, scenario, "");
    let mut first = p.spawn_unread_run();
    crate::common::wait_for_event(&p, "limit_wait", Duration::from_secs(30));
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    assert_eq!(sessions(&p), 1);
    for args in [&[][..], &["--fresh"][..]] {
        let mut again = p.spawn_run(args);
        std::thread::sleep(Duration::from_secs(4));
        assert_eq!(
            sessions(&p),
            1,
            "{args:?}: a session started before the recorded reset"
        );
        let log = p.read(".ralph/events.jsonl");
        let last_start = log.rfind("\"event\":\"run_started\"").unwrap();
        assert!(
            log[last_start..].contains("\"source\":\"recorded\""),
            "{args:?}: {log}"
        );
        again.kill().unwrap();
        again.wait().unwrap();
    }
}
