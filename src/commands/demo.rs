//! `ralph demo`: the bundled demo project in a fresh git repository, run
//! with `ralph sim` as the agent. `--agent KIND` makes it the agent of that
//! kind: ralph runs it as it runs that CLI, and the sim speaks that CLI's
//! format, so every decoder can be watched at work without a network.

use std::path::PathBuf;

use crate::cli::RunArgs;
use crate::config::AgentKind;
use crate::error::{Error, Result};

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

/// `ralph demo`: a fresh git repo with the bundled demo, and a run in it.
pub(crate) fn demo(dir: Option<PathBuf>, kind: AgentKind) -> Result<i32> {
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
        let text = match name {
            "ralph.toml" => with_kind(text, kind),
            _ => text.to_string(),
        };
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
    eprintln!("demo project: {} (agent kind: {kind})", dir.display());
    let code = super::run(&crate::project::Project::at(&dir), &RunArgs::default())?;
    eprintln!(
        "\ndemo finished (exit {code}). Look around:\n  cd {}\n  git log --stat\n  ls .ralph/handoffs && cat PROMPT.md\n  ralph -C {} status",
        dir.display(),
        dir.display()
    );
    Ok(code)
}

/// The demo's `ralph.toml` with `kind` in its `[agent]` table.
fn with_kind(config: &str, kind: AgentKind) -> String {
    if kind == AgentKind::Claude {
        return config.to_string();
    }
    config.replacen(
        "[agent]\n",
        &format!(
            "[agent]\n# `ralph demo --agent {kind}`: run as {} is, the sim speaking its format.\nkind = \"{kind}\"\n",
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
            parsed["agent"]["command"].as_str(),
            Some("ralph sim scenario.toml")
        );
        assert_eq!(
            with_kind(DEMO_FILES[1].1, AgentKind::Claude),
            DEMO_FILES[1].1
        );
    }
}
