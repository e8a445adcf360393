//! Gemini CLI (`gemini -p … -o stream-json`), the real CLI at the pinned
//! version (scripts/gemini-version, installed by scripts/install-gemini.sh),
//! against a mock of the Gemini API on 127.0.0.1
//! (`tests/agent_mock/gemini.rs`): `GOOGLE_GEMINI_BASE_URL` points the
//! GenAI SDK at it, with `security.auth.selectedType = "gemini-api-key"`
//! in the CLI's settings (the base URL alone selects the "gateway" auth
//! type, which headless mode rejects).
//!
//! Skipped when the CLI is not installed (`RALPH_E2E_REQUIRE=1`: failed).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::agent_mock::cli::{self, Cli, Installed};
use crate::agent_mock::gemini::{self, Gemini};
use crate::agent_mock::{MockServer, Reply};
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
