//! Conditions that make every WIP commit of a run skip, found before the
//! run (`ralph doctor`) and named with their fix: an index libgit2 cannot
//! read (split index, sparse index) and a detached HEAD.

use serde::Serialize;

use super::Repo;

/// One condition that will skip WIP commits, and what fixes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Blocker {
    pub(crate) what: String,
    pub(crate) fix: String,
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
            });
        }
        if unreadable.as_deref() == Some("sdir") || flag("index.sparse") {
            out.push(Blocker {
                what: "the index is sparse (index.sparse), which libgit2 cannot read".into(),
                fix: SPARSE_FIX.into(),
            });
        }
        if self.git.head_detached().unwrap_or(false) {
            out.push(Blocker {
                what: "HEAD is detached (not on a branch)".into(),
                fix: "`git switch -c ralph-wip` (or check out your branch)".into(),
            });
        }
        out
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
        // A fresh handle: the shared one may hold an index read before the
        // agent's git rewrote it.
        let git = git2::Repository::open(self.git.path()).ok()?;
        let e = git.index().err()?;
        let message = e.message();
        let rest = message.split("unsupported mandatory extension: '").nth(1)?;
        Some(rest.chars().take(4).collect())
    }
}
