//! What the night changed and how it was checked: the start commit, the
//! agent's own commits and the diffstat since the start and per iteration
//! (read from git: [`read_git`], the one IO here), each iteration's agent
//! session and the command to reopen it, and the `[verify]` runs (the
//! verify lane) from the event log; how the page and the text summary
//! show them.

use std::fmt::Write as _;

use serde::Serialize;

use super::model::RunReport;
use super::svg::esc;
use crate::config::AgentKind;
use crate::events::Event;
use crate::repo::{CommitLine, DiffStat, Repo};

/// Agent commits listed on the text summary (the page and `--json` list all).
const TEXT_COMMITS: usize = 8;

/// What changed overnight, from git.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Story {
    /// HEAD when the run started and when it ended.
    pub start_commit: Option<String>,
    pub end_commit: Option<String>,
    /// The diffstat from the start commit to the end (or the last
    /// iteration's HEAD while the run goes on).
    pub diffstat: Option<DiffStat>,
    /// Commits the agent made, oldest first: every commit since the start
    /// but ralph's own (its WIP commits and the final commit at completion).
    pub agent_commits: Vec<CommitLine>,
    /// ralph's own commits since the start.
    pub ralph_commits: usize,
}

/// How to reopen an agent session by its id, for the kinds whose CLI can.
pub fn resume_command(kind: AgentKind, session: &str) -> Option<String> {
    match kind {
        AgentKind::Claude => Some(format!("claude --resume {session}")),
        AgentKind::Codex => Some(format!("codex resume {session}")),
        AgentKind::Opencode => Some(format!("opencode --session {session}")),
        AgentKind::Gemini => None,
    }
}

/// Fill the story of `r` from the repository at `root`: commits and
/// diffstats between the heads the run recorded, and the commands that
/// reopen each iteration's session. Without a repository (or with a
/// history rewritten since) the commits stay unknown.
pub fn read_git(r: &mut RunReport, root: &std::path::Path, kind: AgentKind) {
    for row in &mut r.iterations {
        row.resume_command = row
            .session_id
            .as_deref()
            .and_then(|s| resume_command(kind, s));
    }
    let Some(start) = r.story.start_commit.clone() else {
        return;
    };
    let Ok(Some(repo)) = Repo::open(root) else {
        return;
    };
    let last_head = r.iterations.iter().rev().find_map(|i| i.head.clone());
    let Some(end) = r.story.end_commit.clone().or_else(|| last_head.clone()) else {
        return;
    };
    r.story.diffstat = repo.diff_stat_between(&start, &end);
    // ralph's own: the WIP commits it recorded, and whatever came after
    // the last iteration (only ralph commits then: the final commit).
    let mut ralph: Vec<String> = r.commits.clone();
    if let Some(last) = &last_head {
        ralph.extend(
            (repo.commits_between(last, &end).unwrap_or_default())
                .into_iter()
                .map(|c| c.id),
        );
    }
    let mine = |c: &CommitLine| ralph.contains(&c.id);
    let all = repo.commits_between(&start, &end).unwrap_or_default();
    r.story.ralph_commits = all.iter().filter(|c| mine(c)).count();
    r.story.agent_commits = all.into_iter().filter(|c| !mine(c)).collect();
    let mut before = start;
    for row in &mut r.iterations {
        let Some(head) = row.head.clone() else {
            continue;
        };
        row.diffstat = repo.diff_stat_between(&before, &head);
        row.agent_commits = (repo.commits_between(&before, &head).unwrap_or_default())
            .into_iter()
            .filter(|c| !mine(c))
            .collect();
        before = head;
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(10)]
}

