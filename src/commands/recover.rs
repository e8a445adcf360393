//! `ralph recover`: the snapshots of the safety net (hidden refs written
//! during iterations), listed, or one restored into the work tree or onto a
//! new branch.

use std::fmt::Write as _;

use serde::Serialize;

use super::{Report, local_time, print};
use crate::cli::RecoverArgs;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::project::Project;
use crate::repo::{OwnPaths, Repo, Restored, SnapshotInfo};

#[derive(Serialize)]
struct Listing {
    snapshots: Vec<SnapshotInfo>,
}

impl Report for Listing {
    fn human(&self) -> String {
        if self.snapshots.is_empty() {
            return "no snapshots: ralph records the work tree every git.snapshot_interval during an iteration\n".into();
        }
        let mut out = format!(
            "{:<12} {:<19} {:<16} {:>5} {:>7}\n",
            "ID", "TAKEN", "RUN", "ITER", "CHANGED"
        );
        for s in &self.snapshots {
            let _ = writeln!(
                out,
                "{:<12} {:<19} {:<16} {:>5} {:>7}",
                s.id,
                local_time(&s.time),
                s.run,
                s.iteration,
                s.files_changed
            );
        }
        out.push_str(
            "CHANGED counts files that differ from HEAD. Restore with `ralph recover ID` (into the work tree) or `ralph recover ID --branch NAME`.\n",
        );
        out
    }
}

impl Report for Restored {
    fn human(&self) -> String {
        match self {
            Restored::WorkTree { snapshot, files } if files.is_empty() => {
                format!("snapshot {snapshot}: the work tree already has every file of it\n")
            }
            Restored::WorkTree { snapshot, files } => {
                let mut out = format!(
                    "restored {} file(s) of snapshot {snapshot} into the work tree (HEAD and the index unchanged):\n",
                    files.len()
                );
                for f in files {
                    let _ = writeln!(out, "  {f}");
                }
                out
            }
            Restored::Branch {
                snapshot,
                branch,
                commit,
            } => format!(
                "created branch {branch} at {} with snapshot {snapshot}; `git switch {branch}` to see it\n",
                &commit[..10]
            ),
        }
    }
}

pub(crate) fn recover(project: &Project, args: &RecoverArgs) -> Result<i32> {
    let root = project.root();
    let repo = Repo::open(root)?.ok_or_else(|| {
        Error::usage(format!("{} is not in a git repository", root.display()))
            .with_hint("snapshots are git objects: there are none outside a repository")
    })?;
    let text = match (&args.snapshot, &args.branch) {
        (None, _) => Listing {
            snapshots: repo.snapshots()?,
        }
        .render(args.json),
        (Some(spec), Some(branch)) => repo.snapshot_to_branch(spec, branch)?.render(args.json),
        (Some(spec), None) => {
            // Restoring must not take ralph's own files for the user's changes.
            let own = Config::load(root)
                .map_or_else(|_| OwnPaths::default(), |c| OwnPaths::new(c.prompt_file));
            repo.restore_snapshot(spec, args.force, &own)?
                .render(args.json)
        }
    };
    print(&text)?;
    Ok(0)
}
