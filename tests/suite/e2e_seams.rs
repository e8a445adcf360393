//! End-to-end tests of task-aware checkpoints (issue 14) with `ralph sim`:
//! the boundary checkpoint when the next item will not fit, the shard
//! request after an item is checkpointed twice in a row, the L1 nudge, and
//! the per-item accounting they leave in the state.

use crate::common;

use std::time::Duration;

use common::Project;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);

/// Item 2 names a 200 kB spec: ~50k tokens to read on top of the prior.
const BOUNDARY_PLAN: &str =
    "# Two items\n\n- [ ] item one\n- [ ] item two: implement `specs/big.md`\n";

/// Iteration 1 checks item one off at 62% (103,540 of 167,000 usable
/// tokens) and would go on with item two; iteration 2 does item two.
const BOUNDARY: &str = r##"
record_messages = ".ralph/messages.jsonl"
step_delay_ms = 300

[[iteration]]
[[iteration.step]]
context = 40000
text = "Working on item one."
path = "one.txt"
content = "one\n"

[[iteration.step]]
context = 103540
text = "Item one is done."
path = "fix_plan.md"
old = "- [ ] item one"
new = "- [x] item one"

[[iteration.step]]
context = 110000
text = "Starting item two: this step must never run."
path = "never.txt"
content = "x"

[[iteration]]
[[iteration.step]]
context = 30000
text = "Item two."
path = "two.txt"
content = "two\n"
[[iteration.step]]
context = 60000
path = "fix_plan.md"
old = "- [ ] item two"
new = "- [x] item two"
[[iteration.step]]
result = "<promise>COMPLETE</promise>"
"##;

