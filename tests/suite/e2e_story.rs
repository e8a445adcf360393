//! The morning's story in `ralph report` (issue 23, case 9): the start
//! commit, the agent's own commits (not ralph's WIP and final commits), a
//! diffstat since the start and per iteration, and each iteration's agent
//! session id with the command that reopens it — in the text, the JSON and
//! the page.

use std::time::Duration;

use crate::common::Project;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);

/// Iteration 1 commits a tokenizer itself, then climbs past L2 with
/// `work.txt` uncommitted (ralph's WIP commit); iteration 2 commits its
/// tests, checks both items and promises over an uncommitted note
/// (ralph's final commit).
const NIGHT: &str = r#"
[[iteration]]
[[iteration.step]]
context = 30000
path = "parser.py"
content = "def tokenize(s):\n    return s.split(',')\n"
[[iteration.step]]
context = 40000
command = "git add parser.py && git -c user.name=agent -c user.email=agent@example.com commit -qm 'parser: tokenizer'"
[[iteration.step]]
context = 146000
text = "Writing."
path = "work.txt"
content = "work in progress\n"

[[iteration]]
[[iteration.step]]
context = 30000
path = "test_parser.py"
content = "from parser import tokenize\n\ndef test_split():\n    assert tokenize('a,b') == ['a', 'b']\n"
[[iteration.step]]
context = 40000
command = "git add test_parser.py && git -c user.name=agent -c user.email=agent@example.com commit -qm 'tests: tokenize'"
[[iteration.step]]
context = 45000
path = "fix_plan.md"
content = "- [x] parser\n- [x] tests\n"
[[iteration.step]]
context = 46000
path = "NOTES.md"
content = "done\n"
[[iteration.step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#;

#[test]
fn the_report_tells_what_changed_overnight_and_how_to_reopen_each_session() {
    let p = Project::new(
        "- [ ] parser\n- [ ] tests\n",
        NIGHT,
        "[context]\ngrace = \"20s\"\n",
    );
    let start = p.repo().head().unwrap().target().unwrap().to_string();
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.of("checkpoint").len(), 1, "{}", run.describe());
    let end = p.repo().head().unwrap().target().unwrap().to_string();

    let out = p.ralph().args(["report", "--json"]).output().unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let story = &json["story"];
    assert_eq!(story["start_commit"], start.as_str(), "{story}");
    assert_eq!(story["end_commit"], end.as_str(), "{story}");
    let agent: Vec<&str> = story["agent_commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["summary"].as_str().unwrap())
        .collect();
    assert_eq!(agent, ["parser: tokenizer", "tests: tokenize"], "{story}");
    assert_eq!(
        story["ralph_commits"], 2,
        "the WIP commit and the final one: {story}"
    );
    // Since the start: parser.py, work.txt, test_parser.py, fix_plan.md,
    // NOTES.md (ralph's own, PROMPT.md and the handoff, aside).
    assert_eq!(story["diffstat"]["files"], 5, "{story}");
    assert!(
        story["diffstat"]["insertions"].as_u64().unwrap() >= 8,
        "{story}"
    );
    let rows = json["iterations"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["agent_commits"][0]["summary"], "parser: tokenizer");
    assert_eq!(rows[1]["agent_commits"][0]["summary"], "tests: tokenize");
    for row in rows {
        let id = row["session_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{row}"));
        assert_eq!(row["resume_command"], format!("claude --resume {id}"));
        assert!(row["diffstat"]["files"].as_u64().unwrap() >= 1, "{row}");
    }
    assert_ne!(rows[0]["session_id"], rows[1]["session_id"]);
    // The state keeps them: `claude --resume` works from it too.
    let state = p.state();
    assert_eq!(state["start_commit"], start.as_str());
    assert_eq!(state["history"][0]["session_id"], rows[0]["session_id"]);

    let out = p.ralph().arg("report").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!(
            "changes        since {} → {}",
            &start[..10],
            &end[..10]
        )),
        "{text}"
    );
    assert!(
        text.contains("commits        4: 2 by the agent, 2 by ralph"),
        "{text}"
    );
    assert!(text.contains(" parser: tokenizer"), "{text}");
    let id1 = rows[0]["session_id"].as_str().unwrap();
    assert!(
        text.contains(&format!("\n      claude --resume {id1}\n")),
        "{text}"
    );
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");

    let page = p.read(".ralph/report.html");
    assert!(page.contains("<h2>What changed</h2>"), "no section");
    assert!(page.contains("tests: tokenize"));
    assert!(page.contains(&format!("claude --resume {id1}")));
}

