//! The command line's shape: the clap definitions of every subcommand and
//! its arguments. Running them is `app`'s job.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use ralph_sim::SimArgs;

#[derive(Debug, Parser)]
#[command(
    name = "ralph",
    version = env!("RALPH_BUILD_VERSION"),
    about = "Supervise overnight Claude Code loops: meter the context window live, checkpoint before it fills",
    propagate_version = true
)]
pub(crate) struct Cli {
    /// Project root (default: the current directory)
    #[arg(short = 'C', long = "dir", global = true, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the loop: one agent session per iteration until a rule says stop
    Run(RunArgs),
    /// Checkpoint now: the running supervisor does its L2 sequence, or without a run, WIP commit + handoff of the tree
    Checkpoint(CheckpointArgs),
    /// Ask the running supervisor to finish the current iteration through a checkpoint and exit (code 6)
    Stop(JsonArgs),
    /// How full the running iteration's context window is, its trend, advice, and the peak of every iteration
    Context(ContextArgs),
    /// Where the run stands: running, waiting, or how it ended; iteration, time, cost, breaker, last handoff and commit
    Status(StatusArgs),
    /// A full-screen live view of the run (or the last one, or a fleet): every loop's item, context, cost and state; keys to checkpoint, stop, read a transcript
    Watch(WatchArgs),
    /// Create a commented ralph.toml, the templates in prompts/, a starter fix_plan.md and .ralph/.gitignore
    Init(InitArgs),
    /// Print the PROMPT.md the next iteration would get (writes nothing)
    Prompt(PromptArgs),
    /// The morning report of the latest run (or RUN, or --all): an HTML page with charts, and a summary
    Report(ReportArgs),
    /// Check the setup (config, plan, templates, agent, git, permissions) and explain each problem; exit 1 on any
    Doctor(JsonArgs),
    /// Print a shell completion script, e.g. `ralph completions bash > /etc/bash_completion.d/ralph`
    Completions(CompletionsArgs),
    /// Print the man page (roff), e.g. `ralph man > ralph.1`
    Man,
    /// The `[notify]` channels and the events they get; `--test` sends a test notification on each
    Notify(NotifyArgs),
    /// List the work-tree snapshots ralph took during iterations, or restore one (into the work tree or onto a new branch)
    Recover(RecoverArgs),
    /// Run the bundled demo in a fresh directory, with `ralph sim` as the agent
    Demo(DemoArgs),
    /// A simulated agent speaking the `claude -p --output-format stream-json` protocol (for demos, tests, CI)
    Sim(SimArgs),
    /// Claude Code's `statusLine` command: context bar, percent, tokens, level and plan item of the session on stdin
    Statusline,
    /// Claude Code's hooks (`ralph init --claude` installs them); always exit 0
    Hook {
        #[command(subcommand)]
        event: HookEvent,
    },
}

