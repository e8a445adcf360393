//! End-to-end tests of parallel workers (issue 25, docs/workers.md):
//! `ralph run --workers N` with `ralph sim` agents, each in its own
//! worktree, merged back one at a time by the coordinator.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{Project, Run};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(180);

const SIX: &str = "# Six things\n\n- [ ] alpha\n- [ ] bravo\n- [ ] charlie\n- [ ] delta\n- [ ] echo\n- [ ] foxtrot\n";

/// One iteration doing one item: a worker does its `RALPH_ITEM` and checks
/// it off in its own plan; a single loop does the plan's first open item.
/// Either writes `out/<item>.txt`, pauses, commits, promises.
const ONE_ITEM: &str = r#"
[[step]]
context = 20000
text = "Working on my item."
command = '''
if [ -n "$RALPH_WORKER" ]; then plan=.ralph/worker-plan.md; item="$RALPH_ITEM"; else plan=fix_plan.md; item=$(grep -m1 -F -e '- [ ]' fix_plan.md | sed 's/^- \[ \] //'); fi
mkdir -p out && printf '%s by %s\n' "$item" "${RALPH_WORKER:-single}" > "out/$item.txt"
sed -i '0,/- \[ \]/s//- [x]/' "$plan"
'''

[[step]]
sleep_ms = 1500

[[step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#;

fn git(dir: &Path) -> git2::Repository {
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

fn blob_on_main(repo: &git2::Repository, path: &str) -> Option<String> {
    let tree = repo.head().unwrap().peel_to_tree().unwrap();
    let entry = tree.get_path(Path::new(path)).ok()?;
    let blob = repo.find_blob(entry.id()).unwrap();
    Some(String::from_utf8_lossy(blob.content()).into_owned())
}

fn ralph_branches(repo: &git2::Repository) -> Vec<String> {
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
fn assert_all_merged(p: &Project, items: &[&str]) {
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
    // The plan: only the coordinator's commits touch it (and the initial one).
    for subject in commits_touching(&repo, "fix_plan.md") {
        assert!(
            subject.starts_with("ralph: \"") || subject == "initial",
            "a worker committed the plan: {subject}"
        );
    }
    assert!(ralph_branches(&repo).is_empty(), "{:?}", ralph_branches(&repo));
    assert!(repo.worktrees().unwrap().is_empty(), "worktrees left");
    assert!(repo.statuses(None).unwrap().iter().all(|s| s.path().is_some_and(|p| p.starts_with(".ralph"))));
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
    let workers: std::collections::BTreeSet<&str> =
        started.iter().map(|e| e["worker"].as_str().unwrap()).collect();
    assert_eq!(workers.len(), 3, "{workers:?}");
    let merges = run.of("merge");
    assert_eq!(merges.len(), 6);
    assert!(merges.iter().all(|m| m["outcome"] == "fast_forward" || m["outcome"] == "merge_commit"));
    assert!(!worker_events(&run, "iteration_started").is_empty());
    assert!(
        worker_events(&run, "iteration_started")
            .iter()
            .all(|e| e["worker"].as_str().unwrap().starts_with('w'))
    );
    let ratio = run.elapsed.as_secs_f64() / one.elapsed.as_secs_f64();
    eprintln!(
        "six items: one loop {:.1}s, three workers {:.1}s, ratio {ratio:.2}",
        one.elapsed.as_secs_f64(),
        run.elapsed.as_secs_f64()
    );
    assert!(ratio < 0.9, "three workers took {ratio:.2} of one loop's time");
}

#[test]
fn too_many_workers_are_refused_naming_the_limit() {
    let p = Project::new(SIX, ONE_ITEM, "[workers]\nmax_worktrees = 2\n");
    let out = p.ralph().args(["run", "--workers", "3"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_worktrees is 2"), "{err}");
}
