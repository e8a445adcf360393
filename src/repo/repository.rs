//! The project's git repository: opening it, its branch and HEAD, ralph's own
//! paths, and the path helpers the parts below share; what the agent changed
//! (`stat`), progress snapshots (`snapshot`), WIP commits at checkpoints
//! (`commit`) and the safety net's hidden snapshot refs (`safety_net`), all
//! through git2 (never the `git` CLI).

use std::cell::RefCell;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use git2::{ErrorCode, Oid, Repository, StatusOptions, StatusShow, Tree};
use serde::Serialize;
use tracing::{debug, trace};

use super::output_files;
use crate::{Error, Result};

/// A file or directory (ending in `/`) kept out of a WIP commit, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct LeftOut {
    /// Workdir-relative, `/`-separated; a directory ends in `/`. A
    /// directory leaves out the new files under it; a file leaves out its
    /// change, new or tracked (a secret in it, a check's output).
    pub(crate) path: String,
    /// Why, for the handoff: "binary file", "12.0 MB, over git.max_file_size", …
    pub(crate) why: String,
    /// It holds a secret (`why` says which): worth a warning, not only a line.
    #[serde(skip)]
    pub(crate) secret: bool,
}

impl LeftOut {
    /// The file and why, as a warning names it: `key.txt (holds a secret …)`.
    pub(crate) fn named(&self) -> String {
        format!(
            "{} ({})",
            super::display_path(self.path.as_bytes()),
            self.why
        )
    }
}

pub(crate) use crate::formats::RALPH_DIR;
/// Handoff documents live here and, unlike the rest of `.ralph/`, are committed.
pub(crate) const HANDOFFS_DIR: &str = ".ralph/handoffs";
/// The decision log: committed too (`decisions::FILE`).
pub(super) const DECISIONS_FILE: &str = crate::plan::decisions::FILE;

/// Files larger than this are shown as binary in `diff_stat` and fingerprinted by
/// size/mtime only: reading them in full would cost more than it tells.
pub(super) const BIG_FILE: u64 = 1 << 20;

/// Paths ralph writes for itself. `prompt_file` is relative to the project root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnPaths {
    pub(crate) prompt_file: PathBuf,
}

impl OwnPaths {
    pub(crate) fn new(prompt_file: impl Into<PathBuf>) -> Self {
        OwnPaths {
            prompt_file: prompt_file.into(),
        }
    }
}

impl Default for OwnPaths {
    fn default() -> Self {
        OwnPaths::new("PROMPT.md")
    }
}

/// The git repository containing the project root.
pub struct Repo {
    /// Shared by every `Repo` of a held root ([`Repo::hold`]): one opened
    /// repository, one parsed index.
    pub(super) git: Rc<Repository>,
    pub(super) root: PathBuf,
    /// The project root relative to the work dir, `/`-separated with a trailing
    /// `/` (empty when the root is the work dir): ralph's paths are root-relative,
    /// git's are workdir-relative.
    pub(super) prefix: Vec<u8>,
}

impl std::fmt::Debug for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repo")
            .field("root", &self.root)
            .field("workdir", &self.git.workdir())
            .finish()
    }
}

impl Repo {
    /// Discover the repository containing `root`; Ok(None) when `root` is not in
    /// a git repository (or only in a bare one: there is no work tree to commit).
    /// While `root` is held ([`Repo::hold`]) on this thread, the held one.
    pub fn open(root: &Path) -> Result<Option<Repo>> {
        if let Some(repo) = held(root) {
            return Ok(Some(repo));
        }
        let repo = Self::discover(root)?;
        if let Some(repo) = &repo {
            remember(repo);
        }
        Ok(repo)
    }

