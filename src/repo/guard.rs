//! What a WIP commit leaves out: new files too big, binary, or too many
//! (a build directory nobody ignored), files (new or changed) that hold a
//! secret (`text::secrets::secret_in`, read from the one status the rest
//! uses, each up to `SECRET_SCAN` bytes), and the untracked files a WIP commit
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

/// How much of a changed file is searched for a secret: its first 16 MiB
/// (a new file is at most `git.max_file_size` anyway).
const SECRET_SCAN: u64 = 16 << 20;

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

/// Workdir-relative paths in git's form.
type Paths = Vec<Vec<u8>>;

/// Files whose scan is remembered at most; past it, all are forgotten.
const SCAN_CACHE: usize = 20_000;

/// A file as it was scanned: where, its size, inode and change time, HEAD (what is "new"
/// is new since HEAD's version), how many secrets were known.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ScanKey {
    file: std::path::PathBuf,
    len: u64,
    changed: (u64, i64, i64),
    head: Option<git2::Oid>,
    secrets: usize,
}

fn scan_cache() -> &'static std::sync::Mutex<std::collections::HashMap<ScanKey, Option<String>>> {
    static CACHE: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<ScanKey, Option<String>>>,
    > = std::sync::OnceLock::new();
    CACHE.get_or_init(Default::default)
}

