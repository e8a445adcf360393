//! Issue 34, secrets and what leaves: a `ralph sim` agent, with and
//! without the box, in an environment holding `SLACK_WEBHOOK_URL` (also the
//! Slack channel of `[notify]`), `DATABASE_URL` with a password,
//! `MYSQL_PWD`, `SENTRY_DSN` and a GitHub token, with a key planted in
//! `~/.ssh/id_ed25519`. The agent dumps its environment into the project,
//! copies the key, writes the key and every value into files, stages them
//! itself; a check writes `test-results.log`; the plan item carries OSC 52
//! and CSI sequences. Afterwards: no planted secret in any commit of any
//! ref (`git log --all -p`, the safety net's snapshot refs included), in
//! `.ralph/events.jsonl`, the state, the handoffs, the report, or a
//! notification the local server received; each left-out file named with
//! its reason; in the box, the agent's environment lacked the secrets.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::http::{Answer, Server};
use crate::common::{Project, toml_string};

const LIMIT: Duration = Duration::from_secs(90);
const PLAN: &str = "# Leak\n\n- [ ] ship \u{1b}]52;c;ZXZpbA==\u{7}the \u{1b}[2Jparser\n";
const KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ-CANARY\n-----END OPENSSH PRIVATE KEY-----\n";
const KEY_BODY: &str = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ-CANARY";
const TOKEN: &str = "ghp_E2eLeakCanary0123456789abcdefghijKL";
const DATABASE_URL: &str = "postgres://u:pw@h/db";
const MYSQL_PWD: &str = "mysql-pwd-canary-4242";
const SENTRY_DSN: &str = "https://sentrykeycanary99@o1.ingest.sentry.io/7";
const SLACK_SECRET: &str = "slackcanarysecret";

struct World {
    _tmp: tempfile::TempDir,
    _script: tempfile::TempDir,
    home: PathBuf,
    scenario: PathBuf,
    server: Server,
}

impl World {
    fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let home = crate::common::home_with_key(tmp.path(), KEY);
        let always: Answer = Box::new(|_| Some(200));
        let server = Server::start(always);
        // Outside the project (the script holds the values, and the
        // project's first commit must not) and outside the places the box
        // hides.
        let script = tempfile::tempdir_in(crate::common::outside_base()).unwrap();
        let scenario = script.path().join("scenario.toml");
        std::fs::write(&scenario, scenario_text(&server.url)).unwrap();
        World {
            _tmp: tmp,
            _script: script,
            home,
            scenario,
            server,
        }
    }

    fn slack(&self) -> String {
        format!(
            "{}/services/T0CANARY/B0CANARY/{SLACK_SECRET}",
            self.server.url
        )
    }

    fn project(&self, sandbox: &str) -> Project {
        let p = Project::bare(PLAN, "", "");
        std::fs::remove_file(p.path("scenario.toml")).unwrap();
        p.write(
            "ralph.toml",
            &format!(
                "[agent]\ncommand = {command}\nsandbox = \"{sandbox}\"\nenv = {{ HOME = {home} }}\n\
                 [loop]\nmax_iterations = 3\n[breaker]\nno_progress = 9\n[sandbox]\nhome = [\".claude\"]\n\
                 [verify]\ncommands = [\"echo all passed > test-results.log\"]\n\
                 [notify]\nslack = \"$SLACK_WEBHOOK_URL\"\nwebhook = \"{url}/hook\"\nntfy = \"{url}/ntfy\"\nbackoff = \"50ms\"\n",
                command = toml_string(&format!("ralph sim {}", self.scenario.display())),
                home = toml_string(&self.home.display().to_string()),
                url = self.server.url,
            ),
        );
        p.git_init();
        p
    }

    fn run(&self, p: &Project) -> crate::common::Run {
        let mut c = p.ralph();
        c.env("SLACK_WEBHOOK_URL", self.slack())
            .env("DATABASE_URL", DATABASE_URL)
            .env("MYSQL_PWD", MYSQL_PWD)
            .env("SENTRY_DSN", SENTRY_DSN)
            .env("GITHUB_TOKEN", TOKEN)
            .args(["run", "--json"]);
        let child = c
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        crate::common::Run::wait_or(child, LIMIT, || p.diagnose())
    }

    /// Every planted secret, as it would leak.
    fn planted(&self) -> Vec<String> {
        vec![
            KEY_BODY.into(),
            TOKEN.into(),
            DATABASE_URL.into(),
            MYSQL_PWD.into(),
            "sentrykeycanary99".into(),
            SLACK_SECRET.into(),
        ]
    }
}

