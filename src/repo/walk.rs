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
//! Pitfalls: an empty pathspec means "everything" to libgit2, so the list
//! always holds ralph's directory; a directory in the list ends in `/`
//! (libgit2 then takes everything under it). A process the agent left
//! running that writes a new file during an iteration's end is not seen by
//! that event (its commit takes the file at the next one).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use git2::{DiffOptions, StatusOptions, Statuses};

use super::{RALPH_DIR, Repo};

/// Full passes over a work tree since the process started.
static PASSES: AtomicU64 = AtomicU64::new(0);

/// The events under way, by project root.
static EVENTS: Mutex<Vec<Event>> = Mutex::new(Vec::new());

struct Event {
    root: PathBuf,
    /// Guards open for this root (events nest: a WIP commit inside an
    /// iteration's end).
    depth: usize,
    /// The paths the event's walk named; None before it (or after [`touched`]).
    paths: Option<Vec<Vec<u8>>>,
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

/// Begin an event for the project at `root` (or join the one under way).
pub fn one_pass(root: &Path) -> OnePass {
    let mut events = events();
    match events.iter_mut().find(|e| e.root == root) {
        Some(event) => event.depth += 1,
        None => events.push(Event {
            root: root.to_path_buf(),
            depth: 1,
            paths: None,
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
        event.paths = None;
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

/// `None`: no event; `Some(None)`: an event that has not walked yet.
fn walked(root: &Path) -> Option<Option<Vec<Vec<u8>>>> {
    events()
        .iter()
        .find(|e| e.root == root)
        .map(|e| e.paths.clone())
}

impl Repo {
    /// `git status` with `opts`: the event's remembered paths when it has
    /// walked, else a full pass (remembered when an event is under way).
    pub(super) fn statuses(
        &self,
        opts: &mut StatusOptions,
    ) -> std::result::Result<Statuses<'_>, git2::Error> {
        let event = walked(&self.root);
        if let Some(Some(paths)) = &event {
            opts.disable_pathspec_match(true);
            for path in paths {
                opts.pathspec(path.as_slice());
            }
            return self.git.statuses(Some(opts));
        }
        count_pass();
        let statuses = self.git.statuses(Some(opts))?;
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
                event.paths = Some(paths);
            }
        }
        Ok(statuses)
    }

    /// Limit a work-tree diff to the event's remembered paths, if it has
    /// walked; otherwise the diff is a full pass (counted).
    pub(super) fn restrict_to_walk(&self, opts: &mut DiffOptions) {
        match walked(&self.root) {
            Some(Some(paths)) => {
                opts.disable_pathspec_match(true);
                for path in paths {
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
            let _pass = one_pass(root);
            repo.changes(&own).unwrap();
            repo.diff_stat(&own).unwrap();
            repo.left_out(&own, &Guard::NONE).unwrap();
            committed(repo.wip_commit("wip", &own));
            repo.work_tree_id(&own, &Guard::NONE).unwrap();
            assert!(repo.changes(&own).unwrap().is_empty(), "all committed");
        });
        // One walk for everything but the WIP commit's staging, which
        // walks for the index's refresh (`touched_files_get_fresh_stat_data_in_the_index`).
        assert_eq!(commit, 2, "one walk for the event, one to stage");
        let tree = head_files(&git);
        assert!(tree.contains_key("new/deep/c.txt") && tree.contains_key("d.txt"));
        assert!(
            tree.contains_key(".ralph/handoffs/h.md"),
            "ralph's own write"
        );
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
            let paths: Vec<String> = repo
                .changes(&own)
                .unwrap()
                .into_iter()
                .map(|c| c.path)
                .collect();
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
