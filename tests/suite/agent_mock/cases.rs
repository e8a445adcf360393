//! The cases the real-CLI suites of opencode and Gemini CLI share, under
//! `ralph run`: SIGINT while the agent's shell tool runs, and kill -9 of
//! ralph then a takeover. Each suite gives its CLI's shell tool and how it
//! serves its mock; the rest (the script, the checks) is one. Also the
//! sandbox run's setup and checks, which Codex's suite shares too.

use std::time::Duration;

use serde_json::json;

use super::{MockServer, Reply};
use crate::real_claude::harness::{self, Project, iteration_of};

/// What the scripts read of a request, whatever the provider.
pub trait Conversation {
    /// All user text: ralph's prompt, tool results.
    fn user_text(&self) -> String;
    /// Assistant turns already in the conversation.
    fn assistant_turns(&self) -> usize;
}

impl Conversation for super::openai::Chat<'_> {
    fn user_text(&self) -> String {
        super::openai::Chat::user_text(self)
    }
    fn assistant_turns(&self) -> usize {
        super::openai::Chat::assistant_turns(self)
    }
}

impl Conversation for super::gemini::Chat<'_> {
    fn user_text(&self) -> String {
        super::gemini::Chat::user_text(self)
    }
    fn assistant_turns(&self) -> usize {
        super::gemini::Chat::assistant_turns(self)
    }
}

/// A test's script for its CLI's mock.
pub type Script = Box<dyn Fn(&dyn Conversation) -> Reply + Send + Sync>;

/// A sleep only this test runs, to find its process by.
fn own_sleep(seconds: u32) -> String {
    format!("sleep {seconds}.{:05}", std::process::id() % 100_000)
}

/// SIGINT to ralph while the agent's shell tool (`shell`: its name in the
/// CLI's vocabulary) sleeps: the agent and its tool end, the work is saved
/// in a checkpoint commit, ralph exits 130.
pub fn sigint_stops_the_agent_and_its_tool(
    p: &Project,
    shell: &'static str,
    serve: impl FnOnce(&Project, Script) -> MockServer,
) {
    let sleep = own_sleep(40);
    let command = format!("echo started > progress.txt; {sleep}; echo slept");
    let api = serve(
        p,
        Box::new(
            move |chat: &dyn Conversation| match chat.assistant_turns() {
                0 => Reply::turn(20_000).tool(
                    shell,
                    json!({"command": command, "description": "Long test suite"}),
                ),
                _ => Reply::turn(21_000).text("E2E: the tool was not interrupted"),
            },
        ),
    );
    let mut ralph = p.spawn_ralph_until(&["--json"], &sleep, || api.describe());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(ralph.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = p.wait(&mut ralph, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130), "{}", p.diagnostics());
    assert!(
        harness::wait_until(Duration::from_secs(5), || harness::pids_matching(&sleep)
            .is_empty()),
        "the tool still runs"
    );
    p.assert_nothing_left();
    assert_eq!(p.state()["status"], "interrupted");
    let log = p.log();
    assert!(log[0].starts_with("ralph: checkpoint iter 1"), "{log:?}");
}

