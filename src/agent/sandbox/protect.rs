//! What the box shows read-only although it lies in a writable place:
//! what git would execute outside the box (the git dirs' `hooks`,
//! `config`, `config.worktree` and `info`, `core.hooksPath`, the scripts
//! the git config names: filters, `core.fsmonitor`, `core.sshCommand`,
//! aliases, …), the same of every submodule's git dir, and ralph's own `.ralph/` (its state, log and the trust
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
        for dir in git_dirs(&repo) {
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
/// in `.ralph/worker-plan.md`) is the one file there the agent may write,
/// in place (a tool that renames a new file over it is refused: it can
/// check the item off in the project's plan instead); the rest of
/// `.ralph/` (the state, the lock, the grant, the hook groups a next
/// supervisor ends) stays out of its reach, as in a single run.
pub(crate) fn protected(root: &Path, plan: &Path) -> Protected {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut p = Protected::default();
    let mut ro = |path: PathBuf| {
        if !p.read_only.contains(&path) {
            p.read_only.push(path);
        }
    };
    if let Ok(repo) = git2::Repository::discover(&root) {
        for dir in git_dirs(&repo) {
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
    if ralph.is_dir() {
        let plan = root.join(plan);
        ro(ralph.clone());
        if notes.is_dir() {
            p.writable.push(notes);
        }
        if plan.starts_with(&ralph) && plan.is_file() {
            p.writable.push(plan);
        }
    }
    p
}

/// The git dirs whose hooks and config git obeys: the repository's own and
/// common dir, and every submodule's (absorbed under `modules/`, nested
/// ones under theirs, or a `.git` directory inside the work tree): a
/// `git push --recurse-submodules` or `git submodule update` runs theirs.
fn git_dirs(repo: &git2::Repository) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut add = |d: &Path| {
        let d = d.canonicalize().unwrap_or_else(|_| d.to_path_buf());
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    };
    add(repo.path());
    add(repo.commondir());
    // Absorbed submodules, and those a submodule's own git dir holds.
    let mut pending = vec![repo.commondir().join("modules")];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if path.join("HEAD").is_file() && path.join("objects").is_dir() {
                add(&path);
                pending.push(path.join("modules"));
            } else {
                // `modules/lib/a` for a submodule named `lib/a`.
                pending.push(path);
            }
        }
    }
    // Submodules with their git dir in the work tree, at any depth.
    let mut repos = vec![];
    if let Ok(subs) = repo.submodules() {
        repos.extend(subs.iter().filter_map(|s| s.open().ok()));
    }
    while let Some(sub) = repos.pop() {
        add(sub.path());
        if let Ok(subs) = sub.submodules() {
            repos.extend(subs.iter().filter_map(|s| s.open().ok()));
        }
    }
    dirs
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

    /// Issue 34: a submodule's git dir (`.git/modules/NAME`, nested ones
    /// under it, an embedded `sub/.git`) has hooks and a config git obeys
    /// outside the box: read-only in it, like the repository's own.
    #[test]
    fn every_submodules_hooks_and_config_are_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        git2::Repository::init(&root).unwrap();
        let git = root.join(".git");
        let fake = |d: &Path| {
            std::fs::create_dir_all(d.join("objects")).unwrap();
            std::fs::write(d.join("HEAD"), "ref: refs/heads/main\n").unwrap();
            std::fs::write(d.join("config"), "[core]\n").unwrap();
        };
        let absorbed = git.join("modules/lib/a");
        let nested = absorbed.join("modules/inner");
        fake(&absorbed);
        fake(&nested);
        // A real submodule whose git dir is in the work tree.
        let sub_src = tempfile::tempdir().unwrap();
        let src = git2::Repository::init(sub_src.path()).unwrap();
        let sig = git2::Signature::now("t", "t@t").unwrap();
        let tree = src.treebuilder(None).unwrap().write().unwrap();
        let tree = src.find_tree(tree).unwrap();
        src.commit(Some("HEAD"), &sig, &sig, "c", &tree, &[])
            .unwrap();
        let repo = git2::Repository::open(&root).unwrap();
        let url = sub_src.path().display().to_string();
        let mut sm = repo.submodule(&url, Path::new("vendor"), false).unwrap();
        sm.clone(None).unwrap();
        sm.add_finalize().unwrap();
        let embedded = sm.open().unwrap().path().canonicalize().unwrap();
        std::fs::create_dir(root.join(".ralph")).unwrap();
        prepare(&root);
        let p = protected(&root, Path::new("fix_plan.md"));
        for d in [&absorbed, &nested, &embedded] {
            assert!(d.join("hooks").is_dir(), "made to be mounted over: {d:?}");
            for name in ["hooks", "config"] {
                let want = d.join(name);
                assert!(p.read_only.contains(&want), "{want:?} in {p:?}");
            }
        }
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
        // A worker's plan is in .ralph/: it alone stays writable there
        // (issue 34: the whole `.ralph/` did, its state and grant with it).
        std::fs::write(root.join(".ralph/worker-plan.md"), "- [ ] a\n").unwrap();
        let worker = protected(&root, Path::new(".ralph/worker-plan.md"));
        assert!(
            worker.read_only.contains(&root.join(".ralph")),
            "{worker:?}"
        );
        assert_eq!(
            worker.writable,
            [
                root.join(".ralph/notes"),
                root.join(".ralph/worker-plan.md")
            ]
        );
        assert!(root.join(".githooks").is_dir());
    }
}
