//! Reliability under faults (issue 6): the supervisor killed with SIGKILL
//! at random moments, agents that misbehave in every way `ralph sim` (or a
//! small shell script) can, and repositories in states where a commit
//! cannot or must not be made. Each case checks that nothing is lost, the
//! state always parses, no process is left behind, memory stays bounded
//! and the run ends in bounded time with an event that says what happened.
//!
//! `cargo test` runs every case once (a few kills); `cargo test --
//! --ignored` adds the long mode (100 kills). Measured figures are printed
//! to stderr past libtest's capture and collected in docs/reliability.md.

use crate::common;

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, Project, QUICK_L2, Run};
use serde_json::Value;

const PLAN: &str = "# Reliability\n\n- [ ] work\n";
const LIMIT: Duration = Duration::from_secs(90);
const MIB: u64 = 1 << 20;

/// A figure for docs/reliability.md, straight to stderr: libtest captures
/// `eprintln!` of passing tests.
fn figure(text: String) {
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("figure: {text}\n").as_bytes(),
    );
}

// ---------------------------------------------------------------- harness

/// A finished run with ralph's own peak resident memory.
struct Measured {
    run: Run,
    peak_rss: u64,
}

/// Run `cmd` (a `ralph run --json …`) to its end, sampling ralph's peak
/// memory (`common::peak_rss`) while it runs and keeping the largest (runs
/// end with a few quiet steps).
fn measured(mut cmd: Command, limit: Duration) -> Measured {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drain both pipes so that ralph never blocks on a full one.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let started = Instant::now();
    let mut peak_rss = 0;
    let status = loop {
        if let Some(bytes) = common::peak_rss(child.id() as i32) {
            peak_rss = peak_rss.max(bytes);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "ralph run did not end within {limit:?}\nstderr:\n{}",
                String::from_utf8_lossy(&err.join().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let elapsed = started.elapsed();
    let output = std::process::Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    Measured {
        run: Run::from_output(output, elapsed),
        peak_rss,
    }
}

fn run_cmd(p: &Project, args: &[&str]) -> Command {
    let mut c = p.ralph();
    c.arg("run").arg("--json").args(args);
    c
}

/// Live (not zombie) processes whose working directory is inside `root`:
/// the agent and everything its tools started there.
fn processes_in(root: &Path) -> Vec<(i32, String)> {
    let root = root.canonicalize().unwrap();
    let me = std::process::id() as i32;
    common::command_lines()
        .into_iter()
        .filter(|&(pid, _)| pid != me && common::alive(pid))
        .filter(|&(pid, _)| common::cwd_of(pid).is_some_and(|cwd| cwd.starts_with(&root)))
        .collect()
}

/// Live processes in session `sid`.
fn session_members(sid: i32) -> Vec<i32> {
    common::command_lines()
        .into_iter()
        .map(|(pid, _)| pid)
        .filter(|&pid| common::alive(pid))
        .filter(|&pid| {
            common::proc_stat(pid).and_then(|f| f.get(3)?.parse::<i32>().ok()) == Some(sid)
        })
        .collect()
}

/// Kill whatever a failed test left in its project (by pid, never by name).
fn kill_leftovers(root: &Path) {
    for (pid, _) in processes_in(root) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

fn assert_nothing_left(p: &Project) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let left = processes_in(p.root());
        if left.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            kill_leftovers(p.root());
            panic!("processes left behind: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

// ------------------------------------------------------ supervisor killed

/// Each iteration writes a batch of files (so that the WIP commit and the
/// progress snapshot take a while and kills land inside them), appends its
/// number to work.log, crosses L2, hands off and is committed.
const KILL_SCENARIO: &str = r#"
step_delay_ms = 20
# Writing the handoff notes takes a moment, as it does for a real agent.
comply_delay_ms = 200
[[step]]
context = 60000
text = "Writing a batch."
command = "mkdir -p work/$RALPH_ITERATION && i=0; while [ $i -lt 400 ]; do echo $i > work/$RALPH_ITERATION/f$i; i=$((i+1)); done; echo $RALPH_ITERATION >> work.log"
[[step]]
context = 146000
text = "Nearly full."
[[step]]
sleep_ms = 3000
"#;

const KILL_CONFIG: &str =
    "[loop]\nmax_iterations = 1000\n[breaker]\nno_progress = 1000\n[context]\ngrace = \"5s\"\n";

/// When to pull the trigger.
#[derive(Debug, Clone, Copy)]
enum Moment {
    /// This long after ralph starts.
    After(Duration),
    /// This long after the next such event reaches the log.
    AfterEvent(&'static str, Duration),
}

/// Where a kill landed, by the events of the killed run: the last one that
/// starts a phase.
fn phase_of(events: &[Value]) -> &'static str {
    events
        .iter()
        .fold("starting up", |phase, e| match e["event"].as_str() {
            Some("iteration_started") => "agent running",
            Some("checkpoint_requested") => "agent handing off",
            Some("agent_exited") => "progress, handoff, WIP commit",
            Some("checkpoint") => "after the commit: state, hooks",
            Some("iteration_ended") => "between iterations",
            _ => phase,
        })
}

/// A tiny deterministic generator (xorshift): the seed is printed, so a
/// failing sequence of kills can be replayed with RALPH_KILL_SEED.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = std::env::var("RALPH_KILL_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    | 1
            });
        figure(format!("kill seed {seed}"));
        Rng(seed)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

/// What the kills found.
#[derive(Default, Debug)]
struct KillReport {
    kills: u32,
    phases: BTreeMap<&'static str, u32>,
    state_parsed: u32,
    /// Kills with an agent running, and how long it outlived ralph.
    agents_running: u32,
    agent_death_max: Duration,
    /// Tool processes alive after the kill (the agent's session), all
    /// ended by the next run's takeover.
    tool_leftovers: u32,
    takeovers: u32,
    stale_git_locks: u32,
    torn_log_lines: u32,
    stale_tmp_files: u32,
    /// Commits on the branch at the end (none lost).
    commits: u32,
    /// Kills that left an iteration unfinished with its agent started...
    dead_iterations: u32,
    /// ...taken over: a `crash` checkpoint whose WIP commit holds every
    /// file the dead iteration left uncommitted, and the next iteration
    /// resumed from its handoff.
    crash_takeovers: u32,
    /// Uncommitted files found at those kills, each checked in a commit.
    dead_work_files: u32,
}

/// An iteration a kill left unfinished (its agent had started): what the
/// takeover must save.
#[derive(Debug)]
struct Dead {
    iteration: u32,
    /// The event log's length at the kill: the takeover comes after.
    from: u64,
    /// Files uncommitted at the kill (ralph's own aside).
    work: Vec<String>,
}

/// The iteration the state says was at work but never reached the
/// history, when its transcript exists (its agent started).
fn dead_iteration(p: &Project) -> Option<u32> {
    let s = ralph::formats::RunState::load(&p.path(".ralph/state.json")).ok()??;
    let unfinished = s.status.is_active()
        && s.iteration > 0
        && s.history.last().map(|h| h.iteration) != Some(s.iteration);
    let transcript = ralph::formats::Layout::new(p.root()).transcript(&s.run_id, s.iteration);
    (unfinished && transcript.exists()).then_some(s.iteration)
}

/// Files (not deleted) that differ from HEAD or are untracked, outside
/// `.ralph/` and the prompt ralph writes.
fn uncommitted(p: &Project) -> Vec<String> {
    let repo = p.repo();
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true).recurse_untracked_dirs(true);
    let gone = git2::Status::WT_DELETED | git2::Status::INDEX_DELETED;
    repo.statuses(Some(&mut opts))
        .unwrap()
        .iter()
        .filter(|e| !e.status().intersects(gone))
        .filter_map(|e| e.path().map(str::to_string))
        .filter(|f| !f.starts_with(".ralph/") && f != "PROMPT.md")
        .collect()
}

fn in_commit(repo: &git2::Repository, commit: &str, path: &str) -> bool {
    repo.find_commit(commit.parse().unwrap())
        .unwrap()
        .tree()
        .unwrap()
        .get_path(Path::new(path))
        .is_ok()
}

/// Events that appeared in the log after byte `from`.
fn events_since(p: &Project, from: u64) -> Vec<Value> {
    let bytes = std::fs::read(p.path(".ralph/events.jsonl")).unwrap_or_default();
    let start = (from as usize).min(bytes.len());
    bytes[start..]
        .split(|&b| b == b'\n')
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect()
}

fn log_len(p: &Project) -> u64 {
    std::fs::metadata(p.path(".ralph/events.jsonl")).map_or(0, |m| m.len())
}

fn state_iteration(p: &Project) -> (bool, u32) {
    match ralph::formats::RunState::load(&p.path(".ralph/state.json")) {
        Ok(Some(s)) => (true, s.iteration),
        Ok(None) => (true, 0),
        Err(e) => panic!("state.json does not parse after a kill: {e}"),
    }
}

fn branch_commits(p: &Project) -> Vec<git2::Oid> {
    let repo = p.repo();
    let mut walk = repo.revwalk().unwrap();
    walk.push_head().unwrap();
    walk.map(Result::unwrap).collect()
}

fn git_locks(p: &Project) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![p.path(".git")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "lock") {
                found.push(path);
            }
        }
    }
    found
}

