//! Shared harness of the end-to-end tests: a temp git repo with a plan, a
//! `ralph.toml` whose agent is `ralph sim scenario.toml`, and helpers to run
//! the built binary and read what it left behind.

pub mod git_http;
pub mod http;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_ralph");

/// A scenario: one iteration that jumps past L2 (87% of the usable window)
/// while writing `work.txt`.
pub const QUICK_L2: &str = r#"
[[step]]
context = 146000
text = "Writing."
path = "work.txt"
content = "work in progress\n"
"#;

/// A scenario: one iteration that changes nothing.
pub const IDLE: &str = "[[step]]\ncontext = 20000\ntext = \"Looking around.\"\n[[step]]\nresult = \"Nothing changed.\"\n";

pub struct Project {
    pub dir: tempfile::TempDir,
}

/// `RALPH_TEST_KEEP=1`: the project of a test that fails is moved to
/// `/tmp/kept-…` (said on stderr) instead of deleted, to be looked at.
impl Drop for Project {
    fn drop(&mut self) {
        if std::thread::panicking() && std::env::var_os("RALPH_TEST_KEEP").is_some() {
            let name = self
                .dir
                .path()
                .file_name()
                .unwrap_or_default()
                .to_string_lossy();
            let to = std::env::temp_dir().join(format!("kept-{}", name.trim_start_matches('.')));
            if std::fs::rename(self.dir.path(), &to).is_ok() {
                eprintln!("kept the failed test's project: {}", to.display());
            }
        }
    }
}

impl Project {
    /// A git repo with one commit holding `fix_plan.md`, `ralph.toml`
    /// (`[agent] command = "ralph sim scenario.toml"` + `extra_config`) and
    /// `scenario.toml`.
    pub fn new(plan: &str, scenario: &str, extra_config: &str) -> Project {
        let p = Project::bare(plan, scenario, extra_config);
        p.git_init();
        p
    }

