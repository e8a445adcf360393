//! `ralph demo --plan`: the rehearsal on a user's own plan, single loop and
//! `--workers 2`, completes with a report in a throwaway repository and
//! leaves the user's project byte for byte as it was; and `ralph --version`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use super::common;

/// An arbitrary plan of five open items as users write them: `*` and
/// numbered bullets, an item in progress with a sub-item, a dependency,
/// shell metacharacters, non-ASCII text, and a checkbox in a code block
/// that is not an item.
const PLAN: &str = r#"# My project

Some notes before the items.

- [ ] Add the `--json` flag to "export" (it's $(touch pwned) && `rm -rf ~`)
* [ ] Écrire la doc en français
1. [~] Migrate the database
   - [ ] write the migration
- [x] Already done
- [ ] Fix the flaky test (after: Add the)

```sh
- [ ] not an item: inside a code block
```
"#;

/// Every file and folder under `root` (`.git` included): its bytes and mode.
fn snapshot(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            let mode = meta.permissions().mode();
            if meta.is_dir() {
                out.insert(name, (Vec::new(), mode));
                stack.push(path);
            } else {
                out.insert(name, (std::fs::read(&path).unwrap(), mode));
            }
        }
    }
    out
}

/// The user's project: a git repository with the plan, a config whose
/// agent is the real CLI (never to be started), and a dirty work tree.
fn users_project(root: &Path) {
    std::fs::write(root.join("fix_plan.md"), PLAN).unwrap();
    std::fs::write(root.join("ralph.toml"), "[agent]\ncommand = \"claude\"\n").unwrap();
    std::fs::write(root.join("main.rs"), "fn main() {}\n").unwrap();
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(args)
            .current_dir(root)
            .env("GIT_AUTHOR_NAME", "User")
            .env("GIT_AUTHOR_EMAIL", "user@example.com")
            .env("GIT_COMMITTER_NAME", "User")
            .env("GIT_COMMITTER_EMAIL", "user@example.com")
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "the user's work"]);
    std::fs::write(root.join("main.rs"), "fn main() { todo!() }\n").unwrap();
    std::fs::write(root.join("scratch.txt"), "untracked\n").unwrap();
}

fn rehearse(workers: Option<&str>) {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir(&project).unwrap();
    users_project(&project);
    let before = snapshot(&project);
    let copy = tmp.path().join("rehearsal");
    let mut cmd = Command::new(common::BIN);
    cmd.args(["demo", "--plan", "fix_plan.md"])
        .arg(&copy)
        .current_dir(&project)
        // No agent CLI on PATH: a rehearsal that started one would fail.
        .env("PATH", "/usr/bin:/bin")
        .env("RALPH_LOG", "off");
    if let Some(n) = workers {
        cmd.args(["--workers", n]);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");

    // Completed, every item checked off in the copy, the work committed.
    let events = std::fs::read_to_string(copy.join(".ralph/events.jsonl")).unwrap();
    let ended = events
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["event"] == "run_ended")
        .expect("run_ended");
    assert_eq!(ended["outcome"], "completed", "{ended}");
    let plan = std::fs::read_to_string(copy.join("fix_plan.md")).unwrap();
    assert_eq!(ralph::plan::Plan::parse(&plan).open_count(), 0, "{plan}");
    assert!(
        plan.contains("- [ ] not an item: inside a code block"),
        "{plan}"
    );
    assert!(copy.join(".ralph/report.html").is_file());
    let items = std::fs::read_dir(copy.join("rehearsal")).unwrap().count();
    assert_eq!(items, 5, "one work file per item");
    let status = Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(&copy)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&status.stdout), "", "all committed");
    // The single loop checkpoints on the way (iteration 2 fills the context).
    if workers.is_none() {
        assert!(
            events.contains("\"event\":\"checkpoint_requested\""),
            "{events}"
        );
    }

    // The user's project: byte for byte as it was.
    assert!(before == snapshot(&project), "the user's project changed");
    assert!(!project.join("pwned").exists());
}

#[test]
fn a_rehearsal_on_the_users_plan_completes_and_leaves_the_project_alone() {
    rehearse(None);
}

#[test]
fn a_rehearsal_with_two_workers_completes_and_leaves_the_project_alone() {
    rehearse(Some("2"));
}

#[test]
fn a_plan_with_nothing_open_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("done.md"), "- [x] all done\n").unwrap();
    let out = Command::new(common::BIN)
        .args(["demo", "--plan", "done.md"])
        .arg(tmp.path().join("copy"))
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no open item"));
    assert!(!tmp.path().join("copy").exists());
}

#[test]
fn the_version_names_the_commit_and_the_target() {
    let out = Command::new(common::BIN).arg("--version").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let (version, rest) = text
        .trim_end()
        .strip_prefix("ralph ")
        .and_then(|t| t.split_once(" ("))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    let (commit, target) = rest
        .strip_suffix(')')
        .and_then(|r| r.split_once(", "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        target.contains("-linux-") || target.contains("-apple-"),
        "{text}"
    );
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success());
    match head {
        Some(head) => assert_eq!(commit, String::from_utf8_lossy(&head.stdout).trim()),
        None => assert!(commit == "unknown commit" || commit.len() == 12, "{text}"),
    }
}
