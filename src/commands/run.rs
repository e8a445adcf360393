//! `ralph run`: the config with the command line's flags on top, the
//! `--dry-run` preview, and the start of the supervisor.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::Report;
use super::prompt::NextIteration;
use crate::cli::RunArgs;
use crate::config::Config;
use crate::config::trust;
use crate::error::{Error, Result};
use crate::events::terminal::Terminal;
use crate::events::{Bus, JsonLines};
use crate::project::Project;
use crate::supervisor::{self, RunOptions, Supervisor};

pub(crate) fn run(project: &Project, args: &RunArgs) -> Result<i32> {
    let root = project.root();
    // A parallel run's worker acts on the configuration its coordinator
    // trusted at the start, not on its worktree's copy (the run branch,
    // which holds every merged unit's edits): docs/sandbox.md.
    let trusted_by = match (&args.worker, &args.trusted_by) {
        (Some(_), Some(dir)) => Some(trust::Record::load(dir).ok_or_else(|| {
            Error::config(format!(
                "cannot read the coordinator's trust record in {}",
                dir.display()
            ))
            .with_hint("restart the parallel run: `ralph run --workers N`")
        })?),
        _ => None,
    };
    let base = match &trusted_by {
        Some(record) => record.trusted_config(root)?,
        None => project.config()?,
    };
    let project_plan = base.plan.clone();
    let mut config = super::with_flags(base, project, args)?;
    // A fleet worker (`--remote R --fleet NAME`, its `--worker` its name in the fleet).
    if let (Some(remote), Some(fleet)) = (&args.remote, &args.fleet) {
        if args.dry_run {
            return dry_run(root, &config, args.fresh, args.json);
        }
        return fleet_worker(root, config, args, remote, fleet);
    }
    // A worker's unit: its key (the coordinator hands it down as
    // `RALPH_ITEM`) and the project's plan, where its agent may check it off.
    let unit = args.worker.as_ref().map(|_| supervisor::WorkerUnit {
        item: std::env::var("RALPH_ITEM").unwrap_or_default(),
        project_plan,
        branch: std::env::var("RALPH_WORKER_BRANCH").unwrap_or_default(),
    });
    if args.worker.is_some() {
        // A worker's prompt stays in its own `.ralph/`: committed on every
        // worker branch, the shared PROMPT.md would conflict at each merge.
        config.prompt_file = crate::workers::WORKER_PROMPT.into();
        // `on_exit` is the parallel run's, run once by the coordinator: a
        // worker's loop ends with each item (docs/workers.md).
        config.hooks.on_exit.clear();
    }
    let deadline = args
        .deadline
        .as_deref()
        .map(supervisor::parse_deadline)
        .transpose()?;
    if args.dry_run {
        return dry_run(root, &config, args.fresh, args.json);
    }
    let mut bus = Bus::new();
    if args.json {
        bus.add(Box::new(JsonLines::new(std::io::stdout())));
    } else {
        bus.add(Box::new(Terminal::new(root)));
    }
    let workers = match args.worker {
        Some(_) => 1,
        None => config.workers.workers(args.workers).map_err(|why| {
            Error::usage(why)
                .with_hint("fewer workers, or raise [workers] max_worktrees in ralph.toml")
        })?,
    };
    if workers > 1 {
        let mut pass: Vec<String> = [
            ("--model", &args.model),
            ("--agent", &args.agent),
            ("--deadline", &args.deadline),
        ]
        .into_iter()
        .filter_map(|(flag, v)| v.as_ref().map(|v| [flag.to_string(), v.clone()]))
        .flatten()
        .collect();
        // Each worker's loop keeps its own budgets too: counted the same way.
        if args.budget_per_invocation {
            pass.push("--budget-per-invocation".into());
        }
        // …and acts on the configuration the coordinator trusts.
        pass.push("--trusted-by".into());
        pass.push(project.layout().dir.display().to_string());
        // …and remembers the models' windows in the project's memory.
        pass.push("--home".into());
        pass.push(root.display().to_string());
        let opts = crate::workers::Options {
            workers,
            fresh: args.fresh,
            pass,
            budget_per_invocation: args.budget_per_invocation,
            deadline,
            trust_config: args.trust_config,
        };
        return crate::workers::run(project, config, opts, bus);
    }
    if args.worker.is_none() {
        crate::workers::refuse_a_single_loop(&project.layout().dir)?;
    }
    let opts = RunOptions {
        fresh: args.fresh,
        reset_breaker: args.reset_breaker,
        deadline,
        budget_per_invocation: args.budget_per_invocation,
        worker: unit,
        trust_config: args.trust_config,
        trusted_by,
        granted: args.granted,
        home: args.home.clone(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::wrap("cannot start the async runtime", e))?;
    runtime.block_on(async move {
        let supervisor = Supervisor::new(root, config, opts, bus)?;
        let outcome = supervisor.run().await?;
        Ok(outcome.exit_code())
    })
}

/// `ralph run --remote R --fleet NAME`: one worker of a fleet (docs/fleet.md).
fn fleet_worker(
    root: &Path,
    config: Config,
    args: &RunArgs,
    remote: &str,
    fleet: &str,
) -> Result<i32> {
    if args.fresh
        || args.deadline.is_some()
        || args.budget_per_invocation
        || args.reset_breaker
        || args.workers.is_some()
    {
        return Err(Error::usage(
            "--fresh, --deadline, --budget-per-invocation, --reset-breaker and --workers do not apply to a fleet worker",
        )
        .with_hint("a fleet's budget is shared: set [loop] max_iterations / max_cost_usd; stop it with SIGTERM"));
    }
    let mut loop_args: Vec<std::ffi::OsString> = Vec::new();
    if let Some(m) = &args.model {
        loop_args.extend(["--model".into(), m.into()]);
    }
    if let Some(a) = &args.agent {
        loop_args.extend(["--agent".into(), a.into()]);
    }
    if args.json {
        loop_args.push("--json".into());
    }
    let opts = crate::workers::fleet::Options {
        remote: remote.to_string(),
        fleet: fleet.to_string(),
        worker: args.worker.clone(),
        json: args.json,
        loop_args,
        trust_config: args.trust_config,
    };
    crate::workers::fleet::run(root, config, opts)
}

/// What `ralph run --dry-run` found (`--json`: this object).
#[derive(Debug, Serialize)]
pub(crate) struct DryRunReport {
    pub(crate) iteration: u32,
    pub(crate) plan: String,
    pub(crate) plan_open: usize,
    pub(crate) plan_done: usize,
    /// `agent.kind`.
    pub(crate) kind: crate::agent::AgentKind,
    /// The agent's command line, one word each.
    pub(crate) command: Vec<String>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) prompt_file: String,
    /// The PROMPT.md text, given as the kind gives it (`AgentKind::prompt_via`).
    pub(crate) prompt: String,
}

