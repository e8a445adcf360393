//! Resume from any checkpoint (issue 23, cases 6 and 7): a checkpoint made
//! outside a run is resumed by the next `ralph run`, worded for what it
//! was; Claude Code's SessionStart hook words its block from the handoff's
//! truth (committed or not) and gives none once the checkpoint was resumed
//! or the run it belongs to has completed.

use std::io::Write as _;
use std::process::Stdio;
use std::time::Duration;

use crate::common::Project;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);

/// The first run: the parser, checked and promised.
const FIRST: &str = "[[step]]\ncontext = 30000\npath = \"fix_plan.md\"\nold = \"- [ ] parser\"\nnew = \"- [x] parser\"\n[[step]]\nresult = \"<promise>COMPLETE</promise>\"\n";

/// The next morning's run: the tests, checked and promised.
const NEXT: &str = "record_messages = \".ralph/messages.jsonl\"\n[[step]]\ncontext = 30000\npath = \"fix_plan.md\"\nold = \"- [ ] tests\"\nnew = \"- [x] tests\"\n[[step]]\nresult = \"<promise>COMPLETE</promise>\"\n";

/// `ralph hook session-start` as Claude Code runs it: the additional
/// context it gives, or `None`.
fn session_start(p: &Project, source: &str) -> Option<String> {
    let mut child = p
        .ralph()
        .args(["hook", "session-start"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input = serde_json::json!({"session_id": "s", "cwd": p.root(),
        "hook_event_name": "SessionStart", "source": source});
    (child.stdin.take().unwrap())
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    if text.trim().is_empty() {
        return None;
    }
    let v: Value = serde_json::from_str(&text).unwrap();
    Some(
        v["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .unwrap()
            .to_string(),
    )
}

#[test]
fn a_checkpoint_made_by_hand_is_resumed_by_the_next_run_and_then_no_longer_offered() {
    let p = Project::new("- [ ] parser\n", FIRST, "");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    // A completed run's sessions are over: nothing to resume.
    assert_eq!(session_start(&p, "startup"), None);

    // The end of the day: more plan, work in progress, `ralph checkpoint`.
    p.write("fix_plan.md", "- [x] parser\n- [ ] tests\n");
    p.write("test_parser.py", "def test_split():\n    pass\n");
    p.write("scenario.toml", NEXT);
    let out = p
        .ralph()
        .args(["checkpoint", "--reason", "end of the day"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let handoff = p.state()["context_checkpoint"]["handoff_file"]
        .as_str()
        .unwrap()
        .to_string();
    let commit = p.state()["context_checkpoint"]["commit"]
        .as_str()
        .unwrap()
        .to_string();

    // An interactive session in between is told, from the state's truth.
    let block = session_start(&p, "startup").expect("a pending checkpoint is offered");
    assert!(
        block.contains(&format!("its work is committed ({})", &commit[..10])),
        "{block}"
    );
    assert!(block.contains(&handoff), "{block}");
    assert!(block.contains("**tests**"), "{block}");

    // The next run resumes it, worded as what it was.
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let started = run.of("iteration_started");
    assert_eq!(
        started[0]["resume_from"],
        handoff.as_str(),
        "{}",
        run.describe()
    );
    let prompt = p.read(".ralph/messages.jsonl");
    let first: Value = serde_json::from_str(prompt.lines().next().unwrap()).unwrap();
    let text = first["text"].as_str().unwrap();
    assert!(text.contains("## Resume from a checkpoint"), "{text}");
    assert!(
        text.contains(
            "A checkpoint was made by hand (`ralph checkpoint`) so that no work was lost."
        ),
        "{text}"
    );
    assert!(!text.contains("Iteration 0"), "{text}");
    assert!(
        text.contains(&format!("Its work is committed ({})", &commit[..10])),
        "{text}"
    );
    assert!(
        text.contains(&format!("Read the handoff first: `{handoff}`")),
        "{text}"
    );

    // Resumed, and that run completed: days later, no old handoff.
    assert_eq!(session_start(&p, "startup"), None);
    assert_eq!(session_start(&p, "resume"), None);
}

#[test]
fn session_start_says_when_the_checkpoint_is_not_committed() {
    let p = Project::new("- [ ] parser\n", FIRST, "[git]\nwip_commit = false\n");
    p.write("parser.py", "def parse(s):\n    pass\n");
    let out = p
        .ralph()
        .args(["checkpoint", "--reason", "lunch"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let block = session_start(&p, "startup").expect("a pending checkpoint is offered");
    assert!(block.contains("its work is NOT committed ("), "{block}");
    assert!(!block.contains("is committed"), "{block}");
    // `clear` is a clean slate, always.
    assert_eq!(session_start(&p, "clear"), None);
}

/// The last iteration checkpoints at L2, then checks off the last item and
/// promises: the run completes with its checkpoint never taken over.
const LAST_CHECKPOINTED: &str = r#"
[[step]]
context = 30000
path = "parser.py"
content = "x = 1\n"
[[step]]
context = 146000
text = "Almost."
[[step]]
context = 147000
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#;

#[test]
fn a_completed_runs_last_checkpoint_sends_neither_a_new_session_nor_the_next_run_back() {
    let p = Project::new(
        "- [ ] parser\n",
        LAST_CHECKPOINTED,
        "[context]\ngrace = \"20s\"\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.of("checkpoint").len(), 1, "{}", run.describe());
    assert_eq!(p.state()["context_checkpoint"]["active"], true);
    assert_eq!(session_start(&p, "startup"), None);
    // Days later: new work in the plan, a new run.
    p.write("fix_plan.md", "- [x] parser\n- [ ] tests\n");
    p.write("scenario.toml", NEXT);
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let started = &run.of("iteration_started")[0];
    assert!(started["resume_from"].is_null(), "{}", run.describe());
    let first = std::fs::read_to_string(p.path(".ralph/messages.jsonl")).unwrap();
    assert!(!first.contains("Resume from a checkpoint"), "{first}");
    assert!(!first.contains("Do not restart from scratch"), "{first}");
}
