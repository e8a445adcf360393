//! opencode (`opencode run --format json`), the real CLI at the pinned
//! version (scripts/opencode-version, installed by
//! scripts/install-opencode.sh), against a mock of an OpenAI-compatible
//! provider on 127.0.0.1 (`tests/agent_mock/openai.rs`), configured in the
//! project's `opencode.json` with a `baseURL`.
//!
//! Skipped when the CLI is not installed (`RALPH_E2E_REQUIRE=1`: failed).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::agent_mock::cli::{self, Cli, Installed};
use crate::agent_mock::openai::{self, OpenAi};
use crate::agent_mock::{MockServer, Reply};
use serde_json::json;

fn opencode_cli() -> Cli {
    let pinned = include_str!("../../scripts/opencode-version");
    Cli {
        product: "opencode",
        env: "RALPH_E2E_OPENCODE",
        script: "scripts/install-opencode.sh",
        pinned,
        default_path: format!(
            "target/opencode-e2e/{}/node_modules/opencode-linux-x64/bin/opencode",
            pinned.trim()
        ),
    }
}

/// A project for opencode: `repo/` (git, `opencode.json` naming the mock
/// provider) and `home/` (HOME and the XDG directories, so nothing of the
/// user's own setup is read or written).
struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
}

impl Setup {
    fn new(name: &str, api: &str) -> Setup {
        let dir = tempfile::Builder::new()
            .prefix(&format!("ralph-opencode-{name}-"))
            .tempdir()
            .unwrap();
        let root = dir.path().join("repo");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        git2::Repository::init(&root).unwrap();
        std::fs::write(root.join("opencode.json"), opencode_json(api)).unwrap();
        Setup {
            _dir: dir,
            root,
            home,
        }
    }

    fn env(&self) -> Vec<(String, String)> {
        opencode_env(&self.home)
    }
}

/// The project's `opencode.json`: one OpenAI-compatible provider whose
/// `baseURL` is the mock, its model with a 200k window.
fn opencode_json(api: &str) -> String {
    json!({
        "$schema": "https://opencode.ai/config.json",
        "provider": {"mock": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Mock",
            "options": {"baseURL": format!("{api}/v1"), "apiKey": "dummy-e2e-key"},
            "models": {"mock-model": {"name": "Mock model", "limit": {"context": 200000, "output": 8192},
                "cost": {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}}}
        }},
        "model": "mock/mock-model",
        "autoupdate": false,
        "share": "disabled"
    })
    .to_string()
}

/// The environment opencode runs with: its own HOME, no update checks, no
/// models.dev download, no LSP downloads.
fn opencode_env(home: &Path) -> Vec<(String, String)> {
    let h = home.display();
    [
        ("HOME", h.to_string()),
        ("XDG_CONFIG_HOME", format!("{h}/.config")),
        ("XDG_DATA_HOME", format!("{h}/.local/share")),
        ("XDG_CACHE_HOME", format!("{h}/.cache")),
        ("XDG_STATE_HOME", format!("{h}/.local/state")),
        ("OPENCODE_DISABLE_AUTOUPDATE", "1".into()),
        ("OPENCODE_DISABLE_MODELS_FETCH", "1".into()),
        ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1".into()),
        ("OPENCODE_DISABLE_SHARE", "1".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn run_opencode(oc: &Installed, setup: &Setup, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(&oc.path);
    cmd.current_dir(&setup.root)
        .args(["run", "--format", "json"])
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(setup.env());
    cli::run(&mut cmd, Duration::from_secs(40))
}

fn stdout_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The CLI itself, no ralph: it writes a file through its `write` tool and
/// ends; what it prints is the decoder's fixture.
#[test]
fn opencode_writes_a_file_against_the_mock() {
    let Some(oc) = opencode_cli().find("opencode_writes_a_file_against_the_mock") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let api = MockServer::start(
        &dir.path().join("api.jsonl"),
        OpenAi::new(|chat| match chat.assistant_turns() {
            0 => Reply::turn(12_000)
                .text("Writing hello.txt.")
                .tool("write", json!({"filePath": "hello.txt", "content": "hello\n"})),
            1 => Reply::turn(12_600)
                .tool("bash", json!({"command": "cat hello.txt", "description": "Show hello.txt"})),
            _ => Reply::turn(13_100).text("Done: hello.txt says hello."),
        }),
    );
    let setup = Setup::new("write", &api.url());
    let out = run_opencode(&oc, &setup, &["Create hello.txt saying hello"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("stderr: {stderr}\nrequests:\n{}", api.describe());
    eprintln!("tools: {:?}", api.main_requests().first().map(|r| openai::Chat(r).tools()));
    cli::record(&format!("opencode-{}", oc.version), "write-file.jsonl", &out.stdout);
    let lines = stdout_lines(&out);
    assert!(out.status.success(), "{:?}\n{}", out.status, String::from_utf8_lossy(&out.stdout));
    assert_eq!(std::fs::read_to_string(setup.root.join("hello.txt")).unwrap(), "hello\n");
    assert!(lines.iter().any(|l| l["type"] == "step_finish"));
}

/// An API error the provider will not retry: the CLI reports it and ends.
#[test]
fn opencode_reports_an_api_error() {
    let Some(oc) = opencode_cli().find("opencode_reports_an_api_error") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let api = MockServer::start(
        &dir.path().join("api.jsonl"),
        OpenAi::new(|_| openai::api_error("The model `mock-model` does not accept this request.")),
    );
    let setup = Setup::new("api-error", &api.url());
    let out = run_opencode(&oc, &setup, &["Create hello.txt saying hello"]);
    eprintln!("status {:?}\nstdout: {}\nstderr: {}\nrequests:\n{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr), api.describe());
    cli::record(&format!("opencode-{}", oc.version), "api-error.jsonl", &out.stdout);
}

/// A usage limit (429 `insufficient_quota`).
#[test]
fn opencode_reports_a_usage_limit() {
    let Some(oc) = opencode_cli().find("opencode_reports_a_usage_limit") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let api = MockServer::start(&dir.path().join("api.jsonl"), OpenAi::new(|_| openai::usage_limit()));
    let setup = Setup::new("limit", &api.url());
    let out = run_opencode(&oc, &setup, &["Create hello.txt saying hello"]);
    eprintln!("status {:?}\nstdout: {}\nstderr: {}\nrequests:\n{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr), api.describe());
    cli::record(&format!("opencode-{}", oc.version), "usage-limit.jsonl", &out.stdout);
}
