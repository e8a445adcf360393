//! The run branch is the branch the run started on, whatever the user's
//! checkout does meanwhile: the plan is read from it and its check-offs
//! are committed on it.
//!
//! Theory: while the run branch is checked out where the user started the
//! run, the plan is the file there (the user may add items to it mid-run)
//! and a check-off writes that file and commits it alone. When the user
//! switches to another branch or detaches HEAD, the file in the checkout is
//! another branch's: the plan is then read from the run branch's tip and a
//! check-off is a commit on the run branch's ref alone, the checkout left
//! untouched. The merges go on as well (`merge` updates a work tree only
//! where the run branch is checked out). The user is told once, each time
//! the checkout leaves the run branch, and `git switch <run branch>` shows
//! everything.

use git2::{Oid, Repository};

use super::{Coordinator, read_plan};
use crate::error::{Error, Result};
use crate::formats::Event;

impl Coordinator {
    /// Whether the user's checkout (where the run started) is on the run branch.
    pub(super) fn run_branch_checked_out(&self) -> bool {
        let run = format!("refs/heads/{}", self.ledger.run_branch);
        self.git.head().ok().is_some_and(|h| h.name() == Some(&run))
    }

    /// The plan file in the checkout, when it is the run branch's plan:
    /// the run branch is checked out there and the file reads as a plan.
    /// A file deleted or emptied mid-run (`> fix_plan.md`, an editor's
    /// failed save) is not a plan whose items are all gone: read as one,
    /// the run ended "completed" with items never done and merged items
    /// never checked off, which the next run paid for again.
    fn checkout_plan(&self) -> Option<String> {
        if !self.run_branch_checked_out() {
            return None;
        }
        read_plan(&self.plan_path)
            .ok()
            .filter(|text| !text.trim().is_empty())
    }

    /// The plan as the run branch has it: the file in the checkout while
    /// the run branch is checked out there and the file is a plan
    /// (`checkout_plan`), else the run branch's blob (and the next
    /// check-off writes it back to the checkout).
    pub(super) fn plan_text(&self) -> Result<String> {
        if let Some(text) = self.checkout_plan() {
            return Ok(text);
        }
        let blob = self
            .git
            .revparse_single(&format!(
                "refs/heads/{}:{}",
                self.ledger.run_branch,
                self.plan_in_tree.display()
            ))
            .and_then(|o| o.peel_to_blob())
            .map_err(|e| Error::wrap("cannot read the plan on the run branch", e))?;
        Ok(String::from_utf8_lossy(blob.content()).into_owned())
    }

    /// Said once each time the user's checkout leaves the run branch.
    pub(super) fn watch_checkout(&mut self) {
        let away = !self.run_branch_checked_out();
        if away && !self.checkout_away {
            let now = match self.git.head() {
                Ok(h) if self.git.head_detached().unwrap_or(false) => {
                    h.target().map_or("a detached HEAD".into(), |t| {
                        format!("a detached HEAD at {t}")
                    })
                }
                Ok(h) => format!("branch {}", h.shorthand().unwrap_or("?")),
                Err(_) => "no branch".into(),
            };
            let run = &self.ledger.run_branch;
            self.bus.emit(Event::Warning {
                message: format!(
                    "the checkout where this run started is on {now} now, not on the run branch {run}: \
                     the workers' merges and check-offs go on {run} (the plan is read from it), \
                     nothing is written to your checkout; `git switch {run}` to see them"
                ),
            });
        }
        self.checkout_away = away;
        let gone = !away && self.checkout_plan().is_none();
        if gone && !self.checkout_plan_gone {
            let run = &self.ledger.run_branch;
            self.bus.emit(Event::Warning {
                message: format!(
                    "{} in your checkout is missing, empty or unreadable now: the run goes on with the plan as the run branch {run} has it, and the next check-off writes it back; `ralph stop` ends the run",
                    self.plan_path.display()
                ),
            });
        }
        self.checkout_plan_gone = gone;
    }

    /// `text` committed as the plan, alone, on the run branch: written to
    /// the checkout too while the run branch is checked out there.
    pub(super) fn commit_plan(&mut self, text: &str, message: &str) -> Result<()> {
        let here = self.run_branch_checked_out();
        if here {
            crate::formats::write_atomic(&self.plan_path, text.as_bytes())?;
        }
        let branch = format!("refs/heads/{}", self.ledger.run_branch);
        let id = commit_alone(
            &self.git,
            &branch,
            &self.plan_in_tree,
            text.as_bytes(),
            message,
            here,
        )
        .map_err(|e| Error::wrap("cannot commit the plan", e))?;
        self.ledger.made(id.to_string());
        Ok(())
    }
}

