//! End-to-end: `ralph run` supervising the real Codex CLI (`[agent] kind =
//! "codex"`, `codex app-server`), whose model is a mock of the OpenAI
//! Responses API served by the test on 127.0.0.1 (a model provider of its
//! own, `-c model_providers.mock={base_url=…}`). Codex really runs the
//! scripted `exec_command` calls in a throwaway git repository, and the
//! usage the mock reports is what ralph's meter reads (the window is the
//! one Codex reports, 258,400 tokens for a model it has no metadata for).
//!
//! Needs the CLI: `scripts/install-codex.sh` installs the version pinned in
//! `scripts/codex-version` (or set `RALPH_E2E_CODEX` to a binary). Without
//! it every test prints "skipped: …" and passes; `RALPH_E2E_REQUIRE=1`
//! makes that a failure. `RALPH_E2E_KEEP=1` keeps each test's directory.

pub mod mock_responses;

use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;
use serde_json::json;

use crate::agent_mock::cases;
use crate::real_claude::harness::{self, CliSpec, Project, Setup};
use crate::real_claude::mock_api::{ApiRequest, MockApi};
use mock_responses::{Answer, ResponsesRequest};

/// What ralph's checkpoint request says (prompts/checkpoint-request.md.j2).
const CHECKPOINT_MARK: &str = "This session is being checkpointed";
/// The window Codex reports for a model without metadata (95% of 272k).
const WINDOW: u64 = 258_400;

const CODEX: CliSpec = CliSpec {
    product: "Codex",
    env: "RALPH_E2E_CODEX",
    script: "scripts/install-codex.sh",
    pinned: include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/codex-version"
    )),
    default_location: native_binary,
    // "codex-cli 0.169.0"
    version_of: |out| out.split_whitespace().last().unwrap_or("").to_string(),
};

