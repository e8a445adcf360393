//! Requests that reach the supervisor from outside: signals, and the
//! control file `ralph checkpoint` leaves with its reason.

use std::path::PathBuf;

use tokio::signal::unix::{SignalKind, signal};

use crate::error::{Error, Result};
use crate::formats::Layout;

/// Requests that reach the supervisor from outside.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Request {
    Interrupt,
    Hangup,
    Checkpoint(String),
    Stop,
}

pub(super) struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
    control: PathBuf,
}

impl Signals {
    pub(super) fn install(layout: &Layout) -> Result<Signals> {
        let s = |k| signal(k).map_err(|e| Error::wrap("cannot install signal handlers", e));
        Ok(Signals {
            int: s(SignalKind::interrupt())?,
            term: s(SignalKind::terminate())?,
            hup: s(SignalKind::hangup())?,
            usr1: s(SignalKind::user_defined1())?,
            usr2: s(SignalKind::user_defined2())?,
            control: layout.control(),
        })
    }

    pub(super) async fn next(&mut self) -> Request {
        tokio::select! {
            _ = self.int.recv() => Request::Interrupt,
            _ = self.term.recv() => Request::Interrupt,
            _ = self.hup.recv() => Request::Hangup,
            _ = self.usr1.recv() => {
                let reason = std::fs::read(&self.control)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                    .and_then(|v| v.get("reason").and_then(|r| r.as_str()).map(str::to_string))
                    .unwrap_or_else(|| "manual".into());
                let _ = std::fs::remove_file(&self.control);
                Request::Checkpoint(reason)
            }
            _ = self.usr2.recv() => Request::Stop,
        }
    }

    /// A request that arrived while the supervisor was busy between two
    /// agents (hooks, the WIP commit, saving state), without waiting.
    pub(super) async fn pending(&mut self) -> Option<Request> {
        // Hooks and git run synchronously, so the runtime has not yet seen a
        // signal that came meanwhile: let it poll its driver first.
        tokio::task::yield_now().await;
        tokio::select! {
            biased;
            request = self.next() => Some(request),
            () = std::future::ready(()) => None,
        }
    }
}