/// Start ralph, wait for `moment`, SIGKILL it, check what it left, and
/// check the takeover of the run that follows (the next kill's run, or
/// the final one).
struct Killer {
    report: KillReport,
    /// Every commit ever seen on the branch: none may be lost.
    commits: Vec<git2::Oid>,
    /// work.log at each kill: the final one must extend each.
    work_logs: Vec<String>,
    /// (had state, iteration in it, old agent session) before each start.
    before_start: Option<(u32, Option<i32>)>,
    dead: Vec<Dead>,
}

impl Killer {
    fn new() -> Killer {
        Killer {
            report: KillReport::default(),
            commits: Vec::new(),
            work_logs: Vec::new(),
            before_start: None,
            dead: Vec::new(),
        }
    }

    fn started(&mut self, p: &Project, from: u64, child: &mut Child) {
        // The takeover: the new run continues the count and has ended what
        // the dead one left before it says so.
        let deadline = Instant::now() + Duration::from_secs(20);
        let started = loop {
            if let Some(e) = events_since(p, from)
                .into_iter()
                .find(|e| e["event"] == "run_started")
            {
                break e;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("ralph ended before run_started: {status}");
            }
            assert!(Instant::now() < deadline, "no run_started in the log");
            std::thread::sleep(Duration::from_millis(2));
        };
        if let Some((iteration, session)) = self.before_start.take() {
            assert_eq!(
                started["first_iteration"],
                iteration + 1,
                "the iteration count goes on: {started}"
            );
            assert_eq!(started["resumed"], iteration > 0, "{started}");
            if let Some(sid) = session {
                let left = session_members(sid);
                assert!(
                    left.is_empty(),
                    "the takeover left the dead run's agent session: {left:?}"
                );
                self.report.takeovers += 1;
            }
        }
    }

