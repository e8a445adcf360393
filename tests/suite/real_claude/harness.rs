//! What every end-to-end test needs: the installed CLI (or a clean skip),
//! a throwaway git repository with its own `ralph.toml` and `HOME`, `ralph
//! run` under a timeout, and the checks that nothing was left running.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::mock_api::{self, ApiRequest, MockApi, Reply};

/// The tested version, pinned in one place.
pub const PINNED_VERSION: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/scripts/claude-version"
));

/// The CLI under test.
#[derive(Debug, Clone)]
pub struct Claude {
    pub path: PathBuf,
    pub version: String,
}

/// One test at a time: the CLI is heavy, the machine may be small, and the
/// timing of signals and grace periods should not depend on the neighbours.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// An agent CLI the end-to-end suites run, and where its install script
/// puts it.
pub struct CliSpec {
    pub product: &'static str,
    /// The variable naming a binary to test instead.
    pub env: &'static str,
    pub script: &'static str,
    /// The contents of its `scripts/*-version` file.
    pub pinned: &'static str,
    /// Where the install script puts the pinned version.
    pub default_location: fn(&str) -> PathBuf,
    /// The version in what `--version` printed.
    pub version_of: fn(&str) -> String,
}

pub const CLAUDE: CliSpec = CliSpec {
    product: "Claude Code",
    env: "RALPH_E2E_CLAUDE",
    script: "scripts/install-claude.sh",
    pinned: PINNED_VERSION,
    default_location: |v| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("target/claude-e2e")
            .join(v)
            .join("node_modules/.bin/claude")
    },
    version_of: |out| out.split_whitespace().next().unwrap_or("").to_string(),
};

/// The CLI to test: `$RALPH_E2E_CLAUDE`, else the install script's default
/// location. `None` (after printing why) when there is none that runs;
/// with `RALPH_E2E_REQUIRE=1` that is a failure instead of a skip.
pub fn claude(test: &str) -> Option<Claude> {
    find(test, &CLAUDE)
}

/// The CLI of `spec` to test (see [`claude`]).
pub fn find(test: &str, spec: &CliSpec) -> Option<Claude> {
    let pinned = spec.pinned.trim();
    let required = std::env::var("RALPH_E2E_REQUIRE").is_ok_and(|v| v == "1");
    let skip = |why: String| {
        if required {
            panic!("{test}: {why} (and RALPH_E2E_REQUIRE=1)");
        }
        // Straight to stderr: libtest captures eprintln! of passing tests.
        let _ = writeln!(
            std::io::stderr(),
            "skipped: {test}: {why}; run {} ({} {pinned}) or set {}",
            spec.script,
            spec.product,
            spec.env
        );
        None
    };
    let path = match std::env::var_os(spec.env).filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => (spec.default_location)(pinned),
    };
    if !path.exists() {
        return skip(format!(
            "the {} CLI is not installed at {}",
            spec.product,
            path.display()
        ));
    }
    let out = match run_with_timeout(
        Command::new(&path).arg("--version"),
        Duration::from_secs(30),
    ) {
        Ok(out) => out,
        Err(e) => return skip(format!("{} --version failed: {e}", path.display())),
    };
    let version = (spec.version_of)(&out);
    if version.is_empty() {
        return skip(format!("{} --version printed nothing", path.display()));
    }
    if version != pinned {
        let _ = writeln!(
            std::io::stderr(),
            "note: {test}: testing {} {version}, not the pinned {pinned}",
            spec.product
        );
    }
    Some(Claude { path, version })
}

fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(status) => {
                let mut out = String::new();
                use std::io::Read;
                child.stdout.take().unwrap().read_to_string(&mut out).ok();
                return if status.success() {
                    Ok(out)
                } else {
                    Err(format!("exit status {status}"))
                };
            }
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("timed out".into());
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The knobs a test turns in `ralph.toml`.
pub struct Setup<'a> {
    pub plan: &'a str,
    pub max_iterations: u32,
    /// Extra lines for `[breaker]`.
    pub breaker: &'a str,
    pub idle_timeout: &'a str,
    pub iteration_timeout: &'a str,
    pub grace: &'a str,
    /// Log the CLI in as a claude.ai subscriber (`CLAUDE_CODE_OAUTH_TOKEN`)
    /// instead of with an API key: only then does it read the API's
    /// subscription usage headers into `rate_limit_event` lines.
    pub subscriber: bool,
    /// More of `ralph.toml`, at its end (whole sections).
    pub extra: &'a str,
}

