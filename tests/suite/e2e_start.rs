//! One run start (`supervisor/start.rs`) and one signal path
//! (`platform::signals`), issue 36: a single loop and a parallel run's
//! coordinator take the same start and read signals the same way, so a
//! protection either had holds for both. Each test runs both kinds (or the
//! one that lacked it).

use crate::common;

use std::time::Duration;

use common::Project;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const LIMIT: Duration = Duration::from_secs(120);

const TWO: &str = "# Two\n\n- [ ] alpha\n- [ ] bravo\n";

/// The kinds of run a user starts here: one loop, and a coordinator.
const KINDS: [&[&str]; 2] = [&[], &["--workers", "2"]];

fn ralph_branches(p: &Project) -> Vec<String> {
    p.repo()
        .branches(Some(git2::BranchType::Local))
        .unwrap()
        .filter_map(|b| b.ok()?.0.name().ok()?.map(str::to_string))
        .filter(|n| n.starts_with("ralph/"))
        .collect()
}

/// An agent that is not installed is bad input, refused before anything
/// is made. A coordinator used to make a worktree and a branch per worker,
/// start each worker (which failed on it), and end `incomplete` (exit 4)
/// with the branches left to a person, a handoff and a report.
#[test]
fn an_agent_not_installed_is_refused_before_anything_is_made() {
    for args in KINDS {
        let p = Project::new(TWO, common::IDLE, "");
        p.write(
            "ralph.toml",
            "[agent]\ncommand = \"no-such-agent-for-ralph\"\n",
        );
        let run = p.run(args, LIMIT);
        assert_eq!(run.code, Some(2), "{args:?}: {}", run.describe());
        assert!(
            run.stderr
                .contains("`no-such-agent-for-ralph` (agent.command) is not on PATH"),
            "{args:?}: {}",
            run.stderr
        );
        assert!(
            ralph_branches(&p).is_empty(),
            "{args:?}: {:?}",
            ralph_branches(&p)
        );
        assert!(
            !p.path(".ralph").exists(),
            "{args:?}: .ralph/ made: {:?}",
            std::fs::read_dir(p.path(".ralph")).map(|d| d.count())
        );
    }
}

/// A tool the agent of a killed single loop left running in a session of
/// its own (a dev server) is ended by the next start, whichever kind it
/// is (`leak.rs` holds it for a loop after a loop). A coordinator used to
/// leave it running beside its workers for the night.
#[test]
fn a_killed_loops_tools_are_ended_by_a_parallel_runs_start() {
    let server = r#"
[[step]]
context = 30000
text = "Starting a server."
command = "setsid sleep 617 >/dev/null 2>&1 < /dev/null &"
[[step]]
sleep_ms = 30000
"#;
    let p = Project::new(TWO, server, "[loop]\nrequire_plan_complete = false\n");
    let mut child = p.spawn_unread_run();
    let sleeper = common::sleep_started("sleep 617", Duration::from_secs(20));
    let sid: i32 = common::proc_stat(sleeper).unwrap()[3].parse().unwrap();
    common::wait_for_session_in_lock(&p, sid);
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(common::alive(sleeper), "the tool outlives ralph's SIGKILL");
    // The workers' agents do their item and check it off.
    p.write(
        "scenario.toml",
        r#"
[[step]]
context = 20000
command = "mkdir -p out && echo done > out/$RALPH_ITEM.txt && sed -i '0,/- \\[ \\]/s//- [x]/' .ralph/worker-plan.md"
[[step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#,
    );
    let run = p.run(&["--workers", "2"], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    common::wait_until("the tool is gone", Duration::from_secs(2), || {
        !common::alive(sleeper)
    });
}

/// SIGHUP with the terminal gone (the pipes closed, as by a dropped ssh
/// session) leaves either kind working to the end.
#[test]
fn sighup_with_the_terminal_gone_leaves_either_kind_working_to_the_end() {
    for args in KINDS {
        let p = Project::new(TWO, crate::e2e_workers::ONE_ITEM, "");
        let mut child = p.spawn_run_human(args);
        common::wait_for_event(&p, "context", Duration::from_secs(30));
        kill(Pid::from_raw(child.id() as i32), Signal::SIGHUP).unwrap();
        drop(child.stdout.take());
        drop(child.stderr.take());
        let status = common::wait_exit(child, LIMIT);
        assert_eq!(status.code(), Some(0), "{args:?}: {}", p.diagnose());
        let log = p.read(".ralph/events.jsonl");
        assert!(log.contains("\"outcome\":\"completed\""), "{args:?}: {log}");
        let plan = p.read("fix_plan.md");
        assert!(
            plan.contains("- [x] alpha") && plan.contains("- [x] bravo"),
            "{args:?}: {plan}"
        );
    }
}

/// SIGTERM is an interrupt for either kind: the work checkpointed, exit 130.
#[test]
fn sigterm_interrupts_either_kind_with_exit_130() {
    for args in KINDS {
        let p = Project::new(TWO, crate::e2e_workers::ONE_ITEM, "");
        let child = p.spawn_run_human(args);
        common::wait_for_event(&p, "context", Duration::from_secs(30));
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        let run = common::Run::wait(child, LIMIT);
        assert_eq!(run.code, Some(130), "{args:?}: {}", run.describe());
    }
}