    fn kill_once(&mut self, p: &Project, moment: Moment) {
        let from = log_len(p);
        let mut child = p.spawn_unread_run();
        let spawned = Instant::now();
        self.started(p, from, &mut child);
        match moment {
            Moment::After(d) => std::thread::sleep(d.saturating_sub(spawned.elapsed())),
            Moment::AfterEvent(name, jitter) => {
                let deadline = Instant::now() + Duration::from_secs(30);
                while !events_since(p, from).iter().any(|e| e["event"] == name) {
                    assert!(Instant::now() < deadline, "no {name} event");
                    assert!(child.try_wait().unwrap().is_none(), "ralph ended");
                    std::thread::sleep(Duration::from_millis(1));
                }
                std::thread::sleep(jitter);
            }
        }
        let agent = ralph::project::read_lock(&ralph::formats::Layout::new(p.root()))
            .and_then(|l| l.agent_pgid);
        child.kill().unwrap();
        child.wait().unwrap();
        let killed = Instant::now();
        self.report.kills += 1;

        *self
            .report
            .phases
            .entry(phase_of(&events_since(p, from)))
            .or_default() += 1;

        // The agent dies with its supervisor (PR_SET_PDEATHSIG).
        if let Some(pid) = agent {
            self.report.agents_running += 1;
            while common::alive(pid) {
                assert!(
                    killed.elapsed() < Duration::from_secs(2),
                    "the agent (pid {pid}) outlived its supervisor"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            self.report.agent_death_max = self.report.agent_death_max.max(killed.elapsed());
            if !session_members(pid).is_empty() {
                self.report.tool_leftovers += 1;
            }
        }

        // The state always parses.
        let (_, iteration) = state_iteration(p);
        self.report.state_parsed += 1;
        self.before_start = Some((iteration, agent));

        if !git_locks(p).is_empty() {
            self.report.stale_git_locks += 1;
        }
        for c in branch_commits(p) {
            if !self.commits.contains(&c) {
                self.commits.push(c);
            }
        }
        self.work_logs
            .push(std::fs::read_to_string(p.path("work.log")).unwrap_or_default());
        if let Some(iteration) = dead_iteration(p) {
            self.report.dead_iterations += 1;
            self.dead.push(Dead {
                iteration,
                from: log_len(p),
                work: uncommitted(p),
            });
        }
    }

    /// Every iteration a kill left unfinished was taken over by a later
    /// run: a `crash` checkpoint of that iteration whose WIP commit(s) hold
    /// the files it left, and the next iteration started resumed from its
    /// handoff.
    fn check_takeovers(&mut self, p: &Project) {
        let repo = p.repo();
        for dead in &self.dead {
            let events = events_since(p, dead.from);
            let is_crash = |e: &Value| {
                e["event"] == "checkpoint"
                    && e["trigger"] == "crash"
                    && e["iteration"] == dead.iteration
            };
            let first = events
                .iter()
                .position(is_crash)
                .unwrap_or_else(|| panic!("{dead:?} was not taken over"));
            let crashes: Vec<&Value> = events.iter().filter(|e| is_crash(e)).collect();
            let commits: Vec<&str> = crashes
                .iter()
                .filter_map(|e| e["commit"].as_str())
                .collect();
            for f in &dead.work {
                assert!(
                    commits.iter().any(|c| in_commit(&repo, c, f)),
                    "{f} of {dead:?} is in none of its crash commits {commits:?}"
                );
            }
            let handoffs: Vec<&str> = crashes
                .iter()
                .filter_map(|e| e["handoff"].as_str())
                .collect();
            let resumed = events[first..]
                .iter()
                .find(|e| e["event"] == "iteration_started")
                .unwrap_or_else(|| panic!("no iteration after the takeover of {dead:?}"));
            assert!(
                resumed["resume_from"]
                    .as_str()
                    .is_some_and(|h| handoffs.contains(&h)),
                "{resumed} does not resume from the crash handoff of {dead:?} ({handoffs:?})"
            );
            self.report.crash_takeovers += 1;
            self.report.dead_work_files += dead.work.len() as u32;
        }
    }

    /// A last, unkilled run: everything before is intact and it can still
    /// commit.
    fn finish(&mut self, p: &Project) {
        let from = log_len(p);
        // One more iteration, whatever the kills' runs spent (budgets count
        // per run unless told otherwise).
        let mut child = p.spawn_run(&["--budget-per-invocation", "--max-iterations", "1"]);
        self.started(p, from, &mut child);
        let run = Run::wait(child, LIMIT);
        assert_eq!(run.code, Some(4), "{}", run.describe());
        assert_eq!(
            run.of("checkpoint")[0]["commit"].as_str().map(str::len),
            Some(40),
            "the run after the kills can still commit: {}",
            run.describe()
        );
        let head = p.repo().head().unwrap().target().unwrap();
        let repo = p.repo();
        for c in &self.commits {
            assert!(
                *c == head || repo.graph_descendant_of(head, *c).unwrap(),
                "commit {c} was lost"
            );
        }
        let work = p.read("work.log");
        for before in &self.work_logs {
            assert!(work.starts_with(before.as_str()), "work.log lost lines");
        }
        self.check_takeovers(p);
        assert_nothing_left(p);
        assert!(git_locks(p).is_empty(), "{:?}", git_locks(p));
        // Every record of the log parses but those a kill tore (at most one
        // per kill), and no record was glued to a torn one.
        let text = std::fs::read(p.path(".ralph/events.jsonl")).unwrap();
        let torn = text
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty() && serde_json::from_slice::<Value>(l).is_err())
            .count() as u32;
        assert!(torn <= self.report.kills, "{torn} torn lines");
        self.report.torn_log_lines += torn;
        let tmp = std::fs::read_dir(p.path(".ralph"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            })
            .count() as u32;
        self.report.stale_tmp_files += tmp;
        assert_eq!(tmp, 0, "temp files of a killed write are cleaned up");
        self.report.commits += branch_commits(p).len() as u32;
    }
}

fn kill_project() -> Project {
    let p = Project::new(PLAN, KILL_SCENARIO, KILL_CONFIG);
    p.write(".gitignore", "");
    p
}

/// The phases take very different times (the WIP commit of a batch of
/// files is the longest): aim at each in turn rather than at random times
/// only.
fn kill_moment(rng: &mut Rng, i: u64) -> Moment {
    match i % 5 {
        0 => Moment::After(rng.ms(100, 2500)),
        1 => Moment::AfterEvent("iteration_started", rng.ms(0, 250)),
        2 => Moment::AfterEvent("checkpoint_requested", rng.ms(0, 200)),
        3 => Moment::AfterEvent("agent_exited", rng.ms(0, 1200)),
        _ => Moment::AfterEvent("checkpoint", rng.ms(0, 15)),
    }
}

fn kill_series(projects: u32, kills_each: u32) -> KillReport {
    let mut rng = Rng::new();
    let mut total = KillReport::default();
    for _ in 0..projects {
        let p = kill_project();
        let mut k = Killer::new();
        // Five kills in a row aim at each phase once, from a random one.
        let shift = rng.below(5);
        for i in 0..kills_each {
            let moment = kill_moment(&mut rng, u64::from(i) + shift);
            k.kill_once(&p, moment);
        }
        k.finish(&p);
        let r = k.report;
        total.kills += r.kills;
        for (phase, n) in r.phases {
            *total.phases.entry(phase).or_default() += n;
        }
        total.state_parsed += r.state_parsed;
        total.agents_running += r.agents_running;
        total.agent_death_max = total.agent_death_max.max(r.agent_death_max);
        total.tool_leftovers += r.tool_leftovers;
        total.takeovers += r.takeovers;
        total.stale_git_locks += r.stale_git_locks;
        total.torn_log_lines += r.torn_log_lines;
        total.stale_tmp_files += r.stale_tmp_files;
        total.commits += r.commits;
        total.dead_iterations += r.dead_iterations;
        total.crash_takeovers += r.crash_takeovers;
        total.dead_work_files += r.dead_work_files;
    }
    figure(format!("{total:?}"));
    total
}

#[test]
fn supervisor_killed_at_random_moments_loses_nothing() {
    let r = kill_series(1, 5);
    assert_eq!(r.state_parsed, r.kills);
    // One kill in five aims at a running agent.
    assert!(r.dead_iterations > 0, "{r:?}");
    assert_eq!(r.crash_takeovers, r.dead_iterations);
}

#[test]
#[ignore = "long mode: 100 kills, several minutes"]
fn supervisor_killed_100_times_loses_nothing() {
    let r = kill_series(10, 10);
    assert_eq!(r.kills, 100);
    assert_eq!(r.state_parsed, 100);
    assert_eq!(r.crash_takeovers, r.dead_iterations);
    figure(format!(
        "{} of 100 kills left an iteration unfinished; {} of {} taken over (crash handoff, WIP commit with its {} files, resumed)",
        r.dead_iterations, r.crash_takeovers, r.dead_iterations, r.dead_work_files
    ));
}

/// The parent-death signal fires when the *thread* that forked the agent
/// exits; ralph forks from the main thread (current-thread runtime), so
/// the agent dies with the process, not earlier, not later.
#[test]
fn agent_dies_with_its_supervisor_and_its_tools_with_the_takeover() {
    let scenario = r#"
[[iteration]]
[[iteration.step]]
context = 30000
text = "Starting the slow suite."
command = "sleep 611"
[[iteration]]
[[iteration.step]]
result = "<promise>COMPLETE</promise>"
"#;
    let p = Project::new(
        "- [ ] done\n",
        scenario,
        "[loop]\nrequire_plan_complete = false\n",
    );
    let mut child = p.spawn_run(&[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let sleeper = loop {
        if let Some((pid, _)) = processes_in(p.root())
            .into_iter()
            .find(|(_, cmd)| cmd.starts_with("sleep 611"))
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the tool never started");
        std::thread::sleep(Duration::from_millis(10));
    };
    let agent = ralph::project::read_lock(&ralph::formats::Layout::new(p.root()))
        .and_then(|l| l.agent_pgid)
        .expect("the lock names the agent");
    // The agent spent seconds alive beside ralph's other threads (stdout
    // and stderr readers, the runtime): only the main thread's exit counts.
    assert!(common::alive(agent));
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    while common::alive(agent) {
        assert!(
            killed.elapsed() < Duration::from_secs(1),
            "agent outlived ralph"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    figure(format!(
        "agent gone {:?} after ralph's SIGKILL",
        killed.elapsed()
    ));
    // Its tool ran in a process group of its own: it is still there, in
    // the agent's session, until a new run takes over.
    assert!(
        common::alive(sleeper),
        "expected the tool to outlive the agent"
    );
    assert!(session_members(agent).contains(&sleeper));
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.of("run_started")[0]["first_iteration"], 2);
    assert!(!common::alive(sleeper), "the takeover ended the tool");
    assert_nothing_left(&p);
}

/// What a supervisor killed inside `git commit` leaves: its lock record
/// says it was committing, and git's lock files are still there. The next
/// run removes them (they are its own) and can commit again; without that
/// record an index.lock is another git's and is left alone.
#[test]
fn git_locks_of_a_supervisor_killed_mid_commit_are_removed_by_the_next_run() {
    const CHECKPOINT: &str = "[[step]]\ncontext = 146000\ntext = \"Writing.\"\npath = \"work.txt\"\ncontent = \"x\\n\"\n";
    for committing in [true, false] {
        let p = Project::new(PLAN, CHECKPOINT, "");
        p.write(
            ".ralph/lock",
            &format!(
                r#"{{"pid":999999999,"run_id":"dead","agent_pgid":null,"started_at":"2026-01-01T00:00:00Z","committing":{committing}}}"#
            ),
        );
        p.write(".git/index.lock", "");
        let run = p.run(&["--max-iterations", "1"], LIMIT);
        assert_eq!(run.code, Some(4), "{}", run.describe());
        let commit = run.of("checkpoint")[0]["commit"].clone();
        if committing {
            assert_eq!(
                commit.as_str().map(str::len),
                Some(40),
                "{}",
                run.describe()
            );
            assert_eq!(
                run.of("warning")[0]["message"],
                "the previous run died writing to git; removed the git lock files it left: .git/index.lock"
            );
            assert!(!p.path(".git/index.lock").exists());
        } else {
            assert_eq!(commit, Value::Null);
            assert!(
                p.path(".git/index.lock").exists(),
                "another git's lock is kept"
            );
        }
    }
}

// ------------------------------------------------------------ agent faults

/// One row of the agent-fault table in docs/reliability.md.
fn report_case(name: &str, m: &Measured, what: &str) {
    figure(format!(
        "agent fault | {name} | {:.1} s | peak RSS {} | exit {:?} | {what}",
        m.run.elapsed.as_secs_f64(),
        mib(m.peak_rss),
        m.run.code
    ));
}

/// Well below the 64 MiB of the big lines.
const RSS_BOUND: u64 = 40 * MIB;

#[test]
fn agent_that_exits_at_once_fails_each_iteration_until_the_breaker_opens() {
    let p = Project::new(PLAN, "", "");
    p.write(
        "ralph.toml",
        "[agent]\ncommand = \"sh -c 'echo gone >&2; exit 7'\"\n[breaker]\nconsecutive_failures = 2\nsame_error = 9\nno_progress = 9\n",
    );
    let m = measured(run_cmd(&p, &[]), LIMIT);
    let run = &m.run;
    assert_eq!(run.code, Some(3), "{}", run.describe());
    let ended = run.of("iteration_ended");
    assert_eq!(ended.len(), 2);
    assert_eq!(
        ended[0]["error"],
        "agent exited with code 7 without a result: gone",
        "{}",
        run.describe()
    );
    assert!(run.elapsed < Duration::from_secs(10));
    report_case(
        "exits at once (exit 7)",
        &m,
        "iteration_ended error, breaker opens (exit 3)",
    );
}

#[test]
fn agent_crashing_mid_line_is_a_failure_with_the_line_counted() {
    let scenario = r#"
[[step]]
context = 30000
text = "About to crash."
[[step]]
partial = '{"type":"assistant","message":{"id":"msg_x","content":[{"type":"te'
exit_code = 1
"#;
    let p = Project::new(PLAN, scenario, "[loop]\nmax_iterations = 1\n");
    let m = measured(run_cmd(&p, &[]), LIMIT);
    let run = &m.run;
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let ended = run.of("iteration_ended")[0];
    assert_eq!(ended["invalid_lines"], 1);
    assert_eq!(ended["error"], "agent exited with code 1 without a result");
    let warnings = run.of("warning");
    assert!(
        warnings[0]["message"]
            .as_str()
            .unwrap()
            .contains("undecodable agent output: malformed JSON line"),
        "{}",
        run.describe()
    );
    report_case(
        "crashes mid-line (exit 1)",
        &m,
        "warning + iteration_ended error, invalid_lines 1",
    );
}

/// Plan done and promise kept after the noise: the noise costs nothing.
const FINISH: &str = r#"
[[step]]
context = 40000
path = "fix_plan.md"
old = "- [ ] work"
new = "- [x] work"
[[step]]
result = "<promise>COMPLETE</promise>"
"#;

#[test]
fn garbage_lines_are_skipped_counted_and_reported_three_times() {
    let scenario = format!(
        r#"
[[step]]
raw = "this is not JSON"
[[step]]
raw = '{{"type":'
[[step]]
raw = "[1, 2, 3]"
[[step]]
raw = ""
[[step]]
raw = '{{"type":"assistant","message":{{"usage":"lots"}}}}'
[[step]]
raw = '{{"type":"brand_new_kind","payload":{{}}}}'
{FINISH}"#
    );
    let p = Project::new(PLAN, &scenario, "");
    let m = measured(run_cmd(&p, &[]), LIMIT);
    let run = &m.run;
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let ended = run.of("iteration_ended")[0];
    assert_eq!(ended["invalid_lines"], 5, "{ended}");
    assert_eq!(
        ended["skipped_lines"], 1,
        "an unknown type is skipped, not invalid"
    );
    assert_eq!(run.of("warning").len(), 3, "warnings are capped");
    report_case(
        "prints garbage (5 bad lines)",
        &m,
        "3 warnings, counted, run completes (exit 0)",
    );
}

#[test]
fn non_utf8_output_is_skipped_and_kept_verbatim_in_the_transcript() {
    let scenario = format!(
        r#"
[[step]]
raw_hex = "ff fe 00 41 42"
[[step]]
# JSON, with invalid UTF-8 inside the string ralph reads
raw_hex = "7b 22 74 79 70 65 22 3a 22 61 73 c3 28 22 7d"
[[step]]
# a line split across writes, with a lone continuation byte
raw_hex = "7b 22 74 79 70 65 22 3a"
newline = false
[[step]]
raw_hex = "22 80 22 7d"
{FINISH}"#
    );
    let p = Project::new(PLAN, &scenario, "");
    let m = measured(run_cmd(&p, &[]), LIMIT);
    let run = &m.run;
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.of("iteration_ended")[0]["invalid_lines"], 3);
    let state = p.state();
    let transcript = std::fs::read(p.path(&format!(
        ".ralph/runs/{}/iter-001.jsonl",
        state["run_id"].as_str().unwrap()
    )))
    .unwrap();
    assert!(
        transcript
            .windows(5)
            .any(|w| w == [0xff, 0xfe, 0x00, 0x41, 0x42]),
        "the raw bytes are kept"
    );
    report_case(
        "non-UTF-8 bytes (3 lines)",
        &m,
        "counted, transcript verbatim, run completes",
    );
}

#[test]
fn a_64_mib_tool_result_line_keeps_memory_bounded() {
    let scenario = format!(
        "[[step]]\ncontext = 30000\ntext = \"Reading a huge file.\"\n[[step]]\nbig_line_bytes = {}\n[[step]]\nsleep_ms = 300\n{FINISH}",
        64 * MIB
    );
    let p = Project::new(PLAN, &scenario, "");
    let m = measured(run_cmd(&p, &[]), LIMIT);
    assert_eq!(m.run.code, Some(0), "{}", m.run.describe());
    assert!(m.peak_rss < RSS_BOUND, "peak RSS {}", mib(m.peak_rss));
    let state = p.state();
    let size = std::fs::metadata(p.path(&format!(
        ".ralph/runs/{}/iter-001.jsonl",
        state["run_id"].as_str().unwrap()
    )))
    .unwrap()
    .len();
    assert!(size > 64 * MIB, "the transcript keeps the whole line");
    report_case(
        "64 MiB tool_result line",
        &m,
        "decoded while streaming, transcript complete",
    );
}

/// Not something Claude Code prints (its messages are capped in tokens),
/// but an agent that does must not cost ralph the line's size in memory.
#[test]
fn a_64_mib_text_and_result_keep_memory_bounded() {
    let emit = r#"read -r prompt
printf '{"type":"system","subtype":"init","model":"claude-sonnet-4-5"}\n'
printf '{"type":"assistant","message":{"id":"m1","model":"claude-sonnet-4-5","content":[{"type":"text","text":"'
head -c 67108864 /dev/zero | tr '\0' 'a'
printf '"}],"usage":{"input_tokens":30000}},"parent_tool_use_id":null}\n'
printf '{"type":"result","subtype":"success","result":"<promise>COMPLETE</promise> '
head -c 67108864 /dev/zero | tr '\0' 'b'
printf '"}\n'
sleep 0.3
"#;
    let p = Project::new("- [ ] work\n", "", "");
    p.write("emit.sh", emit);
    p.write(
        "ralph.toml",
        "[agent]\ncommand = \"sh emit.sh\"\n[loop]\nrequire_plan_complete = false\n",
    );
    let m = measured(run_cmd(&p, &[]), LIMIT);
    assert_eq!(m.run.code, Some(0), "{}", m.run.describe());
    assert!(m.peak_rss < RSS_BOUND, "peak RSS {}", mib(m.peak_rss));
    report_case(
        "64 MiB assistant text + 64 MiB result",
        &m,
        "strings cut to 64 KiB, promise seen",
    );
}

#[test]
fn agent_that_never_prints_a_result_is_a_failure() {
    let scenario = "[[step]]\ncontext = 30000\ntext = \"Working.\"\npath = \"work.txt\"\ncontent = \"half\\n\"\n[[step]]\nexit = 0\n";
    let p = Project::new(PLAN, scenario, "[loop]\nmax_iterations = 1\n");
    let m = measured(run_cmd(&p, &[]), LIMIT);
    let run = &m.run;
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert_eq!(
        run.of("iteration_ended")[0]["error"],
        "agent exited without a result"
    );
    assert_eq!(
        p.state()["history"][0]["error"],
        "agent exited without a result"
    );
    assert_eq!(p.read("work.txt"), "half\n");
    report_case(
        "never prints a result (exit 0)",
        &m,
        "iteration_ended error, work kept",
    );
}

/// An agent that prints faster than ralph reads and exits at once (no
/// wait for stdin's end) still has every line read: its result included.
#[test]
fn agent_printing_thousands_of_lines_then_exiting_loses_none() {
    let mut scenario = String::from("[[step]]\ncontext = 30000\ntext = \"Chatty.\"\n");
    for i in 0..3000 {
        scenario.push_str(&format!(
            "[[step]]\nraw = '{{\"type\":\"system\",\"subtype\":\"status\",\"n\":{i}}}'\n"
        ));
    }
    scenario.push_str(FINISH);
    scenario.push_str("[[step]]\nexit = 0\n");
    let p = Project::new(PLAN, &scenario, "[loop]\nmax_iterations = 1\n");
    let m = measured(run_cmd(&p, &[]), LIMIT);
    let run = &m.run;
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(run.of("iteration_ended")[0]["skipped_lines"], 3000);
    report_case(
        "3000 lines, then exits at once",
        &m,
        "every line read after the exit, promise seen",
    );
}

#[test]
fn hanging_agent_that_ignores_sigint_and_sigterm_is_killed() {
    let scenario = r#"
on_message = "ignore"
on_sigint = "ignore"
on_sigterm = "ignore"
[[step]]
context = 30000
text = "Thinking very hard."
[[step]]
hang = true
"#;
    let p = Project::new(
        PLAN,
        scenario,
        "[loop]\nmax_iterations = 1\nidle_timeout = \"1s\"\n[context]\ngrace = \"1s\"\n",
    );
    let m = measured(run_cmd(&p, &[]), LIMIT);
    let run = &m.run;
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let signals: Vec<_> = run
        .of("agent_signalled")
        .iter()
        .map(|e| e["signal"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        signals,
        ["SIGINT", "SIGTERM", "SIGKILL"],
        "{}",
        run.describe()
    );
    assert_eq!(run.of("agent_exited")[0]["signal"], 9);
    assert_eq!(
        run.of("iteration_ended")[0]["error"],
        "no output for 1s (loop.idle_timeout)"
    );
    // idle 1 s + grace 1 s + SIGINT 5 s + SIGTERM 5 s.
    assert!(run.elapsed < Duration::from_secs(20), "{:?}", run.elapsed);
    assert_nothing_left(&p);
    report_case(
        "hangs, ignores SIGINT and SIGTERM",
        &m,
        "idle timeout, SIGINT → SIGTERM → SIGKILL",
    );
}

#[test]
fn background_child_holding_stdout_does_not_hold_the_run() {
    let scenario = format!(
        "[[step]]\ncontext = 30000\ntext = \"Starting a server.\"\ncommand = \"sleep 617 &\"\ninherit_stdout = true\n{FINISH}"
    );
    let p = Project::new(PLAN, &scenario, "");
    let m = measured(run_cmd(&p, &[]), LIMIT);
    assert_eq!(m.run.code, Some(0), "{}", m.run.describe());
    assert!(
        m.run.elapsed < Duration::from_secs(10),
        "{:?}",
        m.run.elapsed
    );
    assert_nothing_left(&p);
    report_case(
        "child holds stdout after exit",
        &m,
        "orphan killed at iteration end, run completes",
    );
}

#[test]
fn stderr_flood_is_capped_on_disk_and_in_memory() {
    let scenario = format!(
        "[[step]]\ncontext = 30000\ntext = \"Noisy.\"\n[[step]]\nstderr_bytes = {}\n[[step]]\nexit = 2\n",
        64 * MIB
    );
    let p = Project::new(PLAN, &scenario, "[loop]\nmax_iterations = 1\n");
    let m = measured(run_cmd(&p, &[]), LIMIT);
    let run = &m.run;
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let error = run.of("iteration_ended")[0]["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        error.starts_with("agent exited with code 2 without a result: ralph sim: stderr flood"),
        "{error}"
    );
    let state = p.state();
    let saved = std::fs::metadata(p.path(&format!(
        ".ralph/runs/{}/iter-001.stderr",
        state["run_id"].as_str().unwrap()
    )))
    .unwrap()
    .len();
    assert!(
        saved <= 8 * MIB + 16 * 1024,
        "{saved} bytes of stderr saved"
    );
    assert!(m.peak_rss < RSS_BOUND, "peak RSS {}", mib(m.peak_rss));
    report_case(
        "floods stderr (64 MiB)",
        &m,
        "8 MiB saved, last line in the error",
    );
}

// ------------------------------------------------------ repository states

#[test]
fn empty_repository_gets_a_root_commit() {
    let p = Project::bare(PLAN, QUICK_L2, "");
    git2::Repository::init(p.root()).unwrap();
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let cp = run.of("checkpoint")[0];
    assert_eq!(cp["commit"].as_str().map(str::len), Some(40), "{cp}");
    let repo = p.repo();
    let head = repo.head().unwrap().peel_to_commit().unwrap();
    assert_eq!(head.parent_count(), 0);
    let files = p.head_files();
    for f in ["work.txt", "fix_plan.md", "ralph.toml", "PROMPT.md"] {
        assert!(files.contains(&f.to_string()), "{files:?}");
    }
    assert!(files.iter().any(|f| f.starts_with(".ralph/handoffs/")));
    assert!(
        !files
            .iter()
            .any(|f| f.starts_with(".ralph/") && !f.starts_with(".ralph/handoffs/")),
        "{files:?}"
    );
}

#[test]
fn merge_in_progress_skips_the_commit_and_keeps_the_work() {
    let p = Project::new(PLAN, QUICK_L2, "");
    let head = p.repo().head().unwrap().target().unwrap();
    p.write(".git/MERGE_HEAD", &format!("{head}\n"));
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let cp = run.of("checkpoint")[0];
    assert_eq!(cp["commit"], Value::Null);
    assert!(
        cp["commit_note"]
            .as_str()
            .unwrap()
            .contains("a merge is in progress"),
        "{cp}"
    );
    assert!(cp["handoff"].is_string());
    assert_eq!(p.log(), ["initial"]);
    assert_eq!(p.read("work.txt"), "work in progress\n");
    assert!(
        p.path(".git/MERGE_HEAD").exists(),
        "the merge is left alone"
    );
}

/// Run ralph under `unshare --mount` so that a mount made for the test is
/// private to it and gone with it; `after` runs in the same namespace once
/// ralph has ended (to look at what is only there). None when this machine
/// does not allow it (not root, no unshare): the caller skips.
fn in_private_mount(p: &Project, setup: &str, args: &[&str], after: &str) -> Option<Command> {
    let probe = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        return None;
    }
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "{setup} || exit 99; \"$0\" run --json \"$@\"; s=$?; {after} exit $s"
        ))
        .arg(BIN)
        .args(args)
        .current_dir(p.root())
        .env_remove("NO_COLOR")
        .env("RALPH_LOG", "off");
    Some(c)
}

fn skip(why: &str) {
    figure(format!("SKIPPED: {why}"));
}

/// A project after one checkpointed run, with a change by hand since.
fn project_with_state() -> (Project, String, Vec<String>) {
    let p = Project::new(PLAN, QUICK_L2, "");
    let first = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(first.code, Some(4), "{}", first.describe());
    p.write("work.txt", "edited by hand\n");
    let state = p.read(".ralph/state.json");
    let log = p.log();
    (p, state, log)
}

/// ralph refused to start: exit 1 with `says`, no agent, nothing changed.
fn refused_and_nothing_changed(p: &Project, cmd: Command, says: &str, state: &str, log: &[String]) {
    let m = measured(cmd, LIMIT);
    let run = &m.run;
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert!(run.stderr.starts_with(says), "{}", run.stderr);
    assert!(run.of("iteration_started").is_empty(), "no agent started");
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(p.path(".ralph"), std::fs::Permissions::from_mode(0o700));
    if common::is_root() {
        // Back from `nobody` (git refuses a repository someone else owns).
        let _ = Command::new("chown")
            .args(["-R", "0:0"])
            .arg(p.root())
            .status();
    }
    assert_eq!(p.read(".ralph/state.json"), state);
    assert_eq!(p.log(), log);
    assert_eq!(p.read("work.txt"), "edited by hand\n");
    figure(format!(
        "read-only .ralph/: exit 1, {}",
        run.stderr.lines().collect::<Vec<_>>().join(" / ")
    ));
}

/// `.ralph/` on a read-only mount (root ignores permission bits, a
/// read-only mount it cannot).
#[test]
fn read_only_ralph_mount_is_a_clear_error_and_changes_nothing() {
    let (p, state, log) = project_with_state();
    let Some(cmd) = in_private_mount(
        &p,
        "mount --bind .ralph .ralph && mount -o remount,bind,ro .ralph",
        &[],
        "",
    ) else {
        return skip("a read-only mount needs unshare --mount (root)");
    };
    let says = format!("error: cannot open {}/.ralph/lock\n", p.root().display());
    refused_and_nothing_changed(&p, cmd, &says, &state, &log);
}

/// `.ralph/` without write permission, for a user that is not root (as
/// root: the project is handed to `nobody` and ralph runs as `nobody`).
#[test]
fn unwritable_ralph_dir_is_a_clear_error_and_changes_nothing() {
    let (p, state, log) = project_with_state();
    let cmd = if common::is_root() {
        let chown = Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(p.root())
            .status();
        let setpriv = Command::new("setpriv").arg("--version").output();
        if !chown.is_ok_and(|s| s.success()) || !setpriv.is_ok_and(|o| o.status.success()) {
            return skip("running as another user needs chown and setpriv");
        }
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            BIN,
            "run",
            "--json",
        ])
        .current_dir(p.root())
        .env("RALPH_LOG", "off");
        c
    } else {
        run_cmd(&p, &[])
    };
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p.path(".ralph"), std::fs::Permissions::from_mode(0o500)).unwrap();
    let says = format!(
        "error: cannot write {}/.ralph/state.json\ncaused by: Permission denied (os error 13)\nhint: check the permissions",
        p.root().display()
    );
    refused_and_nothing_changed(&p, cmd, &says, &state, &log);
}

