//! Conditions that make every WIP commit of a run skip, found before the
//! run (`ralph doctor`) and named with their fix: an index libgit2 cannot
//! read (split index, sparse index), a detached HEAD, an `index.lock`
//! left by a git process that ended, a git directory (or its object
//! database, or one of its fan-out directories) this user cannot write.

use serde::Serialize;

use super::Repo;

/// One condition that will skip WIP commits, and what fixes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Blocker {
    pub(crate) what: String,
    pub(crate) fix: String,
    /// Nothing during a run cures it (no git process ends, no agent
    /// switches a branch): ralph cannot write to the repository at all, so
    /// a run with WIP commits on is refused rather than warned.
    pub(crate) lasting: bool,
}

/// An `index.lock` this old is no running git's: commands that hold it
/// take milliseconds to seconds, and a commit waits only 2 s for it.
const STALE_INDEX_LOCK: std::time::Duration = std::time::Duration::from_secs(30);

fn stale_index_lock(age: std::time::Duration) -> bool {
    age >= STALE_INDEX_LOCK
}

const SPLIT_FIX: &str = "`git update-index --no-split-index && git config core.splitIndex false`";
const SPARSE_FIX: &str = "`git config index.sparse false && git sparse-checkout reapply` (keeps the sparse checkout, writes a full index)";

impl Repo {
    /// Every condition that will skip the WIP commits of a whole run.
    pub(crate) fn commit_blockers(&self) -> Vec<Blocker> {
        let mut out = Vec::new();
        let config = self.git.config().ok();
        let flag = |key: &str| {
            config
                .as_ref()
                .and_then(|c| c.get_bool(key).ok())
                .unwrap_or(false)
        };
        let unreadable = self.unreadable_index_extension();
        if unreadable.as_deref() == Some("link") || flag("core.splitIndex") {
            out.push(Blocker {
                what: "the index is split (core.splitIndex), which libgit2 cannot read".into(),
                fix: SPLIT_FIX.into(),
                lasting: true,
            });
        }
        if unreadable.as_deref() == Some("sdir") || flag("index.sparse") {
            out.push(Blocker {
                what: "the index is sparse (index.sparse), which libgit2 cannot read".into(),
                fix: SPARSE_FIX.into(),
                lasting: true,
            });
        }
        let lock = self.git.path().join("index.lock");
        let age = std::fs::metadata(&lock)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        if let Some(age) = age.filter(|a| stale_index_lock(*a)) {
            out.push(Blocker {
                what: format!(
                    "{} is left from a git process that ended ({} old): every commit gives up on it",
                    lock.display(),
                    crate::text::format_duration(age)
                ),
                fix: format!(
                    "if no git command is running in this repository, remove it: `rm {}`",
                    lock.display()
                ),
                lasting: false,
            });
        }
        if let Some(dir) = self.unwritable_git_dir() {
            out.push(Blocker {
                what: format!("{} is not writable", dir.display()),
                fix: "make it writable for this user (`chmod -R u+w .git`; owned by another user, as after a `sudo git …`: `sudo chown -R \"$(id -un)\" .git`; a read-only mount: remount it read-write), or run where it is"
                    .into(),
                lasting: true,
            });
        }
        if self.git.head_detached().unwrap_or(false) {
            out.push(Blocker {
                what: "HEAD is detached (not on a branch)".into(),
                fix: "`git switch -c ralph-wip` (or check out your branch)".into(),
                lasting: false,
            });
        }
        out
    }

    /// The first directory a commit writes in that this user cannot: the
    /// git directory, and the object database with each of its fan-out
    /// directories (a `sudo git commit` leaves some owned by root, and
    /// every commit that needs one fails), `refs/heads`. A few hundred
    /// `access` calls at most.
    fn unwritable_git_dir(&self) -> Option<std::path::PathBuf> {
        use nix::unistd::{AccessFlags, access};
        let objects = self.git.commondir().join("objects");
        let fan_out = std::fs::read_dir(&objects).into_iter().flatten().flatten();
        let dirs = [self.git.path().to_path_buf(), objects.clone()]
            .into_iter()
            .chain(fan_out.map(|e| e.path()).filter(|p| p.is_dir()))
            .chain([self.git.commondir().join("refs").join("heads")]);
        dirs.filter(|d| d.exists())
            .find(|d| access(d.as_path(), AccessFlags::W_OK | AccessFlags::X_OK).is_err())
    }

