//! End-to-end tests of a run's scope (issue 21): a run belongs to its work
//! tree and its project. Two work trees of one repository keep their own
//! snapshots (listed, pruned and restored apart); two projects of one
//! repository run side by side, each committing and measuring only its own
//! directory; overlapping projects in one work tree are refused with the fix.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Project, Run};
use serde_json::Value;

const PLAN: &str = "# Work\n\n- [ ] work\n";
const LIMIT: Duration = Duration::from_secs(90);

/// One iteration that writes `work.txt` (with `what`), pauses long enough
/// for a snapshot or two (every second), and ends.
fn writer(what: &str) -> String {
    format!(
        "[[step]]\ncontext = 20000\ntext = \"Working.\"\npath = \"work.txt\"\ncontent = \"{what}\\n\"\n[[step]]\nsleep_ms = 2500\n[[step]]\nresult = \"Done.\"\n"
    )
}

const SNAPSHOTS: &str =
    "[git]\nsnapshot_interval = \"1s\"\nsnapshot_keep_runs = 1\n[loop]\nmax_iterations = 1\n";

/// `ralph ARGS` in `dir`: exit code, stdout, stderr.
fn ralph_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(common::BIN)
        .current_dir(dir)
        .env("RALPH_LOG", "off")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn spawn_run_in(dir: &Path) -> std::process::Child {
    std::process::Command::new(common::BIN)
        .current_dir(dir)
        .env("RALPH_LOG", "off")
        .args(["run", "--json"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn state_in(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join(".ralph/state.json")).unwrap()).unwrap()
}

fn listed(dir: &Path) -> Vec<Value> {
    let (code, out, err) = ralph_in(dir, &["recover", "--json"]);
    assert_eq!(code, 0, "{err}");
    let listing: Value = serde_json::from_str(&out).unwrap();
    listing["snapshots"].as_array().unwrap().clone()
}

/// Commit every file of `dir` (a work tree) on its branch.
fn commit_in(dir: &Path, message: &str) {
    let repo = git2::Repository::open(dir).unwrap();
    let sig = git2::Signature::now("test", "test@example.com").unwrap();
    let mut index = repo.index().unwrap();
    index
        .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
        .unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let parent = repo.head().unwrap().peel_to_commit().unwrap();
    repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &[&parent])
        .unwrap();
}

/// A second work tree of `p`'s repository, on its own branch, whose agent
/// writes "from B".
fn second_work_tree(p: &Project, holder: &Path) -> PathBuf {
    let dir = holder.join("b");
    p.repo().worktree("b", &dir, None).unwrap();
    std::fs::write(dir.join("scenario.toml"), writer("from B")).unwrap();
    commit_in(&dir, "B's agent");
    dir
}

