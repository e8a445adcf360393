//! The coordinator's start: the repository, the run branch, the plan's
//! units checked, then the one start of every run (`supervisor::start`:
//! the checks, the lock, the log, trust, signals, what a dead run left),
//! the ledger to continue (or the refusal to start afresh over unmerged
//! work), the user's edits committed first.

use crate::workers::grant;
use std::collections::BTreeMap;
use std::path::Path;

use git2::Repository;

use super::machine::{LEASE, Machine, Rules};
use super::{Coordinator, Options};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::events::Bus;
use crate::formats::Event;
use crate::formats::ledger::Ledger;
use crate::plan::units;
use crate::project::Project;
use crate::repo::{OwnPaths, Repo};
use crate::supervisor::start::{Begun, Kind, Start};

pub(crate) fn run(project: &Project, config: Config, opts: Options, mut bus: Bus) -> Result<i32> {
    let root = project.root().to_path_buf();
    let layout = project.layout().clone();
    let repo = Repo::open(&root)?.ok_or_else(|| {
        Error::usage("`ralph run --workers` needs a git repository: each worker has a worktree")
            .with_hint("`git init` and commit the project, or run one loop without --workers")
    })?;
    let run_branch = repo.branch().ok_or_else(|| {
        Error::usage("HEAD is detached: the workers' work is merged into the branch checked out")
            .with_hint("check out a branch first, e.g. `git switch -c ralph-run`")
    })?;
    if repo.head_id().is_none() {
        return Err(Error::usage(format!(
            "branch {run_branch} has no commit yet: the workers' worktrees start from it"
        ))
        .with_hint("commit the project first"));
    }
    let workdir = repo
        .workdir()
        .canonicalize()
        .map_err(|e| Error::io("cannot resolve", repo.workdir(), e))?;
    let git =
        Repository::open(&workdir).map_err(|e| Error::wrap("cannot open the git repository", e))?;
    let canon_root = root
        .canonicalize()
        .map_err(|e| Error::io("cannot resolve", &root, e))?;
    let prefix = canon_root
        .strip_prefix(&workdir)
        .unwrap_or(Path::new(""))
        .to_path_buf();
    let plan_path = root.join(&config.plan);
    // Where the plan's check-offs are committed: its path in the work tree
    // (`../docs/fix_plan.md` from a subfolder is `docs/fix_plan.md`).
    let plan_in_tree = plan_path
        .canonicalize()
        .map_err(|e| Error::io("cannot read the plan", &plan_path, e))?
        .strip_prefix(&workdir)
        .map(Path::to_path_buf)
        .map_err(|_| {
            Error::usage(format!(
                "the plan {} is outside the git work tree {}: the coordinator commits its check-offs there",
                plan_path.display(),
                workdir.display()
            ))
            .with_hint("put the plan inside the repository")
        })?;
    // Before anything is written: the plan's units (a dependency that
    // cannot be met is refused with nothing made), then the start's checks.
    let text = project.plan_text(&config)?;
    // Values the plan holds now are the user's words (see `secrets`).
    crate::text::secrets::note_plan(&text);
    units::units(&text).map_err(|e| {
        Error::usage(e.to_string()).with_hint("docs/workers.md says how to mark dependencies")
    })?;
    let checked = Start::check(&root, &config, Kind::Coordinator, opts.trust_config)?;
    let previous = Ledger::load(&layout.dir)?.filter(|l| l.ended.is_none());
    let continued = previous.as_ref().map(|l| l.run_id.clone());
    // The claim is held for the run's life: to the end of this function.
    let Begun {
        run_id,
        lock,
        claim: _claim,
        trust,
        hooks,
        signals,
        ..
    } = checked.begin(Some(&repo), continued, &mut bus)?;
    trust.save(&layout.dir)?;
    let resumed = previous.is_some();
    let ledger = match previous {
        Some(l) if opts.fresh && !l.unmerged(&git).is_empty() => {
            let branches: Vec<&str> = (l.unmerged(&git).into_iter())
                .map(|a| a.branch.as_str())
                .collect();
            return Err(Error::usage(format!(
                "the parallel run {} has worker branches not merged yet: {}",
                l.run_id,
                branches.join(", ")
            ))
            .with_hint(format!(
                "`ralph run --workers N` without --fresh finishes them; `ralph status` lists their commits; {}",
                crate::workers::ledger::THROW_AWAY
            )));
        }
        Some(l) if l.run_branch != run_branch => {
            return Err(Error::usage(format!(
                "the parallel run {} merges into {}, but {run_branch} is checked out",
                l.run_id, l.run_branch
            ))
            .with_hint(format!("`git switch {}` and run again", l.run_branch)));
        }
        Some(l) if !opts.fresh => l,
        _ => {
            committed_before(&repo, &config, &mut bus);
            Ledger {
                start_commit: repo.head_id(),
                run_id: run_id.clone(),
                run_branch: run_branch.clone(),
                plan: config.plan.display().to_string(),
                started_at: crate::formats::now_rfc3339(),
                workers: opts.workers,
                ..Ledger::default()
            }
        }
    };
    config_is_committed(&git, &prefix, &run_branch)?;
    let worktrees = root
        .join(
            config
                .workers
                .dir
                .as_deref()
                .unwrap_or(Path::new(".ralph/worktrees")),
        )
        .join(&run_id);
    let counted_from = crate::supervisor::CountedFrom::of_run(
        &ledger.started_at,
        ledger.iterations,
        ledger.cost_usd,
        opts.budget_per_invocation,
        jiff::Timestamp::now(),
    );
    let l = &config.loop_;
    let rules = Rules {
        workers: opts.workers,
        conflict_attempts: config.workers.conflict_attempts,
        limits: grant::Limits {
            max_iterations: l.max_iterations,
            max_cost: l.max_cost_usd,
            max_duration: l.max_duration.map(|d| d.0),
        },
        from: grant::Spent {
            iterations: counted_from.iteration,
            cost: counted_from.cost,
            elapsed: counted_from.elapsed,
            running: 0,
        },
        lease: LEASE,
    };
    let mut c = Coordinator {
        root,
        ralph_dir: layout.dir.clone(),
        git,
        plan_path,
        plan_in_tree,
        prefix,
        worktrees,
        ledger,
        bus,
        hooks,
        children: BTreeMap::new(),
        ended: BTreeMap::new(),
        machine: Machine::new(rules, &super::now()),
        opts,
        checkout_away: false,
        checkout_plan_gone: false,
        worktrees_full: None,
        lock,
        config,
        trust,
        signals,
    };
    c.ledger.workers = c.opts.workers;
    // What the workers did while no coordinator listened counts before
    // anything starts: a budget it spent ends the run now.
    c.catch_up_idle();
    let l = &c.config.loop_;
    // This coordinator's time starts now (the machine's start).
    let ends = counted_from.ends(
        l.max_cost_usd,
        l.max_duration.map(|d| d.0),
        c.opts.deadline,
        std::time::Duration::ZERO,
        jiff::Timestamp::now(),
    );
    c.bus.emit(Event::RunStarted {
        run_id: run_id.clone(),
        resumed,
        first_iteration: c.ledger.iterations + 1,
        max_iterations: c.config.loop_.max_iterations,
        plan: c.ledger.plan.clone(),
        pid: std::process::id(),
        deadline: ends.deadline.map(|t| t.to_string()),
        max_cost_usd: ends.max_cost_usd,
    });
    c.save()?;
    c.drive()
}

