//! A parent-death notice that needs nothing of the kernel (macOS has no
//! `PR_SET_PDEATHSIG`): ralph holds the write end of one pipe for its whole
//! life and never writes to it; each ralph child it starts inherits the
//! read end, named in `RALPH_PARENT_PIPE` (`FD:SIGNAL`), and a thread there
//! reads it. End of file means every writer is gone: ralph died, however
//! (SIGKILL included), and the child sends itself the signal it was given,
//! as the kernel would have.
//!
//! Pitfalls: the write end is close-on-exec, so no child holds it past its
//! `exec`; the child closes its read end on exec too (the agent it starts
//! never sees it) and takes the variable out of its environment before any
//! thread starts.

use std::io::{PipeReader, PipeWriter, Read as _};
use std::os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::process::CommandExt as _;
use std::process::Command;
use std::sync::OnceLock;

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::signal::Signal;

/// The variable naming the inherited read end and the signal.
const ENV: &str = "RALPH_PARENT_PIPE";

/// This process's pipe, made at the first child that needs it and held
/// until the process ends.
static PIPE: OnceLock<Option<(PipeReader, PipeWriter)>> = OnceLock::new();

/// Let the ralph child `cmd` learn of this process's death: it gets `signal`.
pub(crate) fn arrange(cmd: &mut Command, signal: Signal) {
    let pipe = PIPE.get_or_init(|| {
        std::io::pipe()
            .inspect_err(|e| tracing::warn!("no parent-death pipe: {e}"))
            .ok()
    });
    if let Some((reader, _)) = pipe {
        hand_down(cmd, reader.as_raw_fd(), signal);
    }
}

/// `cmd` inherits `fd` (the read end) and is told of it.
fn hand_down(cmd: &mut Command, fd: RawFd, signal: Signal) {
    cmd.env(ENV, format!("{fd}:{}", signal as i32));
    // SAFETY: fcntl is async-signal-safe; the descriptor stays open in this
    // process while the child is started (the reader is held for good).
    unsafe {
        cmd.pre_exec(move || {
            let fd = BorrowedFd::borrow_raw(fd);
            fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty())).map_err(std::io::Error::from)?;
            Ok(())
        });
    }
}

/// `FD:SIGNAL` as [`hand_down`] writes it.
fn parse(value: &str) -> Option<(RawFd, Signal)> {
    let (fd, signal) = value.split_once(':')?;
    let fd: RawFd = fd.parse().ok().filter(|fd| *fd > 2)?;
    Some((fd, Signal::try_from(signal.parse::<i32>().ok()?).ok()?))
}

/// In a child: watch the read end named in the environment, if any. Call
/// before any thread starts (the environment is changed). Told to die with
/// SIGKILL, it calls `end_own` first (a SIGKILL leaves no time after).
pub(crate) fn watch(end_own: fn()) {
    let Ok(value) = std::env::var(ENV) else {
        return;
    };
    // SAFETY: called first in `main`, while this is the only thread.
    unsafe { std::env::remove_var(ENV) };
    let Some((fd, signal)) = parse(&value) else {
        return;
    };
    // Only a pipe that is open here is ours to take (a stale variable must
    // not close some other descriptor).
    // SAFETY: only borrowed to ask what it is.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let is_fifo = nix::sys::stat::fstat(borrowed).is_ok_and(|st| {
        use nix::sys::stat::SFlag;
        st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFIFO.bits()
    });
    if !is_fifo || fcntl(borrowed, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).is_err() {
        return;
    }
    // SAFETY: an open pipe handed down to this process, owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    on_end(owned, move || {
        if signal == Signal::SIGKILL {
            end_own();
        }
        let _ = nix::sys::signal::kill(nix::unistd::getpid(), signal);
    });
}

/// Read `fd` on a thread of its own until end of file, then call `then`
/// (a read error is not a death: nothing is called).
fn on_end(fd: OwnedFd, then: impl FnOnce() + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("parent-death".into())
        .spawn(move || {
            let mut pipe = PipeReader::from(fd);
            let mut byte = [0u8; 1];
            loop {
                match pipe.read(&mut byte) {
                    Ok(0) => return then(),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot watch for the parent's death: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_variable_is_read_strictly() {
        let cases = [
            ("7:12", Some((7, Signal::SIGUSR2))),
            ("9:9", Some((9, Signal::SIGKILL))),
            // Never stdin, stdout or stderr.
            ("1:9", None),
            ("7", None),
            ("7:", None),
            ("x:9", None),
            ("7:999", None),
            ("", None),
        ];
        for (value, want) in cases {
            assert_eq!(parse(value), want, "{value:?}");
        }
    }

    #[test]
    fn the_end_of_the_pipe_is_the_parents_death() {
        let (reader, writer) = std::io::pipe().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        on_end(reader.into(), move || tx.send(()).unwrap());
        // The parent is alive while it holds the write end.
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        drop(writer);
        rx.recv_timeout(Duration::from_secs(5))
            .expect("the watcher saw the end");
    }

    #[test]
    fn a_child_inherits_the_read_end_and_sees_the_parent_go() {
        let (reader, writer) = std::io::pipe().unwrap();
        let mut cmd = Command::new("sh");
        // The child reads the descriptor named in the variable to its end.
        cmd.args([
            "-c",
            r#"fd=${RALPH_PARENT_PIPE%%:*}; eval "cat <&$fd" >/dev/null; echo parent-gone"#,
        ])
        .stdout(std::process::Stdio::piped());
        hand_down(&mut cmd, reader.as_raw_fd(), Signal::SIGUSR2);
        let mut child = cmd.spawn().unwrap();
        drop(cmd);
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child waits while the parent holds the pipe"
        );
        drop((reader, writer));
        let out = child.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "parent-gone\n");
    }
}
