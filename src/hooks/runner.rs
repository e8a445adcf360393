//! User hooks from `ralph.toml` `[hooks]`: which event fires which hook
//! point, what a command gets (`RALPH_*` variables, never interpolated into
//! the command, and the event's `events.jsonl` line on stdin), retries, and
//! the `hook` events that report each run. Commands run one at a time, in
//! order, on a worker thread; the loop waits for them except for
//! `on_level`, which fires while the agent works. docs/hooks.md is the
//! user's side of this.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::agent::shell;
use crate::agent::shell::End;
use crate::config::HooksConfig;
use crate::config::trust::Fingerprints;
use crate::events::Bus;
use crate::formats::Point;
use crate::formats::{Event, Record};

/// Wait before the first retry of a failed command; doubles after each.
const RETRY_DELAY: Duration = Duration::from_secs(1);
/// The longest `detail` taken from a hook's output.
const DETAIL_CHARS: usize = 300;

impl Point {
    /// The point `event` fires, if any: a level only when it rises.
    pub(crate) fn of(event: &Event) -> Option<Point> {
        Some(match event {
            Event::Checkpoint { .. } => Point::Checkpoint,
            Event::IterationEnded { .. } => Point::IterationEnd,
            Event::RunEnded { .. } => Point::Exit,
            Event::LevelChanged { from, to, .. } if to > from => Point::Level,
            Event::Breaker { .. } => Point::Breaker,
            Event::LimitWait { .. } => Point::LimitWait,
            Event::Verify { .. } => Point::Verify,
            _ => return None,
        })
    }
}

/// What the run knows when a hook fires, beyond the event itself.
#[derive(Debug, Clone, Default)]
pub(crate) struct Facts {
    pub(crate) iteration: u32,
    pub(crate) run_id: String,
    /// The plan item being worked on (the first open one).
    pub(crate) item: Option<String>,
    /// The latest handoff, relative to the project root.
    pub(crate) handoff: Option<String>,
    /// Why, when the event's own words are not enough (a checkpoint's
    /// reason, e.g. the `--reason` of `ralph checkpoint`).
    pub(crate) reason: Option<String>,
}

/// The hooks of one run and the worker thread that runs them.
pub(crate) struct Hooks {
    config: HooksConfig,
    worker: Option<Worker>,
}

struct Worker {
    jobs: mpsc::Sender<Job>,
    reports: mpsc::Receiver<Event>,
    thread: std::thread::JoinHandle<()>,
}

impl Worker {
    /// Queue `job` and wait until it (and every job before it) is done.
    fn run(&self, mut job: Job) {
        let (done, finished) = mpsc::channel();
        job.done = Some(done);
        if self.jobs.send(job).is_ok() {
            let _ = finished.recv();
        }
    }

    /// Wait until every queued job is done.
    fn settle(&self) {
        self.run(Job {
            point: Point::Exit,
            commands: Vec::new(),
            env: Vec::new(),
            payload: Vec::new(),
            done: None,
        });
    }
}

/// The commands of one point fired by one event.
struct Job {
    point: Point,
    commands: Vec<String>,
    env: Vec<(String, String)>,
    payload: Vec<u8>,
    /// Told when the job is done, for the points the loop waits for.
    done: Option<mpsc::Sender<()>>,
}

impl Hooks {
    /// No thread when no hook is configured. A signal ends a running hook
    /// once the run caught it (`crate::platform::signals`). A command that would run a
    /// file changed since `trusted` was taken (the run's start:
    /// `config::trust`) is refused.
    pub(crate) fn trusting(
        config: &HooksConfig,
        root: &Path,
        trusted: Option<Fingerprints>,
    ) -> Hooks {
        let any = config.points().iter().any(|(_, c)| !c.is_empty());
        let worker = any.then(|| {
            let (jobs, queue) = mpsc::channel::<Job>();
            let (report, reports) = mpsc::channel();
            let mut runner = Runner::new(config, root);
            runner.trusted = trusted;
            let thread = std::thread::spawn(move || {
                for job in queue {
                    runner.run(&job, &crate::platform::signals::INTERRUPTS, &mut |e| {
                        let _ = report.send(e);
                    });
                    if let Some(done) = &job.done {
                        let _ = done.send(());
                    }
                }
            });
            Worker {
                jobs,
                reports,
                thread,
            }
        });
        Hooks {
            config: config.clone(),
            worker,
        }
    }

