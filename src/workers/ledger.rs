//! A parallel run's unmerged work holding a new run back: the policy over
//! `.ralph/workers.json` (the ledger itself is `formats::ledger`).

use std::path::Path;

use crate::error::{Error, Result};
use crate::formats::Ledger;

/// How to give up a parallel run's unmerged work, said where it holds a
/// new run back.
pub(crate) const THROW_AWAY: &str = "to throw that work away instead, `git worktree remove --force <worktree>` and `git branch -D <branch>` for each, then run again";

/// Refuse a single loop (`ralph run` without `--workers`) while a parallel
/// run has not ended and still has worker branches: their items' work sits
/// on those branches, and a single loop over the same plan would do it again.
pub(crate) fn refuse_a_single_loop(ralph_dir: &Path) -> Result<()> {
    let Some(ledger) = Ledger::load(ralph_dir)?.filter(|l| l.ended.is_none()) else {
        return Ok(());
    };
    let Ok(git) = git2::Repository::discover(ralph_dir) else {
        return Ok(());
    };
    let unmerged = ledger.unmerged(&git);
    if unmerged.is_empty() {
        return Ok(());
    }
    let branches: Vec<String> = unmerged
        .iter()
        .map(|a| format!("{} ({})", a.branch, crate::text::cut(&a.item, 60)))
        .collect();
    Err(Error::usage(format!(
        "the parallel run {} is not finished: worker branches not merged yet: {}",
        ledger.run_id,
        branches.join(", ")
    ))
    .with_hint(format!(
        "`ralph run --workers {}` finishes them; `ralph status` lists their commits; {THROW_AWAY}",
        ledger.workers.max(2)
    )))
}