    /// Hold `root`'s repository open on this thread while the guard lives:
    /// every [`Repo::open`] of `root` shares it. A run holds its project's
    /// for its life; its steps open it again and again, and each repository
    /// opened reads the whole index anew (100,000 entries and the checksum
    /// of the file: most of a step's cost besides the walk) and keeps its
    /// own parsed copy. A shared one re-reads the index only when the file
    /// changed on disk (every status checks).
    pub fn hold(root: &Path) -> Held {
        HELD.with_borrow_mut(|held| match held.iter_mut().find(|h| h.root == root) {
            Some(h) => h.depth += 1,
            None => held.push(Holding {
                root: root.to_path_buf(),
                depth: 1,
                repo: None,
            }),
        });
        // Opened now: the guard holds it from the start.
        let _ = Repo::open(root);
        Held {
            root: root.to_path_buf(),
        }
    }

    /// A second handle on the same opened repository.
    fn share(&self) -> Repo {
        Repo {
            git: Rc::clone(&self.git),
            root: self.root.clone(),
            prefix: self.prefix.clone(),
        }
    }

    fn discover(root: &Path) -> Result<Option<Repo>> {
        relax_object_validation();
        let git = match Repository::discover(root) {
            Ok(git) => git,
            Err(e) if e.code() == ErrorCode::NotFound => {
                debug!(root = %root.display(), "not in a git repository");
                return Ok(None);
            }
            Err(e) => {
                return Err(Error::wrap(
                    format!("cannot open the git repository at {}", root.display()),
                    e,
                ));
            }
        };
        let Some(workdir) = git.workdir() else {
            debug!(root = %root.display(), "bare repository, treated as no repository");
            return Ok(None);
        };
        let prefix = root_prefix(root, workdir);
        count_open();
        trace!(workdir = %workdir.display(), prefix = %String::from_utf8_lossy(&prefix), "opened repository");
        Ok(Some(Repo {
            git: Rc::new(git),
            root: root.to_path_buf(),
            prefix,
        }))
    }

    /// The repository's working directory (may be above the project root).
    pub(crate) fn workdir(&self) -> &Path {
        // open() refuses bare repositories, so there always is one.
        self.git.workdir().unwrap_or(&self.root)
    }

    /// The current branch's short name (also when it has no commit yet); None
    /// when HEAD is detached.
    pub(crate) fn branch(&self) -> Option<String> {
        let head = self.git.find_reference("HEAD").ok()?;
        let target = head.symbolic_target()?;
        Some(
            target
                .strip_prefix("refs/heads/")
                .unwrap_or(target)
                .to_string(),
        )
    }

    /// HEAD's commit id; None when the branch is unborn (no commit yet).
    pub(crate) fn head_id(&self) -> Option<String> {
        self.head_oid().map(|id| id.to_string())
    }

    pub(super) fn head_oid(&self) -> Option<Oid> {
        self.git.head().ok()?.target()
    }

