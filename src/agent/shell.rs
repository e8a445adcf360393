//! One hook command as a process: `sh -c` in a process group of its own,
//! the payload written to its stdin while stdout and stderr are drained
//! (one thread, `poll`), bounded by a timeout and by ralph's interrupts.
//! Whatever the command started ends with it: its group is killed when it
//! exits, times out or is interrupted, so nothing it left behind can hold
//! a pipe open or outlive the hook. While it runs its group is recorded
//! in `.ralph/hook-groups.json` (as the agent's sessions are in the lock):
//! a supervisor killed with `kill -9` cannot end it, the next one does
//! ([`end_left_behind`]).

use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// How often the process, the clock and the interrupt flag are looked at
/// when the pipes are quiet: the latency of an interrupt.
const BEAT: Duration = Duration::from_millis(20);
/// How much of each output stream is kept (its end).
const TAIL: usize = 4096;
/// How long the members of a killed group may take to be reaped.
const REAP_LIMIT: Duration = Duration::from_secs(2);

/// Where the live hook groups are recorded, and which they are.
struct GroupFile {
    path: PathBuf,
    live: Vec<crate::agent::procs::GroupRecord>,
}

/// Set once by the supervisor ([`record_groups_in`]): one run per process.
static GROUPS: Mutex<Option<GroupFile>> = Mutex::new(None);

/// Record the process group of every hook while it runs in `path`.
pub(crate) fn record_groups_in(path: PathBuf) {
    *GROUPS.lock().unwrap_or_else(|e| e.into_inner()) = Some(GroupFile {
        path,
        live: Vec::new(),
    });
}

/// Add (`Some`) or remove a hook's group from the record.
fn note_group(pgid: i32, running: bool) {
    let mut groups = GROUPS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(file) = groups.as_mut() else {
        return;
    };
    file.live.retain(|g| g.pgid != pgid);
    if running {
        file.live.push(crate::agent::procs::GroupRecord::of(pgid));
    }
    let json = serde_json::to_vec(&file.live).expect("group records serialise");
    if let Err(e) = crate::formats::write_atomic(&file.path, &json) {
        tracing::warn!("cannot record the hook's process group: {e}");
    }
}

/// End the hook groups a dead supervisor recorded (`kill -9` while a hook
/// ran, an `on_level` hook in the background above all); the file goes.
/// Returns how many groups were recorded.
pub(crate) fn end_left_behind(path: &Path) -> usize {
    let Ok(text) = std::fs::read(path) else {
        return 0;
    };
    let groups: Vec<crate::agent::procs::GroupRecord> =
        serde_json::from_slice(&text).unwrap_or_default();
    groups
        .iter()
        .for_each(crate::agent::procs::kill_recorded_group);
    let _ = std::fs::remove_file(path);
    groups.len()
}

/// How a hook process ended.
#[derive(Debug)]
pub(crate) enum End {
    Exited(ExitStatus),
    TimedOut,
    /// ralph got SIGINT/SIGTERM while it ran.
    Interrupted,
    CannotStart(std::io::Error),
    /// Waiting for it failed (someone else reaped it).
    Lost(std::io::Error),
}

/// What became of one run of a command.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) end: End,
    /// The last [`TAIL`] bytes of its stdout and stderr.
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
}

/// Where a command runs: `sh -c` beside ralph (the user's hooks), or in
/// the box the agent runs in (the checks: code the agent wrote).
#[derive(Debug, Clone, Default)]
pub(crate) struct Shell {
    /// `bwrap … -- sh -c` with the agent's environment; `None`: `sh -c`.
    boxed: Option<crate::agent::AgentCommand>,
}

impl Shell {
    /// The shell of the commands ralph runs on the agent's behalf: the
    /// agent's box when `[agent] sandbox` makes one.
    pub(crate) fn for_agent(config: &crate::config::Config, root: &Path) -> Shell {
        Shell {
            boxed: crate::agent::AgentCommand::shell_in_box(config, root),
        }
    }

    pub(crate) fn is_boxed(&self) -> bool {
        self.boxed.is_some()
    }

    fn command(&self, script: &str) -> Command {
        match &self.boxed {
            None => {
                let mut cmd = Command::new("sh");
                cmd.arg("-c").arg(script);
                cmd
            }
            Some(b) => {
                let mut cmd = Command::new(&b.program);
                if b.env_clear {
                    cmd.env_clear();
                }
                cmd.args(&b.args).arg(script).envs(&b.env);
                cmd
            }
        }
    }
}

/// Run `command` with `sh -c` in `root` with `env` added and `stdin`
/// written to it; end it (and its group) after `timeout` or as soon as
/// `interrupted()` says so.
pub(crate) fn run(
    command: &str,
    root: &Path,
    env: &[(String, String)],
    stdin: &[u8],
    timeout: Duration,
    interrupted: &dyn Fn() -> bool,
) -> Finished {
    run_in(
        &Shell::default(),
        command,
        root,
        env,
        stdin,
        timeout,
        interrupted,
    )
}

