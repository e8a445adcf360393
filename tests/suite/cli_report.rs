//! `ralph status` and `ralph context` (one-shot and `--watch`) on the built
//! binary, against a `.ralph/` written with the crate's own types.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use ralph::context::{Level, MeterReading};
use ralph::formats::{Event, Record};
use ralph::formats::{HistoryEntry, IterationRecord, Layout, RunState};
use ralph::project::Lock;

const RUN_ID: &str = "20261121-220000";

fn ralph(root: &Path) -> Command {
    let mut cmd = Command::cargo_bin("ralph").unwrap();
    cmd.arg("-C")
        .arg(root)
        .env("TZ", "UTC")
        .env_remove("RALPH_LOG");
    cmd
}

fn reading(tokens: u64, level: Level, rate: Option<f64>, eta: Option<u64>) -> MeterReading {
    let percent = (tokens as f64 * 1000.0 / 167_000.0).round() / 10.0;
    MeterReading {
        tokens,
        usable: 167_000,
        window: 200_000,
        percent,
        level,
        peak_percent: percent,
        rate_per_min: rate,
        eta_to_checkpoint_secs: eta,
        not_metered: false,
        window_source: None,
    }
}

fn context_event(iteration: u32, r: MeterReading, tool: Option<&str>) -> Event {
    Event::Context {
        iteration,
        reading: r,
        tool: tool.map(str::to_string),
    }
}

fn append(root: &Path, events: &[(&str, Event)]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(Layout::new(root).events())
        .unwrap();
    for (ts, event) in events {
        let record = Record {
            worker: None,
            ts: ts.to_string(),
            event: event.clone(),
        };
        writeln!(f, "{}", serde_json::to_string(&record).unwrap()).unwrap();
    }
}

/// Written as is (not with `RunState::save`, which stamps `updated_at`),
/// but whole, as the supervisor writes it: a `ralph context --watch`
/// reading a half-written file would stop with an error.
fn write_state(root: &Path, state: &RunState) {
    ralph::formats::write_atomic(
        &Layout::new(root).state(),
        &serde_json::to_vec_pretty(state).unwrap(),
    )
    .unwrap();
}