    pub(super) fn head_tree(&self) -> std::result::Result<Option<Tree<'_>>, git2::Error> {
        match self.git.head() {
            Ok(head) => Ok(Some(head.peel_to_tree()?)),
            Err(e) if is_unborn(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(super) fn own(&self, own: &OwnPaths) -> Own {
        Own::new(&self.prefix, &self.root, own)
    }
}

/// ralph's own paths in git's form (workdir-relative, `/`-separated bytes).
pub(super) struct Own {
    /// Everything ralph writes: `.ralph` and the prompt file (files or dirs),
    /// then the files ralph's own stdout/stderr go to.
    pub(super) paths: Vec<Vec<u8>>,
    /// `.ralph/handoffs`, the committed part of `.ralph/`.
    pub(super) handoffs: Vec<u8>,
    /// `.ralph/decisions.md`, committed as well.
    pub(super) decisions: Vec<u8>,
    /// The files ralph's stdout/stderr write to (`nohup ralph run > ralph.log`):
    /// runtime files like `.ralph/`, never committed.
    pub(super) streams: Vec<Vec<u8>>,
    /// Work a WIP commit leaves out this time (key files, huge or binary
    /// outputs); files or directories.
    pub(super) left_out: Vec<Vec<u8>>,
    /// The files of `left_out`: held at HEAD's version whether new or
    /// tracked, also when the agent staged them.
    pub(super) held: Vec<Vec<u8>>,
    /// Tracked files a snapshot keeps at their indexed version (changed,
    /// but over `git.max_file_size`).
    pub(super) frozen: Vec<Vec<u8>>,
    /// Stage changes to tracked files only (the user's edits found at the
    /// start of a run), no new file.
    pub(super) tracked_only: bool,
    /// The project directory (`/`-terminated, empty for the whole work
    /// tree): nothing outside it is the run's to stage, snapshot or count.
    pub(super) scope: Vec<u8>,
    /// A new file over this many bytes when it is staged is left out (0: no
    /// limit): the size `left_out` judged may have grown since (an agent
    /// rewriting a big output while a snapshot, WIP or final commit is
    /// made).
    pub(super) max_new_size: u64,
}

impl Own {
    pub(super) fn new(prefix: &[u8], root: &Path, own: &OwnPaths) -> Own {
        let workdir_relative = |path: &Path| {
            let rel = root_relative(root, path)?;
            Some([prefix, &rel].concat())
        };
        let mut paths = vec![[prefix, RALPH_DIR.as_bytes()].concat()];
        paths.extend(workdir_relative(&own.prompt_file));
        let streams: Vec<Vec<u8>> = output_files()
            .iter()
            .filter_map(|p| workdir_relative(p))
            .collect();
        paths.extend(streams.iter().cloned());
        Own {
            paths,
            handoffs: [prefix, HANDOFFS_DIR.as_bytes()].concat(),
            decisions: [prefix, DECISIONS_FILE.as_bytes()].concat(),
            streams,
            left_out: Vec::new(),
            held: Vec::new(),
            frozen: Vec::new(),
            tracked_only: false,
            scope: prefix.to_vec(),
            max_new_size: 0,
        }
    }

    /// Inside the project's directory.
    pub(super) fn in_scope(&self, path: &[u8]) -> bool {
        path.starts_with(&self.scope)
    }

    pub(super) fn leave_out(&mut self, left_out: &[LeftOut]) {
        self.left_out = left_out
            .iter()
            .map(|l| l.path.trim_end_matches('/').as_bytes().to_vec())
            .collect();
        self.held = left_out
            .iter()
            .filter(|l| !l.path.ends_with('/'))
            .map(|l| l.path.as_bytes().to_vec())
            .collect();
    }

    pub(super) fn is_held(&self, path: &[u8]) -> bool {
        self.held.iter().any(|h| h == path)
    }

    pub(super) fn is_left_out(&self, path: &[u8]) -> bool {
        self.left_out.iter().any(|l| is_under(path, l))
    }

    pub(super) fn is_frozen(&self, path: &[u8]) -> bool {
        self.frozen.iter().any(|f| f == path)
    }

    pub(super) fn ralph_dir(&self) -> &[u8] {
        &self.paths[0]
    }

    /// ralph's own writes, or outside the project: never the agent's
    /// progress.
    pub(super) fn contains(&self, path: &[u8]) -> bool {
        !self.in_scope(path) || self.paths.iter().any(|own| is_under(path, own))
    }

    /// Runtime files, never committed: `.ralph/` except its handoffs and
    /// decision log, and the files ralph's own output goes to.
    pub(super) fn is_runtime(&self, path: &[u8]) -> bool {
        (is_under(path, self.ralph_dir())
            && !is_under(path, &self.handoffs)
            && path != self.decisions.as_slice())
            || self.streams.iter().any(|s| s == path)
    }

    pub(super) fn paths(&self) -> Vec<String> {
        self.paths
            .iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect()
    }
}

pub(super) fn is_under(path: &[u8], dir: &[u8]) -> bool {
    path.strip_prefix(dir)
        .is_some_and(|rest| rest.is_empty() || rest[0] == b'/')
}

/// `path` (relative to `root`, or absolute inside it) in git's form; None when
/// it points outside the root.
pub(super) fn root_relative(root: &Path, path: &Path) -> Option<Vec<u8>> {
    let rel = if path.is_absolute() {
        let canonical_root = root.canonicalize().ok();
        path.strip_prefix(root)
            .ok()
            .or_else(|| path.strip_prefix(canonical_root.as_deref()?).ok())?
    } else {
        path
    };
    let mut parts: Vec<&[u8]> = Vec::new();
    for component in rel.components() {
        match component {
            Component::Normal(part) => parts.push(part.as_encoded_bytes()),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join(&b'/'))
}

/// libgit2's strict object creation re-reads the header of every blob in every
/// directory a commit rewrites (10,000 reads for a change spread over a large
/// tree), which made WIP commits slower than `git commit`. The trees ralph
/// writes only reference blobs libgit2 just stored or the index already holds,
/// and ralph is the only libgit2 user in its process, so the global switch is
/// safe to turn off.
/// Repositories opened on a work tree since the process started: each reads
/// the whole index again and keeps its own parsed copy.
static OPENED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Repositories of a work tree this process opened (`Repo::open` that
/// found none held, and the scratch repository of a snapshot's tree): what
/// the benchmark and the tests count.
pub fn repositories_opened() -> u64 {
    OPENED.load(std::sync::atomic::Ordering::Relaxed)
}

pub(super) fn count_open() {
    OPENED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    #[cfg(test)]
    THREAD_OPENED.with(|n| n.set(n.get() + 1));
}

// Tests run in parallel threads: each counts its own.
#[cfg(test)]
thread_local! {
    pub(super) static THREAD_OPENED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The roots held open on this thread ([`Repo::hold`]).
struct Holding {
    root: PathBuf,
    /// Guards alive for this root (a run and, inside it, a step may hold).
    depth: usize,
    /// None until opened (a root not in a repository yet: the agent may
    /// `git init` it).
    repo: Option<Repo>,
}

thread_local! {
    static HELD: RefCell<Vec<Holding>> = const { RefCell::new(Vec::new()) };
}

/// While alive, [`Repo::open`] of its root on this thread returns one shared
/// repository.
#[must_use = "the repository is held as long as the guard"]
pub struct Held {
    root: PathBuf,
}

impl Drop for Held {
    fn drop(&mut self) {
        let gone = HELD.with_borrow_mut(|held| {
            let i = held.iter().position(|h| h.root == self.root)?;
            held[i].depth -= 1;
            (held[i].depth == 0).then(|| held.swap_remove(i))
        });
        drop(gone);
    }
}

/// The held repository of `root`, if any and its git directory is still
/// there (a repository removed and made again is opened anew).
fn held(root: &Path) -> Option<Repo> {
    HELD.with_borrow_mut(|held| {
        let h = held.iter_mut().find(|h| h.root == root)?;
        if h.repo.as_ref().is_some_and(|r| !r.git.path().is_dir()) {
            h.repo = None;
        }
        h.repo.as_ref().map(Repo::share)
    })
}

/// Keep `repo` as its root's held repository, if the root is held.
fn remember(repo: &Repo) {
    HELD.with_borrow_mut(|held| {
        if let Some(h) = held.iter_mut().find(|h| h.root == repo.root) {
            h.repo = Some(repo.share());
        }
    });
}

pub(super) fn relax_object_validation() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| git2::opts::strict_object_creation(false));
}

/// libgit2's process-wide settings, made by `app::main` before any thread
/// starts (libgit2 reads them unsynchronised). Trees are not kept in its
/// object cache: every status reads all of HEAD's trees (1,000 on 100,000
/// files, ~7 MB parsed) and a run's repository, held open
/// ([`Repo::hold`]), would keep them all for the run; git keeps none
/// between commands. Reading them again from the pack costs little next to
/// the `lstat` of every file.
pub(crate) fn tune_libgit2() {
    // SAFETY: called once, from `main`, while it is the only thread.
    if let Err(e) = unsafe { git2::opts::set_cache_object_limit(git2::ObjectType::Tree, 0) } {
        debug!(error = %e, "libgit2 keeps its default object cache");
    }
}

/// The project root relative to the work dir, with a trailing `/`.
pub(super) fn root_prefix(root: &Path, workdir: &Path) -> Vec<u8> {
    // Compare canonical forms: the work dir comes back resolved (symlinks, `..`).
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let workdir = workdir
        .canonicalize()
        .unwrap_or_else(|_| workdir.to_path_buf());
    let Ok(rel) = root.strip_prefix(&workdir) else {
        return Vec::new();
    };
    let mut prefix = Vec::new();
    for part in rel.components() {
        if let Component::Normal(part) = part {
            prefix.extend_from_slice(part.as_encoded_bytes());
            prefix.push(b'/');
        }
    }
    prefix
}

pub(super) fn bytes_to_path(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt as _;
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

/// An index entry `git add -A` does not look at: outside a sparse checkout
/// (skip-worktree) or marked assume-unchanged.
pub(super) fn is_hidden_entry(entry: &git2::IndexEntry) -> bool {
    let skip_worktree = git2::IndexEntryExtendedFlag::SKIP_WORKTREE.bits();
    let assume_unchanged = git2::IndexEntryFlag::VALID.bits();
    entry.flags_extended & skip_worktree != 0 || entry.flags & assume_unchanged != 0
}

/// A work-tree-only status of an entry `git add -A` leaves alone: not a
/// change (a file outside the sparse cone is absent, not deleted).
pub(super) fn hidden_from_add(
    index: Option<&git2::Index>,
    path: &[u8],
    status: git2::Status,
) -> bool {
    let worktree_only = !status.intersects(
        git2::Status::INDEX_NEW
            | git2::Status::INDEX_MODIFIED
            | git2::Status::INDEX_DELETED
            | git2::Status::INDEX_RENAMED
            | git2::Status::INDEX_TYPECHANGE,
    );
    worktree_only
        && index
            .and_then(|i| i.get_path(&bytes_to_path(path), 0))
            .is_some_and(|e| is_hidden_entry(&e))
}

pub(super) fn is_unborn(e: &git2::Error) -> bool {
    matches!(e.code(), ErrorCode::UnbornBranch | ErrorCode::NotFound)
}

/// Status listing shared by `changes` and `snapshot`: untracked files one by
/// one, no ignored files (their directories are not even walked).
pub(super) fn status_options(renames: bool) -> StatusOptions {
    let mut opts = StatusOptions::new();
    opts.show(StatusShow::IndexAndWorkdir)
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .include_unmodified(false)
        .disable_pathspec_match(true)
        .renames_head_to_index(renames);
    opts
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeMap;
    use std::fs;

    use git2::Signature;
    use tempfile::TempDir;

    use super::*;
    use crate::repo::CommitOutcome;

    /// A repository with a local identity and one commit of `a.txt`, `b.txt`.
    pub(crate) fn init_repo() -> (TempDir, Repository) {
        let dir = tempfile::tempdir().unwrap();
        let git = Repository::init(dir.path()).unwrap();
        {
            let mut config = git.config().unwrap();
            config.set_str("user.name", "Test User").unwrap();
            config.set_str("user.email", "test@example.com").unwrap();
        }
        write(dir.path(), "a.txt", "alpha\n");
        write(dir.path(), "b.txt", "beta\n");
        commit_all(&git, "initial");
        (dir, git)
    }

    pub(crate) fn write(root: &Path, rel: &str, content: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    pub(crate) fn commit_all(git: &Repository, message: &str) -> Oid {
        let mut index = git.index().unwrap();
        index
            .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
            .unwrap();
        index.update_all(["*"], None).unwrap();
        // Tree first, so the index keeps its tree cache as after `git commit`.
        let tree = git.find_tree(index.write_tree().unwrap()).unwrap();
        index.write().unwrap();
        let sig = Signature::now("Test User", "test@example.com").unwrap();
        let parent = git.head().ok().map(|h| h.peel_to_commit().unwrap());
        let parents: Vec<&git2::Commit<'_>> = parent.iter().collect();
        git.commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)
            .unwrap()
    }

    pub(crate) fn open(root: &Path) -> Repo {
        Repo::open(root).unwrap().expect("a repository")
    }

    /// Path → content of every blob in HEAD's tree.
    pub(crate) fn head_files(git: &Repository) -> BTreeMap<String, Vec<u8>> {
        let tree = git.head().unwrap().peel_to_tree().unwrap();
        let mut files = BTreeMap::new();
        tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            if let Ok(blob) = entry.to_object(git).and_then(|o| o.peel_to_blob()) {
                let name = String::from_utf8_lossy(entry.name_bytes());
                files.insert(format!("{dir}{name}"), blob.content().to_vec());
            }
            git2::TreeWalkResult::Ok
        })
        .unwrap();
        files
    }

    /// Every work-tree file (outside `.git`) with its content and mtime.
    pub(crate) fn work_tree(root: &Path) -> BTreeMap<PathBuf, (Vec<u8>, std::time::SystemTime)> {
        let mut out = BTreeMap::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if entry.file_name() == ".git" {
                    continue;
                }
                if path.is_dir() {
                    stack.push(path);
                } else {
                    let meta = fs::metadata(&path).unwrap();
                    out.insert(
                        path.clone(),
                        (fs::read(&path).unwrap(), meta.modified().unwrap()),
                    );
                }
            }
        }
        out
    }

