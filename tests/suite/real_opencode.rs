//! opencode (`opencode run --format json`), the real CLI at the pinned
//! version (scripts/opencode-version, installed by
//! scripts/install-opencode.sh), against a mock of an OpenAI-compatible
//! provider on 127.0.0.1 (`tests/agent_mock/openai.rs`), configured in the
//! project's `opencode.json` with a `baseURL`.
//!
//! The first tests run the CLI alone (and, with `RALPH_RECORD_FIXTURES=1`,
//! record what it prints as the decoder's fixtures); the rest run it under
//! `ralph run` with `[agent] kind = "opencode"`, as a user would.
//!
//! Skipped when the CLI is not installed (`RALPH_E2E_REQUIRE=1`: failed).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::agent_mock::cli::{self, Cli, Installed};
use crate::agent_mock::openai::{self, Chat, OpenAi};
use crate::agent_mock::{MockServer, Reply, cases};
use crate::real_claude::harness::{self, Project, Setup as RalphSetup, iteration_of, toml_str};
use regex::Regex;
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
    // A bound for a hung CLI, not a speed claim: opencode starts slowly on
    // a busy machine (it was killed at 40 s after its second request there).
    cli::run(&mut cmd, Duration::from_secs(120))
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
            0 => Reply::turn(12_000).text("Writing hello.txt.").tool(
                "write",
                json!({"filePath": "hello.txt", "content": "hello\n"}),
            ),
            1 => Reply::turn(12_600).tool(
                "bash",
                json!({"command": "cat hello.txt", "description": "Show hello.txt"}),
            ),
            _ => Reply::turn(13_100).text("Done: hello.txt says hello."),
        }),
    );
    let setup = Setup::new("write", &api.url());
    let out = run_opencode(&oc, &setup, &["Create hello.txt saying hello"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("stderr: {stderr}\nrequests:\n{}", api.describe());
    eprintln!(
        "tools: {:?}",
        api.main_requests().first().map(|r| openai::Chat(r).tools())
    );
    cli::record(
        &format!("opencode-{}", oc.version),
        "write-file.jsonl",
        &out.stdout,
    );
    let lines = stdout_lines(&out);
    assert!(
        out.status.success(),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(
        std::fs::read_to_string(setup.root.join("hello.txt")).unwrap(),
        "hello\n"
    );
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
    eprintln!(
        "status {:?}\nstdout: {}\nstderr: {}\nrequests:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        api.describe()
    );
    cli::record(
        &format!("opencode-{}", oc.version),
        "api-error.jsonl",
        &out.stdout,
    );
}

/// A usage limit (429 `insufficient_quota`).
#[test]
fn opencode_reports_a_usage_limit() {
    let Some(oc) = opencode_cli().find("opencode_reports_a_usage_limit") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let api = MockServer::start(
        &dir.path().join("api.jsonl"),
        OpenAi::new(|_| openai::usage_limit()),
    );
    let setup = Setup::new("limit", &api.url());
    let out = run_opencode(&oc, &setup, &["Create hello.txt saying hello"]);
    eprintln!(
        "status {:?}\nstdout: {}\nstderr: {}\nrequests:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        api.describe()
    );
    cli::record(
        &format!("opencode-{}", oc.version),
        "usage-limit.jsonl",
        &out.stdout,
    );
}

// ------------------------------------------------------------ under ralph

/// A ralph project whose agent is the real opencode: `[agent] kind =
/// "opencode"`, its config (the mock provider) in `OPENCODE_CONFIG`, its
/// own HOME and XDG directories.
fn ralph_project(name: &str, oc: &Installed, setup: &RalphSetup) -> Project {
    Project::for_agent(
        name,
        &format!("opencode {}", oc.version),
        setup,
        |_, home| {
            let config = home.join("opencode.json");
            let env: Vec<String> = opencode_env(home)
                .into_iter()
                .chain([("OPENCODE_CONFIG".to_string(), config.display().to_string())])
                .map(|(k, v)| format!("{k} = {}", toml_str(&v)))
                .collect();
            format!(
                "kind = \"opencode\"\ncommand = {}\nmodel = \"mock/mock-model\"\ncontext_window = 200000\nenv = {{ {} }}",
                toml_str(oc.path.to_str().unwrap()),
                env.join(", ")
            )
        },
    )
}

/// Start the mock with `script`, write opencode's config for it and ralph's.
fn serve(p: &Project, script: impl Fn(&Chat) -> Reply + Send + Sync + 'static) -> MockServer {
    let api = MockServer::start(&p.base.join("api-requests.jsonl"), OpenAi::new(script));
    std::fs::write(p.home.join("opencode.json"), opencode_json(&api.url())).unwrap();
    p.configure(&api.url());
    api
}

fn ralph_setup(plan: &'static str) -> RalphSetup<'static> {
    RalphSetup {
        plan,
        // opencode takes some seconds to start (its snapshot repository,
        // the file watcher).
        idle_timeout: "60s",
        iteration_timeout: "90s",
        ..RalphSetup::default()
    }
}

/// One iteration: opencode writes a file, checks off the item and commits
/// (its `write` and `bash` tools), and ends with the promise; ralph meters
/// every model step and ends the run completed.
#[test]
fn ralph_runs_opencode_to_completion() {
    let _serial = harness::serial();
    let Some(oc) = opencode_cli().find("ralph_runs_opencode_to_completion") else {
        return;
    };
    let p = ralph_project(
        "oc-complete",
        &oc,
        &ralph_setup("# E2E plan\n\n- [ ] Create hello.txt saying hello\n"),
    );
    let api = serve(&p, |chat| {
        match chat.assistant_turns() {
        0 => Reply::turn(20_000)
            .text("I'll create hello.txt.")
            .tool("write", json!({"filePath": "hello.txt", "content": "hello\n"})),
        1 => Reply::turn(28_000).tool(
            "bash",
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
    eprintln!("oc-complete: ralph took {took:.1?}");
    assert_eq!(p.read("hello.txt"), "hello\n");
    assert_eq!(p.log(), ["Create hello.txt", "initial"], "{}", diag());
    // The prompt reached the model through stdin.
    let first = Chat(&api.main_requests()[0]).user_text();
    assert!(first.contains("# Iteration 1:"), "{first}");
    assert!(
        first.contains("- [ ] Create hello.txt saying hello"),
        "{first}"
    );
    let state = p.state();
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(state["iteration"], 1);
    // Metered per model step: the peak is the last step's 33000 of 167000 usable.
    let peak = state["context_history"][0]["peak_percent"]
        .as_f64()
        .unwrap();
    assert!((peak - 19.8).abs() < 0.2, "peak {peak}%\n{state:#}");
    assert!(
        state["cost_usd"].as_f64().unwrap_or(0.0) > 0.0
            || state["history"][0]["cost_usd"].as_f64().unwrap_or(0.0) > 0.0,
        "cost from the steps: {state:#}"
    );
    assert!(p.handoffs().is_empty());
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// In the sandbox (`[agent] sandbox = "bwrap"`, no `[sandbox]` section):
/// opencode's config in its XDG config dir (`~/.config/opencode`), its
/// provider key from ralph's own environment (`{env:OPENAI_API_KEY}`), as
/// a user sets them up; only opencode's own dirs and keys go in; another
/// credential stays out. (Reading `~/.ssh` opencode refuses by itself:
/// its `external_directory` permission.)
#[test]
fn ralph_runs_opencode_in_the_sandbox() {
    let _serial = harness::serial();
    let Some(oc) = opencode_cli().find("ralph_runs_opencode_in_the_sandbox") else {
        return;
    };
    if !crate::common::bwrap_works() {
        return;
    }
    let mut p = Project::for_agent(
        "oc-sandbox",
        &format!("opencode {}", oc.version),
        &ralph_setup("# E2E plan\n\n- [ ] Create hello.txt saying hello\n"),
        |_, home| {
            for dir in [
                ".config/opencode",
                ".local/share/opencode",
                ".cache/opencode",
            ] {
                std::fs::create_dir_all(home.join(dir)).unwrap();
            }
            let env: Vec<String> = opencode_env(home)
                .into_iter()
                .map(|(k, v)| format!("{k} = {}", toml_str(&v)))
                .collect();
            format!(
                "kind = \"opencode\"\nsandbox = \"bwrap\"\ncommand = {}\nmodel = \"mock/mock-model\"\ncontext_window = 200000\nenv = {{ {} }}",
                toml_str(oc.path.to_str().unwrap()),
                env.join(", ")
            )
        },
    );
    cases::plant_secrets(&mut p, "OPENAI_API_KEY");
    let api = MockServer::start(
        &p.base.join("api-requests.jsonl"),
        OpenAi::new(|chat| {
            match chat.assistant_turns() {
            0 => Reply::turn(20_000)
                .text("I'll create hello.txt.")
                .tool("write", json!({"filePath": "hello.txt", "content": "hello\n"})),
            1 => Reply::turn(24_000).tool(
                "bash",
                json!({
                    // Only its environment: opencode itself refuses a
                    // command reading outside the project (`~/.ssh`).
                    "command": "env > seen.txt; sed -i 's/- \\[ \\] Create/- [x] Create/' fix_plan.md && git add hello.txt fix_plan.md && git commit -q -m 'Create hello.txt'",
                    "description": "Look around, check off and commit",
                }),
            ),
            _ => Reply::turn(28_000).text("Done.\n\n<promise>COMPLETE</promise>"),
        }
        }),
    );
    let config = opencode_json(&api.url()).replace("\"dummy-e2e-key\"", "\"{env:OPENAI_API_KEY}\"");
    assert!(config.contains("{env:OPENAI_API_KEY}"));
    std::fs::write(p.home.join(".config/opencode/opencode.json"), config).unwrap();
    p.configure(&api.url());
    let (code, took) = p.run_ralph(&["--json"], Duration::from_secs(150));
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(code, 0, "ralph should complete in the box\n{}", diag());
    eprintln!("oc-sandbox: ralph took {took:.1?}");
    let command = &p.events_named("iteration_started")[0]["command"][0];
    assert!(command.as_str().unwrap().ends_with("bwrap"), "{command}");
    assert_eq!(p.read("hello.txt"), "hello\n");
    // The provider got the key from ralph's environment, through the box.
    let first = &api.main_requests()[0];
    let auth = first.header("authorization").unwrap_or_default();
    assert_eq!(auth, "Bearer dummy-e2e-key", "{}", diag());
    let seen = p.read("seen.txt");
    assert!(
        seen.contains("HOME=") && !seen.contains("GITHUB-TOKEN-CANARY"),
        "{seen}"
    );
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// An API error every time: each iteration fails with the provider's
/// status and words, and the breaker opens on the second same error.
#[test]
fn ralph_recognises_an_opencode_api_error() {
    let _serial = harness::serial();
    let Some(oc) = opencode_cli().find("ralph_recognises_an_opencode_api_error") else {
        return;
    };
    let setup = RalphSetup {
        max_iterations: 4,
        breaker: "same_error = 2\nconsecutive_failures = 10\nno_progress = 10",
        ..ralph_setup("# E2E plan\n\n- [ ] Create hello.txt saying hello\n")
    };
    let p = ralph_project("oc-api-error", &oc, &setup);
    let api = serve(&p, |_| {
        openai::api_error("E2E: this request is always refused")
    });
    cases::refused_every_time_opens_the_breaker(&p, &api);
}

/// A usage limit (429 `insufficient_quota`, which opencode retries five
/// times before it gives up): ralph recognises the limit; with waiting off
/// the run ends with exit 5.
#[test]
fn ralph_recognises_an_opencode_usage_limit() {
    let _serial = harness::serial();
    let Some(oc) = opencode_cli().find("ralph_recognises_an_opencode_usage_limit") else {
        return;
    };
    let setup = RalphSetup {
        extra: "[rate_limit]\nwait = false\n",
        ..ralph_setup("# E2E plan\n\n- [ ] Create hello.txt saying hello\n")
    };
    let p = ralph_project("oc-limit", &oc, &setup);
    let api = serve(&p, |_| openai::usage_limit());
    cases::a_usage_limit_ends_the_run(&p, &api);
}

/// SIGINT to ralph while opencode's bash tool sleeps: the agent and its
/// tool end, the work is saved, ralph exits 130.
#[test]
fn sigint_stops_opencode_and_its_tool() {
    let _serial = harness::serial();
    let Some(oc) = opencode_cli().find("sigint_stops_opencode_and_its_tool") else {
        return;
    };
    let p = ralph_project(
        "oc-sigint",
        &oc,
        &ralph_setup("# E2E plan\n\n- [ ] Create hello.txt saying hello\n"),
    );
    cases::sigint_stops_the_agent_and_its_tool(&p, "bash", |p, script| {
        serve(p, move |chat| script(chat))
    });
}

/// kill -9 of ralph while opencode's tool sleeps: the next `ralph run`
/// takes over (ends what was left, a crash handoff) and finishes.
#[test]
fn kill_9_then_takeover_with_opencode() {
    let _serial = harness::serial();
    let Some(oc) = opencode_cli().find("kill_9_then_takeover_with_opencode") else {
        return;
    };
    let p = ralph_project(
        "oc-kill9",
        &oc,
        &ralph_setup("# E2E plan\n\n- [ ] Create hello.txt saying hello\n"),
    );
    cases::kill_9_then_takeover(&p, "bash", |p, script| serve(p, move |chat| script(chat)));
}

/// Where ralph asks the agent of iteration 1 for its handoff notes.
const NOTES: &str = ".ralph/notes/iter-001.md";

/// The context climbs past L2 in one model step. opencode takes no
/// message mid-session: ralph stops it, continues its session once
/// (`opencode run --session ID`) with the request for handoff notes,
/// commits the work in progress with a handoff quoting them, and the next
/// iteration resumes from it.
#[test]
fn opencode_past_l2_hands_off_and_resumes() {
    let _serial = harness::serial();
    let Some(oc) = opencode_cli().find("opencode_past_l2_hands_off_and_resumes") else {
        return;
    };
    let p = ralph_project(
        "oc-l2",
        &oc,
        &RalphSetup {
            // The continued session starts opencode anew (seconds on a
            // loaded machine) and makes two model calls.
            grace: "45s",
            ..ralph_setup("# E2E plan\n\n- [ ] Finish the parser\n")
        },
    );
    let api = serve(&p, move |chat| {
        let handoff_re = Regex::new(r"\.ralph/handoffs/[0-9-]+-iter\d{3}(-\d+)?\.md").unwrap();
        // The continued session: the request for notes is its last user
        // message; the notes, then the last word.
        if chat.last_user_text().contains(NOTES) {
            return if chat.messages().last().is_some_and(|m| m["role"] == "user") {
                Reply::turn(151_000).tool("write", json!({"filePath": NOTES, "content": "# Handoff notes\n\nThe parser is half done (src/parser.txt); next: its tests.\n"}))
            } else {
                Reply::turn(152_000).text("Handoff notes written; stopping.")
            };
        }
        match (iteration_of(&chat.user_text()), chat.assistant_turns()) {
            (1, 0) => Reply::turn(20_000)
                .text("Starting on the parser.")
                .tool("write", json!({"filePath": "src/parser.txt", "content": "half done\n"})),
            // 150k of the usable 167k: 89.9%, past L2 (85%), under L3 (95%).
            (1, 1) => Reply::turn(150_000).tool("bash", json!({"command": "echo parsed", "description": "Run the parser tests"})),
            // ralph stops the session before this answer comes.
            (1, _) => Reply::turn(151_000).text("E2E: not stopped at L2").delay(Duration::from_secs(40)),
            (2, 0) => match handoff_re.find(&chat.user_text()) {
                Some(_) => Reply::turn(30_000).tool(
                    "bash",
                    json!({
                        "command": "printf 'done\\n' > src/parser.txt && sed -i 's/- \\[ \\] Finish/- [x] Finish/' fix_plan.md && git add src/parser.txt fix_plan.md && git commit -q -m 'Finish the parser'",
                        "description": "Finish and commit",
                    }),
                ),
                None => Reply::turn(30_000).text("E2E: no handoff named in the prompt"),
            },
            (2, _) => Reply::turn(34_000).text("The parser is finished.\n\n<promise>COMPLETE</promise>"),
            _ => Reply::turn(10_000).text("E2E: unexpected iteration"),
        }
    });
    let (code, took) = p.run_ralph(&["--json"], Duration::from_secs(200));
    let diag = || format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe());
    assert_eq!(code, 0, "ralph should complete in iteration 2\n{}", diag());
    eprintln!("oc-l2: ralph took {took:.1?}");
    let handoffs = p.handoffs();
    assert_eq!(handoffs.len(), 1, "{handoffs:?}\n{}", diag());
    let log = p.log();
    assert_eq!(log.len(), 3, "{log:?}");
    assert_eq!(log[0], "Finish the parser");
    assert!(
        log[1].starts_with("ralph: checkpoint iter 1 (L2 at 9"),
        "{log:?}"
    );
    assert_eq!(p.git(&["show", "HEAD~1:src/parser.txt"]), "half done\n");
    let doc = p.read(&handoffs[0]);
    for needle in ["level: L2", "src/parser.txt", "Finish the parser"] {
        assert!(doc.contains(needle), "handoff lacks {needle:?}:\n{doc}");
    }
    // No request for notes could reach opencode while it ran; its session,
    // continued once, wrote them, and the handoff quotes them.
    let requested = p.events_named("checkpoint_requested");
    assert_eq!(requested.len(), 1, "{}", diag());
    assert!(requested[0]["notes_path"].is_null(), "{requested:?}");
    let continued = p.events_named("session_continued");
    assert_eq!(continued.len(), 1, "{}", diag());
    eprintln!("oc-l2: the continuation took {}s", continued[0]["seconds"]);
    assert_eq!(
        continued[0]["notes_written"],
        true,
        "{continued:?}\n{}",
        diag()
    );
    assert!(
        doc.contains("The parser is half done") && !doc.contains("written from the transcript"),
        "{doc}"
    );
    let second = api
        .main_requests()
        .into_iter()
        .find(|r| iteration_of(&Chat(r).user_text()) == 2)
        .expect("iteration 2 ran");
    let prompt = Chat(&second).user_text();
    assert!(prompt.contains("Resume from a checkpoint"), "{prompt}");
    assert!(prompt.contains(handoffs[0].as_str()), "{prompt}");
    let state = p.state();
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(state["context_history"][0]["checkpoint"], true);
    p.assert_nothing_left();
    p.keep_if_asked();
}