/// The native binary inside the npm package, where the install script
/// puts it (`node_modules/@openai/codex-<platform>/vendor/<target>/bin/codex`).
fn native_binary(version: &str) -> PathBuf {
    let modules = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/codex-e2e")
        .join(version)
        .join("node_modules/@openai");
    let found = std::fs::read_dir(&modules).ok().and_then(|d| {
        d.flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("codex-"))
            .flat_map(|e| {
                std::fs::read_dir(e.path().join("vendor"))
                    .into_iter()
                    .flatten()
            })
            .flatten()
            .map(|t| t.path().join("bin/codex"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| modules.join("codex/bin/codex"))
}

/// A project whose agent is Codex, pointed at the mock by `-c` flags.
fn project(name: &str, setup: &Setup) -> Option<Project> {
    let codex = harness::find(name, &CODEX)?;
    Some(Project::with_agent(
        name,
        "Codex",
        &codex,
        setup,
        |command, home| {
            let provider = r#"model_providers.mock={name="mock", base_url="@API_URL@/v1", wire_api="responses", env_key="MOCK_OPENAI_KEY", request_max_retries=0, stream_max_retries=1}"#;
            format!(
                r#"kind = "codex"
command = {command}
model = "gpt-5.1-codex"
args = ["-c", 'model_provider="mock"', "-c", {provider}, "-c", 'approval_policy="never"', "-c", 'sandbox_mode="danger-full-access"']
env = {{ MOCK_OPENAI_KEY = "dummy-e2e-key", CODEX_HOME = {home}, HOME = {home} }}"#,
                provider = harness::toml_str(provider),
            )
        },
    ))
}

fn serve(p: &Project, script: impl Fn(&ApiRequest) -> Answer + Send + Sync + 'static) -> MockApi {
    p.point_at(mock_responses::start(&p.base, script))
}

fn iteration_of(req: &ApiRequest) -> u32 {
    harness::iteration_of(&req.user_text())
}

fn threads(reqs: &[ApiRequest]) -> Vec<String> {
    let mut threads: Vec<String> = Vec::new();
    for r in reqs {
        let t = r.thread();
        if !threads.contains(&t) {
            threads.push(t);
        }
    }
    threads
}

fn diag(p: &Project, api: &MockApi) -> String {
    format!("{}\n--- requests:\n{}", p.diagnostics(), api.describe())
}

/// An iteration that writes a file with a shell command, checks the item
/// off, commits, and ends with the promise: the run completes, metered
/// with the window Codex reported.
#[test]
fn writes_a_file_and_completes() {
    let _serial = harness::serial();
    let Some(p) = project("codex_complete", &Setup::default()) else {
        return;
    };
    let api = serve(&p, |req| {
        match req.calls() {
        0 => Answer::call(20_000).exec(
            "printf 'hello\\n' > hello.txt && sed -i 's/- \\[ \\]/- [x]/' fix_plan.md && git add -A && git commit -q -m 'Create hello.txt'",
        ),
        _ => Answer::call(24_000).text("Created hello.txt.\n\n<promise>COMPLETE</promise>"),
    }
    });
    let (code, took) = p.run_ralph(&["--json"], Duration::from_secs(50));
    assert_eq!(code, 0, "complete\n{}", diag(&p, &api));
    eprintln!("codex complete: ralph took {took:.1?}");
    assert_eq!(p.read("hello.txt"), "hello\n");
    assert_eq!(p.log(), ["Create hello.txt", "initial"]);
    let reqs = api.main_requests();
    assert_eq!(reqs.len(), 2, "{}", diag(&p, &api));
    assert!(
        reqs[0].user_text().contains("# Iteration 1:"),
        "the prompt is the first turn's input"
    );
    let state = p.state();
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(state["context_window"], WINDOW);
    let history = state["context_history"].as_array().unwrap();
    let peak = history[0]["peak_percent"].as_f64().unwrap();
    let expected = 24_000.0 * 100.0 / (WINDOW - 33_000) as f64;
    assert!((peak - expected).abs() < 0.1, "peak {peak}, not {expected}");
    let contexts = p.events_named("context");
    assert!(
        contexts
            .iter()
            .any(|c| c["tool"].as_str().is_some_and(|t| t.contains("hello.txt"))),
        "the command shows as the tool at work: {contexts:?}"
    );
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// In the sandbox (`[agent] sandbox = "bwrap"`, no `[sandbox]` section):
/// Codex with its default home (`~/.codex`) and its key from ralph's own
/// environment (`OPENAI_API_KEY`), as a user runs it; its commands run in
/// the box: another credential and `~/.ssh` stay out.
#[test]
fn writes_a_file_and_completes_in_the_sandbox() {
    let _serial = harness::serial();
    let Some(codex) = harness::find("codex_sandbox", &CODEX) else {
        return;
    };
    if !crate::common::bwrap_works() {
        return;
    }
    let mut p = Project::with_agent(
        "codex_sandbox",
        "Codex",
        &codex,
        &Setup::default(),
        |command, home| {
            let provider = r#"model_providers.mock={name="mock", base_url="@API_URL@/v1", wire_api="responses", env_key="OPENAI_API_KEY", request_max_retries=0, stream_max_retries=1}"#;
            format!(
                r#"kind = "codex"
sandbox = "bwrap"
command = {command}
model = "gpt-5.1-codex"
args = ["-c", 'model_provider="mock"', "-c", {provider}, "-c", 'approval_policy="never"', "-c", 'sandbox_mode="danger-full-access"']
env = {{ HOME = {home} }}"#,
                provider = harness::toml_str(provider),
            )
        },
    );
    std::fs::create_dir_all(p.home.join(".codex")).unwrap();
    cases::plant_secrets(&mut p, "OPENAI_API_KEY");
    let api = serve(&p, |req| {
        match req.calls() {
        0 => Answer::call(20_000).exec(&format!(
            "{}; printf 'hello\\n' > hello.txt && sed -i 's/- \\[ \\]/- [x]/' fix_plan.md && git add hello.txt fix_plan.md && git commit -q -m 'Create hello.txt'",
            cases::LOOK_AROUND
        )),
        _ => Answer::call(24_000).text("Created hello.txt.\n\n<promise>COMPLETE</promise>"),
    }
    });
    let (code, took) = p.run_ralph(&["--json"], Duration::from_secs(50));
    assert_eq!(code, 0, "complete in the box\n{}", diag(&p, &api));
    eprintln!("codex sandbox: ralph took {took:.1?}");
    cases::the_box_held(&p, "OPENAI_API_KEY");
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// An API error the provider keeps giving: Codex retries, fails the turn,
/// and ralph records the error (HTTP status and message) until the breaker
/// opens on the same error twice.
#[test]
fn an_api_error_is_recognised() {
    let _serial = harness::serial();
    let setup = Setup {
        max_iterations: 4,
        breaker: "same_error = 2\nconsecutive_failures = 10\nno_progress = 10",
        ..Setup::default()
    };
    let Some(p) = project("codex_api_error", &setup) else {
        return;
    };
    let api = serve(&p, |_| {
        Answer::error(
            500,
            json!({"error": {"type": "server_error", "message": "E2E: always failing"}}),
        )
    });
    let (code, took) = p.run_ralph(&["--json"], Duration::from_secs(90));
    assert_eq!(code, 3, "breaker open\n{}", diag(&p, &api));
    eprintln!("codex api error: ralph took {took:.1?}");
    let state = p.state();
    assert_eq!(state["breaker"]["rule"], "same_error", "{state:#}");
    let history = state["history"].as_array().unwrap();
    assert_eq!(history.len(), 2);
    for h in history {
        let error = h["error"].as_str().unwrap_or("");
        assert!(error.starts_with("API error 500: "), "{h}");
    }
    assert!(
        !p.events_named("api_retry").is_empty(),
        "Codex's retries show"
    );
    assert_eq!(threads(&api.main_requests()).len(), 2);
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// A usage limit: Codex fails the turn with `usageLimitExceeded` and "try
/// again at H:MM"; ralph recognises the limit and its reset time, which
/// here is beyond `rate_limit.max_wait`, so the run ends (exit 5).
#[test]
fn a_usage_limit_is_recognised() {
    let _serial = harness::serial();
    let setup = Setup {
        breaker: "\n[rate_limit]\nmax_wait = \"10m\"",
        ..Setup::default()
    };
    let Some(p) = project("codex_limit", &setup) else {
        return;
    };
    let api = serve(&p, |_| {
        let resets_at = jiff::Timestamp::now().as_second() + 7200;
        Answer::error(
            429,
            json!({"error": {"type": "usage_limit_reached", "message": "The usage limit has been reached", "plan_type": "plus", "resets_at": resets_at, "resets_in_seconds": 7200}}),
        )
    });
    let (code, _) = p.run_ralph(&["--json"], Duration::from_secs(50));
    assert_eq!(code, 5, "the limit outlasts max_wait\n{}", diag(&p, &api));
    let ended = p.events_named("run_ended");
    let reason = ended[0]["reason"].as_str().unwrap_or("");
    assert!(reason.contains("usage limit hit"), "{reason}");
    // Two hours, give or take the minute the text is rounded to.
    assert!(
        Regex::new(r"resets in (1h ?5\dm|2h)")
            .unwrap()
            .is_match(reason),
        "the reset time was read: {reason}"
    );
    let state = p.state();
    let history = state["history"].as_array().unwrap();
    assert_eq!(history[0]["outcome"], "usage limit", "{state:#}");
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// The account's usage that Codex passes on (`account/rateLimits/updated`,
/// from the backend's `x-codex-*` headers) feeds the quota guard: past the
/// weekly share the run is checkpointed and ends with exit 5.
#[test]
fn the_quota_guard_reads_codex_rate_limits() {
    let _serial = harness::serial();
    let setup = Setup {
        extra: "[quota]\nweekly_percent = 90",
        ..Setup::default()
    };
    let Some(p) = project("codex_quota", &setup) else {
        return;
    };
    let api = serve(&p, |req| match req.calls() {
        0 => Answer::call(20_000)
            .exec("echo started > progress.txt")
            .quota(12.0, 93.0),
        // The guard acts on ralph's next beat, while this runs.
        1 => Answer::call(21_000).exec("sleep 20.231").quota(12.0, 93.0),
        _ => Answer::call(22_000).text("E2E: the guard did not stop the run"),
    });
    let (code, _) = p.run_ralph(&["--json"], Duration::from_secs(60));
    assert_eq!(code, 5, "the weekly share is spent\n{}", diag(&p, &api));
    let ended = p.events_named("run_ended");
    let reason = ended[0]["reason"].as_str().unwrap_or("");
    assert!(
        reason.starts_with("quota guard: the weekly limit is 93% used (quota.weekly_percent 90%)"),
        "{reason}"
    );
    let checkpoints = p.events_named("checkpoint");
    assert_eq!(checkpoints.len(), 1, "{}", diag(&p, &api));
    assert_eq!(checkpoints[0]["trigger"], "budget", "{}", diag(&p, &api));
    assert_eq!(
        p.state()["quota"]["weekly"]["percent"],
        93.0,
        "{:#}",
        p.state()
    );
    let wip_files = p.git(&["show", "--name-only", "--format=", "HEAD"]);
    assert!(
        wip_files.lines().any(|f| f == "progress.txt"),
        "{wip_files}"
    );
    p.assert_nothing_left();
    p.keep_if_asked();
}

/// SIGINT to ralph while Codex runs a long command: ralph interrupts the
/// turn (`turn/interrupt`), the command dies, the work is saved and ralph
/// exits 130 with nothing left running.
#[test]
fn sigint_interrupts_the_turn() {
    let _serial = harness::serial();
    let Some(p) = project("codex_sigint", &Setup::default()) else {
        return;
    };
    let sleep = format!("sleep 30.{:05}", std::process::id() % 100_000);
    let command = format!("echo started > progress.txt; {sleep}; echo slept");
    let api = serve(&p, move |req| match req.calls() {
        0 => Answer::call(20_000).exec(&command),
        _ => Answer::call(21_000).text("E2E: the command was not interrupted"),
    });
    let mut ralph = p.spawn_ralph(&["--json"]);
    // The shell's own command line names the sleep before its echo ran.
    let progress = p.root.join("progress.txt");
    if !harness::wait_until(Duration::from_secs(40), || {
        progress.exists() && !harness::pids_matching(&sleep).is_empty()
    }) {
        let _ = ralph.kill();
        let _ = ralph.wait();
        panic!("the command never started\n{}", diag(&p, &api));
    }
    let signalled = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(ralph.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = p.wait(&mut ralph, Duration::from_secs(25));
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(130), "interrupted\n{}", diag(&p, &api));
    eprintln!("codex sigint: ralph exited {took:.1?} after SIGINT");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(harness::wait_until(Duration::from_secs(5), || {
        harness::pids_matching(&sleep).is_empty()
    }));
    p.assert_nothing_left();
    let state = p.state();
    assert_eq!(state["status"], "interrupted", "{state:#}");
    let checkpoints = p.events_named("checkpoint");
    assert_eq!(checkpoints.len(), 1, "{}", diag(&p, &api));
    assert_eq!(checkpoints[0]["trigger"], "signal");
    let wip_files = p.git(&["show", "--name-only", "--format=", "HEAD"]);
    assert!(
        wip_files.lines().any(|f| f == "progress.txt"),
        "{wip_files}"
    );
    // The stop was `turn/interrupt`, not a signal that killed the server:
    // Codex ended the turn itself, and said so.
    let run = state["run_id"].as_str().unwrap();
    let transcript = p.read(&format!(".ralph/runs/{run}/iter-001.jsonl"));
    assert!(
        transcript.contains(r#""status":"interrupted""#),
        "{}",
        diag(&p, &api)
    );
    // And the event names the step ralph took.
    let signals = p.events_named("agent_signalled");
    assert_eq!(signals[0]["signal"], "turn/interrupt", "{signals:?}");
    p.keep_if_asked();
}

/// kill -9 of ralph while Codex runs a command: the server dies with it
/// (parent-death signal), and the next `ralph run` ends what is left (the
/// command's own session), replays the dead iteration's transcript through
/// the Codex decoder (its context is metered), and goes on to complete.
#[test]
fn kill_9_then_takeover() {
    let _serial = harness::serial();
    let Some(p) = project("codex_kill9", &Setup::default()) else {
        return;
    };
    let sleep = format!("sleep 40.{:05}", std::process::id() % 100_000);
    let command = format!("echo started > progress.txt; {sleep}");
    // Codex reports a call's usage once the commands it started have run:
    // the usage of the call that starts the long command never comes.
    let api = serve(&p, move |req| {
        match (iteration_of(req), req.calls()) {
        (1, 0) => Answer::call(40_000).exec("echo warming up"),
        (1, 1) => Answer::call(41_000).exec(&command),
        (1, _) => Answer::call(42_000).text("E2E: iteration 1 went on"),
        (_, 0) => Answer::call(30_000).exec(
            "sed -i 's/- \\[ \\]/- [x]/' fix_plan.md && printf 'hello\\n' > hello.txt && git add -A && git commit -q -m 'Create hello.txt'",
        ),
        _ => Answer::call(31_000).text("Done.\n\n<promise>COMPLETE</promise>"),
    }
    });
    let mut ralph = p.spawn_ralph(&["--json"]);
    if !harness::wait_until(Duration::from_secs(40), || {
        !harness::pids_matching(&sleep).is_empty()
    }) {
        let _ = ralph.kill();
        let _ = ralph.wait();
        panic!("the command never started\n{}", diag(&p, &api));
    }
    // A beat, so that the lock records the command's session.
    std::thread::sleep(Duration::from_millis(1500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(ralph.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = ralph.wait();
    let codex = CODEX.product;
    assert!(
        harness::wait_until(Duration::from_secs(5), || {
            harness::pids_matching("app-server")
                .iter()
                .all(|pid| !crate::common::cwd_of(*pid).is_some_and(|c| c.starts_with(&p.base)))
        }),
        "{codex} died with ralph"
    );
    let (code, _) = p.run_ralph(&["--json"], Duration::from_secs(50));
    assert_eq!(code, 0, "the next run completes\n{}", diag(&p, &api));
    assert!(
        harness::pids_matching(&sleep).is_empty(),
        "the command was ended"
    );
    p.assert_nothing_left();
    let state = p.state();
    let history = state["context_history"].as_array().unwrap();
    assert_eq!(history.len(), 2, "{state:#}");
    assert_eq!(
        history[0]["peak_tokens"], 40_000,
        "the dead iteration was metered from its transcript: {state:#}"
    );
    assert_eq!(p.read("hello.txt"), "hello\n");
    p.keep_if_asked();
}

/// The context passes L2: ralph steers the request for notes into the
/// running turn (`turn/steer`), Codex writes them, the turn ends, ralph
/// makes the WIP commit and the handoff with the notes, and the next
/// iteration resumes from it and completes.
#[test]
fn l2_handoff_with_notes_then_resume() {
    let _serial = harness::serial();
    let setup = Setup {
        plan: "# E2E plan\n\n- [ ] Finish the parser\n",
        ..Setup::default()
    };
    let Some(p) = project("codex_checkpoint", &setup) else {
        return;
    };
    let notes_re = Regex::new(r"\.ralph/notes/iter-\d{3}\.md").unwrap();
    let handoff_re = Regex::new(r"\.ralph/handoffs/[0-9-]+-iter\d{3}(-\d+)?\.md").unwrap();
    let api = serve(&p, move |req| {
        match iteration_of(req) {
        1 => {
            let users = req.user_text();
            if users.contains(CHECKPOINT_MARK) {
                let Some(notes) = notes_re.find(&users) else {
                    return Answer::call(201_000).text("no notes path in the request");
                };
                if req.input_text().contains("NOTES-WRITTEN") {
                    return Answer::call(202_000).text("Handoff notes written; stopping here.");
                }
                return Answer::call(201_000).exec(&format!(
                    "mkdir -p .ralph/notes && printf '## Done\\n- parser skeleton\\n\\n## In progress\\n- src/parser.txt: E2E-NOTES-MARKER half done\\n\\n## Next\\n- finish the parser\\n' > {} && echo NOTES-WRITTEN",
                    notes.as_str()
                ));
            }
            match req.calls() {
                0 => Answer::call(20_000).exec("mkdir -p src && echo 'half done' > src/parser.txt"),
                // 200k of the usable 225.4k: 88.7%, past L2 (85%), under L3 (95%);
                // the command runs while the request is steered in.
                1 => Answer::call(200_000).exec("sleep 3; echo parsed"),
                _ => Answer::call(200_500).text("E2E: no checkpoint request arrived"),
            }
        }
        2 => match req.calls() {
            0 => match handoff_re.find(&req.user_text()) {
                Some(h) => Answer::call(30_000).exec(&format!("cat {}", h.as_str())),
                None => Answer::call(30_000).text("E2E: no handoff named in the prompt"),
            },
            1 => Answer::call(34_000).exec(
                "printf 'done\\n' > src/parser.txt && sed -i 's/- \\[ \\] Finish the parser/- [x] Finish the parser/' fix_plan.md && git add src/parser.txt fix_plan.md && git commit -q -m 'Finish the parser'",
            ),
            _ => Answer::call(36_000).text("The parser is finished.\n\n<promise>COMPLETE</promise>"),
        },
        _ => Answer::call(10_000).text("E2E: unexpected iteration"),
    }
    });
    let (code, took) = p.run_ralph(&["--json"], Duration::from_secs(80));
    let reqs = api.main_requests();
    assert_eq!(code, 0, "complete in iteration 2\n{}", diag(&p, &api));
    eprintln!(
        "codex checkpoint: ralph took {took:.1?}, {} requests",
        reqs.len()
    );
    let threads = threads(&reqs);
    assert_eq!(threads.len(), 2, "two agent processes\n{}", diag(&p, &api));
    let asked: Vec<&ApiRequest> = reqs
        .iter()
        .filter(|r| r.user_text().contains(CHECKPOINT_MARK))
        .collect();
    assert!(!asked.is_empty(), "the steer reached the model");
    assert_eq!(asked[0].thread(), threads[0], "in the running session");
    assert!(
        asked[0].input_text().contains("parsed"),
        "steered in while the command ran"
    );
    let requested = p.events_named("checkpoint_requested");
    assert_eq!(requested.len(), 1, "{}", diag(&p, &api));
    assert_eq!(requested[0]["level"], "L2");
    assert_eq!(requested[0]["notes_path"], ".ralph/notes/iter-001.md");
    // Codex ended its turn by itself, within the grace.
    assert!(
        p.events_named("agent_signalled").is_empty(),
        "{}",
        diag(&p, &api)
    );
    let handoffs = p.handoffs();
    assert_eq!(handoffs.len(), 1, "{handoffs:?}");
    let doc = p.read(&handoffs[0]);
    for needle in [
        "trigger: context",
        "level: L2",
        "E2E-NOTES-MARKER",
        "src/parser.txt",
    ] {
        assert!(doc.contains(needle), "handoff lacks {needle:?}:\n{doc}");
    }
    let log = p.log();
    assert_eq!(log.len(), 3, "{log:?}");
    assert_eq!(log[0], "Finish the parser");
    assert!(
        log[1].starts_with("ralph: checkpoint iter 1 (L2 at 8"),
        "{log:?}"
    );
    assert_eq!(p.git(&["show", "HEAD~1:src/parser.txt"]), "half done\n");
    let second = reqs.iter().find(|r| r.thread() == threads[1]).unwrap();
    let prompt = second.user_text();
    assert!(prompt.contains("# Iteration 2:"), "{prompt}");
    assert!(prompt.contains(handoffs[0].as_str()), "{prompt}");
    let state = p.state();
    assert_eq!(state["status"], "completed", "{state:#}");
    assert_eq!(state["context_window"], WINDOW);
    p.assert_nothing_left();
    p.keep_if_asked();
}
