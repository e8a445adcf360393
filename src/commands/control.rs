//! `ralph checkpoint` and `ralph stop`: requests to the running
//! supervisor (a signal, with `.ralph/control.json` for the reason), or a
//! checkpoint of the tree as it stands when no run is going.

use std::path::Path;

use crate::checkpoint::{self, Moment};
use crate::context::Level;
use crate::error::{Error, Result};
use crate::state::{self, Layout, Trigger};

/// What to write to `.ralph/control.json` for a running supervisor.
fn send_to_supervisor(
    layout: &Layout,
    sig: nix::sys::signal::Signal,
    reason: Option<&str>,
) -> Result<Option<i32>> {
    let Some(info) = state::running_supervisor(layout) else {
        return Ok(None);
    };
    if let Some(reason) = reason {
        let body = serde_json::json!({ "reason": reason }).to_string();
        state::write_atomic(&layout.control(), body.as_bytes())?;
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(info.pid), sig).map_err(|e| {
        Error::wrap(
            format!("cannot signal the supervisor (pid {})", info.pid),
            e,
        )
    })?;
    Ok(Some(info.pid))
}

pub fn checkpoint(root: &Path, reason: &str) -> Result<i32> {
    let layout = Layout::new(root);
    if let Some(pid) = send_to_supervisor(&layout, nix::sys::signal::Signal::SIGUSR1, Some(reason))?
    {
        println!(
            "asked the running supervisor (pid {pid}) to checkpoint now; it will ask the agent for its notes, commit and write a handoff"
        );
        return Ok(0);
    }
    let saved = checkpoint::perform_standalone(root, |_, state| Moment {
        iteration: state.iteration,
        trigger: Trigger::Manual,
        level: Level::L2,
        percent: 0.0,
        tokens: 0,
        usable: 0,
        window: state.context_window,
        reason: format!("checkpoint by hand with no run in progress ({reason})"),
        last_text: None,
        last_tools: Vec::new(),
        files_touched: Vec::new(),
        notes_path: None,
        stash_before: None,
    })?;
    for w in &saved.warnings {
        eprintln!("warning: {w}");
    }
    println!("no run in progress: checkpointed the tree as it stands");
    match (&saved.commit, &saved.commit_note) {
        (Some(c), _) => println!("  WIP commit {c}"),
        (None, Some(n)) => println!("  no commit: {n}"),
        _ => {}
    }
    match &saved.handoff {
        Some(h) => println!("  handoff {h}"),
        None => println!("  no handoff was written"),
    }
    Ok(if saved.handoff.is_some() { 0 } else { 1 })
}

pub fn stop(root: &Path) -> Result<i32> {
    let layout = Layout::new(root);
    match send_to_supervisor(&layout, nix::sys::signal::Signal::SIGUSR2, None)? {
        Some(pid) => {
            println!(
                "asked the running supervisor (pid {pid}) to finish the current iteration through a checkpoint and stop (exit 6)"
            );
            Ok(0)
        }
        None => Err(Error::usage("no ralph run is in progress here")
            .with_hint("`ralph status` shows the last run")),
    }
}