/// [`run`] in `shell`.
pub(crate) fn run_in(
    shell: &Shell,
    command: &str,
    root: &Path,
    env: &[(String, String)],
    stdin: &[u8],
    timeout: Duration,
    interrupted: &dyn Fn() -> bool,
) -> Finished {
    let mut cmd = shell.command(command);
    cmd.current_dir(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .envs(env.iter().map(|(k, v)| (k, v)));
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    // The one parent-death rule of every child ralph starts: a check or a
    // hook running when ralph is killed -9 does not run on without it (on
    // Linux; elsewhere the next start ends its recorded group).
    crate::platform::die_with_parent(&mut cmd, Signal::SIGKILL, crate::platform::Heir::Program);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Finished {
                end: End::CannotStart(e),
                stdout: Vec::new(),
                stderr: Vec::new(),
            };
        }
    };
    let group = Pid::from_raw(child.id() as i32);
    note_group(group.as_raw(), true);
    let mut pipes = Pipes::of(&mut child, stdin);
    let deadline = Instant::now() + timeout;
    let end = loop {
        pipes.wait(BEAT);
        pipes.pump();
        match child.try_wait() {
            Ok(Some(status)) => break End::Exited(status),
            Ok(None) => {}
            Err(e) => break End::Lost(e),
        }
        if interrupted() {
            break End::Interrupted;
        }
        if Instant::now() >= deadline {
            break End::TimedOut;
        }
    };
    let _ = killpg(group, Signal::SIGKILL);
    if !matches!(end, End::Exited(_)) {
        let _ = child.wait();
    }
    reap_group(group);
    note_group(group.as_raw(), false);
    // What was written before the end is still in the pipes; a process
    // that escaped the group (setsid) may hold them open, so read only
    // what is there.
    pipes.pump();
    Finished {
        end,
        stdout: pipes.out.buf,
        stderr: pipes.err.buf,
    }
}

