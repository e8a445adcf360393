//! Gemini CLI (`gemini -p … -o stream-json`), the real CLI at the pinned
//! version (scripts/gemini-version, installed by scripts/install-gemini.sh),
//! against a mock of the Gemini API on 127.0.0.1
//! (`tests/agent_mock/gemini.rs`): `GOOGLE_GEMINI_BASE_URL` points the
//! GenAI SDK at it, with `security.auth.selectedType = "gemini-api-key"`
//! in the CLI's settings (the base URL alone selects the "gateway" auth
//! type, which headless mode rejects).
//!
//! The first tests run the CLI alone (and, with `RALPH_RECORD_FIXTURES=1`,
//! record what it prints as the decoder's fixtures); the rest run it under
//! `ralph run` with `[agent] kind = "gemini"`, as a user would.
//!
//! Skipped when the CLI is not installed (`RALPH_E2E_REQUIRE=1`: failed).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::agent_mock::cli::{self, Cli, Installed};
use crate::agent_mock::gemini::{self, Chat, Gemini};
use crate::agent_mock::{MockServer, Reply, cases};
use crate::real_claude::harness::{self, Project, Setup as RalphSetup, toml_str};
use serde_json::json;

fn gemini_cli() -> Cli {
    let pinned = include_str!("../../scripts/gemini-version");
    Cli {
        product: "Gemini CLI",
        env: "RALPH_E2E_GEMINI",
        script: "scripts/install-gemini.sh",
        pinned,
        default_path: format!(
            "target/gemini-e2e/{}/node_modules/.bin/gemini",
            pinned.trim()
        ),
    }
}

/// The model the tests ask for (no routing side queries with an explicit model).
const MODEL: &str = "gemini-2.5-flash";

/// A project for Gemini CLI: `repo/` (git) and `home/` (HOME with the
/// CLI's settings).
struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
}

impl Setup {
    fn new(name: &str) -> Setup {
        let dir = tempfile::Builder::new()
            .prefix(&format!("ralph-gemini-{name}-"))
            .tempdir()
            .unwrap();
        let root = dir.path().join("repo");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(home.join(".gemini")).unwrap();
        git2::Repository::init(&root).unwrap();
        std::fs::write(home.join(".gemini/settings.json"), settings_json()).unwrap();
        Setup {
            _dir: dir,
            root,
            home,
        }
    }
}

/// `~/.gemini/settings.json`: API-key auth, no usage statistics.
fn settings_json() -> String {
    json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": false},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true}
    })
    .to_string()
}

