//! What the night changed and how it was checked, as data: the [`Story`]
//! (filled from git by `changes.rs`), and the `[verify]` runs (the verify
//! lane) from the event log, with how the page and the text summary show
//! them. A leaf of `report`: the model holds these.

use std::fmt::Write as _;

use serde::Serialize;

use super::svg::esc;
use crate::events::Event;
use crate::repo::{CommitLine, DiffStat};

/// What changed overnight, from git.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Story {
    /// HEAD when the run started and when it ended.
    pub(crate) start_commit: Option<String>,
    pub(crate) end_commit: Option<String>,
    /// The diffstat from the start commit to the end (or the last
    /// iteration's HEAD while the run goes on).
    pub(crate) diffstat: Option<DiffStat>,
    /// Commits the agent made, oldest first: every commit since the start
    /// but ralph's own (its WIP commits and the final commit at completion).
    pub(crate) agent_commits: Vec<CommitLine>,
    /// ralph's own commits since the start.
    pub(crate) ralph_commits: usize,
    /// A parallel run: a lane per worker and the merge queue's history
    /// (from the event log: `lanes.rs`).
    #[serde(skip_serializing_if = "super::lanes::Lanes::is_empty")]
    pub(crate) lanes: super::lanes::Lanes,
}

impl Story {
    /// The heads a run's state recorded; the rest is read from git.
    pub(crate) fn of(state: Option<&crate::state::RunState>) -> Story {
        Story {
            start_commit: state.and_then(|s| s.start_commit.clone()),
            end_commit: state.and_then(|s| s.end_commit.clone()),
            ..Story::default()
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