impl Default for Setup<'_> {
    fn default() -> Self {
        Setup {
            plan: "# E2E plan\n\n- [ ] Create hello.txt saying hello\n",
            max_iterations: 3,
            breaker: "",
            idle_timeout: "40s",
            iteration_timeout: "50s",
            grace: "10s",
            subscriber: false,
            extra: "",
        }
    }
}

/// The model the tests ask for: a 200k window in the CLI's own table, so
/// that usage numbers map to the percentages the tests expect.
pub const MODEL: &str = "claude-sonnet-4-5";

/// A throwaway project: `repo/` (git, `ralph.toml`, the plan), `home/`
/// (the CLI's HOME), and the logs of the test.
pub struct Project {
    dir: Option<tempfile::TempDir>,
    /// The test's directory: repo/, home/, logs.
    pub base: PathBuf,
    pub root: PathBuf,
    pub home: PathBuf,
    pub name: String,
    config: String,
    /// Variables in ralph's own environment, as a user's shell exports them
    /// (not `agent.env`): what the sandbox passes on or withholds.
    pub ralph_env: Vec<(String, String)>,
}

impl Project {
    /// The directories, the plan and a git repository; `ralph.toml` and the
    /// first commit come with [`Project::serve`], once the mock's address is known.
    pub fn new(name: &str, claude: &Claude, setup: &Setup) -> Project {
        Project::with_agent(name, "Claude Code", claude, setup, |command, home| {
            format!(
                r#"command = {command}
model = "{MODEL}"
args = ["--dangerously-skip-permissions"]
env = {{ IS_SANDBOX = "1", ANTHROPIC_BASE_URL = "@API_URL@", {auth}, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = "1", HOME = {home} }}"#,
                auth = if setup.subscriber {
                    r#"CLAUDE_CODE_OAUTH_TOKEN = "sk-ant-oat01-e2e-dummy""#
                } else {
                    r#"ANTHROPIC_API_KEY = "dummy-e2e-key""#
                },
            )
        })
    }

    /// A project whose `[agent]` section is `agent(command, home)` (both
    /// TOML strings; `@API_URL@` becomes the mock's address).
    pub fn with_agent(
        name: &str,
        product: &str,
        cli: &Claude,
        setup: &Setup,
        agent: impl FnOnce(&str, &str) -> String,
    ) -> Project {
        let command = shlex::try_quote(cli.path.to_str().expect("a UTF-8 path"))
            .expect("a quotable path")
            .into_owned();
        let what = format!("{product} {} ({})", cli.version, cli.path.display());
        Project::for_agent(name, &what, setup, |_, home| {
            agent(&toml_str(&command), &toml_str(home.to_str().unwrap()))
        })
    }

    /// The same for any agent: `agent(root, home)` gives the body of
    /// `[agent]` (`@API_URL@` stands for the mock's address).
    pub fn for_agent(
        name: &str,
        what: &str,
        setup: &Setup,
        agent: impl FnOnce(&Path, &Path) -> String,
    ) -> Project {
        let dir = tempfile::Builder::new()
            .prefix(&format!("ralph-e2e-{name}-"))
            .tempdir()
            .expect("temp dir");
        eprintln!("{name}: {what} in {}", dir.path().display());
        let root = dir.path().join("repo");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let agent = agent(&root, &home);
        let config = format!(
            r#"plan = "fix_plan.md"

[agent]
{agent}

[loop]
max_iterations = {max}
idle_timeout = "{idle}"
iteration_timeout = "{iter}"

[context]
grace = "{grace}"

[breaker]
cooldown = "1m"
{breaker}
{extra}
"#,
            max = setup.max_iterations,
            idle = setup.idle_timeout,
            iter = setup.iteration_timeout,
            grace = setup.grace,
            breaker = setup.breaker,
            extra = setup.extra,
        );
        let p = Project {
            root,
            home,
            base: dir.path().to_path_buf(),
            dir: Some(dir),
            name: name.to_string(),
            config,
            ralph_env: Vec::new(),
        };
        std::fs::write(p.root.join("fix_plan.md"), setup.plan).unwrap();
        p.git(&["init", "-q", "-b", "main"]);
        p.git(&["config", "user.name", "ralph e2e"]);
        p.git(&["config", "user.email", "e2e@ralph.invalid"]);
        p.git(&["config", "commit.gpgsign", "false"]);
        p
    }