/// Reap the killed members of `group` that are our children (ralph is a
/// subreaper: what a hook left behind is re-parented to it).
fn reap_group(group: Pid) {
    let deadline = Instant::now() + REAP_LIMIT;
    let any_in_group = Pid::from_raw(-group.as_raw());
    loop {
        match waitpid(any_in_group, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// An output pipe and the end of what came through it.
struct Drain<R> {
    pipe: Option<R>,
    buf: Vec<u8>,
}

impl<R: Read> Drain<R> {
    fn pump(&mut self) {
        let Some(pipe) = self.pipe.as_mut() else {
            return;
        };
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match pipe.read(&mut chunk) {
                Ok(0) => {
                    self.pipe = None;
                    return;
                }
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    if self.buf.len() > 2 * TAIL {
                        self.buf.drain(..self.buf.len() - TAIL);
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.pipe = None;
                    return;
                }
            }
        }
    }
}

/// The three pipes of a hook, non-blocking.
struct Pipes<'a> {
    input: Option<std::process::ChildStdin>,
    payload: &'a [u8],
    out: Drain<std::process::ChildStdout>,
    err: Drain<std::process::ChildStderr>,
}

impl<'a> Pipes<'a> {
    fn of(child: &mut Child, payload: &'a [u8]) -> Pipes<'a> {
        let input = child.stdin.take().filter(|_| !payload.is_empty());
        let out = child.stdout.take();
        let err = child.stderr.take();
        for fd in [
            input.as_ref().map(AsFd::as_fd),
            out.as_ref().map(AsFd::as_fd),
            err.as_ref().map(AsFd::as_fd),
        ]
        .into_iter()
        .flatten()
        {
            let flags = fcntl(fd, FcntlArg::F_GETFL).unwrap_or(0);
            let _ = fcntl(
                fd,
                FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
            );
        }
        Pipes {
            input,
            payload,
            out: Drain {
                pipe: out,
                buf: Vec::new(),
            },
            err: Drain {
                pipe: err,
                buf: Vec::new(),
            },
        }
    }

    /// Until a pipe is ready or `beat` is over.
    fn wait(&self, beat: Duration) {
        let mut fds = Vec::with_capacity(3);
        if let Some(i) = &self.input {
            fds.push(PollFd::new(i.as_fd(), PollFlags::POLLOUT));
        }
        if let Some(o) = &self.out.pipe {
            fds.push(PollFd::new(o.as_fd(), PollFlags::POLLIN));
        }
        if let Some(e) = &self.err.pipe {
            fds.push(PollFd::new(e.as_fd(), PollFlags::POLLIN));
        }
        let timeout = PollTimeout::try_from(beat).unwrap_or(PollTimeout::MAX);
        if fds.is_empty() {
            std::thread::sleep(beat);
        } else {
            // Readiness (and EINTR) need no handling: every pipe is
            // non-blocking and is simply tried next.
            let _ = poll(&mut fds, timeout);
        }
    }

    fn pump(&mut self) {
        if let Some(input) = self.input.as_mut() {
            loop {
                match input.write(self.payload) {
                    Ok(n) if n < self.payload.len() => self.payload = &self.payload[n..],
                    // All written (stdin closes: the hook sees its end), or
                    // the hook closed its stdin (EPIPE): it does not read it.
                    Ok(_) => {
                        self.input = None;
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => {
                        self.input = None;
                        break;
                    }
                }
            }
        }
        self.out.pump();
        self.err.pump();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    fn never() -> bool {
        false
    }

    /// The pids a hook wrote to `file` in `dir`, one a line.
    fn pids(dir: &Path, file: &str) -> Vec<u32> {
        std::fs::read_to_string(dir.join(file))
            .unwrap()
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect()
    }

    /// The process is gone (no such pid, or dead and waiting for its
    /// reaper) or goes within a second: SIGKILL takes effect when the
    /// process is next scheduled.
    fn gone(pid: u32) -> bool {
        let dead = || crate::platform::gone(pid as i32);
        let deadline = Instant::now() + Duration::from_secs(1);
        while !dead() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    fn run_sh(dir: &Path, command: &str, stdin: &[u8], timeout: Duration) -> (Finished, Duration) {
        let started = Instant::now();
        let f = run(command, dir, &[], stdin, timeout, &never);
        (f, started.elapsed())
    }

    #[test]
    fn a_big_stderr_is_drained_while_the_hook_runs() {
        // 200 KB is more than a pipe holds: unread, the hook would block
        // until its timeout.
        let dir = tempfile::tempdir().unwrap();
        let (f, took) = run_sh(
            dir.path(),
            "head -c 200000 /dev/zero | tr '\\0' x >&2; echo last words >&2; echo out",
            b"",
            Duration::from_secs(20),
        );
        assert!(matches!(f.end, End::Exited(s) if s.success()), "{f:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert!(f.stderr.ends_with(b"xxxlast words\n"));
        assert!(f.stderr.len() <= 2 * TAIL);
        assert_eq!(f.stdout, b"out\n");
    }

    #[test]
    fn a_background_child_neither_blocks_nor_outlives_the_hook() {
        let dir = tempfile::tempdir().unwrap();
        let (f, took) = run_sh(
            dir.path(),
            "sleep 600 & echo $! > bg.pid; echo started",
            b"",
            Duration::from_secs(30),
        );
        assert!(matches!(f.end, End::Exited(s) if s.success()), "{f:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
        assert_eq!(f.stdout, b"started\n");
        assert!(gone(pids(dir.path(), "bg.pid")[0]));
    }

    #[test]
    fn the_timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let (f, took) = run_sh(
            dir.path(),
            "echo $$ > group.pid; sleep 600 & echo $! >> group.pid; sleep 600 & echo $! >> group.pid; sleep 600",
            b"",
            Duration::from_secs(1),
        );
        assert!(matches!(f.end, End::TimedOut), "{f:?}");
        assert!(took < Duration::from_secs(4), "{took:?}");
        let group = pids(dir.path(), "group.pid");
        assert_eq!(group.len(), 3);
        assert!(group.into_iter().all(gone));
    }

    #[test]
    fn an_interrupt_ends_the_hook_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (setter, pid_file) = (flag.clone(), dir.path().join("bg.pid"));
        // Signalled once the hook has started its child.
        let signalled = std::thread::spawn(move || {
            while !pid_file.exists() {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(50));
            setter.store(true, Ordering::SeqCst);
            Instant::now()
        });
        let f = run(
            "sleep 600 & echo $! > bg.pid; sleep 600",
            dir.path(),
            &[],
            b"",
            Duration::from_secs(60),
            &|| flag.load(Ordering::SeqCst),
        );
        let took = signalled.join().unwrap().elapsed();
        assert!(matches!(f.end, End::Interrupted), "{f:?}");
        assert!(took < Duration::from_millis(500), "{took:?}");
        assert!(gone(pids(dir.path(), "bg.pid")[0]));
    }

    #[test]
    fn stdin_gets_the_payload_and_a_hook_that_ignores_it_does_not_block() {
        let payload = format!("{{\"event\":\"x\",\"pad\":\"{}\"}}\n", "p".repeat(300_000));
        let dir = tempfile::tempdir().unwrap();
        let (f, _) = run_sh(
            dir.path(),
            "wc -c",
            payload.as_bytes(),
            Duration::from_secs(20),
        );
        assert!(matches!(f.end, End::Exited(s) if s.success()), "{f:?}");
        assert_eq!(
            String::from_utf8_lossy(&f.stdout).trim(),
            payload.len().to_string()
        );
        let (f, took) = run_sh(
            dir.path(),
            "exit 0",
            payload.as_bytes(),
            Duration::from_secs(20),
        );
        assert!(matches!(f.end, End::Exited(s) if s.success()), "{f:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
    }
}