    /// The index cannot be read as it is on disk: why, with the fix.
    pub(super) fn index_format_blocker(&self) -> Option<String> {
        let (what, fix) = match self.unreadable_index_extension()?.as_str() {
            "link" => ("the index is split (core.splitIndex)", SPLIT_FIX),
            "sdir" => ("the index is sparse (index.sparse)", SPARSE_FIX),
            other => {
                return Some(format!(
                    "the index has an extension libgit2 cannot read ({other}); `git update-index --index-version 2` may help"
                ));
            }
        };
        Some(format!("{what}, which libgit2 cannot read; {fix}"))
    }

    /// The mandatory index extension libgit2 refuses, if the index on disk
    /// has one (`link`: split index, `sdir`: sparse index).
    fn unreadable_index_extension(&self) -> Option<String> {
        // Reading the index is reading every entry (100,000 on a large
        // repository, and its checksum): once per version of the file on
        // disk, not at every commit's check.
        type Stamp = (std::path::PathBuf, u64, (i64, i64), (i64, i64), u64);
        type Seen = Option<(Stamp, Option<String>)>;
        static SEEN: std::sync::Mutex<Seen> = std::sync::Mutex::new(None);
        let file = self.git.path().join("index");
        let stamp = {
            use std::os::unix::fs::MetadataExt as _;
            let m = std::fs::metadata(&file).ok()?;
            let time = (m.mtime(), m.mtime_nsec());
            (file, m.len(), time, (m.ctime(), m.ctime_nsec()), m.ino())
        };
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, found)) = seen.as_ref()
            && *at == stamp
        {
            return found.clone();
        }
        let found = self.read_index_extension();
        *seen = Some((stamp, found.clone()));
        found
    }

    fn read_index_extension(&self) -> Option<String> {
        // The index as it is on disk now: a handle held open re-reads it
        // only if the file changed since (the agent's git rewrote it).
        let e = self.git.index().and_then(|mut i| i.read(false)).err()?;
        let message = e.message();
        let rest = message.split("unsupported mandatory extension: '").nth(1)?;
        Some(rest.chars().take(4).collect())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::repo::repository::tests::{init_repo, open};

    #[test]
    fn an_index_lock_is_stale_once_no_git_could_still_hold_it() {
        // (age in seconds) → stale
        for (secs, stale) in [
            (0, false),
            (2, false),
            (29, false),
            (30, true),
            (3600, true),
        ] {
            assert_eq!(stale_index_lock(Duration::from_secs(secs)), stale, "{secs}");
        }
        let (dir, git) = init_repo();
        let lock = git.path().join("index.lock");
        // A lock a running git holds now is no blocker.
        std::fs::write(&lock, "").unwrap();
        assert!(open(dir.path()).commit_blockers().is_empty());
        // One left an hour ago is.
        let hour_ago = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&lock)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
        let blockers = open(dir.path()).commit_blockers();
        assert_eq!(blockers.len(), 1, "{blockers:?}");
        assert!(
            blockers[0]
                .what
                .contains("index.lock is left from a git process that ended (1h"),
            "{}",
            blockers[0].what
        );
        assert!(
            blockers[0].fix.starts_with("if no git command is running"),
            "{}",
            blockers[0].fix
        );
    }

    /// A run's held repository read the index before the agent's git split
    /// it: the next commit's check reads the file as it is now and names
    /// the split index instead of committing past it.
    #[test]
    fn an_index_split_after_the_held_repository_read_it_is_seen() {
        let (dir, _git) = init_repo();
        let root = dir.path();
        let _held = Repo::hold(root);
        let repo = open(root);
        assert!(repo.changes(&crate::repo::OwnPaths::default()).is_ok());
        assert_eq!(repo.commit_blocker(), None);
        let split = std::process::Command::new("git")
            .args([
                "-c",
                "core.splitIndex=true",
                "update-index",
                "--split-index",
            ])
            .current_dir(root)
            .status()
            .unwrap();
        assert!(split.success());
        let reason = repo.commit_blocker().expect("a blocker");
        assert!(reason.contains("the index is split"), "{reason}");
    }
}