#[derive(Debug, Args)]
pub(crate) struct NotifyArgs {
    /// Send a test notification on every channel (with retries); exit 1 if one fails
    #[arg(long)]
    pub(crate) test: bool,
    /// Print JSON instead of text
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RecoverArgs {
    /// The snapshot to restore: its id from the listing, or RUN/ITERATION for that iteration's newest (none: list them)
    pub(crate) snapshot: Option<String>,
    /// Restore onto a new branch NAME (one commit on top of the commit the snapshot was taken on) instead of the work tree
    #[arg(long, value_name = "NAME", requires = "snapshot")]
    pub(crate) branch: Option<String>,
    /// Overwrite files in a work tree that has uncommitted changes
    #[arg(long, requires = "snapshot", conflicts_with = "branch")]
    pub(crate) force: bool,
    /// Print JSON instead of text
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args, Default)]
pub(crate) struct RunArgs {
    /// The plan file (default: `plan` from ralph.toml, "fix_plan.md")
    pub(crate) plan: Option<PathBuf>,
    /// Start a new run instead of continuing the one in .ralph/state.json
    #[arg(long)]
    pub(crate) fresh: bool,
    /// Close an open circuit breaker by hand
    #[arg(long)]
    pub(crate) reset_breaker: bool,
    /// Accept the files ralph acts on (ralph.toml, prompts/*.j2, scripts of hooks and checks, git hooks) that changed during the last run
    #[arg(long)]
    pub(crate) trust_config: bool,
    /// Validate everything, print the next PROMPT.md and the agent command line; start nothing, write nothing
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Write one JSON event per line to stdout instead of the status display
    #[arg(long)]
    pub(crate) json: bool,
    /// Stop before this local time of day (HH:MM): finish the iteration gracefully and exit 5
    #[arg(long, value_name = "HH:MM")]
    pub(crate) deadline: Option<String>,
    /// Override loop.max_iterations
    #[arg(long, value_name = "N")]
    pub(crate) max_iterations: Option<u32>,
    /// Count max_iterations, max_duration and max_cost_usd from this invocation instead of the run's start
    #[arg(long)]
    pub(crate) budget_per_invocation: bool,
    /// Override loop.max_cost_usd
    #[arg(long, value_name = "USD")]
    pub(crate) max_cost: Option<f64>,
    /// Override agent.model
    #[arg(long, value_name = "MODEL")]
    pub(crate) model: Option<String>,
    /// Override agent.command, e.g. `--agent "ralph sim scenario.toml"` to test a project's setup in CI
    #[arg(long, value_name = "COMMAND")]
    pub(crate) agent: Option<String>,
    /// Work as one worker of a fleet through this git remote (a name like `origin`, or a URL); with --fleet (docs/fleet.md)
    #[arg(long, value_name = "REMOTE", requires = "fleet")]
    pub(crate) remote: Option<String>,
    /// The fleet's name: every worker started with the same --remote and --fleet works on the same run
    #[arg(long, value_name = "NAME", requires = "remote")]
    pub(crate) fleet: Option<String>,
    /// Run the plan with N agents at once, each in its own git worktree, merged back one at a time (docs/workers.md; `[workers] count`)
    #[arg(long, value_name = "N", conflicts_with = "worker")]
    pub(crate) workers: Option<u32>,
    /// Set by the coordinator of `--workers`: this loop is worker NAME (its events are forwarded, the coordinator notifies).
    /// With --fleet: this worker's name in the fleet (default: RALPH_WORKER, else the host name and pid)
    #[arg(long, value_name = "NAME", hide = true)]
    pub(crate) worker: Option<String>,
    /// Set by the coordinator of `--workers`: its `.ralph/`, whose trust record holds the configuration this worker's loop acts on
    #[arg(long, value_name = "DIR", hide = true, requires = "worker")]
    pub(crate) trusted_by: Option<std::path::PathBuf>,
    /// Set by a fleet worker for its item's loop: wait for `.ralph/grant.json` before each session (the fleet's budget is shared before a session starts)
    #[arg(long, hide = true, conflicts_with = "workers")]
    pub(crate) granted: bool,
    /// Set by a parallel run's coordinator and a fleet worker for their loops: the project whose `.ralph/windows.json` remembers the models' context windows
    #[arg(long, value_name = "DIR", hide = true)]
    pub(crate) home: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Print JSON instead of text
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) fleet_args: FleetArgs,
}

#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    #[command(flatten)]
    pub(crate) fleet_args: FleetArgs,
    /// How often the fleet's remote is fetched (at least 1s)
    #[arg(long, value_name = "DURATION", default_value = "5s", requires = "fleet", value_parser = every)]
    pub(crate) every: crate::text::Span,
}

/// `--fleet NAME [--remote R]` of `status`, `watch` and `report`: a fleet
/// read from what its remote holds instead of this project's run.
#[derive(Debug, Args)]
pub(crate) struct FleetArgs {
    /// A fleet instead of this project's run: its workers, claims, leases, budget and merges, fetched from its remote (docs/fleet.md)
    #[arg(long, value_name = "NAME")]
    pub(crate) fleet: Option<String>,
    /// The fleet's remote
    #[arg(
        long,
        value_name = "REMOTE",
        default_value = "origin",
        requires = "fleet"
    )]
    pub(crate) remote: String,
}

