//! End-to-end tests of parallel workers (issue 25, docs/workers.md):
//! `ralph run --workers N` with `ralph sim` agents, each in its own
//! worktree, merged back one at a time by the coordinator.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{Project, Run};
use serde_json::Value;

pub(crate) const LIMIT: Duration = Duration::from_secs(180);

pub(crate) const SIX: &str = "# Six things\n\n- [ ] alpha\n- [ ] bravo\n- [ ] charlie\n- [ ] delta\n- [ ] echo\n- [ ] foxtrot\n";

/// One iteration doing one item: a worker does its `RALPH_ITEM` and checks
/// it off in its own plan; a single loop does the plan's first open item.
/// Either writes `out/<item>.txt`, pauses, checks the item off, promises.
/// The check-off comes last: a worker's unit checked off is done, promise
/// or not, so an agent stopped in the pause has not finished it.
pub(crate) const ONE_ITEM: &str = r#"
[[step]]
context = 20000
text = "Working on my item."
command = '''
if [ -n "$RALPH_WORKER" ]; then item="$RALPH_ITEM"; else item=$(grep -m1 -F -e '- [ ]' fix_plan.md | sed 's/^- \[ \] //'); fi
mkdir -p out && printf '%s by %s\n' "$item" "${RALPH_WORKER:-single}" > "out/$item.txt"
'''

[[step]]
sleep_ms = 1500

[[step]]
text = "Checking it off."
command = '''
if [ -n "$RALPH_WORKER" ]; then plan=.ralph/worker-plan.md; item="$RALPH_ITEM"; else plan=fix_plan.md; item=$(grep -m1 -F -e '- [ ]' fix_plan.md | sed 's/^- \[ \] //'); fi
sed -i '0,/- \[ \]/s//- [x]/' "$plan"
'''

[[step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#;

pub(crate) fn git(dir: &Path) -> git2::Repository {
    git2::Repository::open(dir).unwrap()
}

/// Non-merge commits on the run branch (HEAD) whose diff touches `path`.
fn commits_touching(repo: &git2::Repository, path: &str) -> Vec<String> {
    let mut walk = repo.revwalk().unwrap();
    walk.push_head().unwrap();
    walk.filter_map(|id| repo.find_commit(id.unwrap()).ok())
        .filter(|c| c.parent_count() <= 1)
        .filter(|c| {
            let parent = c.parent(0).ok().map(|p| p.tree().unwrap());
            let diff = repo
                .diff_tree_to_tree(parent.as_ref(), Some(&c.tree().unwrap()), None)
                .unwrap();
            diff.deltas()
                .any(|d| d.new_file().path().is_some_and(|p| p == Path::new(path)))
        })
        .map(|c| c.summary().unwrap_or("").to_string())
        .collect()
}

pub(crate) fn blob_on_main(repo: &git2::Repository, path: &str) -> Option<String> {
    let tree = repo.head().unwrap().peel_to_tree().unwrap();
    let entry = tree.get_path(Path::new(path)).ok()?;
    let blob = repo.find_blob(entry.id()).unwrap();
    Some(String::from_utf8_lossy(blob.content()).into_owned())
}

pub(crate) fn ralph_branches(repo: &git2::Repository) -> Vec<String> {
    repo.branches(Some(git2::BranchType::Local))
        .unwrap()
        .filter_map(|b| b.ok()?.0.name().ok()?.map(str::to_string))
        .filter(|n| n.starts_with("ralph/"))
        .collect()
}

fn worker_events<'a>(run: &'a Run, kind: &str) -> Vec<&'a Value> {
    run.of(kind)
        .into_iter()
        .filter(|e| e.get("worker").is_some())
        .collect()
}

/// Everything a finished parallel run must leave: every item's work on
/// main exactly once, the plan checked off by the coordinator alone, no
/// worker branch or worktree left.
pub(crate) fn assert_all_merged(p: &Project, items: &[&str]) {
    assert_work_merged(p, items);
    // The plan: only the coordinator's commits touch it (and the initial one).
    for subject in commits_touching(&git(p.root()), "fix_plan.md") {
        assert!(
            subject.starts_with("ralph: \"") || subject == "initial",
            "a worker committed the plan: {subject}"
        );
    }
}

