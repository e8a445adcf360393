//! End-to-end tests of `ralph sim` through the built binary: the stream-json protocol on
//! stdin/stdout, the wait for stdin's end, checkpoint compliance and signals.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(5);

/// One line of the sim's stdout, or its end.
enum Out {
    Line(Vec<u8>),
    Eof,
}

struct Agent {
    child: Child,
    stdin: Option<ChildStdin>,
    out: Receiver<Out>,
    dir: tempfile::TempDir,
}

impl Agent {
    fn spawn(scenario: &str, iteration: u32, extra: &[&str]) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("fix_plan.md"),
            "# Plan\n- [ ] parser\n- [ ] tests\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("scenario.toml"), scenario).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_ralph"))
            .args([
                "sim",
                "scenario.toml",
                "-p",
                "--output-format",
                "stream-json",
            ])
            .args(["--verbose", "--input-format", "stream-json"])
            .args(extra)
            .current_dir(dir.path())
            .env("RALPH_ITERATION", iteration.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.path().join("sim.stderr")).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, out) = mpsc::channel();
        thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let _ = tx.send(Out::Line(line));
                    }
                }
            }
            let _ = tx.send(Out::Eof);
        });
        let stdin = child.stdin.take();
        Agent {
            child,
            stdin,
            out,
            dir,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    fn send(&mut self, text: &str) {
        let message = serde_json::json!({
            "type": "user",
            "message": {"role": "user", "content": [{"type": "text", "text": text}]},
        });
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// The next raw stdout line (with its newline, if it had one); None at EOF.
    fn raw_line(&self) -> Option<Vec<u8>> {
        match self
            .out
            .recv_timeout(TIMEOUT)
            .expect("a line within the timeout")
        {
            Out::Line(line) => Some(line),
            Out::Eof => None,
        }
    }

    fn line(&self) -> Value {
        let line = self.raw_line().expect("a line, not EOF");
        assert_eq!(line.last(), Some(&b'\n'), "lines end with a newline");
        serde_json::from_slice(&line)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&line)))
    }

    /// Reads lines up to and including the first one `pred` accepts.
    fn until(&self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let line = self.line();
            let done = pred(&line);
            seen.push(line);
            if done {
                return seen;
            }
        }
    }

    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the sim did not exit");
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn still_running_after(&mut self, wait: Duration) -> bool {
        thread::sleep(wait);
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_type(kind: &'static str) -> impl Fn(&Value) -> bool {
    move |v| v["type"] == kind
}

/// Gone, or a zombie waiting for init: either way no longer running.
fn process_gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        if process_gone_now(pid) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for_file(path: &Path) -> String {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn plays_a_script_then_waits_for_stdin_eof() {
    let mut agent = Agent::spawn(
        r#"
        exit_code = 3
        context_window = 300000
        [[step]]
        context = 21000
        text = "Implementing the parser."
        path = "src/parser.py"
        content = "def parse(s):\n    return s.split(',')\n"
        [[step]]
        context = 60000
        path = "fix_plan.md"
        old = "- [ ] parser"
        new = "- [x] parser"
        [[step]]
        command = "echo hello; echo oops >&2"
        [[step]]
        result = "All done.\n\n<promise>COMPLETE</promise>"
        "#,
        1,
        &[
            "--model",
            "claude-opus-4-1",
            "--dangerously-skip-permissions",
        ],
    );
    agent.send("Work through fix_plan.md.");
    let lines = agent.until(is_type("result"));

    let init = &lines[0];
    assert_eq!(
        (init["type"].as_str(), init["subtype"].as_str()),
        (Some("system"), Some("init"))
    );
    assert_eq!(init["model"], "claude-opus-4-1");
    assert_eq!(init["permissionMode"], "bypassPermissions");
    let session = init["session_id"].as_str().unwrap().to_string();
    assert_eq!(
        Path::new(init["cwd"].as_str().unwrap())
            .canonicalize()
            .unwrap(),
        agent.dir.path().canonicalize().unwrap()
    );

    let assistants: Vec<&Value> = lines.iter().filter(|l| l["type"] == "assistant").collect();
    for line in &assistants {
        assert_eq!(line["message"]["model"], "claude-opus-4-1");
        assert_eq!(line["session_id"], session.as_str());
        assert!(line["uuid"].is_string());
        assert!(line["parent_tool_use_id"].is_null());
    }
    // The text and the Write of one message share its id and usage.
    assert_eq!(
        assistants[0]["message"]["id"],
        assistants[1]["message"]["id"]
    );
    assert_eq!(
        assistants[0]["message"]["usage"],
        assistants[1]["message"]["usage"]
    );
    let usage = &assistants[0]["message"]["usage"];
    let occupancy = usage["input_tokens"].as_u64().unwrap()
        + usage["cache_creation_input_tokens"].as_u64().unwrap()
        + usage["cache_read_input_tokens"].as_u64().unwrap();
    assert_eq!(occupancy, 21_000);
    let write = &assistants[1]["message"]["content"][0];
    assert_eq!(write["name"], "Write");
    let written = PathBuf::from(write["input"]["file_path"].as_str().unwrap());
    assert!(written.is_absolute());
    assert!(written.ends_with("src/parser.py"));
    assert_eq!(
        std::fs::read_to_string(agent.path("src/parser.py")).unwrap(),
        "def parse(s):\n    return s.split(',')\n"
    );
    assert!(
        std::fs::read_to_string(agent.path("fix_plan.md"))
            .unwrap()
            .contains("- [x] parser")
    );

    let bash_result = lines
        .iter()
        .find(|l| {
            l["type"] == "user"
                && l["message"]["content"][0]["content"]
                    .as_str()
                    .is_some_and(|c| c.contains("hello"))
        })
        .expect("a Bash tool_result");
    assert_eq!(
        bash_result["message"]["content"][0]["content"],
        "hello\noops"
    );
    assert_eq!(bash_result["message"]["content"][0]["is_error"], false);

    let result = lines.last().unwrap();
    assert_eq!(result["subtype"], "success");
    assert_eq!(result["is_error"], false);
    assert_eq!(result["result"], "All done.\n\n<promise>COMPLETE</promise>");
    assert_eq!(
        result["modelUsage"]["claude-opus-4-1"]["contextWindow"],
        300_000
    );
    assert_eq!(result["terminal_reason"], "completed");
    // The result text was said by the agent first, as with the real CLI.
    assert_eq!(
        lines[lines.len() - 2]["message"]["content"][0]["text"],
        "All done.\n\n<promise>COMPLETE</promise>"
    );

    // Like the real CLI: no exit while stdin is open; another message gets an answer.
    assert!(agent.still_running_after(Duration::from_millis(300)));
    agent.send("Anything else?");
    let reply = agent.until(is_type("result"));
    assert_eq!(reply[0]["type"], "assistant");
    assert_eq!(reply.last().unwrap()["subtype"], "success");
    assert!(agent.still_running_after(Duration::from_millis(100)));

    agent.close_stdin();
    assert_eq!(agent.wait_exit().code(), Some(3));
    assert!(agent.raw_line().is_none());
}

#[test]
fn default_result_repeats_the_last_text_and_eof_does_not_cut_the_script() {
    let mut agent = Agent::spawn(
        r#"
        [[step]]
        context = 30000
        text = "First."
        [[step]]
        delay_ms = 200
        context = 40000
        text = "Second and last."
        "#,
        1,
        &[],
    );
    agent.send("go");
    // Closing stdin lets the session end after its current turn, not in the middle.
    agent.close_stdin();
    let lines = agent.until(is_type("result"));
    let result = lines.last().unwrap();
    assert_eq!(result["result"], "Second and last.");
    assert_eq!(result["num_turns"], 2);
    assert_eq!(result["usage"]["input_tokens"], 4000);
    assert_eq!(result["usage"]["cache_read_input_tokens"], 28000 + 38000);
    assert_eq!(agent.wait_exit().code(), Some(0));
}

#[test]
fn sigint_kills_the_running_tool_and_reports_aborted_tools() {
    let mut agent = Agent::spawn(
        r#"
        [[step]]
        context = 89500
        text = "Running the slow test suite."
        command = "sleep 30 & echo $! > sleep.pid; wait"
        [[step]]
        text = "never reached"
        "#,
        1,
        &[],
    );
    agent.send("go");
    let lines = agent.until(|l| l["message"]["content"][0]["type"] == "tool_use");
    let tool_id = lines.last().unwrap()["message"]["content"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let sleep_pid: i32 = wait_for_file(&agent.path("sleep.pid"))
        .trim()
        .parse()
        .unwrap();
    assert!(!process_gone_now(sleep_pid), "the tool's sleep runs");

    let sent = Instant::now();
    kill(agent.pid(), Signal::SIGINT).unwrap();
    let status = agent.wait_exit();
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(0));
    assert!(took < Duration::from_secs(1), "exit took {took:?}");

    let rejection = agent.line();
    assert_eq!(rejection["type"], "user");
    assert_eq!(
        rejection["message"]["content"][0]["tool_use_id"],
        tool_id.as_str()
    );
    assert_eq!(rejection["message"]["content"][0]["is_error"], true);
    let interrupted = agent.line();
    assert_eq!(
        interrupted["message"]["content"][0]["text"],
        "[Request interrupted by user for tool use]"
    );
    let result = agent.line();
    assert_eq!(result["type"], "result");
    assert_eq!(result["subtype"], "error_during_execution");
    assert_eq!(result["is_error"], true);
    assert_eq!(result["terminal_reason"], "aborted_tools");
    assert!(result.get("result").is_none());
    assert!(result["errors"].is_array());
    assert!(agent.raw_line().is_none());
    assert!(process_gone(sleep_pid), "the tool's sleep survived");
}

fn process_gone_now(pid: i32) -> bool {
    !crate::common::alive(pid)
}

#[test]
fn sigint_during_a_delay_aborts_without_a_tool_result() {
    let mut agent = Agent::spawn("[[step]]\ntext = \"hi\"\n[[step]]\nhang = true\n", 1, &[]);
    agent.send("go");
    agent.until(is_type("assistant"));
    kill(agent.pid(), Signal::SIGINT).unwrap();
    assert_eq!(agent.wait_exit().code(), Some(0));
    let interrupted = agent.line();
    assert_eq!(
        interrupted["message"]["content"][0]["text"],
        "[Request interrupted by user]"
    );
    assert_eq!(agent.line()["subtype"], "error_during_execution");
}

#[test]
fn sigterm_exits_143_without_a_result() {
    let mut agent = Agent::spawn(
        "[[step]]\ntext = \"working\"\ncommand = \"sleep 30\"\n",
        1,
        &[],
    );
    agent.send("go");
    agent.until(|l| l["message"]["content"][0]["type"] == "tool_use");
    thread::sleep(Duration::from_millis(100));
    kill(agent.pid(), Signal::SIGTERM).unwrap();
    let status = agent.wait_exit();
    assert_eq!(status.code(), Some(143));
    if let Some(line) = agent.raw_line() {
        panic!(
            "unexpected line after SIGTERM: {}",
            String::from_utf8_lossy(&line)
        );
    }
}

#[test]
fn ignored_signals_leave_it_running() {
    let mut agent = Agent::spawn(
        "on_sigint = \"ignore\"\non_sigterm = \"ignore\"\n[[step]]\ntext = \"stuck\"\n[[step]]\nhang = true\n",
        1,
        &[],
    );
    agent.send("go");
    agent.until(is_type("assistant"));
    kill(agent.pid(), Signal::SIGINT).unwrap();
    kill(agent.pid(), Signal::SIGTERM).unwrap();
    assert!(agent.still_running_after(Duration::from_millis(300)));
    kill(agent.pid(), Signal::SIGKILL).unwrap();
    assert_eq!(agent.wait_exit().code(), None);
}

const CHECKPOINT_SCRIPT: &str = r#"
[[step]]
context = 150000
text = "Working on item 2."
[[step]]
delay_ms = 400
context = 160000
path = "late.txt"
content = "written after the request\n"
[[step]]
result = "Finished everything."
"#;

const CHECKPOINT_REQUEST: &str = "Context is at 85%. Finish the edit in progress, write your \
    handoff notes to `.ralph/handoffs/iter-001.md` (what is done, what is next), then stop.";

#[test]
fn checkpoint_request_is_complied_with_at_the_next_step() {
    let mut agent = Agent::spawn(CHECKPOINT_SCRIPT, 1, &[]);
    agent.send("Work through fix_plan.md.");
    agent.until(is_type("assistant"));
    agent.send(CHECKPOINT_REQUEST);
    agent.close_stdin();
    let lines = agent.until(is_type("result"));
    let write = lines
        .iter()
        .find(|l| l["message"]["content"][0]["name"] == "Write")
        .expect("a Write of the notes");
    assert!(
        write["message"]["content"][0]["input"]["file_path"]
            .as_str()
            .unwrap()
            .ends_with(".ralph/handoffs/iter-001.md")
    );
    let result = lines.last().unwrap();
    assert_eq!(result["subtype"], "success");
    assert_eq!(result["is_error"], false);
    assert_eq!(agent.wait_exit().code(), Some(0));
    let notes = std::fs::read_to_string(agent.path(".ralph/handoffs/iter-001.md")).unwrap();
    for section in ["## Done", "## In progress", "## Decisions", "## Next"] {
        assert!(notes.contains(section), "{notes}");
    }
    assert!(
        !agent.path("late.txt").exists(),
        "the script went on after the request"
    );
}

#[test]
fn checkpoint_request_can_be_ignored_or_slow() {
    let scenario = format!("on_message = \"ignore\"\n{CHECKPOINT_SCRIPT}");
    let mut agent = Agent::spawn(&scenario, 1, &[]);
    agent.send("go");
    agent.until(is_type("assistant"));
    agent.send(CHECKPOINT_REQUEST);
    agent.close_stdin();
    let lines = agent.until(is_type("result"));
    assert_eq!(lines.last().unwrap()["result"], "Finished everything.");
    assert_eq!(agent.wait_exit().code(), Some(0));
    assert!(agent.path("late.txt").exists());
    assert!(!agent.path(".ralph/handoffs/iter-001.md").exists());

    let scenario = format!(
        "comply_delay_ms = 300\nhandoff_notes = \"# Notes\\n## Next\\n- tests\\n\"\n{CHECKPOINT_SCRIPT}"
    );
    let mut agent = Agent::spawn(&scenario, 1, &[]);
    agent.send("go");
    agent.until(is_type("assistant"));
    let sent = Instant::now();
    agent.send(CHECKPOINT_REQUEST);
    agent.until(is_type("result"));
    assert!(sent.elapsed() >= Duration::from_millis(300));
    assert_eq!(
        std::fs::read_to_string(agent.path(".ralph/handoffs/iter-001.md")).unwrap(),
        "# Notes\n## Next\n- tests\n"
    );
    agent.close_stdin();
    assert_eq!(agent.wait_exit().code(), Some(0));
}

#[test]
fn iteration_is_chosen_by_env_and_errors_end_the_script() {
    let scenario = r#"
        [[iteration]]
        [[iteration.step]]
        text = "iteration one"

        [[iteration]]
        exit_code = 1
        [[iteration.step]]
        rate_limit = "rejected"
        resets_in_secs = 600
        [[iteration.step]]
        error = "rate_limit"
        text = "You've hit your session limit · resets 3:45pm (boom-2)"
        [[iteration.step]]
        text = "never reached"
    "#;
    let mut agent = Agent::spawn(scenario, 5, &[]);
    agent.send("go");
    let lines = agent.until(is_type("result"));
    let limit = lines
        .iter()
        .find(|l| l["type"] == "rate_limit_event")
        .unwrap();
    assert_eq!(limit["rate_limit_info"]["status"], "rejected");
    let resets = limit["rate_limit_info"]["resetsAt"].as_i64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((resets - now - 600).abs() <= 5);
    let synthetic = &lines[lines.len() - 2];
    assert_eq!(synthetic["message"]["model"], "<synthetic>");
    assert_eq!(synthetic["error"], "rate_limit");
    let result = lines.last().unwrap();
    assert_eq!(result["is_error"], true);
    assert_eq!(result["subtype"], "success");
    assert_eq!(result["api_error_status"], 429);
    assert_eq!(
        result["result"],
        "You've hit your session limit · resets 3:45pm (boom-2)"
    );
    agent.close_stdin();
    assert_eq!(agent.wait_exit().code(), Some(1));
    assert!(
        agent.raw_line().is_none(),
        "steps after the error were played"
    );
}

#[test]
fn raw_bytes_big_lines_and_a_crash_mid_line() {
    let mut agent = Agent::spawn(
        r#"
        [[step]]
        raw = "not json at all"
        [[step]]
        raw_hex = "7b ff fe 7d"
        [[step]]
        big_line_bytes = 3000000
        [[step]]
        stderr_bytes = 100000
        [[step]]
        partial = '{"type":"assistant","mess'
        exit_code = 7
        "#,
        1,
        &[],
    );
    agent.send("go");
    assert_eq!(agent.line()["subtype"], "init");
    assert_eq!(agent.raw_line().unwrap(), b"not json at all\n");
    assert_eq!(agent.raw_line().unwrap(), b"\x7b\xff\xfe\x7d\n");
    let big = agent.raw_line().unwrap();
    assert_eq!(big.len(), 3_000_000);
    let big: Value = serde_json::from_slice(&big).unwrap();
    assert_eq!(big["message"]["content"][0]["type"], "tool_result");
    assert_eq!(agent.raw_line().unwrap(), br#"{"type":"assistant","mess"#);
    assert!(agent.raw_line().is_none());
    assert_eq!(agent.wait_exit().code(), Some(7));
}

#[test]
fn a_tool_can_hold_stdout_open_after_the_sim_exits() {
    let mut agent = Agent::spawn(
        "[[step]]\ntext = \"starting a server\"\ncommand = \"sleep 1.5 &\"\ninherit_stdout = true\n",
        1,
        &[],
    );
    agent.send("go");
    agent.close_stdin();
    agent.until(is_type("result"));
    assert_eq!(agent.wait_exit().code(), Some(0));
    // The sim is gone, but its background child still holds the pipe.
    assert!(matches!(
        agent.out.try_recv(),
        Err(mpsc::TryRecvError::Empty)
    ));
    assert!(matches!(agent.out.recv_timeout(TIMEOUT), Ok(Out::Eof)));
}

#[test]
fn messages_can_be_recorded_and_bad_scenarios_exit_2() {
    let mut agent = Agent::spawn(
        "record_messages = \"messages.jsonl\"\n[[step]]\ntext = \"hi\"\n",
        2,
        &[],
    );
    agent.send("the prompt");
    agent.close_stdin();
    agent.until(is_type("result"));
    assert_eq!(agent.wait_exit().code(), Some(0));
    let recorded: Value = serde_json::from_str(
        std::fs::read_to_string(agent.path("messages.jsonl"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    assert_eq!(
        recorded,
        serde_json::json!({"iteration": 2, "text": "the prompt"})
    );

    let mut agent = Agent::spawn("[[step]]\nhang = true\ntext = \"x\"\n", 1, &[]);
    let status = agent.wait_exit();
    assert_eq!(status.code(), Some(2));
}

#[test]
fn subagent_lines_carry_their_task_id_and_leave_the_main_context_alone() {
    let mut agent = Agent::spawn(
        r#"
        [[step]]
        context = 40000
        text = "Delegating the search."
        tool = "Task"
        description = "Find TODOs"
        prompt = "List TODO comments."
        [[step]]
        subagent = true
        context = 90000
        command = "echo none"
        [[step]]
        api_retry = 1
        [[step]]
        subagent = true
        text = "No TODO comments found."
        [[step]]
        text = "The sub-agent found nothing."
        "#,
        1,
        &[],
    );
    agent.send("go");
    agent.close_stdin();
    let lines = agent.until(is_type("result"));
    let task_id = lines
        .iter()
        .find(|l| l["message"]["content"][0]["name"] == "Task")
        .unwrap()["message"]["content"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let sub: Vec<&Value> = lines
        .iter()
        .filter(|l| l["parent_tool_use_id"] == task_id.as_str())
        .collect();
    // The prompt, the Bash call and its result, and the closing text.
    assert_eq!(sub.len(), 4, "{sub:#?}");
    assert!(sub.iter().filter(|l| l["type"] == "assistant").all(|l| {
        l["message"]["usage"]["cache_read_input_tokens"]
            .as_u64()
            .unwrap()
            + l["message"]["usage"]["input_tokens"].as_u64().unwrap()
            == 90_000
    }));
    let task_result = lines
        .iter()
        .position(|l| l["message"]["content"][0]["tool_use_id"] == task_id.as_str())
        .unwrap();
    let last_turn = lines
        .iter()
        .position(|l| l["message"]["content"][0]["text"] == "The sub-agent found nothing.")
        .unwrap();
    assert!(task_result < last_turn);
    assert_eq!(
        lines[task_result]["message"]["content"][0]["content"][0]["text"],
        "No TODO comments found."
    );
    let main = &lines[last_turn];
    assert!(main["parent_tool_use_id"].is_null());
    let usage = &main["message"]["usage"];
    assert_eq!(
        usage["input_tokens"].as_u64().unwrap()
            + usage["cache_read_input_tokens"].as_u64().unwrap(),
        40_000,
        "the main thread carries its own context"
    );
    // result.usage counts main-thread turns only; modelUsage counts everything.
    let result = lines.last().unwrap();
    assert_eq!(result["num_turns"], 2);
    assert_eq!(result["usage"]["cache_read_input_tokens"], 2 * 38_000);
    assert_eq!(
        result["modelUsage"]["claude-sonnet-4-5"]["cacheReadInputTokens"],
        2 * 38_000 + 2 * 88_000
    );
    assert_eq!(agent.wait_exit().code(), Some(0));
}

#[test]
fn a_result_file_written_by_a_tool_is_the_result_text() {
    // The first result's file is missing: the `result` text stands; the
    // second's was written by the Bash step before it.
    let mut agent = Agent::spawn(
        r#"
        [[step]]
        result = "Not done yet."
        result_file = "said.txt"
        [[step]]
        command = "printf 'All done.\n\n<promise>COMPLETE</promise>\n' > said.txt"
        [[step]]
        result = "Not done yet."
        result_file = "said.txt"
        "#,
        1,
        &[],
    );
    agent.send("go");
    agent.close_stdin();
    let first = agent.until(is_type("result"));
    assert_eq!(first.last().unwrap()["result"], "Not done yet.");
    let second = agent.until(is_type("result"));
    let result = second.last().unwrap();
    assert_eq!(result["result"], "All done.\n\n<promise>COMPLETE</promise>");
    assert_eq!(agent.wait_exit().code(), Some(0));
}

#[test]
fn a_bash_step_without_a_shell_fails_the_tool_not_the_session() {
    // `FROM scratch` has no `sh`: the tool result is an error, and the
    // session plays on to its result (it used to exit 1 at once).
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("scenario.toml"),
        "[[step]]\ncommand = \"cat fix_plan.md\"\n[[step]]\nresult = \"Done anyway.\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args([
            "sim",
            "scenario.toml",
            "-p",
            "--output-format",
            "stream-json",
        ])
        .current_dir(dir.path())
        .env("PATH", dir.path().join("no-such-dir"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tool_result = lines
        .iter()
        .find(|l| l["type"] == "user")
        .expect("a tool result");
    assert_eq!(tool_result["message"]["content"][0]["is_error"], true);
    let result = lines.last().unwrap();
    assert_eq!(result["type"], "result");
    assert_eq!(result["result"], "Done anyway.");
}