/// The text summary's lines on what changed: the start commit, the
/// diffstat, the agent's commits (the newest few), the sessions to reopen.
pub(crate) fn changes_text(r: &RunReport) -> Vec<String> {
    let s = &r.story;
    let Some(start) = &s.start_commit else {
        return vec![format!(
            "{:<15}not recorded (no git repository, or an older run)",
            "changes"
        )];
    };
    let mut out = vec![format!(
        "{:<15}since {}{}: {}",
        "changes",
        short(start),
        s.end_commit
            .as_deref()
            .map(|e| format!(" → {}", short(e)))
            .unwrap_or_default(),
        s.diffstat.map_or("diff unknown".to_string(), |d| d.line())
    )];
    out.push(format!(
        "{:<15}{} by the agent, {} by ralph",
        "commits",
        s.agent_commits.len(),
        s.ralph_commits
    ));
    let skip = s.agent_commits.len().saturating_sub(TEXT_COMMITS);
    if skip > 0 {
        out.push(format!("{:<15}… {skip} earlier", ""));
    }
    for c in &s.agent_commits[skip..] {
        out.push(format!("{:<15}{} {}", "", short(&c.id), c.summary));
    }
    out
}

/// The iterations' sessions and how to reopen each (text summary).
pub(crate) fn sessions_text(r: &RunReport) -> Vec<String> {
    let rows: Vec<_> = r
        .iterations
        .iter()
        .filter(|i| i.session_id.is_some())
        .collect();
    let skip = rows.len().saturating_sub(TEXT_COMMITS);
    let mut out = Vec::new();
    if skip > 0 {
        out.push(format!(
            "      … {skip} earlier session(s): see the page or --json"
        ));
    }
    for i in &rows[skip..] {
        let id = i.session_id.as_deref().unwrap_or_default();
        let stat = i
            .diffstat
            .map(|d| format!(" · {}", d.line()))
            .unwrap_or_default();
        out.push(format!(
            "{:>4}  {}{stat}",
            i.iteration,
            i.resume_command
                .clone()
                .unwrap_or_else(|| format!("session {id}"))
        ));
    }
    out
}

/// The page's "What changed" section.
pub(crate) fn changes_html(out: &mut String, r: &RunReport) {
    let s = &r.story;
    let _ = write!(out, r#"<section class="changes"><h2>What changed</h2>"#);
    match &s.start_commit {
        None => out.push_str(
            r#"<p class="none">No start commit recorded (no git repository, or an older run).</p>"#,
        ),
        Some(start) => {
            let _ = write!(
                out,
                "<p>Since <code>{}</code>{}: {} · {} commit(s) by the agent, {} by ralph.</p>",
                esc(short(start)),
                s.end_commit
                    .as_deref()
                    .map(|e| format!(" to <code>{}</code>", esc(short(e))))
                    .unwrap_or_default(),
                esc(&s.diffstat.map_or("diff unknown".to_string(), |d| d.line())),
                s.agent_commits.len(),
                s.ralph_commits
            );
            if !s.agent_commits.is_empty() {
                out.push_str("<ul>");
                for c in &s.agent_commits {
                    let _ = write!(
                        out,
                        "<li><code>{}</code> {}</li>",
                        esc(short(&c.id)),
                        esc(&c.summary)
                    );
                }
                out.push_str("</ul>");
            }
        }
    }
    let rows: Vec<_> = r
        .iterations
        .iter()
        .filter(|i| i.session_id.is_some() || i.diffstat.is_some())
        .collect();
    if !rows.is_empty() {
        out.push_str("<table><thead><tr><th>#</th><th>committed</th><th>agent commits</th><th>reopen the session</th></tr></thead><tbody>");
        for i in rows {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                i.iteration,
                esc(&i.diffstat.map_or("-".to_string(), |d| d.line())),
                esc(&i
                    .agent_commits
                    .iter()
                    .map(|c| c.summary.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")),
                esc(i
                    .resume_command
                    .as_deref()
                    .or(i.session_id.as_deref())
                    .unwrap_or("-"))
            );
        }
        out.push_str("</tbody></table>");
    }
    out.push_str(
        "</section>
",
    );
}

/// One run of the `[verify]` commands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerifyRow {
    pub at: String,
    pub iteration: u32,
    /// `completion`, `item`, `checkpoint`.
    pub when: String,
    pub passed: bool,
    /// "verify passed (2 commands)", "verify failed: `make` exited with 2".
    pub summary: String,
    pub seconds: f64,
    /// The items checked off it verified.
    pub items: Vec<String>,
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
