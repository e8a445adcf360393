//! WIP commits at checkpoints, and the checks that make them safe.
//!
//! Safety promises of [`Repo::wip_commit`]: it commits on the current branch with
//! HEAD as parent, never forces or rewrites history, never touches stashes, other
//! branches or work-tree files, never adds ignored files or ralph's runtime files
//! (`.ralph/` except `.ralph/handoffs/`), and when it cannot commit safely it
//! skips with a reason instead of failing the run. Git hooks are not run, and
//! nested repositories (a clone inside the tree) are left out of WIP commits.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use git2::{Config, DiffOptions, Repository, RepositoryState, Signature};
use serde::Serialize;
use tracing::{debug, trace};

use super::{LeftOut, Own, OwnPaths, Repo, bytes_to_path, is_hidden_entry, is_unborn};

/// Signature used when neither the environment nor git config names anyone:
/// CI machines and fresh containers often have no identity, and a checkpoint
/// must not be lost for that.
const FALLBACK_NAME: &str = "ralph";
const FALLBACK_EMAIL: &str = "ralph@localhost";

/// Result of [`Repo::wip_commit`]. Never an error: a checkpoint that cannot be
/// committed is reported, and the run goes on. Serialized as
/// `{"outcome": "committed", "id": …, "files": …}` for `--json` and the event log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CommitOutcome {
    Committed { id: String, files: usize },
    NothingToCommit,
    Skipped { reason: String },
}

/// How long a commit waits for another git's `index.lock` to go before it
/// skips: `git status` in another terminal holds it for a moment.
const INDEX_LOCK_WAIT: Duration = Duration::from_secs(2);

/// The branch this process's run commits on, by git directory (one per
/// work tree): HEAD's branch when the run started.
static RUN_BRANCHES: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());

impl Repo {
    /// This process's commits in this work tree go on HEAD's branch as it
    /// is now, and only there: should HEAD move to another branch during
    /// the run (the user switching branch in the checkout the agent works
    /// in, an agent's `git switch`), ralph's commits are skipped with the
    /// reason rather than put the night's work on that branch. A detached
    /// or unborn-less HEAD records nothing (detached is a blocker itself).
    pub(crate) fn commit_only_on_this_branch(&self) {
        let Some(branch) = self.branch() else { return };
        let key = self.git.path().to_path_buf();
        let mut runs = RUN_BRANCHES.lock().unwrap_or_else(|e| e.into_inner());
        runs.retain(|(dir, _)| *dir != key);
        runs.push((key, branch));
    }

    /// The branch recorded by [`Repo::commit_only_on_this_branch`] when
    /// HEAD is on another one now.
    fn left_run_branch(&self) -> Option<(String, String)> {
        let runs = RUN_BRANCHES.lock().unwrap_or_else(|e| e.into_inner());
        let (_, started) = runs.iter().find(|(dir, _)| dir == self.git.path())?;
        let now = self.branch()?;
        (now != *started).then(|| (started.clone(), now))
    }

    /// Why a WIP commit would not be safe right now, if it would not. Waits
    /// for the commit of another ralph run in this work tree to finish (it
    /// holds `index.lock` meanwhile, which is not a reason to skip).
    pub(crate) fn commit_blocker(&self) -> Option<String> {
        let _serialised = self.commit_lock();
        self.commit_blocker_serialised()
    }

