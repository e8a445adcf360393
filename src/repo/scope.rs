//! A run's scope in its repository: the work tree it runs in (git keeps one
//! index and one HEAD per work tree, shared by every project in it) and the
//! project directory it stages, snapshots and measures under.
//!
//! - [`Repo::scope_key`] names the scope: the same for every run of one
//!   project in one work tree, different for another work tree or another
//!   project. Snapshot refs are filed under it
//!   (`refs/ralph/snapshots/<scope>/<run>/<iteration>`), so a work tree
//!   lists, prunes and restores only its own.
//! - [`Repo::claim_scope`] registers a live run in its work tree's git dir
//!   (`<git dir>/ralph-runs/<scope>`, `flock`ed for the run's life) and
//!   refuses a second run whose project overlaps it (the same directory, or
//!   one inside the other): both would stage into the one index and commit
//!   each other's work. Disjoint projects (`svc-a/`, `svc-b/`) run side by
//!   side.
//! - [`Repo::commit_lock`] serialises the WIP commits of those side-by-side
//!   runs: each reads the index, stages its own directory and writes the
//!   index back, which must not interleave.
//!
//! Pitfall: the key hashes the work tree's git dir name, not its path, so
//! moving a work tree keeps its snapshots. A linked work tree's name
//! repeats (`git worktree remove wt && git worktree add wt`), so its key
//! also hashes an identity ralph writes once into that work tree's own git
//! dir (`<git dir>/ralph-identity`): git deletes it with the work tree, and
//! the new one under the old name gets a new identity, never the removed
//! one's snapshots. A git dir ralph cannot write keeps the name alone.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Repo;
use crate::{Error, Result};

/// The directory, in a work tree's own git dir, of its live runs' claims.
const RUNS_DIR: &str = "ralph-runs";

/// The file, in a linked work tree's own git dir, of its identity.
const IDENTITY: &str = "ralph-identity";

/// What a live run's claim file says, for the refusal of an overlapping one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct ClaimInfo {
    pid: u32,
    /// The project directory relative to the work tree (`svc-a/`; empty for
    /// the whole work tree).
    project: String,
    /// The run's project root as a person reads it (lossy: a path that is
    /// not UTF-8 cannot be JSON, and this is only ever shown).
    root: String,
}

/// A live run's claim on its scope; released when dropped (or by the kernel
/// when the process dies).
#[derive(Debug)]
pub(crate) struct ScopeClaim {
    _file: Flock<File>,
}

/// The work tree's commit lock, held while a WIP commit reads, stages and
/// writes the index.
pub(crate) struct CommitLock {
    _file: Option<Flock<File>>,
}