/// Every item's work on main exactly once and checked off, no worker
/// branch or worktree left.
pub(crate) fn assert_work_merged(p: &Project, items: &[&str]) {
    let repo = git(p.root());
    let plan = blob_on_main(&repo, "fix_plan.md").unwrap();
    for item in items {
        assert!(plan.contains(&format!("- [x] {item}")), "{plan}");
        let file = format!("out/{item}.txt");
        let text = blob_on_main(&repo, &file).unwrap_or_else(|| panic!("{file} not on main"));
        assert_eq!(text.lines().count(), 1, "{file}: {text}");
        assert_eq!(
            commits_touching(&repo, &file).len(),
            1,
            "{file} written by exactly one commit on main"
        );
    }
    assert!(
        ralph_branches(&repo).is_empty(),
        "{:?}",
        ralph_branches(&repo)
    );
    assert!(repo.worktrees().unwrap().is_empty(), "worktrees left");
    let folders = std::fs::read_dir(p.path(".ralph/worktrees"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(folders, 0, "a run's empty folder of worktrees left");
    assert!(
        repo.statuses(None)
            .unwrap()
            .iter()
            .all(|s| s.path().is_some_and(|p| p.starts_with(".ralph")))
    );
}

#[test]
fn six_independent_items_with_three_workers_are_all_merged_once_and_faster() {
    let items = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];
    // Side by side: one loop over the same plan, then three workers.
    let single = Project::new(SIX, ONE_ITEM, "");
    let one = single.run(&[], LIMIT);
    assert_eq!(one.code, Some(0), "{}", one.describe());

    let p = Project::new(SIX, ONE_ITEM, "");
    let run = p.run(&["--workers", "3"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.ended()["outcome"], "completed");
    assert_all_merged(&p, &items);

    // Each item given once, merged once; events name their worker.
    let started = run.of("worker_started");
    assert_eq!(started.len(), 6, "{}", run.describe());
    let workers: std::collections::BTreeSet<&str> = started
        .iter()
        .map(|e| e["worker"].as_str().unwrap())
        .collect();
    assert_eq!(workers.len(), 3, "{workers:?}");
    let merges = run.of("merge");
    assert_eq!(merges.len(), 6);
    assert!(
        merges
            .iter()
            .all(|m| m["outcome"] == "fast_forward" || m["outcome"] == "merge_commit")
    );
    assert!(!worker_events(&run, "iteration_started").is_empty());
    assert!(
        worker_events(&run, "iteration_started")
            .iter()
            .all(|e| e["worker"].as_str().unwrap().starts_with('w'))
    );
    // The morning report: a lane per worker and the merge queue.
    let report = &ralph_json(&p, "report");
    assert_eq!(
        report["story"]["lanes"]["workers"]
            .as_array()
            .unwrap()
            .len(),
        3,
        "{report}"
    );
    assert_eq!(
        report["story"]["lanes"]["merges"].as_array().unwrap().len(),
        6
    );
    assert_eq!(report["outcome"], "completed");
    assert_report_totals(&p, report, &run, 0);
    let page = p.read(".ralph/report.html");
    assert!(
        page.contains("Merge queue") && page.contains(">w3<"),
        "no lanes in the page"
    );
    let ratio = run.elapsed.as_secs_f64() / one.elapsed.as_secs_f64();
    eprintln!(
        "six items: one loop {:.1}s, three workers {:.1}s, ratio {ratio:.2}",
        one.elapsed.as_secs_f64(),
        run.elapsed.as_secs_f64()
    );
    assert!(
        ratio < 0.9,
        "three workers took {ratio:.2} of one loop's time"
    );
}

#[test]
fn too_many_workers_are_refused_naming_the_limit() {
    let p = Project::new(SIX, ONE_ITEM, "[workers]\nmax_worktrees = 2\n");
    let out = p.ralph().args(["run", "--workers", "3"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_worktrees is 2"), "{err}");
}

/// Both items rewrite line 2 of `shared.txt`. Sent back to update its
/// branch (`RALPH_WORKER_TASK=update`), the agent merges the run branch
/// and keeps both lines.
const SAME_LINES: &str = r#"
[[step]]
context = 20000
text = "Working on my item."
command = '''
set -e
g="git -c user.name=sim -c user.email=sim@example.com"
if [ "$RALPH_WORKER_TASK" = update ]; then
  $g merge "$RALPH_RUN_BRANCH" >/dev/null 2>&1 || true
  { echo one; git show :2:shared.txt | sed -n 2p; git show :3:shared.txt | sed -n 2p; echo three; } > shared.txt.new
  mv shared.txt.new shared.txt
  $g add shared.txt
  $g commit -q --no-edit
else
  printf 'one\nTWO by %s\nthree\n' "$RALPH_ITEM" > shared.txt
  mkdir -p out && printf '%s by %s\n' "$RALPH_ITEM" "$RALPH_WORKER" > "out/$RALPH_ITEM.txt"
fi
sed -i '0,/- \[ \]/s//- [x]/' .ralph/worker-plan.md
'''

[[step]]
sleep_ms = 300

[[step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#;

fn is_ancestor(repo: &git2::Repository, commit: &str) -> bool {
    let head = repo.head().unwrap().target().unwrap();
    let id = git2::Oid::from_str(commit).unwrap();
    head == id || repo.graph_descendant_of(head, id).unwrap()
}

#[test]
fn two_items_editing_the_same_lines_are_merged_after_the_conflict_is_handed_back() {
    let plan = "# Same lines\n\n- [ ] alpha\n- [ ] bravo\n";
    let p = same_lines_project(plan, "");
    let repo = git(p.root());
    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());

    // The conflict: handed back, the worker branch kept, then merged.
    let merges = run.of("merge");
    let conflict = merges
        .iter()
        .find(|m| m["outcome"] == "conflict")
        .unwrap_or_else(|| panic!("no conflict: {}", run.describe()));
    assert_eq!(conflict["files"], serde_json::json!(["shared.txt"]));
    let item = conflict["item"].as_str().unwrap();
    let updates: Vec<_> = run
        .of("worker_started")
        .into_iter()
        .filter(|e| e["task"] == "update")
        .collect();
    assert_eq!(updates.len(), 1, "{}", run.describe());
    assert_eq!(updates[0]["item"], item);
    let retried = merges
        .iter()
        .find(|m| m["item"] == item && m["attempt"] == 2)
        .unwrap();
    assert!(
        retried["outcome"] == "fast_forward" || retried["outcome"] == "merge_commit",
        "{retried}"
    );
    assert!(run.of("needs_human").is_empty());

    // Nothing lost: both lines, both items' files, every merged tip and
    // every backup on the run branch.
    let shared = blob_on_main(&repo, "shared.txt").unwrap();
    assert!(
        shared.contains("TWO by alpha") && shared.contains("TWO by bravo"),
        "{shared}"
    );
    assert_all_merged(&p, &["alpha", "bravo"]);
    for m in &merges {
        for key in ["to", "id", "from"] {
            if let Some(id) = m[key].as_str() {
                assert!(
                    is_ancestor(&repo, id),
                    "{key} {id} of {m} is not on the run branch"
                );
            }
        }
        if let Some(backup) = m["backup"].as_str() {
            let id = repo.refname_to_id(backup).unwrap();
            assert!(is_ancestor(&repo, &id.to_string()), "{backup}");
        }
    }
}

/// Like `ONE_ITEM`, slower: long enough to be killed in the middle.
fn slow_item() -> String {
    ONE_ITEM.replace("sleep_ms = 1500", "sleep_ms = 4000")
}

pub(crate) fn coordinator_events(p: &Project) -> Vec<Value> {
    std::fs::read_to_string(p.path(".ralph/events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The pids of the workers' own supervisors, from their locks.
fn worker_pids(p: &Project) -> Vec<i32> {
    let mut pids = Vec::new();
    let Ok(runs) = std::fs::read_dir(p.path(".ralph/worktrees")) else {
        return pids;
    };
    for run in runs.flatten() {
        for w in std::fs::read_dir(run.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let lock = std::fs::read_to_string(w.path().join(".ralph/lock")).unwrap_or_default();
            if let Ok(info) = serde_json::from_str::<Value>(lock.trim()) {
                let pid = info["pid"].as_i64().unwrap_or(0) as i32;
                if pid > 0 && common::proc_stat(pid).is_some() {
                    pids.push(pid);
                }
            }
        }
    }
    pids
}

/// `ralph run --json --workers N`, its output thrown away: a coordinator
/// to be killed, read through `.ralph/`.
fn unread_coordinator(p: &Project, workers: &str) -> std::process::Command {
    let mut c = p.ralph();
    c.args(["run", "--json", "--workers", workers])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    c
}

/// `ralph <command> --json` in `p` (`status`, `report`), read: the report's
/// first run when it lists several.
fn ralph_json(p: &Project, command: &str) -> Value {
    let out = p.ralph().args([command, "--json"]).output().unwrap();
    let value: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    match value {
        Value::Array(mut runs) if !runs.is_empty() => runs.swap_remove(0),
        v => v,
    }
}

fn kill(pid: i32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
}

/// SIGKILL each of `pids` and wait until each is gone: the signal is
/// delivered asynchronously, and until a process has exited its locks
/// are held (a loaded machine takes its time).
fn kill_dead(pids: &[i32]) {
    for &pid in pids {
        kill(pid, nix::sys::signal::Signal::SIGKILL);
    }
    let started = std::time::Instant::now();
    while pids.iter().any(|&pid| common::alive(pid)) {
        assert!(started.elapsed() < LIMIT, "killed processes still alive");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Wait until `done` holds for the coordinator's log.
pub(crate) fn wait_for(p: &Project, what: &str, done: impl Fn(&[Value]) -> bool) {
    let started = std::time::Instant::now();
    loop {
        let events = coordinator_events(p);
        if done(&events) {
            return;
        }
        assert!(started.elapsed() < LIMIT, "never {what}: {events:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn count(events: &[Value], f: impl Fn(&Value) -> bool) -> usize {
    events.iter().filter(|e| f(e)).count()
}

#[test]
fn workers_and_the_coordinator_killed_with_minus_9_are_taken_over_and_nothing_is_merged_twice() {
    use nix::sys::signal::Signal;
    let items = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];
    let p = Project::new(SIX, &slow_item(), "");
    let mut child = unread_coordinator(&p, "3").spawn().unwrap();
    let coordinator = child.id() as i32;

    // 1. One worker killed with -9 alone: the coordinator starts it again
    //    in its worktree, where its dead iteration is taken over.
    wait_for(&p, "three workers running", |e| {
        count(e, |e| {
            e["event"] == "iteration_started" && e.get("worker").is_some()
        }) >= 3
    });
    std::thread::sleep(Duration::from_millis(300));
    let pids = worker_pids(&p);
    assert!(!pids.is_empty());
    kill(pids[0], Signal::SIGKILL);
    wait_for(&p, "the killed worker taken over", |e| {
        count(e, |e| e["event"] == "checkpoint" && e["trigger"] == "crash") >= 1
    });

    // 2. Later, mid-run, the coordinator and every worker killed with -9
    //    (a machine lost): the coordinator frozen first so it cannot react.
    wait_for(&p, "a merge and workers running again", |e| {
        count(e, |e| e["event"] == "merge") >= 1
            && count(e, |e| {
                e["event"] == "iteration_started" && e.get("worker").is_some()
            }) >= 5
    });
    std::thread::sleep(Duration::from_millis(300));
    kill(coordinator, Signal::SIGSTOP);
    let alive = worker_pids(&p);
    assert!(!alive.is_empty(), "no worker running at the kill");
    // A machine lost: every process of the run, agents and workers just
    // started (not yet in a lock) included.
    kill_dead(&p.processes_matching(""));
    kill(coordinator, Signal::SIGKILL);
    child.wait().unwrap();
    let before = coordinator_events(&p).len();
    // Nothing runs now, and `ralph status` says so: paused, not running.
    let status = ralph_json(&p, "status");
    let workers = status["workers"]["assignments"].as_array().unwrap();
    assert!(
        !workers.is_empty() && workers.iter().all(|w| w["status"] == "paused"),
        "{status:#}"
    );

    // 3. Run again: every dead iteration taken over, the run completes.
    let run = p.run(&["--workers", "3"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    // The coordinator's own (a worker's records its loop wrote after the
    // coordinator froze are read back, and published, before it).
    let own = (run.of("run_started").into_iter())
        .find(|e| e.get("worker").is_none())
        .unwrap();
    assert_eq!(own["resumed"], true, "{}", run.describe());
    let crashes: Vec<_> = worker_events(&run, "checkpoint")
        .into_iter()
        .filter(|e| e["trigger"] == "crash")
        .collect();
    assert!(crashes.len() >= alive.len().min(1), "{}", run.describe());
    assert!(
        crashes
            .iter()
            .all(|c| c["handoff"].is_string() && c["commit"].is_string()),
        "{crashes:?}"
    );
    assert_all_merged(&p, &items);
    // Over both coordinators: each item merged at most once, and recorded.
    // A merge the killed coordinator made without recording it is recorded
    // by the next as `already_merged`.
    let all = coordinator_events(&p);
    for item in items {
        let merges = |outcomes: &[&str]| {
            count(&all, |e| {
                e["event"] == "merge"
                    && e["item"] == item
                    && outcomes.iter().any(|o| e["outcome"] == *o)
            })
        };
        let merged = merges(&["fast_forward", "merge_commit"]);
        assert!(merged <= 1, "{item} merged {merged} times");
        let recorded = merged
            + merges(&["already_merged"])
            + count(&all, |e| {
                e["event"] == "warning"
                    && e["message"]
                        .as_str()
                        .is_some_and(|m| m.ends_with(&format!("\"{item}\" is done")))
            });
        assert!(recorded >= 1, "{item}'s merge not recorded");
    }
    assert!(all.len() > before);
}

/// Iteration 1 climbs past L2 while writing its item's file and complies
/// with the checkpoint; iteration 2 finishes the item.
const L2_THEN_DONE: &str = r#"
[[iteration]]
[[iteration.step]]
context = 20000
text = "Starting."
command = "mkdir -p out && printf '%s by %s\n' \"$RALPH_ITEM\" \"$RALPH_WORKER\" > \"out/$RALPH_ITEM.txt\""

[[iteration.step]]
context = 146000
text = "Reading a lot."

[[iteration.step]]
sleep_ms = 5000

[[iteration]]
[[iteration.step]]
context = 20000
text = "Finishing."
command = "sed -i '0,/- \\[ \\]/s//- [x]/' .ralph/worker-plan.md"

[[iteration.step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#;

#[test]
fn an_l2_checkpoint_inside_a_worker_resumes_in_that_worker() {
    let p = Project::new("# Two\n\n- [ ] alpha\n- [ ] bravo\n", L2_THEN_DONE, "");
    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_all_merged(&p, &["alpha", "bravo"]);
    let checkpoints: Vec<_> = worker_events(&run, "checkpoint")
        .into_iter()
        .filter(|e| e["trigger"] == "context")
        .collect();
    assert_eq!(checkpoints.len(), 2, "{}", run.describe());
    for c in checkpoints {
        let worker = c["worker"].as_str().unwrap();
        let handoff = c["handoff"].as_str().unwrap();
        assert!(handoff.contains(&format!("-{worker}-")), "{handoff}");
        // The next iteration of the same worker resumes from it.
        let resumed = worker_events(&run, "iteration_started")
            .into_iter()
            .find(|e| e["worker"] == worker && e["iteration"] == 2)
            .unwrap_or_else(|| panic!("{worker} did not go on: {}", run.describe()));
        assert_eq!(resumed["resume_from"], handoff);
        // Its handoff is on the run branch, with the work.
        assert!(blob_on_main(&git(p.root()), handoff).is_some(), "{handoff}");
    }
    // Each worker started once: the checkpoint did not hand the item on.
    assert_eq!(run.of("worker_started").len(), 2);
}

/// `alpha`'s agent runs into a usage limit that resets in a few seconds;
/// the others work slowly.
fn limit_scenarios(p: &Project) {
    let slow = ONE_ITEM.replace("sleep_ms = 1500", "sleep_ms = 6000");
    for item in ["bravo", "charlie"] {
        p.write(&format!("scenario-{item}.toml"), &slow);
    }
    p.write(
        "scenario-alpha.toml",
        &format!(
            "[[iteration]]\nexit_code = 1\n[[iteration.step]]\ncontext = 20000\ntext = \"Starting.\"\n[[iteration.step]]\ndelay_ms = 1500\nrate_limit = \"rejected\"\nresets_in_secs = 5\n[[iteration.step]]\nerror = \"rate_limit\"\nresets_in_secs = 5\n\n[[iteration]]\n{}",
            ONE_ITEM.replace("[[step]]", "[[iteration.step]]")
        ),
    );
}

#[test]
fn a_usage_limit_hit_by_one_worker_pauses_every_worker() {
    let agent = format!(
        "[agent]\ncommand = \"sh -c 'exec {} sim \\\"scenario-$RALPH_ITEM.toml\\\" \\\"$@\\\"' sh\"\n",
        common::BIN
    );
    let p = Project::new(
        "# Three\n\n- [ ] alpha\n- [ ] bravo\n- [ ] charlie\n",
        "",
        "",
    );
    p.write("ralph.toml", &agent);
    limit_scenarios(&p);
    let repo = git(p.root());
    {
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let mut index = repo.index().unwrap();
        index
            .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
            .unwrap();
        index.write().unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let parent = repo.head().unwrap().peel_to_commit().unwrap();
        repo.commit(Some("HEAD"), &sig, &sig, "scenarios", &tree, &[&parent])
            .unwrap();
    }
    let run = p.run(&["--workers", "3"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_all_merged(&p, &["alpha", "bravo", "charlie"]);
    let events = &run.events;
    let at = events
        .iter()
        .position(|e| e["event"] == "limit_wait")
        .unwrap_or_else(|| panic!("no usage limit: {}", run.describe()));
    let limited = events[at]["worker"].as_str().unwrap();
    // Every other worker stopped after the limit (and resumed later).
    let others: std::collections::BTreeSet<&str> = events[at..]
        .iter()
        .filter(|e| e["event"] == "worker_ended" && e["outcome"] == "stopped")
        .map(|e| e["worker"].as_str().unwrap())
        .collect();
    assert_eq!(others.len(), 2, "{others:?}: {}", run.describe());
    assert!(!others.contains(limited));
    // Nobody worked on while the limit held: no iteration started between
    // the others' stops and the reset.
    let seconds = events[at]["seconds"].as_u64().unwrap();
    let ts = |e: &Value| {
        e["ts"]
            .as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .unwrap()
    };
    let reset = ts(&events[at]) + jiff::SignedDuration::from_secs(seconds as i64);
    let last_stop = events[at..]
        .iter()
        .filter(|e| e["event"] == "worker_ended" && e["outcome"] == "stopped")
        .map(ts)
        .max()
        .unwrap();
    for e in events[at..]
        .iter()
        .filter(|e| e["event"] == "iteration_started")
    {
        let t = ts(e);
        assert!(
            t < last_stop || t >= reset - jiff::SignedDuration::from_secs(1),
            "{e} started during the limit (until {reset})"
        );
    }
}

#[test]
fn ralph_stop_stops_every_worker_status_lists_their_branches_and_the_next_run_finishes() {
    let items = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];
    let p = Project::new(SIX, &slow_item(), "");
    let child = p.spawn_run(&["--workers", "2"]);
    wait_for(&p, "two workers running", |e| {
        count(e, |e| {
            e["event"] == "iteration_started" && e.get("worker").is_some()
        }) >= 2
    });
    // `ralph context` shows each running worker's own context.
    let out = p.ralph().args(["context", "--json"]).output().unwrap();
    let context: Value = serde_json::from_slice(&out.stdout).unwrap();
    let workers = context["workers"]
        .as_array()
        .unwrap_or_else(|| panic!("{context}"));
    assert_eq!(workers.len(), 2, "{context}");
    for w in workers {
        assert!(w["context"]["run_id"].is_string(), "{w}");
        assert!(w["item"].is_string(), "{w}");
    }
    let text = p.ralph().arg("context").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("worker    w1") && text.contains("worker    w2"),
        "{text}"
    );
    let out = p.ralph().arg("stop").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(6), "{}", run.describe());
    let stopped: Vec<_> = run
        .of("worker_ended")
        .into_iter()
        .filter(|e| e["outcome"] == "stopped")
        .collect();
    assert_eq!(stopped.len(), 2, "{}", run.describe());
    let reason = run.ended()["reason"].as_str().unwrap();
    assert!(reason.contains("not merged yet: ralph/"), "{reason}");
    // And in a handoff, with their commits.
    let handoff = reason
        .rsplit("commits in ")
        .next()
        .unwrap()
        .trim_end_matches(')');
    let handoff = p.read(handoff);
    assert!(
        handoff.contains("not merged") && handoff.contains("ralph/"),
        "{handoff}"
    );

    // Every worker branch not merged is listed, with its commits.
    let status = ralph_json(&p, "status");
    let assignments = status["workers"]["assignments"].as_array().unwrap();
    assert_eq!(assignments.len(), 2, "{status}");
    let repo = git(p.root());
    for a in assignments {
        assert_eq!(a["status"], "paused");
        let branch = a["branch"].as_str().unwrap();
        assert!(worktree_exists(&repo, branch), "{branch}");
        // The checkpoint's WIP commit is there, and listed.
        assert!(!a["unmerged"].as_array().unwrap().is_empty(), "{a}");
    }
    let text = p.ralph().arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    for a in assignments {
        assert!(text.contains(a["branch"].as_str().unwrap()), "{text}");
    }

    // The next run resumes them and finishes the plan.
    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_all_merged(&p, &items);
}

fn worktree_exists(repo: &git2::Repository, branch: &str) -> bool {
    repo.find_branch(branch, git2::BranchType::Local).is_ok()
        && repo.worktrees().unwrap().iter().flatten().count() > 0
}

fn git_cli(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap()
}

/// `plan` over SAME_LINES agents, with `shared.txt` committed.
fn same_lines_project(plan: &str, config: &str) -> Project {
    shared_lines_project(plan, SAME_LINES, config)
}

/// `plan` over `scenario`, with `shared.txt` committed.
fn shared_lines_project(plan: &str, scenario: &str, config: &str) -> Project {
    let p = Project::new(plan, scenario, config);
    p.write("shared.txt", "one\ntwo\nthree\n");
    assert!(git_cli(p.root(), &["add", "shared.txt"]).status.success());
    assert!(
        git_cli(p.root(), &["commit", "-qm", "shared"])
            .status
            .success()
    );
    p
}

const ONE_ATTEMPT: &str = "[workers]\nconflict_attempts = 1\n";

#[test]
fn a_conflict_unresolved_after_its_attempts_needs_a_human_and_a_merge_by_hand_finishes_it() {
    let plan = "# Same lines\n\n- [ ] alpha\n- [ ] bravo\n";
    // One conflict attempt: the items that conflict are left to a person.
    let p = same_lines_project(plan, ONE_ATTEMPT);
    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let human = &run.of("needs_human")[0];
    assert_eq!(human["reason"], "conflict");
    let message = human["message"].as_str().unwrap();
    assert!(
        message.contains("shared.txt") && message.contains("ralph/"),
        "{message}"
    );
    let conflict = run
        .of("merge")
        .into_iter()
        .find(|m| m["outcome"] == "conflict")
        .unwrap();
    let branch = conflict["branch"].as_str().unwrap().to_string();
    let item = conflict["item"].as_str().unwrap().to_string();
    // Nothing forced: the branch and its worktree are kept, the item open.
    let repo = git(p.root());
    assert!(repo.find_branch(&branch, git2::BranchType::Local).is_ok());
    assert!(p.read("fix_plan.md").contains(&format!("- [ ] {item}")));
    // The handoff says how the run ended, not that it runs.
    let handoff = (p.handoffs().into_iter())
        .find(|h| h.to_string_lossy().contains("-workers-"))
        .expect("the unmerged branches' handoff");
    let handoff = std::fs::read_to_string(handoff).unwrap();
    assert!(
        handoff.contains(", incomplete)") && !handoff.contains("running"),
        "{handoff}"
    );
    // The morning report lists it with its branch and commits.
    let report = ralph_json(&p, "report");
    let left = report["story"]["lanes"]["left"].as_array().unwrap();
    assert_eq!(left.len(), 1, "{report:#}");
    assert_eq!(left[0]["item"], item.as_str());
    let why = left[0]["why"].as_str().unwrap();
    assert!(
        why.contains(&branch) && why.contains("1 commit(s) not merged: "),
        "{why}"
    );

    // A person merges it by hand; the next run checks it off and cleans up.
    let _ = git_cli(p.root(), &["merge", &branch]);
    p.write("shared.txt", "one\nTWO by alpha\nTWO by bravo\nthree\n");
    assert!(git_cli(p.root(), &["add", "shared.txt"]).status.success());
    let done = git_cli(p.root(), &["commit", "-q", "--no-edit"]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_all_merged(&p, &["alpha", "bravo"]);
}

#[test]
fn the_coordinator_killed_at_several_moments_strands_nothing() {
    use nix::sys::signal::Signal;
    let items = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];
    let p = Project::new(SIX, ONE_ITEM, "");
    // Kills at different moments: starting workers, mid-iteration, merging.
    for wait_ms in [700u64, 1900, 2600, 3300] {
        let mut child = unread_coordinator(&p, "3").spawn().unwrap();
        let coordinator = child.id() as i32;
        std::thread::sleep(Duration::from_millis(wait_ms));
        kill(coordinator, Signal::SIGSTOP);
        for pid in worker_pids(&p) {
            kill(pid, Signal::SIGKILL);
        }
        kill(coordinator, Signal::SIGKILL);
        child.wait().unwrap();
    }
    let run = p.run(&["--workers", "3"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_all_merged(&p, &items);
    let all = coordinator_events(&p);
    for item in items {
        let merged = count(&all, |e| {
            e["event"] == "merge"
                && e["item"] == item
                && (e["outcome"] == "fast_forward" || e["outcome"] == "merge_commit")
        });
        assert!(merged <= 1, "{item} merged {merged} times");
    }
}

#[test]
fn a_two_hundred_kilobyte_item_is_given_to_its_worker_bounded() {
    // Each worker records how long the item it was given is.
    const LENGTHS: &str = r#"
[[step]]
context = 20000
text = "Working on my item."
command = '''
mkdir -p out && printf '%s' "${#RALPH_ITEM}" > "out/$RALPH_WORKER-$(printf '%s' "$RALPH_ITEM" | cksum | cut -d' ' -f1).txt"
sed -i '0,/- \[ \]/s//- [x]/' .ralph/worker-plan.md
'''

[[step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#;
    let plan = format!("# Big\n\n- [ ] short one\n- [ ] {}\n", "x".repeat(200_000));
    let p = Project::new(&plan, LENGTHS, "");
    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let plan = p.read("fix_plan.md");
    assert_eq!(plan.matches("- [x]").count(), 2, "both checked off");
    let mut lengths: Vec<usize> = std::fs::read_dir(p.path("out"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .map(|n| n.trim().parse().unwrap())
        .collect();
    lengths.sort();
    assert_eq!(lengths.len(), 2, "{lengths:?}");
    assert_eq!(lengths[0], "short one".len());
    // The plan loader's bound (2,000 characters and a pointer to the plan).
    assert!((2_000..2_200).contains(&lengths[1]), "{lengths:?}");
}

#[test]
fn a_single_loop_is_refused_while_a_parallel_runs_branches_wait() {
    let p = Project::new(SIX, &slow_item(), "");
    let child = p.spawn_run(&["--workers", "2"]);
    wait_for(&p, "two workers running", |e| {
        count(e, |e| {
            e["event"] == "iteration_started" && e.get("worker").is_some()
        }) >= 2
    });
    // Its report while it runs says so (not that it was interrupted).
    let report = &ralph_json(&p, "report");
    assert_eq!(report["outcome"], "running", "{report:#}");
    assert!(p.ralph().arg("stop").output().unwrap().status.success());
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(6), "{}", run.describe());
    let plan_before = p.read("fix_plan.md");
    let head_before = p.log();

    // Without --workers, the same plan would be done again beside the
    // paused workers' branches: refused, nothing touched.
    let out = p.ralph().arg("run").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is not finished"), "{stderr}");
    assert!(stderr.contains("ralph run --workers 2"), "{stderr}");
    assert_eq!(p.read("fix_plan.md"), plan_before);
    assert_eq!(p.log(), head_before);

    // The user throws that work away as the hint says: then a fresh
    // parallel run starts over (it was refused while the branches stood).
    assert!(stderr.contains("git branch -D"), "{stderr}");
    let fresh = |p: &Project| {
        let out = (p.ralph().args(["run", "--workers", "2", "--fresh"]))
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = fresh(&p);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("git worktree remove"), "{stderr}");
    let status = ralph_json(&p, "status");
    for a in status["workers"]["assignments"].as_array().unwrap() {
        let worktree = a["worktree"].as_str().unwrap();
        let removed = git_cli(p.root(), &["worktree", "remove", "--force", worktree]);
        assert!(removed.status.success(), "{removed:?}");
        let deleted = git_cli(p.root(), &["branch", "-D", a["branch"].as_str().unwrap()]);
        assert!(deleted.status.success(), "{deleted:?}");
    }
    let (code, stderr) = fresh(&p);
    assert_eq!(code, Some(0), "{stderr}");
    assert_all_merged(
        &p,
        &["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"],
    );
}

/// The most workers that ran at once, from `worker_started`/`worker_ended`.
fn most_at_once(run: &Run) -> usize {
    let (mut now, mut most) = (0usize, 0usize);
    for e in &run.events {
        match e["event"].as_str() {
            Some("worker_started") => now += 1,
            Some("worker_ended") => now = now.saturating_sub(1),
            _ => {}
        }
        most = most.max(now);
    }
    most
}

#[test]
fn worktrees_kept_for_a_person_count_toward_max_worktrees() {
    // Three items rewrite the same line; with one attempt, the two that
    // conflict are left to a person with their worktrees.
    let plan = "# Same lines\n\n- [ ] alpha\n- [ ] bravo\n- [ ] charlie\n";
    // One conflict attempt: the items that conflict are left to a person.
    let p = same_lines_project(plan, ONE_ATTEMPT);
    let run = p.run(&["--workers", "3"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let repo = git(p.root());
    assert_eq!(repo.worktrees().unwrap().len(), 2, "{}", run.describe());

    // Two more items, room for two worktrees: both are taken by the kept
    // ones, so nothing new starts and the run says why.
    let more = format!("{}- [ ] delta\n- [ ] echo\n", p.read("fix_plan.md"));
    p.write("fix_plan.md", &more);
    p.write(
        "ralph.toml",
        &common::config("[workers]\nconflict_attempts = 1\nmax_worktrees = 2\n"),
    );
    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(run.of("worker_started").is_empty(), "{}", run.describe());
    let human = run
        .of("needs_human")
        .into_iter()
        .find(|h| h["reason"] == "max_worktrees")
        .unwrap_or_else(|| panic!("{}", run.describe()));
    let said = human["message"].as_str().unwrap();
    assert!(
        said.contains("max_worktrees (2)") && said.contains("2 worktree(s) kept"),
        "{said}"
    );
    let reason = run.ended()["reason"].as_str().unwrap();
    assert!(reason.contains("max_worktrees (2) reached"), "{reason}");
    assert_eq!(repo.worktrees().unwrap().len(), 2);

    // One kept branch merged by hand frees one: the new items are done one
    // worker at a time, never more worktrees than the limit.
    let branch = ralph_branches(&repo).remove(0);
    let _ = git_cli(p.root(), &["merge", &branch]);
    let lines = p.read("shared.txt");
    let kept: Vec<&str> = lines
        .lines()
        .filter(|l| {
            !l.starts_with("<<<<<<<") && !l.starts_with("=======") && !l.starts_with(">>>>>>>")
        })
        .collect();
    p.write("shared.txt", &(kept.join("\n") + "\n"));
    assert!(git_cli(p.root(), &["add", "shared.txt"]).status.success());
    assert!(
        git_cli(p.root(), &["commit", "-q", "--no-edit"])
            .status
            .success()
    );
    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert_eq!(most_at_once(&run), 1, "{}", run.describe());
    let plan = p.read("fix_plan.md");
    assert!(
        plan.contains("- [x] delta") && plan.contains("- [x] echo"),
        "{plan}"
    );
    assert_eq!(repo.worktrees().unwrap().len(), 1);
}

#[test]
fn on_exit_runs_once_for_the_whole_parallel_run() {
    // Every process's on_exit lands in one file outside the project.
    let out = tempfile::tempdir().unwrap();
    let log = out.path().join("exits.log");
    let hook = format!(
        "[hooks]\non_exit = [{}]\n",
        common::toml_string(&format!(
            "echo \"$RALPH_OUTCOME ${{RALPH_WORKER:-run}} $RALPH_ITERATION\" >> '{}'; cp \"$RALPH_REPORT\" '{}'",
            log.display(),
            out.path().join("report.html").display()
        ))
    );
    let p = Project::new(
        "# Three\n\n- [ ] alpha\n- [ ] bravo\n- [ ] charlie\n",
        ONE_ITEM,
        &hook,
    );
    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(said, "completed run 3\n", "{}", run.describe());
    assert_eq!(run.of("hook").len(), 1, "{}", run.describe());
    // The hook had this run's morning report, written before it ran.
    assert!(run.ended()["report"].is_string(), "{}", run.ended());
    let page = std::fs::read_to_string(out.path().join("report.html")).unwrap();
    let id = run.of("run_started")[0]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(page.contains(&id), "another run's page");
}

#[test]
fn max_duration_counts_from_the_parallel_runs_start_not_each_coordinators() {
    let plan = "# Three\n\n- [ ] alpha\n- [ ] bravo\n- [ ] charlie\n";
    let p = Project::new(plan, &slow_item(), "[loop]\nmax_duration = \"10s\"\n");
    let mut child = p.spawn_run(&["--workers", "3"]);
    wait_for(&p, "three workers working", |e| {
        count(e, |e| {
            e["event"] == "iteration_started" && e.get("worker").is_some()
        }) >= 3
    });
    kill(child.id() as i32, nix::sys::signal::Signal::SIGKILL);
    child.wait().unwrap();
    // Past the run's ten seconds: a new coordinator does not start the
    // clock again (its workers would finish in about four).
    common::wait_until("the workers' loops ended", LIMIT, || {
        worker_pids(&p).is_empty()
    });
    let started = coordinator_events(&p)[0]["ts"]
        .as_str()
        .unwrap()
        .to_string();
    let started: jiff::Timestamp = started.parse().unwrap();
    while jiff::Timestamp::now().duration_since(started).as_secs_f64() < 10.5 {
        std::thread::sleep(Duration::from_millis(100));
    }
    let run = p.run(&["--workers", "3"], LIMIT);
    assert_eq!(run.code, Some(5), "{}", run.describe());
    assert_eq!(run.ended()["outcome"], "budget_spent");
    assert!(run.of("worker_started").is_empty(), "{}", run.describe());
    // With --budget-per-invocation the time counts from this start.
    let run = p.run(&["--workers", "3", "--budget-per-invocation"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_all_merged(&p, &["alpha", "bravo", "charlie"]);
}

#[test]
fn a_worktree_half_checked_out_by_a_killed_coordinator_is_made_again() {
    use nix::sys::signal::Signal;
    let p = Project::new("# Two\n\n- [ ] alpha\n- [ ] bravo\n", &slow_item(), "");
    let mut child = p.spawn_run(&["--workers", "2"]);
    let coordinator = child.id() as i32;
    wait_for(&p, "two workers working", |e| {
        count(e, |e| {
            e["event"] == "iteration_started" && e.get("worker").is_some()
        }) >= 2
    });
    kill(coordinator, Signal::SIGSTOP);
    for pid in worker_pids(&p) {
        kill(pid, Signal::SIGKILL);
    }
    kill(coordinator, Signal::SIGKILL);
    child.wait().unwrap();
    common::wait_until("the workers' loops ended", LIMIT, || {
        worker_pids(&p).is_empty()
    });
    // What a coordinator killed in the middle of w1's checkout leaves: the
    // assignment recorded, not prepared; some files written, one empty.
    let ledger_path = p.path(".ralph/workers.json");
    let mut ledger: Value = serde_json::from_str(&p.read(".ralph/workers.json")).unwrap();
    let a = ledger["assignments"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|a| a["worker"] == "w1")
        .unwrap();
    a["prepared"] = Value::Bool(false);
    let worktree = std::path::PathBuf::from(a["worktree"].as_str().unwrap());
    std::fs::write(&ledger_path, serde_json::to_string(&ledger).unwrap()).unwrap();
    for entry in std::fs::read_dir(&worktree).unwrap().flatten() {
        if entry.file_name() != ".git" {
            let path = entry.path();
            if path.is_dir() {
                std::fs::remove_dir_all(path).unwrap();
            } else {
                std::fs::remove_file(path).unwrap();
            }
        }
    }
    std::fs::write(worktree.join("ralph.toml"), "").unwrap();

    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_all_merged(&p, &["alpha", "bravo"]);
    let repo = git(p.root());
    assert!(blob_on_main(&repo, "scenario.toml").is_some());
    assert!(!blob_on_main(&repo, "ralph.toml").unwrap().is_empty());
}

#[test]
fn a_merge_the_killed_coordinator_made_but_never_recorded_is_not_worked_again() {
    use nix::sys::signal::Signal;
    // The worker commits its item's work, then takes its time.
    const COMMIT_THEN_WAIT: &str = r#"
[[step]]
context = 20000
text = "Working on my item."
command = '''
mkdir -p out && printf '%s by %s\n' "$RALPH_ITEM" "$RALPH_WORKER" > "out/$RALPH_ITEM.txt"
git add out && git -c user.name=t -c user.email=t@example.com commit -qm "$RALPH_ITEM"
echo worked >> "$RALPH_WORK_LOG"
'''

[[step]]
sleep_ms = 60000

[[step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#;
    let out = tempfile::tempdir().unwrap();
    let log = out.path().join("work.log");
    let p = Project::new("# Two\n\n- [ ] alpha\n- [ ] bravo\n", COMMIT_THEN_WAIT, "");
    let repo = git(p.root());
    let child = unread_coordinator(&p, "2")
        .env("RALPH_WORK_LOG", &log)
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let worked = || std::fs::read_to_string(&log).unwrap_or_default();
    while worked() != "worked\nworked\n" {
        assert!(started.elapsed() < LIMIT, "the workers never committed");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The coordinator merged the branches and was killed before it
    // recorded the merges (as by a kill -9 right after a merge's ref update).
    let coordinator = child.id() as i32;
    kill(coordinator, Signal::SIGSTOP);
    kill_dead(&p.processes_matching(""));
    let mut child = child;
    child.wait().unwrap();
    for branch in ralph_branches(&repo) {
        let merged = git_cli(p.root(), &["merge", "--no-ff", "-m", "merged", &branch]);
        assert!(merged.status.success(), "{merged:?}");
    }

    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    // Not run again (iterations paid for nothing): recorded as merged.
    assert!(run.of("worker_started").is_empty(), "{}", run.describe());
    assert_eq!(worked(), "worked\nworked\n");
    let merges = run.of("merge");
    assert_eq!(merges.len(), 2, "{}", run.describe());
    assert!(
        merges.iter().all(|m| m["outcome"] == "already_merged"),
        "{}",
        run.describe()
    );
    assert_all_merged(&p, &["alpha", "bravo"]);
}

/// The workers' records of `kind` (all with ""), each once: a coordinator
/// killed between writing one and recording it as heard writes it again,
/// with its time (`report::lanes::Seen`).
fn of_workers_once<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    let mut seen = std::collections::BTreeSet::new();
    events
        .iter()
        .filter(|e| e.get("worker").is_some())
        .filter(|e| seen.insert((e["worker"].to_string(), e["ts"].to_string())))
        .filter(|e| kind.is_empty() || e["event"] == kind)
        .collect()
}

/// The morning report of a finished parallel run: its totals are its
/// workers' (iterations, cost, items), each iteration a row naming its
/// worker, and every commit since the start told apart: the agents'
/// (`agent_commits` of them, each with its item as its subject) from
/// ralph's (merges, plan check-offs, final and WIP commits).
fn assert_report_totals(p: &Project, report: &Value, run: &Run, agent_commits: usize) {
    let all = coordinator_events(p);
    let ended = of_workers_once(&all, "iteration_ended");
    let cost: f64 = ended.iter().map(|e| e["cost_usd"].as_f64().unwrap()).sum();
    let rows = report["iterations"].as_array().unwrap();
    assert_eq!(rows.len(), ended.len(), "{report:#}");
    assert_eq!(run.ended()["iterations"], ended.len() as u64);
    assert!(rows.iter().all(|r| r["worker"].is_string()), "{report:#}");
    let numbers: Vec<u64> = rows
        .iter()
        .map(|r| r["iteration"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (1..=rows.len() as u64).collect::<Vec<_>>());
    assert!(
        (report["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-9,
        "{report:#}"
    );
    let plan = p.read("fix_plan.md");
    assert_eq!(report["items_done"], plan.matches("- [x]").count() as u64);
    assert_eq!(report["items_open"], 0);
    // Every commit on the run branch since the first one is the night's.
    let since_start = p.log().len() - 1;
    let story = &report["story"];
    let agents = story["agent_commits"].as_array().unwrap();
    assert_eq!(agents.len(), agent_commits, "{story:#}");
    assert!(
        agents
            .iter()
            .all(|c| c["summary"].as_str().unwrap().starts_with("agent: ")),
        "{story:#}"
    );
    assert_eq!(
        story["ralph_commits"].as_u64().unwrap() as usize + agents.len(),
        since_start,
        "{story:#}"
    );
    assert!(
        story["diffstat"]["files"].as_u64().unwrap() >= 6,
        "{story:#}"
    );
    let text = p.ralph().arg("report").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("{} iteration(s)", ended.len()))
            && text.contains(&format!("{since_start} commit(s)"))
            && text.contains("w1: "),
        "{text}"
    );
}

/// The coordinator alone killed with -9 mid-iteration: its workers (told by
/// their parent-death signal) checkpoint and end their iterations with no
/// coordinator listening. The next coordinator reads what they did from
/// their own logs: the run's iterations and cost count every iteration
/// once, in `run_ended`, the run's log and the morning report.
#[test]
fn what_the_workers_did_while_no_coordinator_listened_is_counted_once() {
    use nix::sys::signal::Signal;
    let items = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];
    // The agent commits its work itself, then takes its time: killed in
    // it, the next iteration writes the same file and has nothing to commit.
    let commits = slow_item().replacen(
        "\"out/$item.txt\"\n",
        "\"out/$item.txt\"\ngit add out && git -c user.name=t -c user.email=t@example.com commit -qm \"agent: $item\"\n",
        1,
    );
    let p = Project::new(SIX, &commits, "");
    let mut child = unread_coordinator(&p, "3").spawn().unwrap();
    wait_for(&p, "three workers in an iteration", |e| {
        count(e, |e| {
            e["event"] == "iteration_started" && e.get("worker").is_some()
        }) >= 3
    });
    std::thread::sleep(Duration::from_millis(500));
    let workers = worker_pids(&p);
    assert_eq!(workers.len(), 3, "three worker loops");
    kill(child.id() as i32, Signal::SIGKILL);
    child.wait().unwrap();
    // Each worker checkpoints and ends its run by itself.
    let started = std::time::Instant::now();
    while workers.iter().any(|&pid| common::alive(pid)) {
        assert!(started.elapsed() < LIMIT, "the workers did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    let heard = count(&coordinator_events(&p), |e| {
        e["event"] == "iteration_ended" && e.get("worker").is_some()
    });
    // Before anyone runs again, `ralph status` and the report count what
    // the workers did, and the report says the run was interrupted.
    let own_logs: Vec<String> = std::fs::read_dir(p.path(".ralph/worktrees"))
        .unwrap()
        .flat_map(|run| std::fs::read_dir(run.unwrap().path()).unwrap())
        .map(|w| w.unwrap().path().join(".ralph/events.jsonl"))
        .map(|log| std::fs::read_to_string(log).unwrap_or_default())
        .collect();
    let ended_alone: usize = (own_logs.iter())
        .map(|text| text.matches("\"event\":\"iteration_ended\"").count())
        .sum();
    // Each stopped as `ralph stop` stops it: a checkpoint, its agent not
    // killed outright (the parent-death signal comes more than once).
    for log in &own_logs {
        assert!(log.contains("\"trigger\":\"stop\""), "{log}");
        assert!(!log.contains("second interrupt"), "{log}");
    }
    assert!(ended_alone > heard, "{ended_alone} ended, {heard} heard");
    let status = ralph_json(&p, "status");
    assert_eq!(
        status["workers"]["iterations"], ended_alone as u64,
        "{status:#}"
    );
    let report = &ralph_json(&p, "report");
    assert_eq!(report["outcome"], "interrupted", "{report:#}");
    assert_eq!(report["iterations"].as_array().unwrap().len(), ended_alone);
    assert!(report["story"]["start_commit"].is_string(), "{report:#}");

    let run = p.run(&["--workers", "3"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_all_merged(&p, &items);
    let all = coordinator_events(&p);
    let began = of_workers_once(&all, "iteration_started").len();
    let ended = of_workers_once(&all, "iteration_ended");
    let cost: f64 = ended.iter().map(|e| e["cost_usd"].as_f64().unwrap()).sum();
    assert!(
        ended.len() > heard,
        "the interrupted iterations were never read back ({heard} heard live)"
    );
    assert_eq!(ended.len(), began, "every iteration ended once in the log");
    // Nothing written twice, not even a context reading, but the one record
    // a coordinator killed between writing it and recording it as heard may
    // have written again (the report counts it once).
    let workers = all.iter().filter(|e| e.get("worker").is_some()).count();
    let once = of_workers_once(&all, "").len();
    assert!(
        workers - once <= 1,
        "{} records written twice",
        workers - once
    );
    let end = run.ended();
    assert_eq!(end["iterations"], began as u64, "{end}");
    assert!(
        (end["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-9,
        "{end}"
    );
    let report = &ralph_json(&p, "report");
    assert_eq!(report["sessions"], 2, "{report:#}");
    assert_report_totals(&p, report, &run, items.len());
}

/// An untracked file in the user's checkout: the workers' worktrees start
/// from the branch's last commit and never see it, which the run says
/// (not that a WIP commit would take it: none is made there), and the
/// file is left as it was.
#[test]
fn untracked_files_are_said_to_stay_out_of_the_workers_worktrees() {
    let p = Project::new("# Two\n\n- [ ] alpha\n- [ ] bravo\n", ONE_ITEM, "");
    p.write("notes.txt", "mine\n");
    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let said: Vec<&str> = run
        .of("warning")
        .into_iter()
        .filter(|e| e.get("worker").is_none())
        .filter_map(|e| e["message"].as_str())
        .collect();
    assert!(
        said.iter()
            .any(|m| m.contains("not in the workers' worktrees") && m.contains("notes.txt")),
        "{said:#?}"
    );
    assert!(
        !said.iter().any(|m| m.contains("next WIP commit")),
        "{said:#?}"
    );
    assert_eq!(p.read("notes.txt"), "mine\n");
    let plan = p.read("fix_plan.md");
    assert!(
        plan.contains("- [x] alpha") && plan.contains("- [x] bravo"),
        "{plan}"
    );
    assert!(p.path("out/alpha.txt").is_file() && p.path("out/bravo.txt").is_file());
}

/// The coordinator killed with -9 while both workers are in their first
/// iteration, with `max_iterations = 2`: their interrupted iterations spend
/// the shared budget. The next coordinator counts them before it starts
/// anything, and ends at once, starting no paid session.
#[test]
fn a_budget_the_workers_spent_while_no_coordinator_listened_starts_nothing_more() {
    use nix::sys::signal::Signal;
    let plan = "# Four\n\n- [ ] alpha\n- [ ] bravo\n- [ ] charlie\n- [ ] delta\n";
    let p = Project::new(plan, &slow_item(), "[loop]\nmax_iterations = 2\n");
    let mut child = unread_coordinator(&p, "2").spawn().unwrap();
    wait_for(&p, "two workers in an iteration", |e| {
        count(e, |e| {
            e["event"] == "iteration_started" && e.get("worker").is_some()
        }) >= 2
    });
    std::thread::sleep(Duration::from_millis(300));
    let workers = worker_pids(&p);
    kill(child.id() as i32, Signal::SIGKILL);
    child.wait().unwrap();
    common::wait_until("the workers' loops ended", LIMIT, || {
        workers.iter().all(|&pid| !common::alive(pid))
    });

    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert_eq!(
        run.ended()["outcome"],
        "iteration_limit",
        "{}",
        run.describe()
    );
    assert_eq!(run.ended()["iterations"], 2, "{}", run.describe());
    assert!(
        run.of("worker_started").is_empty() && run.of("iteration_started").is_empty(),
        "a paid session started past the budget: {}",
        run.describe()
    );
}

/// The plan named from a subfolder through `..`: its check-offs are
/// committed at its place in the work tree.
#[test]
fn a_plan_named_through_dot_dot_from_a_subfolder_is_checked_off() {
    let p = Project::new("# unused\n", ONE_ITEM, "");
    p.write("docs/fix_plan.md", "# Two\n\n- [ ] alpha\n- [ ] bravo\n");
    p.write("src/.keep", "");
    let commit = git_cli(p.root(), &["add", "-A"]);
    assert!(commit.status.success(), "{commit:?}");
    let commit = git_cli(p.root(), &["commit", "-qm", "docs"]);
    assert!(commit.status.success(), "{commit:?}");
    let out = p
        .ralph()
        .current_dir(p.path("src"))
        .args(["run", "--json", "--workers", "2", "../docs/fix_plan.md"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let repo = git(p.root());
    let plan = blob_on_main(&repo, "docs/fix_plan.md").unwrap();
    assert!(
        plan.contains("- [x] alpha") && plan.contains("- [x] bravo"),
        "{plan}"
    );
}

/// Both workers' loops complete while their coordinator is frozen, and the
/// coordinator is then killed with -9 before it merged them. The next one
/// merges their branches without running their items again.
#[test]
fn loops_that_completed_while_no_coordinator_listened_are_merged_not_run_again() {
    use nix::sys::signal::Signal;
    let p = Project::new("# Two\n\n- [ ] alpha\n- [ ] bravo\n", ONE_ITEM, "");
    let mut child = unread_coordinator(&p, "2").spawn().unwrap();
    wait_for(&p, "two workers in an iteration", |e| {
        count(e, |e| {
            e["event"] == "iteration_started" && e.get("worker").is_some()
        }) >= 2
    });
    let workers = worker_pids(&p);
    assert_eq!(workers.len(), 2);
    kill(child.id() as i32, Signal::SIGSTOP);
    common::wait_until("both loops completed", LIMIT, || {
        workers.iter().all(|&pid| !common::alive(pid))
    });
    kill(child.id() as i32, Signal::SIGKILL);
    child.wait().unwrap();

    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    // No loop started again (what the killed one left unheard is read back).
    let started_again = run.of("run_started").len() + run.of("worker_started").len();
    assert_eq!(started_again, 1, "an item run again: {}", run.describe());
    assert_all_merged(&p, &["alpha", "bravo"]);
}

/// Plan items holding escape sequences (a colour, a window title): the
/// commits the coordinator writes and the morning report show them
/// without, so neither `git log` nor the page carries them.
#[test]
fn escape_sequences_in_plan_items_reach_no_commit_message_or_page() {
    let plan = "# Hostile\n\n- [ ] alpha \x1b[31mRED\x1b[0m\n- [ ] bravo \x1b]0;TITLE\x07x\n";
    let p = Project::new(plan, ONE_ITEM, "");
    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let repo = git(p.root());
    let mut walk = repo.revwalk().unwrap();
    walk.push_head().unwrap();
    for id in walk {
        let commit = repo.find_commit(id.unwrap()).unwrap();
        let message = commit.message().unwrap_or("");
        assert!(!message.contains('\x1b'), "{message:?}");
    }
    let page = p.read(".ralph/report.html");
    for leftover in ["[31m", "]0;TITLE"] {
        assert!(!page.contains(leftover), "{leftover} in the page");
    }
    assert!(page.contains("alpha RED"), "the item's text kept");
}

#[test]
fn a_conflict_found_after_the_budget_is_spent_starts_no_session_and_the_next_run_resolves_it() {
    // Two sessions in all: each worker does its item; the second merge
    // conflicts once the budget is spent. Sessions counted by the sim (one
    // line per prompt).
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("sessions.jsonl");
    let scenario = format!("record_messages = \"{}\"\n{SAME_LINES}", log.display());
    let plan = "# Same lines\n\n- [ ] alpha\n- [ ] bravo\n";
    let p = shared_lines_project(plan, &scenario, "");
    let repo = git(p.root());
    let paid = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let run = p.run(&["--workers", "2", "--max-iterations", "2"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert_eq!(paid(), 2, "{}", run.describe());
    if run.of("merge").iter().any(|m| m["outcome"] == "conflict") {
        // No update started after the stop: it waits for the next run.
        let updates = (run.of("worker_started").into_iter())
            .filter(|e| e["task"] == "update")
            .count();
        assert_eq!(updates, 0, "{}", run.describe());
    }
    // The next run sends it back and merges it, one session more.
    let next = p.run(&["--workers", "2", "--max-iterations", "5"], LIMIT);
    assert_eq!(next.code, Some(0), "{}", next.describe());
    assert_eq!(paid(), 3, "{}", next.describe());
    let shared = blob_on_main(&repo, "shared.txt").unwrap();
    assert!(
        shared.contains("TWO by alpha") && shared.contains("TWO by bravo"),
        "{shared}"
    );
    assert_all_merged(&p, &["alpha", "bravo"]);
}

fn timestamp(v: &Value) -> jiff::Timestamp {
    v.as_str()
        .unwrap_or_else(|| panic!("not a time: {v}"))
        .parse()
        .unwrap()
}

#[test]
fn run_started_says_the_runs_deadline_and_cost_budget_as_the_run_counts_them() {
    // A single loop stopped by its iteration limit, then continued: its
    // hour counts from the first start, not from the second (what
    // `ralph watch` and the live line guessed from the latest start).
    let idle = "[[step]]\ncontext = 20000\ntext = \"hm\"\n[[step]]\nresult = \"still going\"\n";
    let p = Project::new(
        "# Two\n\n- [ ] alpha\n- [ ] bravo\n",
        idle,
        "[loop]\nmax_iterations = 1\nmax_duration = \"1h\"\nmax_cost_usd = 5.0\n[breaker]\nno_progress = 9\n",
    );
    let first = p.run(&[], LIMIT);
    assert_eq!(first.code, Some(4), "{}", first.describe());
    let start = &first.of("run_started")[0];
    let first_at = timestamp(&start["ts"]);
    let hour_after = first_at + jiff::SignedDuration::from_hours(1);
    let deadline = timestamp(&start["deadline"]);
    assert!(
        deadline.duration_since(hour_after).abs() < jiff::SignedDuration::from_secs(2),
        "{start}"
    );
    assert_eq!(start["max_cost_usd"], 5.0, "{start}");
    std::thread::sleep(Duration::from_millis(2500));
    let second = p.run(&["--budget-per-invocation"], LIMIT);
    let again = &second.of("run_started")[0];
    assert_eq!(again["resumed"], true, "{again}");
    // Per invocation: the hour from this start, the cost on top of the
    // run's so far.
    let again_at = timestamp(&again["ts"]);
    let hour_after_again = again_at + jiff::SignedDuration::from_hours(1);
    assert!(
        timestamp(&again["deadline"])
            .duration_since(hour_after_again)
            .abs()
            < jiff::SignedDuration::from_secs(2),
        "{again}"
    );
    let spent = first.ended()["cost_usd"].as_f64().unwrap();
    assert!(spent > 0.0, "{}", first.describe());
    let max = again["max_cost_usd"].as_f64().unwrap();
    assert!((max - (spent + 5.0)).abs() < 1e-9, "{again}");
    // Continued per run: the first start's hour, whatever the clock says now.
    let third = p.run(&[], LIMIT);
    let third_start = &third.of("run_started")[0];
    assert!(
        timestamp(&third_start["deadline"])
            .duration_since(hour_after)
            .abs()
            < jiff::SignedDuration::from_secs(2),
        "{third_start}"
    );
    // The report shows the budget the run counted, not what ralph.toml
    // says since.
    p.write(
        "ralph.toml",
        &common::config("[loop]\nmax_cost_usd = 9.0\n"),
    );
    let report = ralph_json(&p, "report");
    assert_eq!(report["budgets"]["max_cost_usd"], 5.0, "{report}");
    assert_eq!(report["budgets"]["deadline"], third_start["deadline"]);

    // A parallel run: the coordinator's start says the --deadline it hands
    // every worker (no max_duration here: the deadline alone).
    let p = Project::new(SIX, ONE_ITEM, "[loop]\nmax_cost_usd = 3.0\n");
    let local = jiff::Zoned::now()
        .checked_add(jiff::SignedDuration::from_hours(2))
        .unwrap();
    let hhmm = local.strftime("%H:%M").to_string();
    let want = local
        .with()
        .second(0)
        .subsec_nanosecond(0)
        .build()
        .unwrap()
        .timestamp();
    let run = p.run(&["--workers", "3", "--deadline", &hhmm], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let start = run
        .of("run_started")
        .into_iter()
        .find(|e| e.get("worker").is_none())
        .unwrap();
    assert_eq!(timestamp(&start["deadline"]), want, "{start}");
    assert_eq!(start["max_cost_usd"], 3.0, "{start}");
}

/// Records, once the page has loaded, where the timeline drew its lanes,
/// bars and markers (their boxes on the screen and their tips), and the
/// plan chart's points.
const LAYOUT: &str = r#"<script nonce="probe">
window.addEventListener('load',function(){
var tl=document.querySelector('svg.chart.timeline');
var box=function(e){var r=e.getBoundingClientRect();var t=e.querySelector('title');return {x:r.left,y:r.top+r.height/2,w:r.width,cls:e.getAttribute('class')||'',text:t?t.textContent:e.textContent};};
var all=function(root,sel){return root?Array.prototype.map.call(root.querySelectorAll(sel),box):[];};
document.documentElement.setAttribute('data-layout',JSON.stringify({lanes:all(tl,'text.lane'),bars:all(tl,'rect.bar'),marks:all(tl,'path'),plan:all(document.querySelector('svg.chart.plan'),'circle')}));
});
</script>"#;

#[test]
fn a_three_worker_report_in_a_real_browser_has_a_lane_each_and_the_merges() {
    let Some(bin) = crate::morning_report::chromium() else {
        return;
    };
    // Three items on the same lines, one attempt at a conflict: one is
    // merged, the two others conflict and are left to a person.
    let p = same_lines_project(
        "# Same lines\n\n- [ ] alpha\n- [ ] bravo\n- [ ] charlie\n",
        ONE_ATTEMPT,
    );
    let run = p.run(&["--workers", "3"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let merges = run.of("merge");
    let conflicts = merges.iter().filter(|m| m["outcome"] == "conflict").count();
    let merged = merges.len() - conflicts;
    let left = run.of("needs_human").len();
    assert!(
        conflicts >= 1 && merged >= 1 && left >= 1,
        "{}",
        run.describe()
    );

    let page = p.path(".ralph/report.html");
    let layout: Value = serde_json::from_str(&crate::morning_report::probe(
        &bin,
        &page,
        LAYOUT,
        "data-layout",
        &["--window-size=1280,2000"],
    ))
    .unwrap();
    let list = |key: &str| layout[key].as_array().unwrap().clone();
    let lanes: Vec<(String, f64)> = list("lanes")
        .iter()
        .map(|l| {
            (
                l["text"].as_str().unwrap().to_string(),
                l["y"].as_f64().unwrap(),
            )
        })
        .collect();
    let names: Vec<&str> = lanes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "w1",
            "w2",
            "w3",
            "merges",
            "to a person",
            "limits",
            "breaker"
        ],
        "{layout}"
    );
    let lane_y = |name: &str| lanes.iter().find(|(n, _)| n == name).unwrap().1;
    let near = |y: f64, lane: &str| (y - lane_y(lane)).abs() < 10.0;

    // Every bar in the lane of the worker its tip names; some ran at once
    // (their spans overlap), side by side.
    let bars = list("bars");
    assert_eq!(bars.len(), run.of("iteration_ended").len(), "{layout}");
    let mut spans = Vec::new();
    for b in &bars {
        let tip = b["text"].as_str().unwrap();
        let worker = ["w1", "w2", "w3"]
            .into_iter()
            .find(|w| tip.contains(&format!(" · {w}: ")))
            .unwrap_or_else(|| panic!("no worker in {tip}"));
        let (x, w, y) = (
            b["x"].as_f64().unwrap(),
            b["w"].as_f64().unwrap(),
            b["y"].as_f64().unwrap(),
        );
        assert!(near(y, worker), "{tip} at y {y}: {lanes:?}");
        // Each row's agent session, in its tip.
        assert!(tip.contains(" · session "), "{tip}");
        spans.push((worker, x, x + w));
    }
    let at_once = spans
        .iter()
        .any(|a| spans.iter().any(|b| a.0 != b.0 && a.1 < b.2 && b.1 < a.2));
    assert!(at_once, "no two workers' iterations overlap: {spans:?}");

    // Each merge and each conflict handed back: a marker in the merge
    // queue's row; each item left to a person in the row below.
    let marks = list("marks");
    let of = |class: &str| -> Vec<&Value> {
        marks
            .iter()
            .filter(|m| m["cls"].as_str().unwrap().split(' ').any(|c| c == class))
            .collect()
    };
    assert_eq!(of("m-merge").len(), merged, "{layout}");
    assert_eq!(of("m-conflict").len(), conflicts, "{layout}");
    assert_eq!(of("m-human").len(), left, "{layout}");
    for m in of("m-merge").into_iter().chain(of("m-conflict")) {
        assert!(near(m["y"].as_f64().unwrap(), "merges"), "{m}: {lanes:?}");
    }
    for m in of("m-human") {
        assert!(
            near(m["y"].as_f64().unwrap(), "to a person"),
            "{m}: {lanes:?}"
        );
    }
    // The plan's progress: a point per item merged, named.
    let plan = list("plan");
    assert_eq!(plan.len(), merged, "{layout}");
    assert!(
        plan[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("1 done, 2 open at "),
        "{layout}"
    );
    // And the page as a person sees it.
    let shot = std::env::temp_dir().join(format!("ralph-lanes-{}.png", std::process::id()));
    crate::morning_report::browse(
        &bin,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,1000",
        ],
        &page,
    );
    let (_, _, pixels) = crate::morning_report::decode_png(&shot);
    let colours: std::collections::HashSet<[u8; 3]> = pixels.iter().copied().collect();
    assert!(colours.len() > 50, "only {} colours: blank?", colours.len());
    if std::env::var_os("RALPH_KEEP_SCREENSHOT").is_some() {
        eprintln!("screenshot: {}", shot.display());
    } else {
        let _ = std::fs::remove_file(shot);
    }
}

/// The models' windows are the project's: what a parallel run's workers
/// learn goes to the project's `.ralph/windows.json`, and the next
/// parallel run's workers start their meters on it. Here a model whose
/// name says nothing of its 1M window, at 150k tokens in each session
/// (L2 on a 200k guess): no worker of the second run checkpoints.
#[test]
fn workers_learn_and_use_the_projects_memory_of_windows() {
    let scenario = |context: &str| {
        format!(
            "model = \"claude-opus-4-6\"\ncontext_window = 1000000\n{}",
            ONE_ITEM.replace("context = 20000", context)
        )
    };
    let p = Project::new(
        "# Two\n\n- [ ] alpha\n- [ ] bravo\n",
        &scenario("context = 20000"),
        "[context]\nnudge_at_l1 = false\n",
    );
    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let memory: Value = serde_json::from_str(&p.read(".ralph/windows.json")).unwrap();
    assert_eq!(memory["models"]["claude-opus-4-6"]["window"], 1_000_000);

    let plan = p.read("fix_plan.md") + "- [ ] charlie\n- [ ] delta\n";
    p.write("fix_plan.md", &plan);
    p.write("scenario.toml", &scenario("context = 150000"));
    assert!(
        git_cli(p.root(), &["commit", "-qam", "more"])
            .status
            .success()
    );
    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_work_merged(&p, &["alpha", "bravo", "charlie", "delta"]);
    assert!(
        worker_events(&run, "checkpoint").is_empty(),
        "checkpointed on a 200k guess: {}",
        run.describe()
    );
    let readings = worker_events(&run, "context");
    assert!(!readings.is_empty(), "{}", run.describe());
    for r in readings {
        assert_eq!(r["reading"]["window"], 1_000_000, "{r}");
    }
}