    /// [`Repo::commit_blocker`] while this process holds the commit lock.
    fn commit_blocker_serialised(&self) -> Option<String> {
        if let Some(reason) = self.index_format_blocker() {
            return Some(reason);
        }
        let lock = self.git.path().join("index.lock");
        let deadline = Instant::now() + INDEX_LOCK_WAIT;
        while lock.exists() {
            if Instant::now() >= deadline {
                return Some(format!(
                    "another git process is running ({} exists); if none is, remove that file",
                    lock.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some((what, hint)) = operation_in_progress(self.git.state()) {
            return Some(format!(
                "a {what} is in progress; finish or abort it ({hint})"
            ));
        }
        match self.git.head_detached() {
            Ok(true) => Some(
                "HEAD is detached (not on a branch); check out a branch, e.g. `git switch -c ralph-wip`"
                    .into(),
            ),
            Ok(false) => self.left_run_branch().map(|(started, now)| {
                format!(
                    "HEAD moved from branch `{started}` to `{now}` during the run, and ralph commits only on the branch the run started on; the work stays in the work tree: `git switch {started}` (git carries it over) and `ralph run` commits it, or commit it on `{now}` yourself"
                )
            }),
            Err(e) => Some(format!("cannot read HEAD: {}", e.message())),
        }
    }

    /// WIP commit of the whole tree as it stands (staged, unstaged, untracked and
    /// deleted files; ignored files and ralph's runtime files left out) on the
    /// current branch. Git hooks are not run: a checkpoint must not be blocked by
    /// a linter on half-finished work.
    pub fn wip_commit(&self, message: &str, own: &OwnPaths) -> CommitOutcome {
        // One walk for the limits and the staging.
        let _pass = super::one_pass_to_commit(&self.root);
        // No limits, but never a secret.
        let secrets = self.left_out(own, &super::Guard::NONE).unwrap_or_default();
        self.wip_commit_leaving_out(message, own, &secrets, &super::Guard::NONE)
    }

    /// [`Repo::wip_commit`] without the files `left_out` names (a directory
    /// entry leaves out everything under it); they stay in the work tree,
    /// uncommitted and unstaged. `guard` is what `left_out` was judged
    /// under: a new file that grew past its `max_file_size` since (an agent
    /// still writing an output) is left out as well, judged as it is staged.
    pub(crate) fn wip_commit_leaving_out(
        &self,
        message: &str,
        own: &OwnPaths,
        left_out: &[LeftOut],
        guard: &super::Guard,
    ) -> CommitOutcome {
        // Runs of other projects in this work tree stage into the same index:
        // one at a time, and the checks made in turn.
        let _serialised = self.commit_lock();
        if let Some(reason) = self.commit_blocker_serialised() {
            debug!(%reason, "WIP commit skipped");
            return CommitOutcome::Skipped {
                reason: format!("no WIP commit: {reason}"),
            };
        }
        let mut own = self.own(own);
        own.leave_out(left_out);
        own.max_new_size = guard.max_file_size;
        match self.try_wip_commit(message, &own) {
            Ok(outcome) => {
                debug!(?outcome, "WIP commit");
                outcome
            }
            Err(e) => {
                debug!(error = %e, "WIP commit failed");
                CommitOutcome::Skipped {
                    reason: format!("no WIP commit: git error: {}", e.message()),
                }
            }
        }
    }

    /// A commit of the changes to tracked files only (new files stay
    /// untracked), with the WIP commit's rules: what the user left modified
    /// before a run, committed on its own so that the agent's first WIP
    /// commit holds only the agent's work. Returns the files it held.
    pub(crate) fn commit_tracked_changes(
        &self,
        message: &str,
        own: &OwnPaths,
    ) -> (CommitOutcome, Vec<String>) {
        let _pass = super::one_pass_to_commit(&self.root);
        let secrets = self.left_out(own, &super::Guard::NONE).unwrap_or_default();
        let files: Vec<String> = match self.changes(own) {
            Ok(changes) => changes
                .into_iter()
                .filter(|c| c.kind != "??" && !crate::text::secrets::is_key_file(&c.path))
                .filter(|c| !secrets.iter().any(|s| s.path == c.path))
                .map(|c| c.path)
                .collect(),
            Err(_) => Vec::new(),
        };
        if files.is_empty() {
            return (CommitOutcome::NothingToCommit, files);
        }
        let _serialised = self.commit_lock();
        if let Some(reason) = self.commit_blocker_serialised() {
            return (
                CommitOutcome::Skipped {
                    reason: format!("no commit: {reason}"),
                },
                files,
            );
        }
        let mut own = self.own(own);
        own.leave_out(&secrets);
        own.tracked_only = true;
        let outcome =
            self.try_wip_commit(message, &own)
                .unwrap_or_else(|e| CommitOutcome::Skipped {
                    reason: format!("no commit: git error: {}", e.message()),
                });
        (outcome, files)
    }

    fn try_wip_commit(
        &self,
        message: &str,
        own: &Own,
    ) -> std::result::Result<CommitOutcome, git2::Error> {
        let parent = match self.git.head() {
            Ok(head) => Some(head.peel_to_commit()?),
            Err(e) if is_unborn(&e) => None,
            Err(e) => return Err(e),
        };
        let mut index = self.git.index()?;
        // The agent may have run git itself: reload the index if it changed on
        // disk (git writes a new file, so its stamp always changes).
        index.read(false)?;
        if index.has_conflicts() {
            return Ok(CommitOutcome::Skipped {
                reason: "no WIP commit: the index has unresolved conflicts; resolve them and `git add` the files".into(),
            });
        }
        self.unstage_key_files(&mut index, parent.as_ref())?;
        let outcome = self.stage_and_commit(&mut index, parent.as_ref(), message, own);
        if !matches!(outcome, Ok(CommitOutcome::Committed { .. })) {
            // git2 shares this in-memory index with later status calls: drop what
            // add_all staged so they see the index on disk, not our discarded one.
            let _ = index.read(true);
        }
        outcome
    }

    /// Key files the agent staged itself (`git add -A`) go back to their
    /// state in HEAD: the WIP commit must not carry them either.
    fn unstage_key_files(
        &self,
        index: &mut git2::Index,
        parent: Option<&git2::Commit<'_>>,
    ) -> std::result::Result<(), git2::Error> {
        let head = parent.map(|c| c.tree()).transpose()?;
        let staged: Vec<std::path::PathBuf> = index
            .iter()
            .filter(|e| crate::text::secrets::is_key_file(&String::from_utf8_lossy(&e.path)))
            .filter(|e| {
                let in_head = head
                    .as_ref()
                    .and_then(|t| t.get_path(&bytes_to_path(&e.path)).ok());
                in_head.is_none_or(|h| h.id() != e.id)
            })
            .map(|e| bytes_to_path(&e.path))
            .collect();
        if !staged.is_empty() {
            self.git
                .reset_default(parent.map(|c| c.as_object()), &staged)?;
            index.read(true)?;
        }
        Ok(())
    }

    /// `git add -A` without ralph's runtime files: stage every change between
    /// index and work tree (new, modified, deleted; ignored files are never
    /// listed). One index-to-workdir diff finds them by stat, so unchanged
    /// files are not read; it also refreshes stale stat data in the index, so
    /// files that were only touched are hashed once, not at every checkpoint.
    /// (`Index::add_all` does the same walk but also loads every changed
    /// file's content for a patch it never uses.)
    ///
    /// [`Staging::Commit`]: the diff walks the whole tree for that refresh
    /// (a touched file is in no status, so not in the event's walk) unless
    /// the event's walk refreshed the index as it went (an event that may
    /// commit, `repo::one_pass_to_commit`); [`Staging::Tree`] looks only at
    /// the event's walk (`repo::walk`), refreshes nothing and keeps what
    /// each path was in `undo`.
    pub(super) fn stage_work_tree(
        &self,
        index: &mut git2::Index,
        own: &Own,
        mut staging: Staging<'_>,
    ) -> std::result::Result<usize, git2::Error> {
        let mut opts = DiffOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(true)
            .include_typechange(true)
            .disable_pathspec_match(true);
        match &staging {
            Staging::Commit if self.walk_refreshed() => self.restrict_to_walk(&mut opts),
            Staging::Commit => {
                // libgit2 writes the index after a diff that refreshed it:
                // only the one being committed.
                opts.update_index(true);
                super::walk::count_pass();
            }
            Staging::Tree(_) => self.restrict_to_walk(&mut opts),
        }
        if let Staging::Tree(undo) = &mut staging {
            for path in &own.held {
                undo.keep(index, path);
            }
        }
        self.hold_at_head(index, own)?;
        let diff = self
            .git
            .diff_index_to_workdir(Some(index), Some(&mut opts))?;
        let mut staged = 0;
        for delta in diff.deltas() {
            let Some(path) = delta
                .old_file()
                .path_bytes()
                .or(delta.new_file().path_bytes())
            else {
                continue;
            };
            // Only new files are ever left out: a tracked file's change under
            // a left-out directory is still work to commit.
            let new_file = delta.status() == git2::Delta::Untracked;
            // Key files (`.env`, `*.pem` …) never go into a commit, ignored or
            // not: the handoff lists them as left uncommitted.
            if own.is_runtime(path)
                || !own.in_scope(path)
                || (new_file && (own.tracked_only || own.is_left_out(path)))
                || (own.tracked_only && own.contains(path))
                || own.is_frozen(path)
                || own.is_held(path)
                || crate::text::secrets::is_key_file(&String::from_utf8_lossy(path))
            {
                continue;
            }
            // What `git add -A` leaves alone: entries outside a sparse
            // checkout (absent from the work tree, yet not deleted) and
            // entries marked assume-unchanged.
            if index
                .get_path(&bytes_to_path(path), 0)
                .is_some_and(|e| is_hidden_entry(&e))
            {
                continue;
            }
            // Untracked directories are listed file by file; one still ending in
            // `/` is a nested repository (say, a clone the agent made). libgit2
            // cannot add it and git would only record a bare gitlink, so leave
            // it out rather than lose the whole checkpoint.
            if path.ends_with(b"/") {
                debug!(path = %String::from_utf8_lossy(path), "nested repository left out of the WIP commit");
                continue;
            }
            if new_file
                && own.max_new_size > 0
                && fs::metadata(self.workdir().join(bytes_to_path(path)))
                    .is_ok_and(|m| m.len() > own.max_new_size)
            {
                debug!(path = %String::from_utf8_lossy(path), "grew over git.max_file_size since it was judged: left out");
                continue;
            }
            if let Staging::Tree(undo) = &mut staging {
                undo.keep(index, path);
            }
            stage_path(
                index,
                self.workdir(),
                &bytes_to_path(path),
                delta.new_file().exists(),
            )?;
            staged += 1;
        }
        // A `.ralph/.gitignore` older than the decision log ignores it:
        // stage it by name (as `git add -f` would).
        let decisions = bytes_to_path(&own.decisions);
        if !own.tracked_only && self.workdir().join(&decisions).is_file() {
            if let Staging::Tree(undo) = &mut staging {
                undo.keep(index, &own.decisions);
            }
            index.add_path(&decisions)?;
        }
        Ok(staged)
    }

    /// The files held out of this commit (`Own::held`: a secret in them)
    /// at HEAD's version in `index`, or out of it when HEAD has none: what
    /// the agent staged itself (`git add -A`) is not committed either.
    fn hold_at_head(
        &self,
        index: &mut git2::Index,
        own: &Own,
    ) -> std::result::Result<(), git2::Error> {
        if own.held.is_empty() {
            return Ok(());
        }
        let head = self.head_tree()?;
        for path in &own.held {
            let staged = index.get_path(&bytes_to_path(path), 0).map(|e| e.id);
            let at_head = head
                .as_ref()
                .and_then(|t| t.get_path(&bytes_to_path(path)).ok())
                .map(|e| (e.id(), e.filemode()));
            match (staged, at_head) {
                (Some(id), Some((head_id, _))) if id == head_id => {}
                (_, Some((id, mode))) => index.add(&git2::IndexEntry {
                    ctime: git2::IndexTime::new(0, 0),
                    mtime: git2::IndexTime::new(0, 0),
                    dev: 0,
                    ino: 0,
                    mode: mode as u32,
                    uid: 0,
                    gid: 0,
                    file_size: 0,
                    id,
                    flags: path.len().min(0xfff) as u16,
                    flags_extended: 0,
                    path: path.clone(),
                })?,
                (Some(_), None) => index.remove_path(&bytes_to_path(path))?,
                (None, None) => {}
            }
        }
        Ok(())
    }

    /// The tree of a project below the work tree's top: HEAD's tree outside
    /// the project's directory, the index inside it. What another project's
    /// agent staged in the shared index is not this commit's.
    pub(super) fn scoped_tree(
        &self,
        index: &git2::Index,
        head: Option<&git2::Tree<'_>>,
        scope: &[u8],
    ) -> std::result::Result<git2::Oid, git2::Error> {
        let mut tree = git2::Index::new()?;
        if let Some(head) = head {
            tree.read_tree(head)?;
        }
        let outside: Vec<git2::IndexEntry> =
            tree.iter().filter(|e| !e.path.starts_with(scope)).collect();
        tree.clear()?;
        for entry in outside
            .into_iter()
            .chain(index.iter().filter(|e| e.path.starts_with(scope)))
        {
            tree.add(&entry)?;
        }
        tree.write_tree_to(&self.git)
    }

    fn stage_and_commit(
        &self,
        index: &mut git2::Index,
        parent: Option<&git2::Commit<'_>>,
        message: &str,
        own: &Own,
    ) -> std::result::Result<CommitOutcome, git2::Error> {
        let staged = self.stage_work_tree(index, own, Staging::Commit)?;
        trace!(staged, "staged work-tree changes");
        let parent_tree = parent.map(|c| c.tree()).transpose()?;
        let tree_id = if own.scope.is_empty() {
            index.write_tree()?
        } else {
            self.scoped_tree(index, parent_tree.as_ref(), &own.scope)?
        };
        let unchanged = match &parent_tree {
            Some(tree) => tree.id() == tree_id,
            None => index.is_empty(),
        };
        if unchanged {
            return Ok(CommitOutcome::NothingToCommit);
        }
        let tree = self.git.find_tree(tree_id)?;
        // A file that became a symlink is one changed file, not a delete and an add.
        let mut count_opts = DiffOptions::new();
        count_opts.include_typechange(true);
        let files = super::diff_trees(
            &self.git,
            parent_tree.as_ref(),
            Some(&tree),
            Some(&mut count_opts),
        )?
        .deltas()
        .len();
        // Index before commit: if the commit then fails, the index merely has
        // everything staged (as after `git add -A`); the other order could leave
        // an index that disagrees with the new HEAD.
        index.write()?;
        let signature = signature(&self.git.config()?, |key| std::env::var(key).ok())?;
        let message = commit_message(message);
        let parents: Vec<&git2::Commit<'_>> = parent.into_iter().collect();
        // Updating "HEAD" moves the branch it points to; libgit2 refuses if the
        // branch tip is no longer `parent`, so a concurrent commit is never lost.
        let id = self.git.commit(
            Some("HEAD"),
            &signature.author,
            &signature.committer,
            &message,
            &tree,
            &parents,
        )?;
        Ok(CommitOutcome::Committed {
            id: id.to_string(),
            files,
        })
    }
}

/// Remove the lock files a WIP commit takes (the index, HEAD, refs and
/// their logs) after the supervisor that made it died inside it; only the
/// caller knows that they are its own. Returns them as `.git/…` paths.
pub(crate) fn remove_stale_commit_locks(root: &Path) -> Vec<String> {
    let Ok(git) = Repository::discover(root) else {
        return Vec::new();
    };
    let dir = git.path();
    let mut found = vec![dir.join("index.lock"), dir.join("HEAD.lock")];
    // Refs live in the common dir (a linked worktree's own dir has none).
    let common = git.commondir();
    let mut stack = vec![common.join("refs"), common.join("logs"), dir.join("logs")];
    stack.dedup();
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "lock") {
                found.push(path);
            }
        }
    }
    let shown = |p: &Path| {
        p.strip_prefix(git.workdir().unwrap_or(dir))
            .unwrap_or(p)
            .display()
            .to_string()
    };
    found
        .into_iter()
        .filter(|p| fs::remove_file(p).is_ok())
        .map(|p| shown(&p))
        .collect()
}

/// The operation a non-clean repository state means, with how to end it.
fn operation_in_progress(state: RepositoryState) -> Option<(&'static str, &'static str)> {
    use RepositoryState as S;
    Some(match state {
        S::Clean => return None,
        S::Merge => ("merge", "`git merge --continue` or `git merge --abort`"),
        S::Revert | S::RevertSequence => {
            ("revert", "`git revert --continue` or `git revert --abort`")
        }
        S::CherryPick | S::CherryPickSequence => (
            "cherry-pick",
            "`git cherry-pick --continue` or `git cherry-pick --abort`",
        ),
        S::Bisect => ("bisect", "`git bisect reset`"),
        S::Rebase | S::RebaseInteractive | S::RebaseMerge => {
            ("rebase", "`git rebase --continue` or `git rebase --abort`")
        }
        S::ApplyMailbox | S::ApplyMailboxOrRebase => {
            ("`git am`", "`git am --continue` or `git am --abort`")
        }
    })
}

/// (author, committer) of a commit ralph makes in `git` other than a WIP
/// commit (a worker branch's merge, the coordinator's plan commit), by the
/// same rules as the WIP commit's.
pub(crate) fn identities(
    git: &Repository,
) -> std::result::Result<(Signature<'static>, Signature<'static>), git2::Error> {
    let ids = signature(&git.config()?, |key| std::env::var(key).ok())?;
    Ok((ids.author, ids.committer))
}

struct Identities {
    author: Signature<'static>,
    committer: Signature<'static>,
}

/// Who commits, in git's order of precedence: `GIT_AUTHOR_*`/`GIT_COMMITTER_*`,
/// then `author.*`/`committer.*`, then `user.*` config, then ralph's fallback.
fn signature(
    config: &Config,
    env: impl Fn(&str) -> Option<String>,
) -> std::result::Result<Identities, git2::Error> {
    let lookup = |role: &str, field: &str, fallback: &str| -> String {
        let non_empty = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
        non_empty(env(&format!(
            "GIT_{}_{}",
            role.to_uppercase(),
            field.to_uppercase()
        )))
        .or_else(|| non_empty(config.get_string(&format!("{role}.{field}")).ok()))
        .or_else(|| non_empty(config.get_string(&format!("user.{field}")).ok()))
        .unwrap_or_else(|| fallback.to_string())
    };
    let make = |role: &str| {
        Signature::now(
            &lookup(role, "name", FALLBACK_NAME),
            &lookup(role, "email", FALLBACK_EMAIL),
        )
        // A configured name git2 rejects (e.g. one with `<`) must not cost the
        // checkpoint; the fallback is always valid.
        .or_else(|_| Signature::now(FALLBACK_NAME, FALLBACK_EMAIL))
    };
    Ok(Identities {
        author: make("author")?,
        committer: make("committer")?,
    })
}

/// Clean the message as `git commit` does (trailing whitespace, final newline).
fn commit_message(message: &str) -> String {
    let message = message.replace('\0', "");
    match git2::message_prettify(message.as_str(), None) {
        Ok(clean) if !clean.trim().is_empty() => clean,
        _ => "ralph: WIP checkpoint\n".into(),
    }
}

/// What [`Repo::stage_work_tree`] stages for.
pub(super) enum Staging<'a> {
    /// A commit, into the real index, which is written with it.
    Commit,
    /// A tree only (a snapshot's): into the repository's index in memory,
    /// every path's entries kept in the [`Undo`] first, to be put back.
    Tree(&'a mut Undo),
}

/// The index entries (all stages) of the paths a tree's staging changed,
/// as they were before: [`Undo::apply`] puts them back, so that the index
/// in memory is the file on disk again without reading it (100,000
/// entries and its checksum) or holding a second copy.
#[derive(Default)]
pub(super) struct Undo {
    kept: std::collections::HashMap<Vec<u8>, Vec<git2::IndexEntry>>,
    /// Entries before staging: a staged file where a tracked one named its
    /// directory drops that entry unasked (libgit2's file/directory check),
    /// which the count shows.
    entries: usize,
    /// Staging moves conflicts to the resolve-undo list, which no entry
    /// puts back.
    conflicts: bool,
}

impl Undo {
    pub(super) fn new(index: &git2::Index) -> Undo {
        Undo {
            entries: index.len(),
            conflicts: index.has_conflicts(),
            ..Undo::default()
        }
    }

