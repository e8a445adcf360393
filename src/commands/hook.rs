//! `ralph hook pre-compact|session-start`: Claude Code's `PreCompact` and
//! `SessionStart` hooks. They never block a session: every error is a line
//! on stderr and exit 0, so Claude Code goes on (and compacts).

use crate::cli::HookEvent;
use crate::commands::claude_code::{self, hook::Outcome};
use crate::error::Result;
use crate::project::Project;

pub(crate) fn hook(project: &Project, event: HookEvent) -> Result<i32> {
    let root = project.root();
    let input = match claude_code::read_input() {
        Ok(i) => i,
        Err(why) => {
            eprintln!("ralph: {why}; nothing done");
            return Ok(0);
        }
    };
    let dir = input.dir().unwrap_or(root).to_path_buf();
    match event {
        HookEvent::PreCompact => match claude_code::hook::pre_compact(&input, &dir) {
            Ok(Outcome::Done(summary)) => super::print(&format!("{summary}\n"))?,
            Ok(Outcome::Skipped(why)) => eprintln!("ralph: {why}; nothing done"),
            Err(e) => eprint!("ralph: the pre-compact checkpoint failed\n{}", e.render()),
        },
        HookEvent::SessionStart => match claude_code::hook::session_start(&input, &dir) {
            Ok(output) => super::print(&format!(
                "{}\n",
                serde_json::to_string(&output).expect("hook output serializes")
            ))?,
            Err(why) => eprintln!("ralph: {why}: no resume block"),
        },
    }
    Ok(0)
}