    pub(crate) fn committed(outcome: CommitOutcome) -> (String, usize) {
        match outcome {
            CommitOutcome::Committed { id, files } => (id, files),
            other => panic!("expected a commit, got {other:?}"),
        }
    }

    pub(crate) fn skipped(outcome: CommitOutcome) -> String {
        match outcome {
            CommitOutcome::Skipped { reason } => reason,
            other => panic!("expected a skip, got {other:?}"),
        }
    }

    pub(crate) fn own() -> OwnPaths {
        OwnPaths::default()
    }

    /// What `f` returns, and the repositories it opened on this thread.
    pub(crate) fn opened_and<T>(f: impl FnOnce() -> T) -> (T, u64) {
        let before = THREAD_OPENED.with(std::cell::Cell::get);
        let value = f();
        (value, THREAD_OPENED.with(std::cell::Cell::get) - before)
    }

    pub(crate) fn opened(f: impl FnOnce()) -> u64 {
        opened_and(f).1
    }

    /// A run holds its repository: every step shares one opened
    /// repository and its index, which still follows what another git
    /// writes to the index file.
    #[test]
    fn a_held_root_is_opened_once_and_sees_the_index_another_git_wrote() {
        let (dir, git) = init_repo();
        let root = dir.path();
        write(root, "c.txt", "gamma\n");
        let mut kinds = Vec::new();
        let during = opened(|| {
            let _held = Repo::hold(root);
            for _ in 0..3 {
                let changes = open(root).changes(&own()).unwrap();
                kinds.push(changes.iter().map(|c| c.kind.clone()).collect::<Vec<_>>());
                // The agent's `git add`, between two steps.
                let mut index = git.index().unwrap();
                index.add_path(Path::new("c.txt")).unwrap();
                index.write().unwrap();
            }
        });
        assert_eq!(during, 1, "one repository for the held root");
        assert_eq!(kinds, [["??"], ["A"], ["A"]]);
        // Let go: each open is its own again.
        assert_eq!(
            opened(|| {
                open(root);
                open(root);
            }),
            2
        );
    }