/// The user's tracked edits, committed on their own before any worktree
/// is made from the branch (as a single run does).
fn committed_before(repo: &Repo, config: &Config, bus: &mut Bus) {
    let (outcome, files) = repo.commit_tracked_changes(
        "ralph: changes present before the run",
        &OwnPaths::new(&config.prompt_file),
    );
    if !files.is_empty() {
        bus.emit(Event::Warning {
            message: format!(
                "changes present before the run ({}): {}",
                files.join(", "),
                match outcome {
                    crate::repo::CommitOutcome::Committed { id, .. } => format!(
                        "committed on their own ({}) so that the workers start from them",
                        &id[..id.len().min(8)]
                    ),
                    crate::repo::CommitOutcome::Skipped { reason } => reason,
                    crate::repo::CommitOutcome::NothingToCommit => "nothing to commit".into(),
                }
            ),
        });
    }
}

/// Workers run from a checkout of the run branch: a `ralph.toml` they
/// would not see is refused with the fix.
fn config_is_committed(git: &Repository, prefix: &Path, run_branch: &str) -> Result<()> {
    let path = git
        .workdir()
        .map(|w| w.join(prefix).join("ralph.toml"))
        .filter(|p| p.is_file());
    let Some(_) = path else { return Ok(()) };
    let tree = git
        .revparse_single(&format!("refs/heads/{run_branch}^{{tree}}"))
        .and_then(|t| t.peel_to_tree())
        .map_err(|e| Error::wrap("cannot read the run branch", e))?;
    if tree.get_path(&prefix.join("ralph.toml")).is_err() {
        return Err(Error::usage(format!(
            "ralph.toml is not committed on {run_branch}: the workers' worktrees would not have it"
        ))
        .with_hint("commit ralph.toml (and the plan), then run again"));
    }
    Ok(())
}