/// A project in iteration 3 of a run: iteration 1 checkpointed at L2,
/// iteration 2 ended at 35%, iteration 3 is at 62% and climbing.
fn fixture(status: &str) -> (tempfile::TempDir, RunState) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(
        root.join("fix_plan.md"),
        "# Demo: a tiny CSV toolkit\n\n- [x] parser\n- [ ] writer: join fields\n- [ ] tests\n",
    )
    .unwrap();
    Layout::new(root).ensure().unwrap();
    let handoff = ".ralph/handoffs/2026-11-21-2231-iter001.md";
    let state = RunState {
        run_id: RUN_ID.into(),
        task_name: "fix_plan".into(),
        objective: "Demo: a tiny CSV toolkit".into(),
        iteration: 3,
        started_at: "2026-11-21T22:00:00Z".into(),
        updated_at: "2026-11-21T23:02:10Z".into(),
        status: status.into(),
        exit_reason: (status == "completed")
            .then(|| "every plan item is done and the agent promised COMPLETE".into()),
        max_iterations: 50,
        completion_promise: "COMPLETE".into(),
        todo_items: vec!["writer: join fields".into(), "tests".into()],
        completed_items: vec!["parser".into()],
        context_history: vec![
            HistoryEntry {
                iteration: 1,
                peak_percent: 87.5,
                checkpoint: true,
                level: Some(Level::L2),
                handoff: Some(handoff.into()),
                peak_tokens: 146_125,
            },
            HistoryEntry {
                iteration: 2,
                peak_percent: 35.0,
                checkpoint: false,
                level: Some(Level::L0),
                handoff: None,
                peak_tokens: 58_450,
            },
        ],
        context_window: 200_000,
        cost_usd: 1.234,
        history: vec![
            IterationRecord {
                iteration: 1,
                started_at: "2026-11-21T22:00:01Z".into(),
                ended_at: "2026-11-21T22:31:40Z".into(),
                outcome: "checkpoint".into(),
                exit_code: Some(0),
                progress: true,
                cost_usd: 0.81,
                commit: Some("4f6c2a9e1b7d3c5a8e0f2b4d6a8c0e2f4a6b8d0c".into()),
                ..IterationRecord::default()
            },
            IterationRecord {
                iteration: 2,
                started_at: "2026-11-21T22:31:45Z".into(),
                ended_at: "2026-11-21T22:50:02Z".into(),
                outcome: "completed".into(),
                exit_code: Some(0),
                progress: true,
                cost_usd: 0.424,
                ..IterationRecord::default()
            },
        ],
        last_commit: Some("4f6c2a9e1b7d3c5a8e0f2b4d6a8c0e2f4a6b8d0c".into()),
        last_handoff: Some(handoff.into()),
        ..RunState::default()
    };
    write_state(root, &state);
    append(
        root,
        &[
            (
                "2026-11-21T22:00:00Z",
                Event::RunStarted {
                    run_id: RUN_ID.into(),
                    resumed: false,
                    first_iteration: 1,
                    max_iterations: 50,
                    plan: "fix_plan.md".into(),
                    pid: 4242,
                    deadline: None,
                    max_cost_usd: None,
                },
            ),
            (
                "2026-11-21T22:00:01Z",
                Event::IterationStarted {
                    iteration: 1,
                    command: vec!["claude".into()],
                    transcript: ".ralph/runs/x/iter-001.jsonl".into(),
                    resume_from: None,
                },
            ),
            (
                "2026-11-21T22:30:00Z",
                context_event(1, reading(146_125, Level::L2, Some(3_000.0), Some(0)), None),
            ),
            (
                "2026-11-21T22:31:40Z",
                Event::IterationEnded {
                    iteration: 1,
                    outcome: "checkpoint".into(),
                    progress: true,
                    cost_usd: 0.81,
                    peak_percent: 87.5,
                    seconds: 1899.0,
                    error: None,
                    invalid_lines: 0,
                    skipped_lines: 0,
                    not_metered: false,
                    session_id: None,
                },
            ),
            (
                "2026-11-21T22:50:03Z",
                Event::IterationStarted {
                    iteration: 3,
                    command: vec!["claude".into()],
                    transcript: ".ralph/runs/x/iter-003.jsonl".into(),
                    resume_from: None,
                },
            ),
            (
                "2026-11-21T22:55:00Z",
                context_event(
                    3,
                    reading(80_000, Level::L0, None, None),
                    Some("Read fix_plan.md"),
                ),
            ),
            (
                "2026-11-21T23:02:00Z",
                context_event(
                    3,
                    reading(103_540, Level::L0, Some(4_100.0), Some(560)),
                    None,
                ),
            ),
        ],
    );
    (dir, state)
}

fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        cmd,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn pretty_json(text: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    serde_json::to_string_pretty(&value).unwrap()
}

