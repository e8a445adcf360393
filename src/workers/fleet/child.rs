//! The ordinary ralph loop a fleet worker runs on one item: `ralph run
//! .ralph/worker-plan.md --fresh` in the item's worktree (the plan file's
//! name is the parallel workers' own, `WORKER_PLAN`), as a child process
//! (every rule of one loop holds for it: checkpoints, breaker, budgets,
//! snapshots), and the signals that stop the worker (caught by
//! `platform::signals`).
//!
//! The loop is started by the one launcher of ralph's loops
//! (`workers::child::ralph_loop`): a process group of its own, so a
//! terminal's Ctrl-C or an engine's SIGTERM reaches the worker, which
//! forwards it once (the loop's first interrupt: checkpoint, WIP commit,
//! exit 130) and keeps the rest of the grace for its push; and the
//! parent-death rule (`platform::die_with_parent`), so a worker killed with
//! SIGKILL takes its loop (and that loop its agent) with it.

use std::ffi::OsString;
use std::path::Path;
use std::process::Child;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::error::{Error, Result};
use crate::platform::signals::{Catcher, Request};

/// The signals since the worker's start (`crate::platform::signals`, the one owner).
static SIGNALS: Mutex<Option<Catcher>> = Mutex::new(None);
/// A signal asked the worker to stop.
static STOPPED: AtomicBool = AtomicBool::new(false);
/// The remote stayed unreachable past `[fleet] max_unreachable`.
static GONE: AtomicBool = AtomicBool::new(false);

/// Read the signals the run's start caught. SIGTERM, SIGINT and SIGUSR2
/// (`ralph stop`) ask the worker to stop (`stop_requested`); SIGHUP (its
/// terminal gone) and SIGUSR1 leave it working, as they leave a loop.
pub(crate) fn catch_stop_signals(signals: Catcher) {
    *SIGNALS.lock().unwrap_or_else(|e| e.into_inner()) = Some(signals);
}

/// Whether a stop signal came (or the remote is gone).
pub(crate) fn stop_requested() -> bool {
    if let Some(catcher) = SIGNALS.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        while let Some(request) = catcher.take() {
            if matches!(request, Request::Interrupt | Request::Stop) {
                STOPPED.store(true, Ordering::SeqCst);
            }
        }
    }
    STOPPED.load(Ordering::SeqCst) || GONE.load(Ordering::SeqCst)
}

/// Stop the worker as a signal would: the remote stayed unreachable past
/// `[fleet] max_unreachable` (the loop checkpoints, the work stays in the
/// clone).
pub(crate) fn stop_for_good() {
    GONE.store(true, Ordering::SeqCst);
}

/// Whether the worker stops because the remote is gone (`stop_for_good`):
/// a stop signal keeps its meaning.
pub(crate) fn remote_gone() -> bool {
    stop_requested() && !STOPPED.load(Ordering::SeqCst)
}

/// A running loop.
pub(crate) struct Loop {
    child: Child,
    stop_sent: Option<Instant>,
    halted: bool,
}

impl Loop {
    /// Start `ralph run WORKER_PLAN --fresh ARGS…` in `root`, with `env`.
    pub(crate) fn start(root: &Path, args: &[OsString], env: &[(&str, String)]) -> Result<Loop> {
        // A worker killed with SIGKILL takes its loop (and that loop its
        // agent) with it: no one is left to push what a checkpoint would
        // commit, and the next worker takes over from what was pushed.
        let mut command = crate::workers::child::ralph_loop(root, Signal::SIGKILL)?;
        command
            .arg(crate::workers::child::WORKER_PLAN)
            .arg("--fresh")
            .args(args);
        for (k, v) in env {
            command.env(k, v);
        }
        let child = command
            .spawn()
            .map_err(|e| Error::wrap("cannot start the worker's loop (`ralph run`)", e))?;
        Ok(Loop {
            child,
            stop_sent: None,
            halted: false,
        })
    }

    /// Its exit code once it has ended (a signal: 128 + its number).
    pub(crate) fn exited(&mut self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt as _;
        let status = self.child.try_wait().ok()??;
        Some(
            status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(9)),
        )
    }

    /// Ask it to stop the way a user would (SIGTERM: checkpoint, WIP
    /// commit, exit 130); once.
    pub(crate) fn ask_to_stop(&mut self) {
        if self.stop_sent.is_none() {
            self.signal(Signal::SIGTERM);
            self.stop_sent = Some(Instant::now());
        }
    }

    /// Ask it to checkpoint with a handoff and stop, as `ralph stop` does
    /// (SIGUSR2; it exits 6); once. For the fleet's budget and usage limit.
    pub(crate) fn halt(&mut self) {
        if !self.halted {
            self.signal(Signal::SIGUSR2);
            self.halted = true;
        }
    }

    /// Since when it was asked to stop.
    pub(crate) fn stop_sent(&self) -> Option<Instant> {
        self.stop_sent
    }

    /// SIGKILL its group and wait for it.
    pub(crate) fn kill(&mut self) -> i32 {
        self.signal(Signal::SIGKILL);
        let _ = self.child.wait();
        137
    }

    /// Wait up to `limit` for its end; then kill it.
    pub(crate) fn finish_within(&mut self, limit: Duration) -> i32 {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if let Some(code) = self.exited() {
                return code;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill()
    }

    fn signal(&self, signal: Signal) {
        let pid = Pid::from_raw(self.child.id() as i32);
        let _ = killpg(pid, signal);
    }
}
