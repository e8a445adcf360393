//! `ralph demo`: the bundled demo project in a fresh git repository, run
//! with `ralph sim` as the agent.

use std::path::PathBuf;

use crate::cli::RunArgs;
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
    let code = super::run(&crate::project::Project::at(&dir), &RunArgs::default())?;
    eprintln!(
        "\ndemo finished (exit {code}). Look around:\n  cd {}\n  git log --stat\n  ls .ralph/handoffs && cat PROMPT.md\n  ralph -C {} status",
        dir.display(),
        dir.display()
    );
    Ok(code)
}
