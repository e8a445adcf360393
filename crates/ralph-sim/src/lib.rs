//! `ralph sim`: a simulated Claude Code agent. Owns the scenario format (TOML, see
//! docs/sim.md) and plays a scenario over the same stream-json stdin/stdout protocol as
//! `claude -p --output-format stream-json --input-format stream-json`, acting for real in
//! the cwd and copying the real CLI's stdin-EOF and signal behaviour, so ralph can be
//! tested, demonstrated and run in CI without the real CLI.
//!
//! A library the `ralph` binary calls; it shares no types with ralph. The modules follow
//! the path of one run: `scenario` and `step` read the file, `settings` resolves one
//! iteration's options, `input` brings stdin and signals in, `player` plays the steps
//! (its `tools` act for real), printing `lines` with `usage` and `ids` in them.

mod format;
mod ids;
mod input;
mod lines;
mod player;
mod scenario;
mod settings;
mod step;
mod usage;

use std::fmt;
use std::fs;
use std::io;
use std::path::PathBuf;

pub use crate::format::translate_transcript;
use crate::scenario::Scenario;
use crate::settings::{Settings, iteration_from_env, model_arg};

/// `ralph sim SCENARIO [claude flags…]`
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Scenario file (TOML)
    pub scenario: PathBuf,
    /// Flags meant for the real claude CLI (-p, --output-format, --model M, ...): accepted, and only --model is used
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub claude_args: Vec<String>,
}

/// Why the sim could not play. ralph maps each variant to its own error kind (and so its
/// exit code): `Usage` and `Config` exit 2, `Io` exits 1.
#[derive(Debug)]
pub enum Error {
    /// The invocation is wrong (`RALPH_ITERATION`).
    Usage(String),
    /// The scenario file is wrong; `hint` says where its format is described.
    Config { message: String, hint: &'static str },
    /// The system refused `action` (on `path`, when there is one).
    Io {
        action: &'static str,
        path: Option<PathBuf>,
        source: io::Error,
    },
}

impl Error {
    fn config(message: String, hint: &'static str) -> Error {
        Error::Config { message, hint }
    }

    fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Error {
        Error::Io {
            action,
            path: Some(path.into()),
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(message) | Error::Config { message, .. } => f.write_str(message),
            Error::Io {
                action,
                path: Some(path),
                ..
            } => write!(f, "{action} {}", path.display()),
            Error::Io { action, .. } => f.write_str(action),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Runs the simulated agent; returns the process exit code.
pub fn run(args: &SimArgs) -> Result<i32> {
    let cwd = std::env::current_dir()
        .map_err(|e| Error::io("cannot read the current directory", ".", e))?;
    let path = cwd.join(&args.scenario);
    let text =
        fs::read_to_string(&path).map_err(|e| Error::io("cannot read scenario", &path, e))?;
    let scenario = Scenario::parse(&text, &args.scenario.display().to_string())?;
    let number = iteration_from_env()?;
    let iteration = scenario.iteration(number);
    let settings = Settings::resolve(&iteration.options, model_arg(&args.claude_args).as_deref());

    player::play(
        &iteration.steps,
        number,
        settings,
        &args.claude_args,
        &args.scenario.display().to_string(),
        cwd,
    )
}
