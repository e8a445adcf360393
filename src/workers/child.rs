//! A worker's loop as a child process: `ralph run --json --worker NAME` in
//! its worktree, its JSON events read on a thread each and handed to the
//! coordinator tagged with the worker; and `ralph_loop`, the one launcher
//! of ralph's own loops (a worker's, a fleet item's).
//!
//! Why a child `ralph run` and not a supervisor inside the coordinator's
//! process: every protection of one loop (lock, takeover, checkpoints,
//! snapshots, breaker, signals, hooks) is per process and per project
//! directory; a child gets them all unchanged, and a worker killed alone is
//! taken over by the next child in its worktree exactly as a single run is.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::Sender;

use nix::sys::signal::Signal;

use crate::error::{Error, Result};
use crate::formats::Record;
use crate::formats::ledger::Assignment;

/// The plan a worker runs on: its unit only, under its own `.ralph/`
/// (never committed), so that the shared plan has one writer.
pub(crate) const WORKER_PLAN: &str = ".ralph/worker-plan.md";

/// A worker's prompt file (`prompt_file`), out of its commits.
pub(crate) const WORKER_PROMPT: &str = ".ralph/PROMPT.md";

/// What the children tell the coordinator.
pub(crate) enum Msg {
    Record(String, Box<Record>),
    /// A line on the child's stderr (or stdout that is not an event).
    Said(String, String),
}

pub(crate) struct Child {
    process: std::process::Child,
}

/// The one launcher of ralph's own loops (a parallel run's worker, a
/// fleet item's loop): `ralph run` in `dir`, in a process group of its own
/// (a terminal's Ctrl-C reaches the parent only, which passes it on once: a
/// second one escalates, as in one loop), sent `death` when its parent
/// dies, even of SIGKILL (`platform::die_with_parent`).
pub(crate) fn ralph_loop(dir: &Path, death: Signal) -> Result<Command> {
    let exe =
        std::env::current_exe().map_err(|e| Error::wrap("cannot find ralph's own program", e))?;
    let mut cmd = Command::new(exe);
    cmd.current_dir(dir).arg("run").process_group(0);
    crate::platform::die_with_parent(&mut cmd, death, crate::platform::Heir::Ralph);
    Ok(cmd)
}

/// Start `a`'s worker. `fresh`: a new run in its worktree (a new unit or
/// task); otherwise it continues (and takes over) the run there.
pub(crate) fn spawn(
    a: &Assignment,
    run_branch: &str,
    fresh: bool,
    pass: &[String],
    tx: &Sender<Msg>,
) -> Result<Child> {
    // A coordinator killed with -9 stops its workers as `ralph stop` does
    // (SIGUSR2: a checkpoint with the agent's handoff, exit 6). Not
    // SIGTERM: the kernel sends the parent-death signal again each time the
    // worker passes to another of the dying coordinator's threads, and a
    // second interrupt kills the agent at once; a second stop is the same
    // stop.
    let mut cmd = ralph_loop(&a.project_dir, Signal::SIGUSR2)?;
    cmd.args(["--json", "--worker", &a.worker])
        .args(fresh.then_some("--fresh"))
        .args(pass)
        .arg(WORKER_PLAN)
        .env("RALPH_WORKER", &a.worker)
        .env("RALPH_ITEM", &a.item)
        .env("RALPH_WORKER_TASK", a.task.name())
        .env("RALPH_RUN_BRANCH", run_branch)
        .env("RALPH_WORKER_BRANCH", &a.branch)
        .env("PWD", &a.project_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut process = cmd
        .spawn()
        .map_err(|e| Error::wrap(format!("cannot start worker {}", a.worker), e))?;
    if let Some(out) = process.stdout.take() {
        let (tx, worker) = (tx.clone(), a.worker.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
                let msg = match serde_json::from_str::<Record>(&line) {
                    Ok(record) => Msg::Record(worker.clone(), Box::new(record)),
                    Err(_) => Msg::Said(worker.clone(), line),
                };
                if tx.send(msg).is_err() {
                    break;
                }
            }
        });
    }
    if let Some(err) = process.stderr.take() {
        let (tx, worker) = (tx.clone(), a.worker.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(|l| l.ok()) {
                if !line.trim().is_empty() && tx.send(Msg::Said(worker.clone(), line)).is_err() {
                    break;
                }
            }
        });
    }
    Ok(Child { process })
}

impl Child {
    pub(crate) fn signal(&self, signal: Signal) {
        let _ =
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.process.id() as i32), signal);
    }

    /// Its exit code once it has exited (128 + the signal that ended it).
    pub(crate) fn exited(&mut self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        let status = self.process.try_wait().ok()??;
        Some(
            status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
        )
    }
}

/// Whether a ralph run holds the lock of the project at `dir` (a worker
/// left running by a coordinator that died, finishing its checkpoint). A
/// shared lock is only tried, never kept, and nothing is written.
pub(crate) fn project_busy(dir: &Path) -> bool {
    let Ok(file) = std::fs::File::open(crate::formats::Layout::new(dir).lock()) else {
        return false;
    };
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock).is_err()
}
