//! `ralph demo`: the bundled demo project in a fresh git repository, run
//! with `ralph sim` as the agent. `--agent KIND` makes it the agent of that
//! kind: ralph runs it as it runs that CLI, and the sim speaks that CLI's
//! format, so every decoder can be watched at work without a network.
//!
//! `ralph demo --plan PLAN` is a rehearsal on the user's own plan: the same
//! throwaway repository with a copy of PLAN as `fix_plan.md` and a scenario
//! that works any plan item by item (examples/rehearsal/: `agent.sh` does
//! what an agent would do to the files, `ralph sim` plays the turns),
//! checkpoints once on the way and completes; `--workers N` runs it as a
//! parallel run. PLAN is only read: the user's project is left as it was.

use std::path::Path;

use crate::cli::{DemoArgs, RunArgs};
use crate::config::AgentKind;
use crate::error::{Error, Result};
use crate::plan::Plan;

const DEMO_FILES: [(&str, &str); 3] = [
    (
        "fix_plan.md",
        include_str!("../../examples/demo/fix_plan.md"),
    ),
    ("ralph.toml", include_str!("../../examples/demo/ralph.toml")),
    (
        "scenario.toml",
        include_str!("../../examples/demo/scenario.toml"),
    ),
];

/// The rehearsal's files beside the copy of the plan; `.rehearsal-said` is
/// where `agent.sh` leaves the session's last words (kept out of commits).
const REHEARSAL_FILES: [(&str, &str); 4] = [
    (
        "ralph.toml",
        include_str!("../../examples/rehearsal/ralph.toml"),
    ),
    (
        "scenario.toml",
        include_str!("../../examples/rehearsal/scenario.toml"),
    ),
    (
        "agent.sh",
        include_str!("../../examples/rehearsal/agent.sh"),
    ),
    (".gitignore", "/.rehearsal-said\n"),
];

/// Iterations a rehearsal may take beyond one per open item: the
/// checkpoint's iteration, and a margin so a stray one shows as exit 4
/// rather than a loop.
const REHEARSAL_SPARE_ITERATIONS: u32 = 3;

/// `ralph demo`: a fresh git repo with the bundled demo (or, with `--plan`,
/// the rehearsal on a copy of the user's plan), and a run in it.
pub(crate) fn demo(args: DemoArgs) -> Result<i32> {
    let (files, run_args, prefix) = match &args.plan {
        None => (bundled(&DEMO_FILES), RunArgs::default(), "ralph-demo"),
        Some(plan) => {
            let (files, run_args) = rehearsal(plan, args.workers)?;
            (files, run_args, "ralph-rehearsal")
        }
    };
    let dir = match args.path {
        Some(d) => d,
        None => std::env::temp_dir().join(format!(
            "{prefix}-{}",
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
    for (name, text) in files {
        let text = match name.as_str() {
            "ralph.toml" => with_kind(&text, args.agent),
            _ => text,
        };
        std::fs::write(dir.join(&name), text)
            .map_err(|e| Error::io("cannot write", dir.join(&name), e))?;
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
    match &args.plan {
        None => eprintln!(
            "demo project: {} (agent kind: {})",
            dir.display(),
            args.agent
        ),
        Some(plan) => eprintln!(
            "rehearsal of {} in {} (agent kind: {}; your plan is only read)",
            plan.display(),
            dir.display(),
            args.agent
        ),
    }
    let code = super::run(&crate::project::Project::at(&dir), &run_args)?;
    eprintln!(
        "\n{} finished (exit {code}). Look around:\n  cd {}\n  git log --stat\n  ls .ralph/handoffs && cat PROMPT.md\n  ralph -C {} report",
        if args.plan.is_some() {
            "rehearsal"
        } else {
            "demo"
        },
        dir.display(),
        dir.display()
    );
    Ok(code)
}

fn bundled(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(name, text)| (name.to_string(), text.to_string()))
        .collect()
}

/// The rehearsal's files (the plan's copy as `fix_plan.md`) and run: an
/// iteration per open item and a few spare, `workers` agents at once.
/// `plan` is any file the user names, read to be copied, not a project's
/// plan: `Plan::read_text` itself (its policy), no `Project`.
fn rehearsal(plan: &Path, workers: Option<u32>) -> Result<(Vec<(String, String)>, RunArgs)> {
    let text = Plan::read_text(plan)?;
    let open = Plan::parse(&text).open_count();
    if open == 0 {
        return Err(Error::usage(format!(
            "plan {} has no open item: nothing to rehearse",
            plan.display()
        ))
        .with_hint("a plan item is a checkbox line: `- [ ] what to do`"));
    }
    let mut files = bundled(&REHEARSAL_FILES);
    files.push(("fix_plan.md".to_string(), text));
    let iterations = u32::try_from(open)
        .unwrap_or(u32::MAX)
        .saturating_add(REHEARSAL_SPARE_ITERATIONS);
    let run_args = RunArgs {
        max_iterations: Some(iterations),
        workers,
        ..RunArgs::default()
    };
    Ok((files, run_args))
}

/// The demo's `ralph.toml` with `kind` in its `[agent]` table.
fn with_kind(config: &str, kind: AgentKind) -> String {
    if kind == AgentKind::Claude {
        return config.to_string();
    }
    // The sim reports the demo model's 200k window; a kind that reports
    // its own (Codex: 258,400) would otherwise be metered on that until the
    // first report, and plan the first iteration's items for it.
    let window = match kind.window_before_report() {
        Some(_) => {
            "# The sim's window (Codex itself reports its model's).\ncontext_window = 200000\n"
        }
        None => "",
    };
    config.replacen(
        "[agent]\n",
        &format!(
            "[agent]\n# `ralph demo --agent {kind}`: run as {} is, the sim speaking its format.\nkind = \"{kind}\"\n{window}",
            kind.product()
        ),
        1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_goes_into_the_agent_table() {
        let config = with_kind(DEMO_FILES[1].1, AgentKind::Codex);
        let parsed: toml::Value = toml::from_str(&config).unwrap();
        assert_eq!(parsed["agent"]["kind"].as_str(), Some("codex"));
        assert_eq!(
            parsed["agent"]["context_window"].as_integer(),
            Some(200_000)
        );
        assert_eq!(
            parsed["agent"]["command"].as_str(),
            Some("ralph sim scenario.toml")
        );
        assert_eq!(
            with_kind(DEMO_FILES[1].1, AgentKind::Claude),
            DEMO_FILES[1].1
        );
    }
}