impl Guard {
    /// No limits: a commit under it leaves out only what holds a secret.
    pub(crate) const NONE: Guard = Guard {
        max_file_size: 0,
        max_new_files: 0,
        commit_binaries: true,
    };
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
        Ok(self.changed(own)?.0)
    }

    /// From one status: the new files a WIP commit would take, and the
    /// tracked ones changed (in the index or the work tree), less ralph's own.
    fn changed(&self, own: &Own) -> Result<(Paths, Paths)> {
        let statuses = self
            .statuses(&mut status_options(false))
            .map_err(|e| Error::wrap("cannot read git status", e))?;
        let (mut new, mut tracked) = (Vec::new(), Vec::new());
        for e in statuses.iter() {
            let path = e.path_bytes();
            // A nested repository is never committed (see `stage_work_tree`).
            if own.contains(path) || path.ends_with(b"/") {
                continue;
            }
            if e.status() == Status::WT_NEW {
                new.push(path.to_vec());
            } else {
                tracked.push(path.to_vec());
            }
        }
        Ok((new, tracked))
    }

    /// Why `path` (workdir-relative) must stay out of a commit for what it
    /// holds, if it must: a known secret's value or a token shape that its
    /// committed version (HEAD's) does not hold already.
    fn holds_secret(&self, path: &[u8], tracked: bool) -> Option<String> {
        let file = self.workdir().join(bytes_to_path(path));
        let meta = std::fs::symlink_metadata(&file)
            .ok()
            .filter(|m| m.is_file())?;
        // The safety net and the iteration boundaries look every few
        // minutes: a file unchanged since it was last read is not read again.
        let key = ScanKey {
            file: file.clone(),
            len: meta.len(),
            // ctime too: a program can set mtime back, not ctime.
            changed: {
                use std::os::unix::fs::MetadataExt as _;
                (meta.ino(), meta.ctime(), meta.ctime_nsec())
            },
            head: self.head_oid(),
            secrets: crate::text::secrets::known_count(),
        };
        let cache = scan_cache();
        if let Some(found) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return found;
        }
        let found = self.scan_for_secret(&file, path, tracked);
        if let Ok(mut c) = cache.lock() {
            if c.len() >= SCAN_CACHE {
                c.clear();
            }
            c.insert(key, found.clone());
        }
        found
    }

    fn scan_for_secret(
        &self,
        file: &std::path::Path,
        path: &[u8],
        tracked: bool,
    ) -> Option<String> {
        let mut content = Vec::new();
        std::fs::File::open(file)
            .and_then(|f| f.take(SECRET_SCAN).read_to_end(&mut content))
            .ok()?;
        crate::text::secrets::secret_in(&content, None)?;
        // Found: is it new since HEAD's version of the file?
        let before = tracked
            .then(|| self.head_tree().ok().flatten())
            .flatten()
            .and_then(|tree| {
                let entry = tree.get_path(&bytes_to_path(path)).ok()?;
                let blob = self.git.find_blob(entry.id()).ok()?;
                Some(blob.content().to_vec())
            });
        crate::text::secrets::secret_in(&content, before.as_deref())
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

    /// What the next WIP commit leaves out under `guard`, and whatever it
    /// is asked to commit that holds a secret (new files and changes to
    /// tracked ones alike: `text::secrets::secret_in`).
    pub(crate) fn left_out(&self, own: &OwnPaths, guard: &Guard) -> Result<Vec<LeftOut>> {
        let (mut untracked, tracked) = self.changed(&self.own(own))?;
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
                    secret: false,
                });
            }
        }
        let workdir = self.workdir();
        let mut new_kept = Vec::new();
        for path in untracked {
            let file = workdir.join(bytes_to_path(&path));
            let Ok(meta) = std::fs::symlink_metadata(&file) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            let why = if guard.max_file_size > 0 && meta.len() > guard.max_file_size {
                Some((
                    format!(
                        "{}, over git.max_file_size = {}",
                        megabytes(meta.len()),
                        guard.max_file_size
                    ),
                    false,
                ))
            } else if !guard.commit_binaries && is_binary(&file) {
                Some((
                    "binary file (git.commit_binaries = false)".to_string(),
                    false,
                ))
            } else {
                self.holds_secret(&path, false).map(|why| (why, true))
            };
            match why {
                Some((why, secret)) => out.push(LeftOut {
                    path: String::from_utf8_lossy(&path).into_owned(),
                    why,
                    secret,
                }),
                None => new_kept.push(path),
            }
        }
        for path in tracked {
            if let Some(why) = self.holds_secret(&path, true) {
                out.push(LeftOut {
                    path: String::from_utf8_lossy(&path).into_owned(),
                    why,
                    secret: true,
                });
            }
        }
        // Reading takes time, and an agent may still be writing: a new file
        // that grew past the limit meanwhile is left out still.
        if guard.max_file_size > 0 {
            for path in new_kept {
                let file = workdir.join(bytes_to_path(&path));
                let size = std::fs::symlink_metadata(&file).map_or(0, |m| m.len());
                let path = String::from_utf8_lossy(&path).into_owned();
                if size > guard.max_file_size && !out.iter().any(|l| l.path == path) {
                    out.push(LeftOut {
                        why: format!(
                            "{}, over git.max_file_size = {}",
                            megabytes(size),
                            guard.max_file_size
                        ),
                        path,
                        secret: false,
                    });
                }
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
        committed(repo.wip_commit_leaving_out("wip", &own(), &left, &GUARD));
        let tree = head_files(&git);
        let committed: Vec<&str> = tree.keys().map(String::as_str).collect();
        assert_eq!(
            committed,
            ["a.txt", "b.txt", "build/config.mk", "src/new.rs"]
        );
        assert_eq!(tree["build/config.mk"], b"CC = clang\n");
        assert!(root.join("build/out/3.o").exists() && root.join("huge.txt").exists());
    }

    /// Issue 35: a new file judged small that grows past
    /// `git.max_file_size` before it is staged (the agent still writing
    /// it) stays out of the WIP commit too, not only out of snapshots.
    #[test]
    fn a_new_file_grown_past_the_limit_after_the_check_is_not_committed() {
        let (dir, git) = init_repo();
        let root = dir.path();
        write(root, "out.log", &"x".repeat(500));
        write(root, "src/new.rs", "fn main() {}\n");
        let repo = open(root);
        let left = repo.left_out(&own(), &GUARD).unwrap();
        assert!(left.is_empty(), "{left:?}");
        write(root, "out.log", &"x".repeat(5000));
        committed(repo.wip_commit_leaving_out("wip", &own(), &left, &GUARD));
        let tree = head_files(&git);
        assert!(tree.contains_key("src/new.rs"), "{:?}", tree.keys());
        assert!(!tree.contains_key("out.log"), "{:?}", tree.keys());
        assert!(root.join("out.log").exists());
    }

    /// Issue 34: no commit ralph makes (WIP, leftover, snapshot) holds a
    /// file with a secret — new, tracked or staged by the agent — and each
    /// is named with its reason; a secret already in HEAD's version of a
    /// file is no new leak.
    #[test]
    fn files_holding_a_secret_are_left_out_of_every_commit() {
        let value = "svc-tok-5f1e2d3c4b";
        crate::text::secrets::remember(&BTreeMap::from([(
            "GUARD_TEST_SERVICE_TOKEN".to_string(),
            value.to_string(),
        )]));
        let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n-----END OPENSSH PRIVATE KEY-----\n";
        let fixture = "fake = \"ghp_0123456789abcdefghijABCDEFGHIJ\"\n";
        let (dir, git) = init_repo();
        let root = dir.path();
        write(root, "fixture.txt", fixture);
        commit_all(&git, "fixture");
        write(root, "stolen_key.txt", key);
        write(root, "a.txt", &format!("alpha\ntoken = {value}\n"));
        write(root, "staged.txt", "aws AKIAIOSFODNN7EXAMPLE\n");
        let mut index = git.index().unwrap();
        index.add_path(std::path::Path::new("staged.txt")).unwrap();
        index.write().unwrap();
        write(root, "fixture.txt", &format!("{fixture}more = 1\n"));
        write(root, "work.rs", "fn work() {}\n");
        let repo = open(root);
        let left = repo.left_out(&own(), &Guard::NONE).unwrap();
        let named: Vec<(&str, &str)> = left
            .iter()
            .map(|l| (l.path.as_str(), l.why.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                ("stolen_key.txt", "holds a secret (private key)"),
                (
                    "a.txt",
                    "holds a secret (the value of GUARD_TEST_SERVICE_TOKEN)"
                ),
                ("staged.txt", "holds a secret (AWS key)"),
            ]
        );
        // The safety net's snapshot takes none of them either.
        let snapshot = repo.record_snapshot("r1", 1, &own(), &GUARD).unwrap();
        let crate::repo::SnapshotOutcome::Written { commit, .. } = snapshot else {
            panic!("{snapshot:?}");
        };
        // `wip_commit` (the coordinator's leftovers) finds them itself.
        committed(repo.wip_commit("wip", &own()));
        let tree = head_files(&git);
        let committed: Vec<&str> = tree.keys().map(String::as_str).collect();
        assert_eq!(committed, ["a.txt", "b.txt", "fixture.txt", "work.rs"]);
        assert_eq!(tree["a.txt"], b"alpha\n", "the secret change is held");
        let snap_tree = git
            .find_commit(commit.parse().unwrap())
            .unwrap()
            .tree()
            .unwrap();
        for (name, tree) in [
            ("HEAD", git.head().unwrap().peel_to_tree().unwrap()),
            ("snapshot", snap_tree),
        ] {
            tree.walk(git2::TreeWalkMode::PreOrder, |_, entry| {
                if let Ok(blob) = entry.to_object(&git).and_then(|o| o.peel_to_blob()) {
                    let text = String::from_utf8_lossy(blob.content());
                    assert!(
                        !text.contains(value)
                            && !text.contains("PRIVATE KEY")
                            && !text.contains("AKIA"),
                        "{name}: {text}"
                    );
                }
                git2::TreeWalkResult::Ok
            })
            .unwrap();
        }
        // Still in the work tree, for the user to look at.
        assert!(root.join("stolen_key.txt").exists() && root.join("staged.txt").exists());
        assert!(
            std::fs::read_to_string(root.join("a.txt"))
                .unwrap()
                .contains(value)
        );
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