#[test]
fn two_work_trees_keep_their_own_snapshots_apart() {
    let p = Project::new(PLAN, &writer("from A"), SNAPSHOTS);
    let holder = tempfile::tempdir().unwrap();
    let b = second_work_tree(&p, holder.path());
    let a = p.root().to_path_buf();

    // Both at once, most likely in the same second.
    let (run_a, run_b) = (spawn_run_in(&a), spawn_run_in(&b));
    let (run_a, run_b) = (Run::wait(run_a, LIMIT), Run::wait(run_b, LIMIT));
    for run in [&run_a, &run_b] {
        assert!(!run.of("snapshot").is_empty(), "{}", run.describe());
    }
    let (id_a, id_b) = (
        state_in(&a)["run_id"].clone(),
        state_in(&b)["run_id"].clone(),
    );
    assert_ne!(id_a, id_b, "two runs, two identities");

    // Each work tree lists only its own run's snapshots.
    let (mine_a, mine_b) = (listed(&a), listed(&b));
    assert!(!mine_a.is_empty() && !mine_b.is_empty());
    assert!(mine_a.iter().all(|s| s["run"] == id_a), "{mine_a:?}");
    assert!(mine_b.iter().all(|s| s["run"] == id_b), "{mine_b:?}");

    // B's snapshot is refused in A: A's files stay A's.
    std::fs::write(a.join("work.txt"), "A, later\n").unwrap();
    let theirs = mine_b[0]["id"].as_str().unwrap();
    let (code, _, err) = ralph_in(&a, &["recover", theirs, "--force"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("another work tree"), "{err}");
    assert!(
        err.contains(&b.display().to_string()),
        "names where it belongs: {err}"
    );
    assert_eq!(
        std::fs::read_to_string(a.join("work.txt")).unwrap(),
        "A, later\n"
    );
    // In B it restores B's work.
    std::fs::write(b.join("work.txt"), "B, later\n").unwrap();
    let (code, _, err) = ralph_in(&b, &["recover", theirs, "--force"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(b.join("work.txt")).unwrap(),
        "from B\n"
    );

    // B runs twice more with snapshot_keep_runs = 1: only B's old runs go.
    for _ in 0..2 {
        let (code, _, err) = ralph_in(&b, &["run", "--fresh"]);
        assert_eq!(code, 4, "{err}");
    }
    let after_a = listed(&a);
    assert_eq!(
        after_a.iter().map(|s| &s["commit"]).collect::<Vec<_>>(),
        mine_a.iter().map(|s| &s["commit"]).collect::<Vec<_>>(),
        "A's safety net is A's to prune"
    );
    let after_b = listed(&b);
    assert!(!after_b.is_empty());
    assert!(
        after_b.iter().all(|s| s["run"] != id_b),
        "B's oldest pruned"
    );
}

/// Each iteration of svc-a's agent appends to `a.txt` and climbs past L2
/// (a checkpoint and a WIP commit every iteration), slowly enough that the
/// two projects' iterations overlap.
const BUSY: &str = r#"
[[step]]
context = 20000
text = "Appending."
command = "date +%s%N >> a.txt"
[[step]]
sleep_ms = 1200
[[step]]
context = 146000
text = "Nearly full."
"#;

/// svc-b's agent changes nothing, but climbs past L2 too: its checkpoints
/// commit only its handoff and prompt.
const IDLE_FULL: &str = r#"
[[step]]
context = 20000
text = "Looking around."
[[step]]
sleep_ms = 1200
[[step]]
context = 146000
text = "Nothing to do."
"#;

/// A repository with two ralph projects, `svc-a/` and `svc-b/`.
fn monorepo() -> Project {
    monorepo_of(BUSY, IDLE_FULL)
}

/// A repository with two ralph projects whose agents play `a` and `b`.
fn monorepo_of(a: &str, b: &str) -> Project {
    let p = Project::bare(PLAN, "", "");
    for f in ["fix_plan.md", "scenario.toml", "ralph.toml"] {
        std::fs::remove_file(p.path(f)).unwrap();
    }
    p.write("README.md", "two services\n");
    p.write("svc-a/src/lib.rs", "// svc-a's code\n");
    let config = "[loop]\nmax_iterations = 3\n[breaker]\nno_progress = 2\n";
    for (dir, scenario) in [("svc-a", a), ("svc-b", b)] {
        p.write(&format!("{dir}/fix_plan.md"), PLAN);
        p.write(&format!("{dir}/scenario.toml"), scenario);
        p.write(&format!("{dir}/ralph.toml"), &common::config(config));
    }
    p.git_init();
    p
}

/// The paths each commit of the log changed, newest first, with its subject.
fn commits(p: &Project) -> Vec<(String, Vec<String>)> {
    let repo = p.repo();
    let mut walk = repo.revwalk().unwrap();
    walk.push_head().unwrap();
    walk.map(|id| {
        let commit = repo.find_commit(id.unwrap()).unwrap();
        let parent = commit.parent(0).ok().map(|c| c.tree().unwrap());
        let diff = repo
            .diff_tree_to_tree(parent.as_ref(), Some(&commit.tree().unwrap()), None)
            .unwrap();
        let paths = diff
            .deltas()
            .map(|d| d.new_file().path().unwrap().display().to_string())
            .collect();
        (commit.summary().unwrap_or("").to_string(), paths)
    })
    .collect()
}

#[test]
fn two_projects_in_one_repository_run_side_by_side() {
    let p = monorepo();
    let (a, b) = (p.path("svc-a"), p.path("svc-b"));
    let (run_a, run_b) = (spawn_run_in(&a), spawn_run_in(&b));
    let (run_a, run_b) = (Run::wait(run_a, LIMIT), Run::wait(run_b, LIMIT));

    // svc-a worked every iteration; svc-b's breaker opened although svc-a's
    // changes and commits happened beside it.
    assert_eq!(run_a.code, Some(4), "{}", run_a.describe());
    assert_eq!(run_b.code, Some(3), "{}", run_b.describe());
    assert_eq!(
        run_b.ended()["outcome"],
        "breaker_open",
        "{}",
        run_b.describe()
    );
    assert!(
        state_in(&a)["history"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["progress"] == true),
        "svc-a's work is progress"
    );
    // Every checkpoint of both was committed…
    for run in [&run_a, &run_b] {
        let checkpoints = run.of("checkpoint");
        assert!(!checkpoints.is_empty(), "{}", run.describe());
        for c in checkpoints {
            assert!(c["commit"].is_string(), "{c}\n{}", run.describe());
        }
    }
    // …and each commit holds one project's files only.
    let wip: Vec<_> = commits(&p)
        .into_iter()
        .filter(|(subject, _)| subject.starts_with("ralph"))
        .collect();
    let only = |dir: &str| {
        wip.iter()
            .filter(|(_, paths)| paths.iter().all(|f| f.starts_with(dir)))
            .count()
    };
    assert_eq!(only("svc-a/") + only("svc-b/"), wip.len(), "{wip:#?}");
    assert!(only("svc-a/") >= 3 && only("svc-b/") >= 1, "{wip:#?}");
    assert!(
        wip.iter()
            .filter(|(_, paths)| paths[0].starts_with("svc-a/"))
            .all(|(_, paths)| paths.iter().any(|f| f == "svc-a/a.txt")),
        "{wip:#?}"
    );
}

/// An agent that works a little, then takes its time.
const SLOW: &str = "[[step]]\ncontext = 20000\npath = \"src/work.txt\"\ncontent = \"half done\\n\"\n[[step]]\nsleep_ms = 20000\n[[step]]\nresult = \"never reached\"\n";

#[test]
fn commands_in_a_subprojects_subdirectory_act_on_that_subproject() {
    let p = monorepo_of(SLOW, SLOW);
    p.write(
        "svc-a/fix_plan.md",
        "# Service A's plan\n\n- [ ] a's item\n",
    );
    let (a, b) = (p.path("svc-a"), p.path("svc-b"));
    let src = a.join("src");
    let dry = ralph_in(&src, &["run", "--dry-run"]);
    assert_eq!(dry.0, 0, "{}", dry.2);
    assert!(
        dry.1.contains("Service A's plan"),
        "svc-a's plan: {}",
        dry.1
    );
    assert!(dry.1.contains("# iteration: 1\n"), "{}", dry.1);

    let (run_a, run_b) = (spawn_run_in(&a), spawn_run_in(&b));
    for dir in [&a, &b] {
        common::wait_until("both running", LIMIT, || {
            std::fs::read_to_string(dir.join(".ralph/events.jsonl"))
                .is_ok_and(|l| l.contains("\"event\":\"context\""))
        });
    }
    let (code, out, err) = ralph_in(&src, &["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    let status: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["status"], "running", "{status}");
    assert_eq!(
        status["run_id"],
        state_in(&a)["run_id"],
        "svc-a's run: {status}"
    );
    let (code, _, err) = ralph_in(&src, &["stop"]);
    assert_eq!(code, 0, "{err}");
    let run_a = Run::wait(run_a, LIMIT);
    assert_eq!(run_a.code, Some(6), "{}", run_a.describe());
    // svc-b's run was not the one stopped.
    assert_eq!(state_in(&b)["status"], "running");
    let (code, _, err) = ralph_in(&b, &["stop"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(Run::wait(run_b, LIMIT).code, Some(6));
    assert!(
        !src.join(".ralph").exists(),
        "a .ralph/ was made in svc-a/src/"
    );
}

#[test]
fn overlapping_projects_in_one_work_tree_are_refused_with_the_fix() {
    let p = monorepo();
    // A project at the top of the work tree holds svc-a: refused while svc-a runs.
    p.write("fix_plan.md", PLAN);
    p.write("scenario.toml", common::IDLE);
    p.write(
        "ralph.toml",
        &common::config("[loop]\nmax_iterations = 1\n"),
    );
    let a = p.path("svc-a");
    let running = spawn_run_in(&a);
    common::wait_until("svc-a running", LIMIT, || a.join(".ralph/lock").exists());
    common::wait_until("svc-a's state", LIMIT, || {
        std::fs::read_to_string(a.join(".ralph/state.json")).is_ok_and(|s| s.contains("running"))
    });
    let (code, _, err) = ralph_in(p.root(), &["run"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("one index per work tree"), "{err}");
    assert!(err.contains("svc-a/"), "{err}");
    assert!(err.contains("git worktree add"), "{err}");
    let _ = Run::wait(running, LIMIT);
    // Once svc-a has ended, the top-level project runs.
    let (code, _, err) = ralph_in(p.root(), &["run"]);
    assert_eq!(code, 4, "{err}");
}

// ------------------------------------------------------------ run identity

fn warned(run: &Run, needle: &str) -> bool {
    run.of("warning")
        .iter()
        .any(|w| w["message"].as_str().unwrap_or("").contains(needle))
}

#[test]
fn another_plan_is_a_new_run() {
    let p = Project::new(PLAN, common::IDLE, "[loop]\nmax_iterations = 1\n");
    let first = p.run(&[], LIMIT);
    assert_eq!(first.code, Some(4), "{}", first.describe());
    let old = p.state()["run_id"].as_str().unwrap().to_string();
    p.write("other_plan.md", "# Other\n\n- [ ] something else\n");

    let second = p.run(&["other_plan.md"], LIMIT);
    assert_eq!(second.code, Some(4), "{}", second.describe());
    let started = second.of("run_started");
    assert_ne!(started[0]["run_id"], old.as_str(), "{}", second.describe());
    assert_eq!(started[0]["resumed"], false);
    assert_eq!(started[0]["plan"], "other_plan.md");
    assert_eq!(
        second.of("iteration_started").len(),
        1,
        "it ran: {}",
        second.describe()
    );
    assert!(
        warned(&second, "was on fix_plan.md, not other_plan.md"),
        "{}",
        second.describe()
    );
    let state = p.state();
    assert_eq!(state["plan"], "other_plan.md");
    assert_eq!(
        state["history"].as_array().unwrap().len(),
        1,
        "its own history only"
    );
    // The old run's final state is kept for its report.
    let kept: Value =
        serde_json::from_str(&p.read(&format!(".ralph/runs/{old}/state.json"))).unwrap();
    assert_eq!(kept["run_id"], old.as_str());
    // The first plan again: the old run is not continued either (it is not
    // the latest), a new one starts.
    let third = p.run(&[], LIMIT);
    assert_eq!(
        third.of("iteration_started").len(),
        1,
        "{}",
        third.describe()
    );
}

/// Iteration 1 writes a file and works on until its supervisor is killed.
const HANGS: &str = r#"
[[step]]
context = 50000
text = "Tokenizer written, grammar next."
path = "src/parser.rs"
content = "fn tokenize() {}\n"
[[step]]
hang = true
"#;

#[test]
fn fresh_after_kill_9_takes_the_dead_iteration_over_first() {
    let p = Project::new(PLAN, HANGS, "");
    p.write("idle.toml", common::IDLE);
    let mut first = p.spawn_unread_run();
    common::wait_until("the agent's write", LIMIT, || {
        p.path("src/parser.rs").exists()
            && std::fs::read_to_string(p.path(".ralph/events.jsonl"))
                .is_ok_and(|t| t.contains("\"tool\":\"Write src/parser.rs"))
    });
    std::thread::sleep(Duration::from_millis(300));
    let old = p.state()["run_id"].as_str().unwrap().to_string();
    first.kill().unwrap();
    first.wait().unwrap();

    let run = p.run(
        &[
            "--fresh",
            "--max-iterations",
            "1",
            "--agent",
            "ralph sim idle.toml",
        ],
        LIMIT,
    );
    assert_eq!(run.code, Some(4), "{}", run.describe());
    // The dead iteration: a crash handoff and WIP commit, before the new run.
    let position = |kind: &str| run.events.iter().position(|e| e["event"] == kind);
    let crash = run.of("checkpoint");
    assert_eq!(crash.len(), 1, "{}", run.describe());
    assert_eq!(crash[0]["trigger"], "crash");
    assert!(
        position("checkpoint") < position("run_started"),
        "{}",
        run.describe()
    );
    let commit = crash[0]["commit"].as_str().expect("a WIP commit");
    let repo = p.repo();
    let tree = repo
        .find_commit(commit.parse().unwrap())
        .unwrap()
        .tree()
        .unwrap();
    assert!(tree.get_path(Path::new("src/parser.rs")).is_ok());
    // The new run is a new one and starts from a saved tree.
    let started = run.of("run_started");
    assert_ne!(started[0]["run_id"], old.as_str());
    assert_eq!(run.of("iteration_started")[0]["iteration"], 1);
    assert!(
        run.of("iteration_started")[0]["resume_from"].is_null(),
        "--fresh resumes nothing"
    );
    let state = p.state();
    assert_eq!(state["history"].as_array().unwrap().len(), 1);
    assert_ne!(state["history"][0]["outcome"], "crash");
    // The old run ended as interrupted, its dead iteration recorded.
    let kept: Value =
        serde_json::from_str(&p.read(&format!(".ralph/runs/{old}/state.json"))).unwrap();
    assert_eq!(kept["status"], "interrupted");
    assert_eq!(kept["history"][0]["outcome"], "crash");
}

/// The next iteration's prompt is recorded for the test to read.
fn recording(messages: &Path) -> String {
    format!(
        "record_messages = {}\n{}",
        common::toml_string(&messages.display().to_string()),
        common::IDLE
    )
}

fn assert_resumed_from_a_checkpoint_made_outside_a_run(p: &Project, messages: &Path) {
    let state = p.state();
    assert!(
        state["run_id"].as_str().is_none_or(str::is_empty),
        "no run is invented: {state}"
    );
    let handoff = state["last_handoff"].as_str().unwrap().to_string();
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let started = &run.of("run_started")[0];
    let id = started["run_id"].as_str().unwrap();
    assert!(id.len() > 15 && id != "manual", "a real run: {id}");
    assert_eq!(started["resumed"], false);
    assert_eq!(started["first_iteration"], 1);
    let first = &run.of("iteration_started")[0];
    assert_eq!(first["iteration"], 1);
    assert_eq!(first["resume_from"], handoff.as_str(), "{}", run.describe());
    let sent = std::fs::read_to_string(messages).unwrap();
    let prompt: Value = serde_json::from_str(sent.lines().next().unwrap()).unwrap();
    assert!(
        prompt["text"].as_str().unwrap().contains(&handoff),
        "{prompt}"
    );
    let state = p.state();
    assert_eq!(state["run_id"], id);
    assert!(!state["started_at"].as_str().unwrap().is_empty());
}

#[test]
fn a_checkpoint_before_any_run_is_resumed_by_the_first_run() {
    let outside = tempfile::tempdir().unwrap();
    let messages = outside.path().join("messages.jsonl");
    let p = Project::new(PLAN, &recording(&messages), "");
    p.write("src/half.rs", "fn half() {}\n");
    let out = p
        .ralph()
        .args(["checkpoint", "--reason", "before lunch"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_resumed_from_a_checkpoint_made_outside_a_run(&p, &messages);
}

#[test]
fn a_pre_compact_handoff_is_resumed_by_the_next_run() {
    let outside = tempfile::tempdir().unwrap();
    let messages = outside.path().join("messages.jsonl");
    let p = Project::new(PLAN, &recording(&messages), "");
    p.write("src/half.rs", "fn half() {}\n");
    let input = serde_json::json!({"session_id": "s", "cwd": p.root(),
        "hook_event_name": "PreCompact", "trigger": "auto"})
    .to_string();
    let mut hook = p
        .ralph()
        .args(["hook", "pre-compact"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    hook.stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = hook.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("handoff"));
    assert_resumed_from_a_checkpoint_made_outside_a_run(&p, &messages);
}

// ----------------------------------------------------- leftovers of a kill

/// The agent climbs into L1 (its `on_level` hook starts in the background)
/// and works on until its supervisor is killed.
const CLIMBS_AND_HANGS: &str = r#"
[[step]]
context = 135000
text = "Deep in the parser."
[[step]]
hang = true
"#;

#[test]
fn an_on_level_hook_does_not_outlive_kill_9_and_the_takeover() {
    let p = Project::new(
        PLAN,
        CLIMBS_AND_HANGS,
        // The hook's shell dies with ralph (the parent-death rule of every
        // child); what it started in its group is the next start's to end.
        "[hooks]\non_level = [\"sleep 417 & wait\"]\ntimeout = \"10m\"\n",
    );
    p.write("idle.toml", common::IDLE);
    let mut first = p.spawn_unread_run();
    common::wait_for_process("sleep 417", LIMIT);
    // Recorded as it starts (a kill in the instant between the spawn and
    // the record would miss it).
    common::wait_until("the hook's group recorded", LIMIT, || {
        std::fs::read_to_string(p.path(".ralph/hook-groups.json")).is_ok_and(|t| t.contains("pgid"))
    });
    first.kill().unwrap();
    first.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !common::processes_matching("sleep 417").is_empty(),
        "the hook's child is in the hook's group: kill -9 of ralph leaves it"
    );
    let run = p.run(
        &["--max-iterations", "1", "--agent", "ralph sim idle.toml"],
        LIMIT,
    );
    let left = common::processes_matching("sleep 417");
    for pid in &left {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(
        left.is_empty(),
        "the takeover ends the dead run's hook: {left:?}\n{}",
        run.describe()
    );
    assert!(
        !p.path(".ralph/hook-groups.json").exists() || {
            p.read(".ralph/hook-groups.json").trim() == "[]"
        }
    );
}

// ------------------------------------------------------- the user's edits

#[test]
fn tracked_edits_found_at_start_are_committed_on_their_own() {
    let p = Project::bare(PLAN, common::QUICK_L2, "[loop]\nmax_iterations = 1\n");
    p.write("tracked.txt", "committed\n");
    p.write("notes/todo.txt", "committed too\n");
    p.git_init();
    // The user's own edits, left before starting ralph.
    p.write("tracked.txt", "edited by the user\n");
    std::fs::remove_file(p.path("notes/todo.txt")).unwrap();
    p.write("scratch.txt", "untracked, the user's\n");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(
        warned(
            &run,
            "2 tracked file(s) were modified before the run: notes/todo.txt, tracked.txt; committed on their own"
        ),
        "{}",
        run.describe()
    );
    let log = commits(&p);
    let before = log
        .iter()
        .find(|(subject, _)| subject == "ralph: changes present before the run")
        .unwrap_or_else(|| panic!("{log:#?}"));
    assert_eq!(before.1, ["notes/todo.txt", "tracked.txt"], "{log:#?}");
    // The agent's WIP commit, after it, holds the agent's work only.
    let (subject, files) = &log[0];
    assert!(subject.starts_with("ralph: checkpoint"), "{log:#?}");
    assert!(files.iter().any(|f| f == "work.txt"), "{files:?}");
    assert!(
        !files
            .iter()
            .any(|f| f == "tracked.txt" || f == "notes/todo.txt"),
        "{files:?}"
    );
    assert_eq!(
        log[1].0, "ralph: changes present before the run",
        "{log:#?}"
    );
    // A continued run does not take the agent's uncommitted work for the user's.
    p.write("work.txt", "the agent's, uncommitted\n");
    let again = p.run(&[], LIMIT);
    assert!(
        !warned(&again, "modified before the run"),
        "{}",
        again.describe()
    );
}

// ---------------------------------------------------- ralph's own output

#[test]
fn ralphs_output_through_tee_is_neither_progress_nor_committed() {
    let p = Project::new(PLAN, common::QUICK_L2, "[breaker]\nno_progress = 2\n");
    let out = std::process::Command::new("bash")
        .current_dir(p.root())
        .env("RALPH_LOG", "off")
        .args([
            "-c",
            "set -o pipefail; \"$0\" run --max-iterations 6 2>&1 | tee ralph.log",
            common::BIN,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = p.read("ralph.log");
    assert_eq!(out.status.code(), Some(3), "the breaker opens: {text}");
    assert!(!text.is_empty());
    for (subject, files) in commits(&p) {
        assert!(
            !files.iter().any(|f| f == "ralph.log"),
            "{subject}: {files:?}"
        );
    }
}

// ---------------------------------------------------- paths that are not UTF-8

#[test]
fn a_project_whose_path_is_not_utf8_runs_to_completion() {
    use std::os::unix::ffi::OsStrExt as _;
    let holder = tempfile::tempdir().unwrap();
    let root = holder
        .path()
        .join(std::ffi::OsStr::from_bytes(b"caf\xe9-project"));
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("fix_plan.md"), PLAN).unwrap();
    std::fs::write(
        root.join("scenario.toml"),
        "[[step]]\ncontext = 20000\npath = \"fix_plan.md\"\ncontent = \"# Work\\n\\n- [x] work\\n\"\n[[step]]\nresult = \"Done. <promise>COMPLETE</promise>\"\n",
    )
    .unwrap();
    std::fs::write(root.join("ralph.toml"), common::config("")).unwrap();
    let repo = git2::Repository::init(&root).unwrap();
    let sig = git2::Signature::now("test", "test@example.com").unwrap();
    let mut index = repo.index().unwrap();
    index
        .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
        .unwrap();
    index.write().unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    repo.commit(Some("HEAD"), &sig, &sig, "initial", &tree, &[])
        .unwrap();

    let run = Run::wait(spawn_run_in(&root), LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.ended()["outcome"], "completed", "{}", run.describe());
    // The commands that read the run show the path, lossily, and never panic.
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["report"],
        &["context", "--json"],
    ] {
        let (code, _, err) = ralph_in(&root, args);
        assert_eq!(code, 0, "ralph {args:?}: {err}");
    }
}

#[test]
fn ralphs_output_through_script_is_neither_progress_nor_committed() {
    let p = Project::new(PLAN, common::QUICK_L2, "[breaker]\nno_progress = 2\n");
    // `script` runs ralph on a terminal of its own and writes all it prints
    // to the typescript, in the project: it grows every iteration.
    let out = std::process::Command::new("script")
        .current_dir(p.root())
        .env("RALPH_LOG", "off")
        .args(["-qfec"])
        .arg(format!("{} run --max-iterations 6", common::BIN))
        .arg("ralph.typescript")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = p.read("ralph.typescript");
    assert_eq!(out.status.code(), Some(3), "the breaker opens: {text}");
    assert!(text.contains("iteration 1"), "{text}");
    for (subject, files) in commits(&p) {
        assert!(
            !files.iter().any(|f| f == "ralph.typescript"),
            "{subject}: {files:?}"
        );
    }
}

// ---------------------------------------------------- outside the project

#[test]
fn a_subprojects_edit_outside_it_is_said_uncommitted_never_committed() {
    let p = Project::bare(PLAN, "", "");
    for f in ["fix_plan.md", "scenario.toml", "ralph.toml"] {
        std::fs::remove_file(p.path(f)).unwrap();
    }
    p.write("shared/util.py", "def f(): pass\n");
    p.write("svc-a/fix_plan.md", PLAN);
    p.write("svc-a/ralph.toml", &common::config(""));
    p.write(
        "svc-a/scenario.toml",
        "[[step]]\ncontext = 20000\npath = \"../shared/util.py\"\ncontent = \"def f(): return 1\\n\"\n[[step]]\npath = \"a.txt\"\ncontent = \"a\\n\"\n[[step]]\npath = \"fix_plan.md\"\ncontent = \"# Work\\n\\n- [x] work\\n\"\n[[step]]\nresult = \"Done. <promise>COMPLETE</promise>\"\n",
    );
    p.git_init();
    let a = p.path("svc-a");
    let run = Run::wait(spawn_run_in(&a), LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let reason = run.ended()["reason"].as_str().unwrap();
    assert!(
        reason.contains(
            "NOT committed: 1 file(s) outside this project (svc-a/) left uncommitted: ../shared/util.py"
        ),
        "{reason}"
    );
    assert!(
        !reason.contains("its uncommitted changes were committed"),
        "{reason}"
    );
    assert!(
        reason.contains("its uncommitted changes in this project were committed"),
        "{reason}"
    );
    assert!(
        run.of("warning")
            .iter()
            .any(|w| w["message"].as_str().unwrap().contains("../shared/util.py")),
        "{}",
        run.describe()
    );
    // The file is still changed, in no commit; the morning report says so.
    let status = p.repo().status_file(Path::new("shared/util.py")).unwrap();
    assert_eq!(status, git2::Status::WT_MODIFIED);
    let (_, report, _) = ralph_in(&a, &["report", "--json"]);
    let report: Value = serde_json::from_str(&report).unwrap();
    assert!(
        report["reason"]
            .as_str()
            .unwrap()
            .contains("../shared/util.py")
    );
    assert!(
        report["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["message"].as_str().unwrap().contains("../shared/util.py")),
        "{report}"
    );
}