// ------------------------------------ what each iteration changed (lead's
// attack on the demo): work committed later, or never, is still the work
// of the iteration that did it; one commit count everywhere.

/// Iteration 1 writes the parser and checks it off, committing nothing;
/// iteration 2 writes the writer and climbs past L2 (ralph's WIP commit
/// takes both iterations' work); iteration 3 writes the tests and
/// promises over them (ralph's final commit).
const LATER: &str = r#"
[[iteration]]
[[iteration.step]]
context = 30000
path = "parser.py"
content = "def parse(line):\n    return line.split(',')\n"
[[iteration.step]]
context = 40000
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[iteration.step]]
result = "Parser done."

[[iteration]]
[[iteration.step]]
context = 30000
path = "writer.py"
content = "def join(fields):\n    return ','.join(fields)\n"
[[iteration.step]]
context = 40000
path = "fix_plan.md"
old = "- [ ] writer"
new = "- [x] writer"
[[iteration.step]]
context = 146000
text = "Writer done."

[[iteration]]
[[iteration.step]]
context = 30000
path = "test_csv.py"
content = "from parser import parse\n\n\ndef test_parse():\n    assert parse('a,b') == ['a', 'b']\n"
[[iteration.step]]
context = 40000
path = "fix_plan.md"
old = "- [ ] tests"
new = "- [x] tests"
[[iteration.step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#;

const THREE: &str = "- [ ] parser\n- [ ] writer\n- [ ] tests\n";

fn report_json(p: &Project) -> Value {
    let out = p.ralph().args(["report", "--json"]).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

fn stat(v: &Value) -> (u64, u64, u64) {
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    (n("files"), n("insertions"), n("deletions"))
}

#[test]
fn each_iteration_shows_what_it_changed_whoever_committed_it_and_one_commit_count() {
    let p = Project::new(THREE, LATER, "[context]\ngrace = \"20s\"\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.of("checkpoint").len(), 1, "{}", run.describe());

    let json = report_json(&p);
    let rows = json["iterations"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{json}");
    // Each iteration: its file and the plan line it checked, ralph's own
    // files (PROMPT.md, the handoff) aside.
    assert_eq!(stat(&rows[0]["diffstat"]), (2, 3, 1), "{}", rows[0]);
    assert_eq!(stat(&rows[1]["diffstat"]), (2, 3, 1), "{}", rows[1]);
    assert_eq!(stat(&rows[2]["diffstat"]), (2, 6, 1), "{}", rows[2]);
    // Iteration 1's work waited for iteration 2's WIP commit; iteration
    // 3's for the final commit.
    assert_eq!(rows[0]["uncommitted"]["files"], 2, "{}", rows[0]);
    assert_eq!(rows[1]["uncommitted"]["files"], 0, "{}", rows[1]);
    assert_eq!(rows[2]["uncommitted"]["files"], 2, "{}", rows[2]);
    let story = &json["story"];
    assert_eq!(stat(&story["diffstat"]), (4, 12, 3), "{story}");
    assert_eq!(story["uncommitted"]["files"], 0, "{story}");
    assert_eq!(story["agent_commits"].as_array().unwrap().len(), 0);
    assert_eq!(story["ralph_commits"], 2, "the WIP and final commits");

    let out = p.ralph().arg("report").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    // One count: the header's is the story's.
    assert!(text.contains(" · 2 commit(s)\n"), "{text}");
    assert!(
        text.contains("commits        2: 0 by the agent, 2 by ralph"),
        "{text}"
    );
    assert!(
        text.contains("   1  2 file(s) changed, +3 -1 · 2 file(s) not committed at its end\n"),
        "{text}"
    );
    assert!(text.contains("   2  2 file(s) changed, +3 -1\n"), "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
    let page = p.read(".ralph/report.html");
    assert!(
        page.contains("<td>2 file(s) changed, +3 -1 · 2 file(s) not committed at its end</td>"),
        "{page}"
    );
    assert!(page.contains("2 commit(s): 0 by the agent, 2 by ralph"));
    assert!(!page.contains("WIP checkpoints"), "the card's old count");
}

#[test]
fn work_never_committed_is_shown_per_iteration_and_at_the_end() {
    let p = Project::new(
        THREE,
        LATER,
        "[context]\ngrace = \"20s\"\n[git]\nwip_commit = false\n",
    );
    let head = p.repo().head().unwrap().target().unwrap().to_string();
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(
        p.repo().head().unwrap().target().unwrap().to_string(),
        head,
        "nothing committed"
    );
    let json = report_json(&p);
    let rows = json["iterations"].as_array().unwrap();
    assert_eq!(stat(&rows[0]["diffstat"]), (2, 3, 1), "{}", rows[0]);
    assert_eq!(stat(&rows[1]["diffstat"]), (2, 3, 1), "{}", rows[1]);
    assert_eq!(rows[2]["uncommitted"]["files"], 4, "{}", rows[2]);
    let story = &json["story"];
    assert_eq!(stat(&story["diffstat"]), (4, 12, 3), "{story}");
    assert_eq!(story["uncommitted"]["files"], 4, "{story}");
    let out = p.ralph().arg("report").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("               4 file(s) not committed at the end\n"),
        "{text}"
    );
    assert!(text.contains(" · 0 commit(s)\n"), "{text}");
}

/// Iteration 1 writes two files and works on until its supervisor is
/// killed; the next run takes it over (a crash checkpoint).
const KILLED: &str = r#"
[[iteration]]
[[iteration.step]]
context = 30000
path = "parser.py"
content = "def parse(line):\n    return line.split(',')\n"
[[iteration.step]]
command = "echo 'grammar: todo' > notes.txt"
[[iteration.step]]
hang = true

[[iteration]]
[[iteration.step]]
context = 20000
path = "writer.py"
content = "def join(fields):\n    return ','.join(fields)\n"
[[iteration.step]]
result = "Writer written."
"#;

#[test]
fn an_iteration_killed_with_its_supervisor_still_shows_what_it_changed() {
    let p = Project::new(THREE, KILLED, "");
    let mut first = p
        .ralph()
        .args(["run", "--json"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    crate::common::wait_until("the agent's command", LIMIT, || {
        p.path("notes.txt").exists()
    });
    first.kill().unwrap();
    first.wait().unwrap();
    let run = p.run(&["--budget-per-invocation", "--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let json = report_json(&p);
    let rows = json["iterations"].as_array().unwrap();
    assert_eq!(rows[0]["outcome"], "crash", "{json}");
    assert_eq!(stat(&rows[0]["diffstat"]), (2, 3, 0), "{}", rows[0]);
    assert_eq!(
        rows[0]["uncommitted"]["files"], 0,
        "the takeover's WIP commit"
    );
    assert_eq!(stat(&rows[1]["diffstat"]), (1, 2, 0), "{}", rows[1]);
    assert_eq!(stat(&json["story"]["diffstat"]), (3, 5, 0), "{json}");
}

#[test]
fn the_users_edits_found_at_the_start_are_not_the_nights_work() {
    let p = Project::new(THREE, LATER, "[context]\ngrace = \"20s\"\n");
    // The user's own edit, left uncommitted when they started the run:
    // ralph commits it on its own before the agent starts.
    p.write(
        "ralph.toml",
        &format!("{}\n# tuned\n", p.read("ralph.toml")),
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(
        p.log()
            .iter()
            .any(|l| l.contains("changes present before the run")),
        "{:?}",
        p.log()
    );
    let story = &report_json(&p)["story"];
    assert_eq!(
        story["agent_commits"].as_array().unwrap().len(),
        0,
        "{story}"
    );
    assert_eq!(story["ralph_commits"], 2, "{story}");
    assert_eq!(stat(&story["diffstat"]), (4, 12, 3), "{story}");
}

/// Iteration 1 changes nothing; iteration 2 writes the parser.
const IDLE_THEN_WORK: &str = r#"
[[iteration]]
[[iteration.step]]
context = 30000
text = "Reading."
[[iteration.step]]
result = "Nothing to do yet."

[[iteration]]
[[iteration.step]]
context = 30000
path = "parser.py"
content = "def parse(line):\n    return line.split(',')\n"
[[iteration.step]]
result = "Parser written."
"#;

#[test]
fn an_idle_iteration_changed_nothing_and_the_next_starts_where_it_ended() {
    let p = Project::new(THREE, IDLE_THEN_WORK, "");
    let run = p.run(&["--max-iterations", "2"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let state = p.state();
    let h = &state["history"];
    assert!(h[0]["tree_start"].is_string(), "{h}");
    assert_eq!(h[0]["tree_start"], h[0]["tree_end"], "{h}");
    assert_eq!(h[1]["tree_start"], h[0]["tree_end"], "{h}");
    assert_ne!(h[1]["tree_end"], h[1]["tree_start"], "{h}");
    let rows = report_json(&p)["iterations"].clone();
    assert_eq!(stat(&rows[0]["diffstat"]), (0, 0, 0), "{}", rows[0]);
    assert_eq!(stat(&rows[1]["diffstat"]), (1, 2, 0), "{}", rows[1]);
}
