//! Prompt economy end to end (issue 15), with `ralph sim`: the decision
//! log over three checkpoints whose notes record decisions, one
//! superseding another; a handoff capped to its budget on a 10,000-file
//! change (issue 12, case 8).

use crate::common;

use std::time::Duration;

use common::Project;

const PLAN: &str = "# Ship the parser\n\n- [ ] parser\n- [ ] tests\n";
const SCENARIO: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/sim/decisions.toml"
));

/// The text of `path` in the commit whose subject starts with `subject`.
fn file_in_commit(p: &Project, subject: &str, path: &str) -> Option<String> {
    let repo = p.repo();
    let mut walk = repo.revwalk().unwrap();
    walk.push_head().unwrap();
    for id in walk {
        let commit = repo.find_commit(id.unwrap()).unwrap();
        if commit.summary().is_some_and(|s| s.starts_with(subject)) {
            let entry = commit.tree().unwrap().get_path(path.as_ref()).ok()?;
            let blob = repo.find_blob(entry.id()).unwrap();
            return Some(String::from_utf8(blob.content().to_vec()).unwrap());
        }
    }
    None
}

#[test]
fn decisions_from_three_checkpoints_are_logged_committed_and_shown() {
    let p = Project::new(PLAN, SCENARIO, "[context]\ngrace = \"20s\"\n");
    let run = p.run(&[], Duration::from_secs(90));
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.of("checkpoint").len(), 3, "{}", run.describe());

    // In order, numbered, with iteration, date and what is superseded.
    let log = p.read(".ralph/decisions.md");
    let headings: Vec<String> = log
        .lines()
        .filter(|l| l.starts_with("## DEC-"))
        .map(|l| {
            regex::Regex::new(r"\d{4}-\d{2}-\d{2}")
                .unwrap()
                .replace(l, "DATE")
                .into_owned()
        })
        .collect();
    assert_eq!(
        headings,
        [
            "## DEC-001 · iteration 1 · DATE",
            "## DEC-002 · iteration 1 · DATE",
            "## DEC-003 · iteration 2 · DATE",
            "## DEC-004 · iteration 3 · DATE · supersedes DEC-001",
        ],
        "{log}"
    );
    assert!(
        log.contains("\nQuoted fields follow RFC 4180.\n")
            || log.contains("\nquoted fields follow RFC 4180.\n"),
        "{log}"
    );
    assert!(
        !log.to_lowercase().contains("\nnone"),
        "an empty section is no decision: {log}"
    );

    // Each WIP commit carries the log as it stood then.
    let first = file_in_commit(&p, "ralph: checkpoint iter 1", ".ralph/decisions.md").unwrap();
    assert!(
        first.contains("DEC-002") && !first.contains("DEC-003"),
        "{first}"
    );
    let third = file_in_commit(&p, "ralph: checkpoint iter 3", ".ralph/decisions.md").unwrap();
    assert_eq!(third, log);

    // The prompt of iteration 4 names the log and shows the decisions in
    // force: DEC-001 was superseded by DEC-004.
    let prompt = p.read("PROMPT.md");
    assert!(prompt.starts_with("# Iteration 4:"), "{prompt}");
    assert!(
        prompt.contains(
            "## Decisions recorded by earlier iterations (`.ralph/decisions.md`, 4 so far)"
        ),
        "{prompt}"
    );
    assert!(
        prompt.contains(
            "- DEC-004, recorded by iteration 3: \"Parse with the csv module instead (supersedes DEC-001)"
        ),
        "{prompt}"
    );
    assert!(
        prompt.contains("- DEC-002, recorded by iteration 1: \"Dates are UTC everywhere.\""),
        "{prompt}"
    );
    assert!(!prompt.contains("DEC-001, recorded"), "{prompt}");
}

/// The agent leaves 10,000 untracked build outputs (not ignored) and a few
/// sources, then is checkpointed at L2.
const BIG_TREE: &str = r##"
step_delay_ms = 100

[[iteration]]
handoff_notes = "# Notes\n\n## Done\n- generator\n\n## Decisions\n- Generated files stay in build/.\n\n## Next\n- tests\n"
[[iteration.step]]
context = 60000
command = "mkdir -p build/out build/obj && for i in $(seq 1 9000); do : > build/out/gen_$i.o; done && for i in $(seq 1 1000); do : > build/obj/o_$i.o; done"
description = "generate"
[[iteration.step]]
context = 90000
path = "src/gen.py"
content = "def gen():\n    pass\n"
[[iteration.step]]
context = 120000
path = "src/cli.py"
content = "import gen\n"
[[iteration.step]]
context = 146000
text = "Generating the outputs."
path = "README.md"
content = "# gen\n"

[[iteration]]
[[iteration.step]]
result = "stopping"
"##;