/// `.ralph/` on a 512 KiB file system that the agent fills up in its
/// second iteration: every later write of ralph's runtime files fails. The
/// state file keeps its last good version (atomic writes: never half
/// written, no temp file left), the failures are reported, and the work is
/// still committed (the repository is elsewhere).
#[test]
fn disk_full_while_writing_state_keeps_the_last_good_state() {
    let scenario = r#"
[[iteration]]
[[iteration.step]]
context = 30000
text = "Step one."
[[iteration]]
[[iteration.step]]
context = 60000
text = "Filling the disk."
command = "head -c 8388608 /dev/zero > .ralph/filler"
[[iteration.step]]
context = 146000
text = "Saving."
path = "work.txt"
content = "work in progress\n"
"#;
    let p = Project::new(PLAN, scenario, "[breaker]\nno_progress = 9\n");
    // What is on the file system when ralph has ended, copied out of the
    // private mount.
    let after = "cp .ralph/state.json state-on-full-disk.json; ls -a .ralph > ralph-listing.txt; df -k .ralph | tail -1 > ralph-df.txt;";
    let Some(cmd) = in_private_mount(
        &p,
        "mkdir -p .ralph && mount -t tmpfs -o size=512k,mode=0700 tmpfs .ralph",
        &["--max-iterations", "2"],
        after,
    ) else {
        return skip("disk full needs unshare --mount and tmpfs (root)");
    };
    let m = measured(cmd, LIMIT);
    let run = &m.run;
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let warnings: Vec<&str> = run
        .of("warning")
        .iter()
        .map(|w| w["message"].as_str().unwrap())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("cannot save the run state: cannot write")
                && w.contains("state.json")),
        "{warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("cannot write the handoff")),
        "{warnings:?}"
    );
    let cp = run.of("checkpoint")[0];
    assert_eq!(cp["commit"].as_str().map(str::len), Some(40), "{cp}");
    assert!(p.head_files().contains(&"work.txt".to_string()));
    let df = p.read("ralph-df.txt");
    let available: u64 = df.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert_eq!(available, 0, "the file system was full: {df}");
    let state: ralph::formats::RunState = serde_json::from_str(&p.read("state-on-full-disk.json"))
        .expect("the state on the full disk parses");
    assert_eq!(state.iteration, 2, "the last state that could be written");
    let listing = p.read("ralph-listing.txt");
    assert!(!listing.contains(".tmp-"), "{listing}");
    figure(format!(
        "disk full: exit 4, {} warnings, WIP commit made, state.json whole (iteration {}, status {}); first warning: {}",
        warnings.len(),
        state.iteration,
        state.status,
        warnings[0]
    ));
}

