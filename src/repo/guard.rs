//! What a WIP commit leaves out: new files too big, binary, or too many
//! (a build directory nobody ignored), and the untracked files a WIP commit
//! would sweep in, for the start-of-run warning. Every rule that keeps
//! work out of a WIP commit yields a [`LeftOut`], which the commit skips
//! and the handoff lists.

use std::collections::BTreeMap;
use std::io::Read as _;

use git2::Status;
use serde::Serialize;

use crate::{Error, Result};

use super::{LeftOut, Own, OwnPaths, Repo, bytes_to_path, status_options};

/// How many bytes of a file decide whether it is binary (git's own rule:
/// a NUL byte in the first 8000).
const BINARY_PROBE: usize = 8000;

/// The limits of `[git]`: what a WIP commit takes of the new files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guard {
    /// New files larger than this many bytes stay out (0: no limit).
    pub(crate) max_file_size: u64,
    /// More new files than this: the biggest top-level directories of them
    /// stay out until the rest fit (0: no limit).
    pub(crate) max_new_files: usize,
    /// Whether new binary files are committed.
    pub(crate) commit_binaries: bool,
}

/// Untracked files that are not ignored, by top-level directory (or file).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct UntrackedGroup {
    /// Workdir-relative; a directory ends in `/`.
    pub(crate) path: String,
    pub(crate) files: usize,
}

impl Repo {
    /// The new (untracked, not ignored) files a WIP commit would take, less
    /// ralph's own.
    fn untracked(&self, own: &Own) -> Result<Vec<Vec<u8>>> {
        let statuses = self
            .git
            .statuses(Some(&mut status_options(false)))
            .map_err(|e| Error::wrap("cannot read git status", e))?;
        Ok(statuses
            .iter()
            .filter(|e| e.status() == Status::WT_NEW)
            .map(|e| e.path_bytes().to_vec())
            // A nested repository is never committed (see `stage_work_tree`).
            .filter(|p| !own.contains(p) && !p.ends_with(b"/"))
            .collect())
    }

    /// Untracked files a WIP commit would sweep in, grouped by top-level
    /// directory, biggest group first.
    pub(crate) fn untracked_groups(&self, own: &OwnPaths) -> Result<Vec<UntrackedGroup>> {
        let untracked = self.untracked(&self.own(own))?;
        let mut groups: Vec<UntrackedGroup> = group_by_top(&untracked)
            .into_iter()
            .map(|(path, files)| UntrackedGroup { path, files })
            .collect();
        groups.sort_by(|a, b| b.files.cmp(&a.files).then(a.path.cmp(&b.path)));
        Ok(groups)
    }

    /// What the next WIP commit leaves out under `guard`.
    pub(crate) fn left_out(&self, own: &OwnPaths, guard: &Guard) -> Result<Vec<LeftOut>> {
        let mut untracked = self.untracked(&self.own(own))?;
        let mut out = Vec::new();
        if guard.max_new_files > 0 && untracked.len() > guard.max_new_files {
            let mut groups: Vec<(String, usize)> = group_by_top(&untracked)
                .into_iter()
                .filter(|(path, _)| path.ends_with('/'))
                .collect();
            groups.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let mut left = untracked.len();
            for (dir, files) in groups {
                if left <= guard.max_new_files {
                    break;
                }
                left -= files;
                untracked.retain(|p| !p.starts_with(dir.as_bytes()));
                out.push(LeftOut {
                    why: format!(
                        "{files} new files, over git.max_new_files = {}",
                        guard.max_new_files
                    ),
                    path: dir,
                });
            }
        }
        let workdir = self.workdir();
        for path in untracked {
            let file = workdir.join(bytes_to_path(&path));
            let Ok(meta) = std::fs::symlink_metadata(&file) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            let why = if guard.max_file_size > 0 && meta.len() > guard.max_file_size {
                Some(format!(
                    "{}, over git.max_file_size = {}",
                    megabytes(meta.len()),
                    guard.max_file_size
                ))
            } else if !guard.commit_binaries && is_binary(&file) {
                Some("binary file (git.commit_binaries = false)".to_string())
            } else {
                None
            };
            if let Some(why) = why {
                out.push(LeftOut {
                    path: String::from_utf8_lossy(&path).into_owned(),
                    why,
                });
            }
        }
        Ok(out)
    }
}

