//! Everything ralph asks of the operating system that Linux and macOS
//! answer differently, chosen once here: the rest of ralph calls these
//! functions and never names `/proc`, `prctl`, `waitid` or another
//! Linux-only interface (`tests/suite/architecture.rs` holds it).
//!
//! | need | Linux (`linux.rs`) | macOS (`macos.rs`) |
//! | --- | --- | --- |
//! | a process's state: parent, session, zombie, start time | `/proc/PID/stat` | `proc_pidinfo(PROC_PIDTBSDINFO)`, `getsid` |
//! | every process | `/proc` | `proc_listallpids` |
//! | the orphans an agent leaves | a child subreaper (`PR_SET_CHILD_SUBREAPER`): they become ralph's children and are killed | none: they go to launchd; the agent's session and the sessions recorded in the lock are still ended |
//! | any child left to wait for | `waitid(WNOWAIT)` | the process table is read |
//! | a child that must die with ralph (every child it starts: the agent, a worker's or a fleet item's loop, the project's commands — hooks, checks, notify's command — and the fleet's `git`) | `PR_SET_PDEATHSIG` | a ralph child: a pipe ralph holds open ([`parent_pipe`]); an agent: none (the next run's takeover ends it) |
//! | the files ralph's stdout/stderr write | `/proc/self/fd`, a pipe followed to its reader (`tee`) | `F_GETPATH` on a regular file; a pipe is not followed |
//! | a bigger pipe for the agent's output | `F_SETPIPE_SZ` | the system's size |
//! | the host name | `gethostname` | `gethostname` |
//! | a desktop notification | `notify-send` | `osascript` (Notification Center) |
//!
//! Beside them, one thing every platform does alike that has one owner
//! here: the signals ralph catches (`signals`: SIGINT, SIGTERM, SIGHUP,
//! SIGUSR1, SIGUSR2, counted for every reader — a loop, a coordinator, a
//! fleet worker, the hooks, `ralph watch`).
//!
//! Pitfalls: a start time is only compared with one read on the same
//! machine (ticks since boot on Linux, microseconds since the epoch on
//! macOS). The parent-death signal is sent when the *thread* that forked
//! exits: ralph forks from its main thread.

use std::path::PathBuf;
use std::process::Command;

use nix::sys::signal::Signal;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
use linux as imp;

#[cfg(target_os = "macos")]
mod macos;
#[cfg(target_os = "macos")]
use macos as imp;

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
compile_error!("ralph runs on Linux and macOS");

pub(crate) mod signals;

// Used on macOS; compiled on Linux for its tests.
#[cfg(any(target_os = "macos", test))]
#[cfg_attr(not(target_os = "macos"), allow(dead_code))]
mod parent_pipe;

/// What ralph reads of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub(crate) zombie: bool,
    pub(crate) ppid: i32,
    pub(crate) session: i32,
    /// When it started, in the platform's unit: only compared with another
    /// read on this machine.
    pub(crate) start: u64,
}

/// The state of process `pid`, `None` when there is none.
pub(crate) fn proc_stat(pid: i32) -> Option<ProcStat> {
    imp::proc_stat(pid)
}

/// Every process and its state.
pub(crate) fn procs_with_stat() -> Vec<(i32, ProcStat)> {
    imp::pids()
        .into_iter()
        .filter_map(|pid| Some((pid, proc_stat(pid)?)))
        .collect()
}

/// Whether a process `pid` exists (a zombie included).
pub(crate) fn exists(pid: u32) -> bool {
    imp::exists(pid)
}

/// Whether process `pid` is gone: no such process, or dead and waiting
/// for its reaper.
pub(crate) fn gone(pid: i32) -> bool {
    proc_stat(pid).is_none_or(|p| p.zombie)
}

/// Make this process the reaper of the orphans its descendants leave.
/// macOS has no such thing: an error says so.
pub(crate) fn become_subreaper() -> std::io::Result<()> {
    imp::become_subreaper()
}

/// Whether this process may have a child to wait for (when unsure: yes).
pub(crate) fn has_children() -> bool {
    imp::has_children()
}

/// Who the child is, for [`die_with_parent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heir {
    /// ralph itself (a worker's loop, a fleet item's loop): it can watch a
    /// pipe where the kernel has no parent-death signal.
    Ralph,
    /// Another program (the agent).
    Program,
}

/// The one parent-death rule of every child ralph starts: when ralph dies
/// (even of SIGKILL), `signal` goes to the child. Linux: the kernel sends
/// it (`PR_SET_PDEATHSIG`), and a child whose parent is already gone when it
/// starts never runs. macOS: a ralph child watches a pipe ralph holds open
/// ([`parent_pipe`]); another program gets nothing (see the module's table).
pub(crate) fn die_with_parent(cmd: &mut Command, signal: Signal, heir: Heir) {
    imp::die_with_parent(cmd, signal, heir);
}

/// In a child started by [`die_with_parent`] with [`Heir::Ralph`]: start
/// watching for the parent's death. Called once, first thing in `main`,
/// before any thread starts; nothing to do on Linux. `end_own`: what a
/// child told to die with SIGKILL ends first (its agent), as the kernel's
/// chain of parent-death signals does on Linux.
pub(crate) fn watch_parent(end_own: fn()) {
    imp::watch_parent(end_own);
}

/// The regular files that this process's descriptor `fd` writes to:
/// the file itself, or through a pipe the files its reader writes (Linux).
pub(crate) fn files_written_by(fd: i32) -> Vec<PathBuf> {
    imp::files_written_by(fd)
}

/// Ask for a pipe of `size` bytes (the agent's stdout), where the platform
/// allows it; the system's size otherwise.
pub(crate) fn enlarge_pipe(pipe: &impl std::os::fd::AsFd, size: i32) {
    imp::enlarge_pipe(pipe, size);
}

/// The shell command that shows a desktop notification: its title in
/// `$RALPH_NOTIFY_SUBJECT`, its text on stdin; `critical` for one that
/// needs a person.
pub(crate) fn desktop_notification(critical: bool) -> String {
    imp::desktop_notification(critical)
}

/// This machine's name, `None` when it cannot be read.
pub(crate) fn hostname() -> Option<String> {
    nix::unistd::gethostname().ok()?.into_string().ok()
}
