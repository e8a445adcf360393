//! Nothing leaked, nothing hangs (issue 13): secrets with hostile
//! characters, token shapes and key files in what ralph commits, control
//! characters on the terminal, tools that outlive a killed supervisor in
//! sessions of their own, transcripts on a small disk, and edge inputs.

use crate::common;

use std::time::Duration;

use common::{Project, QUICK_L2, files_under, toml_string};

const PLAN: &str = "# Leak\n\n- [ ] work\n";
const LIMIT: Duration = Duration::from_secs(60);

/// The text of every commit after the user's first: messages and the
/// blobs each one added or changed.
fn committed_texts(p: &Project) -> Vec<(String, String)> {
    let repo = p.repo();
    let mut walk = repo.revwalk().unwrap();
    walk.push_head().unwrap();
    let mut out = Vec::new();
    for id in walk {
        let commit = repo.find_commit(id.unwrap()).unwrap();
        if commit.parent_count() == 0 {
            continue;
        }
        out.push((
            format!("message of {}", commit.id()),
            commit.message().unwrap_or_default().to_string(),
        ));
        let parent = commit.parent(0).unwrap().tree().unwrap();
        let diff = repo
            .diff_tree_to_tree(Some(&parent), Some(&commit.tree().unwrap()), None)
            .unwrap();
        for d in diff.deltas() {
            if let Ok(blob) = repo.find_blob(d.new_file().id()) {
                let path = d.new_file().path().unwrap().display().to_string();
                out.push((path, String::from_utf8_lossy(blob.content()).into_owned()));
            }
        }
    }
    out
}

// ---------------------------------------------------------------- secrets

/// One run with `secret` in the environment as `DEPLOY_API_TOKEN`, and an
/// agent that repeats it everywhere it can: its text, a tool's output, its
/// notes, an API error (state.json, events). Returns what ralph printed
/// with `--json`.
fn run_with_secret(secret: &str) -> (Project, String) {
    let said = toml_string(&format!("The token is {secret} (from the env)."));
    let scenario = format!(
        r#"
handoff_notes = {notes}
[[iteration]]
[[iteration.step]]
context = 60000
text = {said}
command = "printf '%s' \"$DEPLOY_API_TOKEN\"; echo work >> work.txt"
[[iteration.step]]
context = 146000
text = {said}
[[iteration]]
[[iteration.step]]
context = 30000
text = {said}
[[iteration.step]]
error = {said}
"#,
        notes = toml_string(&format!("## Done\n- used {secret}\n")),
    );
    // Failing hooks that print it: their stderr goes into warning events
    // (events.jsonl, `--json`).
    let p = Project::new(
        PLAN,
        &scenario,
        "[loop]\nmax_iterations = 2\n[hooks]\non_checkpoint = [\"printf 'leaked %s' \\\"$DEPLOY_API_TOKEN\\\" >&2; exit 1\"]\non_exit = [\"printf 'leaked %s' \\\"$DEPLOY_API_TOKEN\\\" >&2; exit 1\"]\n",
    );
    let out = p
        .ralph()
        .args(["run", "--json"])
        .env("DEPLOY_API_TOKEN", secret)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (p, stdout)
}

/// Where `secret` (plain or JSON-escaped) is found among what ralph wrote
/// and committed; the agent's own transcripts and notes are its output,
/// kept verbatim and user-only (docs/reliability.md).
fn leaks_of(p: &Project, stdout: &str, secret: &str) -> Vec<String> {
    let escaped = toml_string(secret);
    let escaped = &escaped[1..escaped.len() - 1];
    let holds = |text: &str| text.contains(secret) || text.contains(escaped);
    let mut leaks = Vec::new();
    if holds(stdout) {
        leaks.push("--json output".to_string());
    }
    let mut files = Vec::new();
    files_under(&p.path(".ralph"), &mut files);
    files.push(p.path("PROMPT.md"));
    for f in files {
        let name = f.strip_prefix(p.root()).unwrap().display().to_string();
        let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned();
        if holds(&text) {
            leaks.push(name);
        }
    }
    for (what, text) in committed_texts(p) {
        if holds(&text) {
            leaks.push(format!("commit: {what}"));
        }
    }
    leaks
}

