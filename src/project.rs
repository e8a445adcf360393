//! "This project": where it is, where its runtime files go, its config and
//! its plan. Every command, the Claude Code hooks and the status line find
//! the project here, so `ralph status` in `src/` means the same project as
//! `ralph run` at its root.
//!
//! Finding it works as git finds a repository: from the starting directory
//! (the current one, or `-C DIR`) upward, the nearest directory with a
//! `ralph.toml` or a `.ralph/` is the project; with neither anywhere above,
//! the starting directory is (a new project, as `ralph run` in a fresh
//! directory always was). `ralph init` takes its directory as it is.
//!
//! The plan is loaded here, once, with one error policy: a plan that is
//! missing, not a file, too big or not text is an [`Error`] naming it;
//! callers that must never fail (the hooks, the status line) decide what to
//! show instead, the loader does not guess.
//!
//! A run's *scope* follows from the root: the project's directory relative
//! to its git work tree is all a run stages, commits, snapshots and counts
//! as progress (`repo/scope.rs` keys it with the work tree and refuses an
//! overlapping run in the same work tree; `Own` in `repo/repository.rs`
//! keeps everything outside it out).
//!
//! ralph's claim on the project lives here too:
//!
//! ```text
//! project.rs         this map: Project, the one plan loader
//! project/
//!   lock.rs          Lock, LockInfo: the running supervisor and its agent's sessions
//!   ownership.rs     the prompt file ralph may overwrite, .git/info/exclude, keep_runtime
//! ```

mod lock;
pub(crate) mod ownership;

pub(crate) use lock::running_supervisor;
pub use lock::{Lock, read_lock};

use std::path::{Path, PathBuf};

use crate::config::{self, Config};
use crate::error::{Error, Result};
use crate::formats::Layout;
use crate::plan::Plan;

/// One ralph project: its root and the layout of its `.ralph/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Project {
    layout: Layout,
}

impl Project {
    /// The project `start` belongs to: the nearest directory at or above it
    /// with a `ralph.toml` or a `.ralph/`; `start` itself if there is none.
    pub(crate) fn find(start: &Path) -> Project {
        Project::discover(start).unwrap_or_else(|| Project::at(start))
    }

    /// The project `start` is in, if any: the nearest directory at or above
    /// it with a `ralph.toml` or a `.ralph/`.
    pub(crate) fn discover(start: &Path) -> Option<Project> {
        start.ancestors().find(|d| is_project(d)).map(Project::at)
    }

    /// The project rooted exactly at `root` (`ralph init`, the demo).
    pub(crate) fn at(root: &Path) -> Project {
        Project {
            layout: Layout::new(root),
        }
    }

    /// The starting directory of a command: `-C DIR`, or the current one.
    pub(crate) fn start_dir(dir: Option<&Path>) -> Result<PathBuf> {
        let start = match dir {
            Some(d) => d.to_path_buf(),
            None => std::env::current_dir()
                .map_err(|e| Error::wrap("cannot read the current directory", e))?,
        };
        if !start.is_dir() {
            return Err(Error::usage(format!(
                "{} is not a directory",
                start.display()
            )));
        }
        Ok(start)
    }

    pub(crate) fn root(&self) -> &Path {
        &self.layout.root
    }

    /// Every path under `.ralph/`.
    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    /// `ralph.toml` (defaults when there is none).
    pub(crate) fn config(&self) -> Result<Config> {
        Config::load(self.root())
    }

    /// Where the plan `config` names is.
    pub(crate) fn plan_path(&self, config: &Config) -> PathBuf {
        self.root().join(&config.plan)
    }

    /// The plan `config` names: the one loader, with the one error policy
    /// (see the module's documentation).
    pub(crate) fn plan(&self, config: &Config) -> Result<Plan> {
        self.plan_at(&config.plan)
    }

    /// The plan's text, under the same policy (for who edits or quotes it).
    pub(crate) fn plan_text(&self, config: &Config) -> Result<String> {
        self.plan_text_at(&config.plan)
    }

    /// The plan at `path`, relative to the root (an absolute one as it
    /// is): the one a run recorded (`run_started`'s `plan`, the parallel
    /// run's ledger), which `ralph run PLAN` may have made another than
    /// `config`'s. The same loader and policy.
    pub(crate) fn plan_at(&self, path: &Path) -> Result<Plan> {
        Plan::load(&self.root().join(path))
    }

    /// Its text, under the same policy.
    pub(crate) fn plan_text_at(&self, path: &Path) -> Result<String> {
        Plan::read_text(&self.root().join(path))
    }
}

/// A directory is a project's root when it holds a `ralph.toml` or ralph's
/// runtime directory.
fn is_project(dir: &Path) -> bool {
    dir.join(config::FILE_NAME).is_file() || Layout::new(dir).dir.is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_upward_from_a_subdirectory() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("src/deep");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(d.path().join("ralph.toml"), "").unwrap();
        assert_eq!(Project::find(&sub).root(), d.path());
        assert_eq!(Project::find(d.path()).root(), d.path());
    }

    #[test]
    fn a_ralph_dir_marks_a_project_without_a_config() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(".ralph")).unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        assert_eq!(Project::find(&d.path().join("a/b")).root(), d.path());
    }

    #[test]
    fn the_nearest_project_wins_a_subproject_is_its_own() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("services/api");
        std::fs::create_dir_all(sub.join("src")).unwrap();
        std::fs::write(d.path().join("ralph.toml"), "").unwrap();
        std::fs::write(sub.join("ralph.toml"), "").unwrap();
        assert_eq!(Project::find(&sub.join("src")).root(), sub);
    }

    #[test]
    fn outside_any_project_the_start_is_the_root() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(Project::discover(d.path()), None);
        assert_eq!(Project::find(d.path()).root(), d.path());
        assert_eq!(
            Project::find(d.path()).layout().dir,
            d.path().join(".ralph")
        );
    }

    #[test]
    fn the_plan_is_the_one_config_names() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("ralph.toml"), "plan = \"PLAN.md\"\n").unwrap();
        std::fs::write(d.path().join("PLAN.md"), "- [ ] one\n").unwrap();
        let p = Project::find(d.path());
        let config = p.config().unwrap();
        assert_eq!(p.plan(&config).unwrap().open_count(), 1);
        let missing = Config::default();
        let e = p.plan(&missing).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }
}
