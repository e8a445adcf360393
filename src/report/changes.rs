//! What changed overnight, read from git and shown: the commits and
//! diffstats between the heads a run recorded (the `Story` of a
//! [`RunReport`] and its iterations), the commands that reopen each
//! iteration's agent session, and their lines on the text summary and the
//! page (docs/report.md). The IO of the report's story; the data is
//! `story.rs`.

use std::fmt::Write as _;

use super::model::RunReport;
use super::svg::esc;
use crate::config::AgentKind;
use crate::repo::{CommitLine, Repo};

/// Agent commits listed on the text summary (the page and `--json` list all).
const TEXT_COMMITS: usize = 8;

/// How to reopen an agent session by its id, for the kinds whose CLI can.
pub(crate) fn resume_command(kind: AgentKind, session: &str) -> Option<String> {
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
pub(crate) fn read_git(r: &mut RunReport, root: &std::path::Path, kind: AgentKind) {
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
