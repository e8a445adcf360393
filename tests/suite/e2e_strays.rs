//! Parallel workers whose agents and users stray (issue 36, docs/workers.md):
//! an agent that checks its item off in `fix_plan.md` and forgets the
//! promise, one that checks off other items, work committed on another
//! branch, a detached HEAD, in the stash or on the run branch itself, and
//! a user who switches branch mid-run. Each counts the sessions paid.

use crate::common;
use crate::e2e_workers::{
    LIMIT, SIX, assert_all_merged, assert_work_merged, blob_on_main, coordinator_events, git,
    wait_for,
};

use std::path::Path;

use common::Project;

/// The sessions started, one line per prompt the sim received
/// (`record_messages`, outside the project).
fn sessions(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .count()
}

/// The run branch's plan as the coordinator checked it off: at each of
/// its check-off commits (first parents from the tip), exactly as many
/// items checked as check-offs made so far, and each item checked once.
fn assert_checked_only_by_the_coordinator(p: &Project, items: usize) {
    let repo = git(p.root());
    let mut commit = repo.head().unwrap().peel_to_commit().unwrap();
    let mut checks = Vec::new();
    loop {
        let subject = commit.summary().unwrap_or("").to_string();
        if subject.starts_with("ralph: \"") && subject.contains("\" done (merged ") {
            let tree = commit.tree().unwrap();
            let blob = tree.get_path(Path::new("fix_plan.md")).unwrap();
            let text =
                String::from_utf8_lossy(repo.find_blob(blob.id()).unwrap().content()).into_owned();
            checks.push((subject, text.matches("- [x]").count()));
        }
        match commit.parent(0) {
            Ok(parent) => commit = parent,
            Err(_) => break,
        }
    }
    checks.reverse();
    assert_eq!(checks.len(), items, "{checks:#?}");
    for (n, (subject, checked)) in checks.iter().enumerate() {
        assert_eq!(*checked, n + 1, "{subject}: {checks:#?}");
    }
}

/// Said before the assertions: the figures the issue measured.
fn measured(what: &str, run: &common::Run, log: &Path) {
    eprintln!(
        "{what}: exit {:?}, {} session(s), {} merge(s)",
        run.code,
        sessions(log),
        run.of("merge").len(),
    );
}

/// Whether the coordinator said a warning containing `needle`.
fn warned(p: &Project, needle: &str) -> bool {
    coordinator_events(p).into_iter().any(|e| {
        e["event"] == "warning" && e["message"].as_str().is_some_and(|m| m.contains(needle))
    })
}

/// A scenario whose every session's prompt is recorded in `log`.
fn recorded(log: &Path, body: &str) -> String {
    format!("record_messages = \"{}\"\n{body}", log.display())
}

/// Does its item (`RALPH_ITEM`), checks it off in the project's
/// `fix_plan.md` as prompts teach, never in the plan it was handed, and
/// says no promise.
const IN_FIX_PLAN: &str = r#"
[[step]]
context = 20000
text = "Working on my item."
command = '''
mkdir -p out && printf '%s by %s\n' "$RALPH_ITEM" "$RALPH_WORKER" > "out/$RALPH_ITEM.txt"
sed -i "s/^- \[ \] $RALPH_ITEM\$/- [x] $RALPH_ITEM/" fix_plan.md
'''

[[step]]
sleep_ms = 300

[[step]]
result = "Done: checked off in fix_plan.md."
"#;

#[test]
fn agents_that_check_off_in_fix_plan_md_without_the_promise_get_every_item_merged() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("sessions.jsonl");
    let p = Project::new(SIX, &recorded(&log, IN_FIX_PLAN), "");
    let run = p.run(&["--workers", "3"], LIMIT);
    measured("checked off in fix_plan.md, no promise", &run, &log);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_work_merged(
        &p,
        &["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"],
    );
    assert_checked_only_by_the_coordinator(&p, 6);
    assert_eq!(sessions(&log), 6, "one session per item");
    assert_eq!(run.of("merge").len(), 6);
}

/// Does its own item, then checks off every item in `fix_plan.md`, and
/// keeps its promise.
const CHECKS_OFF_ALL: &str = r#"
[[step]]
context = 20000
text = "Working on my item."
command = '''
mkdir -p out && printf '%s by %s\n' "$RALPH_ITEM" "$RALPH_WORKER" > "out/$RALPH_ITEM.txt"
sed -i 's/^- \[ \]/- [x]/' fix_plan.md .ralph/worker-plan.md
'''

[[step]]
sleep_ms = 300

