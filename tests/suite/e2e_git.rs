//! End-to-end tests of git safety in real repositories (issue 12, cases
//! 1–6 and 8): sparse checkouts, the user's PROMPT.md, an agent running
//! `git clean`, work in a stash, ralph's own log, truthful resume prompts
//! and big trees. Real temp repos set up with the git CLI, `ralph sim` as
//! the agent.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Project, Run, wait_for_file};

const PLAN: &str = "# Ship the parser\n\n- [ ] parser\n- [ ] tests\n";
const LIMIT: Duration = Duration::from_secs(60);

/// An iteration that only looks around (the last one of a scenario is
/// played again for every later iteration).
macro_rules! looking_around {
    () => {
        "\n[[iteration]]\n[[iteration.step]]\ncontext = 20000\nresult = \"Looked around.\"\n"
    };
}

/// Iteration 1 writes `work.txt` and climbs past L2 at once; the later
/// ones only look around.
const QUICK_L2: &str = concat!(
    r#"
[[iteration]]
[[iteration.step]]
context = 146000
text = "Writing."
path = "work.txt"
content = "work in progress\n"
"#,
    looking_around!()
);

fn git(p: &Project, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(p.root())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A project whose first commit also holds `files`, with a git identity
/// the agent's own git commands can use.
fn project_with(files: &[(&str, &str)], scenario: &str, config: &str) -> Project {
    let p = Project::bare(PLAN, scenario, config);
    for (path, text) in files {
        p.write(path, text);
    }
    p.git_init();
    git(&p, &["config", "user.name", "Test User"]);
    git(&p, &["config", "user.email", "test@example.com"]);
    p
}

fn tree_paths(p: &Project, rev: &str) -> Vec<String> {
    git(p, &["ls-tree", "-r", "--name-only", rev])
        .lines()
        .map(str::to_string)
        .collect()
}

fn warnings(run: &Run) -> String {
    run.of("warning")
        .iter()
        .map(|w| w["message"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Case 1: a WIP commit in a sparse checkout stages what `git add -A`
/// would: the files outside the cone stay in the branch, skip-worktree and
/// assume-unchanged entries untouched.
#[test]
fn sparse_checkout_wip_commit_keeps_files_outside_the_cone() {
    let scenario = r#"
[[step]]
context = 146000
text = "Editing the source."
path = "src/lib.rs"
content = "pub fn parse() {}\n"
"#;
    let p = project_with(
        &[
            ("src/lib.rs", "// empty\n"),
            ("config/app.toml", "x = 1\n"),
            ("docs/guide.md", "# Guide\n"),
            ("vendor/big/data.txt", "data\n"),
        ],
        scenario,
        "",
    );
    git(&p, &["sparse-checkout", "set", "--cone", "src", "config"]);
    assert!(!p.path("docs/guide.md").exists(), "outside the cone");
    git(
        &p,
        &["update-index", "--assume-unchanged", "config/app.toml"],
    );
    p.write("config/app.toml", "x = 2 # local tweak\n");
    assert_eq!(git(&p, &["status", "--porcelain"]), "");

    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(
        run.of("checkpoint")[0]["commit"].is_string(),
        "{}",
        run.describe()
    );
    let head = tree_paths(&p, "HEAD");
    for kept in ["docs/guide.md", "vendor/big/data.txt", "config/app.toml"] {
        assert!(head.contains(&kept.to_string()), "{kept} deleted: {head:?}");
    }
    let mut changed = p.head_files();
    changed.retain(|f| !f.starts_with(".ralph/handoffs/"));
    changed.sort();
    assert_eq!(changed, ["PROMPT.md", "src/lib.rs"]);
    assert_eq!(git(&p, &["show", "HEAD:config/app.toml"]), "x = 1\n");
    // The index still marks them: `S` skip-worktree, lowercase assume-unchanged.
    let tags = git(&p, &["ls-files", "-v"]);
    assert!(tags.contains("S docs/guide.md"), "{tags}");
    assert!(tags.contains("h config/app.toml"), "{tags}");
    assert_eq!(git(&p, &["status", "--porcelain"]), "");
}

/// Case 2: a hand-written PROMPT.md is never overwritten; `init` and
/// `doctor` say so; a prompt file inside `.git/` or outside the project is
/// refused (exit 2).
#[test]
fn a_prompt_md_ralph_did_not_write_is_refused_and_reported() {
    let p = project_with(&[], QUICK_L2, "");
    let mine = "# My loop prompt\n\nStudy the specs, pick one task.\n";
    p.write("PROMPT.md", mine);
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(2), "{}", run.describe());
    assert!(
        run.stderr
            .contains("PROMPT.md exists and was not written by ralph"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("hint:") && run.stderr.contains("prompt_file"),
        "{}",
        run.stderr
    );
    assert_eq!(p.read("PROMPT.md"), mine);

    let doctor = p.ralph().arg("doctor").output().unwrap();
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        text.contains("PROMPT.md exists and was not written by ralph"),
        "{text}"
    );
    // `ralph init` in a project that has only its own PROMPT.md adopts it:
    // kept, and ralph's own prompt goes elsewhere.
    let fresh = tempfile::tempdir().unwrap();
    std::fs::write(fresh.path().join("PROMPT.md"), mine).unwrap();
    let init = Command::new(common::BIN)
        .current_dir(fresh.path())
        .arg("init")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&init.stdout);
    assert!(
        text.contains("kept      PROMPT.md: your prompt, not written by ralph"),
        "{text}"
    );
    let toml = std::fs::read_to_string(fresh.path().join("ralph.toml")).unwrap();
    assert!(
        toml.contains("prompt_file = \".ralph-prompt.md\""),
        "{toml}"
    );
    assert_eq!(
        std::fs::read_to_string(fresh.path().join("PROMPT.md")).unwrap(),
        mine
    );

    // Another name for the prompt: ralph writes it and may rewrite it.
    p.write(
        "ralph.toml",
        &format!("prompt_file = \"RALPH_PROMPT.md\"\n{}", common::config("")),
    );
    let run = p.run(&["--max-iterations", "2"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(p.read("RALPH_PROMPT.md").starts_with("# Iteration 2"));
    assert_eq!(p.read("PROMPT.md"), mine);

    for bad in [".git/config", "../outside.md", "/tmp/ralph-prompt.md"] {
        p.write(
            "ralph.toml",
            &format!("prompt_file = \"{bad}\"\n{}", common::config("")),
        );
        let run = p.run(&["--max-iterations", "1"], LIMIT);
        assert_eq!(run.code, Some(2), "{bad}: {}", run.describe());
        assert!(run.stderr.contains("prompt_file"), "{}", run.stderr);
    }
    assert!(git(&p, &["config", "user.name"]).contains("Test User"));
}

/// Case 3: the agent runs `git clean -fd` then `git add -A && git commit`:
/// nothing of ralph's runtime goes in. Then `git clean -fdx` deletes
/// `.ralph/` under the live run: ralph takes its lock back, so a second
/// `ralph run` is refused, and state is saved again.
#[test]
fn git_clean_neither_commits_ralph_files_nor_frees_the_lock() {
    let scenario = r#"
step_delay_ms = 200
[[step]]
context = 20000
path = "parser.py"
content = "def parse(s):\n    return s\n"
[[step]]
command = "git clean -fd -e parser.py && git add -A && git commit -qm agent-commit"
[[step]]
command = "git clean -fdx; touch cleaned.flag"
[[step]]
command = "sleep 4"
[[step]]
result = "Cleaned up."
"#;
    let p = project_with(&[], scenario, "");
    let first = p.spawn_run(&["--max-iterations", "1"]);
    wait_for_file(&p, "cleaned.flag", LIMIT);
    std::thread::sleep(Duration::from_millis(2500));
    let second = p.run(&["--max-iterations", "1"], LIMIT);
    let status = p.ralph().arg("status").output().unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains("running (supervisor pid"), "{status}");
    let first = Run::wait(first, LIMIT);
    assert_eq!(
        second.code,
        Some(2),
        "a second supervisor started: {}",
        second.describe()
    );
    assert!(
        second.stderr.contains("already supervising"),
        "{}",
        second.stderr
    );
    assert_eq!(first.code, Some(4), "{}", first.describe());
    assert!(
        warnings(&first).contains("re-created"),
        "{}",
        first.describe()
    );
    assert_eq!(
        p.state()["status"],
        "iteration_limit",
        "state saved after the clean"
    );
    let log = p.read(".ralph/events.jsonl");
    assert!(
        log.contains("re-created") && log.contains("run_ended"),
        "{log}"
    );

    let agent = tree_paths(&p, "HEAD");
    let leaked: Vec<&String> = agent
        .iter()
        .filter(|f| f.starts_with(".ralph/") && !f.starts_with(".ralph/handoffs/"))
        .collect();
    assert!(
        leaked.is_empty(),
        "ralph's runtime files committed: {leaked:?}"
    );
    assert!(p.log().contains(&"agent-commit".to_string()));
}

/// Case 4: the agent stashes its edit and is checkpointed before it pops:
/// the handoff and the next prompt say where the work is.
#[test]
fn work_in_a_stash_is_named_in_the_handoff_and_the_resume_prompt() {
    let scenario = concat!(
        r#"
[[iteration]]
[[iteration.step]]
context = 60000
text = "Editing, then stashing to test the baseline."
path = "lib.py"
content = "def parse(s):\n    return s.split(',')\n"
[[iteration.step]]
context = 146000
command = "git stash push -m baseline-check"
"#,
        looking_around!()
    );
    let p = project_with(&[("lib.py", "# empty\n")], scenario, "");
    let run = p.run(&["--max-iterations", "2"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let handoff = std::fs::read_to_string(&p.handoffs()[0]).unwrap();
    assert!(handoff.contains("Work in the stash"), "{handoff}");
    assert!(
        handoff.contains("stash@{0}") && handoff.contains("baseline-check"),
        "{handoff}"
    );
    assert!(handoff.contains("git stash pop"), "{handoff}");
    let prompt = p.read("PROMPT.md");
    assert!(
        prompt.contains("Part of its work is in the stash"),
        "{prompt}"
    );
    assert!(
        prompt.contains("stash@{0}") && prompt.contains("git stash pop"),
        "{prompt}"
    );
    assert_eq!(
        p.read("lib.py"),
        "# empty\n",
        "ralph leaves the stash alone"
    );
    assert!(git(&p, &["stash", "list"]).contains("baseline-check"));
}

/// The agent checks its item off, then stashes everything (`git stash -u`)
/// and ends its session with no checkpoint: a warning says so at once,
/// and the next prompt tells the next session to pop it rather than do
/// the item again. Before: nothing said it; the next prompt showed the
/// item open, and a session was paid to do it again.
#[test]
fn work_stashed_in_an_iteration_without_a_checkpoint_reaches_the_next_prompt() {
    let scenario = concat!(
        r#"
[[iteration]]
[[iteration.step]]
context = 30000
path = "lib.py"
content = "def parse(s):\n    return s.split(',')\n"
[[iteration.step]]
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[iteration.step]]
command = "git stash push -u -q -m before-the-tests"
[[iteration.step]]
result = "Parser done."
"#,
        looking_around!()
    );
    let p = project_with(&[("lib.py", "# empty\n")], scenario, "");
    let run = p.run(&["--max-iterations", "2"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(run.of("checkpoint").is_empty(), "{}", run.describe());
    let said = warnings(&run);
    assert!(
        said.contains("iteration 1 put work in the stash")
            && said.contains("stash@{0}")
            && said.contains("before-the-tests"),
        "{said}"
    );
    let prompt = p.read("PROMPT.md");
    assert!(
        prompt.contains("Iteration 1 put work in the stash")
            && prompt.contains("before-the-tests")
            && prompt.contains("git stash pop"),
        "{prompt}"
    );
    assert!(
        !prompt.contains("unfinished"),
        "its item was finished: {prompt}"
    );
    assert!(git(&p, &["stash", "list"]).contains("before-the-tests"));
}

/// Case 5: `nohup ralph run > ralph.log &`: the log ralph writes is not
/// the agent's progress (the breaker opens on idle iterations) and never
/// goes into a WIP commit.
#[test]
fn ralphs_own_log_is_not_progress_nor_committed() {
    let p = project_with(&[], QUICK_L2, "[breaker]\nno_progress = 2\n");
    let log = std::fs::File::create(p.path("ralph.log")).unwrap();
    let out = p
        .ralph()
        .args(["run", "--max-iterations", "6"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .status()
        .unwrap();
    let text = p.read("ralph.log");
    assert_eq!(out.code(), Some(3), "the breaker opens: {text}");
    assert!(!text.is_empty());
    let committed = tree_paths(&p, "HEAD");
    assert!(committed.contains(&"work.txt".to_string()), "{committed:?}");
    assert!(
        !committed.contains(&"ralph.log".to_string()),
        "{committed:?}"
    );
}

/// Case 6: the resume prompt and the handoff say whether the work was
/// committed; doctor names each condition that skips WIP commits.
#[test]
fn the_resume_prompt_tells_whether_the_work_is_committed() {
    for (name, config, setup) in [
        ("wip_commit off", "[git]\nwip_commit = false\n", "git"),
        ("detached HEAD", "", "detach"),
        ("outside git", "", "none"),
        // The commit itself fails (after the handoff promised it).
        ("branch ref locked", "", "lock"),
    ] {
        let p = if setup == "none" {
            Project::bare(PLAN, QUICK_L2, config)
        } else {
            project_with(&[], QUICK_L2, config)
        };
        if setup == "detach" {
            git(&p, &["checkout", "-q", "--detach"]);
        }
        if setup == "lock" {
            let branch = git(&p, &["symbolic-ref", "--short", "HEAD"]);
            p.write(&format!(".git/refs/heads/{}.lock", branch.trim()), "");
        }
        let run = p.run(&["--max-iterations", "2"], LIMIT);
        assert_eq!(run.code, Some(4), "{name}: {}", run.describe());
        let prompt = p.read("PROMPT.md");
        assert!(
            !prompt.contains("Its work is committed"),
            "{name}: {prompt}"
        );
        assert!(
            prompt.contains("Its work is NOT committed"),
            "{name}: {prompt}"
        );
        let handoff = std::fs::read_to_string(&p.handoffs()[0]).unwrap();
        assert!(
            !handoff.contains("committed in the WIP commit"),
            "{name}: {handoff}"
        );
    }
}

#[test]
fn doctor_names_each_condition_that_skips_wip_commits() {
    let cases: [(&str, &[&[&str]], &str); 3] = [
        (
            "split",
            &[
                &["config", "core.splitIndex", "true"],
                &["update-index", "--split-index"],
            ],
            "--no-split-index",
        ),
        (
            "sparse",
            &[&["sparse-checkout", "set", "--cone", "--sparse-index", "src"]],
            "index.sparse false",
        ),
        ("detached", &[&["checkout", "-q", "--detach"]], "git switch"),
    ];
    for (what, commands, fix) in cases {
        let p = project_with(&[("src/a.rs", "\n"), ("docs/b.md", "\n")], QUICK_L2, "");
        for args in commands {
            git(&p, args);
        }
        let out = p.ralph().arg("doctor").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("every WIP commit will be skipped"),
            "{what}: {text}"
        );
        assert!(text.contains(what) && text.contains(fix), "{what}: {text}");
        assert_ne!(out.status.code(), Some(0), "{what}: {text}");
    }
}

/// Case 8: a tree with 1,500 untracked build outputs, a 12 MB file and a
/// binary: the run warns at start, the WIP commit leaves them out and the
/// handoff lists them as left out.
#[test]
fn big_trees_warn_at_start_and_keep_outputs_out_of_wip_commits() {
    let p = project_with(&[], QUICK_L2, "");
    for i in 0..1500 {
        p.write(&format!("build/obj/{i}.o"), "object code\n");
    }
    p.write("dump.sql", &"insert into t values (1);\n".repeat(500_000));
    std::fs::write(p.path("model.bin"), b"\x7fELF\0\0\x01\x02").unwrap();
    p.write("notes.txt", "my notes\n");
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let w = warnings(&run);
    assert!(w.contains("1503 untracked files"), "{w}");
    assert!(
        w.contains("build/ (1500 files)") && w.contains(".gitignore"),
        "{w}"
    );
    assert!(
        run.of("checkpoint")[0]["commit"].is_string(),
        "{}",
        run.describe()
    );
    let committed = tree_paths(&p, "HEAD");
    assert!(committed.contains(&"work.txt".to_string()), "{committed:?}");
    assert!(
        committed.contains(&"notes.txt".to_string()),
        "{committed:?}"
    );
    for out in ["build/obj/7.o", "dump.sql", "model.bin"] {
        assert!(!committed.contains(&out.to_string()), "{out} committed");
        assert!(p.path(out).exists(), "{out} still in the tree");
    }
    let handoff = std::fs::read_to_string(&p.handoffs()[0]).unwrap();
    assert!(handoff.contains("Left out of the WIP commit"), "{handoff}");
    for out in ["`build/`", "`dump.sql`", "`model.bin`"] {
        assert!(handoff.contains(out), "{out}: {handoff}");
    }
}

/// Issue 12's promise: whatever `git clean` variant the agent runs, its
/// `git add -A` never stages what ralph writes (state, events, lock,
/// transcripts, records), here after a run and a re-run between variants.
#[test]
fn no_git_clean_variant_lets_git_add_commit_ralphs_files() {
    let p = project_with(&[], QUICK_L2, "");
    for variant in [
        &["-fd"][..],
        &["-fdX"],
        &["-fdx"],
        &["-ffdx"],
        &["-fd", "-e", ".ralph"],
    ] {
        let run = p.run(&["--max-iterations", "1", "--fresh"], LIMIT);
        assert_eq!(run.code, Some(4), "{variant:?}: {}", run.describe());
        assert!(p.path(".ralph/events.jsonl").exists());
        let mut args = vec!["clean"];
        args.extend_from_slice(variant);
        git(&p, &args);
        git(&p, &["add", "-A"]);
        let staged = git(&p, &["diff", "--cached", "--name-only"]);
        let ralphs: Vec<&str> = staged
            .lines()
            .filter(|f| f.starts_with(".ralph/") && !f.starts_with(".ralph/handoffs/"))
            .collect();
        assert!(ralphs.is_empty(), "after git clean {variant:?}: {ralphs:?}");
        git(&p, &["commit", "-qm", "agent", "--allow-empty"]);
    }
}

/// HEAD moved to another branch during a single loop (the user's `git
/// switch -c other` in the checkout the agent works in, here played by the
/// agent): neither the checkpoint's WIP commit nor the completion's lands
/// on `other` or anywhere else, the end says why and how to get the work
/// committed; back on the run's branch, the next run commits it there
/// with no session. Before: both commits went onto `other`, and the end
/// said "committed" with no word of the branch.
#[test]
fn a_branch_switched_mid_run_gets_none_of_the_runs_commits() {
    let scenario = r#"
[[iteration]]
[[iteration.step]]
context = 20000
command = "git switch -q -c other"
[[iteration.step]]
context = 60000
path = "work.txt"
content = "parser\n"
[[iteration.step]]
path = "fix_plan.md"
old = "- [ ] parser"
new = "- [x] parser"
[[iteration.step]]
context = 146000
text = "Filling up."

[[iteration]]
[[iteration.step]]
context = 20000
path = "fix_plan.md"
old = "- [ ] tests"
new = "- [x] tests"
[[iteration.step]]
result = "Both done. <promise>COMPLETE</promise>"
"#;
    let p = project_with(&[], scenario, "");
    let start = git(&p, &["rev-parse", "--abbrev-ref", "HEAD"]);
    let start = start.trim();
    let initial = git(&p, &["rev-parse", "HEAD"]);
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.of("iteration_started").len(), 2, "{}", run.describe());
    let checkpoint = run.of("checkpoint");
    assert_eq!(checkpoint.len(), 1, "{}", run.describe());
    assert!(checkpoint[0]["commit"].is_null(), "{}", run.describe());
    for branch in [start, "other"] {
        assert_eq!(
            git(&p, &["rev-parse", branch]),
            initial,
            "nothing committed on {branch}: {}",
            git(&p, &["log", "--oneline", "--all"])
        );
    }
    let reason = run.ended()["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("NOT committed")
            && reason.contains(&format!("HEAD moved from branch `{start}` to `other`"))
            && reason.contains(&format!("`git switch {start}`")),
        "{reason}"
    );

    git(&p, &["switch", "-q", start]);
    let again = p.run(&[], LIMIT);
    assert_eq!(again.code, Some(0), "{}", again.describe());
    assert!(
        again.of("iteration_started").is_empty(),
        "{}",
        again.describe()
    );
    let plan = git(&p, &["show", "HEAD:fix_plan.md"]);
    assert!(
        plan.contains("- [x] parser") && plan.contains("- [x] tests"),
        "{plan}"
    );
    assert_eq!(git(&p, &["show", "HEAD:work.txt"]), "parser\n");
    assert_eq!(git(&p, &["rev-parse", "other"]), initial);
}

/// The agent `git reset --hard`s past ralph's checkpoint commit: a warning
/// names the commit now on no branch and how to keep it. Before: nothing
/// was said; git would drop the commit in a few weeks.
#[test]
fn a_checkpoint_commit_reset_away_by_the_agent_is_named() {
    let scenario = concat!(
        r#"
[[iteration]]
[[iteration.step]]
context = 146000
text = "Writing."
path = "work.txt"
content = "work in progress\n"

[[iteration]]
[[iteration.step]]
context = 20000
command = "git reset -q --hard HEAD~1"
"#,
        looking_around!()
    );
    let p = project_with(&[], scenario, "");
    let run = p.run(&["--max-iterations", "2"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let commit = run.of("checkpoint")[0]["commit"]
        .as_str()
        .unwrap_or_else(|| panic!("a WIP commit: {}", run.describe()))
        .to_string();
    let said = warnings(&run);
    assert!(
        said.contains("iteration 2 left 1 commit(s) on no branch")
            && said.contains(&commit[..10])
            && said.contains(&format!("`git branch ralph-iter-2 {}`", &commit[..10])),
        "{said}"
    );
    assert!(!git(&p, &["log", "--format=%H"]).contains(&commit));
}

/// The agent leaves `git add -A` running in a loop past its session (a
/// background job of its shell). ralph ends it at the iteration's end, and
/// git removes its `index.lock` on the SIGTERM it gets first: the
/// checkpoints commit and the user's git works in the morning (killed
/// outright, git left the lock behind and every later WIP commit skipped).
#[test]
fn a_git_loop_left_running_leaves_no_index_lock_behind() {
    let scenario = r#"
[[iteration]]
[[iteration.step]]
context = 146000
text = "Leaving a git loop behind."
command = "mkdir -p many; for i in $(seq 1 2000); do echo $i > many/f$i; done; setsid sh -c 'while :; do touch many/*; git add -A; done' >/dev/null 2>&1 </dev/null & sleep 1"

[[iteration]]
[[iteration.step]]
context = 146000
text = "Writing."
path = "later.txt"
content = "later\n"
"#;
    let p = project_with(&[], scenario, "");
    let run = p.run(&["--max-iterations", "2"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(
        !p.path(".git/index.lock").exists(),
        "index.lock left behind\n{}",
        warnings(&run)
    );
    let commits: Vec<&serde_json::Value> = run
        .of("checkpoint")
        .into_iter()
        .filter(|c| c["commit"].is_string())
        .collect();
    assert_eq!(commits.len(), 2, "{}", warnings(&run));
    assert!(tree_paths(&p, "HEAD").contains(&"later.txt".to_string()));
    // Git itself sees everything committed but the 2,000 new files, left
    // out (over `git.max_new_files`) unless the loop's `git add -A` had
    // staged them before it ended (what the agent staged is committed).
    let status = git(&p, &["status", "--porcelain"]);
    assert!(["", "?? many/\n"].contains(&status.as_str()), "{status}");
}