/// Iteration 1: the leaks, the agent's own `git add -A`, then past L2 (a
/// checkpoint: the WIP commit, the snapshot at the stop). Iteration 2: the
/// item checked off and the promise (the checks, then the final commit).
fn scenario_text(url: &str) -> String {
    let slack = format!("{url}/services/T0CANARY/B0CANARY/{SLACK_SECRET}");
    let write = |path: &str, content: &str| {
        format!(
            "[[iteration.step]]\npath = {}\ncontent = {}\n",
            toml_string(path),
            toml_string(content)
        )
    };
    let mut s = String::from("[[iteration]]\n");
    s.push_str("[[iteration.step]]\ncontext = 20000\ncommand = \"env > env-dump.txt; cp \\\"$HOME/.ssh/id_ed25519\\\" copied_key.txt; true\"\n");
    s.push_str(&write("work.txt", "the agent's work\n"));
    s.push_str(&write("notes/stolen.txt", KEY));
    s.push_str(&write("settings.py", &format!("TOKEN = \"{TOKEN}\"\n")));
    s.push_str(&write("db.txt", &format!("{DATABASE_URL}\n")));
    s.push_str(&write("mysql.txt", &format!("password={MYSQL_PWD}\n")));
    s.push_str(&write("sentry.txt", &format!("dsn: {SENTRY_DSN}\n")));
    s.push_str(&write("slack.txt", &format!("{slack}\n")));
    s.push_str("[[iteration.step]]\ncommand = \"git add -A\"\n");
    s.push_str("[[iteration.step]]\ncontext = 146000\ntext = \"Going on.\"\n");
    s.push_str("[[iteration.step]]\ndelay_ms = 3000\ntext = \"Still going.\"\n");
    s.push_str("[[iteration]]\n[[iteration.step]]\ncontext = 20000\npath = \"fix_plan.md\"\n");
    s.push_str(&format!(
        "old = {}\nnew = {}\n",
        toml_string("- [ ] ship"),
        toml_string("- [x] ship")
    ));
    s.push_str("[[iteration.step]]\nresult = \"Done.\\n\\n<promise>COMPLETE</promise>\"\n");
    s
}