    /// Publish `event` on `bus` and run the hooks of its point with
    /// `facts()`; publish their reports. `on_exit` runs before `run_ended`
    /// is published (it stays the last event, and waits for every hook
    /// still running); `on_level` runs in the background (see
    /// [`Hooks::report`]). Returns whether a hook ran or was started (it
    /// may have changed the tree).
    pub(crate) fn emit(
        &mut self,
        bus: &mut Bus,
        event: Event,
        facts: impl FnOnce() -> Facts,
    ) -> bool {
        let record = Record::new(event);
        let point = Point::of(&record.event);
        let last = point == Some(Point::Exit);
        if !last {
            bus.publish(&record);
        }
        let commands = point.map_or(&[][..], |p| self.commands(p)).to_vec();
        let ran = !commands.is_empty();
        if let (Some(w), Some(point)) = (&self.worker, point) {
            if ran {
                let job = Job {
                    point,
                    env: env(point, &record.event, facts()),
                    payload: payload(&record),
                    commands,
                    done: None,
                };
                if point == Point::Level {
                    let _ = w.jobs.send(job);
                } else {
                    w.run(job);
                }
            } else if last {
                w.settle();
            }
        }
        self.report(bus);
        if last {
            bus.publish(&record);
        }
        ran
    }

    /// Wait for the hooks still running in the background, and publish
    /// their reports. Before the agent's leftovers are ended: those are
    /// every child of ralph, a running hook's shell too.
    pub(crate) fn settle(&mut self, bus: &mut Bus) {
        if let Some(w) = &self.worker {
            w.settle();
        }
        self.report(bus);
    }

    /// Publish the reports of hooks that finished in the background.
    pub(crate) fn report(&mut self, bus: &mut Bus) {
        if let Some(w) = &self.worker {
            for e in w.reports.try_iter() {
                bus.emit(e);
            }
        }
    }

    fn commands(&self, point: Point) -> &[String] {
        self.config
            .points()
            .into_iter()
            .find(|(key, _)| *key == point.key())
            .map_or(&[], |(_, c)| c)
    }
}

impl Drop for Hooks {
    /// A hook still running in the background is waited for (bounded by
    /// `hooks.timeout`): it must not outlive ralph.
    fn drop(&mut self) {
        if let Some(w) = self.worker.take() {
            drop(w.jobs);
            let _ = w.thread.join();
        }
    }
}

