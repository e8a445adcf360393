//! What changed in the work tree: `git status`-like file lists and a
//! `git diff --stat`-like summary for prompts and handoffs.

use git2::{DiffOptions, Patch, Status};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

use super::{BIG_FILE, Own, OwnPaths, Repo, hidden_from_add, status_options};

/// `diff_stat` lists at most this many files (the summary line counts them all),
/// so a huge change does not flood a prompt or handoff.
const MAX_STAT_FILES: usize = 100;

/// One changed file as `git status` would list it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileChange {
    /// Path relative to the repository's working directory, `/`-separated.
    pub(crate) path: String,
    /// Short kind: "M", "A", "D", "R", "T", "U" (conflicted) or "??" (untracked).
    pub(crate) kind: String,
    /// The path before a staged rename.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) old_path: Option<String>,
}

impl Repo {
    /// Changed files (staged, unstaged and untracked; ignored files excluded),
    /// without ralph's own paths (all of `.ralph/` and the prompt file).
    pub(crate) fn changes(&self, own: &OwnPaths) -> Result<Vec<FileChange>> {
        let own = self.own(own);
        let statuses = self
            .statuses(&mut status_options(true))
            .map_err(|e| Error::wrap("cannot read git status", e))?;
        let index = self.git.index().ok();
        let mut out = Vec::new();
        for entry in statuses.iter() {
            let status = entry.status();
            if hidden_from_add(index.as_ref(), entry.path_bytes(), status) {
                continue;
            }
            // A staged rename is listed under its old path; report the new one.
            let renamed = entry
                .head_to_index()
                .filter(|_| status.contains(Status::INDEX_RENAMED));
            let (path, old_path) = match &renamed {
                Some(delta) => (
                    delta.new_file().path_bytes().unwrap_or(entry.path_bytes()),
                    delta.old_file().path_bytes(),
                ),
                None => (entry.path_bytes(), None),
            };
            if own.contains(path) {
                continue;
            }
            out.push(FileChange {
                path: String::from_utf8_lossy(path).into_owned(),
                kind: status_kind(status).to_string(),
                old_path: old_path.map(|p| String::from_utf8_lossy(p).into_owned()),
            });
        }
        Ok(out)
    }

    /// Changed files of the work tree outside the project's directory (a
    /// project below the work tree's top: `svc-a/`), which no commit of
    /// this run takes, as the project sees them (`../shared/util.py`).
    /// Empty for a project at the top.
    pub(crate) fn changes_outside(&self) -> Result<Vec<String>> {
        if self.prefix.is_empty() {
            return Ok(Vec::new());
        }
        let statuses = self
            .statuses(&mut status_options(false))
            .map_err(|e| Error::wrap("cannot read git status", e))?;
        let index = self.git.index().ok();
        let up = "../".repeat(self.prefix.iter().filter(|b| **b == b'/').count());
        Ok(statuses
            .iter()
            .filter(|e| !e.path_bytes().starts_with(&self.prefix))
            .filter(|e| !hidden_from_add(index.as_ref(), e.path_bytes(), e.status()))
            .map(|e| format!("{up}{}", super::display_path(e.path_bytes())))
            .collect())
    }

    /// `git diff --stat HEAD`-like summary of the working tree (untracked files
    /// included) against HEAD, without ralph's own paths; empty when clean.
    pub(crate) fn diff_stat(&self, own: &OwnPaths) -> Result<String> {
        self.try_diff_stat(&self.own(own))
            .map_err(|e| Error::wrap("cannot compute the diff against HEAD", e))
    }

    fn try_diff_stat(&self, own: &Own) -> std::result::Result<String, git2::Error> {
        let tree = self.head_tree()?;
        let mut opts = DiffOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(true)
            .show_untracked_content(true)
            .include_typechange(true)
            .max_size(BIG_FILE as i64);
        self.restrict_to_walk(&mut opts);
        let diff = self
            .git
            .diff_tree_to_workdir_with_index(tree.as_ref(), Some(&mut opts))?;
        let mut rows = Vec::new();
        for (idx, delta) in diff.deltas().enumerate() {
            let path = delta
                .new_file()
                .path_bytes()
                .or(delta.old_file().path_bytes())
                .unwrap_or_default();
            if own.contains(path) {
                continue;
            }
            // Only deltas we keep pay for loading their content.
            let lines = match Patch::from_diff(&diff, idx)? {
                Some(patch) if !delta.flags().is_binary() => {
                    let (_, added, removed) = patch.line_stats()?;
                    Some((added, removed))
                }
                _ => None,
            };
            rows.push(StatRow {
                path: display_path(path),
                lines,
            });
        }
        Ok(format_stat(&rows))
    }
}