fn messages(p: &Project) -> Vec<Value> {
    p.read(".ralph/messages.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn texts_of(messages: &[Value], iteration: u64) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m["iteration"] == iteration)
        .map(|m| m["text"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn boundary_checkpoint_when_the_next_item_does_not_fit() {
    let p = Project::bare(BOUNDARY_PLAN, BOUNDARY, "[context]\ngrace = \"20s\"\n");
    p.write("specs/big.md", &"x".repeat(200_000));
    // Committed, so that the spec is not the agent's work.
    p.git_init();
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());

    // Item one was seen checked off live, with item two too big for what is left.
    let checked = run.of("item_checked");
    assert_eq!(checked.len(), 2, "{}", run.describe());
    assert_eq!(checked[0]["items"][0], "item one");
    assert_eq!(checked[0]["percent"], 62.0);
    assert_eq!(checked[0]["remaining"], 141_950 - 103_540);
    assert!(checked[0]["next_estimate"].as_u64().unwrap() > 38_410);

    // A boundary checkpoint at 62%: handoff, WIP commit, nothing of item two.
    let cp = run.of("checkpoint");
    assert_eq!(cp.len(), 1, "{}", run.describe());
    assert_eq!(cp[0]["trigger"], "boundary");
    assert_eq!(cp[0]["percent"], 62.0);
    assert!(cp[0]["commit"].is_string(), "{}", run.describe());
    assert!(cp[0]["handoff"].is_string(), "{}", run.describe());
    assert!(!p.path("never.txt").exists(), "item two was not started");
    assert!(
        p.log()
            .iter()
            .any(|s| s.starts_with("ralph: checkpoint iter 1")),
        "{:?}",
        p.log()
    );
    let request = &texts_of(&messages(&p), 1)[1];
    assert!(request.contains("`.ralph/notes/iter-001.md`"), "{request}");

    // Iteration 2 starts on item two with a fresh window.
    let state = p.state();
    let hist = state["history"].as_array().unwrap();
    assert_eq!(hist[0]["item"], "item one");
    assert_eq!(hist[0]["items_checked"][0], "item one");
    assert_eq!(hist[0]["item_tokens"], 103_540 - 40_000);
    assert_eq!(hist[1]["item"], "item two: implement `specs/big.md`");
    assert_eq!(
        hist[1]["items_checked"][0],
        "item two: implement `specs/big.md`"
    );
    let ctx = state["context_history"].as_array().unwrap();
    assert!(ctx[1]["peak_percent"].as_f64().unwrap() < 40.0, "{ctx:?}");
    let prompt2 = &texts_of(&messages(&p), 2)[0];
    assert!(prompt2.contains("(now: **item two"), "{prompt2}");

    // Per-item accounting and the ledger of finished items, with estimates.
    let items = state["items"].as_array().unwrap();
    assert_eq!(items[0]["item"], "item one");
    assert_eq!(items[0]["tokens"], 63_540);
    assert_eq!(items[0]["done"], true);
    assert!(items[0]["estimate"].is_u64());
    let ledger = p.read(".ralph/items.jsonl");
    assert_eq!(ledger.lines().count(), 2, "{ledger}");
    assert!(ledger.contains("\"item\":\"item one\",\"tokens\":63540,\"estimate\":"));

    // `ralph context --json` exposes it.
    let out = p.ralph().args(["context", "--json"]).output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["items"][0]["item"], "item one");
    assert_eq!(report["iterations"][0]["items_checked"][0], "item one");
}

#[test]
fn a_small_next_item_is_let_finish_past_l1() {
    // The same climb, but item two is small: no boundary checkpoint.
    let plan = "- [ ] item one\n- [ ] item two\n";
    let scenario = BOUNDARY.replace(
        "text = \"Starting item two: this step must never run.\"\npath = \"never.txt\"",
        "text = \"Item two fits.\"\npath = \"fits.txt\"",
    );
    let p = Project::new(
        plan,
        &scenario,
        "[context]\nestimate_prior_percent = 5\nnudge_at_l1 = false\n[loop]\nmax_iterations = 1\n",
    );
    let run = p.run(&[], LIMIT);
    assert!(run.of("checkpoint").is_empty(), "{}", run.describe());
    assert!(p.path("fits.txt").exists());
    assert_eq!(run.of("item_checked").len(), 1, "{}", run.describe());
}

/// One iteration climbing past L2 on the huge item without finishing it.
const CLIMB_ON_HUGE: &str = r##"
[[iteration]]
[[iteration.step]]
context = 80000
text = "Reading everything the huge item touches."
[[iteration.step]]
context = 146000
text = "Still reading."
[[iteration.step]]
context = 150000
text = "never"
"##;

/// Iteration 3 splits the huge item; iteration 4 finishes.
const SPLIT_THEN_FINISH: &str = r##"
[[iteration]]
[[iteration.step]]
context = 30000
text = "Splitting the huge item as asked."
path = "fix_plan.md"
old = "- [ ] huge item\n"
new = "- [ ] huge item\n  - [ ] huge item, part one\n  - [ ] huge item, part two\n"

[[iteration]]
[[iteration.step]]
context = 30000
path = "fix_plan.md"
content = "- [x] huge item\n  - [x] huge item, part one\n  - [x] huge item, part two\n- [x] small item\n"
[[iteration.step]]
result = "<promise>COMPLETE</promise>"
"##;

#[test]
fn an_item_checkpointed_twice_is_asked_to_be_split_and_the_run_goes_on() {
    // Iterations 1 and 2 climb past L2 on the huge item; 3 splits it; 4 finishes.
    let scenario = format!(
        "record_messages = \".ralph/messages.jsonl\"\nstep_delay_ms = 200\n{CLIMB_ON_HUGE}{CLIMB_ON_HUGE}{SPLIT_THEN_FINISH}"
    );
    let p = Project::new(
        "- [ ] huge item\n- [ ] small item\n",
        &scenario,
        "[context]\ngrace = \"20s\"\nnudge_at_l1 = false\n[breaker]\nno_progress = 3\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let contexts: Vec<_> = run
        .of("checkpoint")
        .iter()
        .map(|c| (c["iteration"].as_u64().unwrap(), c["trigger"].clone()))
        .collect();
    assert_eq!(contexts, [(1, "context".into()), (2, "context".into())]);

    // The third prompt, and only it, carries the shard request.
    let shard = run.of("shard_suggested");
    assert_eq!(shard.len(), 1, "{}", run.describe());
    assert_eq!(shard[0]["iteration"], 3);
    assert_eq!(shard[0]["item"], "huge item");
    assert_eq!(shard[0]["reason"], "checkpointed");
    let m = messages(&p);
    for (iteration, asked) in [(1, false), (2, false), (3, true), (4, false)] {
        let prompt = &texts_of(&m, iteration)[0];
        assert_eq!(
            prompt.contains("## Split this item first"),
            asked,
            "iteration {iteration}: {prompt}"
        );
    }
    assert!(texts_of(&m, 3)[0].contains("**huge item** is too big for one session"));

    // The split is progress: no breaker, and the history says so.
    assert!(run.of("breaker").is_empty(), "{}", run.describe());
    let state = p.state();
    let hist = state["history"].as_array().unwrap();
    assert_eq!(hist.len(), 4);
    assert_eq!(hist[2]["split"], true);
    assert_eq!(hist[2]["progress"], true);
    let huge = &state["items"][0];
    assert_eq!(huge["item"], "huge item");
    assert_eq!(huge["checkpoints"], 2);
    assert_eq!(huge["split_in"], 3);
    assert_eq!(huge["tokens"], 2 * (146_000 - 80_000));
}

/// Climbs through L1 (70% = 116,900 tokens) in several turns, then ends.
const NUDGE: &str = r##"
record_messages = ".ralph/messages.jsonl"
step_delay_ms = 200

[[step]]
context = 60000
text = "Working."
[[step]]
context = 120000
text = "Past L1."
[[step]]
context = 125000
text = "Still working: the nudge was a note, not a checkpoint request."
path = "after-nudge.txt"
content = "x"
[[step]]
context = 130000
path = "fix_plan.md"
old = "- [ ] only item"
new = "- [x] only item"
[[step]]
result = "<promise>COMPLETE</promise>"
"##;

#[test]
fn the_l1_nudge_reaches_the_agent_once() {
    let p = Project::new("- [ ] only item\n", NUDGE, "");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let nudged = run.of("nudged");
    assert_eq!(nudged.len(), 1, "{}", run.describe());
    assert_eq!(nudged[0]["item"], "only item");
    let texts = texts_of(&messages(&p), 1);
    assert_eq!(texts.len(), 2, "the prompt and one nudge: {texts:?}");
    assert!(
        texts[1].contains("Do not start another item"),
        "{}",
        texts[1]
    );
    assert!(run.of("checkpoint").is_empty(), "{}", run.describe());
    assert!(p.path("after-nudge.txt").exists());

    // Off: no message at all.
    let p = Project::new(
        "- [ ] only item\n",
        NUDGE,
        "[context]\nnudge_at_l1 = false\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(run.of("nudged").is_empty());
    assert_eq!(texts_of(&messages(&p), 1).len(), 1);
}

#[test]
fn context_estimate_says_whether_an_item_fits() {
    let p = Project::new(BOUNDARY_PLAN, BOUNDARY, "");
    p.write("specs/huge.md", &"x".repeat(600_000));
    let out = p
        .ralph()
        .args(["context", "--estimate", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["item"], "item one");
    assert_eq!(e["basis"], "prior");
    assert_eq!(e["confidence"], "low");
    assert_eq!(e["tokens"], 33_400);
    assert_eq!(e["fit"], "fits");

    let out = p
        .ralph()
        .args([
            "context",
            "--estimate",
            "port everything in `specs/huge.md`",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("from prior + 150k of named files"), "{text}");
    assert!(text.contains("too big for one window: split it"), "{text}");

    let done = Project::new("- [x] all done\n", BOUNDARY, "");
    let out = done
        .ralph()
        .args(["context", "--estimate"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no open item"));
}

/// Sonnet 5 runs with a 1M window though its name has no `[1m]` (Claude
/// Code 2.1.328 and 2.1.330 report `contextWindow` 1000000), and the default
/// config checkpoints it at 200k tokens: not at 150k (90% of a 200k window,
/// the guess before), not at ~822k (85% of 1M).
#[test]
fn a_generation_five_model_gets_a_1m_window_and_the_default_cap() {
    let scenario = r#"
model = "claude-sonnet-5"
step_delay_ms = 200
[[step]]
context = 150000
text = "Working."
[[step]]
context = 210000
text = "Past the default cap."
[[step]]
context = 220000
text = "never"
path = "never.txt"
content = "x"
"#;
    let p = Project::new(
        "- [ ] item\n",
        scenario,
        "[context]\nnudge_at_l1 = false\n[loop]\nmax_iterations = 1\n",
    );
    let run = p.run(&[], LIMIT);
    let cp = run.of("checkpoint");
    assert_eq!(cp.len(), 1, "{}", run.describe());
    assert_eq!(cp[0]["trigger"], "context");
    assert_eq!(cp[0]["level"], "L2", "{}", run.describe());
    let percent = cp[0]["percent"].as_f64().unwrap();
    assert!(
        (20.0..25.0).contains(&percent),
        "210k of 967k: {}",
        run.describe()
    );
    assert!(!p.path("never.txt").exists());
}

/// A model whose name says nothing of its 1M window (`claude-opus-4-6`: a
/// guess of 200k), in a project whose ralph.toml names no model.
const LEARNS_1M: &str = r#"
model = "claude-opus-4-6"
context_window = 1000000
[[step]]
context = 30000
path = "fix_plan.md"
old = "- [ ] a"
new = "- [x] a"
[[step]]
result = "<promise>COMPLETE</promise>"
"#;

/// Climbs past 85% of a 200k window's usable 167k, far below 1M's.
const CLIMBS: &str = r#"
model = "claude-opus-4-6"
context_window = 1000000
step_delay_ms = 150
[[step]]
context = 150000
text = "Working."
[[step]]
context = 190000
text = "Still working."
[[step]]
result = "Later."
"#;

/// A run that learnt the model's 1M window from a result, then the next
/// night's run: its first iteration is metered on 1M from its first turn
/// (the checkpoint cap of 200k still stands), not checkpointed at ~150k of
/// a 200k guess. Before, the window was forgotten with the run.
#[test]
fn a_window_learnt_by_a_run_meters_the_next_runs_first_iteration() {
    for (case, second) in [
        ("a new run after a completed one", &[][..]),
        ("--fresh", &["--fresh"][..]),
    ] {
        let p = Project::new(
            "- [ ] a\n",
            LEARNS_1M,
            "[context]\nnudge_at_l1 = false\n[loop]\nmax_iterations = 1\n",
        );
        let first = p.run(&[], LIMIT);
        assert_eq!(first.code, Some(0), "{case}: {}", first.describe());
        p.write("fix_plan.md", "- [x] a\n- [ ] b\n");
        p.write("scenario.toml", CLIMBS);
        let run = p.run(second, LIMIT);
        assert!(
            run.of("checkpoint").is_empty(),
            "{case}: checkpointed early: {}",
            run.describe()
        );
        let readings = run.of("context");
        let first_reading = &readings.first().expect("a reading")["reading"];
        assert_eq!(
            first_reading["window"], 1_000_000,
            "{case}: {first_reading}"
        );
        assert_eq!(first_reading["window_source"], "remembered", "{case}");
        let context = p.ralph().arg("context").output().unwrap();
        let context = String::from_utf8_lossy(&context.stdout);
        assert!(
            context.contains("remembered from an earlier run"),
            "{case}: {context}"
        );
    }
}

/// The memory is no requirement: a corrupt one is said and ignored (the
/// run meters by name, as with none), and the next reported window
/// replaces it.
#[test]
fn a_corrupt_memory_of_windows_is_said_ignored_and_replaced() {
    let p = Project::new(
        "- [ ] a\n",
        CLIMBS,
        "[context]\nnudge_at_l1 = false\n[loop]\nmax_iterations = 1\n",
    );
    p.write(".ralph/windows.json", "{\"models\": {\"claude-opus-4-6\": ");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(
        run.of("warning").iter().any(|w| w["message"]
            .as_str()
            .is_some_and(|m| m.contains("windows.json is not a valid memory"))),
        "{}",
        run.describe()
    );
    assert_eq!(run.of("checkpoint").len(), 1, "a guess of 200k");
    let memory: Value = serde_json::from_str(&p.read(".ralph/windows.json")).unwrap();
    assert_eq!(
        memory["models"]["claude-opus-4-6"]["window"], 1_000_000,
        "{memory}"
    );
    assert_eq!(memory["models"]["claude-opus-4-6"]["source"], "result");
}

#[test]
fn checkpoint_tokens_caps_the_window() {
    // A 1M window: 85% would be ~822k tokens; the cap says 200k.
    let scenario = r#"
model = "claude-sonnet-4-5[1m]"
step_delay_ms = 200
[[step]]
context = 150000
text = "Working."
[[step]]
context = 210000
text = "Past the cap."
[[step]]
context = 220000
text = "never"
path = "never.txt"
content = "x"
"#;
    let p = Project::new(
        "- [ ] item\n",
        scenario,
        "[context]\ncheckpoint_tokens = 200000\nnudge_at_l1 = false\n[loop]\nmax_iterations = 1\n",
    );
    let run = p.run(&[], LIMIT);
    let cp = run.of("checkpoint");
    assert_eq!(cp.len(), 1, "{}", run.describe());
    assert_eq!(cp[0]["trigger"], "context");
    assert_eq!(cp[0]["level"], "L2");
    assert!(
        cp[0]["percent"].as_f64().unwrap() < 25.0,
        "{}",
        run.describe()
    );
    assert!(!p.path("never.txt").exists());
}

#[test]
fn uncommitted_work_on_an_unfinished_item_is_carried_over() {
    let scenario = r#"
record_messages = ".ralph/messages.jsonl"

[[iteration]]
[[iteration.step]]
context = 40000
text = "Half of the parser."
path = "parser.py"
content = "def parse(s):\n    pass\n"

[[iteration]]
[[iteration.step]]
context = 30000
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[iteration.step]]
result = "<promise>COMPLETE</promise>"
"#;
    let p = Project::new("- [ ] parser\n", scenario, "");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let m = messages(&p);
    let first = &texts_of(&m, 1)[0];
    assert!(!first.contains("Left over"), "{first}");
    let second = &texts_of(&m, 2)[0];
    assert!(second.contains("## Left over from iteration 1"), "{second}");
    assert!(second.contains("**parser** unfinished"), "{second}");
    assert!(second.contains("- `?? parser.py`"), "{second}");
    assert!(
        p.state().get("carry_over").is_none(),
        "handed over and cleared"
    );
}

#[test]
fn the_prompt_preview_carries_the_shard_request_of_a_too_large_item() {
    let p = Project::new(
        "- [ ] port everything in `specs/huge.md`\n- [ ] small\n",
        BOUNDARY,
        "",
    );
    p.write("specs/huge.md", &"x".repeat(600_000));
    let out = p.ralph().arg("prompt").output().unwrap();
    let prompt = String::from_utf8(out.stdout).unwrap();
    assert!(prompt.contains("## Split this item first"), "{prompt}");
    assert!(
        prompt.contains("above the 60% from which items are split"),
        "{prompt}"
    );

    let small = Project::new("- [ ] small\n", BOUNDARY, "");
    let out = small.ralph().arg("prompt").output().unwrap();
    assert!(
        !String::from_utf8(out.stdout)
            .unwrap()
            .contains("Split this item")
    );
}

/// `ralph prompt` shows the shard decision the loop makes, not one of its
/// own: a run continued after its first iteration had seen a 1M window
/// (the state says so) but names no model, so the loop's meter starts at
/// the default 200k window, where a ~150k-token item is past the 60% from
/// which items are split. The preview and the run's first prompt agree.
#[test]
fn the_prompt_preview_makes_the_loops_shard_decision() {
    let p = Project::new(
        "- [ ] port everything in `specs/big.md`\n- [ ] small\n",
        "[[step]]\ncontext = 30000\ntext = \"Looking.\"\n[[step]]\nresult = \"Later.\"\n",
        "",
    );
    p.write("specs/big.md", &"word ".repeat(96_000));
    let layout = ralph::formats::Layout::new(p.root());
    layout.ensure().unwrap();
    let mut state = ralph::formats::RunState {
        run_id: "r1".into(),
        iteration: 1,
        status: "interrupted".into(),
        context_window: 1_000_000,
        ..ralph::formats::RunState::default()
    };
    state.save(&layout.state()).unwrap();
    let out = p.ralph().arg("prompt").output().unwrap();
    let preview = String::from_utf8(out.stdout).unwrap();
    let run = p.run(&["--max-iterations", "2"], LIMIT);
    let shard = run.of("shard_suggested");
    assert_eq!(shard.len(), 1, "{}", run.describe());
    assert!(
        preview.contains("## Split this item first"),
        "the loop asks for a split ({}), the preview does not:\n{preview}",
        shard[0]
    );
}

/// Issue 35, "splits end": the agent splits the big item into parts that
/// still name the big file, as agents word them. The split is asked for
/// once; the parts are worked on, not asked to split again (before, each
/// part took the whole file's estimate and every later session was spent
/// on a split request).
#[test]
fn parts_that_still_name_the_big_file_are_worked_not_asked_to_split_again() {
    let scenario = r##"
record_messages = ".ralph/messages.jsonl"

[[iteration]]
[[iteration.step]]
context = 30000
path = "fix_plan.md"
content = "- [ ] port everything in `specs/huge.md`\n  - [ ] port `specs/huge.md` part one\n  - [ ] port `specs/huge.md` part two\n- [ ] small\n"
[[iteration.step]]
result = "Split it."

[[iteration]]
[[iteration.step]]
context = 30000
path = "fix_plan.md"
content = "- [ ] port everything in `specs/huge.md`\n  - [x] port `specs/huge.md` part one\n  - [ ] port `specs/huge.md` part two\n- [ ] small\n"
[[iteration.step]]
result = "Part one."

[[iteration]]
[[iteration.step]]
context = 30000
path = "fix_plan.md"
content = "- [x] port everything in `specs/huge.md`\n  - [x] port `specs/huge.md` part one\n  - [x] port `specs/huge.md` part two\n- [x] small\n"
[[iteration.step]]
result = "<promise>COMPLETE</promise>"
"##;
    let p = Project::new(
        "- [ ] port everything in `specs/huge.md`\n- [ ] small\n",
        scenario,
        "",
    );
    p.write("specs/huge.md", &"x".repeat(600_000));
    let run = p.run(&["--max-iterations", "6"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let shard = run.of("shard_suggested");
    let asked: Vec<_> = shard.iter().map(|s| s["iteration"].as_u64()).collect();
    assert_eq!(asked, [Some(1)], "{}", run.describe());
    assert_eq!(shard[0]["item"], "port everything in `specs/huge.md`");
    let m = messages(&p);
    for (iteration, split) in [(1, true), (2, false), (3, false)] {
        let prompt = &texts_of(&m, iteration)[0];
        assert_eq!(
            prompt.contains("## Split this item first"),
            split,
            "iteration {iteration}: {prompt}"
        );
    }
    assert_eq!(p.state()["history"].as_array().unwrap().len(), 3);
}