    fn keep(&mut self, index: &git2::Index, path: &[u8]) {
        self.kept.entry(path.to_vec()).or_insert_with(|| {
            let file = bytes_to_path(path);
            (0..=3)
                .filter_map(|stage| index.get_path(&file, stage))
                .collect()
        });
    }

    /// The index as it was before staging: the kept entries back, or the
    /// file read again when that cannot be (entries dropped that none
    /// names, conflicts, an entry refused).
    pub(super) fn apply(self, index: &mut git2::Index) -> std::result::Result<(), git2::Error> {
        if !self.conflicts && self.put_back(index).is_ok() && index.len() == self.entries {
            return Ok(());
        }
        debug!("the index is read again after a snapshot's staging");
        index.read(true)
    }

    fn put_back(&self, index: &mut git2::Index) -> std::result::Result<(), git2::Error> {
        for (path, entries) in &self.kept {
            let file = bytes_to_path(path);
            for stage in 0..=3 {
                // Not there at this stage: nothing to remove.
                let _ = index.remove(&file, stage);
            }
            for entry in entries {
                index.add(entry)?;
            }
        }
        Ok(())
    }
}

/// Stage one path as the work tree has it. A file the diff saw that is gone
/// when it is read (the agent replaced or deleted it at that moment) is
/// staged as deleted: one vanished temporary file must not cost the whole
/// commit or snapshot.
fn stage_path(
    index: &mut git2::Index,
    workdir: &Path,
    path: &Path,
    exists: bool,
) -> std::result::Result<(), git2::Error> {
    if exists {
        match index.add_path(path) {
            Err(e) if fs::symlink_metadata(workdir.join(path)).is_err() => {
                debug!(path = %path.display(), "gone while staged ({e}): staged as deleted");
            }
            other => return other,
        }
    }
    index.remove_path(path)
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use tempfile::TempDir;

    use super::*;
    use crate::repo::repository::tests::*;
    use crate::repo::stat::FileChange;

    #[test]
    fn a_file_gone_when_it_is_staged_is_staged_as_deleted() {
        let (dir, git) = init_repo();
        write(dir.path(), "tmp.txt", "soon gone\n");
        let mut index = git.index().unwrap();
        index.add_path(Path::new("tmp.txt")).unwrap();
        // The diff saw it; the agent deleted it before it was read.
        fs::remove_file(dir.path().join("tmp.txt")).unwrap();
        stage_path(&mut index, dir.path(), Path::new("tmp.txt"), true).unwrap();
        assert!(index.get_path(Path::new("tmp.txt"), 0).is_none());
        // An error for a file that is there still counts.
        fs::create_dir(dir.path().join("adir")).unwrap();
        assert!(stage_path(&mut index, dir.path(), Path::new("adir"), true).is_err());
    }

    #[test]
    fn wip_commit_includes_the_decision_log_even_where_ralph_dir_is_ignored() {
        let (dir, git) = init_repo();
        let root = dir.path();
        // The `.ralph/.gitignore` of a project set up before the log existed.
        write(
            root,
            ".ralph/.gitignore",
            "*\n!.gitignore\n!handoffs/\n!handoffs/**\n",
        );
        commit_all(&git, "ralph dir");
        write(root, ".ralph/decisions.md", "# Decisions\n");
        write(root, ".ralph/state.json", "{}");
        write(root, "a.txt", "alpha changed\n");
        committed(open(root).wip_commit("ralph: checkpoint", &own()));
        let tree = head_files(&git);
        assert_eq!(tree[".ralph/decisions.md"], b"# Decisions\n");
        assert!(!tree.contains_key(".ralph/state.json"));
    }

    #[test]
    fn wip_commit_includes_untracked_modified_deleted_and_handoffs() {
        let (dir, git) = init_repo();
        let root = dir.path();
        write(root, ".gitignore", "*.log\nbuild/\n");
        commit_all(&git, "ignore");
        let before = git.head().unwrap().target().unwrap();
        write(root, "a.txt", "alpha changed\n");
        fs::remove_file(root.join("b.txt")).unwrap();
        write(root, "src/new.rs", "fn main() {}\n");
        write(root, "debug.log", "ignored\n");
        write(root, "build/out.bin", "ignored\n");
        write(root, ".ralph/state.json", "{}");
        write(root, ".ralph/events.jsonl", "{}\n");
        write(root, ".ralph/lock", "123");
        write(root, ".ralph/runs/r1/iter-001.jsonl", "{}\n");
        write(
            root,
            ".ralph/handoffs/2026-01-01-0000-iter001.md",
            "# handoff\n",
        );
        write(root, "PROMPT.md", "resume here\n");

        let (id, files) = committed(open(root).wip_commit("ralph: checkpoint", &own()));
        let head = git.head().unwrap();
        assert_eq!(head.target().unwrap().to_string(), id);
        let commit = head.peel_to_commit().unwrap();
        assert_eq!(commit.parent_ids().collect::<Vec<_>>(), [before]);
        assert_eq!(commit.message(), Some("ralph: checkpoint\n"));
        let tree = head_files(&git);
        let paths: Vec<&str> = tree.keys().map(String::as_str).collect();
        assert_eq!(
            paths,
            [
                ".gitignore",
                ".ralph/handoffs/2026-01-01-0000-iter001.md",
                "PROMPT.md",
                "a.txt",
                "src/new.rs"
            ]
        );
        assert_eq!(tree["a.txt"], b"alpha changed\n");
        // a.txt, b.txt (deleted), src/new.rs, the handoff and PROMPT.md.
        assert_eq!(files, 5);
        // The index now matches HEAD: only the runtime files remain untracked.
        let left: Vec<FileChange> = open(root).changes(&OwnPaths::new("none")).unwrap();
        assert!(
            left.iter()
                .all(|c| c.kind == "??" && c.path.starts_with(".ralph/")),
            "{left:?}"
        );
        assert_eq!(
            open(root).wip_commit("again", &own()),
            CommitOutcome::NothingToCommit
        );
    }

    #[test]
    fn wip_commit_never_adds_key_files_even_unignored_or_staged() {
        let (dir, git) = init_repo();
        let root = dir.path();
        write(root, "a.txt", "work\n");
        write(root, ".env", "API_KEY=sk-live\n");
        write(root, "certs/server.pem", "-----BEGIN PRIVATE KEY-----\n");
        write(root, ".ssh/id_rsa", "key\n");
        // Staged by the agent itself (`git add -A`).
        write(root, ".env.local", "TOKEN=x\n");
        let mut index = git.index().unwrap();
        index.add_path(Path::new(".env.local")).unwrap();
        index.write().unwrap();

        committed(open(root).wip_commit("ralph: checkpoint", &own()));
        let tree = head_files(&git);
        let paths: Vec<&str> = tree.keys().map(String::as_str).collect();
        assert!(paths.contains(&"a.txt"), "{paths:?}");
        for key in [".env", ".env.local", "certs/server.pem", ".ssh/id_rsa"] {
            assert!(!paths.contains(&key), "{key} committed: {paths:?}");
            assert!(root.join(key).exists(), "{key} left in place");
        }
        // Still there to commit by hand, none of them staged.
        let left = open(root).changes(&OwnPaths::new("none")).unwrap();
        assert_eq!(left.len(), 4, "{left:?}");
        assert!(left.iter().all(|c| c.kind == "??"), "{left:?}");
    }

    #[test]
    fn skip_worktree_and_assume_unchanged_entries_are_left_alone() {
        let (dir, git) = init_repo();
        let root = dir.path();
        let mut index = git.index().unwrap();
        for (path, flag) in [("a.txt", 0), ("b.txt", 1)] {
            let mut entry = index.get_path(Path::new(path), 0).unwrap();
            if flag == 0 {
                entry.flags_extended |= git2::IndexEntryExtendedFlag::SKIP_WORKTREE.bits();
                entry.flags |= git2::IndexEntryFlag::EXTENDED.bits();
            } else {
                entry.flags |= git2::IndexEntryFlag::VALID.bits();
            }
            index.add(&entry).unwrap();
        }
        index.write().unwrap();
        // Outside the sparse cone: absent, not deleted; assume-unchanged: edited.
        fs::remove_file(root.join("a.txt")).unwrap();
        write(root, "b.txt", "local tweak\n");
        assert!(open(root).changes(&own()).unwrap().is_empty());
        write(root, "c.txt", "work\n");
        let (_, files) = committed(open(root).wip_commit("wip", &own()));
        assert_eq!(files, 1);
        let tree = head_files(&git);
        assert_eq!(tree["a.txt"], b"alpha\n");
        assert_eq!(tree["b.txt"], b"beta\n");
        let mut index = git.index().unwrap();
        index.read(true).unwrap();
        let a = index.get_path(Path::new("a.txt"), 0).unwrap();
        assert_ne!(
            a.flags_extended & git2::IndexEntryExtendedFlag::SKIP_WORKTREE.bits(),
            0
        );
    }

    #[test]
    fn wip_commit_includes_staged_and_unstaged_work() {
        let (dir, git) = init_repo();
        let root = dir.path();
        write(root, "a.txt", "staged\n");
        let mut index = git.index().unwrap();
        index.add_path(Path::new("a.txt")).unwrap();
        index.remove_path(Path::new("b.txt")).unwrap();
        index.write().unwrap();
        fs::remove_file(root.join("b.txt")).unwrap();
        write(root, "a.txt", "staged then edited\n");
        committed(open(root).wip_commit("wip", &own()));
        let tree = head_files(&git);
        assert_eq!(tree["a.txt"], b"staged then edited\n");
        assert!(!tree.contains_key("b.txt"));
    }

    #[test]
    fn wip_commit_leaves_work_tree_branches_and_stash_alone() {
        let (dir, git) = init_repo();
        let root = dir.path();
        let head = git.head().unwrap().peel_to_commit().unwrap();
        git.branch("other", &head, false).unwrap();
        write(root, "a.txt", "changed\n");
        write(root, "c.txt", "new\n");
        write(root, ".ralph/state.json", "{}");
        let before = work_tree(root);
        committed(open(root).wip_commit("wip", &own()));
        assert_eq!(work_tree(root), before);
        let other = git.find_branch("other", git2::BranchType::Local).unwrap();
        assert_eq!(other.get().target(), Some(head.id()));
        assert!(git.find_reference("refs/stash").is_err());
    }

    #[test]
    fn nothing_to_commit_when_only_runtime_files_changed() {
        let (dir, git) = init_repo();
        let before = git.head().unwrap().target();
        write(dir.path(), ".ralph/state.json", "{}");
        write(dir.path(), ".ralph/runs/x/iter-001.jsonl", "{}");
        assert_eq!(
            open(dir.path()).wip_commit("wip", &own()),
            CommitOutcome::NothingToCommit
        );
        assert_eq!(git.head().unwrap().target(), before);
    }

    #[test]
    fn empty_repository_gets_a_root_commit() {
        let dir = tempfile::tempdir().unwrap();
        let git = Repository::init(dir.path()).unwrap();
        let repo = open(dir.path());
        assert_eq!(
            repo.wip_commit("wip", &own()),
            CommitOutcome::NothingToCommit
        );
        write(dir.path(), "first.txt", "hello\n");
        write(dir.path(), ".ralph/state.json", "{}");
        let (id, files) = committed(repo.wip_commit("wip", &own()));
        assert_eq!(files, 1);
        let commit = git.head().unwrap().peel_to_commit().unwrap();
        assert_eq!(commit.id().to_string(), id);
        assert_eq!(commit.parent_count(), 0);
        assert_eq!(head_files(&git).keys().collect::<Vec<_>>(), ["first.txt"]);
        assert_eq!(repo.head_id(), Some(id));
    }

    #[test]
    fn touched_files_get_fresh_stat_data_in_the_index() {
        let (dir, git) = init_repo();
        let touched = dir.path().join("b.txt");
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(3600);
        fs::File::options()
            .write(true)
            .open(&touched)
            .unwrap()
            .set_modified(later)
            .unwrap();
        write(dir.path(), "c.txt", "c");
        let (_, files) = committed(open(dir.path()).wip_commit("wip", &own()));
        // b.txt's content did not change: not committed, but its new mtime is
        // recorded so the next checkpoint does not hash it again.
        assert_eq!(files, 1);
        let mut index = git.index().unwrap();
        index.read(true).unwrap();
        let entry = index.get_path(Path::new("b.txt"), 0).unwrap();
        let mtime = later.duration_since(UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(i64::from(entry.mtime.seconds()), mtime as i64);
    }

    #[test]
    fn nested_repository_is_left_out_and_symlinks_commit() {
        let (dir, git) = init_repo();
        let root = dir.path();
        let nested = Repository::init(root.join("vendor/lib")).unwrap();
        write(root, "vendor/lib/x.txt", "x");
        commit_all(&nested, "nested");
        fs::remove_file(root.join("b.txt")).unwrap();
        std::os::unix::fs::symlink("a.txt", root.join("b.txt")).unwrap();
        let (_, files) = committed(open(root).wip_commit("wip", &own()));
        assert_eq!(files, 1);
        let tree = git.head().unwrap().peel_to_tree().unwrap();
        assert_eq!(tree.get_name("b.txt").unwrap().filemode(), 0o120000);
        assert!(tree.get_name("vendor").is_none());
    }

    #[test]
    fn odd_file_names_commit() {
        let (dir, git) = init_repo();
        let names = [
            "with space.txt",
            "new\nline.txt",
            "ünïcødé-日本語.md",
            "-leading-dash",
            "quote\"and'tick",
            "dir with space/ünï file",
        ];
        for name in names {
            write(dir.path(), name, name);
        }
        let (_, files) = committed(open(dir.path()).wip_commit("wip", &own()));
        assert_eq!(files, names.len());
        let tree = head_files(&git);
        for name in names {
            assert_eq!(tree[name], name.as_bytes(), "{name:?}");
        }
        assert!(open(dir.path()).changes(&own()).unwrap().is_empty());
    }

    fn assert_skipped_and_unchanged(root: &Path, git: &Repository, expect: &str) {
        write(root, "c.txt", "work\n");
        let before = git.head().unwrap().target();
        let reason = skipped(open(root).wip_commit("wip", &own()));
        assert!(reason.contains(expect), "{reason}");
        assert_eq!(git.head().unwrap().target(), before);
    }

    #[test]
    fn detached_head_is_skipped() {
        let (dir, git) = init_repo();
        git.set_head_detached(git.head().unwrap().target().unwrap())
            .unwrap();
        assert_skipped_and_unchanged(dir.path(), &git, "HEAD is detached");
    }

    /// The run's branch recorded, HEAD switched to another: skipped, the
    /// other branch untouched; back on the run's branch, committed.
    #[test]
    fn a_head_moved_off_the_runs_branch_is_skipped_until_it_is_back() {
        let (dir, git) = init_repo();
        let start = open(dir.path()).branch().unwrap();
        open(dir.path()).commit_only_on_this_branch();
        let tip = git.head().unwrap().peel_to_commit().unwrap();
        git.branch("other", &tip, false).unwrap();
        git.set_head("refs/heads/other").unwrap();
        assert_skipped_and_unchanged(
            dir.path(),
            &git,
            &format!("HEAD moved from branch `{start}` to `other` during the run"),
        );
        git.set_head(&format!("refs/heads/{start}")).unwrap();
        assert_eq!(committed(open(dir.path()).wip_commit("wip", &own())).1, 1);
        assert_eq!(git.refname_to_id("refs/heads/other").unwrap(), tip.id());
    }

    /// Another ralph run of this work tree (another project) is inside its
    /// WIP commit, holding the commit lock and git's index.lock: this one
    /// waits and commits after it instead of skipping.
    #[test]
    fn the_index_lock_of_another_runs_commit_is_waited_out() {
        let (dir, git) = init_repo();
        write(dir.path(), "a.txt", "work\n");
        let repo = open(dir.path());
        let index_lock = git.path().join("index.lock");
        let (held, go) = std::sync::mpsc::channel();
        let root = dir.path().to_path_buf();
        let committer = std::thread::spawn(move || {
            let other = open(&root);
            let _serialised = other.commit_lock();
            fs::write(other.git.path().join("index.lock"), "").unwrap();
            held.send(()).unwrap();
            // Longer than a foreign git's lock is waited for.
            std::thread::sleep(INDEX_LOCK_WAIT + Duration::from_millis(500));
            fs::remove_file(other.git.path().join("index.lock")).unwrap();
        });
        go.recv().unwrap();
        assert!(index_lock.exists());
        assert_eq!(repo.commit_blocker(), None);
        assert_eq!(committed(repo.wip_commit("wip", &own())).1, 1);
        committer.join().unwrap();
    }

    /// A foreign git's brief lock (`git status` elsewhere) is waited out.
    #[test]
    fn a_brief_index_lock_is_waited_out() {
        let (dir, git) = init_repo();
        write(dir.path(), "a.txt", "work\n");
        let index_lock = git.path().join("index.lock");
        fs::write(&index_lock, "").unwrap();
        let remover = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            fs::remove_file(index_lock).unwrap();
        });
        assert_eq!(committed(open(dir.path()).wip_commit("wip", &own())).1, 1);
        remover.join().unwrap();
    }

