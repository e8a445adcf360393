//! `[workers]` in `ralph.toml` (docs/workers.md). A leaf.

use serde::{Deserialize, Serialize};

/// `[workers]`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct WorkersConfig {
    /// Workers `ralph run` starts (`--workers N` wins); 1 is a single loop.
    pub(crate) count: u32,
    /// The most worktrees a run may hold at once (each worker has one).
    pub(crate) max_worktrees: u32,
    /// Merges of one item tried (each failed one hands the conflict back to
    /// a worker) before the item is left to a person (`needs_human`).
    pub(crate) conflict_attempts: u32,
    /// Where the workers' worktrees go, relative to the project; default
    /// `.ralph/worktrees` (out of git, removed with the project).
    pub(crate) dir: Option<std::path::PathBuf>,
}

impl Default for WorkersConfig {
    fn default() -> Self {
        WorkersConfig {
            count: 1,
            max_worktrees: 8,
            conflict_attempts: 3,
            dir: None,
        }
    }
}

impl WorkersConfig {
    /// The first wrong key and why.
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        if self.count == 0 {
            return Err(("count", "must be at least 1".into()));
        }
        if self.max_worktrees == 0 {
            return Err(("max_worktrees", "must be at least 1".into()));
        }
        if self.conflict_attempts == 0 {
            return Err(("conflict_attempts", "must be at least 1".into()));
        }
        Ok(())
    }

    /// How many workers `requested` (or `count`) gives, or why not: more
    /// than `max_worktrees` is refused, not cut down in silence.
    pub(crate) fn workers(&self, requested: Option<u32>) -> Result<u32, String> {
        let n = requested.unwrap_or(self.count);
        if n == 0 {
            return Err("--workers must be at least 1".into());
        }
        if n > self.max_worktrees {
            return Err(format!(
                "{n} workers need {n} worktrees; [workers] max_worktrees is {}",
                self.max_worktrees
            ));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worktree_limit_refuses_with_the_numbers() {
        let c = WorkersConfig::default();
        assert_eq!(c.workers(None), Ok(1));
        assert_eq!(c.workers(Some(3)), Ok(3));
        let err = c.workers(Some(9)).unwrap_err();
        assert!(
            err.contains("9 workers") && err.contains("max_worktrees is 8"),
            "{err}"
        );
        assert!(c.workers(Some(0)).is_err());
        let bad = WorkersConfig { count: 0, ..c };
        assert_eq!(bad.check().unwrap_err().0, "count");
    }
}
