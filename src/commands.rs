//! The subcommands other than the loop's core: each module loads what it
//! needs, does one thing, and returns an exit code. `claude_code/` is the
//! core shared by `claude`, `statusline` and `hook`: ralph inside an
//! interactive Claude Code session (its input, transcript, status line,
//! hooks and settings).
//!
//! ```text
//! commands.rs        this map; `load_config` (config + `run`'s flags), `print`/`print_own`
//! commands/
//!   run.rs           `ralph run`: flags over the config, `--dry-run`, the supervisor's start
//!   prompt.rs        `ralph prompt` and `run --dry-run`'s preview of the next iteration
//!   control.rs       `ralph checkpoint`, `ralph stop`
//!   status.rs        `ralph status` (and `--fleet`)
//!   context.rs       `ralph context` (`--watch`, `--estimate`)
//!   watch.rs, watch/ `ralph watch`: the full-screen view (driver; `render`: the screen, pure)
//!   estimate.rs      an item's estimate as `ralph context` shows it
//!   doctor.rs        `ralph doctor`
//!   recover.rs       `ralph recover`: the safety net's snapshots listed or restored
//!   report.rs        `ralph report`
//!   init.rs          `ralph init` (with fix_plan.md and ralph.toml: the starter files)
//!   claude.rs        `ralph init --claude`: the settings merge
//!   statusline.rs    `ralph statusline`
//!   hook.rs          `ralph hook pre-compact|session-start`
//!   claude_code.rs, claude_code/  their shared core: ralph inside Claude Code
//!   demo.rs          `ralph demo`
//!   generate.rs      `ralph completions`, `ralph man`
//!   notify.rs        `ralph notify [--test]`
//! ```

mod claude;
mod claude_code;
mod context;
mod control;
mod demo;
mod doctor;
mod estimate;
mod generate;
mod hook;
mod init;
mod notify;
mod prompt;
mod recover;
mod report;
mod run;
mod status;
mod statusline;
mod watch;

use std::io::Write;
use std::path::Path;

use serde::Serialize;

use crate::cli::RunArgs;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::project::Project;

pub(crate) use claude::init_claude;
pub(crate) use context::context;
pub(crate) use control::{checkpoint, stop};
pub(crate) use demo::demo;
pub(crate) use doctor::doctor;
pub(crate) use generate::{completions, man};
pub(crate) use hook::hook;
pub(crate) use init::init;
pub(crate) use notify::notify;
pub(crate) use prompt::prompt;
pub(crate) use recover::recover;
pub(crate) use report::report;
pub(crate) use run::run;
pub(crate) use status::{fleet_status, status};
pub(crate) use statusline::statusline;
pub(crate) use watch::watch;

/// What a reporting command found: one value, printed as JSON for
/// `--json` or as text for people, so both always say the same thing.
pub(crate) trait Report: Serialize {
    /// The text for people, ending in a newline.
    fn human(&self) -> String;

    /// One line of JSON (the documented object of docs/events.md).
    fn json(&self) -> String {
        let json = serde_json::to_string(self).expect("reports serialize");
        crate::text::printable_json(&crate::text::secrets::redact_json(&json)).into_owned()
    }

    fn render(&self, json: bool) -> String {
        if json {
            format!("{}\n", self.json())
        } else {
            self.human()
        }
    }
}

/// Write a command's output to stdout; a closed pipe (`ralph status | head`)
/// is not an error. Every command prints through here, and whatever it
/// quotes (plan items, the agent's words, file names) is made printable:
/// no escape sequence in them reaches the terminal.
fn print(text: &str) -> Result<()> {
    print_own(&crate::text::printable_lines(text))
}

/// [`print`] for text ralph made itself, its own escape sequences included
/// (the status line's colours, a generated completion script): whatever it
/// quotes must already be printable.
fn print_own(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Error::wrap("cannot write to stdout", e))
        }
        _ => Ok(()),
    }
}

/// An RFC 3339 time as local `YYYY-MM-DD HH:MM:SS` (as given if it does not parse).
fn local_time(ts: &str) -> String {
    ts.parse::<jiff::Timestamp>().map_or_else(
        |_| ts.to_string(),
        |t| {
            t.to_zoned(jiff::tz::TimeZone::system())
                .strftime("%Y-%m-%d %H:%M:%S")
                .to_string()
        },
    )
}

/// The config with `ralph run`'s flags applied on top.
pub(crate) fn load_config(project: &Project, args: &RunArgs) -> Result<Config> {
    with_flags(project.config()?, project, args)
}

/// `config` with `run`'s flags on top.
pub(crate) fn with_flags(mut config: Config, project: &Project, args: &RunArgs) -> Result<Config> {
    let root = project.root();
    if let Some(plan) = &args.plan {
        // A plan given on the command line is relative to where the user is.
        let abs = std::env::current_dir()
            .map(|d| d.join(plan))
            .unwrap_or(plan.clone());
        config.plan = abs.strip_prefix(root).map(Path::to_path_buf).unwrap_or(abs);
    }
    if let Some(n) = args.max_iterations {
        if n == 0 {
            return Err(Error::usage("--max-iterations must be at least 1"));
        }
        config.loop_.max_iterations = n;
    }
    if let Some(c) = args.max_cost {
        if !(c > 0.0 && c.is_finite()) {
            return Err(Error::usage(format!(
                "--max-cost {c} is not a positive amount"
            )));
        }
        config.loop_.max_cost_usd = Some(c);
    }
    if let Some(m) = &args.model {
        config.agent.model = Some(m.clone());
    }
    if let Some(command) = &args.agent {
        if shlex::split(command).is_none_or(|words| words.is_empty()) {
            return Err(Error::usage(format!(
                "--agent `{command}` is empty or has unbalanced quotes"
            ))
            .with_hint("quote it as one argument: --agent \"ralph sim scenario.toml\""));
        }
        config.agent.command = Some(command.clone());
    }
    Ok(config)
}
