//! End-to-end tests of the agent kinds other than Claude Code, fast and
//! without a network: `ralph sim` speaks the format ralph asks for by the
//! arguments each kind gets (Codex's app-server protocol, opencode's `run
//! --format json`, Gemini CLI's `-o stream-json`), so each kind's decoder,
//! Codex's wire and the supervisor's handling of each kind's capabilities
//! run here as they do with the real CLIs (tests/suite/real_*.rs).

use crate::common;
use crate::e2e_checkpoint::CLIMB_AND_RESUME;

use std::time::Duration;

use common::{Project, Run, processes_matching, wait_for_event};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const PLAN: &str = "# Ship the parser\n\n- [ ] parser\n- [ ] tests\n";
const LIMIT: Duration = Duration::from_secs(60);

fn project(kind: &str, scenario: &str, extra: &str) -> Project {
    let p = Project::bare(PLAN, scenario, "");
    p.write(
        "ralph.toml",
        &format!("[agent]\nkind = \"{kind}\"\ncommand = \"ralph sim scenario.toml\"\n\n{extra}\n"),
    );
    p.git_init();
    p
}

fn transcript(p: &Project, run: &Run, iteration: u32) -> String {
    let id = run.of("run_started")[0]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    p.read(&format!(".ralph/runs/{id}/iter-{iteration:03}.jsonl"))
}

/// The WIP commit of a checkpoint, the handoff it wrote, and iteration 2's
/// prompt resuming from it.
fn assert_handed_off_and_resumed(p: &Project, run: &Run) -> String {
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(!p.path("never.txt").exists(), "it stopped at L2");
    let cp = run.of("checkpoint");
    assert_eq!(cp.len(), 1, "{}", run.describe());
    assert_eq!(
        (&cp[0]["level"], &cp[0]["trigger"]),
        (&"L2".into(), &"context".into())
    );
    let log = p.log();
    assert_eq!(log[1], "ralph: checkpoint iter 1 (L2 at 87%)", "{log:?}");
    let handoff = p.handoffs().pop().expect("a handoff");
    let rel = handoff
        .strip_prefix(p.root())
        .unwrap()
        .display()
        .to_string();
    let messages = p.read(".ralph/messages.jsonl");
    let prompt: serde_json::Value = serde_json::from_str(
        messages
            .lines()
            .find(|l| l.contains("\"iteration\":2"))
            .expect("iteration 2's prompt"),
    )
    .unwrap();
    let prompt = prompt["text"].as_str().unwrap();
    assert!(
        prompt.contains(&format!("Read the handoff first: `{rel}`")),
        "{prompt}"
    );
    assert_eq!(p.state()["status"], "completed");
    std::fs::read_to_string(handoff).unwrap()
}

