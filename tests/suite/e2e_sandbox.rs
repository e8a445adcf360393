//! The sandbox (`[agent] sandbox = "bwrap"`, docs/sandbox.md) end to end
//! with `ralph sim`: the agent's work in the project is committed as
//! usual; its attempts to write outside the project, to read a planted
//! `~/.ssh/id_ed25519` and another repository's file fail inside the agent,
//! and its handoff says what failed. With `sandbox = "none"` the same run
//! reaches all three, as before.
//!
//! Needs bubblewrap; without it the bwrap test says "skipped" (a failure
//! with `RALPH_REQUIRE_SANDBOX=1`, which `.ci/run` sets once it works).

use std::path::PathBuf;
use std::time::Duration;

use crate::common::{Project, toml_string};

const PLAN: &str = "# Probe\n\n- [ ] probe the box\n";
const LIMIT: Duration = Duration::from_secs(60);
const KEY: &str = "PRIVATE-KEY-CANARY-7f3a";
const OTHER: &str = "OTHER-REPO-CANARY-19c2";

/// A home with a planted key and the agent CLI's config, another git
/// repository with a file, and a directory outside every hidden place
/// (the build's temp dir) for the write.
struct World {
    _tmp: tempfile::TempDir,
    _outside: tempfile::TempDir,
    home: PathBuf,
    other: PathBuf,
    outside: PathBuf,
}

impl World {
    fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let home = crate::common::home_with_key(tmp.path(), KEY);
        std::fs::write(home.join(".claude/settings.json"), "{}").unwrap();
        let other = tmp.path().join("other-repo");
        git2::Repository::init(&other).unwrap();
        std::fs::write(other.join("secret.txt"), OTHER).unwrap();
        let outside_dir = tempfile::tempdir_in(crate::common::outside_base()).unwrap();
        let outside = outside_dir.path().to_path_buf();
        World {
            _tmp: tmp,
            _outside: outside_dir,
            home,
            other,
            outside,
        }
    }

    /// The work, the three attempts, then past L2: the checkpoint asks
    /// for the handoff.
    fn scenario(&self) -> String {
        let escape = self.outside.join("escaped.txt");
        format!(
            r#"
[[step]]
context = 20000
path = "work.txt"
content = "the agent's work\n"
[[step]]
tool = "Write"
path = {escape}
content = "out of the box\n"
[[step]]
command = "cat \"$HOME/.ssh/id_ed25519\""
[[step]]
command = {other}
[[step]]
context = 146000
text = "Going on."
[[step]]
delay_ms = 3000
text = "Still going."
"#,
            escape = toml_string(&escape.display().to_string()),
            other = toml_string(&format!("cat {}", self.other.join("secret.txt").display())),
        )
    }

    fn project(&self, sandbox: &str) -> Project {
        let p = Project::bare(PLAN, &self.scenario(), "");
        p.write(
            "ralph.toml",
            &format!(
                "[agent]\ncommand = \"ralph sim scenario.toml\"\nsandbox = \"{sandbox}\"\nenv = {{ HOME = {} }}\n[loop]\nmax_iterations = 1\n[breaker]\nno_progress = 9\n[sandbox]\nhome = [\".claude\"]\n",
                toml_string(&self.home.display().to_string())
            ),
        );
        p.git_init();
        p
    }
}

fn transcripts(p: &Project) -> String {
    let mut files = Vec::new();
    crate::common::files_under(&p.path(".ralph/runs"), &mut files);
    files
        .iter()
        .map(|f| String::from_utf8_lossy(&std::fs::read(f).unwrap()).into_owned())
        .collect()
}

#[test]
fn in_the_box_the_work_is_committed_and_what_is_outside_is_refused() {
    if !crate::common::bwrap_works() {
        return;
    }
    let w = World::new();
    let p = w.project("bwrap");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let started = &run.of("iteration_started")[0];
    assert!(
        started["command"][0].as_str().unwrap().ends_with("bwrap"),
        "{started}"
    );
    // The work in the project: committed at the checkpoint.
    assert_eq!(run.of("checkpoint").len(), 1, "{}", run.describe());
    assert!(
        p.head_files().contains(&"work.txt".to_string()),
        "{:?}",
        p.head_files()
    );
    // Nothing got out, nothing came in.
    assert!(!w.outside.join("escaped.txt").exists());
    let seen = transcripts(&p);
    assert!(!seen.contains(KEY) && !seen.contains(OTHER));
    // The handoff says what was refused, in the agent's words.
    let handoff = std::fs::read_to_string(p.handoffs().last().unwrap()).unwrap();
    assert!(handoff.contains("## Failed"), "{handoff}");
    assert!(handoff.contains("Read-only file system"), "{handoff}");
    assert!(
        handoff.contains("id_ed25519: No such file or directory"),
        "{handoff}"
    );
    assert!(
        handoff.contains("secret.txt: No such file or directory"),
        "{handoff}"
    );
    // ralph's doctor agrees.
    let doctor = p.ralph().args(["doctor", "--json"]).output().unwrap();
    let doctor: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let check = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "sandbox")
        .unwrap()
        .clone();
    assert_eq!(check["verdict"], "ok", "{check}");
}

#[test]
fn without_the_box_the_same_run_reaches_all_three() {
    let w = World::new();
    let p = w.project("none");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(
        !run.of("iteration_started")[0]["command"][0]
            .as_str()
            .unwrap()
            .ends_with("bwrap")
    );
    assert!(p.head_files().contains(&"work.txt".to_string()));
    let escaped = w.outside.join("escaped.txt");
    assert_eq!(
        std::fs::read_to_string(&escaped).unwrap(),
        "out of the box\n"
    );
    // The agent read both (ralph redacts nothing of it: not a credential shape).
    let seen = transcripts(&p);
    assert!(seen.contains(KEY) && seen.contains(OTHER));
    let handoff = std::fs::read_to_string(p.handoffs().last().unwrap()).unwrap();
    assert!(!handoff.contains("## Failed"), "{handoff}");
}

#[test]
fn a_missing_sandbox_tool_is_a_clear_error_not_a_run_without_it() {
    let w = World::new();
    let p = w.project("bwrap");
    // A PATH without bwrap (but with git and sh for the rest).
    let bin = tempfile::tempdir().unwrap();
    for tool in ["sh", "git", "env", "cat"] {
        if let Some(path) = which(tool) {
            std::os::unix::fs::symlink(path, bin.path().join(tool)).unwrap();
        }
    }
    let out = p
        .ralph()
        .env("PATH", bin.path())
        .args(["run", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("bubblewrap (`bwrap`) is not installed"),
        "{stderr}"
    );
    assert!(stderr.contains("hint: install bubblewrap"), "{stderr}");
    assert!(!p.path(".ralph/runs").exists(), "no agent ran");
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}