/// Issue 13, item 7: on a full disk the transcript was cut silently (the
/// warning went to a debug log only) and `state.json` still said
/// `running` after the run had ended. Now the lost transcript is a
/// warning event and the final state is the truth, written over the old
/// file in place when there is no room for a new one.
#[test]
fn disk_full_is_a_warning_and_the_final_state_is_the_truth() {
    let scenario = r#"
[[iteration]]
[[iteration.step]]
context = 30000
text = "Step one."
[[iteration]]
[[iteration.step]]
context = 60000
text = "Filling the disk."
command = "head -c 8388608 /dev/zero > .ralph/filler"
[[iteration.step]]
big_line_bytes = 262144
[[iteration.step]]
context = 70000
text = "Still here."
"#;
    let p = Project::new(PLAN, scenario, "[breaker]\nno_progress = 9\n");
    let after =
        "cp .ralph/state.json state-on-full-disk.json; df -k .ralph | tail -1 > ralph-df.txt;";
    let Some(cmd) = in_private_mount(
        &p,
        "mkdir -p .ralph && mount -t tmpfs -o size=512k,mode=0700 tmpfs .ralph",
        &["--max-iterations", "2"],
        after,
    ) else {
        return skip("disk full needs unshare --mount and tmpfs (root)");
    };
    let m = measured(cmd, LIMIT);
    let run = &m.run;
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let df = p.read("ralph-df.txt");
    let available: u64 = df.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert_eq!(available, 0, "the file system was full: {df}");
    let warnings: Vec<&str> = run
        .of("warning")
        .iter()
        .map(|w| w["message"].as_str().unwrap())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("cannot save the transcript, the rest of it is lost")),
        "{warnings:?}"
    );
    let state: ralph::formats::RunState = serde_json::from_str(&p.read("state-on-full-disk.json"))
        .expect("the state on the full disk parses");
    assert_eq!(
        state.status.name(),
        "iteration_limit",
        "the final state is the truth"
    );
    assert_eq!(state.iteration, 2);
    figure(format!(
        "disk full: the transcript loss is a warning; final state.json says {} (iteration {})",
        state.status, state.iteration
    ));
}
