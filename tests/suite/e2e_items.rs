//! Plan items as units of work, end to end (issue 23, cases 2–5): a split
//! item hands its slot to its parts and is never asked to split again; one
//! outlier or a corrupt entry in the ledger does not make an item "too
//! big"; the bundled demo gets no false split request; a checkpoint right
//! after a check-off is the finished item's; an unfinished iteration's
//! last words reach the next prompt even when its work was committed.

use std::time::Duration;

use crate::common::{self, Project};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);

fn messages(p: &Project) -> Vec<Value> {
    p.read(".ralph/messages.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn prompt_of(p: &Project, iteration: u64) -> String {
    messages(p)
        .into_iter()
        .find(|m| m["iteration"] == iteration)
        .unwrap_or_else(|| panic!("no prompt for iteration {iteration}"))["text"]
        .as_str()
        .unwrap()
        .to_string()
}

const BIG: &str = "port everything in `specs/huge.md`";

/// Iteration 1 splits the too-large item (asked to) and does part a; 2
/// does part b; 3 checks the parent and the small item off and promises.
const SPLIT_ONCE: &str = r#"
record_messages = ".ralph/messages.jsonl"

[[iteration]]
[[iteration.step]]
context = 30000
text = "Splitting as asked."
path = "fix_plan.md"
old = "- [ ] port everything in `specs/huge.md`\n"
new = "- [ ] port everything in `specs/huge.md`\n  - [ ] part a\n  - [ ] part b\n"
[[iteration.step]]
context = 40000
path = "a.txt"
content = "a\n"
[[iteration.step]]
context = 50000
path = "fix_plan.md"
old = "- [ ] part a"
new = "- [x] part a"
[[iteration.step]]
result = "Split it; part a is done."

[[iteration]]
[[iteration.step]]
context = 30000
path = "b.txt"
content = "b\n"
[[iteration.step]]
context = 40000
path = "fix_plan.md"
old = "- [ ] part b"
new = "- [x] part b"
[[iteration.step]]
result = "Part b is done."

[[iteration]]
[[iteration.step]]
context = 30000
path = "fix_plan.md"
old = "- [ ] port everything"
new = "- [x] port everything"
[[iteration.step]]
context = 35000
path = "small.txt"
content = "s\n"
[[iteration.step]]
context = 40000
path = "fix_plan.md"
old = "- [ ] small"
new = "- [x] small"
[[iteration.step]]
result = "All done.\n\n<promise>COMPLETE</promise>"
"#;

#[test]
fn a_split_item_hands_its_slot_to_its_parts_and_is_never_asked_again() {
    let p = Project::bare(&format!("- [ ] {BIG}\n- [ ] small\n"), SPLIT_ONCE, "");
    // A 600 kB spec: ~150k tokens, far past the 60% from which items split.
    p.write("specs/huge.md", &"x".repeat(600_000));
    p.git_init();
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    // Asked once, in iteration 1, and never again.
    let shard = run.of("shard_suggested");
    assert_eq!(shard.len(), 1, "{}", run.describe());
    assert_eq!(
        (shard[0]["iteration"].as_u64(), &shard[0]["item"]),
        (Some(1), &Value::from(BIG))
    );
    assert!(prompt_of(&p, 1).contains("## Split this item first"));
    for n in [2, 3] {
        let prompt = prompt_of(&p, n);
        assert!(
            !prompt.contains("## Split this item first"),
            "iteration {n}: {prompt}"
        );
    }
    // The slot: part a's check-off names part b next; iteration 2 is
    // told part b; iteration 3, all parts done, the parent itself.
    let checked = run.of("item_checked");
    assert_eq!(checked[0]["items"], serde_json::json!(["part a"]));
    assert_eq!(checked[0]["next"], "part b");
    assert!(
        prompt_of(&p, 2).contains("(now: **part b**)"),
        "{}",
        prompt_of(&p, 2)
    );
    assert!(
        prompt_of(&p, 3).contains(&format!("(now: **{BIG}**)")),
        "{}",
        prompt_of(&p, 3)
    );
    let state = p.state();
    let history = state["history"].as_array().unwrap();
    assert_eq!(history[1]["item"], "part b");
    let parent = state["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["item"] == BIG)
        .unwrap();
    assert_eq!(parent["split_in"], 1);
}

/// Five similar items near 20k, one that spanned ten iterations (1.5M)
/// and two corrupt entries, in the ledger earlier runs left.
fn outlier_ledger(p: &Project) {
    let mut ledger = String::new();
    for (i, t) in [19_000, 20_000, 21_000, 20_500, 19_500].iter().enumerate() {
        ledger.push_str(&format!(
            "{{\"item\":\"add csv parser case {i}\",\"tokens\":{t},\"estimate\":20000}}\n"
        ));
    }
    ledger.push_str(
        "{\"item\":\"add csv parser streaming\",\"tokens\":1500000,\"estimate\":20000}\n",
    );
    ledger.push_str(
        "{\"item\":\"add csv parser quoting\",\"tokens\":235294117647058823,\"estimate\":20000}\n",
    );
    ledger.push_str("{\"item\":\"add csv parser escapes\",\"tokens\":0,\"estimate\":0}\n");
    ledger.push_str("not json at all\n");
    std::fs::create_dir_all(p.path(".ralph")).unwrap();
    p.write(".ralph/items.jsonl", &ledger);
}

#[test]
fn one_outlier_or_a_corrupt_entry_in_the_ledger_makes_no_item_too_big() {
    let p = Project::new(
        "- [ ] add csv parser tests\n",
        "[[step]]\nresult = \"Later.\"\n",
        "",
    );
    outlier_ledger(&p);
    let out = p
        .ralph()
        .args(["context", "--estimate", "add csv parser tests", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = e.to_string();
    assert_eq!(e["basis"], "similar", "{text}");
    let tokens = e["tokens"].as_u64().unwrap();
    assert!((19_000..=21_000).contains(&tokens), "{text}");
    assert_ne!(e["fit"], "split", "{text}");
    let out = p.ralph().arg("prompt").output().unwrap();
    let prompt = String::from_utf8(out.stdout).unwrap();
    assert!(!prompt.contains("## Split this item first"), "{prompt}");
}

#[test]
fn the_demo_gets_no_false_split_request() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("demo");
    // The demo's agent is `ralph sim`, found on PATH.
    let bin = std::path::Path::new(common::BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new(common::BIN)
        .arg("demo")
        .arg(&demo)
        .env("PATH", path)
        .env("RALPH_LOG", "off")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = std::fs::read_to_string(demo.join(".ralph/events.jsonl")).unwrap();
    assert!(events.contains("\"event\":\"run_ended\""), "{events}");
    assert!(!events.contains("shard_suggested"), "{events}");
}

/// Iteration 1 checks item one off at 72% and the next reading is past L2
/// (85% of 167k = 141,950): the checkpoint comes right after the
/// check-off, with item two untouched.
const CHECK_OFF_THEN_L2: &str = r#"
record_messages = ".ralph/messages.jsonl"
step_delay_ms = 100

[[iteration]]
[[iteration.step]]
context = 40000
text = "Working on item one."
path = "one.txt"
content = "one\n"
[[iteration.step]]
context = 120000
text = "Item one is done; item two next."
path = "fix_plan.md"
old = "- [ ] item one"
new = "- [x] item one"
[[iteration.step]]
context = 145000
text = "Item one is finished and committed; item two is next."
[[iteration.step]]
context = 146000
text = "never"
path = "never.txt"
content = "x"

[[iteration]]
[[iteration.step]]
context = 30000
path = "fix_plan.md"
old = "- [ ] item two"
new = "- [x] item two"
[[iteration.step]]
result = "<promise>COMPLETE</promise>"
"#;

#[test]
fn a_checkpoint_right_after_a_check_off_belongs_to_the_finished_item() {
    let p = Project::new(
        "- [ ] item one\n- [ ] item two\n",
        CHECK_OFF_THEN_L2,
        "[context]\ngrace = \"20s\"\nnudge_at_l1 = false\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let cp = run.of("checkpoint");
    assert_eq!(cp.len(), 1, "{}", run.describe());
    let handoff = p.read(cp[0]["handoff"].as_str().unwrap());
    let title = handoff
        .lines()
        .find(|l| l.starts_with("# "))
        .unwrap_or_default();
    assert!(title.ends_with("- item one"), "{handoff}");
    assert!(!handoff.contains("working on \"item two\""), "{handoff}");
    // Item two was never touched: no checkpoint on its account, so no
    // "checkpointed twice" split builds up against it.
    let state = p.state();
    for a in state["items"].as_array().unwrap() {
        assert_eq!(a["checkpoints"], 0, "{a}");
    }
    // The next prompt resumes from the handoff without calling item one's
    // last words progress on item two.
    let prompt = prompt_of(&p, 2);
    assert!(prompt.contains("## Resume from a checkpoint"), "{prompt}");
    assert!(
        !prompt.contains("Resume the item: **item two**"),
        "{prompt}"
    );
    assert!(
        !prompt.contains("Resume the item: **item one**"),
        "{prompt}"
    );
    assert!(prompt.contains("(now: **item two**)"), "{prompt}");
}

/// Iteration 1 crosses L1 (nudged), answers, commits its partial work and
/// ends with the item unchecked, saying where it stopped.
const STOPPED_MID_ITEM: &str = r#"
record_messages = ".ralph/messages.jsonl"
step_delay_ms = 100

[[iteration]]
[[iteration.step]]
context = 60000
path = "parser.py"
content = "def tokenize(s):\n    return s.split(',')\n"
[[iteration.step]]
context = 120000
text = "Tokenizer written."
[[iteration.step]]
context = 122000
text = "Understood: I will stop after the tokenizer and commit it."
[[iteration.step]]
context = 125000
command = "git add parser.py && git -c user.name=a -c user.email=a@b commit -qm 'parser: tokenizer'"
[[iteration.step]]
result = "Stopped after the tokenizer (committed). Next: quoted fields in parse(), then the tests."

[[iteration]]
[[iteration.step]]
context = 30000
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[iteration.step]]
result = "<promise>COMPLETE</promise>"
"#;

#[test]
fn an_unfinished_iterations_last_words_reach_the_next_prompt_when_its_work_is_committed() {
    let p = Project::new("- [ ] parser\n", STOPPED_MID_ITEM, "");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.of("nudged").len(), 1, "{}", run.describe());
    assert!(run.of("checkpoint").is_empty(), "{}", run.describe());
    let prompt = prompt_of(&p, 2);
    assert!(prompt.contains("## Left over from iteration 1"), "{prompt}");
    assert!(
        prompt.contains("**parser** unfinished; what it did is committed"),
        "{prompt}"
    );
    assert!(
        prompt.contains("> Stopped after the tokenizer (committed). Next: quoted fields in parse(), then the tests."),
        "{prompt}"
    );
    assert!(
        prompt.contains("> Understood: I will stop after the tokenizer and commit it."),
        "{prompt}"
    );
    assert!(!prompt.contains("uncommitted:"), "{prompt}");
}

/// Iteration 1 finishes three small items one after another; iteration 2
/// the fourth. Paced as a real agent is (a turn takes a round trip), so
/// that ralph reads each check-off before the next step.
const SMALL_ITEMS: &str = r#"
record_messages = ".ralph/messages.jsonl"
step_delay_ms = 150

[[iteration]]
[[iteration.step]]
context = 25000
path = "a.txt"
content = "a\n"
[[iteration.step]]
context = 28000
path = "fix_plan.md"
old = "- [ ] a"
new = "- [x] a"
[[iteration.step]]
context = 33000
path = "b.txt"
content = "b\n"
[[iteration.step]]
context = 36000
path = "fix_plan.md"
old = "- [ ] b"
new = "- [x] b"
[[iteration.step]]
context = 41000
path = "c.txt"
content = "c\n"
[[iteration.step]]
context = 44000
path = "fix_plan.md"
old = "- [ ] c"
new = "- [x] c"
[[iteration.step]]
result = "a, b and c are done."

[[iteration]]
[[iteration.step]]
context = 25000
path = "d.txt"
content = "d\n"
[[iteration.step]]
context = 28000
path = "fix_plan.md"
old = "- [ ] d"
new = "- [x] d"
[[iteration.step]]
result = "<promise>COMPLETE</promise>"
"#;

#[test]
fn small_items_share_a_session_and_the_report_counts_items_per_context_window() {
    let p = Project::new("- [ ] a\n- [ ] b\n- [ ] c\n- [ ] d\n", SMALL_ITEMS, "");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(run.of("checkpoint").is_empty(), "{}", run.describe());
    let first = prompt_of(&p, 1);
    assert!(
        first.contains("Then take the next open item the same way, up to 3 items in this session"),
        "{first}"
    );
    assert!(!first.contains("Work on that one item only"), "{first}");
    let state = p.state();
    assert_eq!(
        state["history"][0]["items_checked"],
        serde_json::json!(["a", "b", "c"])
    );
    let out = p.ralph().args(["report", "--json"]).output().unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["metrics"]["items_checked"], 4);
    assert_eq!(json["metrics"]["items_per_context_window"], 2.0);
    let out = p.ralph().arg("report").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("4 checked · 2.00 per context window"),
        "{text}"
    );
}

/// The cap at 2: the agent's start on the third item is stopped at a
/// boundary checkpoint, the check-offs seen as they happen. `kind` is the
/// agent kind the sim plays; `percent`, where the request was made.
fn capped_at_two_items(kind: &str, scenario: &str, percent: f64) {
    let p = Project::bare("- [ ] a\n- [ ] b\n- [ ] c\n- [ ] d\n", scenario, "");
    p.write(
        "ralph.toml",
        &format!(
            "[agent]\nkind = \"{kind}\"\ncommand = \"ralph sim scenario.toml\"\n\n[context]\nitems_per_session = 2\ngrace = \"20s\"\n"
        ),
    );
    p.git_init();
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert!(prompt_of(&p, 1).contains("up to 2 items in this session"));
    let cp = run.of("checkpoint");
    assert_eq!(cp.len(), 1, "{kind}: {}", run.describe());
    assert_eq!(cp[0]["trigger"], "boundary");
    let requested = run.of("checkpoint_requested");
    assert_eq!(requested[0]["trigger"], "boundary");
    assert_eq!(
        requested[0]["percent"],
        percent,
        "{kind}: {}",
        run.describe()
    );
    let checked = run.of("item_checked");
    assert_eq!(checked[0]["items"], serde_json::json!(["a"]));
    assert_eq!(checked[1]["items"], serde_json::json!(["b"]));
    let handoff = p.read(cp[0]["handoff"].as_str().unwrap());
    assert!(
        handoff.contains("context.items_per_session = 2"),
        "{handoff}"
    );
    assert!(!p.path("d.txt").exists(), "{kind}: stopped on c");
}

/// SMALL_ITEMS with each item checked off by a shell command (`sed -i`)
/// instead of an Edit of the plan.
fn checked_off_by_shell(scenario: &str) -> String {
    let edit =
        regex::Regex::new(r#"path = "fix_plan.md"\nold = "- \[ \] (\w)"\nnew = "- \[x\] \w""#)
            .unwrap();
    let shell = edit.replace_all(
        scenario,
        r#"command = "sed -i 's/- \\[ \\] $1/- [x] $1/' fix_plan.md""#,
    );
    assert_ne!(shell, scenario);
    shell.into_owned()
}

#[test]
fn items_per_session_caps_a_session_at_an_item_boundary() {
    // Asked as the agent began on c (its Write at 41k), after a and b.
    capped_at_two_items("claude", SMALL_ITEMS, 24.6);
    capped_at_two_items("claude", &checked_off_by_shell(SMALL_ITEMS), 24.6);

    // One item per session: the prompt says to end the turn.
    let one = Project::new(
        "- [ ] a\n- [ ] b\n",
        SMALL_ITEMS,
        "[context]\nitems_per_session = 1\n",
    );
    let out = one.ralph().arg("prompt").output().unwrap();
    let prompt = String::from_utf8(out.stdout).unwrap();
    assert!(
        prompt.contains("Then end your turn: the next item gets a fresh session."),
        "{prompt}"
    );
}

/// An agent that leaves an unclosed code fence in the plan (an example it
/// started to write) must not hide the items after it: the plan stays
/// open, the promise is not a completion.
#[test]
fn a_stray_fence_in_the_plan_hides_no_item_from_the_completion_gate() {
    let scenario = r#"
[[iteration]]
[[iteration.step]]
context = 30000
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser\n\n```text\nexample output"
[[iteration.step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#;
    let p = Project::new("- [ ] parser\n- [ ] writer\n", scenario, "");
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert_eq!(p.state()["todo_items"], serde_json::json!(["writer"]));
}

/// A split item whose sub-items are all checked is still open: the prompt
/// says what is left (check it as a whole, tick it), not "work on it" as
/// if nothing had been done, and asks for no split.
#[test]
fn a_split_item_whose_parts_are_all_done_is_to_be_checked_off_as_a_whole() {
    let p = Project::new(
        "- [ ] port the parser\n  - [x] tokenizer\n  - [x] grammar\n- [ ] writer\n",
        "",
        "",
    );
    let out = p.ralph().arg("prompt").output().unwrap();
    let prompt = String::from_utf8(out.stdout).unwrap();
    assert!(prompt.contains("(now: **port the parser**)"), "{prompt}");
    assert!(
        prompt.contains("Its sub-items are all checked: make sure the item as a whole is done"),
        "{prompt}"
    );
    assert!(!prompt.contains("Split this item first"), "{prompt}");
    // Not said while a part is open.
    p.write(
        "fix_plan.md",
        "- [ ] port the parser\n  - [x] tokenizer\n  - [ ] grammar\n",
    );
    let out = p.ralph().arg("prompt").output().unwrap();
    let prompt = String::from_utf8(out.stdout).unwrap();
    assert!(prompt.contains("(now: **grammar**)"), "{prompt}");
    assert!(!prompt.contains("sub-items are all checked"), "{prompt}");
}

/// Issue 35: Codex's check-offs (an edit of the plan, a shell command that
/// edits it) are seen as they happen, as Claude Code's are: the cap acts
/// mid-session, not at its end.
#[test]
fn codex_check_offs_are_seen_mid_session() {
    capped_at_two_items("codex", SMALL_ITEMS, 24.6);
    capped_at_two_items("codex", &checked_off_by_shell(SMALL_ITEMS), 24.6);
}
