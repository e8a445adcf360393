//! The one error type of ralph: what went wrong, why, what to do about it,
//! and which exit code it maps to (DESIGN.md "Exit codes").

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad command-line usage or bad input (exit 2).
    #[error("{message}")]
    Usage {
        message: String,
        hint: Option<String>,
    },
    /// `ralph.toml` is wrong: names the key and, where known, the line (exit 2).
    #[error("{message}")]
    Config {
        message: String,
        hint: Option<String>,
    },
    /// A template does not parse or render (exit 2).
    #[error("template {name}: {message}")]
    Template {
        name: String,
        message: String,
        hint: Option<String>,
    },
    /// Another supervisor holds `.ralph/lock` (exit 2).
    #[error("another ralph run is already supervising this project (pid {pid})")]
    Locked { pid: i32 },
    /// A file could not be read or written (exit 1).
    #[error("{action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Anything else that is ralph's own fault or the machine's (exit 1).
    #[error("{message}")]
    Internal {
        message: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl Error {
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Error::Usage {
            message: message.into(),
            hint: None,
        }
    }

    pub(crate) fn config(message: impl Into<String>) -> Self {
        Error::Config {
            message: message.into(),
            hint: None,
        }
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Error::Internal {
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn io(action: &'static str, path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    /// Wrap any error as an internal failure with a sentence of context.
    pub(crate) fn wrap(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Internal {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }

    /// Attach a hint ("what to do about it") to errors that carry one.
    pub(crate) fn with_hint(mut self, text: impl Into<String>) -> Self {
        match &mut self {
            Error::Usage { hint, .. }
            | Error::Config { hint, .. }
            | Error::Template { hint, .. } => *hint = Some(text.into()),
            _ => {}
        }
        self
    }

    pub(crate) fn hint(&self) -> Option<String> {
        match self {
            Error::Usage { hint, .. }
            | Error::Config { hint, .. }
            | Error::Template { hint, .. } => hint.clone(),
            Error::Locked { pid } => Some(format!(
                "wait for it to finish, or ask it to stop with `ralph stop` (pid {pid})"
            )),
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
                Some("check the permissions of the file and its directory".into())
            }
            _ => None,
        }
    }

    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Error::Usage { .. } | Error::Config { .. } | Error::Template { .. } => 2,
            Error::Locked { .. } => 2,
            Error::Io { .. } | Error::Internal { .. } => 1,
        }
    }

    /// The `error: … / caused by: … / hint: …` text printed to stderr.
    pub(crate) fn render(&self) -> String {
        let mut out = format!("error: {self}\n");
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            let _ = writeln!(out, "caused by: {cause}");
            source = cause.source();
        }
        if let Some(hint) = self.hint() {
            let _ = writeln!(out, "hint: {hint}");
        }
        out
    }
}

impl From<git2::Error> for Error {
    fn from(e: git2::Error) -> Self {
        Error::wrap("git operation failed", e)
    }
}

/// `ralph sim`'s errors keep their kind: a bad `RALPH_ITERATION` is usage, a bad
/// scenario is config (with its hint), and what the system refused is IO.
impl From<ralph_sim::Error> for Error {
    fn from(e: ralph_sim::Error) -> Self {
        match e {
            ralph_sim::Error::Usage(message) => Error::usage(message),
            ralph_sim::Error::Config { message, hint } => Error::config(message).with_hint(hint),
            ralph_sim::Error::Io {
                action,
                path: Some(path),
                source,
            } => Error::io(action, path, source),
            ralph_sim::Error::Io {
                action,
                path: None,
                source,
            } => Error::wrap(action, source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_lists_causes_and_hint() {
        let e = Error::io(
            "cannot write",
            "/x/state.json",
            std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied"),
        );
        let text = e.render();
        assert_eq!(
            text,
            "error: cannot write /x/state.json\ncaused by: denied\nhint: check the permissions of the file and its directory\n"
        );
        assert_eq!(e.exit_code(), 1);
    }

    #[test]
    fn sim_errors_keep_their_kind_message_and_hint() {
        let usage: Error = ralph_sim::Error::Usage("RALPH_ITERATION must be …".into()).into();
        assert_eq!(usage.exit_code(), 2);
        assert_eq!(usage.render(), "error: RALPH_ITERATION must be …\n");

        let config: Error = ralph_sim::Error::Config {
            message: "invalid scenario s.toml: x".into(),
            hint: "the scenario format is described in docs/sim.md",
        }
        .into();
        assert_eq!(config.exit_code(), 2);
        assert_eq!(
            config.render(),
            "error: invalid scenario s.toml: x\nhint: the scenario format is described in docs/sim.md\n"
        );

        let denied = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let io: Error = ralph_sim::Error::Io {
            action: "cannot read scenario",
            path: Some("/p/s.toml".into()),
            source: denied,
        }
        .into();
        assert_eq!(io.exit_code(), 1);
        assert_eq!(
            io.render(),
            "error: cannot read scenario /p/s.toml\ncaused by: denied\nhint: check the permissions of the file and its directory\n"
        );

        let errno = std::io::Error::other(nix::errno::Errno::EMFILE);
        let io: Error = ralph_sim::Error::Io {
            action: "cannot create the signal pipe",
            path: None,
            source: errno,
        }
        .into();
        assert_eq!(io.exit_code(), 1);
        assert_eq!(
            io.render(),
            "error: cannot create the signal pipe\ncaused by: EMFILE: Too many open files\n"
        );
    }

    #[test]
    fn config_errors_exit_2() {
        let e = Error::config("unknown key `foo`").with_hint("see ralph.toml docs");
        assert_eq!(e.exit_code(), 2);
        assert!(e.render().contains("hint: see ralph.toml docs"));
    }
}
