//! What the box shows read-only although it lies in a writable place:
//! what git would execute outside the box (the git dirs' `hooks`,
//! `config`, `config.worktree` and `info`, `core.hooksPath`, the scripts
//! the git config names: filters, `core.fsmonitor`, `core.sshCommand`,
//! aliases, …) and ralph's own `.ralph/` (its state, log and the trust
//! record), except `.ralph/notes/`, where the agent writes its handoff
//! notes. The agent needs objects, refs and the index, not these.
//!
//! `prepare` makes what must exist to be mounted over (a missing `hooks/`
//! could otherwise be created inside): a run's start and `ralph doctor`
//! call it, not a dry run. `protected` looks (the repository, its config);
//! `binds` is pure. The binds come after the project's: a later mount
//! covers an earlier one.

use std::path::{Path, PathBuf};

/// The places inside the writable ones that stay read-only, and those
/// inside them that stay writable.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Protected {
    pub(crate) read_only: Vec<PathBuf>,
    pub(crate) writable: Vec<PathBuf>,
}

/// Make the directories the box mounts read-only over (the git dirs'
/// `hooks` and `info`, a `core.hooksPath` in the work tree) and, in an
/// existing `.ralph/`, the agent's writable `notes/`.
pub(crate) fn prepare(root: &Path) {
    let layout = crate::formats::Layout::new(root);
    let mut dirs: Vec<PathBuf> = Vec::new();
    if layout.dir.is_dir() {
        dirs.push(layout.notes());
    }
    if let Ok(repo) = git2::Repository::discover(root) {
        for dir in [repo.path(), repo.commondir()] {
            dirs.extend([dir.join("hooks"), dir.join("info")]);
        }
        dirs.extend(crate::config::trust::git_hooks_dir(root).filter(|h| h.starts_with(root)));
    }
    for d in dirs {
        if let Err(e) = std::fs::create_dir_all(&d) {
            tracing::warn!("cannot create {}: {e}", d.display());
        }
    }
}

/// What to protect in the project at `root` whose agent works on `plan`.
/// A plan inside `.ralph/` (a parallel run's worker checks its items off
/// in `.ralph/worker-plan.md`, and tools rewrite a file by renaming a new
/// one over it) leaves `.ralph/` writable.
pub(crate) fn protected(root: &Path, plan: &Path) -> Protected {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut p = Protected::default();
    let mut ro = |path: PathBuf| {
        if !p.read_only.contains(&path) {
            p.read_only.push(path);
        }
    };
    if let Ok(repo) = git2::Repository::discover(&root) {
        for dir in [repo.path(), repo.commondir()] {
            for name in ["hooks", "info", "config", "config.worktree"] {
                let p = dir.join(name);
                if p.exists() {
                    ro(p);
                }
            }
        }
        if let Some(hooks) = crate::config::trust::git_hooks_dir(&root).filter(|h| h.exists()) {
            ro(hooks);
        }
        if let Ok(config) = repo.config().and_then(|mut c| c.snapshot())
            && let Ok(mut entries) = config.entries(None)
        {
            while let Some(Ok(entry)) = entries.next() {
                for script in entry
                    .value()
                    .map(|v| crate::config::trust::named_scripts(v, &root))
                    .unwrap_or_default()
                {
                    ro(root.join(script));
                }
            }
        }
    }
    let layout = crate::formats::Layout::new(&root);
    let (ralph, notes) = (layout.dir.clone(), layout.notes());
    if ralph.is_dir() && !root.join(plan).starts_with(&ralph) {
        ro(ralph);
        if notes.is_dir() {
            p.writable.push(notes);
        }
    }
    p
}

/// bwrap's arguments for `p`: read-only binds, then the writable ones inside them.
pub(crate) fn binds(p: &Protected) -> Vec<String> {
    let s = |p: &Path| p.display().to_string();
    let ro = p
        .read_only
        .iter()
        .flat_map(|d| ["--ro-bind-try".to_string(), s(d), s(d)]);
    let rw = p
        .writable
        .iter()
        .flat_map(|d| ["--bind-try".to_string(), s(d), s(d)]);
    ro.chain(rw).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_hooks_config_and_ralphs_state_are_read_only_its_notes_writable() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let repo = git2::Repository::init(&root).unwrap();
        std::fs::remove_dir_all(root.join(".git/hooks")).ok();
        std::fs::write(root.join("clean.sh"), "").unwrap();
        std::fs::write(root.join("monitor"), "").unwrap();
        let mut c = repo.config().unwrap();
        c.set_str("filter.x.clean", "./clean.sh %f").unwrap();
        c.set_str("core.fsmonitor", "monitor").unwrap();
        assert!(!root.join(".git/hooks").exists());
        std::fs::create_dir(root.join(".ralph")).unwrap();
        prepare(&root);
        let p = protected(&root, Path::new("fix_plan.md"));
        let git = root.join(".git");
        for want in [
            git.join("hooks"),
            git.join("info"),
            git.join("config"),
            root.join("clean.sh"),
            root.join("monitor"),
            root.join(".ralph"),
        ] {
            assert!(p.read_only.contains(&want), "{want:?} in {p:?}");
        }
        // A missing hooks dir is made, or the agent could make it.
        assert!(git.join("hooks").is_dir());
        assert_eq!(p.writable, [root.join(".ralph/notes")]);
        let w = binds(&p).join(" ");
        let ralph = w.find("--ro-bind-try ").unwrap();
        let notes = w.find("--bind-try ").unwrap();
        assert!(ralph < notes, "the notes come after .ralph: {w}");
    }

    #[test]
    fn a_hooks_path_in_the_work_tree_is_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let repo = git2::Repository::init(&root).unwrap();
        repo.config()
            .unwrap()
            .set_str("core.hooksPath", ".githooks")
            .unwrap();
        std::fs::create_dir(root.join(".ralph")).unwrap();
        prepare(&root);
        let p = protected(&root, Path::new("fix_plan.md"));
        assert!(p.read_only.contains(&root.join(".githooks")), "{p:?}");
        // A worker's plan is in .ralph/: it stays writable.
        let worker = protected(&root, Path::new(".ralph/worker-plan.md"));
        assert!(
            !worker.read_only.contains(&root.join(".ralph")),
            "{worker:?}"
        );
        assert!(root.join(".githooks").is_dir());
    }
}
