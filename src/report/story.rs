//! What the night changed and how it was checked, as data: the [`Story`]
//! (filled from git by `changes.rs`), and the `[verify]` runs (the verify
//! lane) from the event log, with how the page and the text summary show
//! them. A leaf of `report`: the model holds these.

use std::fmt::Write as _;

use serde::Serialize;

use super::svg::esc;
use crate::formats::Event;
use crate::repo::{CommitLine, DiffStat};

/// What changed overnight, from git.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Story {
    /// HEAD when the run started and when it ended.
    pub(crate) start_commit: Option<String>,
    pub(crate) end_commit: Option<String>,
    /// What the run changed: the work tree when its first iteration
    /// started to the work tree when its last one ended (committed or
    /// not), ralph's own files aside.
    pub(crate) diffstat: Option<DiffStat>,
    /// What of that was left uncommitted at the end (`files: 0`: all of it
    /// is in `end_commit`).
    pub(crate) uncommitted: Option<DiffStat>,
    /// Commits the agent made, oldest first: every commit since the start
    /// but ralph's own (its WIP commits and the final commit at completion).
    pub(crate) agent_commits: Vec<CommitLine>,
    /// ralph's own commits since the start (as the state recorded them
    /// when git cannot tell).
    pub(crate) ralph_commits: usize,
    /// The commits were read from git (else the agent's are unknown).
    #[serde(skip)]
    pub(crate) commits_read: bool,
    /// A parallel run: a lane per worker and the merge queue's history
    /// (from the event log: `lanes.rs`).
    #[serde(skip_serializing_if = "super::lanes::Lanes::is_empty")]
    pub(crate) lanes: super::lanes::Lanes,
}

impl Story {
    /// The run's commits, the agent's and ralph's: the one count the
    /// report shows.
    pub(crate) fn commit_count(&self) -> usize {
        self.agent_commits.len() + self.ralph_commits
    }

    /// "0 by the agent, 2 by ralph".
    pub(crate) fn commits_by(&self) -> String {
        if !self.commits_read {
            return format!("{} by ralph, the agent's unknown", self.ralph_commits);
        }
        format!(
            "{} by the agent, {} by ralph",
            self.agent_commits.len(),
            self.ralph_commits
        )
    }

    /// The heads a run's state recorded; the rest is read from git.
    pub(crate) fn of(state: Option<&crate::formats::RunState>) -> Story {
        Story {
            start_commit: state.and_then(|s| s.start_commit.clone()),
            end_commit: state.and_then(|s| s.end_commit.clone()),
            ..Story::default()
        }
    }
}

/// What one iteration changed, its commits and its agent session: its
/// part of the story (flattened into its row of the report).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct IterationStory {
    /// Its agent session, the command that reopens it, HEAD at its end,
    /// the agent's commits in it.
    pub(crate) session_id: Option<String>,
    pub(crate) resume_command: Option<String>,
    pub(crate) head: Option<String>,
    pub(crate) agent_commits: Vec<CommitLine>,
    /// What it changed in the work tree, committed or not, ralph's own
    /// files aside (`None`: not recorded, or outside git).
    pub(crate) diffstat: Option<DiffStat>,
    /// What of the work tree was not committed when it ended (a later
    /// checkpoint or the final commit may have taken it).
    pub(crate) uncommitted: Option<DiffStat>,
    /// The work tree (tree ids) at its start and end, from the state.
    #[serde(skip)]
    pub(crate) tree_start: Option<String>,
    #[serde(skip)]
    pub(crate) tree_end: Option<String>,
}

impl IterationStory {
    /// What the state recorded; the rest is read from git.
    pub(crate) fn of(h: &crate::formats::IterationRecord) -> IterationStory {
        IterationStory {
            session_id: h.session_id.clone(),
            head: h.head.clone(),
            tree_start: h.tree_start.clone(),
            tree_end: h.tree_end.clone(),
            ..IterationStory::default()
        }
    }
}

/// One run of the `[verify]` commands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerifyRow {
    pub(crate) at: String,
    pub(crate) iteration: u32,
    /// `completion`, `item`, `checkpoint`.
    pub(crate) when: String,
    pub(crate) passed: bool,
    /// "verify passed (2 commands)", "verify failed: `make` exited with 2".
    pub(crate) summary: String,
    pub(crate) seconds: f64,
    /// The items checked off it verified.
    pub(crate) items: Vec<String>,
}

impl VerifyRow {
    /// The row of a `verify` event, if `event` is one.
    pub(crate) fn of(ts: &str, event: &Event) -> Option<VerifyRow> {
        let Event::Verify { verification: v } = event else {
            return None;
        };
        Some(VerifyRow {
            at: ts.to_string(),
            iteration: v.iteration,
            when: v.when.name().to_string(),
            passed: v.passed,
            summary: v.summary(),
            seconds: v.checks.iter().map(|c| c.seconds).sum(),
            items: v.items.clone(),
        })
    }
}

/// The verify lane of the page: one mark per run of the checks, in order,
/// and the failures listed.
pub(crate) fn verify_html(out: &mut String, rows: &[VerifyRow]) {
    let _ = write!(out, r#"<section class="verify"><h2>Verify</h2>"#);
    if rows.is_empty() {
        out.push_str(r#"<p class="none">No [verify] commands ran: "completed" rests on the agent's word.</p></section>"#);
        out.push('\n');
        return;
    }
    let passed = rows.iter().filter(|r| r.passed).count();
    let _ = write!(
        out,
        r#"<p>{} run(s) of the project's checks: {passed} passed, {} failed.</p><div class="lane">"#,
        rows.len(),
        rows.len() - passed
    );
    for r in rows {
        let _ = write!(
            out,
            r#"<span class="sw {}" title="{}"></span>"#,
            if r.passed { "o-done" } else { "o-fail" },
            esc(&format!(
                "iteration {} ({}): {}",
                r.iteration, r.when, r.summary
            ))
        );
    }
    out.push_str("</div><ul>");
    for r in rows {
        let _ = write!(
            out,
            "<li>iteration {} · {} · {} · {:.1}s{}</li>",
            r.iteration,
            esc(&r.when),
            esc(&r.summary),
            r.seconds,
            if r.items.is_empty() {
                String::new()
            } else {
                esc(&format!(" · {}", r.items.join(", ")))
            }
        );
    }
    out.push_str("</ul></section>\n");
}

/// The text summary's verify line: one mark per run (✓ passed, ✗ failed)
/// and the last result.
pub(crate) fn verify_text(rows: &[VerifyRow]) -> String {
    let Some(last) = rows.last() else {
        return format!(
            "{:<15}none configured: \"completed\" is the agent's word",
            "verify"
        );
    };
    let marks: String = rows
        .iter()
        .rev()
        .take(20)
        .rev()
        .map(|r| if r.passed { '✓' } else { '✗' })
        .collect();
    let failed = rows.iter().filter(|r| !r.passed).count();
    format!(
        "{:<15}{marks}  {} run(s), {failed} failed · last (iteration {}): {}",
        "verify",
        rows.len(),
        last.iteration,
        last.summary.trim_start_matches("verify ")
    )
}