    #[test]
    fn index_lock_is_skipped() {
        let (dir, git) = init_repo();
        fs::write(git.path().join("index.lock"), "").unwrap();
        assert_skipped_and_unchanged(dir.path(), &git, "another git process is running");
        assert!(git.path().join("index.lock").exists());
    }

    #[test]
    fn merge_in_progress_is_skipped() {
        let (dir, git) = init_repo();
        let head = git.head().unwrap().target().unwrap();
        fs::write(git.path().join("MERGE_HEAD"), format!("{head}\n")).unwrap();
        assert_skipped_and_unchanged(dir.path(), &git, "merge is in progress");
    }

    #[test]
    fn cherry_pick_in_progress_is_skipped() {
        let (dir, git) = init_repo();
        let head = git.head().unwrap().target().unwrap();
        fs::write(git.path().join("CHERRY_PICK_HEAD"), format!("{head}\n")).unwrap();
        assert_skipped_and_unchanged(dir.path(), &git, "cherry-pick is in progress");
    }

    #[test]
    fn rebase_in_progress_is_skipped() {
        let (dir, git) = init_repo();
        fs::create_dir(git.path().join("rebase-merge")).unwrap();
        assert_skipped_and_unchanged(dir.path(), &git, "rebase is in progress");
    }

    #[test]
    fn configured_identity_is_used() {
        let (dir, git) = init_repo();
        write(dir.path(), "c.txt", "c");
        committed(open(dir.path()).wip_commit("wip", &own()));
        let commit = git.head().unwrap().peel_to_commit().unwrap();
        // The test process's environment may name someone, as git would honour.
        if std::env::var_os("GIT_AUTHOR_NAME").is_none() {
            assert_eq!(commit.author().name(), Some("Test User"));
        }
        if std::env::var_os("GIT_COMMITTER_EMAIL").is_none() {
            assert_eq!(commit.committer().email(), Some("test@example.com"));
        }
    }