    /// The same files, not in a git repository.
    pub fn bare(plan: &str, scenario: &str, extra_config: &str) -> Project {
        let dir = tempfile::tempdir().unwrap();
        let p = Project { dir };
        p.write("fix_plan.md", plan);
        p.write("scenario.toml", scenario);
        p.write("ralph.toml", &config(extra_config));
        p
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    pub fn write(&self, rel: &str, text: &str) {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, text).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    pub fn git_init(&self) {
        let repo = git2::Repository::init(self.root()).unwrap();
        let sig = git2::Signature::now("test", "test@example.com").unwrap();
        let mut index = repo.index().unwrap();
        index
            .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
            .unwrap();
        index.write().unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        repo.commit(Some("HEAD"), &sig, &sig, "initial", &tree, &[])
            .unwrap();
    }

    pub fn repo(&self) -> git2::Repository {
        git2::Repository::open(self.root()).unwrap()
    }

    /// Commit subjects, newest first.
    pub fn log(&self) -> Vec<String> {
        let repo = self.repo();
        let mut walk = repo.revwalk().unwrap();
        walk.push_head().unwrap();
        walk.map(|id| {
            repo.find_commit(id.unwrap())
                .unwrap()
                .summary()
                .unwrap_or("")
                .to_string()
        })
        .collect()
    }

    /// Paths changed by the commit at HEAD.
    pub fn head_files(&self) -> Vec<String> {
        let repo = self.repo();
        let head = repo.head().unwrap().peel_to_commit().unwrap();
        let parent_tree = head.parent(0).ok().map(|p| p.tree().unwrap());
        let diff = repo
            .diff_tree_to_tree(parent_tree.as_ref(), Some(&head.tree().unwrap()), None)
            .unwrap();
        diff.deltas()
            .map(|d| d.new_file().path().unwrap().display().to_string())
            .collect()
    }

    pub fn ralph(&self) -> Command {
        let mut c = Command::new(BIN);
        c.current_dir(self.root())
            .env_remove("NO_COLOR")
            .env("RALPH_LOG", "off");
        c
    }

    /// `ralph run --json ARGS`, bounded by `limit`.
    pub fn run(&self, args: &[&str], limit: Duration) -> Run {
        Run::wait_or(self.spawn_run(args), limit, || self.diagnose())
    }

    /// What a hung run leaves to look at: the processes working in this
    /// project (state, kernel wait channel, command line) and the last
    /// events of every log under it (workers' worktrees included).
    pub fn diagnose(&self) -> String {
        let mut out = String::from("processes in the project:\n");
        for pid in self.processes_matching("") {
            let state = proc_stat(pid).unwrap_or_default();
            let state = state[..state.len().min(2)].join(" ppid ");
            out += &format!("  {pid} {state} {}\n", wait_and_command(pid));
        }
        let mut logs = vec![self.path(".ralph/events.jsonl")];
        for run in std::fs::read_dir(self.path(".ralph/worktrees"))
            .into_iter()
            .flatten()
            .flatten()
        {
            for w in std::fs::read_dir(run.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                logs.push(w.path().join(".ralph/events.jsonl"));
            }
        }
        for log in logs {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out += &format!("{} (last of {}):\n", log.display(), lines.len());
            for l in &lines[lines.len().saturating_sub(8)..] {
                out += &format!("  {}\n", &l[..l.len().min(400)]);
            }
        }
        out
    }

    pub fn spawn_run(&self, args: &[&str]) -> Child {
        self.spawn_run_human(&[&["--json"], args].concat())
    }

    /// `ralph run ARGS` as a person reads it (no `--json`), its output on
    /// pipes.
    pub fn spawn_run_human(&self, args: &[&str]) -> Child {
        self.ralph()
            .arg("run")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `ralph run --json`, its output thrown away: a run to be killed,
    /// read through `.ralph/` (a pipe nobody reads could block it).
    pub fn spawn_unread_run(&self) -> Child {
        self.ralph()
            .args(["run", "--json"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    pub fn state(&self) -> Value {
        serde_json::from_str(&self.read(".ralph/state.json")).unwrap()
    }

    /// Live processes started in this project (their working directory
    /// is inside it) whose command line contains `needle`: other tests'
    /// processes running at the same time are not this one's.
    pub fn processes_matching(&self, needle: &str) -> Vec<i32> {
        let root = self.root().canonicalize().unwrap();
        processes_matching(needle)
            .into_iter()
            .filter(|pid| cwd_of(*pid).is_some_and(|cwd| cwd.starts_with(&root)))
            .collect()
    }

    pub fn handoffs(&self) -> Vec<PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(self.path(".ralph/handoffs"))
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        v.retain(|p| p.extension().is_some_and(|e| e == "md"));
        v.sort();
        v
    }
}

pub fn config(extra: &str) -> String {
    format!("[agent]\ncommand = \"ralph sim scenario.toml\"\n\n{extra}\n")
}

/// A finished `ralph run --json`.
pub struct Run {
    pub code: Option<i32>,
    pub events: Vec<Value>,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    pub fn wait(child: Child, limit: Duration) -> Run {
        Run::wait_or(child, limit, String::new)
    }

    /// The same, with `diagnose()`'s text in the panic of a run that hangs.
    pub fn wait_or(mut child: Child, limit: Duration, diagnose: impl FnOnce() -> String) -> Run {
        let started = Instant::now();
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if started.elapsed() > limit {
                let seen = diagnose();
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "ralph run did not end within {limit:?}\nstdout:\n{}\nstderr:\n{}\n{seen}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let elapsed = started.elapsed();
        Run::from_output(child.wait_with_output().unwrap(), elapsed)
    }

    pub fn from_output(out: Output, elapsed: Duration) -> Run {
        let events = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect();
        Run {
            code: out.status.code(),
            events,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            elapsed,
        }
    }

    pub fn of(&self, kind: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["event"] == kind).collect()
    }

    pub fn ended(&self) -> &Value {
        self.of("run_ended")
            .last()
            .copied()
            .unwrap_or_else(|| panic!("no run_ended event; stderr: {}", self.stderr))
    }

    pub fn describe(&self) -> String {
        format!(
            "exit {:?}\nevents:\n{}\nstderr:\n{}",
            self.code,
            self.events
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n"),
            self.stderr
        )
    }
}

/// A process's state, ppid, process group and session, in the order of
/// `/proc/PID/stat`'s fields after the command name (Linux: those fields
/// and the rest), if the process exists.
#[cfg(target_os = "linux")]
pub fn proc_stat(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// macOS has no `/proc`: `ps` says the same four.
#[cfg(target_os = "macos")]
pub fn proc_stat(pid: i32) -> Option<Vec<String>> {
    let out = ps(&["-o", "stat=,ppid=,pgid=,sess=", "-p", &pid.to_string()]);
    let fields: Vec<String> = out.split_whitespace().map(str::to_string).collect();
    (fields.len() == 4).then_some(fields)
}

/// The working directory of `pid`.
#[cfg(target_os = "linux")]
pub fn cwd_of(pid: i32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/cwd")).ok()
}

#[cfg(target_os = "macos")]
pub fn cwd_of(pid: i32) -> Option<PathBuf> {
    let out = Command::new("lsof")
        .args(["-a", "-p", &pid.to_string(), "-d", "cwd", "-Fn"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix('n'))
        .map(PathBuf::from)
}

/// What `pid` waits in (its kernel wait channel) and its command line.
#[cfg(target_os = "linux")]
fn wait_and_command(pid: i32) -> String {
    let read = |f: &str| std::fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap_or_default();
    format!(
        "wchan {} {}",
        read("wchan"),
        read("cmdline").replace('\0', " ")
    )
}

#[cfg(target_os = "macos")]
fn wait_and_command(pid: i32) -> String {
    format!(
        "wchan {}",
        ps(&["-o", "wchan=,command=", "-p", &pid.to_string()])
    )
}

/// `ps ARGS`' output, empty when it fails.
#[cfg(target_os = "macos")]
fn ps(args: &[&str]) -> String {
    Command::new("ps")
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Whether `pid` is a live process: it exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|f| f.first().is_some_and(|s| !s.starts_with(['Z', 'X'])))
}

/// Every process's pid and command line (its arguments joined by spaces;
/// empty for kernel threads).
#[cfg(target_os = "linux")]
pub fn command_lines() -> Vec<(i32, String)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, command_line(pid)?)))
        .collect()
}

/// `pid`'s command line, its arguments joined by spaces, if it exists.
#[cfg(target_os = "linux")]
pub fn command_line(pid: i32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(String::from_utf8_lossy)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

#[cfg(target_os = "macos")]
pub fn command_line(pid: i32) -> Option<String> {
    let out = ps(&["-o", "command=", "-p", &pid.to_string()]);
    (!out.is_empty()).then_some(out)
}

/// The most memory `pid` has held so far, in bytes (Linux: its high-water
/// mark; macOS: its resident size now, so callers sample and keep the
/// largest).
#[cfg(target_os = "linux")]
pub fn peak_rss(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

#[cfg(target_os = "macos")]
pub fn peak_rss(pid: i32) -> Option<u64> {
    Some(
        ps(&["-o", "rss=", "-p", &pid.to_string()])
            .parse::<u64>()
            .ok()?
            * 1024,
    )
}

/// Whether the tests run as root (chmod does not keep root out).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[cfg(target_os = "macos")]
pub fn command_lines() -> Vec<(i32, String)> {
    ps(&["-axo", "pid=,command="])
        .lines()
        .filter_map(|l| {
            let (pid, cmd) = l.trim_start().split_once(' ')?;
            Some((pid.parse().ok()?, cmd.to_string()))
        })
        .collect()
}

/// Pids of live processes whose command line contains `needle`.
pub fn processes_matching(needle: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    command_lines()
        .into_iter()
        // Zombies are dead already.
        .filter(|(pid, cmd)| *pid != me && cmd.contains(needle) && alive(*pid))
        .map(|(pid, _)| pid)
        .collect()
}

/// Poll `cond` every 20 ms until it holds; fail naming `what` after `within`.
pub fn wait_until(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Poll `.ralph/events.jsonl` until an event of `kind` shows up.
pub fn wait_for_event(p: &Project, kind: &str, within: Duration) {
    let needle = format!("\"event\":\"{kind}\"");
    wait_until(&format!("no {kind} event"), within, || {
        std::fs::read_to_string(p.path(".ralph/events.jsonl")).is_ok_and(|l| l.contains(&needle))
    });
}

/// Poll until the file at `rel` exists.
pub fn wait_for_file(p: &Project, rel: &str, within: Duration) {
    wait_until(&format!("{rel} never appeared"), within, || {
        p.path(rel).exists()
    });
}

/// Poll until a process whose command line contains `needle` runs.
pub fn wait_for_process(needle: &str, within: Duration) {
    wait_until(&format!("`{needle}` never started"), within, || {
        !processes_matching(needle).is_empty()
    });
}

/// The pid of the `sleep` whose command line holds `needle` (a tool an
/// agent or a check started), once it runs.
pub fn sleep_started(needle: &str, within: Duration) -> i32 {
    let mut found = None;
    wait_until(&format!("`{needle}` starts"), within, || {
        found = processes_matching(needle)
            .into_iter()
            .find(|pid| command_line(*pid).is_some_and(|c| c.starts_with("sleep ")));
        found.is_some()
    });
    found.unwrap()
}

/// Until the running supervisor's lock records the session `sid` (on its
/// one-second beat): a session the next start ends if this one dies.
pub fn wait_for_session_in_lock(p: &Project, sid: i32) {
    wait_until("the lock records it", Duration::from_secs(10), || {
        ralph::project::read_lock(&ralph::formats::Layout::new(p.root()))
            .is_some_and(|l| l.sessions.iter().any(|s| s.sid == sid))
    });
}

/// Until `child` exits; fail after `limit`.
pub fn wait_exit(mut child: Child, limit: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(started.elapsed() < limit, "the run did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `s` as a TOML basic string (a JSON string is one: the same escapes).
pub fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// Every file under `dir`.
pub fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let path = e.path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// Where the "outside" directory is made: a place the box leaves visible
/// and read-only. Not under `/tmp`, `/var/tmp`, `/srv`, `$HOME` … (the box
/// hides those behind private, writable tmpfs, so a write there never
/// reaches the real directory and is not refused): the checkout's target
/// dir unless it lies there (CI may clone into `/tmp`), else `/opt`.
pub fn outside_base() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let hidden = |p: &Path| {
        ralph::agent::sandbox::HIDDEN
            .iter()
            .any(|h| p.starts_with(h))
            || home.as_ref().is_some_and(|h| p.starts_with(h))
    };
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    [target.clone(), PathBuf::from("/opt/ralph-tests")]
        .into_iter()
        .find(|base| !hidden(base) && std::fs::create_dir_all(base).is_ok())
        .unwrap_or_else(|| {
            std::fs::create_dir_all(&target).unwrap();
            target
        })
}

/// A fake `$HOME` under `dir` with a planted private key
/// (`.ssh/id_ed25519` holding `key`) and an agent CLI's `.claude/`: what
/// a box must hide, and what it lets through.
pub fn home_with_key(dir: &Path, key: &str) -> PathBuf {
    let home = dir.join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), key).unwrap();
    home
}

/// Whether bubblewrap makes a sandbox here: a sandbox test is skipped
/// (and says so) when not, unless CI requires it (`RALPH_REQUIRE_SANDBOX=1`).
pub fn bwrap_works() -> bool {
    let works = std::process::Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--dev", "/dev", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !works {
        assert!(
            std::env::var("RALPH_REQUIRE_SANDBOX").as_deref() != Ok("1"),
            "bubblewrap does not work here but RALPH_REQUIRE_SANDBOX=1"
        );
        eprintln!("skipped: bubblewrap (bwrap) is not installed or cannot make a sandbox here");
    }
    works
}