[[step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#;

#[test]
fn an_agent_checking_off_other_items_in_fix_plan_md_marks_nothing_done_without_its_work() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("sessions.jsonl");
    let plan = "# Four\n\n- [ ] alpha\n- [ ] bravo\n- [ ] charlie\n- [ ] delta\n";
    let p = Project::new(plan, &recorded(&log, CHECKS_OFF_ALL), "");
    let run = p.run(&["--workers", "2"], LIMIT);
    measured("checks off every item", &run, &log);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    // Each item done by its own worker, its work merged, checked off once.
    assert_eq!(run.of("worker_started").len(), 4, "{}", run.describe());
    assert_work_merged(&p, &["alpha", "bravo", "charlie", "delta"]);
    assert_checked_only_by_the_coordinator(&p, 4);
    assert_eq!(sessions(&log), 4);
}

/// Each item's agent puts its work somewhere else than its branch:
/// alpha commits on a branch of its own, bravo on a detached HEAD, charlie
/// leaves it in the stash, delta checks out the run branch early and
/// leaves its work uncommitted there after the others are merged.
const ELSEWHERE: &str = r#"
[[step]]
context = 20000
text = "Working on my item."
command = '''
set -e
g="git -c user.name=sim -c user.email=sim@example.com"
case "$RALPH_ITEM" in
  alpha) $g checkout -q -b elsewhere ;;
  bravo) $g checkout -q --detach ;;
  delta) $g checkout -q --ignore-other-worktrees "$RALPH_RUN_BRANCH"; sleep 4 ;;
esac
mkdir -p out && printf '%s by %s\n' "$RALPH_ITEM" "$RALPH_WORKER" > "out/$RALPH_ITEM.txt"
case "$RALPH_ITEM" in
  alpha|bravo) $g add out && $g commit -q -m "agent: $RALPH_ITEM" ;;
  charlie) $g stash push -q -u -m "my work" ;;
esac
sed -i '0,/- \[ \]/s//- [x]/' .ralph/worker-plan.md
'''

[[step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#;

#[test]
fn work_on_another_branch_a_detached_head_the_stash_or_the_run_branch_is_merged() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("sessions.jsonl");
    let plan = "# Four\n\n- [ ] alpha\n- [ ] bravo\n- [ ] charlie\n- [ ] delta\n";
    let p = Project::new(plan, &recorded(&log, ELSEWHERE), "");
    let run = p.run(&["--workers", "4"], LIMIT);
    measured("work elsewhere", &run, &log);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_all_merged(&p, &["alpha", "bravo", "charlie", "delta"]);
    assert_eq!(sessions(&log), 4);
    let repo = git(p.root());
    assert!(repo.find_reference("refs/stash").is_err(), "stash left");
}

/// Slow enough that the user switches branch between two merges.
const SLOW_ITEM: &str = r#"
[[step]]
context = 20000
text = "Working on my item."
command = '''
mkdir -p out && printf '%s by %s\n' "$RALPH_ITEM" "$RALPH_WORKER" > "out/$RALPH_ITEM.txt"
sed -i '0,/- \[ \]/s//- [x]/' .ralph/worker-plan.md
'''

[[step]]
sleep_ms = 1500

[[step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#;

fn git_cli(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

#[test]
fn the_user_switching_branch_mid_run_gets_no_check_off_on_their_branch() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("sessions.jsonl");
    let p = Project::new(SIX, &recorded(&log, SLOW_ITEM), "");
    let run_branch = p.repo().head().unwrap().shorthand().unwrap().to_string();
    let child = p.spawn_run(&["--workers", "2"]);
    // Between two pairs of merges (each item takes 1.5 s), not in one.
    wait_for(&p, "two check-offs", |_| {
        p.log()
            .iter()
            .filter(|s| s.contains("\" done (merged "))
            .count()
            >= 2
    });
    git_cli(p.root(), &["switch", "-q", "-c", "mine"]);
    let mine = p.repo().refname_to_id("refs/heads/mine").unwrap();
    let run = common::Run::wait_or(child, LIMIT, || p.diagnose());
    measured("user switched branch", &run, &log);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    // Nothing landed on the user's branch; everything on the run branch.
    let repo = git(p.root());
    assert_eq!(repo.refname_to_id("refs/heads/mine").unwrap(), mine);
    git_cli(p.root(), &["switch", "-q", &run_branch]);
    assert_all_merged(
        &p,
        &["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"],
    );
    let plan = blob_on_main(&repo, "fix_plan.md").unwrap();
    assert_eq!(plan.matches("- [x]").count(), 6, "{plan}");
    assert_eq!(sessions(&log), 6);
    let said = coordinator_events(&p).into_iter().any(|e| {
        e["event"] == "warning"
            && e["message"]
                .as_str()
                .is_some_and(|m| m.contains("branch mine") && m.contains(&run_branch))
    });
    assert!(said, "{}", run.describe());
}

/// The user empties (or deletes) the plan in their checkout mid-run, the
/// run branch checked out there: the run goes on with the plan as the run
/// branch has it, every item is done once and checked off, and the next
/// run pays nothing. Before: the blank file read as a plan with no items,
/// the run ended "completed" after the first two, their check-offs never
/// made, and the next run (the plan put back) paid for all six again.
#[test]
fn a_plan_emptied_or_deleted_in_the_checkout_mid_run_loses_no_check_off() {
    for (what, command) in [
        ("emptied", ": > fix_plan.md"),
        ("deleted", "rm fix_plan.md"),
    ] {
        let logs = tempfile::tempdir().unwrap();
        let log = logs.path().join("sessions.jsonl");
        let p = Project::new(SIX, &recorded(&log, SLOW_ITEM), "");
        let child = p.spawn_run(&["--workers", "2"]);
        wait_for(&p, "two sessions started", |_| sessions(&log) >= 2);
        let out = std::process::Command::new("sh")
            .current_dir(p.root())
            .args(["-c", command])
            .output()
            .unwrap();
        assert!(out.status.success(), "{what}: {out:?}");
        let run = common::Run::wait_or(child, LIMIT, || p.diagnose());
        measured(what, &run, &log);
        assert_eq!(run.code, Some(0), "{what}: {}", run.describe());
        assert_all_merged(
            &p,
            &["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"],
        );
        let repo = git(p.root());
        let plan = blob_on_main(&repo, "fix_plan.md").unwrap();
        assert_eq!(plan.matches("- [x]").count(), 6, "{what}: {plan}");
        assert_eq!(sessions(&log), 6, "{what}");
        assert!(
            warned(&p, "missing, empty or unreadable"),
            "{what}: {}",
            run.describe()
        );
        let again = p.run(&["--workers", "2"], LIMIT);
        assert_eq!(again.code, Some(0), "{what}: {}", again.describe());
        assert_eq!(sessions(&log), 6, "{what}: the next run pays nothing");
    }
}

/// An editor saves the plan it loaded before the run (every item open)
/// over the coordinator's first check-offs: the merged items are not
/// worked again, and they are checked off again at the end, said. Before:
/// "incomplete (exit 4): 2 item(s) open; left to a person: " with nobody
/// named, and every later `ralph run` ended the same.
#[test]
fn a_stale_copy_of_the_plan_saved_over_check_offs_is_checked_off_again() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("sessions.jsonl");
    let p = Project::new(SIX, &recorded(&log, SLOW_ITEM), "");
    let child = p.spawn_run(&["--workers", "2"]);
    wait_for(&p, "two check-offs", |_| {
        p.log()
            .iter()
            .filter(|s| s.contains("\" done (merged "))
            .count()
            >= 2
    });
    // An editor's save: a new file renamed over the plan.
    p.write("fix_plan.md.swp", SIX);
    std::fs::rename(p.path("fix_plan.md.swp"), p.path("fix_plan.md")).unwrap();
    let run = common::Run::wait_or(child, LIMIT, || p.diagnose());
    measured("stale plan saved", &run, &log);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(sessions(&log), 6);
    let repo = git(p.root());
    let plan = blob_on_main(&repo, "fix_plan.md").unwrap();
    assert_eq!(plan.matches("- [x]").count(), 6, "{plan}");
    assert!(warned(&p, "checked off again"), "{}", run.describe());
}

/// The user rewords an item while its worker runs: the merge of the old
/// item is said (nothing checked off for it, the reworded one is a new
/// item), not hidden behind "every item is merged and checked off".
/// Before: nothing said. Still paid: the reworded item is worked again
/// (7 sessions for 6 items here).
#[test]
fn an_item_reworded_while_its_worker_runs_is_named_at_its_merge() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("sessions.jsonl");
    let p = Project::new(SIX, &recorded(&log, SLOW_ITEM), "");
    let child = p.spawn_run(&["--workers", "2"]);
    wait_for(&p, "two sessions started", |_| sessions(&log) >= 2);
    let reworded = p
        .read("fix_plan.md")
        .replace("- [ ] alpha", "- [ ] alpha, reworded");
    p.write("fix_plan.md.swp", &reworded);
    std::fs::rename(p.path("fix_plan.md.swp"), p.path("fix_plan.md")).unwrap();
    let run = common::Run::wait_or(child, LIMIT, || p.diagnose());
    measured("item reworded", &run, &log);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(
        warned(&p, "\"alpha\" is merged (ralph/"),
        "{}",
        run.describe()
    );
    assert!(warned(&p, "no longer has it"), "{}", run.describe());
}