    /// Start the mock API with `script`, point `ralph.toml` at it and make
    /// the first commit.
    pub fn serve(&self, script: impl Fn(&ApiRequest) -> Reply + Send + Sync + 'static) -> MockApi {
        self.point_at(MockApi::start(
            &mock_api::log_path(self.base.as_path()),
            script,
        ))
    }

    /// Point `ralph.toml` at a started mock and make the first commit.
    pub fn point_at(&self, api: MockApi) -> MockApi {
        self.configure(&api.url());
        api
    }

    /// Write `ralph.toml` for the mock at `url` and make the first commit.
    pub fn configure(&self, url: &str) {
        std::fs::write(
            self.root.join("ralph.toml"),
            self.config.replace("@API_URL@", url),
        )
        .unwrap();
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", "initial"]);
    }

    /// Absolute path of a file in the repository, as the CLI's tools want it.
    pub fn path(&self, rel: &str) -> String {
        self.root.join(rel).display().to_string()
    }

    pub fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(&self.root)
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Commit subjects, newest first.
    pub fn log(&self) -> Vec<String> {
        self.git(&["log", "--format=%s"])
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// `ralph run …` in the repository, its own environment scrubbed of
    /// anything that would point the CLI elsewhere.
    pub fn spawn_ralph(&self, args: &[&str]) -> Child {
        let stdout = std::fs::File::create(self.base.as_path().join("ralph.stdout")).unwrap();
        let stderr = std::fs::File::create(self.base.as_path().join("ralph.stderr")).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ralph"));
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with("ANTHROPIC_")
                || k.starts_with("OPENAI_")
                || k.starts_with("CODEX_")
                || k.starts_with("CLAUDE_")
                || k.starts_with("CLAUDECODE")
                || k.starts_with("RALPH_")
            {
                cmd.env_remove(k.as_ref());
            }
        }
        cmd.arg("run")
            .args(args)
            .current_dir(&self.root)
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("NO_COLOR", "1")
            .env("RALPH_LOG", "ralph=debug")
            .envs(self.ralph_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("ralph starts")
    }

    /// Wait for ralph, killing it (and what it started) after `timeout`.
    pub fn wait(&self, child: &mut Child, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                self.kill_leftovers();
                panic!(
                    "{}: ralph did not finish within {timeout:?}\n{}",
                    self.name,
                    self.diagnostics()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Run ralph to its end; returns its exit code and how long it took.
    pub fn run_ralph(&self, args: &[&str], timeout: Duration) -> (i32, Duration) {
        let started = Instant::now();
        let mut child = self.spawn_ralph(args);
        let status = self.wait(&mut child, timeout);
        (status.code().unwrap_or(-1), started.elapsed())
    }

    pub fn state(&self) -> Value {
        let text = std::fs::read_to_string(self.root.join(".ralph/state.json"))
            .unwrap_or_else(|e| panic!("no .ralph/state.json: {e}\n{}", self.diagnostics()));
        serde_json::from_str(&text).expect("state.json is JSON")
    }

    /// The event log (`.ralph/events.jsonl`).
    pub fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(self.root.join(".ralph/events.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    pub fn events_named(&self, name: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["event"] == name)
            .collect()
    }

    /// Handoff documents, relative to the root, sorted.
    pub fn handoffs(&self) -> Vec<String> {
        let dir = self.root.join(".ralph/handoffs");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".md"))
                    .map(|n| format!(".ralph/handoffs/{n}"))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root.join(rel))
            .unwrap_or_else(|e| panic!("cannot read {rel}: {e}"))
    }

    /// Processes still running in (or below) the test's directory, or whose
    /// command line names it.
    pub fn leftovers(&self) -> Vec<(i32, String)> {
        let base = self.base.clone();
        let me = std::process::id() as i32;
        processes()
            .into_iter()
            .filter(|(pid, _)| *pid != me)
            .filter(|(pid, cmdline)| {
                let cwd = crate::common::cwd_of(*pid);
                cwd.is_some_and(|c| c.starts_with(&base))
                    || cmdline.contains(base.to_str().unwrap_or("\0"))
            })
            .collect()
    }

    /// No process of the test is left running.
    pub fn assert_nothing_left(&self) {
        let left = self.leftovers();
        assert!(
            left.is_empty(),
            "{}: processes left behind: {left:?}",
            self.name
        );
    }

    /// `ralph run ARGS`, returned once `needle` (a tool's command line)
    /// runs; if it never does, ralph is killed and the test fails with
    /// `context` (the mock's requests).
    pub fn spawn_ralph_until(
        &self,
        args: &[&str],
        needle: &str,
        context: impl Fn() -> String,
    ) -> Child {
        let mut ralph = self.spawn_ralph(args);
        if !wait_until(Duration::from_secs(60), || {
            !pids_matching(needle).is_empty()
        }) {
            let _ = ralph.kill();
            let _ = ralph.wait();
            panic!(
                "the tool never started\n{}\n{}",
                self.diagnostics(),
                context()
            );
        }
        ralph
    }

    pub fn kill_leftovers(&self) {
        for (pid, _) in self.leftovers() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    /// What to look at when a test fails.
    pub fn diagnostics(&self) -> String {
        let tail = |p: PathBuf| {
            let t = std::fs::read_to_string(&p).unwrap_or_default();
            let lines: Vec<&str> = t.lines().collect();
            lines[lines.len().saturating_sub(40)..].join("\n")
        };
        let mut d = format!("--- test dir: {}\n", self.base.as_path().display());
        d += &format!(
            "--- ralph stdout (tail):\n{}\n",
            tail(self.base.as_path().join("ralph.stdout"))
        );
        d += &format!(
            "--- ralph stderr (tail):\n{}\n",
            tail(self.base.as_path().join("ralph.stderr"))
        );
        if let Ok(runs) = std::fs::read_dir(self.root.join(".ralph/runs")) {
            for run in runs.flatten() {
                if let Ok(files) = std::fs::read_dir(run.path()) {
                    let mut files: Vec<_> = files.flatten().map(|f| f.path()).collect();
                    files.sort();
                    for f in files {
                        if f.extension().is_some_and(|e| e == "stderr") {
                            d += &format!("--- {} (tail):\n{}\n", f.display(), tail(f.clone()));
                        }
                    }
                }
            }
        }
        d
    }

    /// Keep the test's files for a post-mortem (`RALPH_E2E_KEEP=1`).
    pub fn keep_if_asked(mut self) {
        if std::env::var("RALPH_E2E_KEEP").is_ok_and(|v| v == "1")
            && let Some(dir) = self.dir.take()
        {
            eprintln!("kept {}", dir.keep().display());
        }
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        self.kill_leftovers();
    }
}

/// Every process: pid and command line (arguments joined by spaces).
pub fn processes() -> Vec<(i32, String)> {
    crate::common::command_lines()
        .into_iter()
        .filter(|(_, c)| !c.is_empty())
        .collect()
}

/// Pids of processes whose command line contains `needle`.
pub fn pids_matching(needle: &str) -> BTreeSet<i32> {
    processes()
        .into_iter()
        .filter(|(_, c)| c.contains(needle))
        .map(|(p, _)| p)
        .collect()
}

/// Poll `f` until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// A TOML basic string.
pub fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The iteration a request belongs to, from ralph's prompt in its text.
pub fn iteration_of(text: &str) -> u32 {
    let re = regex::Regex::new(r"# Iteration (\d+):").unwrap();
    re.captures(text)
        .and_then(|c| c[1].parse().ok())
        .unwrap_or(0)
}