#[test]
fn a_10000_file_change_gives_a_capped_handoff_within_budget() {
    let p = Project::new(
        PLAN,
        BIG_TREE,
        "[context]\ngrace = \"20s\"\n[loop]\nmax_iterations = 1\n",
    );
    let run = p.run(&[], Duration::from_secs(120));
    assert_eq!(run.code, Some(4), "{}", run.describe());
    // git.max_new_files keeps the build outputs out of the WIP commit; the
    // handoff lists them as left out, within its budget all the same.
    let committed = p.head_files().len();
    assert!(committed < 100, "{committed} files committed");
    let doc = std::fs::read_to_string(p.handoffs().pop().unwrap()).unwrap();
    let tokens = ralph::prompt::tokens::estimate(&doc);
    assert!(tokens <= 4_000, "{tokens} tokens");
    // Every section is still there.
    for section in [
        "## Why this checkpoint",
        "## What was in progress",
        "## The agent's own notes",
        "## Repository",
        "## Plan progress",
        "## Context to reload",
        "## Next steps",
    ] {
        assert!(doc.contains(section), "{section} missing:\n{doc}");
    }
    let root = p.root().display().to_string();
    let mut s = doc.replace(&root, "[ROOT]");
    for (re, with) in [
        (r"date: \d{4}-\d{2}-\d{2}", "date: [DATE]"),
        (r#"time: "[^"]*""#, "time: \"[TIME]\""),
        (r"\b[0-9a-f]{40}\b", "[COMMIT]"),
        (r"\b[0-9a-f]{10}\b", "[SHORT]"),
        (r"branch: \S+", "branch: [BRANCH]"),
        (r"context_percent: \S+", "context_percent: [P]"),
        (r"at \d+%", "at [P]%"),
    ] {
        s = regex::Regex::new(re)
            .unwrap()
            .replace_all(&s, with)
            .into_owned();
    }
    insta::assert_snapshot!("capped_handoff", s);

    // The next prompt points at that handoff: `--stats` counts it too.
    let out = p
        .ralph()
        .args(["prompt", "--stats", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let h = &v["handoff"];
    assert_eq!(h["budget"], 4000, "{v}");
    assert_eq!(h["fits"], true, "{v}");
    assert_eq!(h["tokens"].as_u64().unwrap() as usize, tokens);
    let names: Vec<&str> = h["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"Repository"), "{names:?}");
}

#[test]
fn prompt_stats_count_each_section_against_the_budget() {
    let mut plan = "# Big\n\n".to_string();
    for i in 0..3000 {
        plan.push_str(&format!("- [ ] item {i}: handle case {i} of the grammar\n"));
    }
    let p = Project::new(&plan, "[[step]]\ntext = \"x\"\n", "");
    let out = p
        .ralph()
        .args(["prompt", "--stats", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["prompt"]["budget"], 8000);
    assert_eq!(v["prompt"]["fits"], true);
    let tokens = v["prompt"]["tokens"].as_u64().unwrap();
    // The budget is a ceiling, not a target (docs/prompt-budget.md).
    assert!(tokens < 1500, "{v}");
    let sections = v["prompt"]["sections"].as_array().unwrap();
    let sum: u64 = sections.iter().map(|s| s["tokens"].as_u64().unwrap()).sum();
    assert!(
        sum.abs_diff(tokens) <= sections.len() as u64,
        "{sum} vs {tokens}"
    );
    assert!(
        sections[1]["name"]
            .as_str()
            .unwrap()
            .starts_with("Plan (`fix_plan.md`): 0 done, 3000 open"),
        "{v}"
    );
    assert_eq!(v["open_items"], 3000);
    assert_eq!(
        v["open_items_shown"], 14,
        "4 in full and 10 one-liners: {v}"
    );
    assert_eq!(v["handoff"], serde_json::Value::Null);
    // The same, for people.
    let out = p.ralph().args(["prompt", "--stats"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("prompt of iteration 1 (PROMPT.md): "),
        "{text}"
    );
    assert!(
        text.contains("of 8,000 tokens") && text.contains("within budget"),
        "{text}"
    );
    assert!(text.contains("handoff: none"), "{text}");
}

#[test]
fn doctor_warns_when_the_first_prompt_cannot_fit_the_budget() {
    let mut plan = "# Big notes\n\n- [ ] first\n".to_string();
    for i in 0..400 {
        plan.push_str(&format!(
            "  note line {i}: a long explanation of the first item\n"
        ));
    }
    let p = Project::new(
        &plan,
        "[[step]]\ntext = \"x\"\n",
        "[prompt]\nmax_tokens = 700\n",
    );
    let out = p.ralph().args(["doctor", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "prompt budget")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(check["verdict"], "warning", "{check}");
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.contains("over [prompt] max_tokens (700)"),
        "{detail}"
    );
    assert!(detail.contains("Plan (`fix_plan.md`)"), "{detail}");
    assert!(
        check["fix"].as_str().unwrap().contains("fix_plan.md"),
        "{check}"
    );
    // Within budget, the same check is fine.
    p.write("ralph.toml", &common::config(""));
    let out = p.ralph().args(["doctor", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "prompt budget")
        .unwrap()
        .clone();
    assert_eq!(check["verdict"], "ok", "{check}");
}
