//! Restoring a snapshot of the safety net (`ralph recover ID`): its files
//! written back into the work tree, every path checked before the first
//! is written, or its tree committed onto a new branch.

use std::fs;
use std::path::{Path, PathBuf};

use git2::{DiffOptions, ErrorCode, Oid, Signature};
use serde::Serialize;

use super::safety_net::{BASE, trailer};
use super::{OwnPaths, Repo, bytes_to_path};
use crate::{Error, Result};

/// What a restore did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "restored", rename_all = "snake_case")]
pub(crate) enum Restored {
    /// Files written into the work tree (only those that differed).
    WorkTree {
        snapshot: String,
        files: Vec<String>,
    },
    Branch {
        snapshot: String,
        branch: String,
        commit: String,
    },
}

impl Repo {
    /// Write the files the snapshot changed (against the commit it was taken
    /// on) into the work tree, those that differ from it; nothing is
    /// deleted, HEAD and the index are not touched. Files the agent did not
    /// change keep whatever later commits made of them.
    /// Refuses when the tree has uncommitted changes, unless `force`.
    pub(crate) fn restore_snapshot(
        &self,
        spec: &str,
        force: bool,
        own: &OwnPaths,
    ) -> Result<Restored> {
        let snap = self.find_snapshot(spec)?;
        let changes = self.changes(own)?;
        if !force && !changes.is_empty() {
            return Err(Error::usage(format!(
                "the work tree has {} uncommitted change(s) (e.g. {}) that restoring could overwrite",
                changes.len(),
                changes[0].path
            ))
            .with_hint(format!(
                "commit or stash them first, restore onto a branch with `ralph recover {} --branch NAME`, or pass --force",
                snap.id
            )));
        }
        let files = self
            .write_tree_files(&snap.commit)
            .map_err(|e| Error::wrap(format!("cannot restore snapshot {}", snap.id), e))?;
        Ok(Restored::WorkTree {
            snapshot: snap.id,
            files,
        })
    }

    fn write_tree_files(&self, commit: &str) -> std::result::Result<Vec<String>, git2::Error> {
        let commit = self.git.find_commit(Oid::from_str(commit)?)?;
        let base = trailer(&commit, BASE)
            .map(|id| self.git.find_commit(id).and_then(|c| c.tree()))
            .transpose()?;
        let mut opts = DiffOptions::new();
        opts.include_typechange(true);
        let diff = super::diff_trees(
            &self.git,
            base.as_ref(),
            Some(&commit.tree()?),
            Some(&mut opts),
        )?;
        let workdir = self.workdir().to_path_buf();
        let mut entries = Vec::new();
        for delta in diff.deltas() {
            let file = delta.new_file();
            let (Some(rel), true) = (file.path_bytes(), file.exists()) else {
                continue;
            };
            // Only the project's own files: another project's work in the
            // same tree is its own run's to restore.
            if !rel.starts_with(&self.prefix) {
                continue;
            }
            if file.mode() == git2::FileMode::Commit {
                continue;
            }
            entries.push((rel.to_vec(), file.id(), i32::from(file.mode())));
        }
        // Every path is checked before the first is written: a clash found
        // halfway would leave the tree half restored.
        for (rel, _, _) in &entries {
            let path = workdir.join(bytes_to_path(rel));
            if let Some(why) = clash(&workdir, &path) {
                return Err(git2::Error::from_str(&format!(
                    "{}: {why}; nothing was written",
                    path.display()
                )));
            }
        }
        let mut written = Vec::new();
        for (rel, id, mode) in entries {
            let blob = self.git.find_blob(id)?;
            let path = workdir.join(bytes_to_path(&rel));
            match write_entry(&path, blob.content(), mode) {
                Ok(true) => written.push(super::display_path(&rel)),
                Ok(false) => {}
                Err(e) => {
                    let done = if written.is_empty() {
                        "nothing was written".to_string()
                    } else {
                        format!("written before it: {}", written.join(", "))
                    };
                    return Err(git2::Error::from_str(&format!(
                        "{}: {e}; {done}",
                        path.display()
                    )));
                }
            }
        }
        Ok(written)
    }