    #[test]
    fn signature_falls_back_without_identity() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::open(&dir.path().join("config")).unwrap();
        let ids = signature(&config, |_| None).unwrap();
        assert_eq!(ids.author.name(), Some("ralph"));
        assert_eq!(ids.author.email(), Some("ralph@localhost"));
        assert_eq!(ids.committer.name(), Some("ralph"));
    }

    #[test]
    fn signature_prefers_environment_then_config() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::open(&dir.path().join("config")).unwrap();
        config.set_str("user.name", "Config Name").unwrap();
        config.set_str("user.email", "config@example.com").unwrap();
        let env = |key: &str| (key == "GIT_AUTHOR_NAME").then(|| "Env Author".to_string());
        let ids = signature(&config, env).unwrap();
        assert_eq!(ids.author.name(), Some("Env Author"));
        assert_eq!(ids.author.email(), Some("config@example.com"));
        assert_eq!(ids.committer.name(), Some("Config Name"));
    }

    #[test]
    fn commit_message_is_cleaned() {
        assert_eq!(commit_message("wip  \n\n\n"), "wip\n");
        assert_eq!(commit_message("  \n"), "ralph: WIP checkpoint\n");
        assert_eq!(commit_message("a\0b"), "ab\n");
    }

    /// The performance promise: a WIP commit of 1,000 changed files in a
    /// 10,000-file repository is no slower than `git add -A && git commit`.
    /// Run with `cargo test --release --lib -- --ignored wip_commit_speed`.
    #[test]
    #[ignore = "benchmark; needs the git CLI"]
    fn wip_commit_speed_matches_git() {
        use std::process::Command;
        use std::time::{Duration, Instant};
        fn setup() -> TempDir {
            let dir = tempfile::tempdir().unwrap();
            let (_, git) = (0, Repository::init(dir.path()).unwrap());
            let mut config = git.config().unwrap();
            config.set_str("user.name", "Bench").unwrap();
            config.set_str("user.email", "bench@example.com").unwrap();
            for i in 0..10_000 {
                let content = format!("file {i}\n{}", "line of text\n".repeat(20));
                write(dir.path(), &format!("d{}/f{i}.txt", i % 100), &content);
            }
            commit_all(&git, "base");
            for i in 0..500 {
                write(dir.path(), &format!("d{}/f{i}.txt", i % 100), "changed\n");
                write(dir.path(), &format!("new/n{i}.txt"), &format!("new {i}\n"));
            }
            dir
        }
        let git_cli = |dir: &Path, args: &[&str]| {
            let ok = Command::new("git")
                .arg("-C")
                .arg(dir)
                .args(args)
                .status()
                .unwrap();
            assert!(ok.success());
        };
        let mut ours = Duration::MAX;
        let mut theirs = Duration::MAX;
        for _ in 0..3 {
            let a = setup();
            let started = Instant::now();
            let (_, files) = committed(open(a.path()).wip_commit("wip", &own()));
            ours = ours.min(started.elapsed());
            assert_eq!(files, 1000);
            let b = setup();
            let started = Instant::now();
            git_cli(b.path(), &["add", "-A"]);
            git_cli(b.path(), &["commit", "-q", "--no-verify", "-m", "wip"]);
            theirs = theirs.min(started.elapsed());
        }
        eprintln!("ralph wip_commit: {ours:?}, git add -A && git commit: {theirs:?}");
        assert!(
            ours <= theirs.mul_f64(1.2) + Duration::from_millis(20),
            "{ours:?} vs {theirs:?}"
        );
    }
}
