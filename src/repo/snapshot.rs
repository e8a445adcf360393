//! Progress snapshots: a fingerprint of the tree (in git or outside it) taken
//! before and after an iteration, and whether the iteration made progress.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::trace;

use crate::{Error, Result};

use super::{
    BIG_FILE, Own, OwnPaths, RALPH_DIR, Repo, bytes_to_path, hidden_from_add, root_relative,
    status_options,
};

/// Directories the non-git fingerprint never descends into: build output and
/// dependencies change on their own and are not the agent's work.
const WALK_SKIP_DIRS: [&str; 3] = [".git", "target", "node_modules"];

/// What the tree looked like at a moment: used to decide whether an iteration
/// made progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// HEAD commit id; None when unborn or outside git.
    pub(crate) head: Option<String>,
    /// sha256 over the changed files (in git) or all files (outside git), with
    /// ralph's own paths left out.
    pub(crate) changes_fingerprint: String,
    /// Files that went into the fingerprint.
    #[serde(default)]
    pub files: usize,
    #[serde(default)]
    pub(crate) in_git: bool,
    /// ralph's own paths, repo-relative and `/`-separated, so that
    /// [`made_progress`] can ignore commits that touch only these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) own_paths: Vec<String>,
    /// The project directory (`svc-a/`; empty for the whole work tree):
    /// commits that change nothing under it are not the agent's progress.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) scope: String,
}

impl Repo {
    /// Snapshot of this repository for progress detection.
    pub(crate) fn snapshot(&self, own: &OwnPaths) -> Result<Snapshot> {
        let own = self.own(own);
        let statuses = self
            .statuses(&mut status_options(false))
            .map_err(|e| Error::wrap("cannot read git status", e))?;
        let workdir = self.workdir();
        let mut hasher = Sha256::new();
        let mut files = 0;
        let index = self.git.index().ok();
        for entry in statuses.iter() {
            let path = entry.path_bytes();
            if own.contains(path) || hidden_from_add(index.as_ref(), path, entry.status()) {
                continue;
            }
            files += 1;
            hasher.update(path);
            hasher.update(b"\0");
            hasher.update(entry.status().bits().to_le_bytes());
            // Status alone does not change when an already dirty file is edited
            // again; the file's size, mtime and (small files) content do.
            let file = workdir.join(bytes_to_path(path));
            hasher.update(file_stamp(&file, true).as_bytes());
            hasher.update(b"\n");
        }
        Ok(Snapshot {
            head: self.head_id(),
            changes_fingerprint: hex(&hasher.finalize()),
            files,
            in_git: true,
            own_paths: own.paths(),
            scope: String::from_utf8_lossy(&own.scope).into_owned(),
        })
    }
}

/// Snapshot of `root` for progress detection, in or outside git. A run
/// holds its repository ([`Repo::hold`]): libgit2 then re-reads and
/// re-verifies the index only when the file changed on disk, and keeps the
/// HEAD tree objects it already inflated, which is most of the cost of a
/// snapshot besides the `lstat` of every file.
pub fn snapshot(root: &Path, own: &OwnPaths) -> Result<Snapshot> {
    match Repo::open(root)? {
        Some(repo) => repo.snapshot(own),
        None => walk_snapshot(root, own),
    }
}

/// True when `after` shows progress over `before`: new commits that change
/// something besides ralph's own files, or a different set or content of
/// changes. Take `after` before ralph's own WIP commit so that commit is not
/// mistaken for the agent's.
pub(crate) fn made_progress(root: &Path, before: &Snapshot, after: &Snapshot) -> bool {
    if before.head != after.head {
        let Some(after_head) = after.head.as_deref() else {
            // HEAD vanished (branch deleted, repo re-created): a change we cannot
            // weigh, so do not count it against the agent.
            return true;
        };
        match commits_changed_work(root, before.head.as_deref(), after_head, after) {
            Some(true) | None => return true,
            Some(false) => {}
        }
    }
    before.changes_fingerprint != after.changes_fingerprint
}

