//! `ralph statusline`: Claude Code's `statusLine` command. Whatever goes
//! wrong, it prints a line and exits 0: a status line must never fail.

use crate::claude_code::{self, statusline};
use crate::error::Result;
use crate::project::Project;

pub fn statusline(project: &Project) -> Result<i32> {
    let root = project.root();
    let line = match claude_code::read_input() {
        Ok(input) => {
            let dir = input.dir().unwrap_or(root);
            let project = Project::find(dir);
            statusline::render(&statusline::view(&input, project.root()), color())
        }
        Err(why) => statusline::fallback(&why),
    };
    super::print(&format!("{line}\n"))?;
    Ok(0)
}

/// Claude Code shows ANSI colours; https://no-color.org turns them off.
fn color() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