/// Item 1: a secret with a quote, a backslash and a newline (a password, a
/// PEM line) was only redacted where it appeared unescaped, so it reached
/// events.jsonl, state.json and `--json` output in its JSON form.
#[test]
fn secret_with_quotes_backslashes_and_newlines_is_redacted_everywhere() {
    let secret = "pa\"ss\\word\nline two é";
    let (p, stdout) = run_with_secret(secret);
    assert_eq!(leaks_of(&p, &stdout, secret), Vec::<String>::new());
    assert!(
        stdout.contains("[redacted DEPLOY_API_TOKEN]"),
        "the secret was there to redact: {stdout}"
    );
}

/// The acceptance's property, end to end: any value of a credential-named
/// variable (quotes, backslashes, newlines, non-ASCII) is found in no file
/// under `.ralph/` that ralph writes, in no commit, in no `--json` output.
/// A few generated hostile values (each case is a whole run); the
/// redaction itself is property-tested over many more in `secrets`.
#[test]
fn any_credential_value_never_leaks_end_to_end() {
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases: 3,
        failure_persistence: None,
        ..Config::default()
    });
    // At least 8 characters that are not all blank (shorter values are
    // not treated as secrets, docs/reliability.md); no NUL (environment).
    let values = "[a-zA-Z0-9\"'\\\\$`é€😀{}\\[\\]:,]{4}[\"\\\\\n\t]{1,3}[^\u{0}]{4,12}";
    runner
        .run(&values, |secret| {
            let (p, stdout) = run_with_secret(&secret);
            let leaks = leaks_of(&p, &stdout, &secret);
            proptest::prop_assert!(leaks.is_empty(), "{:?} leaked to {:?}", secret, leaks);
            Ok(())
        })
        .unwrap();
}