/// Paths by their first component: `build/` for `build/a/b.o`, `x.txt` for
/// `x.txt`.
fn group_by_top(paths: &[Vec<u8>]) -> BTreeMap<String, usize> {
    let mut groups = BTreeMap::new();
    for path in paths {
        let top = match path.iter().position(|&b| b == b'/') {
            Some(i) => &path[..=i],
            None => &path[..],
        };
        *groups
            .entry(String::from_utf8_lossy(top).into_owned())
            .or_insert(0) += 1;
    }
    groups
}

fn is_binary(file: &std::path::Path) -> bool {
    let mut head = Vec::with_capacity(BINARY_PROBE);
    std::fs::File::open(file)
        .and_then(|f| f.take(BINARY_PROBE as u64).read_to_end(&mut head))
        .is_ok_and(|_| head.contains(&0))
}

fn megabytes(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::repository::tests::*;

    const GUARD: Guard = Guard {
        max_file_size: 1000,
        max_new_files: 5,
        commit_binaries: false,
    };

    #[test]
    fn big_binary_and_too_many_new_files_are_left_out_and_not_committed() {
        let (dir, git) = init_repo();
        let root = dir.path();
        // A tracked file under a left-out directory is still committed.
        write(root, "build/config.mk", "CC = cc\n");
        commit_all(&git, "build config");
        write(root, "a.txt", "changed\n");
        write(root, "src/new.rs", "fn main() {}\n");
        write(root, "huge.txt", &"x".repeat(2000));
        std::fs::write(root.join("image.bin"), b"PNG\0\x01\x02").unwrap();
        for i in 0..20 {
            write(root, &format!("build/out/{i}.o"), "object\n");
        }
        write(root, "build/config.mk", "CC = clang\n");
        let repo = open(root);
        let left = repo.left_out(&own(), &GUARD).unwrap();
        let paths: Vec<&str> = left.iter().map(|l| l.path.as_str()).collect();
        assert_eq!(paths, ["build/", "huge.txt", "image.bin"], "{left:?}");
        assert!(left[0].why.contains("20 new files"), "{left:?}");
        committed(repo.wip_commit_leaving_out("wip", &own(), &left));
        let tree = head_files(&git);
        let committed: Vec<&str> = tree.keys().map(String::as_str).collect();
        assert_eq!(
            committed,
            ["a.txt", "b.txt", "build/config.mk", "src/new.rs"]
        );
        assert_eq!(tree["build/config.mk"], b"CC = clang\n");
        assert!(root.join("build/out/3.o").exists() && root.join("huge.txt").exists());
    }

    #[test]
    fn no_limits_leave_nothing_out() {
        let (dir, _git) = init_repo();
        write(dir.path(), "huge.txt", &"x".repeat(2000));
        let none = Guard {
            max_file_size: 0,
            max_new_files: 0,
            commit_binaries: true,
        };
        assert!(open(dir.path()).left_out(&own(), &none).unwrap().is_empty());
    }

    #[test]
    fn untracked_files_are_grouped_by_top_level_directory() {
        let (dir, _git) = init_repo();
        for i in 0..3 {
            write(dir.path(), &format!("dist/{i}.js"), "x");
        }
        write(dir.path(), "notes.txt", "x");
        write(dir.path(), ".ralph/state.json", "{}");
        let groups = open(dir.path()).untracked_groups(&own()).unwrap();
        let shown: Vec<(&str, usize)> = groups.iter().map(|g| (g.path.as_str(), g.files)).collect();
        assert_eq!(shown, [("dist/", 3), ("notes.txt", 1)]);
    }
}
