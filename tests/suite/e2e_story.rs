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
    // NOTES.md (the handoff under .ralph/ is committed too).
    let files = story["diffstat"]["files"].as_u64().unwrap();
    assert!(files >= 5, "{story}");
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
        text.contains("commits        2 by the agent, 2 by ralph"),
        "{text}"
    );
    assert!(text.contains(" parser: tokenizer"), "{text}");
    let id1 = rows[0]["session_id"].as_str().unwrap();
    assert!(
        text.contains(&format!("   1  claude --resume {id1} · ")),
        "{text}"
    );
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");

    let page = p.read(".ralph/report.html");
    assert!(page.contains("<h2>What changed</h2>"), "no section");
    assert!(page.contains("tests: tokenize"));
    assert!(page.contains(&format!("claude --resume {id1}")));
}
