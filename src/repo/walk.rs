//! One pass over the work tree per event. Reading what changed costs an
//! `lstat` of every tracked file and a `readdir` of every directory: on a
//! repository of 100,000 files that is most of ralph's bookkeeping, and an
//! iteration asks for it many times (the progress snapshot, the checkpoint's
//! file list, diffstat and limits, the WIP commit's staging, the boundary
//! tree, the final commit).
//!
//! An event (the start of an iteration, its end, one safety-net snapshot,
//! one WIP commit) is a [`OnePass`] guard. Its first status walks the whole
//! work tree and remembers every path it named (changed against HEAD or the
//! index, untracked). Every later status or work-tree diff of the event looks
//! at those paths and ralph's own directory only: a path that was unchanged
//! at the walk can only have changed since if something wrote it, and within
//! an event only ralph writes (its handoff, its decision log, its commits,
//! which make paths clean, never dirty). Whatever else writes files in the
//! middle of an event (a check of `[verify]`, the agent continued for its
//! notes, a wait for a usage limit) calls [`touched`], and the next status
//! walks again.
//!
//! Outside an event every call walks the whole tree, as before.
//!
//! An event that may commit ([`one_pass_to_commit`]: the run's start, an
//! iteration's end, a checkpoint, a WIP commit; never while the agent
//! works) refreshes the index at its walk, as `git status` does: a file
//! only touched (new stat data, same content) is hashed once and recorded,
//! and libgit2 writes the index when it recorded one. A touched file is in
//! no status, so the WIP commit's staging can keep to the walk's paths only
//! after such a walk; after any other it walks again for that refresh
//! ([`Repo::walk_refreshed`]). A walk that cannot write the index (a
//! read-only `.git`, another process's `index.lock`, a full disk) is taken
//! again without the refresh; but for a lock, the process refreshes that
//! root no more.
//! The refreshing walk holds the work tree's commit lock
//! (`Repo::commit_lock`): it writes back the index it read, which must not
//! interleave with another run's WIP commit.
//!
//! Pitfalls: no status may be taken while this thread holds the commit
//! lock (`flock` on a second descriptor of the file would wait for
//! itself): WIP commits walk before they take it. An empty pathspec means "everything" to libgit2, so the list
//! always holds ralph's directory; a directory in the list ends in `/`
//! (libgit2 then takes everything under it). A process the agent left
//! running that writes a new file during an iteration's end is not seen by
//! that event (its commit takes the file at the next one).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use git2::{DiffOptions, StatusOptions, Statuses};
use tracing::debug;

use super::{RALPH_DIR, Repo};

/// Full passes over a work tree since the process started.
static PASSES: AtomicU64 = AtomicU64::new(0);

/// The events under way, by project root.
static EVENTS: Mutex<Vec<Event>> = Mutex::new(Vec::new());

/// Roots whose index a walk could not write: no later walk of this
/// process tries again (a failed try costs a whole walk).
static UNWRITABLE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

struct Event {
    root: PathBuf,
    /// Guards open for this root (events nest: a WIP commit inside an
    /// iteration's end).
    depth: usize,
    /// Its walk refreshes the index (an event that may commit).
    refresh: bool,
    /// What the event's walk saw; None before it (or after [`touched`]).
    walk: Option<Walk>,
}

#[derive(Clone)]
struct Walk {
    /// The paths it named.
    paths: Vec<Vec<u8>>,
    /// It refreshed the index's stat data.
    refreshed: bool,
}

/// Full passes over a work tree (a status or a work-tree diff without a
/// remembered walk) this process made: what the benchmark and the tests
/// count.
pub fn work_tree_passes() -> u64 {
    PASSES.load(Ordering::Relaxed)
}

/// While alive, the statuses of `root`'s repository share one walk.
#[must_use = "the event lasts as long as the guard"]
pub struct OnePass {
    root: PathBuf,
}

/// Begin an event for the project at `root` (or join the one under way)
/// that only reads: its walk leaves the index file alone (an agent may be
/// at work, running git itself).
pub fn one_pass(root: &Path) -> OnePass {
    begin(root, false)
}

/// Begin an event that may commit (or join the one under way, whose walk
/// then refreshes the index if it has not walked yet).
pub fn one_pass_to_commit(root: &Path) -> OnePass {
    begin(root, true)
}

