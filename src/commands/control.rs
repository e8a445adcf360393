//! `ralph checkpoint` and `ralph stop`: requests to the running
//! supervisor (a signal, with `.ralph/control.json` for the reason), or a
//! checkpoint of the tree as it stands when no run is going.

use serde::Serialize;

use super::Report;
use crate::checkpoint::Moment;
use crate::context::Level;
use crate::error::{Error, Result};
use crate::formats::{self, Layout, Trigger};
use crate::project::Project;

/// Signal the supervisor running at `layout` (with `.ralph/control.json`
/// for the reason): the one way `checkpoint`, `stop` and `ralph watch` ask.
pub(crate) fn send_to_supervisor(
    layout: &Layout,
    sig: nix::sys::signal::Signal,
    reason: Option<&str>,
) -> Result<Option<i32>> {
    let Some(info) = crate::project::running_supervisor(layout) else {
        return Ok(None);
    };
    if let Some(reason) = reason {
        let body = serde_json::json!({ "reason": reason }).to_string();
        formats::write_atomic(&layout.control(), body.as_bytes())?;
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(info.pid), sig).map_err(|e| {
        Error::wrap(
            format!("cannot signal the supervisor (pid {})", info.pid),
            e,
        )
    })?;
    Ok(Some(info.pid))
}

/// What `ralph checkpoint` did (`--json`: this object).
#[derive(Debug, Serialize)]
pub(crate) struct CheckpointReport {
    /// `requested` (a running supervisor was asked), `checkpointed`, or
    /// `clean` (no run and nothing changed: no handoff, no commit).
    pub(crate) outcome: &'static str,
    pub(crate) supervisor_pid: Option<i32>,
    pub(crate) commit: Option<String>,
    /// Why there is no commit, when there is none.
    pub(crate) commit_note: Option<String>,
    pub(crate) handoff: Option<String>,
    pub(crate) warnings: Vec<String>,
    /// The supervisor was waiting for a usage limit: no agent to ask.
    #[serde(skip)]
    pub(crate) waiting: bool,
}

impl Report for CheckpointReport {
    fn human(&self) -> String {
        match (self.outcome, self.supervisor_pid) {
            ("requested", Some(pid)) if self.waiting => format!(
                "asked the running supervisor (pid {pid}) to checkpoint now; it is waiting for a usage limit to reset and no agent runs: it will commit the tree as it stands and write a handoff\n"
            ),
            ("requested", Some(pid)) => format!(
                "asked the running supervisor (pid {pid}) to checkpoint now; it will ask the agent for its notes, commit and write a handoff\n"
            ),
            ("clean", _) => {
                "no run in progress and nothing changed since the last commit: nothing to checkpoint\n".into()
            }
            _ => {
                let mut out = "no run in progress: checkpointed the tree as it stands\n".to_string();
                match (&self.commit, &self.commit_note) {
                    (Some(c), _) => out.push_str(&format!("  WIP commit {c}\n")),
                    (None, Some(n)) => out.push_str(&format!("  no commit: {n}\n")),
                    _ => {}
                }
                match &self.handoff {
                    Some(h) => out.push_str(&format!("  handoff {h}\n")),
                    None => out.push_str("  no handoff was written\n"),
                }
                out
            }
        }
    }
}

pub(crate) fn checkpoint(project: &Project, reason: &str, json: bool) -> Result<i32> {
    let root = project.root();
    let layout = project.layout();
    let mut report = CheckpointReport {
        outcome: "requested",
        supervisor_pid: None,
        commit: None,
        commit_note: None,
        handoff: None,
        warnings: Vec::new(),
        waiting: false,
    };
    if let Some(pid) = send_to_supervisor(layout, nix::sys::signal::Signal::SIGUSR1, Some(reason))?
    {
        report.supervisor_pid = Some(pid);
        report.waiting = crate::formats::RunState::load(&layout.state())
            .ok()
            .flatten()
            .is_some_and(|s| s.status == crate::formats::RunStatus::Waiting);
        super::print(&report.render(json))?;
        return Ok(0);
    }
    // A clean tree has nothing to save: a handoff alone, committed each
    // time, would only pile up.
    let config = project.config()?;
    let own = crate::repo::OwnPaths::new(config.prompt_file.clone());
    if let Ok(Some(repo)) = crate::repo::Repo::open(root)
        && repo.changes(&own).is_ok_and(|c| c.is_empty())
    {
        report.outcome = "clean";
        super::print(&report.render(json))?;
        return Ok(0);
    }
    let saved = crate::supervisor::checkpoint_outside_a_run(root, |_, state| Moment {
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
        unasked: None,
        stash_before: None,
        item: None,
        item_done: false,
    })?;
    for w in &saved.warnings {
        eprintln!("warning: {w}");
    }
    report.outcome = "checkpointed";
    report.commit = saved.commit;
    report.commit_note = saved.commit_note;
    report.warnings = saved.warnings;
    report.handoff = saved.handoff;
    super::print(&report.render(json))?;
    Ok(if report.handoff.is_some() { 0 } else { 1 })
}

/// What `ralph stop` did (`--json`: this object).
#[derive(Debug, Serialize)]
pub(crate) struct StopReport {
    pub(crate) supervisor_pid: i32,
}

impl Report for StopReport {
    fn human(&self) -> String {
        format!(
            "asked the running supervisor (pid {}) to finish the current iteration through a checkpoint and stop (exit 6)\n",
            self.supervisor_pid
        )
    }
}

pub(crate) fn stop(project: &Project, json: bool) -> Result<i32> {
    let layout = project.layout();
    match send_to_supervisor(layout, nix::sys::signal::Signal::SIGUSR2, None)? {
        Some(pid) => {
            super::print(
                &StopReport {
                    supervisor_pid: pid,
                }
                .render(json),
            )?;
            Ok(0)
        }
        None => Err(Error::usage("no ralph run is in progress here")
            .with_hint("`ralph status` shows the last run")),
    }
}