/// Item 2: a key the agent read from a `.env` file (not in ralph's
/// environment) reached the committed handoff through "Last tool calls",
/// and the `.env` itself went into the WIP commit when not ignored.
#[test]
fn token_shapes_and_key_files_stay_out_of_commits() {
    const KEY: &str = "sk-proj-Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA";
    let scenario = format!(
        r#"
[[step]]
context = 60000
text = "Calling the API with the key from .env."
command = "curl -s -H 'Authorization: Bearer {KEY}' http://127.0.0.1:9/ || true; echo work >> work.txt"
[[step]]
context = 146000
text = "Full."
"#
    );
    let p = Project::new(PLAN, &scenario, "[loop]\nmax_iterations = 1\n");
    p.write(".env", &format!("OPENAI_API_KEY={KEY}\n"));
    p.write("deploy/server.pem", "-----BEGIN PRIVATE KEY-----\nMIIE\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let files = p.head_files();
    assert!(files.contains(&"work.txt".to_string()), "{files:?}");
    for key_file in [".env", "deploy/server.pem"] {
        assert!(!files.iter().any(|f| f == key_file), "{key_file} committed");
    }
    let texts = committed_texts(&p);
    for (what, text) in &texts {
        assert!(!text.contains("sk-proj-"), "{what} holds the key:\n{text}");
    }
    let handoff = &texts
        .iter()
        .find(|(what, _)| what.starts_with(".ralph/handoffs/"))
        .expect("a handoff was committed")
        .1;
    assert!(handoff.contains("Bearer [redacted API key]"), "{handoff}");
    assert!(handoff.contains("Left uncommitted"), "{handoff}");
    assert!(handoff.contains("- `.env`"), "{handoff}");
    assert!(handoff.contains("- `deploy/server.pem`"), "{handoff}");
    let warned = run.of("warning").iter().any(|w| {
        let m = w["message"].as_str().unwrap();
        m.starts_with("key files left out of the WIP commit") && m.contains(".env")
    });
    assert!(warned, "{}", run.describe());
}

// ---------------------------------------------------------------- terminal

/// Item 4: a Bash command with escape sequences (clear screen, window
/// title, an OSC 52 clipboard write) reached `ralph context` and the
/// terminal raw.
#[test]
fn the_agents_escape_sequences_never_reach_the_terminal() {
    let scenario = r#"
[[step]]
context = 60000
text = "Clearing."
command = "true '\u001b[2J\u001b]0;pwned\u0007\u001b]52;c;ZXZpbA==\u0007'"
[[step]]
result = "done"
"#;
    let p = Project::new(PLAN, scenario, "[loop]\nmax_iterations = 1\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let tool = run
        .of("context")
        .iter()
        .find_map(|c| c["tool"].as_str().map(str::to_string))
        .expect("the tool call was seen");
    assert!(
        tool.contains('\u{1b}'),
        "the agent did send escapes: {tool:?}"
    );
    let out = p.ralph().arg("context").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tool      Bash true"), "{text}");
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{text:?}"
    );
    assert!(!text.contains("52;c;"), "{text:?}");
}

// ---------------------------------------------------------------- edge inputs

/// Item 9: a checkbox inside an HTML comment counted as open (the run
/// could never complete) and `[-]`/`[~]` items disappeared from the
/// prompt. Comments are not items; cancelled items are not work; both
/// marks are shown.
#[test]
fn commented_and_cancelled_items_do_not_block_completion_and_are_shown() {
    let plan =
        "# Edge\n\n- [x] shipped\n- [ ] last\n- [-] dropped idea\n<!--\n- [ ] example item\n-->\n";
    let scenario = "[[step]]\ncontext = 30000\npath = \"fix_plan.md\"\nold = \"- [ ] last\"\nnew = \"- [x] last\"\n[[step]]\nresult = \"All done. <promise>COMPLETE</promise>\"\n";
    let p = Project::new(plan, scenario, "[loop]\nmax_iterations = 2\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let prompt = p.read("PROMPT.md");
    assert!(prompt.contains("- [-] dropped idea"), "{prompt}");
    assert!(!prompt.contains("example item"), "{prompt}");

    let p = Project::new(
        "- [~] halfway\n- [ ] next\n",
        QUICK_L2,
        "[loop]\nmax_iterations = 1\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(p.read("PROMPT.md").contains("- [~] halfway"));
    let handoff = std::fs::read_to_string(&p.handoffs()[0]).unwrap();
    assert!(handoff.contains("- [~] halfway  ← current"), "{handoff}");
}

/// Item 11: the handoff's front matter broke on a `"` in a plan item.
#[test]
fn handoff_front_matter_is_yaml_with_quotes_in_the_plan_item() {
    let item = r#"parse "quoted" keys: a\b # not a comment"#;
    let p = Project::new(
        &format!("- [ ] {item}\n"),
        QUICK_L2,
        "[loop]\nmax_iterations = 1\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let handoff = std::fs::read_to_string(&p.handoffs()[0]).unwrap();
    let yaml = handoff
        .strip_prefix("---\n")
        .and_then(|h| h.split_once("\n---\n"))
        .expect("front matter")
        .0;
    let fields: std::collections::BTreeMap<String, serde_json::Value> =
        serde_norway::from_str(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    assert_eq!(
        fields["title"],
        format!("Context Checkpoint L2 at 87% - {item}")
    );
    assert_eq!(fields["trigger"], "context");
    assert_eq!(fields["iteration"], 1);
}

/// Item 11: an undefined variable in checkpoint-request.md.j2 passed
/// `doctor` and `--dry-run`, and at L2 ralph only warned and never asked
/// for notes. Now every template is checked at the start.
#[test]
fn undefined_variable_in_the_checkpoint_request_is_bad_input_at_the_start() {
    let p = Project::new(PLAN, QUICK_L2, "");
    p.write(
        "prompts/checkpoint-request.md.j2",
        "Write your notes to {{ notes_path }}.\n{{ no_such_fact }}\n",
    );
    let says =
        "error: template prompts/checkpoint-request.md.j2:2: undefined value in `no_such_fact`";
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert!(run.stderr.starts_with(says), "{}", run.stderr);
    assert!(run.of("iteration_started").is_empty());
    assert!(!p.path(".ralph").exists(), "nothing written");
    let dry = p.ralph().args(["run", "--dry-run"]).output().unwrap();
    assert_eq!(dry.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&dry.stderr).starts_with(says));
    let doctor = p.ralph().args(["doctor", "--json"]).output().unwrap();
    assert_eq!(doctor.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let templates = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "templates")
        .unwrap()
        .to_string();
    assert!(templates.contains("no_such_fact"), "{templates}");
}

/// Item 11: `ralph checkpoint` with no run and nothing changed made a
/// handoff-only commit every time.
#[test]
fn checkpoint_on_a_clean_tree_commits_nothing() {
    let p = Project::new(PLAN, QUICK_L2, "");
    let log = p.log();
    for _ in 0..2 {
        let out = p.ralph().args(["checkpoint", "--json"]).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["outcome"], "clean", "{report}");
        assert_eq!(report["commit"], serde_json::Value::Null);
    }
    assert_eq!(p.log(), log, "no commit");
    assert!(p.handoffs().is_empty());
    // With work to save it checkpoints, and says so in JSON too.
    p.write("draft.txt", "unsaved\n");
    let out = p.ralph().args(["checkpoint", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["outcome"], "checkpointed", "{report}");
    assert_eq!(report["commit"].as_str().map(str::len), Some(40));
    assert_eq!(p.log().len(), log.len() + 1);
}

/// Item 11: `run --dry-run --json` printed text; `stop` had no `--json`.
#[test]
fn dry_run_and_stop_honour_json() {
    let p = Project::new(PLAN, QUICK_L2, "");
    let out = p
        .ralph()
        .args(["run", "--dry-run", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(report["iteration"], 1);
    assert_eq!(report["plan_open"], 1);
    assert_eq!(report["command"][1], "sim");
    assert!(report["prompt"].as_str().unwrap().contains("- [ ] work"));
    let scenario = "[[step]]\ncontext = 30000\ntext = \"Long task.\"\n[[step]]\nsleep_ms = 20000\n";
    let p = Project::new(PLAN, scenario, "");
    let child = p.spawn_run(&[]);
    common::wait_for_event(&p, "iteration_started", Duration::from_secs(20));
    let out = p.ralph().args(["stop", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["supervisor_pid"].as_i64(), Some(child.id() as i64));
    let run = common::Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(6), "{}", run.describe());
}

/// Item 11: a mistyped `agent.command` burned three iterations and opened
/// the breaker; now it is exit 2 before the first.
#[test]
fn mistyped_agent_command_is_exit_2_before_the_first_iteration() {
    let p = Project::new(PLAN, QUICK_L2, "");
    p.write(
        "ralph.toml",
        "[agent]\ncommand = \"claud-typo-7d1e --verbose\"\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert!(
        run.stderr
            .starts_with("error: `claud-typo-7d1e` (agent.command) is not on PATH"),
        "{}",
        run.stderr
    );
    assert!(run.of("iteration_started").is_empty());
    assert!(!p.path(".ralph/state.json").exists(), "nothing written");
}

// ---------------------------------------------------------------- processes

/// Item 6: Claude Code runs each Bash tool in a session of its own, so
/// after `kill -9` of ralph the takeover (which ended only the agent's
/// session) missed it: `sleep` outlived the restarted run. ralph records
/// every descendant session in its lock while the agent runs.
#[test]
fn a_tool_in_its_own_session_is_ended_by_the_takeover_after_kill_9() {
    let scenario = r#"
[[iteration]]
[[iteration.step]]
context = 30000
text = "Starting a server."
command = "setsid sleep 619 >/dev/null 2>&1 < /dev/null &"
[[iteration.step]]
sleep_ms = 30000
[[iteration]]
[[iteration.step]]
result = "<promise>COMPLETE</promise>"
"#;
    let p = Project::new(
        "- [ ] done\n",
        scenario,
        "[loop]\nrequire_plan_complete = false\n",
    );
    let mut child = p.spawn_run(&[]);
    let sleeper = common::sleep_started("sleep 619", Duration::from_secs(20));
    // In a session of its own, not the agent's.
    let lock = ralph::project::read_lock(&ralph::formats::Layout::new(p.root())).unwrap();
    let sid: i32 = common::proc_stat(sleeper).unwrap()[3].parse().unwrap();
    assert_ne!(Some(sid), lock.agent_pgid);
    common::wait_for_session_in_lock(&p, sid);
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        common::alive(sleeper),
        "expected the tool to outlive ralph's SIGKILL"
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    common::wait_until("the tool is gone", Duration::from_secs(2), || {
        !common::alive(sleeper)
    });
}

/// A `[verify]` check running when ralph is killed -9 dies with it: the
/// one parent-death rule of every child ralph starts (`platform::
/// die_with_parent`) holds for the project's commands as for the agent.
/// Before, the check (a test suite, for minutes) ran on without a
/// supervisor until a next start found its group.
#[cfg(target_os = "linux")]
#[test]
fn a_check_running_when_ralph_is_killed_dies_with_it() {
    let p = Project::new(
        PLAN,
        "[[step]]\ncontext = 20000\n[[step]]\nresult = \"<promise>COMPLETE</promise>\"\n",
        "[loop]\nrequire_plan_complete = false\n[verify]\ncommands = [\"exec sleep 613\"]\n",
    );
    let mut child = p.spawn_unread_run();
    let check = common::sleep_started("sleep 613", Duration::from_secs(20));
    child.kill().unwrap();
    child.wait().unwrap();
    common::wait_until("the check is gone", Duration::from_secs(2), || {
        !common::alive(check)
    });
}

// ---------------------------------------------------------------- disk

/// Item 7: transcripts had no cap (1 GiB in two iterations is easy). Past
/// `runs.transcript_cap_mib` long strings are cut, every line still JSON,
/// and a warning says so.
#[test]
fn a_transcript_past_its_cap_keeps_every_line_with_long_strings_cut() {
    let scenario = "[[step]]\ncontext = 30000\ntext = \"Reading.\"\n[[step]]\nbig_line_bytes = 3145728\n[[step]]\nbig_line_bytes = 3145728\n[[step]]\nresult = \"<promise>COMPLETE</promise>\"\n";
    let p = Project::new(
        "- [ ] done\n",
        scenario,
        "[runs]\ntranscript_cap_mib = 1\n[loop]\nrequire_plan_complete = false\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let run_id = p.state()["run_id"].as_str().unwrap().to_string();
    let text = p.read(&format!(".ralph/runs/{run_id}/iter-001.jsonl"));
    assert!(text.len() < 5 << 20, "{} bytes", text.len());
    let mut kinds = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{e}: {}", &line[..200.min(line.len())]));
        kinds.push(v["type"].as_str().unwrap_or("?").to_string());
    }
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("result"),
        "{kinds:?}"
    );
    assert!(text.contains(" bytes]"), "strings were cut");
    assert!(
        run.of("warning").iter().any(|w| w["message"]
            .as_str()
            .unwrap()
            .starts_with("the transcript passed runs.transcript_cap_mib (1 MiB)")),
        "{}",
        run.describe()
    );
}

/// Item 7: transcripts were never rotated. Only the last `runs.keep` runs
/// stay, the earlier ones gzipped.
#[test]
fn only_the_last_runs_are_kept_and_earlier_transcripts_are_gzipped() {
    let scenario = "[[step]]\ncontext = 30000\nresult = \"<promise>COMPLETE</promise>\"\n";
    let p = Project::new(
        "- [ ] done\n",
        scenario,
        "[runs]\nkeep = 2\n[loop]\nrequire_plan_complete = false\n",
    );
    let mut ids = Vec::new();
    for _ in 0..3 {
        let run = p.run(&["--fresh"], LIMIT);
        assert_eq!(run.code, Some(0), "{}", run.describe());
        ids.push(p.state()["run_id"].as_str().unwrap().to_string());
        // Run ids are stamped to the second.
        std::thread::sleep(Duration::from_millis(1100));
    }
    let mut left: Vec<String> = std::fs::read_dir(p.path(".ralph/runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ids[1..], "the oldest run is gone");
    assert!(
        p.path(&format!(".ralph/runs/{}/iter-001.jsonl.gz", ids[1]))
            .exists()
    );
    assert!(
        p.path(&format!(".ralph/runs/{}/iter-001.jsonl", ids[2]))
            .exists()
    );
}

/// Item 10: `max_iterations` and `max_duration` counted per invocation but
/// `max_cost_usd` per run, and `ralph status` said "iteration 4 of at most
/// 2". Every budget now counts from the run's start (or, with
/// `--budget-per-invocation`, every one from this invocation).
#[test]
fn every_budget_counts_per_run_and_status_agrees() {
    let scenario = "[[step]]\ncontext = 20000\ntext = \"hm\"\n[[step]]\nresult = \"still going\"\n";
    let p = Project::new(
        PLAN,
        scenario,
        "[loop]\nmax_iterations = 2\n[breaker]\nno_progress = 9\n",
    );
    assert_eq!(p.run(&[], LIMIT).code, Some(4));
    // The run continues with its budget spent: nothing starts.
    let again = p.run(&[], LIMIT);
    assert_eq!(again.code, Some(4), "{}", again.describe());
    assert!(again.of("iteration_started").is_empty());
    assert_eq!(again.of("run_started")[0]["max_iterations"], 2);
    let status = p.ralph().args(["status", "--json"]).output().unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        (
            status["iteration"].as_u64(),
            status["max_iterations"].as_u64()
        ),
        (Some(2), Some(2))
    );
    // Per invocation: two more, and the status counts in the same sense.
    let more = p.run(&["--budget-per-invocation"], LIMIT);
    assert_eq!(more.code, Some(4));
    assert_eq!(more.of("iteration_started").len(), 2);
    let status = p.ralph().arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("4 of at most 4"), "{text}");
}

/// Item 11: a manual checkpoint with no run was labelled "iter 0 (L2 at
/// 0%)" and a signal's "L2 at 24%": they are labelled by their trigger.
#[test]
fn checkpoints_not_set_off_by_the_context_are_labelled_by_their_trigger() {
    let p = Project::new(PLAN, QUICK_L2, "");
    p.write("draft.txt", "unsaved\n");
    let out = p.ralph().arg("checkpoint").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let subject = p.log()[0].clone();
    assert_eq!(subject, "ralph: checkpoint iter 0 (manual)");
    let handoff = std::fs::read_to_string(&p.handoffs()[0]).unwrap();
    assert!(
        handoff.contains("\n# Checkpoint (manual) - work\n"),
        "{handoff}"
    );
    assert!(!handoff.contains("L2 at 0%"), "{handoff}");
}

/// Issue 22: on a dev machine with `PGPASSWORD=password` and
/// `POSTGRES_PASSWORD=postgres`, PROMPT.md and the committed handoff read
/// "reset [redacted PGPASSWORD] flow for [redacted POSTGRES_PASSWORD]
/// users", and the token-shape rule made "support Bearer [redacted] in the
/// API client". The plan's words reach the agent and the handoff as the
/// user wrote them; the values are still redacted where a secret is
/// written (the agent's `PGPASSWORD=password psql`).
#[test]
fn common_values_and_words_of_the_plan_are_not_redacted() {
    const ITEMS: [&str; 2] = [
        "reset password flow for postgres users",
        "support bearer authentication in the API client",
    ];
    let plan = format!("# Accounts\n\n- [ ] {}\n- [ ] {}\n", ITEMS[0], ITEMS[1]);
    let scenario = r#"
[[step]]
context = 60000
text = "Looking at the users."
command = "echo \"PGPASSWORD=$PGPASSWORD\" > run.log"
[[step]]
context = 146000
text = "Ran PGPASSWORD=password psql for the postgres users."
"#;
    let p = Project::new(&plan, scenario, "[loop]\nmax_iterations = 1\n");
    let out = p
        .ralph()
        .args(["run", "--json"])
        .env("PGPASSWORD", "password")
        .env("POSTGRES_PASSWORD", "postgres")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let handoff = std::fs::read_to_string(p.handoffs().pop().unwrap()).unwrap();
    let prompt = p.read("PROMPT.md");
    for (name, text) in [("PROMPT.md", &prompt), ("handoff", &handoff)] {
        for item in ITEMS {
            assert!(text.contains(item), "{name} lost {item:?}:\n{text}");
        }
    }
    assert!(
        handoff.contains("PGPASSWORD=[redacted PGPASSWORD] psql"),
        "the agent's use of it is still redacted:\n{handoff}"
    );
    let mut files = Vec::new();
    files_under(&p.path(".ralph"), &mut files);
    for f in files {
        let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned();
        assert!(
            !text.contains("PGPASSWORD=password"),
            "{}: {text}",
            f.display()
        );
    }
}