/// The environment Gemini CLI runs with against the mock.
fn gemini_env(home: &Path, api: &str) -> Vec<(String, String)> {
    [
        ("HOME", home.display().to_string()),
        ("GEMINI_API_KEY", "dummy-e2e-key".into()),
        ("GOOGLE_GEMINI_BASE_URL", api.to_string()),
        ("GEMINI_CLI_TRUST_WORKSPACE", "true".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn run_gemini(g: &Installed, setup: &Setup, api: &str, prompt: &str) -> std::process::Output {
    let mut cmd = Command::new(&g.path);
    cmd.current_dir(&setup.root)
        .args(["-m", MODEL, "-o", "stream-json", "--yolo", "-p", prompt])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(gemini_env(&setup.home, api));
    cli::run(&mut cmd, Duration::from_secs(90))
}

fn show(out: &std::process::Output, api: &MockServer) {
    eprintln!(
        "status {:?}\nstdout: {}\nstderr: {}\nrequests:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        api.describe()
    );
}

/// The CLI itself, no ralph: it writes a file through `write_file` and
/// ends; what it prints is the decoder's fixture.
#[test]
fn gemini_writes_a_file_against_the_mock() {
    let Some(g) = gemini_cli().find("gemini_writes_a_file_against_the_mock") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let api = MockServer::start(
        &dir.path().join("api.jsonl"),
        Gemini::new(|chat| match chat.assistant_turns() {
            0 => Reply::turn(12_000).text("Writing hello.txt.").tool(
                "write_file",
                json!({"file_path": "hello.txt", "content": "hello\n"}),
            ),
            1 => Reply::turn(12_600).tool(
                "run_shell_command",
                json!({"command": "cat hello.txt", "description": "Show hello.txt"}),
            ),
            _ => Reply::turn(13_100).text("Done: hello.txt says hello."),
        }),
    );
    let setup = Setup::new("write");
    let out = run_gemini(&g, &setup, &api.url(), "Create hello.txt saying hello");
    show(&out, &api);
    eprintln!(
        "tools: {:?}",
        api.main_requests().first().map(|r| gemini::Chat(r).tools())
    );
    cli::record(
        &format!("gemini-{}", g.version),
        "write-file.jsonl",
        &out.stdout,
    );
    assert!(out.status.success());
    assert_eq!(
        std::fs::read_to_string(setup.root.join("hello.txt")).unwrap(),
        "hello\n"
    );
}

/// An API error the CLI does not retry.
#[test]
fn gemini_reports_an_api_error() {
    let Some(g) = gemini_cli().find("gemini_reports_an_api_error") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let api = MockServer::start(
        &dir.path().join("api.jsonl"),
        Gemini::new(|_| gemini::api_error("Request contains an invalid argument.")),
    );
    let setup = Setup::new("api-error");
    let out = run_gemini(&g, &setup, &api.url(), "Create hello.txt saying hello");
    show(&out, &api);
    cli::record(
        &format!("gemini-{}", g.version),
        "api-error.jsonl",
        &out.stdout,
    );
}

/// A usage limit: 429 `RESOURCE_EXHAUSTED`, per-day quota.
#[test]
fn gemini_reports_a_usage_limit() {
    let Some(g) = gemini_cli().find("gemini_reports_a_usage_limit") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let api = MockServer::start(
        &dir.path().join("api.jsonl"),
        Gemini::new(|_| gemini::usage_limit()),
    );
    let setup = Setup::new("limit");
    let out = run_gemini(&g, &setup, &api.url(), "Create hello.txt saying hello");
    show(&out, &api);
    cli::record(
        &format!("gemini-{}", g.version),
        "usage-limit.jsonl",
        &out.stdout,
    );
}

// ------------------------------------------------------------ under ralph

/// A ralph project whose agent is the real Gemini CLI: `[agent] kind =
/// "gemini"`, `--yolo` (headless, the CLI offers no tool that would ask),
/// its own HOME with its settings.
fn ralph_project(name: &str, g: &Installed, setup: &RalphSetup) -> Project {
    Project::for_agent(
        name,
        &format!("Gemini CLI {}", g.version),
        setup,
        |_, home| {
            std::fs::create_dir_all(home.join(".gemini")).unwrap();
            std::fs::write(home.join(".gemini/settings.json"), settings_json()).unwrap();
            let env: Vec<String> = gemini_env(home, "@API_URL@")
                .into_iter()
                .map(|(k, v)| format!("{k} = {}", toml_str(&v)))
                .collect();
            format!(
                "kind = \"gemini\"\ncommand = {}\nmodel = \"{MODEL}\"\nargs = [\"--yolo\"]\nenv = {{ {} }}",
                toml_str(g.path.to_str().unwrap()),
                env.join(", ")
            )
        },
    )
}

fn serve(p: &Project, script: impl Fn(&Chat) -> Reply + Send + Sync + 'static) -> MockServer {
    let api = MockServer::start(&p.base.join("api-requests.jsonl"), Gemini::new(script));
    p.configure(&api.url());
    api
}

const PLAN: &str = "# E2E plan\n\n- [ ] Create hello.txt saying hello\n";

fn ralph_setup() -> RalphSetup<'static> {
    RalphSetup {
        plan: PLAN,
        idle_timeout: "60s",
        iteration_timeout: "90s",
        ..RalphSetup::default()
    }
}

/// One iteration: Gemini CLI writes a file, checks off the item and
/// commits, and ends with the promise. Not metered live: the iteration
/// has no context reading, and ralph does not invent one.
#[test]
fn ralph_runs_gemini_to_completion() {
    let _serial = harness::serial();
    let Some(g) = gemini_cli().find("ralph_runs_gemini_to_completion") else {
        return;
    };
    let p = ralph_project("gm-complete", &g, &ralph_setup());
    let api = serve(&p, |chat| {
        match chat.assistant_turns() {
        0 => Reply::turn(20_000)
            .text("I'll create hello.txt.")
            .tool("write_file", json!({"file_path": "hello.txt", "content": "hello\n"})),
        1 => Reply::turn(28_000).tool(
            "run_shell_command",
            json!({
                "command": "sed -i 's/- \\[ \\] Create/- [x] Create/' fix_plan.md && git add hello.txt fix_plan.md && git commit -q -m 'Create hello.txt'",
                "description": "Check off and commit",
            }),
        ),
        _ => Reply::turn(33_000).text("hello.txt exists and the plan is done.\n\n<promise>COMPLETE</promise>"),
    }
    });
    let (code, took) = p.run_ralph(&["--json"], Duration::from_secs(150));
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(code, 0, "ralph should complete\n{}", diag());
    eprintln!("gm-complete: ralph took {took:.1?}");
    assert_eq!(p.read("hello.txt"), "hello\n");
    assert_eq!(p.log(), ["Create hello.txt", "initial"], "{}", diag());
    let first = Chat(&api.main_requests()[0]).user_text();
    assert!(first.contains("# Iteration 1:"), "{first}");
    let state = p.state();
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(state["context_history"][0]["peak_tokens"], 0, "{state:#}");
    // Every reading says it is no measure of the context.
    let readings = p.events_named("context");
    assert!(!readings.is_empty());
    assert!(
        readings.iter().all(|e| e["reading"]["not_metered"] == true),
        "{readings:?}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args(["context", "--json"])
        .current_dir(&p.root)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["metered_live"], false, "{report:#}");
    assert!(p.handoffs().is_empty());
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// In the sandbox (`[agent] sandbox = "bwrap"`, no `[sandbox]` section):
/// the key comes from ralph's own environment as a user exports it, and
/// only Gemini CLI's own (`GEMINI_API_KEY`) and its `~/.gemini` go in; the
/// CLI and its Node packages run; another credential and `~/.ssh` stay out.
#[test]
fn ralph_runs_gemini_in_the_sandbox() {
    let _serial = harness::serial();
    let Some(g) = gemini_cli().find("ralph_runs_gemini_in_the_sandbox") else {
        return;
    };
    if !crate::common::bwrap_works() {
        return;
    }
    let setup = RalphSetup {
        extra: "",
        ..ralph_setup()
    };
    let mut p = Project::for_agent(
        "gm-sandbox",
        &format!("Gemini CLI {}", g.version),
        &setup,
        |_, home| {
            std::fs::create_dir_all(home.join(".gemini")).unwrap();
            std::fs::write(home.join(".gemini/settings.json"), settings_json()).unwrap();
            let env: Vec<String> = gemini_env(home, "@API_URL@")
                .into_iter()
                .filter(|(k, _)| k != "GEMINI_API_KEY")
                .map(|(k, v)| format!("{k} = {}", toml_str(&v)))
                .collect();
            format!(
                "kind = \"gemini\"\nsandbox = \"bwrap\"\ncommand = {}\nmodel = \"{MODEL}\"\nargs = [\"--yolo\"]\nenv = {{ {} }}",
                toml_str(g.path.to_str().unwrap()),
                env.join(", ")
            )
        },
    );
    cases::plant_secrets(&mut p, "GEMINI_API_KEY");
    let api = serve(&p, |chat| {
        match chat.assistant_turns() {
        0 => Reply::turn(20_000)
            .text("I'll create hello.txt.")
            .tool("write_file", json!({"file_path": "hello.txt", "content": "hello\n"})),
        1 => Reply::turn(24_000).tool(
            "run_shell_command",
            json!({
                "command": format!("{}; sed -i 's/- \\[ \\] Create/- [x] Create/' fix_plan.md && git add hello.txt fix_plan.md && git commit -q -m 'Create hello.txt'", cases::LOOK_AROUND),
                "description": "Look around, check off and commit",
            }),
        ),
        _ => Reply::turn(28_000).text("Done.\n\n<promise>COMPLETE</promise>"),
    }
    });
    let (code, took) = p.run_ralph(&["--json"], Duration::from_secs(150));
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(code, 0, "ralph should complete in the box\n{}", diag());
    eprintln!("gm-sandbox: ralph took {took:.1?}");
    cases::the_box_held(&p, "GEMINI_API_KEY");
    // seen.txt, left uncommitted, is in ralph's final commit.
    assert_eq!(p.log()[1..], ["Create hello.txt", "initial"], "{}", diag());
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// An API error every time: the breaker opens on the second same error.
#[test]
fn ralph_recognises_a_gemini_api_error() {
    let _serial = harness::serial();
    let Some(g) = gemini_cli().find("ralph_recognises_a_gemini_api_error") else {
        return;
    };
    let setup = RalphSetup {
        max_iterations: 4,
        breaker: "same_error = 2\nconsecutive_failures = 10\nno_progress = 10",
        ..ralph_setup()
    };
    let p = ralph_project("gm-api-error", &g, &setup);
    let api = serve(&p, |_| {
        gemini::api_error("E2E: this request is always refused")
    });
    cases::refused_every_time_opens_the_breaker(&p, &api);
}

/// A usage limit (429 `RESOURCE_EXHAUSTED`, a per-day quota the CLI gives
/// up on at once): recognised; with waiting off the run ends with exit 5.
#[test]
fn ralph_recognises_a_gemini_usage_limit() {
    let _serial = harness::serial();
    let Some(g) = gemini_cli().find("ralph_recognises_a_gemini_usage_limit") else {
        return;
    };
    let setup = RalphSetup {
        extra: "[rate_limit]\nwait = false\n",
        ..ralph_setup()
    };
    let p = ralph_project("gm-limit", &g, &setup);
    let api = serve(&p, |_| gemini::usage_limit());
    cases::a_usage_limit_ends_the_run(&p, &api);
}

/// SIGINT to ralph while Gemini CLI's shell tool sleeps: the agent and its
/// tool end, the work is saved, ralph exits 130.
#[test]
fn sigint_stops_gemini_and_its_tool() {
    let _serial = harness::serial();
    let Some(g) = gemini_cli().find("sigint_stops_gemini_and_its_tool") else {
        return;
    };
    let p = ralph_project("gm-sigint", &g, &ralph_setup());
    cases::sigint_stops_the_agent_and_its_tool(&p, "run_shell_command", |p, script| {
        serve(p, move |chat| script(chat))
    });
}

/// kill -9 of ralph while Gemini CLI's tool sleeps: the next `ralph run`
/// takes over (ends what was left) and finishes.
#[test]
fn kill_9_then_takeover_with_gemini() {
    let _serial = harness::serial();
    let Some(g) = gemini_cli().find("kill_9_then_takeover_with_gemini") else {
        return;
    };
    let p = ralph_project("gm-kill9", &g, &ralph_setup());
    cases::kill_9_then_takeover(&p, "run_shell_command", |p, script| {
        serve(p, move |chat| script(chat))
    });
}