/// `git log --all -p` with every commit's message: all refs, the safety
/// net's snapshots included.
fn all_history(root: &Path) -> String {
    let out = std::process::Command::new("git")
        .args(["log", "--all", "-p", "--format=%H%n%B"])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn read_all(p: &Project, rels: &[&str]) -> String {
    let mut text = String::new();
    for rel in rels {
        let path = p.path(rel);
        if path.is_dir() {
            let mut files = Vec::new();
            crate::common::files_under(&path, &mut files);
            for f in files {
                text.push_str(&String::from_utf8_lossy(&std::fs::read(f).unwrap()));
            }
        } else if let Ok(bytes) = std::fs::read(&path) {
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    text
}

fn check(sandbox: &str) {
    let w = World::new();
    let p = w.project(sandbox);
    let run = w.run(&p);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let started = &run.of("iteration_started")[0];
    assert_eq!(
        started["command"][0].as_str().unwrap().ends_with("bwrap"),
        sandbox == "bwrap"
    );
    // The safety net took the work tree (a snapshot ref exists) and the
    // checkpoint's WIP commit and the final commit were made.
    assert!(!run.of("snapshot").is_empty(), "{}", run.describe());
    let history = all_history(p.root());
    assert!(history.contains("the agent's work"), "{history}");
    assert!(history.contains("final commit at completion"), "{history}");
    let outside = [
        (
            ".ralph/events.jsonl",
            read_all(&p, &[".ralph/events.jsonl"]),
        ),
        (
            "state, handoffs, report",
            read_all(
                &p,
                &[".ralph/state.json", ".ralph/handoffs", ".ralph/report.html"],
            ),
        ),
        ("git log --all -p", history.clone()),
        (
            "--json output",
            run.events.iter().map(|e| e.to_string()).collect::<String>(),
        ),
    ];
    let requests = w.server.requests();
    assert!(requests.iter().any(|r| r.path == "/hook"), "{requests:#?}");
    assert!(
        requests.iter().any(|r| r.path.ends_with(SLACK_SECRET)),
        "the Slack channel got its notice: {requests:#?}"
    );
    let notices: String = requests
        .iter()
        .map(|r| {
            format!(
                "{}\n{:?}\n{}\n",
                r.path.replace(SLACK_SECRET, "<url>"),
                r.headers,
                r.body
            )
        })
        .collect();
    for secret in w.planted() {
        for (place, text) in outside.iter().chain([&("notifications", notices.clone())]) {
            assert!(!text.contains(&secret), "{secret} in {place} ({sandbox})");
        }
    }
    // What leaves ralph is printable: the plan item's OSC 52 and CSI are gone.
    for r in &requests {
        assert!(
            !r.body.contains('\u{1b}') && !r.body.contains("\\u001b") && !r.body.contains("52;c"),
            "{}: {}",
            r.path,
            r.body
        );
    }
    assert!(notices.contains("parser"), "{notices}");
    // Each file left out, named with its reason: at the checkpoint (a
    // warning event) and in the run's end.
    let warnings: Vec<String> = run
        .of("warning")
        .iter()
        .map(|w| w["message"].as_str().unwrap().to_string())
        .collect();
    let warned = warnings.join("\n");
    for (file, why) in [
        ("notes/stolen.txt", "holds a secret (private key)"),
        ("settings.py", "holds a secret (the value of GITHUB_TOKEN)"),
        ("db.txt", "holds a secret (the value of DATABASE_URL)"),
        ("mysql.txt", "holds a secret (the value of MYSQL_PWD)"),
        ("sentry.txt", "holds a secret (the value of SENTRY_DSN)"),
        (
            "slack.txt",
            "holds a secret (the value of SLACK_WEBHOOK_URL)",
        ),
    ] {
        assert!(
            warned.contains(&format!("{file} ({why})")),
            "{file}: {warned}"
        );
        assert!(p.path(file).exists(), "{file} stays in the work tree");
    }
    assert!(
        warned.contains("test-results.log (written by the checks"),
        "{warned}"
    );
    let reason = run.ended()["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("(holds a secret"), "{reason}");
    assert!(
        !history.contains("b/test-results.log"),
        "the checks' output is not the agent's work"
    );
    // The agent's environment: in the box without the secrets (its dump is
    // clean, so committed); without it, it had them (left out).
    let dump = p.read("env-dump.txt");
    if sandbox == "bwrap" {
        for name in [
            "SLACK_WEBHOOK_URL",
            "DATABASE_URL",
            "MYSQL_PWD",
            "SENTRY_DSN",
            "GITHUB_TOKEN",
        ] {
            assert!(!dump.contains(name), "{name} in the box: {dump}");
        }
        assert!(dump.contains("PATH="), "{dump}");
        assert!(
            history.contains("env-dump.txt"),
            "a clean dump is committed"
        );
        assert!(!p.path("copied_key.txt").exists() || p.read("copied_key.txt").is_empty());
    } else {
        assert!(dump.contains(MYSQL_PWD), "{dump}");
        assert!(warned.contains("env-dump.txt (holds a secret"), "{warned}");
        assert!(p.read("copied_key.txt").contains(KEY_BODY));
        assert!(
            warned.contains("copied_key.txt (holds a secret (private key))"),
            "{warned}"
        );
    }
}

#[test]
fn no_secret_leaves_with_the_box() {
    if !crate::common::bwrap_works() {
        return;
    }
    check("bwrap");
}

#[test]
fn no_secret_leaves_without_the_box() {
    check("none");
}

/// `ralph run --dry-run` printed `agent.env`'s credentials in clear,
/// though the docs said they were redacted.
#[test]
fn dry_run_shows_agent_env_redacted() {
    let p = Project::new(
        "# Plan\n\n- [ ] work\n",
        crate::common::IDLE,
        "[agent.env]\nMY_SERVICE_API_KEY = \"svc-key-canary-0123456789\"\nDATABASE_URL = \"postgres://app:pw-canary-77@db/x\"\nPLAIN = \"kept\"\n",
    );
    for json in [true, false] {
        let mut c = p.ralph();
        c.args(["run", "--dry-run"]);
        if json {
            c.arg("--json");
        }
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text.contains("svc-key-canary") && !text.contains("pw-canary-77"),
            "{text}"
        );
        assert!(text.contains("[redacted MY_SERVICE_API_KEY]"), "{text}");
        assert!(text.contains("kept"), "{text}");
    }
}