/// The `RALPH_*` variables of a hook fired by `event` (docs/hooks.md).
fn env(point: Point, event: &Event, facts: Facts) -> Vec<(String, String)> {
    let mut handoff = facts.handoff.unwrap_or_default();
    let mut vars: Vec<(&str, String)> = Vec::new();
    let reason = match event {
        Event::Checkpoint {
            trigger,
            level,
            percent,
            commit,
            handoff: written,
            ..
        } => {
            handoff = written.clone().unwrap_or_default();
            vars.extend([
                ("RALPH_LEVEL", level.name().to_string()),
                ("RALPH_PERCENT", format!("{percent:.0}")),
                ("RALPH_COMMIT", commit.clone().unwrap_or_default()),
                ("RALPH_TRIGGER", trigger.to_string()),
            ]);
            format!("{trigger} checkpoint at {level} ({percent:.0}%)")
        }
        Event::IterationEnded {
            outcome,
            progress,
            error,
            ..
        } => {
            vars.push(("RALPH_PROGRESS", progress.to_string()));
            vars.push(("RALPH_OUTCOME", outcome.to_string()));
            error.clone().unwrap_or_else(|| outcome.to_string())
        }
        Event::RunEnded {
            outcome,
            exit_code,
            reason,
            report,
            ..
        } => {
            vars.push(("RALPH_OUTCOME", outcome.to_string()));
            vars.push(("RALPH_EXIT_CODE", exit_code.to_string()));
            vars.push(("RALPH_REPORT", report.clone().unwrap_or_default()));
            reason.clone()
        }
        Event::LevelChanged {
            from, to, percent, ..
        } => {
            vars.push(("RALPH_LEVEL", to.name().to_string()));
            vars.push(("RALPH_FROM_LEVEL", from.name().to_string()));
            vars.push(("RALPH_PERCENT", format!("{percent:.0}")));
            format!("context reached {to} at {percent:.1}% of the usable window")
        }
        Event::Breaker {
            status,
            rule,
            message,
        } => {
            vars.push(("RALPH_BREAKER", status.to_string()));
            vars.push(("RALPH_RULE", rule.clone().unwrap_or_default()));
            message.clone()
        }
        Event::LimitWait {
            until,
            seconds,
            detail,
            ..
        } => {
            vars.push(("RALPH_UNTIL", until.clone()));
            vars.push(("RALPH_WAIT_SECONDS", seconds.to_string()));
            detail.clone()
        }
        Event::Verify { verification: v } => {
            vars.push((
                "RALPH_VERIFY",
                if v.passed { "passed" } else { "failed" }.to_string(),
            ));
            vars.push(("RALPH_VERIFY_WHEN", v.when.name().to_string()));
            v.summary()
        }
        _ => String::new(),
    };
    [
        ("RALPH_HOOK", point.key().to_string()),
        ("RALPH_ITERATION", facts.iteration.to_string()),
        ("RALPH_RUN_ID", facts.run_id),
        ("RALPH_ITEM", facts.item.unwrap_or_default()),
        ("RALPH_REASON", facts.reason.unwrap_or(reason)),
        ("RALPH_HANDOFF", handoff),
    ]
    .into_iter()
    .chain(vars)
    // Plan and agent text (an item, a reason) reach the user's command:
    // printable, as everything ralph sends out.
    .map(|(k, v)| (k.to_string(), crate::text::printable(&v).into_owned()))
    .collect()
}

/// The record as its `events.jsonl` line, newline included (no raw C1).
fn payload(record: &Record) -> Vec<u8> {
    let json = serde_json::to_string(record).unwrap_or_default();
    let mut line = crate::text::printable_json(&json).into_owned().into_bytes();
    line.push(b'\n');
    line
}

/// Runs jobs: each command with its retries, each attempt reported.
struct Runner {
    root: PathBuf,
    timeout: Duration,
    retries: u32,
    retry_delay: Duration,
    /// A signal ended a hook the loop waited for: ralph is on its way out,
    /// and the hooks that would follow are skipped (not `on_exit`).
    cut_short: bool,
    /// What the run trusted at its start: a command that would run a
    /// file changed since is not run.
    trusted: Option<Fingerprints>,
}

impl Runner {
    fn new(config: &HooksConfig, root: &Path) -> Runner {
        Runner {
            root: root.to_path_buf(),
            timeout: config.timeout.0,
            retries: config.retries,
            retry_delay: RETRY_DELAY,
            cut_short: false,
            trusted: None,
        }
    }

    fn run(&mut self, job: &Job, interrupts: &AtomicUsize, report: &mut dyn FnMut(Event)) {
        let mut cut = self.cut_short && job.point != Point::Exit;
        for command in &job.commands {
            if cut {
                report(Event::Hook {
                    hook: job.point,
                    command: command.clone(),
                    ok: false,
                    detail: "not run: ralph was interrupted".into(),
                    attempt: 1,
                });
                continue;
            }
            let changed = self
                .trusted
                .as_ref()
                .map(|t| t.changed_for(command, &self.root))
                .unwrap_or_default();
            if !changed.is_empty() {
                report(Event::Hook {
                    hook: job.point,
                    command: command.clone(),
                    ok: false,
                    detail: format!(
                        "not run: changed since the run started, not trusted: {}",
                        changed.join(", ")
                    ),
                    attempt: 1,
                });
                continue;
            }
            if self.attempts(job, command, interrupts, report) {
                cut = true;
                // A signal during a background hook is the agent's to
                // handle: the checkpoint it brings still runs its hooks.
                self.cut_short |= job.point != Point::Level;
            }
        }
    }