fn status_kind(status: Status) -> &'static str {
    if status.is_conflicted() {
        "U"
    } else if status == Status::WT_NEW {
        "??"
    } else if status.intersects(Status::INDEX_RENAMED | Status::WT_RENAMED) {
        "R"
    } else if status.intersects(Status::INDEX_DELETED | Status::WT_DELETED) {
        "D"
    } else if status.intersects(Status::INDEX_NEW | Status::WT_NEW) {
        "A"
    } else if status.intersects(Status::INDEX_TYPECHANGE | Status::WT_TYPECHANGE) {
        "T"
    } else {
        "M"
    }
}

struct StatRow {
    path: String,
    /// (added, removed); None for binary or oversized files.
    lines: Option<(usize, usize)>,
}

/// Render rows like `git diff --stat`.
fn format_stat(rows: &[StatRow]) -> String {
    use std::fmt::Write as _;
    const BAR: usize = 40;
    const NAME: usize = 50;
    if rows.is_empty() {
        return String::new();
    }
    let shown = &rows[..rows.len().min(MAX_STAT_FILES)];
    let names: Vec<String> = shown.iter().map(|r| shorten(&r.path, NAME)).collect();
    let name_width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    let total = |r: &StatRow| r.lines.map_or(0, |(a, d)| a + d);
    let max_total = shown.iter().map(total).max().unwrap_or(0);
    let count_width = shown
        .iter()
        .map(|r| match r.lines {
            Some(_) => total(r).to_string().len(),
            None => 3,
        })
        .max()
        .unwrap_or(1);
    let mut out = String::new();
    for (row, name) in shown.iter().zip(&names) {
        let pad = name_width - name.chars().count();
        let _ = write!(out, " {name}{:pad$} | ", "");
        match row.lines {
            None => {
                let _ = writeln!(out, "{:>count_width$}", "Bin");
            }
            Some((added, removed)) => {
                let (plus, minus) = if max_total > BAR {
                    let scale = |n: usize| {
                        if n == 0 {
                            0
                        } else {
                            (n * (BAR - 1)) / max_total + 1
                        }
                    };
                    (scale(added), scale(removed))
                } else {
                    (added, removed)
                };
                let _ = writeln!(
                    out,
                    "{:>count_width$} {}{}",
                    added + removed,
                    "+".repeat(plus),
                    "-".repeat(minus)
                );
            }
        }
    }
    if rows.len() > shown.len() {
        let _ = writeln!(out, " ... and {} more files", rows.len() - shown.len());
    }
    let added: usize = rows.iter().filter_map(|r| r.lines).map(|(a, _)| a).sum();
    let removed: usize = rows.iter().filter_map(|r| r.lines).map(|(_, d)| d).sum();
    let plural = |n: usize, one: &str, many: &str| {
        if n == 1 {
            one.to_string()
        } else {
            many.to_string()
        }
    };
    let _ = write!(
        out,
        " {} {} changed",
        rows.len(),
        plural(rows.len(), "file", "files")
    );
    if added > 0 || removed == 0 {
        let _ = write!(
            out,
            ", {added} {}(+)",
            plural(added, "insertion", "insertions")
        );
    }
    if removed > 0 || added == 0 {
        let _ = write!(
            out,
            ", {removed} {}(-)",
            plural(removed, "deletion", "deletions")
        );
    }
    out.push('\n');
    out
}

/// Keep the tail of a long path, as `git diff --stat` does.
fn shorten(path: &str, max: usize) -> String {
    let count = path.chars().count();
    if count <= max {
        return path.to_string();
    }
    let tail: String = path.chars().skip(count - (max - 3)).collect();
    format!("...{tail}")
}

