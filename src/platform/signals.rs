//! The signals ralph catches, one owner for every process that catches
//! them — a loop's supervisor, a parallel run's coordinator, a fleet
//! worker, the hooks' interrupt check, `ralph watch`: SIGINT and SIGTERM
//! (an interrupt), SIGHUP (the terminal is gone), SIGUSR1 (`ralph
//! checkpoint`, its reason in the control file) and SIGUSR2 (`ralph stop`).
//!
//! Theory: the handlers only count (an atomic per signal, which is
//! async-signal-safe) and write a byte to a pipe; a thread reading that
//! pipe wakes the async supervisor ([`Catcher::next`]); a synchronous
//! loop looks with [`Catcher::take`] on its own beat. Counts are never
//! reset: each reader keeps its own cursor (a `Catcher`, or the count it
//! saw at its start, as a hook does with [`INTERRUPTS`]), so no reader takes
//! a signal from another, and two signals between two looks are two
//! requests, not one.
//!
//! Pitfalls: once installed (the first [`install`] of the process; later
//! ones add nothing), the default action of every caught signal is gone: a
//! process that installs must look at them. The order of different signals
//! between two looks is not kept (interrupts come first: they decide most).

use std::collections::VecDeque;
use std::io::Read as _;
use std::os::fd::{BorrowedFd, IntoRawFd as _};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use nix::sys::signal::Signal;

use crate::error::{Error, Result};

/// What a caught signal asks of a run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Request {
    /// SIGINT or SIGTERM.
    Interrupt,
    /// SIGHUP: the terminal is gone; the run goes on without it.
    Hangup,
    /// SIGUSR1: a checkpoint, with the reason `ralph checkpoint` left.
    Checkpoint(String),
    /// SIGUSR2: `ralph stop`.
    Stop,
}

/// The signals caught, in the order a look reports them.
const CAUGHT: [Signal; 5] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// How many of each of [`CAUGHT`] came since [`install`].
static COUNTS: [AtomicUsize; 5] = [const { AtomicUsize::new(0) }; 5];

/// SIGINT and SIGTERM caught so far: a reader compares it with the value
/// it saw at its start (a hook or a check, ended by the run's interrupt).
pub(crate) static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);

/// The pipe's write end the handlers wake the reader thread through (-1: none).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

/// Woken by the reader thread after each signal.
fn wake() -> &'static tokio::sync::Notify {
    static WAKE: OnceLock<tokio::sync::Notify> = OnceLock::new();
    WAKE.get_or_init(tokio::sync::Notify::new)
}

/// Catch every signal of [`CAUGHT`], once per process.
pub(crate) fn install() -> Result<()> {
    static INSTALLED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| install_once().map_err(|e| e.to_string()))
        .clone()
        .map_err(|e| Error::wrap("cannot install signal handlers", std::io::Error::other(e)))
}

fn install_once() -> std::io::Result<()> {
    let (mut reader, writer) = UnixStream::pair()?;
    // A full pipe must never block a handler: a byte is only a wake-up.
    writer.set_nonblocking(true)?;
    WAKE_FD.store(writer.into_raw_fd(), Ordering::SeqCst);
    std::thread::Builder::new()
        .name("ralph-signals".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            while matches!(reader.read(&mut buf), Ok(n) if n > 0) {
                wake().notify_one();
            }
        })?;
    for (i, sig) in CAUGHT.into_iter().enumerate() {
        // SAFETY: the action increments an atomic and writes to a pipe,
        // both async-signal-safe; it allocates and locks nothing.
        unsafe {
            signal_hook_registry::register(sig as i32, move || {
                COUNTS[i].fetch_add(1, Ordering::SeqCst);
                if i < 2 {
                    INTERRUPTS.fetch_add(1, Ordering::SeqCst);
                }
                let fd = WAKE_FD.load(Ordering::SeqCst);
                if fd >= 0 {
                    let _ = nix::unistd::write(BorrowedFd::borrow_raw(fd), &[0]);
                }
            })
        }?;
    }
    Ok(())
}

fn counts() -> [usize; 5] {
    std::array::from_fn(|i| COUNTS[i].load(Ordering::SeqCst))
}