    /// Run `command` until it succeeds or its retries are spent; true when
    /// a signal ended it.
    fn attempts(
        &self,
        job: &Job,
        command: &str,
        interrupts: &AtomicUsize,
        report: &mut dyn FnMut(Event),
    ) -> bool {
        let mut delay = self.retry_delay;
        for attempt in 1..=self.retries + 1 {
            let base = interrupts.load(Ordering::SeqCst);
            let interrupted = || interrupts.load(Ordering::SeqCst) != base;
            let f = shell::run(
                command,
                &self.root,
                &job.env,
                &job.payload,
                self.timeout,
                &interrupted,
            );
            let (ok, mut detail) = describe(&f, self.timeout);
            let signalled = matches!(f.end, End::Interrupted);
            let again = !ok && !signalled && attempt <= self.retries;
            if again {
                detail.push_str(&format!("; retrying in {}s", delay.as_secs_f64()));
            }
            report(Event::Hook {
                hook: job.point,
                command: command.to_string(),
                ok,
                detail,
                attempt,
            });
            if signalled {
                return true;
            }
            if !again {
                return false;
            }
            let until = Instant::now() + delay;
            while Instant::now() < until {
                if interrupted() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(20).min(delay));
            }
            delay *= 2;
        }
        false
    }
}

/// Whether a run succeeded, and what to say about it: the last line of
/// its output (stderr first when it failed).
fn describe(f: &shell::Finished, timeout: Duration) -> (bool, String) {
    let last_line = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        let line = text.trim().lines().last().unwrap_or("").trim().to_string();
        line.chars().take(DETAIL_CHARS).collect::<String>()
    };
    match &f.end {
        End::Exited(status) if status.success() => (true, last_line(&f.stdout)),
        End::Exited(status) => {
            let said = Some(last_line(&f.stderr))
                .filter(|l| !l.is_empty())
                .unwrap_or_else(|| last_line(&f.stdout));
            let detail = if said.is_empty() {
                status.to_string()
            } else {
                format!("{status}: {said}")
            };
            (false, detail)
        }
        End::TimedOut => (
            false,
            format!(
                "timed out after {} and was killed with what it started",
                crate::text::format_duration(timeout)
            ),
        ),
        End::Interrupted => (
            false,
            "ended: ralph got a signal (SIGINT/SIGTERM) while it ran".into(),
        ),
        End::CannotStart(e) => (false, format!("cannot start: {e}")),
        End::Lost(e) => (false, format!("lost track of it: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Level;

    fn job(point: Point, commands: &[&str], env: Vec<(String, String)>) -> Job {
        Job {
            point,
            commands: commands.iter().map(|c| c.to_string()).collect(),
            env,
            payload: Vec::new(),
            done: None,
        }
    }

    fn runner(dir: &Path, retries: u32, timeout: Duration) -> Runner {
        Runner {
            root: dir.to_path_buf(),
            timeout,
            retries,
            retry_delay: Duration::from_millis(50),
            cut_short: false,
            trusted: None,
        }
    }

    /// (command, ok, detail, attempt) of each report.
    fn run_job(
        r: &mut Runner,
        job: &Job,
        signals: &AtomicUsize,
    ) -> Vec<(String, bool, String, u32)> {
        let mut out = Vec::new();
        r.run(job, signals, &mut |e| {
            if let Event::Hook {
                command,
                ok,
                detail,
                attempt,
                ..
            } = e
            {
                out.push((command, ok, detail, attempt));
            }
        });
        out
    }

    #[test]
    fn env_is_passed_and_never_interpolated() {
        let dir = tempfile::tempdir().unwrap();
        let hostile = "$(touch pwned) `touch pwned2`; touch pwned3".to_string();
        let j = job(
            Point::IterationEnd,
            &["printf '%s|%s' \"$RALPH_ITERATION\" \"$RALPH_ITEM\" > out.txt"],
            vec![
                ("RALPH_ITERATION".into(), "3".into()),
                ("RALPH_ITEM".into(), hostile.clone()),
            ],
        );
        let runs = run_job(
            &mut runner(dir.path(), 0, Duration::from_secs(5)),
            &j,
            &AtomicUsize::new(0),
        );
        assert!(runs[0].1, "{runs:?}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
            format!("3|{hostile}")
        );
        for f in ["pwned", "pwned2", "pwned3"] {
            assert!(!dir.path().join(f).exists());
        }
    }

    /// A hook script rewritten during the run is not run; the others are.
    #[test]
    fn a_hook_whose_script_changed_since_the_start_is_not_run() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("notify.sh"), "echo sent > sent.txt\n").unwrap();
        let mut config = crate::config::Config::default();
        config.hooks.on_exit = vec!["sh notify.sh".into(), "echo ok > ok.txt".into()];
        let mut r = runner(root, 0, Duration::from_secs(5));
        r.trusted = Some(Fingerprints::take(root, &config));
        std::fs::write(root.join("notify.sh"), "echo stolen > stolen.txt\n").unwrap();
        let j = job(
            Point::Exit,
            &["sh notify.sh", "echo ok > ok.txt"],
            Vec::new(),
        );
        let runs = run_job(&mut r, &j, &AtomicUsize::new(0));
        assert!(!runs[0].1, "{runs:?}");
        assert_eq!(
            runs[0].2,
            "not run: changed since the run started, not trusted: notify.sh"
        );
        assert!(!root.join("stolen.txt").exists());
        assert!(runs[1].1 && root.join("ok.txt").exists(), "{runs:?}");
    }

    #[test]
    fn failing_and_slow_hooks_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let j = job(
            Point::Checkpoint,
            &["echo boom >&2; exit 3", "sleep 30", "echo https://x/1"],
            Vec::new(),
        );
        let runs = run_job(
            &mut runner(dir.path(), 0, Duration::from_millis(300)),
            &j,
            &AtomicUsize::new(0),
        );
        assert_eq!(runs.len(), 3);
        assert!(!runs[0].1);
        assert_eq!(runs[0].2, "exit status: 3: boom");
        assert!(!runs[1].1);
        assert!(runs[1].2.contains("timed out"), "{runs:?}");
        assert_eq!((runs[2].1, runs[2].2.as_str()), (true, "https://x/1"));
    }

    #[test]
    fn a_failing_command_is_retried_and_each_attempt_reported() {
        let dir = tempfile::tempdir().unwrap();
        // Fails twice, then succeeds.
        let flaky = "n=$(cat n 2>/dev/null || echo 0); echo $((n+1)) > n; [ $n -ge 2 ] || { echo \"try $n\" >&2; exit 1; }";
        let j = job(Point::Checkpoint, &[flaky, "exit 4"], Vec::new());
        let mut r = runner(dir.path(), 2, Duration::from_secs(5));
        let runs = run_job(&mut r, &j, &AtomicUsize::new(0));
        let summary: Vec<(bool, u32)> = runs.iter().map(|r| (r.1, r.3)).collect();
        assert_eq!(
            summary,
            [
                (false, 1),
                (false, 2),
                (true, 3),
                (false, 1),
                (false, 2),
                (false, 3)
            ]
        );
        assert_eq!(runs[0].2, "exit status: 1: try 0; retrying in 0.05s");
        assert_eq!(runs[5].2, "exit status: 4");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("n")).unwrap(),
            "3\n"
        );
    }

    #[test]
    fn a_signal_ends_the_hook_and_skips_the_rest_but_not_on_exit() {
        let dir = tempfile::tempdir().unwrap();
        let signals = std::sync::Arc::new(AtomicUsize::new(0));
        let mut r = runner(dir.path(), 3, Duration::from_secs(60));
        let bump = signals.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            bump.fetch_add(1, Ordering::SeqCst);
        });
        let started = Instant::now();
        let j = job(Point::Checkpoint, &["sleep 623", "touch never"], Vec::new());
        let runs = run_job(&mut r, &j, &signals);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(runs.len(), 2, "no retry after a signal: {runs:?}");
        assert!(runs[0].2.contains("ralph got a signal"), "{runs:?}");
        assert_eq!(runs[1].2, "not run: ralph was interrupted");
        // Later hooks the loop would wait for are skipped; on_exit runs.
        let runs = run_job(
            &mut r,
            &job(Point::IterationEnd, &["touch never"], Vec::new()),
            &signals,
        );
        assert_eq!(runs[0].2, "not run: ralph was interrupted");
        let runs = run_job(
            &mut r,
            &job(Point::Exit, &["touch exited"], Vec::new()),
            &signals,
        );
        assert!(runs[0].1, "{runs:?}");
        assert!(dir.path().join("exited").exists());
        assert!(!dir.path().join("never").exists());
    }

    #[test]
    fn levels_fire_only_when_they_rise() {
        let changed = |from, to| Event::LevelChanged {
            iteration: 1,
            from,
            to,
            percent: 80.0,
            tokens: 1,
        };
        assert_eq!(
            Point::of(&changed(Level::L0, Level::L1)),
            Some(Point::Level)
        );
        assert_eq!(
            Point::of(&changed(Level::L1, Level::L3)),
            Some(Point::Level)
        );
        assert_eq!(Point::of(&changed(Level::L2, Level::L0)), None);
        assert_eq!(
            Point::of(&Event::Warning {
                message: "x".into()
            }),
            None
        );
    }

    /// Issue 34: plan text in a hook's environment is printable.
    #[test]
    fn env_values_carry_no_escape_sequence() {
        let facts = Facts {
            iteration: 1,
            run_id: "r".into(),
            item: Some("fix \u{1b}]52;c;ZXZpbA==\u{7}parser\u{9b}31m".into()),
            handoff: None,
            reason: Some("stuck\u{1b}[2J".into()),
        };
        let e = Event::Warning {
            message: "x".into(),
        };
        let v = env(Point::IterationEnd, &e, facts);
        for (k, value) in &v {
            assert!(!value.chars().any(char::is_control), "{k}={value:?}");
        }
        let item = v.iter().find(|(k, _)| k == "RALPH_ITEM").unwrap();
        assert_eq!(item.1, "fix parser31m");
    }

    #[test]
    fn env_names_the_event_and_the_run() {
        let facts = Facts {
            iteration: 4,
            run_id: "20261121-220000".into(),
            item: Some("parser (#12)".into()),
            handoff: Some(".ralph/handoffs/old.md".into()),
            reason: None,
        };
        let get = |vars: &[(String, String)], k: &str| {
            vars.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("no {k}"))
        };
        let cp = Event::Checkpoint {
            iteration: 4,
            trigger: crate::formats::Trigger::Context,
            level: Level::L2,
            percent: 87.4,
            tokens: 146000,
            commit: Some("abc".into()),
            commit_note: None,
            handoff: Some(".ralph/handoffs/new.md".into()),
        };
        let v = env(Point::Checkpoint, &cp, facts.clone());
        for (k, want) in [
            ("RALPH_HOOK", "on_checkpoint"),
            ("RALPH_ITERATION", "4"),
            ("RALPH_RUN_ID", "20261121-220000"),
            ("RALPH_ITEM", "parser (#12)"),
            ("RALPH_HANDOFF", ".ralph/handoffs/new.md"),
            ("RALPH_LEVEL", "L2"),
            ("RALPH_PERCENT", "87"),
            ("RALPH_COMMIT", "abc"),
            ("RALPH_TRIGGER", "context"),
            ("RALPH_REASON", "context checkpoint at L2 (87%)"),
        ] {
            assert_eq!(get(&v, k), want, "{k}");
        }
        let given = Facts {
            reason: Some("checkpoint requested by hand (lunch)".into()),
            ..facts.clone()
        };
        let v = env(Point::Checkpoint, &cp, given);
        assert_eq!(
            get(&v, "RALPH_REASON"),
            "checkpoint requested by hand (lunch)"
        );
        let breaker = Event::Breaker {
            status: crate::rules::breaker::Status::Open,
            rule: Some("no_progress".into()),
            message: "3 iterations without progress".into(),
        };
        let v = env(Point::Breaker, &breaker, facts.clone());
        assert_eq!(get(&v, "RALPH_BREAKER"), "open");
        assert_eq!(get(&v, "RALPH_RULE"), "no_progress");
        assert_eq!(get(&v, "RALPH_REASON"), "3 iterations without progress");
        assert_eq!(get(&v, "RALPH_HANDOFF"), ".ralph/handoffs/old.md");
        let wait = Event::LimitWait {
            until: "2026-11-22T03:45:05Z".into(),
            seconds: 600,
            source: crate::rules::limits::LimitSource::RateLimitEvent,
            detail: "session limit".into(),
        };
        let v = env(Point::LimitWait, &wait, facts);
        assert_eq!(get(&v, "RALPH_UNTIL"), "2026-11-22T03:45:05Z");
        assert_eq!(get(&v, "RALPH_WAIT_SECONDS"), "600");
        assert_eq!(get(&v, "RALPH_REASON"), "session limit");
    }

    /// Keeps every record it is given.
    struct Keep(std::sync::Arc<std::sync::Mutex<Vec<Record>>>);
    impl crate::events::Sink for Keep {
        fn event(&mut self, record: &Record) {
            self.0.lock().unwrap().push(record.clone());
        }
    }

    #[test]
    fn on_exit_gets_the_run_ended_line_and_runs_before_it_is_published() {
        let dir = tempfile::tempdir().unwrap();
        let config = HooksConfig {
            on_exit: vec!["cat > exit.json".into()],
            on_level: vec!["sleep 0.3; cat > level.json".into()],
            ..HooksConfig::default()
        };
        let kept = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut bus = Bus::new();
        bus.add(Box::new(Keep(kept.clone())));
        let mut hooks = Hooks::trusting(&config, dir.path(), None);
        // In the background: emit returns before the hook is done.
        let started = Instant::now();
        let level = Event::LevelChanged {
            iteration: 1,
            from: Level::L0,
            to: Level::L1,
            percent: 71.0,
            tokens: 118_000,
        };
        assert!(hooks.emit(&mut bus, level, Facts::default));
        assert!(started.elapsed() < Duration::from_millis(250));
        let ended = Event::RunEnded {
            outcome: "completed".into(),
            exit_code: 0,
            reason: "done".into(),
            iterations: 1,
            cost_usd: 0.5,
            report: None,
        };
        assert!(hooks.emit(&mut bus, ended, Facts::default));
        let kept = kept.lock().unwrap();
        let names: Vec<String> = kept
            .iter()
            .map(|r| match &r.event {
                Event::Hook { hook, .. } => hook.to_string(),
                e => serde_json::to_value(e).unwrap()["event"]
                    .as_str()
                    .unwrap()
                    .into(),
            })
            .collect();
        assert_eq!(names, ["level_changed", "on_level", "on_exit", "run_ended"]);
        for (file, record) in [("level.json", &kept[0]), ("exit.json", &kept[3])] {
            assert_eq!(
                std::fs::read_to_string(dir.path().join(file)).unwrap(),
                format!("{}\n", serde_json::to_string(record).unwrap())
            );
        }
    }
}