impl Repo {
    /// This project's scope in this work tree, as a short stable key.
    pub(crate) fn scope_key(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(b"ralph scope\0");
        hasher.update(self.work_tree_name().as_bytes());
        hasher.update(b"\0");
        hasher.update(&self.prefix);
        if let Some(identity) = self.work_tree_identity() {
            hasher.update(b"\0");
            hasher.update(identity.as_bytes());
        }
        hasher.finalize()[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The project directory relative to the work tree, `/`-terminated;
    /// empty when the project is the whole work tree.
    pub(crate) fn project_dir(&self) -> String {
        String::from_utf8_lossy(&self.prefix).into_owned()
    }

    /// The project as a person names it: `svc-a/` or `.`.
    pub(crate) fn project_label(&self) -> String {
        match self.project_dir() {
            p if p.is_empty() => ".".into(),
            p => p,
        }
    }

    /// Empty for the main work tree, `worktrees/<name>` for a linked one.
    fn work_tree_name(&self) -> String {
        let common = self.git.commondir();
        let own = self.git.path();
        let canonical = |p: &std::path::Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        canonical(own)
            .strip_prefix(canonical(common))
            .map(|rel| rel.to_string_lossy().trim_end_matches('/').to_string())
            .unwrap_or_else(|_| own.to_string_lossy().into_owned())
    }

    /// A linked work tree's identity, written on first use (None for the
    /// main work tree, which cannot be removed, and where it cannot be
    /// written). Written aside and linked into place, so two runs starting
    /// at once agree on the first one's.
    fn work_tree_identity(&self) -> Option<String> {
        if self.work_tree_name().is_empty() {
            return None;
        }
        let path = self.git.path().join(IDENTITY);
        let read = || {
            std::fs::read_to_string(&path)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        };
        if let Some(identity) = read() {
            return Some(identity);
        }
        let mut hasher = Sha256::new();
        hasher.update(self.git.path().as_os_str().as_encoded_bytes());
        hasher.update(std::process::id().to_le_bytes());
        hasher.update(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
                .to_le_bytes(),
        );
        let fresh: String = hasher.finalize()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let aside = path.with_extension(format!("{}.tmp", std::process::id()));
        let written = std::fs::write(&aside, format!("{fresh}\n"))
            .and_then(|()| std::fs::hard_link(&aside, &path));
        let _ = std::fs::remove_file(&aside);
        match written {
            Ok(()) => Some(fresh),
            Err(_) => read(),
        }
    }

    fn runs_dir(&self) -> PathBuf {
        self.git.path().join(RUNS_DIR)
    }

    /// Register a live run of this project in its work tree; refused when a
    /// live run of an overlapping project commits in the same work tree.
    /// `Ok(None)` when the git dir cannot hold the claim (read-only): the
    /// run goes on unregistered, as its commits will skip with a reason.
    pub(crate) fn claim_scope(&self) -> Result<Option<ScopeClaim>> {
        let dir = self.runs_dir();
        let unwritable = |e: Error| {
            tracing::warn!("cannot register the run in {}: {e}", dir.display());
        };
        if let Err(e) = std::fs::create_dir_all(&dir) {
            unwritable(Error::io("cannot create", &dir, e));
            return Ok(None);
        }
        // Checking and registering under one lock: two runs starting at once
        // must not both miss each other.
        let _guard = match lock_file(&dir.join(".register"), FlockArg::LockExclusive) {
            Ok(g) => g,
            Err(e) => {
                unwritable(e);
                return Ok(None);
            }
        };
        let mine = dir.join(self.scope_key());
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if path == mine || name.to_string_lossy().starts_with('.') {
                continue;
            }
            let Ok(mut file) = File::open(&path) else {
                continue;
            };
            // A claim whose lock can be taken is a dead run's.
            let probe = file
                .try_clone()
                .map_err(|e| Error::io("cannot read", &path, e))?;
            let live = Flock::lock(probe, FlockArg::LockSharedNonblock).is_err();
            if !live {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let other: ClaimInfo = serde_json::from_str(&text).unwrap_or_default();
            if overlaps(&other.project, &self.project_dir()) {
                return Err(self.refusal(&other));
            }
        }
        let file = lock_file(&mine, FlockArg::LockExclusiveNonblock).map_err(|_| {
            self.refusal(&ClaimInfo {
                project: self.project_dir(),
                root: self.root.display().to_string(),
                ..ClaimInfo::default()
            })
        })?;
        let info = ClaimInfo {
            pid: std::process::id(),
            project: self.project_dir(),
            root: self.root.display().to_string(),
        };
        let json = serde_json::to_vec(&info).expect("a claim serialises");
        let write = |mut f: &File| {
            f.set_len(0)?;
            f.write_all(&json)
        };
        write(&file).map_err(|e| Error::io("cannot write", &mine, e))?;
        Ok(Some(ScopeClaim { _file: file }))
    }

    fn refusal(&self, other: &ClaimInfo) -> Error {
        let theirs = match other.project.as_str() {
            "" => "the whole work tree".to_string(),
            p => format!("project {p}"),
        };
        let pid = match other.pid {
            0 => String::new(),
            pid => format!(", pid {pid}"),
        };
        Error::usage(format!(
            "another ralph run commits in this work tree ({theirs} at {}{pid}), and its project overlaps this one ({}): git keeps one index per work tree, so the two would commit each other's work",
            other.root,
            self.project_label(),
        ))
        .with_hint(format!(
            "run this one in a work tree of its own: `git worktree add ../{} && cd ../{}` (projects in separate directories, such as svc-a/ and svc-b/, can run side by side in one work tree)",
            worktree_suggestion(&self.root),
            worktree_suggestion(&self.root),
        ))
    }

    /// Hold the work tree's commit lock (blocking: a WIP commit is short).
    /// Without a lock file (a read-only git dir) the commit goes on alone.
    pub(crate) fn commit_lock(&self) -> CommitLock {
        let dir = self.runs_dir();
        let _ = std::fs::create_dir_all(&dir);
        CommitLock {
            _file: lock_file(&dir.join(".commit"), FlockArg::LockExclusive).ok(),
        }
    }
}

/// Two project directories (work-tree relative, `/`-terminated, empty for
/// the whole tree) overlap when one contains the other.
fn overlaps(a: &str, b: &str) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn worktree_suggestion(root: &std::path::Path) -> String {
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "project".into());
    format!("{name}-2")
}

fn lock_file(path: &std::path::Path, how: FlockArg) -> Result<Flock<File>> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io("cannot open", path, e))?;
    Flock::lock(file, how).map_err(|(_, errno)| {
        Error::io(
            "cannot lock",
            path,
            std::io::Error::from_raw_os_error(errno as i32),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::tests::*;

    #[test]
    fn projects_overlap_when_one_holds_the_other() {
        assert!(overlaps("", "svc-a/"));
        assert!(overlaps("svc-a/", "svc-a/"));
        assert!(overlaps("svc-a/", "svc-a/lib/"));
        assert!(!overlaps("svc-a/", "svc-b/"));
        assert!(!overlaps("svc-a/", "svc-ab/"));
    }

    #[test]
    fn scope_keys_differ_by_project_and_work_tree() {
        let (dir, git) = init_repo();
        write(dir.path(), "svc-a/x", "a");
        write(dir.path(), "svc-b/x", "b");
        let a = open(&dir.path().join("svc-a"));
        let b = open(&dir.path().join("svc-b"));
        assert_ne!(a.scope_key(), b.scope_key());
        assert_eq!(a.scope_key(), open(&dir.path().join("svc-a")).scope_key());
        assert_eq!(a.project_dir(), "svc-a/");
        let other = tempfile::tempdir().unwrap();
        let linked = other.path().join("wt");
        git.worktree("wt", &linked, None).unwrap();
        let top = open(dir.path());
        let in_linked = open(&linked);
        assert_eq!(in_linked.work_tree_name(), "worktrees/wt");
        assert_eq!(top.work_tree_name(), "");
        assert_ne!(top.scope_key(), in_linked.scope_key());
    }

    #[test]
    fn a_work_tree_made_under_a_removed_ones_name_has_a_new_scope() {
        use crate::repo::{OwnPaths, SnapshotOutcome};
        let (_dir, git) = init_repo();
        let other = tempfile::tempdir().unwrap();
        let linked = other.path().join("wt");
        git.worktree("wt", &linked, None).unwrap();
        let first = open(&linked);
        let key = first.scope_key();
        assert_eq!(key, open(&linked).scope_key(), "stable while it lives");
        write(&linked, "work.txt", "the removed work tree's work\n");
        let own = OwnPaths::new(std::path::Path::new("PROMPT.md"));
        let guard = crate::repo::Guard {
            max_file_size: 0,
            max_new_files: 0,
            commit_binaries: true,
        };
        let outcome = first.record_snapshot("r1", 1, &own, &guard).unwrap();
        assert!(matches!(outcome, SnapshotOutcome::Written { .. }));
        let taken = first.snapshots().unwrap();
        assert_eq!(taken.len(), 1);
        drop(first);

        // `git worktree remove wt && git branch -D wt && git worktree add wt`.
        std::fs::remove_dir_all(&linked).unwrap();
        let mut prune = git2::WorktreePruneOptions::new();
        prune.valid(true).working_tree(true);
        git.find_worktree("wt")
            .unwrap()
            .prune(Some(&mut prune))
            .unwrap();
        git.find_branch("wt", git2::BranchType::Local)
            .unwrap()
            .delete()
            .unwrap();
        git.worktree("wt", &linked, None).unwrap();
        let second = open(&linked);
        assert_eq!(second.work_tree_name(), "worktrees/wt");
        assert_ne!(second.scope_key(), key);
        assert!(second.snapshots().unwrap().is_empty());
        let refused = second.find_snapshot(&taken[0].id).unwrap_err();
        assert!(
            refused.to_string().contains("a removed work tree"),
            "{refused}"
        );
    }

    #[test]
    fn overlapping_claims_are_refused_disjoint_ones_allowed() {
        let (dir, _git) = init_repo();
        write(dir.path(), "svc-a/x", "a");
        write(dir.path(), "svc-b/x", "b");
        let a = open(&dir.path().join("svc-a"));
        let b = open(&dir.path().join("svc-b"));
        let top = open(dir.path());
        let claim_a = a.claim_scope().unwrap();
        let _claim_b = b.claim_scope().unwrap();
        let e = top.claim_scope().unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("one index per work tree"), "{e}");
        assert!(e.hint().unwrap().contains("git worktree add"));
        drop(claim_a);
        drop(_claim_b);
        // Both ended: the claims are dead and the whole tree may run.
        let _top = top.claim_scope().unwrap();
        assert!(a.claim_scope().is_err());
    }
}