    /// A new branch `name` whose one commit holds the snapshot's tree on top
    /// of the commit the snapshot was taken on; nothing is checked out.
    pub(crate) fn snapshot_to_branch(&self, spec: &str, name: &str) -> Result<Restored> {
        // `refs/heads/NAME` names the branch NAME, as git takes it.
        let name = name.strip_prefix("refs/heads/").unwrap_or(name);
        if name == "HEAD" || !git2::Branch::name_is_valid(name).unwrap_or(false) {
            return Err(Error::usage(format!("`{name}` is not a valid branch name"))
                .with_hint("name a new branch, e.g. `--branch recovered`"));
        }
        let snap = self.find_snapshot(spec)?;
        let wrap = |e: git2::Error| Error::wrap(format!("cannot create branch `{name}`"), e);
        if self.git.find_branch(name, git2::BranchType::Local).is_ok() {
            return Err(Error::usage(format!("branch `{name}` already exists"))
                .with_hint("name a new branch"));
        }
        let commit = self
            .git
            .find_commit(Oid::from_str(&snap.commit).map_err(wrap)?)
            .map_err(wrap)?;
        let parent = trailer(&commit, BASE)
            .map(|id| self.git.find_commit(id))
            .transpose()
            .map_err(wrap)?;
        let who = Signature::now("ralph", "ralph@localhost").map_err(wrap)?;
        let message = format!(
            "ralph: recovered snapshot {} (run {}, iteration {}, {})\n",
            snap.id, snap.run, snap.iteration, snap.time
        );
        let parents: Vec<_> = parent.iter().collect();
        let id = self
            .git
            .commit(
                None,
                &who,
                &who,
                &message,
                &commit.tree().map_err(wrap)?,
                &parents,
            )
            .map_err(wrap)?;
        let created = self.git.find_commit(id).map_err(wrap)?;
        self.git.branch(name, &created, false).map_err(|e| {
            if e.code() == ErrorCode::InvalidSpec {
                Error::usage(format!("`{name}` is not a valid branch name"))
            } else {
                wrap(e)
            }
        })?;
        Ok(Restored::Branch {
            snapshot: snap.id,
            branch: name.to_string(),
            commit: id.to_string(),
        })
    }
}

/// Write one file of a snapshot; false when it already had that content
/// (and mode).
fn write_entry(path: &Path, content: &[u8], mode: i32) -> std::io::Result<bool> {
    use std::os::unix::fs::PermissionsExt as _;
    let link = mode == i32::from(git2::FileMode::Link);
    if link {
        let target = PathBuf::from(String::from_utf8_lossy(content).into_owned());
        if fs::read_link(path).is_ok_and(|t| t == target) {
            return Ok(false);
        }
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let _ = fs::remove_file(path);
        std::os::unix::fs::symlink(target, path)?;
        return Ok(true);
    }
    let executable = mode == i32::from(git2::FileMode::BlobExecutable);
    let same = fs::symlink_metadata(path)
        .is_ok_and(|m| m.is_file() && (m.permissions().mode() & 0o111 != 0) == executable)
        && fs::read(path).is_ok_and(|c| c == content);
    if same {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        fs::remove_file(path)?;
    }
    fs::write(path, content)?;
    let mut perms = fs::metadata(path)?.permissions();
    perms.set_mode(if executable { 0o755 } else { 0o644 });
    fs::set_permissions(path, perms)?;
    Ok(true)
}

/// Why a snapshot's file cannot be written at `path`, if it cannot: as
/// `git checkout`, never through a symlinked directory (it could point
/// outside the work tree), nor over a directory, nor below a file.
fn clash(workdir: &Path, path: &Path) -> Option<&'static str> {
    if beneath_symlink(workdir, path) {
        return Some("a directory above it is a symbolic link; not written through");
    }
    if fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        return Some("a directory is in the way");
    }
    let rel = path.strip_prefix(workdir).ok()?;
    rel.ancestors()
        .skip(1)
        .filter(|a| !a.as_os_str().is_empty())
        .any(|a| fs::symlink_metadata(workdir.join(a)).is_ok_and(|m| !m.is_dir()))
        .then_some("a file is in the way of a directory above it")
}

/// Whether a directory between `workdir` and `path` is a symlink.
fn beneath_symlink(workdir: &Path, path: &Path) -> bool {
    path.strip_prefix(workdir).is_ok_and(|rel| {
        rel.ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty())
            .any(|a| {
                fs::symlink_metadata(workdir.join(a)).is_ok_and(|m| m.file_type().is_symlink())
            })
    })
}