/// Whether commits from `before` to `after` change anything outside `own_paths`:
/// Some(false) also when `after` is not new (e.g. a reset to an older commit);
/// None when it cannot be told.
fn commits_changed_work(
    root: &Path,
    before: Option<&str>,
    after: &str,
    snapshot: &Snapshot,
) -> Option<bool> {
    let git = Repository::discover(root).ok()?;
    let after = git.find_commit(Oid::from_str(after).ok()?).ok()?;
    let before = match before {
        Some(id) => Some(git.find_commit(Oid::from_str(id).ok()?).ok()?),
        None => None,
    };
    if let Some(before) = &before
        && git.graph_descendant_of(before.id(), after.id()).ok()?
    {
        return Some(false);
    }
    let before_tree = match &before {
        Some(commit) => Some(commit.tree().ok()?),
        None => None,
    };
    let after_tree = after.tree().ok()?;
    let diff = super::diff_trees(&git, before_tree.as_ref(), Some(&after_tree), None).ok()?;
    let own = Own {
        paths: snapshot
            .own_paths
            .iter()
            .map(|p| p.as_bytes().to_vec())
            .collect(),
        handoffs: Vec::new(),
        decisions: Vec::new(),
        streams: Vec::new(),
        left_out: Vec::new(),
        held: Vec::new(),
        frozen: Vec::new(),
        tracked_only: false,
        scope: snapshot.scope.as_bytes().to_vec(),
        max_new_size: 0,
    };
    let changed = diff.deltas().any(|delta| {
        [delta.old_file().path_bytes(), delta.new_file().path_bytes()]
            .into_iter()
            .flatten()
            .any(|path| !own.contains(path))
    });
    Some(changed)
}

/// For small regular files when asked, size and content hash: a file
/// rewritten with the same bytes (a new mtime) is not a change, or an agent
/// that rewrites one file identically every iteration would be "making
/// progress" all night and the breaker would never open. Otherwise size and
/// mtime. "-" when the file is gone.
fn file_stamp(path: &Path, content: bool) -> String {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return "-".into();
    };
    if content
        && meta.is_file()
        && meta.len() <= BIG_FILE
        && let Ok(bytes) = fs::read(path)
    {
        return format!("{} {}", bytes.len(), hex(&Sha256::digest(&bytes)));
    }
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("{} {}", meta.len(), mtime)
}