/// Commit `bytes` as `path` (relative to the work tree's top) on `branch`
/// and nothing else: the tree is the branch tip's with that one entry
/// replaced, never the index, which may hold what a merge cut short by
/// kill -9 had staged (a plan check-off once carried another item's files
/// onto the run branch that way). `checked_out`: the branch is the
/// checkout's, whose index then agrees with the commit for `path`.
fn commit_alone(
    git: &Repository,
    branch: &str,
    path: &std::path::Path,
    bytes: &[u8],
    message: &str,
    checked_out: bool,
) -> std::result::Result<Oid, git2::Error> {
    let parent = git.find_commit(git.refname_to_id(branch)?)?;
    let base = parent.tree()?;
    let mode = match base.get_path(path) {
        Ok(e) if e.filemode() == 0o100755 => git2::FileMode::BlobExecutable,
        _ => git2::FileMode::Blob,
    };
    let blob = git.blob(bytes)?;
    let mut update = git2::build::TreeUpdateBuilder::new();
    update.upsert(path, blob, mode);
    let tree = git.find_tree(update.create_updated(git, &base)?)?;
    let (author, committer) = crate::repo::identities(git)?;
    let id = git.commit(
        Some(branch),
        &author,
        &committer,
        message,
        &tree,
        &[&parent],
    )?;
    if checked_out {
        let mut index = git.index()?;
        index.add_path(path)?;
        index.write()?;
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn repo_with_plan() -> (tempfile::TempDir, Repository) {
        let dir = tempfile::tempdir().unwrap();
        let git = Repository::init(dir.path()).unwrap();
        let mut config = git.config().unwrap();
        config.set_str("user.name", "t").unwrap();
        config.set_str("user.email", "t@example.com").unwrap();
        std::fs::write(dir.path().join("fix_plan.md"), "- [ ] a\n").unwrap();
        let mut index = git.index().unwrap();
        index.add_path(Path::new("fix_plan.md")).unwrap();
        let tree = git.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        git.commit(Some("HEAD"), &sig, &sig, "initial", &tree, &[])
            .unwrap();
        drop(tree);
        (dir, git)
    }

    fn head_branch(git: &Repository) -> String {
        git.head().unwrap().name().unwrap().to_string()
    }

    #[test]
    fn the_plan_is_committed_alone_whatever_the_index_holds() {
        let (dir, git) = repo_with_plan();
        let branch = head_branch(&git);
        // Another item's file, staged by a merge a kill cut short.
        std::fs::write(dir.path().join("other.txt"), "not this commit's\n").unwrap();
        let mut index = git.index().unwrap();
        index.add_path(Path::new("other.txt")).unwrap();
        index.write().unwrap();
        std::fs::write(dir.path().join("fix_plan.md"), "- [x] a\n").unwrap();

        let id = commit_alone(
            &git,
            &branch,
            Path::new("fix_plan.md"),
            b"- [x] a\n",
            "done",
            true,
        )
        .unwrap();
        let tree = git.find_commit(id).unwrap().tree().unwrap();
        assert!(tree.get_path(Path::new("other.txt")).is_err());
        let plan = tree.get_path(Path::new("fix_plan.md")).unwrap();
        assert_eq!(git.find_blob(plan.id()).unwrap().content(), b"- [x] a\n");
        let statuses = git.statuses(None).unwrap();
        let status = |p: &str| {
            statuses
                .iter()
                .find(|s| s.path() == Some(p))
                .map(|s| s.status())
        };
        assert_eq!(status("fix_plan.md"), None, "the plan is clean");
        assert_eq!(
            status("other.txt"),
            Some(git2::Status::INDEX_NEW),
            "left as it was"
        );
    }

    #[test]
    fn a_check_off_goes_on_the_run_branch_when_the_checkout_is_elsewhere() {
        let (dir, git) = repo_with_plan();
        let run = head_branch(&git);
        let start = git.refname_to_id(&run).unwrap();
        // The user switched to a branch of their own.
        git.branch("mine", &git.find_commit(start).unwrap(), false)
            .unwrap();
        git.set_head("refs/heads/mine").unwrap();

        let id = commit_alone(
            &git,
            &run,
            Path::new("fix_plan.md"),
            b"- [x] a\n",
            "done",
            false,
        )
        .unwrap();
        assert_eq!(git.refname_to_id(&run).unwrap(), id);
        assert_eq!(git.refname_to_id("refs/heads/mine").unwrap(), start);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("fix_plan.md")).unwrap(),
            "- [ ] a\n",
            "the user's checkout is left alone"
        );
        assert!(git.statuses(None).unwrap().is_empty());
    }
}