    #[test]
    fn open_outside_git_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Repo::open(dir.path()).unwrap().is_none());
    }

    #[test]
    fn branch_and_head() {
        let (dir, git) = init_repo();
        let repo = open(dir.path());
        let expected = git.head().unwrap().shorthand().unwrap().to_string();
        assert_eq!(repo.branch(), Some(expected));
        assert_eq!(
            repo.head_id(),
            Some(git.head().unwrap().target().unwrap().to_string())
        );
        git.set_head_detached(git.head().unwrap().target().unwrap())
            .unwrap();
        assert_eq!(repo.branch(), None);
        assert!(repo.head_id().is_some());
    }

    #[test]
    fn unborn_branch_has_name_but_no_head() {
        let dir = tempfile::tempdir().unwrap();
        Repository::init(dir.path()).unwrap();
        let repo = open(dir.path());
        assert!(repo.branch().is_some());
        assert_eq!(repo.head_id(), None);
    }

    #[test]
    fn project_root_below_the_work_dir() {
        let (dir, git) = init_repo();
        let root = dir.path().join("sub");
        write(&root, "code.rs", "x");
        write(&root, ".ralph/state.json", "{}");
        write(&root, ".ralph/handoffs/h.md", "h");
        write(&root, "PROMPT.md", "p");
        // Outside the project: neither its change nor its commit, even staged.
        write(dir.path(), "PROMPT.md", "top-level file of the user");
        write(dir.path(), "a.txt", "alpha, staged by someone else\n");
        let mut index = git.index().unwrap();
        index.add_path(Path::new("a.txt")).unwrap();
        index.write().unwrap();
        let repo = open(&root);
        let paths: Vec<String> = repo
            .changes(&own())
            .unwrap()
            .into_iter()
            .map(|c| c.path)
            .collect();
        assert_eq!(paths, ["sub/code.rs"]);
        let before = repo.snapshot(&own()).unwrap();
        write(dir.path(), "b.txt", "beta, edited outside\n");
        assert_eq!(repo.snapshot(&own()).unwrap(), before, "not progress");
        committed(repo.wip_commit("wip", &own()));
        let tree = head_files(&git);
        assert!(tree.contains_key("sub/code.rs"));
        assert!(tree.contains_key("sub/.ralph/handoffs/h.md"));
        assert!(tree.contains_key("sub/PROMPT.md"));
        assert!(!tree.contains_key("sub/.ralph/state.json"));
        assert!(!tree.contains_key("PROMPT.md"));
        assert_eq!(tree["a.txt"], b"alpha\n", "the staged change is not taken");
        // …and stays staged, as it was.
        let staged = git
            .statuses(None)
            .unwrap()
            .iter()
            .find(|e| e.path() == Some("a.txt"))
            .unwrap()
            .status();
        assert!(staged.contains(git2::Status::INDEX_MODIFIED), "{staged:?}");
        // A commit of another project counts as no progress here.
        let after = repo.snapshot(&own()).unwrap();
        write(dir.path(), "c.txt", "gamma\n");
        commit_all(&git, "the other project's work");
        let later = repo.snapshot(&own()).unwrap();
        assert!(!super::super::made_progress(&root, &after, &later));
    }

    #[test]
    fn own_paths_are_matched_by_component() {
        let own = Own::new(b"", Path::new("/x"), &OwnPaths::new("./docs/PROMPT.md"));
        assert!(own.contains(b".ralph"));
        assert!(own.contains(b".ralph/state.json"));
        assert!(!own.contains(b".ralphrc"));
        assert!(own.contains(b"docs/PROMPT.md"));
        assert!(!own.contains(b"PROMPT.md"));
        assert!(own.is_runtime(b".ralph/lock"));
        assert!(!own.is_runtime(b".ralph/handoffs/x.md"));
        assert!(own.is_runtime(b".ralph/handoffsx"));
        assert_eq!(
            root_relative(Path::new("/x"), Path::new("/x/P.md")),
            Some(b"P.md".to_vec())
        );
        assert_eq!(root_relative(Path::new("/x"), Path::new("../P.md")), None);
    }
}