/// `--every`: a duration of at least a second.
fn every(text: &str) -> Result<crate::text::Span, String> {
    let span = crate::text::Span::parse(text)?;
    if span.0 < std::time::Duration::from_secs(1) {
        return Err("at least 1s: every fetch asks the remote".into());
    }
    Ok(span)
}

#[derive(Debug, Args)]
pub(crate) struct CheckpointArgs {
    /// Why (recorded in the handoff and the events)
    #[arg(long, default_value = "manual")]
    pub(crate) reason: String,
    /// Print what was done as one JSON object
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct JsonArgs {
    /// Print one JSON object (documented in docs/events.md) instead of text
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ContextArgs {
    /// Print one JSON object (documented in docs/events.md) instead of text; with --watch, one per line
    #[arg(long)]
    pub(crate) json: bool,
    /// Follow the run live until it ends (Ctrl-C to quit); off a terminal, a new report each time it changes
    #[arg(long, conflicts_with = "estimate")]
    pub(crate) watch: bool,
    /// Estimate ITEM (default: the plan's current item): its context cost, confidence, and whether it fits in what is left, in a fresh window, or should be split
    #[arg(long, value_name = "ITEM", num_args = 0..=1)]
    pub(crate) estimate: Option<Option<String>>,
}

#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// Overwrite files that exist
    #[arg(long)]
    pub(crate) force: bool,
    /// Print what was written as one JSON object
    #[arg(long)]
    pub(crate) json: bool,
    /// Only add ralph's status line and hooks to .claude/settings.json (merged, shown as a diff)
    #[arg(long)]
    pub(crate) claude: bool,
    /// The agent kind ralph.toml starts with (`[agent] kind`)
    #[arg(long, value_name = "KIND", value_enum, conflicts_with = "claude")]
    pub(crate) agent: Option<crate::agent::AgentKind>,
}

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// The run id (as in `ralph status`; default: the latest run)
    #[arg(value_name = "RUN", conflicts_with = "fleet")]
    pub(crate) run: Option<String>,
    /// Every run recorded in .ralph/, one after another
    #[arg(long, conflicts_with = "fleet")]
    pub(crate) all: bool,
    /// Where to write the HTML page [default: .ralph/report.html; with --fleet: .ralph/fleet/NAME/report.html]
    #[arg(long, value_name = "FILE")]
    pub(crate) html: Option<PathBuf>,
    /// Print the report's figures as JSON (documented in docs/events.md) instead of the summary
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) fleet_args: FleetArgs,
}

#[derive(Debug, Args)]
pub(crate) struct PromptArgs {
    /// The plan file (default: `plan` from ralph.toml, "fix_plan.md")
    pub(crate) plan: Option<PathBuf>,
    /// The prompt of a new run's first iteration instead of the recorded run's next one
    #[arg(long)]
    pub(crate) fresh: bool,
    /// Tokens per section of the prompt and of the handoff it points to, against the budgets
    #[arg(long)]
    pub(crate) stats: bool,
    /// The --stats report as one JSON object
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Where to create the demo project (default: a new temporary directory)
    #[arg(value_name = "DIR")]
    pub(crate) path: Option<PathBuf>,
    /// The agent kind `ralph sim` speaks like (its output format and protocol)
    #[arg(long, value_enum, default_value_t = crate::config::AgentKind::Claude)]
    pub(crate) agent: crate::config::AgentKind,
    /// Rehearse on your own plan: a copy of PLAN worked item by item by `ralph sim` in the throwaway repository (PLAN is only read)
    #[arg(long, value_name = "PLAN")]
    pub(crate) plan: Option<PathBuf>,
    /// With --plan: the rehearsal as a parallel run of N workers (docs/workers.md)
    #[arg(long, value_name = "N", requires = "plan", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) workers: Option<u32>,
}

/// Which hook Claude Code is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Subcommand)]
pub(crate) enum HookEvent {
    /// Before Claude Code compacts the conversation: handoff + WIP commit (trigger `compact`)
    PreCompact,
    /// When a session starts, resumes or was compacted: the latest handoff's resume block as context
    SessionStart,
}
