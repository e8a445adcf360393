//! The project is found from a subdirectory, as git finds a repository:
//! `ralph status`, `ralph stop` and `ralph run --dry-run` run in `src/`
//! (or with `-C src`) act on the project above it, and leave no `.ralph/`
//! in `src/`.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::common::{Project, Run, wait_for_event};

const PLAN: &str = "# Ship the parser\n\n- [ ] parser\n- [ ] tests\n";
const LIMIT: Duration = Duration::from_secs(60);

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn ok(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn status_stop_and_dry_run_find_the_project_from_a_subdirectory() {
    // An agent that works a little, then takes its time: a run to look at
    // and stop.
    let scenario = "[[step]]\ncontext = 20000\npath = \"src/work.txt\"\ncontent = \"half done\\n\"\n\
                    [[step]]\nsleep_ms = 20000\n[[step]]\nresult = \"never reached\"\n";
    let p = Project::bare(PLAN, scenario, "[context]\ngrace = \"5s\"\n");
    p.write("src/lib.rs", "// the code\n");
    p.git_init();
    let src = p.path("src");
    let in_src = |args: &[&str]| p.ralph().current_dir(&src).args(args).output().unwrap();

    // The dry run previews the root's next iteration: its plan, its agent.
    let dry = ok(&in_src(&["run", "--dry-run"]));
    assert!(dry.contains("# iteration: 1\n"), "{dry}");
    assert!(dry.contains("sim scenario.toml"), "{dry}");
    assert!(dry.contains("Ship the parser"), "{dry}");

    let child = p.spawn_run(&[]);
    wait_for_event(&p, "context", Duration::from_secs(20));
    for status in [
        in_src(&["status", "--json"]),
        p.ralph()
            .args(["-C", "src", "status", "--json"])
            .output()
            .unwrap(),
    ] {
        ok(&status);
        let status = json(&status);
        assert_eq!(status["status"], "running", "{status}");
        assert_eq!(status["iteration"], 1, "{status}");
    }
    ok(&in_src(&["stop"]));
    let run = Run::wait(child, LIMIT);
    assert_eq!(run.code, Some(6), "{}", run.describe());
    assert_eq!(run.ended()["outcome"], "stopped");
    assert!(!src.join(".ralph").exists(), "a .ralph/ was made in src/");
    assert!(!Path::new(&src.join("PROMPT.md")).exists());
}

#[test]
fn init_makes_the_project_where_it_is_told() {
    // A subproject inside another: `init` does not climb to the outer one.
    let p = Project::bare(PLAN, "", "");
    let sub = p.path("services/api");
    std::fs::create_dir_all(&sub).unwrap();
    ok(&p.ralph().current_dir(&sub).arg("init").output().unwrap());
    assert!(sub.join("ralph.toml").is_file());
    // From then on, commands in the subproject use it, not the outer one.
    let status = p
        .ralph()
        .current_dir(sub.join("."))
        .args(["status", "--json"])
        .output()
        .unwrap();
    assert_eq!(json(&status)["status"], "none");
}
