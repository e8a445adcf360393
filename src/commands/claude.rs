//! `ralph init --claude`: ralph's status line and its `PreCompact` and
//! `SessionStart` hooks merged into the project's `.claude/settings.json`,
//! with the diff of what changed. A second run changes nothing.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::Report;
use crate::commands::claude_code::settings::{self, PATH};
use crate::error::{Error, Result};

/// The program the settings run: `ralph` from the PATH, so that the
/// committed settings work for everyone who installed ralph.
const PROGRAM: &str = "ralph";

/// What `ralph init --claude` did (`--json`: this object).
#[derive(Debug, Serialize)]
pub(crate) struct ClaudeInitReport {
    pub(crate) settings: &'static str,
    /// Whether the file was written.
    pub(crate) changed: bool,
    pub(crate) added: Vec<&'static str>,
    pub(crate) already_installed: Vec<&'static str>,
    /// What was left alone, and why.
    pub(crate) left: Vec<String>,
    /// Unified diff of the change (empty when nothing changed).
    pub(crate) diff: String,
}

impl Report for ClaudeInitReport {
    fn human(&self) -> String {
        let mut out = self.diff.clone();
        for part in &self.added {
            let _ = writeln!(out, "added     {part} in {PATH}");
        }
        for part in &self.already_installed {
            let _ = writeln!(out, "unchanged {part} in {PATH} (already installed)");
        }
        for why in &self.left {
            let _ = writeln!(out, "left      {why}");
        }
        out.push_str(if self.changed {
            "next: commit .claude/settings.json; Claude Code picks it up in its next session (`ralph` must be on the PATH)\n"
        } else {
            "nothing to change\n"
        });
        out
    }
}

pub(crate) fn init_claude(root: &Path, json: bool) -> Result<i32> {
    let dir = root.join(".claude");
    if dir.exists() && !dir.is_dir() {
        return Err(Error::usage(format!(
            "cannot add ralph to {PATH}: {} is a file, not a directory; nothing was written",
            dir.display()
        ))
        .with_hint("move that file away (Claude Code keeps its project settings in the .claude/ directory), then run `ralph init --claude` again"));
    }
    let path = root.join(PATH);
    let old = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io("cannot read", &path, e)),
    };
    let merge = settings::merge(old.as_deref(), PROGRAM).map_err(|why| {
        Error::usage(format!(
            "cannot add ralph to {PATH}: {why}; nothing was written"
        ))
        .with_hint(format!(
            "fix {PATH} by hand (or move it away), then run `ralph init --claude` again"
        ))
    })?;
    let diff = match &merge.text {
        Some(new) => {
            std::fs::create_dir_all(&dir).map_err(|e| Error::io("cannot create", &dir, e))?;
            std::fs::write(&path, new).map_err(|e| Error::io("cannot write", &path, e))?;
            settings::diff(old.as_deref().unwrap_or(""), new)
        }
        None => String::new(),
    };
    let report = ClaudeInitReport {
        settings: PATH,
        changed: merge.text.is_some(),
        added: merge.added,
        already_installed: merge.present,
        left: merge.left,
        diff,
    };
    super::print(&report.render(json))?;
    Ok(0)
}