/// Filters for what changes from run to run: pids, elapsed time of a live run.
macro_rules! redacted {
    ($body:block) => {
        insta::with_settings!({filters => vec![
            (r"pid \d+", "pid [PID]"),
            (r#""supervisor_pid": \d+"#, r#""supervisor_pid": "[PID]""#),
            (r#""elapsed_secs": \d+"#, r#""elapsed_secs": "[SECS]""#),
            (r"elapsed    \S+ since", "elapsed    [ELAPSED] since"),
        ]}, $body)
    };
}

#[test]
fn status_of_a_running_run() {
    let (dir, _) = fixture("running");
    let _lock = Lock::acquire(&Layout::new(dir.path()), RUN_ID).unwrap();
    let human = stdout_of(ralph(dir.path()).arg("status"));
    let json = pretty_json(&stdout_of(ralph(dir.path()).args(["status", "--json"])));
    redacted!({
        insta::assert_snapshot!("status_running", human);
        insta::assert_snapshot!("status_running_json", json);
    });
}

#[test]
fn status_of_a_finished_run_and_of_none() {
    let (dir, _) = fixture("completed");
    let human = stdout_of(ralph(dir.path()).arg("status"));
    insta::assert_snapshot!("status_completed", human);
    // A state that says running with no supervisor alive: interrupted.
    let (dir, _) = fixture("running");
    let json = stdout_of(ralph(dir.path()).args(["status", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["status"], "interrupted");
    assert_eq!(v["supervisor_pid"], serde_json::Value::Null);
    let empty = tempfile::tempdir().unwrap();
    let human = stdout_of(ralph(empty.path()).arg("status"));
    assert!(human.contains("no ralph run here yet"), "{human}");
    let v: serde_json::Value =
        serde_json::from_str(&stdout_of(ralph(empty.path()).args(["status", "--json"]))).unwrap();
    assert_eq!(v["status"], "none");
}

#[test]
fn context_of_a_running_iteration() {
    let (dir, _) = fixture("running");
    let _lock = Lock::acquire(&Layout::new(dir.path()), RUN_ID).unwrap();
    let human = stdout_of(ralph(dir.path()).arg("context"));
    let json = pretty_json(&stdout_of(ralph(dir.path()).args(["context", "--json"])));
    redacted!({
        insta::assert_snapshot!("context_running", human);
        insta::assert_snapshot!("context_running_json", json);
    });
}

#[test]
fn context_after_the_run_ended() {
    let (dir, _) = fixture("completed");
    let human = stdout_of(ralph(dir.path()).arg("context"));
    insta::assert_snapshot!("context_completed", human);
    let v: serde_json::Value =
        serde_json::from_str(&stdout_of(ralph(dir.path()).args(["context", "--json"]))).unwrap();
    assert_eq!(v["live"], false);
    assert_eq!(v["recommendation"]["code"], "not_running");
    assert_eq!(v["current"]["iteration"], 3);
}

/// Collects a child's stdout lines as they come.
fn collect(child: &mut std::process::Child) -> Arc<Mutex<String>> {
    let out = Arc::new(Mutex::new(String::new()));
    let sink = out.clone();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let mut s = sink.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
    out
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn context_watch_follows_new_readings_and_exits_when_the_run_ends() {
    let (dir, mut state) = fixture("running");
    let root = dir.path();
    let lock = Lock::acquire(&Layout::new(root), RUN_ID).unwrap();
    let mut child = ralph(root)
        .args(["context", "--watch"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = collect(&mut child);
    let seen = |text: &str| out.lock().unwrap().contains(text);
    let limit = Duration::from_secs(20);
    wait_for("the first reading", limit, || seen("62.0%"));
    append(
        root,
        &[(
            "2026-11-21T23:05:00Z",
            context_event(
                3,
                reading(119_070, Level::L1, Some(5_000.0), Some(180)),
                Some("Edit src/writer.rs"),
            ),
        )],
    );
    // The block arrives line by line: wait for all of it.
    wait_for("the new reading's block", limit, || {
        seen("71.3%") && seen("Edit src/writer.rs") && seen("checkpoint soon")
    });
    // The run ends: the supervisor saves the state and lets go of the lock.
    state.status = "completed".into();
    write_state(root, &state);
    drop(lock);
    wait_for("the watch to exit", limit, || {
        child.try_wait().unwrap().is_some()
    });
    assert!(child.wait().unwrap().success());
    let text = out.lock().unwrap().clone();
    // Off a terminal, a block per change: first, the new reading, the end.
    let blocks: Vec<&str> = text.split("\n\nrun       ").collect();
    assert_eq!(blocks.len(), 3, "{text}");
    assert!(
        blocks[0].contains("62.0%") && blocks[1].contains("71.3%"),
        "{text}"
    );
    assert!(
        blocks[2].starts_with(&format!("{RUN_ID} · completed")),
        "{text}"
    );
    assert!(blocks[2].contains("advice    no run is going"), "{text}");
}

#[test]
fn context_watch_json_prints_one_object_per_change() {
    let (dir, _) = fixture("completed");
    let text = stdout_of(ralph(dir.path()).args(["context", "--watch", "--json"]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["status"], "completed");
}
