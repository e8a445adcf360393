//! The program: parse the command line, set up tracing, dispatch each
//! subcommand to the module that implements it. Errors become
//! `error:/caused by:/hint:` text and an exit code here, nowhere else.

use std::io::Write;

use clap::Parser;

use crate::cli::{Cli, Command, RunArgs};
use crate::commands;
use crate::error::Result;
use crate::project::Project;

/// Parse arguments, run, print errors; returns the process exit code.
pub fn main() -> i32 {
    // First, while this is the only thread (it may change the environment).
    crate::repo::tune_libgit2();
    crate::platform::watch_parent(crate::agent::procs::kill_descendant_sessions);
    init_tracing();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            // stderr may be gone (closed terminal): never panic on it.
            let _ = std::io::stderr().write_all(e.render().as_bytes());
            e.exit_code()
        }
    }
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("RALPH_LOG").unwrap_or_else(|_| EnvFilter::new("off"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn dispatch(cli: Cli) -> Result<i32> {
    let start = Project::start_dir(cli.dir.as_deref())?;
    // `init` makes a project where it is told; every other command works on
    // the project the start directory belongs to (found upward, as git does).
    let project = match &cli.command {
        Command::Init(_) => Project::at(&start),
        _ => Project::find(&start),
    };
    let root = project.root();
    match cli.command {
        Command::Run(args) => commands::run(&project, &args),
        Command::Checkpoint(args) => commands::checkpoint(&project, &args.reason, args.json),
        Command::Stop(args) => commands::stop(&project, args.json),
        Command::Context(args) => commands::context(&project, args.json, args.watch, args.estimate),
        Command::Watch(args) => commands::watch(&project, &args),
        Command::Status(args) => match &args.fleet_args.fleet {
            Some(fleet) => {
                commands::fleet_status(&project, &args.fleet_args.remote, fleet, args.json)
            }
            None => commands::status(&project, args.json),
        },
        Command::Init(args) if args.claude => commands::init_claude(root, args.json),
        Command::Init(args) => {
            commands::init(root, args.agent.unwrap_or_default(), args.force, args.json)
        }
        Command::Prompt(args) => commands::prompt(
            &project,
            &RunArgs {
                plan: args.plan,
                fresh: args.fresh,
                ..RunArgs::default()
            },
            args.stats,
            args.json,
        ),
        Command::Report(args) => commands::report(&project, &args),
        Command::Doctor(args) => commands::doctor(&project, args.json),
        Command::Completions(args) => commands::completions(args.shell),
        Command::Man => commands::man(),
        Command::Recover(args) => commands::recover(&project, &args),
        Command::Notify(args) => commands::notify(&project, args.test, args.json),
        Command::Demo(args) => commands::demo(args),
        Command::Sim(args) => Ok(ralph_sim::run(&args)?),
        Command::Statusline => commands::statusline(&project),
        Command::Hook { event } => commands::hook(&project, event),
    }
}
