//! `ralph statusline`: Claude Code's `statusLine` command. Whatever goes
//! wrong, it prints a line and exits 0: a status line must never fail.

use crate::commands::claude_code::{self, statusline};
use crate::error::Result;
use crate::project::Project;

pub(crate) fn statusline(project: &Project) -> Result<i32> {
    let root = project.root();
    let line = match claude_code::read_input() {
        Ok(input) => {
            let dir = input.dir().unwrap_or(root);
            let project = Project::find(dir);
            statusline::render(&statusline::view(&input, project.root()), color())
        }
        Err(why) => statusline::fallback(&crate::text::printable(&why)),
    };
    // One line that fits: a wrapped status line pushes Claude Code's prompt.
    // A column to spare: emoji widths differ between terminals.
    let line = match columns() {
        Some(width) => console::truncate_str(&line, width.saturating_sub(1), "…").into_owned(),
        None => line,
    };
    super::print_own(&format!("{line}\n"))?;
    Ok(0)
}

/// The terminal's width: `COLUMNS`, else the controlling terminal's (the
/// status line's stdout is Claude Code's pipe, not the terminal).
fn columns() -> Option<usize> {
    if let Some(n) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse().ok())
    {
        return Some(n).filter(|&n| n > 0);
    }
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()?;
    let term = console::Term::read_write_pair(tty.try_clone().ok()?, tty);
    term.size_checked().map(|(_, cols)| usize::from(cols))
}

/// Claude Code shows ANSI colours; https://no-color.org turns them off.
fn color() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
