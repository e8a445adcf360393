//! The subcommands other than the loop itself: `run` set-up (and
//! `--dry-run`), `checkpoint`, `stop`, `demo`. Each loads what it needs,
//! does one thing, and returns an exit code.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::agent::AgentCommand;
use crate::checkpoint::{self, Moment};
use crate::cli::RunArgs;
use crate::config::Config;
use crate::context::Level;
use crate::error::{Error, Result};
use crate::events::{Bus, JsonLines};
use crate::plan::Plan;
use crate::prompt::{self, Templates};
use crate::report::Terminal;
use crate::state::{self, Layout, RunState};
use crate::supervisor::{self, RunOptions, Supervisor};

/// The config with `ralph run`'s flags applied on top.
pub fn load_config(root: &Path, args: &RunArgs) -> Result<Config> {
    let mut config = Config::load(root)?;
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
    Ok(config)
}

pub fn run(root: &Path, args: &RunArgs) -> Result<i32> {
    let config = load_config(root, args)?;
    let deadline = args
        .deadline
        .as_deref()
        .map(supervisor::parse_deadline)
        .transpose()?;
    if args.dry_run {
        return dry_run(root, &config, args.fresh);
    }
    let mut bus = Bus::new();
    let opts = RunOptions {
        fresh: args.fresh,
        reset_breaker: args.reset_breaker,
        deadline,
    };
    if args.json {
        bus.add(Box::new(JsonLines::new(std::io::stdout())));
    } else {
        bus.add(Box::new(Terminal::new()));
    }
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

/// `ralph run --dry-run`: everything is loaded and checked, nothing written.
fn dry_run(root: &Path, config: &Config, fresh: bool) -> Result<i32> {
    let templates = Templates::load(root)?;
    let plan = Plan::load(&root.join(&config.plan))?;
    let layout = Layout::new(root);
    let state = match RunState::load(&layout.state())? {
        Some(s) if !fresh && !s.is_finished() => s,
        _ => RunState::default(),
    };
    let iteration = state.iteration + 1;
    let text = prompt::render_prompt(&templates, config, &state, &plan, iteration)?;
    let cmd = AgentCommand::from_config(config, iteration);
    let mut out = std::io::stdout().lock();
    let quoted: Vec<String> = cmd
        .display()
        .iter()
        .map(|w| shlex::try_quote(w).map_or(w.clone(), |q| q.into_owned()))
        .collect();
    let _ = writeln!(out, "# ralph run --dry-run: nothing was started or written");
    let _ = writeln!(out, "# iteration: {iteration}");
    let _ = writeln!(
        out,
        "# plan: {} ({} open, {} done)",
        config.plan.display(),
        plan.open_count(),
        plan.done_count()
    );
    let _ = writeln!(out, "# agent command: {}", quoted.join(" "));
    for (k, v) in &cmd.env {
        let _ = writeln!(out, "# agent env: {k}={v}");
    }
    let _ = writeln!(
        out,
        "# prompt ({}), sent as the first stream-json user message:",
        config.prompt_file.display()
    );
    let _ = out.write_all(text.as_bytes());
    Ok(0)
}

/// What to write to `.ralph/control.json` for a running supervisor.
fn send_to_supervisor(
    layout: &Layout,
    sig: nix::sys::signal::Signal,
    reason: Option<&str>,
) -> Result<Option<i32>> {
    let Some(info) = state::running_supervisor(layout) else {
        return Ok(None);
    };
    if let Some(reason) = reason {
        let body = serde_json::json!({ "reason": reason }).to_string();
        state::write_atomic(&layout.control(), body.as_bytes())?;
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(info.pid), sig).map_err(|e| {
        Error::wrap(
            format!("cannot signal the supervisor (pid {})", info.pid),
            e,
        )
    })?;
    Ok(Some(info.pid))
}

pub fn checkpoint(root: &Path, reason: &str) -> Result<i32> {
    let layout = Layout::new(root);
    if let Some(pid) = send_to_supervisor(&layout, nix::sys::signal::Signal::SIGUSR1, Some(reason))?
    {
        println!(
            "asked the running supervisor (pid {pid}) to checkpoint now; it will ask the agent for its notes, commit and write a handoff"
        );
        return Ok(0);
    }
    let config = Config::load(root)?;
    let templates = Templates::load(root)?;
    layout.ensure()?;
    let mut state = RunState::load(&layout.state())?.unwrap_or_default();
    let moment = Moment {
        iteration: state.iteration,
        trigger: "manual".into(),
        level: Level::L2,
        percent: 0.0,
        tokens: 0,
        usable: 0,
        window: state.context_window,
        reason: format!("checkpoint by hand with no run in progress ({reason})"),
        last_text: None,
        last_tools: Vec::new(),
        files_touched: Vec::new(),
        notes_path: None,
    };
    let saved = checkpoint::perform(root, &config, &templates, &moment);
    for w in &saved.warnings {
        eprintln!("warning: {w}");
    }
    state.last_handoff.clone_from(&saved.handoff);
    if saved.commit.is_some() {
        state.last_commit.clone_from(&saved.commit);
    }
    if state.run_id.is_empty() {
        state.run_id = "manual".into();
    }
    state.save(&layout.state())?;
    println!("no run in progress: checkpointed the tree as it stands");
    match (&saved.commit, &saved.commit_note) {
        (Some(c), _) => println!("  WIP commit {c}"),
        (None, Some(n)) => println!("  no commit: {n}"),
        _ => {}
    }
    match &saved.handoff {
        Some(h) => println!("  handoff {h}"),
        None => println!("  no handoff was written"),
    }
    Ok(if saved.handoff.is_some() { 0 } else { 1 })
}

pub fn stop(root: &Path) -> Result<i32> {
    let layout = Layout::new(root);
    match send_to_supervisor(&layout, nix::sys::signal::Signal::SIGUSR2, None)? {
        Some(pid) => {
            println!(
                "asked the running supervisor (pid {pid}) to finish the current iteration through a checkpoint and stop (exit 6)"
            );
            Ok(0)
        }
        None => Err(Error::usage("no ralph run is in progress here")
            .with_hint("`ralph status` shows the last run")),
    }
}

const DEMO_FILES: [(&str, &str); 3] = [
    ("fix_plan.md", include_str!("../examples/demo/fix_plan.md")),
    ("ralph.toml", include_str!("../examples/demo/ralph.toml")),
    (
        "scenario.toml",
        include_str!("../examples/demo/scenario.toml"),
    ),
];

/// `ralph demo`: a fresh git repo with the bundled demo, and a run in it.
pub fn demo(dir: Option<PathBuf>) -> Result<i32> {
    let dir = match dir {
        Some(d) => d,
        None => std::env::temp_dir().join(format!(
            "ralph-demo-{}",
            jiff::Timestamp::now().as_millisecond()
        )),
    };
    if dir.exists()
        && std::fs::read_dir(&dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(
            Error::usage(format!("{} exists and is not empty", dir.display()))
                .with_hint("name a new directory, or leave it out to use a temporary one"),
        );
    }
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("cannot create", &dir, e))?;
    for (name, text) in DEMO_FILES {
        std::fs::write(dir.join(name), text)
            .map_err(|e| Error::io("cannot write", dir.join(name), e))?;
    }
    let repo = git2::Repository::init(&dir)?;
    let sig = repo
        .signature()
        .or_else(|_| git2::Signature::now("ralph demo", "ralph@localhost"))?;
    let mut index = repo.index()?;
    index.add_all(["*"], git2::IndexAddOption::DEFAULT, None)?;
    index.write()?;
    let tree = repo.find_tree(index.write_tree()?)?;
    repo.commit(Some("HEAD"), &sig, &sig, "demo: the plan", &tree, &[])?;
    eprintln!("demo project: {}", dir.display());
    let code = run(&dir, &RunArgs::default())?;
    eprintln!(
        "\ndemo finished (exit {code}). Look around:\n  cd {}\n  git log --stat\n  ls .ralph/handoffs && cat PROMPT.md\n  ralph -C {} status",
        dir.display(),
        dir.display()
    );
    Ok(code)
}