fn begin(root: &Path, refresh: bool) -> OnePass {
    let mut events = events();
    match events.iter_mut().find(|e| e.root == root) {
        Some(event) => {
            event.depth += 1;
            event.refresh |= refresh;
        }
        None => events.push(Event {
            root: root.to_path_buf(),
            depth: 1,
            refresh,
            walk: None,
        }),
    }
    OnePass {
        root: root.to_path_buf(),
    }
}

impl Drop for OnePass {
    fn drop(&mut self) {
        let mut events = events();
        if let Some(i) = events.iter().position(|e| e.root == self.root) {
            events[i].depth -= 1;
            if events[i].depth == 0 {
                events.swap_remove(i);
            }
        }
    }
}

/// Something besides ralph may have written files under `root` during its
/// event: the next status walks the whole tree again.
pub(crate) fn touched(root: &Path) {
    if let Some(event) = events().iter_mut().find(|e| e.root == root) {
        event.walk = None;
    }
}

pub(super) fn count_pass() {
    PASSES.fetch_add(1, Ordering::Relaxed);
    #[cfg(test)]
    THREAD_PASSES.with(|n| n.set(n.get() + 1));
}

// Tests run in parallel threads: each counts its own passes.
#[cfg(test)]
thread_local! {
    static THREAD_PASSES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn events() -> std::sync::MutexGuard<'static, Vec<Event>> {
    EVENTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A walk that could not write the index for this reason will not at
/// the next event either: a read-only `.git`, a full disk (which may
/// clear, but a failed try costs a whole walk each time). Another process's
/// `index.lock` is a moment's (an editor's `git status`): tried again.
fn gives_up_refreshing(e: &git2::Error) -> bool {
    e.code() != git2::ErrorCode::Locked
}

fn unwritable() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    UNWRITABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// `None`: no event; `Some((refresh, None))`: an event that has not
/// walked yet.
fn walked(root: &Path) -> Option<(bool, Option<Walk>)> {
    events()
        .iter()
        .find(|e| e.root == root)
        .map(|e| (e.refresh, e.walk.clone()))
}

impl Repo {
    /// `git status` with `opts`: the event's remembered paths when it has
    /// walked, else a full pass (remembered when an event is under way).
    pub(super) fn statuses(
        &self,
        opts: &mut StatusOptions,
    ) -> std::result::Result<Statuses<'_>, git2::Error> {
        let event = walked(&self.root);
        let refresh = match &event {
            Some((_, Some(walk))) => {
                opts.disable_pathspec_match(true);
                for path in &walk.paths {
                    opts.pathspec(path.as_slice());
                }
                return self.git.statuses(Some(opts));
            }
            Some((refresh, None)) => *refresh && !unwritable().contains(&self.root),
            None => false,
        };
        count_pass();
        let (statuses, refreshed) = match refresh {
            true => match self.refreshing_statuses(opts) {
                Ok(statuses) => (statuses, true),
                Err(e) => {
                    debug!(error = %e.message(), "the walk could not refresh the index: walking without (and, unless it was a lock, not refreshing again)");
                    if gives_up_refreshing(&e) {
                        unwritable().push(self.root.clone());
                    }
                    count_pass();
                    (self.git.statuses(Some(opts.update_index(false)))?, false)
                }
            },
            false => (self.git.statuses(Some(opts))?, false),
        };
        opts.update_index(false);
        if event.is_some() {
            let mut paths = vec![[&self.prefix[..], RALPH_DIR.as_bytes(), b"/"].concat()];
            for entry in statuses.iter() {
                paths.push(entry.path_bytes().to_vec());
                for delta in [entry.head_to_index(), entry.index_to_workdir()]
                    .into_iter()
                    .flatten()
                {
                    paths.extend(delta.old_file().path_bytes().map(<[u8]>::to_vec));
                    paths.extend(delta.new_file().path_bytes().map(<[u8]>::to_vec));
                }
            }
            paths.sort_unstable();
            paths.dedup();
            if let Some(event) = events().iter_mut().find(|e| e.root == self.root) {
                event.walk = Some(Walk { paths, refreshed });
            }
        }
        Ok(statuses)
    }

    /// `git status` that refreshes the index's stat data and writes it.
    /// libgit2 reads the index as the walk begins and writes it as it ends
    /// without holding `index.lock` in between: the WIP commit of another
    /// project's run in this work tree landing meanwhile would be taken back
    /// out of the index (its files staged as deleted). So the walk holds the
    /// work tree's commit lock, as that commit does.
    fn refreshing_statuses(
        &self,
        opts: &mut StatusOptions,
    ) -> std::result::Result<Statuses<'_>, git2::Error> {
        let _serialised = self.commit_lock();
        let statuses = self.git.statuses(Some(opts.update_index(true)))?;
        self.smudge_racily_clean(&statuses);
        Ok(statuses)
    }

    /// After a walk that may have written the index: mark for a fresh look
    /// (size 0, as git does) every changed file whose index entry git would
    /// take for clean. libgit2 judges an entry racily clean to the
    /// nanosecond, git to the second: a file recorded, then changed in the
    /// same second at the same size (an agent editing a file ralph had just
    /// refreshed) is changed to libgit2, but once libgit2 wrote the index a
    /// second later without smudging it, `git status`, `git diff` and
    /// `git commit -a` saw nothing.
    fn smudge_racily_clean(&self, statuses: &Statuses<'_>) {
        let Ok(mut index) = self.git.index() else {
            return;
        };
        let mut smudged = false;
        for entry in statuses.iter() {
            if !entry.status().contains(git2::Status::WT_MODIFIED) {
                continue;
            }
            let path = super::repository::bytes_to_path(entry.path_bytes());
            let Some(mut indexed) = index.get_path(&path, 0) else {
                continue;
            };
            let Ok(meta) = std::fs::symlink_metadata(self.workdir().join(&path)) else {
                continue;
            };
            use std::os::unix::fs::MetadataExt as _;
            // git's own test (`ie_match_stat` without nanoseconds).
            let clean_to_git = indexed.file_size != 0
                && indexed.file_size == meta.size() as u32
                && i64::from(indexed.mtime.seconds()) == meta.mtime();
            if clean_to_git {
                indexed.file_size = 0;
                smudged |= index.add(&indexed).is_ok();
            }
        }
        if smudged && let Err(e) = index.write() {
            debug!(error = %e.message(), "could not mark racily clean entries in the index");
        }
    }

    /// The event under way walked and refreshed the index as it did: a
    /// WIP commit's staging needs no walk of its own.
    pub(super) fn walk_refreshed(&self) -> bool {
        matches!(walked(&self.root), Some((_, Some(walk))) if walk.refreshed)
    }

    /// Limit a work-tree diff to the event's remembered paths, if it has
    /// walked; otherwise the diff is a full pass (counted).
    pub(super) fn restrict_to_walk(&self, opts: &mut DiffOptions) {
        match walked(&self.root) {
            Some((_, Some(walk))) => {
                opts.disable_pathspec_match(true);
                for path in walk.paths {
                    opts.pathspec(path);
                }
            }
            _ => count_pass(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::repository::tests::*;
    use crate::repo::{Guard, OwnPaths};

    /// The passes `f` makes over `root`'s work tree.
    fn passes(f: impl FnOnce()) -> u64 {
        let before = THREAD_PASSES.with(std::cell::Cell::get);
        f();
        THREAD_PASSES.with(std::cell::Cell::get) - before
    }

    #[test]
    fn an_event_walks_once_and_sees_what_a_full_walk_sees() {
        let (dir, git) = init_repo();
        let root = dir.path();
        write(root, "a.txt", "alpha changed\n");
        write(root, "new/deep/c.txt", "gamma\n");
        write(root, "d.txt", "staged\n");
        let mut index = git.index().unwrap();
        index.add_path(Path::new("d.txt")).unwrap();
        index.write().unwrap();
        let repo = open(root);
        let own = OwnPaths::default();
        let full = repo.changes(&own).unwrap();
        let snap = repo.snapshot(&own).unwrap();
        let (changes, snap_in, left) = {
            let _pass = one_pass(root);
            let changes = repo.changes(&own).unwrap();
            // ralph writes its handoff in the middle of the event.
            write(root, ".ralph/handoffs/h.md", "notes\n");
            let snap_in = repo.snapshot(&own).unwrap();
            let left = repo.left_out(&own, &Guard::NONE).unwrap();
            (changes, snap_in, left)
        };
        assert_eq!(changes, full);
        assert_eq!(snap_in, snap);
        assert!(left.is_empty());
        let commit = passes(|| {
            let _pass = one_pass_to_commit(root);
            repo.changes(&own).unwrap();
            repo.diff_stat(&own).unwrap();
            repo.left_out(&own, &Guard::NONE).unwrap();
            committed(repo.wip_commit("wip", &own));
            repo.work_tree_id(&own, &Guard::NONE).unwrap();
            assert!(repo.changes(&own).unwrap().is_empty(), "all committed");
        });
        // The walk refreshed the index as it went: the WIP commit's staging
        // keeps to its paths.
        assert_eq!(commit, 1, "one walk for the event, the staging included");
        let tree = head_files(&git);
        assert!(tree.contains_key("new/deep/c.txt") && tree.contains_key("d.txt"));
        assert!(
            tree.contains_key(".ralph/handoffs/h.md"),
            "ralph's own write"
        );
    }

    /// A repository whose `b.txt` is touched (a later mtime, the same
    /// content) and with a new `c.txt`; the touched mtime in seconds.
    fn touched_repo() -> (tempfile::TempDir, git2::Repository, Repo, i64) {
        let (dir, git) = init_repo();
        let root = dir.path();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(root.join("b.txt"))
            .unwrap()
            .set_modified(later)
            .unwrap();
        write(root, "c.txt", "c\n");
        let mtime = later
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let repo = open(root);
        (dir, git, repo, mtime)
    }

    fn changed_paths(repo: &Repo, own: &OwnPaths) -> Vec<String> {
        let changes = repo.changes(own).unwrap();
        changes.into_iter().map(|c| c.path).collect()
    }

    fn indexed_mtime(git: &git2::Repository, path: &str) -> i64 {
        let mut index = git.index().unwrap();
        index.read(true).unwrap();
        i64::from(index.get_path(Path::new(path), 0).unwrap().mtime.seconds())
    }

    #[test]
    fn a_commit_after_a_refreshing_walk_stages_without_walking_and_keeps_touched_files_fresh() {
        // An event that only reads (the agent may be at work): its walk
        // leaves the index file alone, the WIP commit walks to refresh.
        let (dir, git, repo, mtime) = touched_repo();
        let root = dir.path();
        let own = OwnPaths::default();
        let index_file = root.join(".git/index");
        let before = std::fs::read(&index_file).unwrap();
        let read_only = passes(|| {
            let _pass = one_pass(root);
            repo.changes(&own).unwrap();
            assert_eq!(std::fs::read(&index_file).unwrap(), before, "read only");
            committed(repo.wip_commit("wip", &own));
        });
        assert_eq!(read_only, 2);
        assert_eq!(indexed_mtime(&git, "b.txt"), mtime);

        // An event that may commit: one walk refreshes and stages.
        let (dir, git, repo, mtime) = touched_repo();
        let root = dir.path();
        let walks = passes(|| {
            let _pass = one_pass_to_commit(root);
            repo.changes(&own).unwrap();
            let (_, files) = committed(repo.wip_commit("wip", &own));
            assert_eq!(files, 1, "c.txt only: b.txt's content is HEAD's");
        });
        assert_eq!(walks, 1);
        assert_eq!(indexed_mtime(&git, "b.txt"), mtime, "b.txt recorded fresh");
        // The next walk hashes nothing: b.txt is clean by its stat data.
        assert!(repo.changes(&own).unwrap().is_empty());
    }

    /// A file the refreshing walk recorded, then changed in the same
    /// second at the same size (the next iteration's agent at work), then
    /// a walk that writes the index later: the git CLI must still see the
    /// change (it compares whole seconds; libgit2 nanoseconds).
    #[test]
    fn a_change_in_the_second_of_a_refresh_stays_visible_to_git() {
        let (dir, git) = init_repo();
        // The file's ctime (not settable) must not tell the change either.
        git.config()
            .unwrap()
            .set_bool("core.trustctime", false)
            .unwrap();
        let root = dir.path();
        let repo = open(root);
        let own = OwnPaths::default();
        let second = std::time::SystemTime::now() - std::time::Duration::from_secs(100);
        let second = std::time::UNIX_EPOCH
            + std::time::Duration::from_secs(
                second
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs(),
            );
        let set_mtime = |path: &str, at: std::time::SystemTime| {
            std::fs::File::options()
                .write(true)
                .open(root.join(path))
                .unwrap()
                .set_modified(at)
                .unwrap();
        };
        let refresh = || {
            let _pass = one_pass_to_commit(root);
            changed_paths(&repo, &own)
        };
        // Only touched: recorded at .1 s of that second.
        let a = std::fs::read_to_string(root.join("a.txt")).unwrap();
        set_mtime("a.txt", second + std::time::Duration::from_millis(100));
        assert!(refresh().is_empty());
        // Changed at .5 s of the same second, same size.
        let changed: String = a.chars().map(|c| if c == '\n' { c } else { 'z' }).collect();
        assert_ne!(changed, a);
        write(root, "a.txt", &changed);
        set_mtime("a.txt", second + std::time::Duration::from_millis(500));
        // Another touched file makes the next walk write the index.
        set_mtime("b.txt", second - std::time::Duration::from_secs(50));
        assert_eq!(refresh(), ["a.txt"]);
        let out = std::process::Command::new("git")
            .args(["status", "--porcelain"])
            .current_dir(root)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), " M a.txt\n");
    }

    /// Another project's run in this work tree is inside its WIP commit
    /// (it holds the commit lock while it reads, stages and writes the
    /// index): a refreshing walk waits for it. Not waiting, the index the
    /// walk read before that commit was written back after it, staging the
    /// commit's files as deleted (two runs of ten checkpoints each: eight
    /// of the other run's commits undone in the index).
    #[test]
    fn a_refreshing_walk_waits_for_another_runs_commit() {
        let (dir, _git, _repo, _mtime) = touched_repo();
        let root = dir.path().to_path_buf();
        let held = open(&root).commit_lock();
        let (walked_tx, walked) = std::sync::mpsc::channel();
        let walker = std::thread::spawn(move || {
            let repo = open(&root);
            let _pass = one_pass_to_commit(&root);
            let paths = changed_paths(&repo, &OwnPaths::default());
            walked_tx.send(repo.walk_refreshed()).unwrap();
            paths
        });
        let wait = std::time::Duration::from_millis(500);
        assert!(
            walked.recv_timeout(wait).is_err(),
            "walked while another run was committing"
        );
        drop(held);
        let refreshed = walked.recv_timeout(std::time::Duration::from_secs(60));
        assert_eq!(refreshed, Ok(true), "refreshed once the commit was done");
        assert_eq!(walker.join().unwrap(), ["c.txt"]);
    }

    #[test]
    fn a_walk_that_cannot_write_the_index_walks_without_refreshing() {
        // Another process's `index.lock` (a read-only `.git` fails the same
        // way): the walk still says what changed, and the WIP commit's
        // staging walks for itself.
        let (dir, git, repo, mtime) = touched_repo();
        let root = dir.path();
        let own = OwnPaths::default();
        std::fs::write(root.join(".git/index.lock"), "").unwrap();
        let walks = passes(|| {
            let _pass = one_pass_to_commit(root);
            let paths = changed_paths(&repo, &own);
            assert_eq!(paths, ["c.txt"]);
            assert!(!repo.walk_refreshed());
        });
        assert_eq!(walks, 2, "the refreshing walk, then the plain one");
        assert_ne!(indexed_mtime(&git, "b.txt"), mtime, "nothing written");
        // A lock is a moment's: once it is gone, the next event refreshes.
        std::fs::remove_file(root.join(".git/index.lock")).unwrap();
        let walks = passes(|| {
            let _pass = one_pass_to_commit(root);
            assert_eq!(changed_paths(&repo, &own), ["c.txt"]);
            assert!(repo.walk_refreshed());
        });
        assert_eq!(walks, 1);
        assert_eq!(indexed_mtime(&git, "b.txt"), mtime, "refreshed");
    }

    #[test]
    fn only_a_lock_is_worth_refreshing_again() {
        use git2::{Error, ErrorClass, ErrorCode};
        for (code, class, gives_up) in [
            (ErrorCode::Locked, ErrorClass::Index, false),
            (ErrorCode::GenericError, ErrorClass::Os, true),
            (ErrorCode::GenericError, ErrorClass::Filesystem, true),
        ] {
            let e = Error::new(code, class, "failed to write the index");
            assert_eq!(gives_up_refreshing(&e), gives_up, "{code:?} {class:?}");
        }
    }

    #[test]
    fn a_touched_tree_is_walked_again() {
        let (dir, _git) = init_repo();
        let root = dir.path();
        let repo = open(root);
        let own = OwnPaths::default();
        let walks = passes(|| {
            let _pass = one_pass(root);
            assert!(repo.changes(&own).unwrap().is_empty());
            write(root, "built/out.txt", "a check wrote this\n");
            touched(root);
            let paths = changed_paths(&repo, &own);
            assert_eq!(paths, ["built/out.txt"]);
        });
        assert_eq!(walks, 2);
        // Outside an event every call walks.
        assert_eq!(
            passes(|| {
                repo.changes(&own).unwrap();
                repo.changes(&own).unwrap();
            }),
            2
        );
    }
}