/// kill -9 of ralph while the agent's shell tool sleeps: the next `ralph
/// run` takes over (ends what was left, a crash handoff) and finishes.
pub fn kill_9_then_takeover(
    p: &Project,
    shell: &'static str,
    serve: impl FnOnce(&Project, Script) -> MockServer,
) {
    let sleep = own_sleep(50);
    let command = format!("echo started > progress.txt; {sleep}");
    let api = serve(
        p,
        Box::new(move |chat: &dyn Conversation| {
            match (iteration_of(&chat.user_text()), chat.assistant_turns()) {
                (1, 0) => Reply::turn(20_000).tool(
                    shell,
                    json!({"command": command, "description": "Long test suite"}),
                ),
                (1, _) => Reply::turn(21_000).text("E2E: iteration 1 went on"),
                (_, 0) => Reply::turn(22_000).tool(
                    shell,
                    json!({"command": "echo hello > hello.txt && sed -i 's/- \\[ \\] Create/- [x] Create/' fix_plan.md && git add hello.txt fix_plan.md && git commit -q -m 'Create hello.txt'", "description": "Finish"}),
                ),
                _ => Reply::turn(23_000).text("Done.\n\n<promise>COMPLETE</promise>"),
            }
        }),
    );
    let mut ralph = p.spawn_ralph_until(&["--json"], &sleep, || api.describe());
    // Tools in sessions of their own (opencode runs its shell detached) are
    // recorded on ralph's one-second beat, for the takeover to end them.
    std::thread::sleep(Duration::from_secs(3));
    ralph.kill().unwrap();
    ralph.wait().unwrap();
    let (code, _) = p.run_ralph(&["--json"], Duration::from_secs(150));
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(code, 0, "the takeover run completes\n{}", diag());
    assert!(
        harness::wait_until(Duration::from_secs(5), || harness::pids_matching(&sleep)
            .is_empty()),
        "the first tool still runs"
    );
    assert_eq!(p.read("hello.txt"), "hello\n");
    p.assert_nothing_left();
}

/// `ralph run` against a mock that refuses every request with a 400: the
/// breaker opens on the same error, and each iteration's error says what
/// the API said.
pub fn refused_every_time_opens_the_breaker(p: &Project, api: &MockServer) {
    let (code, _) = p.run_ralph(&["--json"], Duration::from_secs(150));
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(code, 3, "breaker open\n{}", diag());
    let state = p.state();
    assert_eq!(state["breaker"]["rule"], "same_error", "{state:#}");
    for h in state["history"].as_array().unwrap() {
        let error = h["error"].as_str().unwrap_or("");
        assert!(error.contains("API error 400"), "{h}");
        assert!(error.contains("always refused"), "{h}");
    }
    p.assert_nothing_left();
}

/// `ralph run` (with `rate_limit.wait = false`) against a mock whose every
/// answer is a usage limit: recognised, the run ends with exit 5.
pub fn a_usage_limit_ends_the_run(p: &Project, api: &MockServer) {
    let (code, _) = p.run_ralph(&["--json"], Duration::from_secs(150));
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(code, 5, "usage limit, waiting off\n{}", diag());
    let ended = p.events_named("run_ended");
    let reason = ended[0]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("rate_limit.wait is off"),
        "{reason}\n{}",
        diag()
    );
    p.assert_nothing_left();
}

/// What the agent's shell runs in a sandbox test: its environment and an
/// attempt to read the planted private key, into `seen.txt`.
pub const LOOK_AROUND: &str = "{ env; cat ~/.ssh/id_ed25519; } > seen.txt 2>&1";

/// A sandbox test's secrets: a private key planted at `~/.ssh/id_ed25519`,
/// the agent's own `key` in ralph's environment (as a user exports it) and
/// a `GITHUB_TOKEN` canary the box must withhold.
pub fn plant_secrets(p: &mut Project, key: &str) {
    std::fs::create_dir_all(p.home.join(".ssh")).unwrap();
    std::fs::write(p.home.join(".ssh/id_ed25519"), "PRIVATE-KEY-CANARY").unwrap();
    p.ralph_env = vec![
        (key.into(), "dummy-e2e-key".into()),
        ("GITHUB_TOKEN".into(), "GITHUB-TOKEN-CANARY".into()),
    ];
}

/// After a sandbox run: the agent ran under bwrap and wrote `hello.txt`;
/// what it saw ([`LOOK_AROUND`]) holds its own key, neither the canary nor
/// the private key.
pub fn the_box_held(p: &Project, key: &str) {
    let command = &p.events_named("iteration_started")[0]["command"][0];
    assert!(command.as_str().unwrap().ends_with("bwrap"), "{command}");
    assert_eq!(p.read("hello.txt"), "hello\n");
    let seen = p.read("seen.txt");
    assert!(seen.contains(&format!("{key}=dummy-e2e-key")), "{seen}");
    assert!(!seen.contains("GITHUB-TOKEN-CANARY"), "{seen}");
    assert!(
        !seen.contains("PRIVATE-KEY-CANARY") && seen.contains("No such file"),
        "{seen}"
    );
}