impl Report for DryRunReport {
    fn human(&self) -> String {
        let quoted: Vec<String> = self
            .command
            .iter()
            .map(|w| shlex::try_quote(w).map_or(w.clone(), |q| q.into_owned()))
            .collect();
        let mut out = String::new();
        let _ = writeln!(out, "# ralph run --dry-run: nothing was started or written");
        let _ = writeln!(out, "# iteration: {}", self.iteration);
        let _ = writeln!(
            out,
            "# plan: {} ({} open, {} done)",
            self.plan, self.plan_open, self.plan_done
        );
        let kind = self.kind;
        let caps = kind.capabilities().describe();
        let _ = writeln!(out, "# agent kind: {kind} ({}): {caps}", kind.product());
        let _ = writeln!(out, "# agent command: {}", quoted.join(" "));
        for (k, v) in &self.env {
            let _ = writeln!(out, "# agent env: {k}={v}");
        }
        let _ = writeln!(
            out,
            "# prompt ({}), {}:",
            self.prompt_file,
            kind.prompt_via()
        );
        out.push_str(&self.prompt);
        out
    }
}

/// `ralph run --dry-run`: everything is loaded and checked, nothing written.
fn dry_run(root: &Path, config: &Config, fresh: bool, json: bool) -> Result<i32> {
    let next = NextIteration::preview(root, config, fresh)?;
    // As a run would: `agent.env`'s credentials are secrets, shown redacted
    // in the text as in `--json`.
    crate::text::secrets::remember(&config.agent.env);
    let env = (next.command.env.iter())
        .map(|(k, v)| {
            let v = crate::text::secrets::redact(v).into_owned();
            (k.clone(), v)
        })
        .collect();
    let report = DryRunReport {
        iteration: next.iteration,
        plan: config.plan.display().to_string(),
        plan_open: next.plan.open_count(),
        plan_done: next.plan.done_count(),
        kind: next.command.kind,
        command: next.command.display(),
        env,
        prompt_file: config.prompt_file.display().to_string(),
        prompt: next.prompt,
    };
    super::print(&report.render(json))?;
    Ok(0)
}