/// Outside git: fingerprint every file by relative path, size and mtime.
fn walk_snapshot(root: &Path, own: &OwnPaths) -> Result<Snapshot> {
    let prompt = root_relative(root, &own.prompt_file);
    let mut entries: Vec<(Vec<u8>, String)> = Vec::new();
    let mut stack: Vec<(PathBuf, Vec<u8>)> = vec![(root.to_path_buf(), Vec::new())];
    while let Some((dir, rel)) = stack.pop() {
        let read = match fs::read_dir(&dir) {
            Ok(read) => read,
            Err(e) if rel.is_empty() => return Err(Error::io("cannot read directory", &dir, e)),
            Err(e) => {
                // An unreadable subdirectory is not worth failing an overnight run.
                trace!(dir = %dir.display(), error = %e, "skipped in snapshot");
                continue;
            }
        };
        for entry in read.flatten() {
            let name = entry.file_name();
            let name_bytes = name.as_encoded_bytes();
            let rel_path = if rel.is_empty() {
                name_bytes.to_vec()
            } else {
                [&rel[..], b"/", name_bytes].concat()
            };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                let skip = WALK_SKIP_DIRS.iter().any(|d| name_bytes == d.as_bytes())
                    || (rel.is_empty() && name_bytes == RALPH_DIR.as_bytes());
                if !skip {
                    stack.push((entry.path(), rel_path));
                }
                continue;
            }
            if prompt.as_deref() == Some(&rel_path[..]) {
                continue;
            }
            entries.push((rel_path, file_stamp(&entry.path(), false)));
        }
    }
    entries.sort();
    let mut hasher = Sha256::new();
    for (path, stamp) in &entries {
        hasher.update(path);
        hasher.update(b"\0");
        hasher.update(stamp.as_bytes());
        hasher.update(b"\n");
    }
    Ok(Snapshot {
        head: None,
        changes_fingerprint: hex(&hasher.finalize()),
        files: entries.len(),
        in_git: false,
        own_paths: Vec::new(),
        scope: String::new(),
    })
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::CommitOutcome;
    use crate::repo::repository::tests::*;

    #[test]
    fn snapshot_progress_in_git() {
        let (dir, git) = init_repo();
        let root = dir.path();
        let s0 = snapshot(root, &own()).unwrap();
        assert!(s0.in_git);
        assert_eq!(s0.files, 0);
        // Nothing happened.
        assert!(!made_progress(root, &s0, &snapshot(root, &own()).unwrap()));
        // Only ralph's own files changed.
        write(root, ".ralph/state.json", "{}");
        write(root, ".ralph/handoffs/h.md", "h");
        write(root, "PROMPT.md", "p");
        let s1 = snapshot(root, &own()).unwrap();
        assert!(!made_progress(root, &s0, &s1));
        // A new file.
        write(root, "c.txt", "c");
        let s2 = snapshot(root, &own()).unwrap();
        assert!(made_progress(root, &s1, &s2));
        // The same dirty tree again is no progress...
        assert!(!made_progress(root, &s2, &snapshot(root, &own()).unwrap()));
        // ...but a further edit to the already dirty file is, even at equal size.
        write(root, "c.txt", "d");
        let s3 = snapshot(root, &own()).unwrap();
        assert!(made_progress(root, &s2, &s3));
        // The same bytes written again (a later mtime) are not: an agent
        // rewriting one file identically every iteration is stuck.
        write(root, "c.txt", "d");
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        fs::File::options()
            .write(true)
            .open(root.join("c.txt"))
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert!(!made_progress(root, &s3, &snapshot(root, &own()).unwrap()));
        // A commit by the agent.
        fs::remove_file(root.join("c.txt")).unwrap();
        write(root, "e.txt", "e");
        let s4 = snapshot(root, &own()).unwrap();
        commit_all(&git, "agent work");
        let s5 = snapshot(root, &own()).unwrap();
        assert_ne!(s4.head, s5.head);
        assert!(made_progress(root, &s4, &s5));
    }

    #[test]
    fn commit_of_only_ralph_files_is_no_progress() {
        let (dir, git) = init_repo();
        let root = dir.path();
        let before = snapshot(root, &own()).unwrap();
        write(root, ".ralph/handoffs/h.md", "h");
        write(root, "PROMPT.md", "p");
        commit_all(&git, "ralph's checkpoint of its own files");
        let after = snapshot(root, &own()).unwrap();
        assert_ne!(before.head, after.head);
        assert!(!made_progress(root, &before, &after));
    }

    #[test]
    fn reset_to_an_older_commit_is_no_progress() {
        let (dir, git) = init_repo();
        let root = dir.path();
        let first = git.head().unwrap().peel_to_commit().unwrap();
        write(root, "c.txt", "c");
        commit_all(&git, "two");
        let before = snapshot(root, &own()).unwrap();
        git.reset(first.as_object(), git2::ResetType::Hard, None)
            .unwrap();
        let after = snapshot(root, &own()).unwrap();
        assert!(!made_progress(root, &before, &after));
    }

    #[test]
    fn snapshot_progress_outside_git() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "a.txt", "a");
        let s0 = snapshot(root, &own()).unwrap();
        assert!(!s0.in_git);
        assert_eq!(s0.head, None);
        assert_eq!(s0.files, 1);
        assert!(!made_progress(root, &s0, &snapshot(root, &own()).unwrap()));
        // ralph's own files and build output do not count.
        write(root, ".ralph/state.json", "{}");
        write(root, "PROMPT.md", "p");
        write(root, "target/debug/x", "bin");
        write(root, "web/node_modules/m/index.js", "js");
        let s1 = snapshot(root, &own()).unwrap();
        assert!(!made_progress(root, &s0, &s1));
        write(root, "b.txt", "b");
        let s2 = snapshot(root, &own()).unwrap();
        assert!(made_progress(root, &s1, &s2));
        write(root, "a.txt", "longer");
        assert!(made_progress(root, &s2, &snapshot(root, &own()).unwrap()));
    }

    #[test]
    fn snapshot_round_trips_through_json() {
        let (dir, _git) = init_repo();
        write(dir.path(), "c.txt", "c");
        let snap = snapshot(dir.path(), &own()).unwrap();
        let json = serde_json::to_string(&snap).unwrap();
        assert_eq!(serde_json::from_str::<Snapshot>(&json).unwrap(), snap);
        // Older records without the optional fields still load.
        let old: Snapshot =
            serde_json::from_str(r#"{"head":null,"changes_fingerprint":"x"}"#).unwrap();
        assert!(!old.in_git);
        let outcome = serde_json::to_value(CommitOutcome::Committed {
            id: "abc".into(),
            files: 2,
        })
        .unwrap();
        assert_eq!(
            outcome,
            serde_json::json!({"outcome": "committed", "id": "abc", "files": 2})
        );
    }
}
