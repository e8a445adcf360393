//! End-to-end tests of ralph's own safety net (issue 12): the work tree
//! snapshot on hidden refs during an iteration and brought back by `ralph
//! recover` after the agent wiped it, and the takeover of an iteration whose
//! supervisor was killed (`kill -9`): a `crash` handoff, a WIP commit, the
//! iteration recorded, and the next prompt resuming from it.

use crate::common;

use std::time::{Duration, Instant};

use common::{Project, Run};
use serde_json::Value;

const PLAN: &str = "# Parser\n\n- [ ] parser\n";
const LIMIT: Duration = Duration::from_secs(60);

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn logged_events(p: &Project) -> Vec<Value> {
    std::fs::read_to_string(p.path(".ralph/events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn recover(p: &Project, args: &[&str]) -> (i32, String, String) {
    let out = p.ralph().arg("recover").args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A blob at `path` in `commit`'s tree.
fn blob_in(repo: &git2::Repository, commit: &str, path: &str) -> Option<Vec<u8>> {
    let commit = repo.find_commit(commit.parse().ok()?).ok()?;
    let entry = commit.tree().ok()?.get_path(path.as_ref()).ok()?;
    Some(repo.find_blob(entry.id()).ok()?.content().to_vec())
}

// ------------------------------------------------------------- snapshots

/// Iteration 1 writes new files (one binary) and edits a tracked one,
/// pauses (snapshots are taken every second), then wipes everything with
/// `git reset --hard && git clean -fd`.
const WIPE: &str = r#"
[[step]]
context = 30000
text = "An hour of work."
path = "src/feature.rs"
content = "pub fn feature() -> u32 {\n    42\n}\n"
[[step]]
command = "mkdir -p assets && printf '\\000\\001\\002\\377binary\\n' > assets/blob.bin && printf 'tracked, edited\\n' > tracked.txt"
[[step]]
sleep_ms = 3500
[[step]]
text = "Starting over from a clean tree."
command = "git reset --hard && git clean -fd"
[[step]]
sleep_ms = 1500
[[step]]
result = "Clean again."
"#;

#[test]
fn work_wiped_by_reset_and_clean_is_listed_and_restored_from_a_snapshot() {
    let p = Project::bare(
        PLAN,
        WIPE,
        "[git]\nsnapshot_interval = \"1s\"\n[loop]\nmax_iterations = 1\n",
    );
    p.write("tracked.txt", "tracked, committed\n");
    p.git_init();
    let repo = p.repo();
    // A stash the user made before the run: the snapshots must leave it be.
    p.write("tracked.txt", "stashed by the user\n");
    let mut stasher = git2::Repository::open(p.root()).unwrap();
    let who = git2::Signature::now("user", "user@example.com").unwrap();
    let stash = stasher.stash_save(&who, "before the run", None).unwrap();
    let head = repo.head().unwrap().target().unwrap();

    let mut child = p.spawn_run(&[]);
    // Between the agent's writes and its wipe: the index is as before the
    // iteration although snapshots of the new files were written.
    wait_for("iteration_started", LIMIT, || {
        logged_events(&p)
            .iter()
            .any(|e| e["event"] == "iteration_started")
    });
    let index_before = std::fs::read(p.path(".git/index")).unwrap();
    wait_for("a snapshot holding the new files", LIMIT, || {
        logged_events(&p).iter().any(|e| {
            e["event"] == "snapshot"
                && blob_in(&repo, e["commit"].as_str().unwrap(), "assets/blob.bin").is_some()
        })
    });
    assert_eq!(
        std::fs::read(p.path(".git/index")).unwrap(),
        index_before,
        "the snapshots only read the index"
    );
    let _ = child.stdout.take();
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(
        !p.path("src/feature.rs").exists(),
        "the agent wiped its work"
    );
    assert_eq!(p.read("tracked.txt"), "tracked, committed\n");

    // HEAD, the branch and the stash are as before.
    let repo = p.repo();
    assert_eq!(repo.head().unwrap().target().unwrap(), head);
    assert_eq!(repo.refname_to_id("refs/stash").unwrap(), stash);
    let branches = repo.branches(None).unwrap().count();
    assert_eq!(branches, 1);

    // `ralph recover --json` lists them, with the files changed vs HEAD.
    let (code, out, err) = recover(&p, &["--json"]);
    assert_eq!(code, 0, "{err}");
    let listing: Value = serde_json::from_str(&out).unwrap();
    let snaps = listing["snapshots"].as_array().unwrap();
    let run_id = p.state()["run_id"].as_str().unwrap().to_string();
    let holding: Vec<&Value> = snaps
        .iter()
        .filter(|s| blob_in(&repo, s["commit"].as_str().unwrap(), "src/feature.rs").is_some())
        .collect();
    assert!(!holding.is_empty(), "{out}");
    let snap = holding[0];
    // Filed under the work tree's project (tests/e2e_scope.rs).
    let reference = snap["ref"].as_str().unwrap();
    assert!(
        reference.starts_with("refs/ralph/snapshots/")
            && reference.ends_with(&format!("/{run_id}/1")),
        "{reference}"
    );
    assert_eq!(snap["run"], run_id.as_str());
    assert_eq!(snap["iteration"], 1);
    // The three files, and the prompt ralph wrote (a WIP commit takes it too).
    assert_eq!(snap["files_changed"], 4, "{snap}");
    assert!(snap["time"].as_str().unwrap().ends_with('Z'));
    // The chain keeps the snapshot of the wiped tree too, newest first.
    assert!(snaps.len() >= 2, "{out}");

    // `ralph recover ID` brings the files back byte for byte.
    let id = snap["id"].as_str().unwrap();
    let (code, out, err) = recover(&p, &[id]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("restored 4 file(s)"), "{out}");
    assert_eq!(
        p.read("src/feature.rs"),
        "pub fn feature() -> u32 {\n    42\n}\n"
    );
    assert_eq!(
        std::fs::read(p.path("assets/blob.bin")).unwrap(),
        b"\x00\x01\x02\xffbinary\n"
    );
    assert_eq!(p.read("tracked.txt"), "tracked, edited\n");
    assert_eq!(repo.head().unwrap().target().unwrap(), head);
    assert_eq!(repo.refname_to_id("refs/stash").unwrap(), stash);

    // Now the tree has uncommitted changes: restoring again needs --force.
    std::fs::write(p.path("tracked.txt"), "newer\n").unwrap();
    let (code, _, err) = recover(&p, &[id]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(p.read("tracked.txt"), "newer\n");
    // Or onto a branch, nothing checked out.
    let (code, out, err) = recover(&p, &[id, "--branch", "rescued", "--json"]);
    assert_eq!(code, 0, "{err}");
    let made: Value = serde_json::from_str(&out).unwrap();
    let commit = made["commit"].as_str().unwrap();
    assert_eq!(
        blob_in(&repo, commit, "assets/blob.bin").unwrap(),
        b"\x00\x01\x02\xffbinary\n"
    );
    assert_eq!(repo.head().unwrap().shorthand(), Some("master"));
}

#[test]
fn snapshots_are_off_at_0s_and_old_runs_refs_are_pruned() {
    let p = Project::new(
        PLAN,
        WIPE,
        "[git]\nsnapshot_interval = \"0s\"\nsnapshot_keep_runs = 1\n[loop]\nmax_iterations = 1\n",
    );
    // Refs of an older run, as an earlier ralph left them.
    let repo = p.repo();
    let head = repo.head().unwrap().target().unwrap();
    repo.reference("refs/ralph/snapshots/20200101-000000/1", head, true, "old")
        .unwrap();
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(run.of("snapshot").is_empty(), "{}", run.describe());
    let left: Vec<String> = repo
        .references_glob("refs/ralph/*")
        .unwrap()
        .map(|r| r.unwrap().name().unwrap().to_string())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let (code, out, _) = recover(&p, &[]);
    assert_eq!(code, 0);
    assert!(out.starts_with("no snapshots"), "{out}");
}

/// The agent writes a file and climbs past L2; it ignores the checkpoint
/// request and SIGINT, so only the stop sequence's SIGTERM ends it.
const CLIMB: &str = r#"
on_message = "ignore"
on_sigint = "ignore"
[[step]]
context = 30000
path = "draft.rs"
content = "// half a parser\n"
[[step]]
context = 150000
text = "Nearly full."
[[step]]
hang = true
"#;

#[test]
fn the_tree_is_snapshot_before_ralph_stops_the_agent() {
    let p = Project::new(
        PLAN,
        CLIMB,
        "[git]\nsnapshot_interval = \"10m\"\n[loop]\nmax_iterations = 1\n[context]\ngrace = \"1s\"\n",
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let names: Vec<&str> = run
        .events
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    let snap = names.iter().position(|&n| n == "snapshot");
    let asked = names.iter().position(|&n| n == "checkpoint_requested");
    assert!(snap.is_some() && snap < asked, "{names:?}");
    let event = run.of("snapshot")[0];
    assert_eq!(event["reason"], "stop");
    assert_eq!(run.of("snapshot").len(), 1, "no interval snapshot in 10m");
    let commit = event["commit"].as_str().unwrap();
    assert_eq!(
        blob_in(&p.repo(), commit, "draft.rs").unwrap(),
        b"// half a parser\n"
    );
}

// ---------------------------------------------------- crash takeover (case 7)

/// Iteration 1 writes a file, runs a command that writes another, and
/// then works on (hangs) until its supervisor is killed; iteration 2
/// records the prompt it gets.
fn crash_scenario(messages: &str) -> String {
    format!(
        r#"
record_messages = "{messages}"
[[iteration]]
[[iteration.step]]
context = 50000
text = "Parser half done: the tokenizer is written, the grammar is next."
path = "src/parser.rs"
content = "fn tokenize() {{}}\n"
[[iteration.step]]
command = "echo 'grammar: todo' > notes.txt"
[[iteration.step]]
hang = true

[[iteration]]
[[iteration.step]]
context = 20000
text = "Resuming from the handoff."
"#
    )
}

#[test]
fn a_killed_supervisors_iteration_is_taken_over_with_a_crash_handoff() {
    let outside = tempfile::tempdir().unwrap();
    let messages = outside.path().join("messages.jsonl");
    let p = Project::new(PLAN, &crash_scenario(&messages.display().to_string()), "");
    let head = p.repo().head().unwrap().target().unwrap();
    let mut first = p.spawn_unread_run();
    wait_for("the agent's command", LIMIT, || {
        p.path("notes.txt").exists()
            && std::fs::read_to_string(p.path(".ralph/events.jsonl"))
                .is_ok_and(|t| t.contains("\"tool\":\"Bash echo"))
    });
    // Let the tool result reach the transcript, then kill -9.
    std::thread::sleep(Duration::from_millis(300));
    first.kill().unwrap();
    first.wait().unwrap();

    let run = p.run(&["--budget-per-invocation", "--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    // The takeover says so, saves the work and records the iteration.
    let warned = run.of("warning");
    assert!(
        warned.iter().any(|w| w["message"]
            .as_str()
            .unwrap()
            .contains("the supervisor died during iteration 1")),
        "{}",
        run.describe()
    );
    let checkpoints = run.of("checkpoint");
    assert_eq!(checkpoints.len(), 1, "{}", run.describe());
    let cp = checkpoints[0];
    assert_eq!(cp["iteration"], 1);
    assert_eq!(cp["trigger"], "crash");
    assert_eq!(cp["tokens"], 50000, "the peak context, from the transcript");
    let commit = cp["commit"].as_str().expect("a WIP commit");
    let repo = p.repo();
    assert_eq!(
        repo.find_commit(commit.parse().unwrap())
            .unwrap()
            .parent_id(0)
            .unwrap(),
        head
    );
    assert_eq!(
        blob_in(&repo, commit, "src/parser.rs").unwrap(),
        b"fn tokenize() {}\n"
    );
    assert_eq!(
        blob_in(&repo, commit, "notes.txt").unwrap(),
        b"grammar: todo\n"
    );
    let message = repo
        .find_commit(commit.parse().unwrap())
        .unwrap()
        .message()
        .unwrap()
        .to_string();
    assert!(message.contains("Trigger: crash"), "{message}");
    let handoff = cp["handoff"].as_str().unwrap().to_string();
    assert!(blob_in(&repo, commit, &handoff).is_some(), "committed");
    let text = p.read(&handoff);
    for needle in [
        "trigger: crash",
        "the supervisor died during iteration 1",
        "Parser half done: the tokenizer is written",
        "src/parser.rs",
        "notes.txt",
        "echo 'grammar: todo' > notes.txt",
    ] {
        assert!(
            text.contains(needle),
            "{needle:?} not in the handoff:\n{text}"
        );
    }
    let ended = run.of("iteration_ended");
    assert_eq!(ended[0]["iteration"], 1);
    assert_eq!(ended[0]["outcome"], "crash");
    let state = p.state();
    assert_eq!(state["history"][0]["iteration"], 1);
    assert_eq!(state["history"][0]["outcome"], "crash");
    assert_eq!(state["history"][0]["commit"], commit);
    assert_eq!(state["history"][1]["iteration"], 2);

    // The next iteration resumes from the crash handoff.
    let started = run.of("iteration_started");
    assert_eq!(started[0]["iteration"], 2);
    assert_eq!(started[0]["resume_from"], handoff.as_str());
    let sent = std::fs::read_to_string(&messages).unwrap();
    let prompt: Value = serde_json::from_str(sent.lines().last().unwrap()).unwrap();
    assert_eq!(prompt["iteration"], 2);
    let prompt = prompt["text"].as_str().unwrap();
    assert!(prompt.contains(&handoff), "{prompt}");
    assert!(
        prompt.contains("Iteration 1 was cut short: ralph's supervisor died during it"),
        "{prompt}"
    );
    assert!(prompt.contains("iteration 1: crash"), "{prompt}");
    // Nothing is taken over twice.
    let again = p.run(&["--budget-per-invocation", "--max-iterations", "1"], LIMIT);
    assert!(again.of("checkpoint").is_empty(), "{}", again.describe());
    assert_eq!(again.of("iteration_started")[0]["iteration"], 3);
}