/// A path as one printable line: control characters (a newline in a file name)
/// would break the stat layout or a handoff's list, so such names are quoted
/// and escaped.
pub(crate) fn display_path(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    if text.chars().any(|c| c.is_control() || c == '"') {
        format!("{text:?}")
    } else {
        text.into_owned()
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;

    use super::*;
    use crate::repo::repository::tests::*;

    #[test]
    fn changes_lists_kinds_and_skips_own_and_ignored() {
        let (dir, git) = init_repo();
        let root = dir.path();
        write(root, ".gitignore", "*.log\n");
        commit_all(&git, "ignore logs");
        write(root, "a.txt", "alpha changed\n");
        fs::remove_file(root.join("b.txt")).unwrap();
        write(root, "new/c.txt", "gamma\n");
        write(root, "debug.log", "noise\n");
        write(root, ".ralph/state.json", "{}");
        write(root, ".ralph/handoffs/h.md", "notes");
        write(root, "PROMPT.md", "prompt");
        let changes = open(root).changes(&own()).unwrap();
        let got: Vec<(&str, &str)> = changes
            .iter()
            .map(|c| (c.path.as_str(), c.kind.as_str()))
            .collect();
        assert_eq!(got, [("a.txt", "M"), ("b.txt", "D"), ("new/c.txt", "??")]);
    }

    #[test]
    fn changes_reports_staged_rename_and_add() {
        let (dir, git) = init_repo();
        let root = dir.path();
        fs::rename(root.join("a.txt"), root.join("renamed.txt")).unwrap();
        write(root, "added.txt", "new\n");
        let mut index = git.index().unwrap();
        index.remove_path(Path::new("a.txt")).unwrap();
        index.add_path(Path::new("renamed.txt")).unwrap();
        index.add_path(Path::new("added.txt")).unwrap();
        index.write().unwrap();
        let changes = open(root).changes(&own()).unwrap();
        assert!(changes.contains(&FileChange {
            path: "added.txt".into(),
            kind: "A".into(),
            old_path: None
        }));
        assert!(changes.contains(&FileChange {
            path: "renamed.txt".into(),
            kind: "R".into(),
            old_path: Some("a.txt".into())
        }));
    }

    #[test]
    fn diff_stat_counts_lines_and_skips_own_paths() {
        let (dir, _git) = init_repo();
        let root = dir.path();
        write(root, "a.txt", "alpha\nmore\nlines\n");
        write(root, "c.txt", "one\ntwo\n");
        fs::remove_file(root.join("b.txt")).unwrap();
        write(root, ".ralph/state.json", "{}\n");
        write(root, "PROMPT.md", "prompt\n");
        let stat = open(root).diff_stat(&own()).unwrap();
        assert_eq!(
            stat,
            " a.txt | 2 ++\n b.txt | 1 -\n c.txt | 2 ++\n 3 files changed, 4 insertions(+), 1 deletion(-)\n"
        );
    }

    #[test]
    fn diff_stat_is_empty_when_clean() {
        let (dir, _git) = init_repo();
        write(dir.path(), ".ralph/state.json", "{}\n");
        assert_eq!(open(dir.path()).diff_stat(&own()).unwrap(), "");
    }

    #[test]
    fn format_stat_scales_bars_and_marks_binary() {
        let rows = [
            StatRow {
                path: "big.rs".into(),
                lines: Some((300, 100)),
            },
            StatRow {
                path: "img.png".into(),
                lines: None,
            },
        ];
        let text = format_stat(&rows);
        let first = text.lines().next().unwrap();
        assert!(first.starts_with(" big.rs  | 400 "), "{text}");
        assert!(first.len() < 80, "{text}");
        assert!(text.contains(" img.png | Bin\n"), "{text}");
        assert!(text.ends_with(" 2 files changed, 300 insertions(+), 100 deletions(-)\n"));
    }

    #[test]
    fn diff_stat_quotes_names_with_newlines() {
        let (dir, _git) = init_repo();
        write(dir.path(), "new\nline.txt", "x\n");
        let stat = open(dir.path()).diff_stat(&own()).unwrap();
        assert!(stat.starts_with(" \"new\\nline.txt\" | 1 +\n"), "{stat}");
    }
}