#[test]
fn codex_metered_past_l2_hands_off_with_its_notes_and_resumes() {
    let p = project(
        "codex",
        CLIMB_AND_RESUME,
        "[context]\ngrace = \"20s\"\nnudge_at_l1 = false\n",
    );
    let run = p.run(&[], LIMIT);
    let doc = assert_handed_off_and_resumed(&p, &run);
    // The notes the agent wrote when asked through `turn/steer`.
    assert!(doc.contains("parser.py:2 quoting"), "{doc}");
    let requested = run.of("checkpoint_requested");
    assert_eq!(requested[0]["notes_path"], ".ralph/notes/iter-001.md");
    assert!(
        run.of("agent_signalled").is_empty(),
        "it ended its turn itself"
    );
    // Metered from the app-server's usage notifications, with the window
    // they report; the request was steered into the running turn.
    let first = transcript(&p, &run, 1);
    assert!(first.contains(r#""method":"thread/tokenUsage/updated""#));
    assert!(first.contains(r#""modelContextWindow":200000"#));
    assert!(first.contains(r#"{"id":4,"result":{"turnId""#), "{first}");
    let messages = p.read(".ralph/messages.jsonl");
    assert!(messages.lines().nth(1).unwrap().contains("iter-001.md"));
}

#[test]
fn codex_is_stopped_with_turn_interrupt_and_nothing_is_left() {
    let scenario =
        "[[step]]\ncontext = 30000\ntext = \"Running the suite.\"\ncommand = \"sleep 30.417\"\n";
    let p = project("codex", scenario, "");
    let child = p.spawn_run(&[]);
    common::wait_for_process("sleep 30.417", Duration::from_secs(20));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(130), "{}", run.describe());
    let signals: Vec<_> = run
        .of("agent_signalled")
        .iter()
        .map(|e| e["signal"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(signals, ["turn/interrupt"], "{}", run.describe());
    // Codex ended the turn itself (an app-server dies on SIGINT without one).
    assert!(transcript(&p, &run, 1).contains(r#""status":"interrupted""#));
    assert!(processes_matching("sleep 30.417").is_empty());
}

#[test]
fn codex_usage_limit_is_read_from_its_own_words() {
    let scenario = "[[step]]\ncontext = 20000\ntext = \"Starting.\"\n[[step]]\nerror = \"rate_limit\"\nresets_in_secs = 7200\n";
    let p = project("codex", scenario, "[rate_limit]\nmax_wait = \"10m\"\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(
        run.code,
        Some(5),
        "the limit outlasts max_wait\n{}",
        run.describe()
    );
    let reason = run.ended()["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("usage limit hit"), "{reason}");
    assert!(
        regex::Regex::new(r"resets in (1h ?5\dm|2h)")
            .unwrap()
            .is_match(&reason),
        "{reason}"
    );
    assert!(transcript(&p, &run, 1).contains("try again at"));
}

#[test]
fn opencode_metered_past_l2_is_stopped_then_continued_for_its_notes() {
    let p = project("opencode", CLIMB_AND_RESUME, "[context]\ngrace = \"20s\"\n");
    let run = p.run(&[], LIMIT);
    let doc = assert_handed_off_and_resumed(&p, &run);
    // opencode takes no message mid-session: no request while it runs, a
    // clean stop, then its session continued once (`run --session ID`)
    // with the request as the prompt; the notes it wrote are the handoff's.
    assert!(run.of("nudged").is_empty());
    assert!(run.of("checkpoint_requested")[0]["notes_path"].is_null());
    assert_eq!(run.of("agent_signalled")[0]["signal"], "SIGINT");
    let continued = run.of("session_continued");
    assert_eq!(continued.len(), 1, "{}", run.describe());
    assert_eq!(continued[0]["notes_written"], true, "{continued:?}");
    assert_eq!(continued[0]["notes_path"], ".ralph/notes/iter-001.md");
    let session = continued[0]["session_id"].as_str().unwrap();
    assert!(session.starts_with("ses_"), "{session}");
    assert!(doc.contains("parser.py:2 quoting"), "{doc}");
    assert!(!doc.contains("written from the transcript"), "{doc}");
    assert!(transcript(&p, &run, 1).contains(r#""type":"step_finish""#));
    // The continuation's own transcript, in the same session.
    let id = run.of("run_started")[0]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let second = p.read(&format!(".ralph/runs/{id}/iter-001-continued.jsonl"));
    assert!(
        second.contains(session) && second.contains("iter-001.md"),
        "{second}"
    );
}

#[test]
fn opencode_without_agent_handoff_is_handed_off_from_the_transcript() {
    let p = project(
        "opencode",
        CLIMB_AND_RESUME,
        "[context]\ngrace = \"20s\"\nagent_handoff = false\n",
    );
    let run = p.run(&[], LIMIT);
    let doc = assert_handed_off_and_resumed(&p, &run);
    assert!(run.of("session_continued").is_empty(), "{}", run.describe());
    assert!(
        doc.contains("opencode takes no message mid-session")
            && doc.contains("written from the transcript"),
        "{doc}"
    );
}

#[test]
fn a_sigint_during_the_continuation_cuts_it_short_and_keeps_the_checkpoint() {
    // The continued session takes its time to write the notes.
    let scenario = CLIMB_AND_RESUME.replacen(
        "[[iteration]]\n",
        "[[iteration]]\ncomply_delay_ms = 30000\n",
        1,
    );
    let p = project("opencode", &scenario, "[context]\ngrace = \"40s\"\n");
    let child = p.spawn_run(&[]);
    common::wait_for_process("--session ses_", Duration::from_secs(20));
    let asked = std::time::Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let run = Run::wait(child, LIMIT);
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(run.code, Some(130), "{}", run.describe());
    let continued = run.of("session_continued");
    assert_eq!(continued[0]["notes_written"], false, "{}", run.describe());
    // The work is committed and handed off all the same, saying why the
    // notes are missing.
    assert_eq!(run.of("checkpoint").len(), 1, "{}", run.describe());
    let doc = std::fs::read_to_string(p.handoffs().pop().expect("a handoff")).unwrap();
    assert!(
        doc.contains("continued once to ask for notes, and it wrote none"),
        "{doc}"
    );
    assert!(processes_matching("--session ses_").is_empty());
}

#[test]
fn gemini_is_supervised_but_not_metered_live() {
    let p = project("gemini", CLIMB_AND_RESUME, "");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    // No live meter: no level, no checkpoint, and the readings say so
    // rather than show a number.
    assert!(run.of("checkpoint").is_empty(), "{}", run.describe());
    assert!(run.of("level_changed").is_empty(), "{}", run.describe());
    let readings = run.of("context");
    assert!(!readings.is_empty());
    assert!(readings.iter().all(|e| e["reading"]["not_metered"] == true));
    // The end of each iteration says so too, from the event's own field.
    let ended = run.of("iteration_ended");
    assert!(!ended.is_empty());
    assert!(ended.iter().all(|e| e["not_metered"] == true), "{ended:?}");
    let out = p.ralph().args(["context", "--json"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["metered_live"], false, "{report:#}");
    let first = transcript(&p, &run, 1);
    assert!(
        first.lines().next().unwrap().contains(r#""type":"init""#),
        "{first}"
    );
    assert_eq!(p.state()["status"], "completed");
}

#[test]
fn a_kill_9_of_ralph_is_taken_over_with_the_codex_meter_replayed() {
    let scenario = "[[iteration]]\n[[iteration.step]]\ncontext = 40000\ntext = \"Running.\"\ncommand = \"sleep 30.419\"\n[[iteration]]\n[[iteration.step]]\npath = \"fix_plan.md\"\nold = \"- [ ] parser\"\nnew = \"- [x] parser\"\n[[iteration.step]]\npath = \"fix_plan.md\"\nold = \"- [ ] tests\"\nnew = \"- [x] tests\"\n[[iteration.step]]\nresult = \"<promise>COMPLETE</promise>\"\n";
    let p = project("codex", scenario, "");
    let mut child = p.spawn_unread_run();
    common::wait_for_process("sleep 30.419", Duration::from_secs(20));
    // The beat records the tool's session for the takeover.
    wait_for_event(&p, "context", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap();
    child.wait().unwrap();
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let state = p.state();
    // The dead iteration's peak, from its transcript replayed through the
    // Codex decoder (the Claude decoder reads nothing in it).
    assert_eq!(
        state["context_history"][0]["peak_tokens"], 40000,
        "{state:#}"
    );
    assert!(processes_matching("sleep 30.419").is_empty());
}

#[test]
fn the_demo_runs_as_each_kind() {
    let runs: Vec<_> = ["codex", "opencode", "gemini"]
        .into_iter()
        .map(|kind| {
            std::thread::spawn(move || {
                let dir = tempfile::tempdir().unwrap();
                let demo = dir.path().join("demo");
                let out = std::process::Command::new(common::BIN)
                    .args(["demo", "--agent", kind])
                    .arg(&demo)
                    .env("RALPH_LOG", "off")
                    .output()
                    .unwrap();
                let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                assert_eq!(out.status.code(), Some(0), "{kind}: {stderr}");
                let config = std::fs::read_to_string(demo.join("ralph.toml")).unwrap();
                assert!(config.contains(&format!("kind = \"{kind}\"")), "{config}");
                let handoffs = std::fs::read_dir(demo.join(".ralph/handoffs"))
                    .map(|d| d.count())
                    .unwrap_or(0);
                (kind, stderr, handoffs)
            })
        })
        .collect();
    for run in runs {
        let (kind, stderr, handoffs) = run.join().unwrap();
        assert!(stderr.contains("run ended: completed"), "{kind}: {stderr}");
        match kind {
            // Metered live: the demo's second iteration climbs past L2.
            "codex" => {
                assert!(
                    stderr.contains("asked the agent for handoff notes"),
                    "{stderr}"
                );
                assert_eq!(handoffs, 1, "{stderr}");
            }
            "opencode" => {
                assert!(stderr.contains("sent SIGINT to the agent"), "{stderr}");
                assert_eq!(handoffs, 1, "{stderr}");
            }
            _ => {
                assert!(stderr.contains("context not metered live"), "{stderr}");
                // Not "peak context 0.0%" at the end of an iteration either.
                assert!(
                    stderr.contains("context not metered live, $")
                        && !stderr.contains("peak context"),
                    "{stderr}"
                );
                assert_eq!(handoffs, 0, "{stderr}");
            }
        }
    }
}

#[test]
fn codex_rate_limits_feed_the_quota_guard() {
    // The sim passes a `rate_limit` step on as `account/rateLimits/updated`
    // (`usedPercent` of a 10080-minute window: the weekly one).
    let scenario = "[[step]]\ncontext = 20000\npath = \"parser.py\"\ncontent = \"def parse(s):\\n\"\n[[step]]\nrate_limit = \"allowed_warning\"\nrate_limit_type = \"seven_day\"\nresets_in_secs = 86400\nutilization = 0.93\n[[step]]\ndelay_ms = 2500\ntext = \"Still on the parser.\"\n[[step]]\nresult = \"Parser started.\"\n";
    let p = project("codex", scenario, "[quota]\nweekly_percent = 90\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(5), "{}", run.describe());
    let reason = run.ended()["reason"].as_str().unwrap().to_string();
    assert!(
        reason.starts_with("quota guard: the weekly limit is 93% used (quota.weekly_percent 90%)"),
        "{reason}"
    );
    assert_eq!(run.of("checkpoint")[0]["trigger"], "budget");
    assert!(transcript(&p, &run, 1).contains(r#""method":"account/rateLimits/updated""#));
}

/// Issue 35: Codex words a usage limit's reset to the minute; the exact
/// moment came with the account's usage (`account/rateLimits/updated`),
/// and the wait runs until then, not until the minute named (which would
/// retry before the limit lifts).
#[test]
fn codex_usage_limit_is_waited_out_to_the_second() {
    // The reset 40 s past a whole minute, an hour from now.
    let now = jiff::Timestamp::now().as_second();
    let secs = 3600 + (40 - now.rem_euclid(60)).rem_euclid(60);
    let scenario = format!(
        "[[step]]\ncontext = 20000\ntext = \"Starting.\"\n[[step]]\nrate_limit = \"rejected\"\nrate_limit_type = \"five_hour\"\nresets_in_secs = {secs}\nutilization = 1.0\n[[step]]\nerror = \"rate_limit\"\nresets_in_secs = {secs}\n"
    );
    let p = project("codex", &scenario, "[rate_limit]\nmax_wait = \"2h\"\n");
    let child = p.spawn_run(&[]);
    let pid = Pid::from_raw(child.id() as i32);
    common::wait_for_event(&p, "limit_wait", LIMIT);
    kill(pid, Signal::SIGINT).unwrap();
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(130), "{}", run.describe());
    assert!(transcript(&p, &run, 1).contains("try again at"));
    let wait = &run.of("limit_wait")[0];
    let until: jiff::Timestamp = wait["until"].as_str().unwrap().parse().unwrap();
    // The reset (40 s past the minute, give or take the sim's start) and
    // the margin of 5 s; the words alone would give 5 s past the minute.
    let second = until.as_second().rem_euclid(60);
    assert!((45..=50).contains(&second), "{wait}");
}

/// Issue 35: a Codex run is metered on Codex's window from the start, not
/// on Claude's 200k for a model name ralph's table does not know: the
/// first iteration's items are planned on it (an item without history is
/// estimated at 20% of the usable window: 225,400 of Codex's 258,400, not
/// 167,000), and every reading shows it.
#[test]
fn codex_is_metered_on_its_own_window_from_the_first_reading() {
    let scenario = "model = \"gpt-5.1-codex\"\ncontext_window = 258400\n[[step]]\ncontext = 20000\ntext = \"Listing.\"\ncommand = \"ls\"\n[[step]]\ncontext = 24000\npath = \"fix_plan.md\"\nold = \"- [ ] parser\"\nnew = \"- [x] parser\"\n[[step]]\ncontext = 25000\nresult = \"The parser is done.\"\n";
    let p = project("codex", scenario, "[loop]\nmax_iterations = 1\n");
    // Before any session, `ralph context --estimate` sizes the next item on
    // the window the meter will use (Codex's, not Claude's 200k guess).
    let out = p
        .ralph()
        .args(["context", "--estimate", "tests", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let before: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = p.run(&[], LIMIT);
    let checked = run.of("item_checked");
    assert_eq!(checked.len(), 1, "{}", run.describe());
    assert_eq!(checked[0]["next_estimate"], 45_080, "{}", run.describe());
    assert_eq!(before["tokens"], 45_080, "{before}");
    let windows: Vec<_> = run
        .of("context")
        .iter()
        .map(|c| c["reading"]["window"].clone())
        .collect();
    assert!(
        windows.iter().all(|w| *w == 258_400),
        "{windows:?}\n{}",
        run.describe()
    );
}