/// One reader of the caught signals, from the moment it was made.
pub(crate) struct Catcher {
    seen: [usize; 5],
    /// Where `ralph checkpoint` leaves its reason (`.ralph/control.json`).
    control: Option<PathBuf>,
    queue: VecDeque<Request>,
}

impl Catcher {
    /// Install the handlers (once per process) and read from now on;
    /// `control`: the control file a checkpoint's reason is read from.
    pub(crate) fn new(control: Option<PathBuf>) -> Result<Catcher> {
        install()?;
        Ok(Catcher {
            seen: counts(),
            control,
            queue: VecDeque::new(),
        })
    }

    /// The next request that came, without waiting.
    pub(crate) fn take(&mut self) -> Option<Request> {
        if self.queue.is_empty() {
            let now = counts();
            for (i, &n) in now.iter().enumerate() {
                for _ in self.seen[i]..n {
                    let request = match CAUGHT[i] {
                        Signal::SIGHUP => Request::Hangup,
                        Signal::SIGUSR1 => Request::Checkpoint(self.reason()),
                        Signal::SIGUSR2 => Request::Stop,
                        _ => Request::Interrupt,
                    };
                    self.queue.push_back(request);
                }
            }
            self.seen = now;
        }
        self.queue.pop_front()
    }

    /// The next request; waits for one.
    pub(crate) async fn next(&mut self) -> Request {
        loop {
            if let Some(request) = self.take() {
                return request;
            }
            wake().notified().await;
        }
    }

    /// The reason `ralph checkpoint` left, the file then removed; `manual`
    /// without one (a bare `kill -USR1`).
    fn reason(&self) -> String {
        let Some(control) = &self.control else {
            return "manual".into();
        };
        let reason = std::fs::read(control)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v.get("reason").and_then(|r| r.as_str()).map(str::to_string));
        let _ = std::fs::remove_file(control);
        reason.unwrap_or_else(|| "manual".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn raise(sig: Signal) {
        nix::sys::signal::raise(sig).unwrap();
    }

    // One test: the handlers are the process's, and the test threads share
    // it. Raised in the test binary, an interrupt would reach every test
    // running beside this one (a `[verify]` check taken for interrupted):
    // the body runs in a process of its own, this test's binary again.
    #[test]
    fn each_reader_sees_every_signal_once_in_its_own_time() {
        const CHILD: &str = "RALPH_SIGNALS_TEST_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "platform::signals::tests::each_reader_sees_every_signal_once_in_its_own_time",
                    "--test-threads=1",
                ])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success() && said.contains("1 passed"), "{said}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let control = dir.path().join("control.json");
        let mut a = Catcher::new(Some(control.clone())).unwrap();
        let before = INTERRUPTS.load(Ordering::SeqCst);
        raise(Signal::SIGINT);
        raise(Signal::SIGINT);
        raise(Signal::SIGHUP);
        std::fs::write(&control, r#"{"reason":"deploy"}"#).unwrap();
        raise(Signal::SIGUSR1);
        let mut b = Catcher::new(None).unwrap();
        raise(Signal::SIGTERM);
        raise(Signal::SIGUSR2);
        let drain = |c: &mut Catcher| std::iter::from_fn(|| c.take()).collect::<Vec<_>>();
        assert_eq!(
            drain(&mut a),
            [
                Request::Interrupt,
                Request::Interrupt,
                Request::Interrupt,
                Request::Hangup,
                Request::Checkpoint("deploy".into()),
                Request::Stop
            ]
        );
        assert!(!control.exists(), "the reason is read once");
        // `b` started after the first four: it sees only what came since.
        assert_eq!(drain(&mut b), [Request::Interrupt, Request::Stop]);
        assert_eq!(INTERRUPTS.load(Ordering::SeqCst) - before, 3);
        // The async reader is woken by a signal that comes while it waits.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let got = runtime.block_on(async {
            let waiter = tokio::time::timeout(Duration::from_secs(5), a.next());
            std::thread::spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                raise(Signal::SIGUSR2);
            });
            waiter.await
        });
        assert_eq!(got.ok(), Some(Request::Stop));
    }
}
