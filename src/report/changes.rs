//! What changed overnight, read from git and shown: the commits and
//! diffstats between the heads a run recorded (the `Story` of a
//! [`RunReport`] and its iterations), the commands that reopen each
//! iteration's agent session, and their lines on the text summary and the
//! page (docs/report.md). The IO of the report's story; the data is
//! `story.rs`.

use std::fmt::Write as _;

use super::model::{IterationRow, RunReport};
use super::svg::esc;
use crate::config::AgentKind;
use crate::repo::{CommitLine, DiffStat, OwnPaths, Repo};

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

/// Fill the story of `r` from the repository at `root`: what the run and
/// each iteration changed, the commits, and the commands that reopen each
/// iteration's session. Without a repository (or with a history rewritten
/// since) what git would tell stays unknown.
pub(crate) fn read_git(r: &mut RunReport, root: &std::path::Path, kind: AgentKind, own: &OwnPaths) {
    for row in &mut r.iterations {
        row.story.resume_command = row
            .story
            .session_id
            .as_deref()
            .and_then(|s| resume_command(kind, s));
    }
    let Ok(Some(repo)) = Repo::open(root) else {
        return;
    };
    diffstats(r, |from, to| repo.changed_between(from, to, own));
    let Some(start) = r.story.start_commit.clone() else {
        return;
    };
    let last_head = r.iterations.iter().rev().find_map(|i| i.story.head.clone());
    let Some(end) = r.story.end_commit.clone().or_else(|| last_head.clone()) else {
        return;
    };
    let Some(all) = repo.commits_between(&start, &end) else {
        return;
    };
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
    r.story.ralph_commits = all.iter().filter(|c| mine(c)).count();
    r.story.agent_commits = all.into_iter().filter(|c| !mine(c)).collect();
    r.story.commits_read = true;
    let mut before = start;
    for row in &mut r.iterations {
        let Some(head) = row.story.head.clone() else {
            continue;
        };
        row.story.agent_commits = (repo.commits_between(&before, &head).unwrap_or_default())
            .into_iter()
            .filter(|c| !mine(c))
            .collect();
        before = head;
    }
}

/// What the run and each iteration changed, with `diff(from, to)` the
/// diffstat between two points (tree or commit ids). An iteration changed
/// its work tree at its end against its work tree at its start (or, not
/// recorded, the previous iteration's end), whoever committed that work
/// and when; what it left uncommitted is its work tree against HEAD at its
/// end. The run changed the first iteration's start to the last one's end
/// (the start commit and the end commit where trees were not recorded).
fn diffstats(r: &mut RunReport, diff: impl Fn(&str, &str) -> Option<DiffStat>) {
    let pair = |from: Option<&String>, to: Option<&String>| diff(from?, to?);
    let mut previous_end: Option<String> = None;
    for row in &mut r.iterations {
        let from = row.story.tree_start.as_ref().or(previous_end.as_ref());
        row.story.diffstat = pair(from, row.story.tree_end.as_ref());
        row.story.uncommitted = pair(row.story.head.as_ref(), row.story.tree_end.as_ref());
        previous_end = row.story.tree_end.clone().or(previous_end);
    }
    let s = &mut r.story;
    let first = r
        .iterations
        .iter()
        .find_map(|i| i.story.tree_start.as_ref());
    let last_end = r
        .iterations
        .iter()
        .rev()
        .find_map(|i| i.story.tree_end.as_ref());
    let last_head = r
        .iterations
        .iter()
        .rev()
        .find_map(|i| i.story.head.as_ref());
    let end_commit = s.end_commit.as_ref().or(last_head);
    s.diffstat = pair(first.or(s.start_commit.as_ref()), last_end.or(end_commit));
    s.uncommitted = pair(end_commit, last_end);
}

fn short(id: &str) -> &str {
    &id[..id.len().min(10)]
}

/// The text summary's lines on what changed: the start commit, the
/// diffstat, what was left uncommitted, the commits (the agent's newest
/// few listed).
pub(crate) fn changes_text(r: &RunReport) -> Vec<String> {
    let s = &r.story;
    let commits = format!("{:<15}{}: {}", "commits", s.commit_count(), s.commits_by());
    let Some(start) = &s.start_commit else {
        return vec![
            format!(
                "{:<15}not recorded (no git repository, or an older run)",
                "changes"
            ),
            commits,
        ];
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
    if let Some(left) = s.uncommitted.filter(|d| d.files > 0) {
        out.push(format!("{:<15}{}", "", uncommitted(left, "the end")));
    }
    out.push(commits);
    let skip = s.agent_commits.len().saturating_sub(TEXT_COMMITS);
    if skip > 0 {
        out.push(format!("{:<15}… {skip} earlier", ""));
    }
    for c in &s.agent_commits[skip..] {
        out.push(format!("{:<15}{} {}", "", short(&c.id), c.summary));
    }
    out
}

/// "2 file(s) not committed at its end".
fn uncommitted(d: DiffStat, when: &str) -> String {
    format!("{} file(s) not committed at {when}", d.files)
}

/// What an iteration changed: its diffstat and what it left uncommitted.
fn iteration_change(i: &IterationRow) -> String {
    let Some(d) = i.story.diffstat else {
        return "changes not recorded".to_string();
    };
    match i.story.uncommitted.filter(|u| u.files > 0) {
        Some(u) => format!("{} · {}", d.line(), uncommitted(u, "its end")),
        None => d.line(),
    }
}

/// What each iteration changed, and the command that reopens its session
/// (text summary): two lines an iteration, the newest few.
pub(crate) fn iterations_text(r: &RunReport) -> Vec<String> {
    let rows: Vec<_> = r
        .iterations
        .iter()
        .filter(|i| i.story.session_id.is_some() || i.story.diffstat.is_some())
        .collect();
    let skip = rows.len().saturating_sub(TEXT_COMMITS);
    let mut out = Vec::new();
    if skip > 0 {
        out.push(format!(
            "      … {skip} earlier iteration(s): see the page or --json"
        ));
    }
    for i in &rows[skip..] {
        out.push(format!("{:>4}  {}", i.iteration, iteration_change(i)));
        if let Some(id) = &i.story.session_id {
            out.push(format!(
                "      {}",
                i.story
                    .resume_command
                    .clone()
                    .unwrap_or_else(|| format!("session {id}"))
            ));
        }
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
                "<p>Since <code>{}</code>{}: {}{} · {} commit(s): {}.</p>",
                esc(short(start)),
                s.end_commit
                    .as_deref()
                    .map(|e| format!(" to <code>{}</code>", esc(short(e))))
                    .unwrap_or_default(),
                esc(&s.diffstat.map_or("diff unknown".to_string(), |d| d.line())),
                s.uncommitted
                    .filter(|d| d.files > 0)
                    .map(|d| format!(" · {}", uncommitted(d, "the end")))
                    .unwrap_or_default(),
                s.commit_count(),
                s.commits_by()
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
        .filter(|i| i.story.session_id.is_some() || i.story.diffstat.is_some())
        .collect();
    if !rows.is_empty() {
        out.push_str("<table><thead><tr><th>#</th><th>changed</th><th>agent commits</th><th>reopen the session</th></tr></thead><tbody>");
        for i in rows {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                i.iteration,
                esc(&iteration_change(i)),
                esc(&i
                    .story
                    .agent_commits
                    .iter()
                    .map(|c| c.summary.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")),
                esc(i
                    .story
                    .resume_command
                    .as_deref()
                    .or(i.story.session_id.as_deref())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::IterationRow;
    use crate::report::story::IterationStory;

    /// A tree or commit is named by its files, one letter each; a diff
    /// counts the letters added and removed.
    fn diff(from: &str, to: &str) -> Option<DiffStat> {
        let added = to.chars().filter(|c| !from.contains(*c)).count();
        let removed = from.chars().filter(|c| !to.contains(*c)).count();
        Some(DiffStat {
            files: added + removed,
            insertions: added,
            deletions: removed,
        })
    }

    fn some(s: &str) -> Option<String> {
        (s != "-").then(|| s.to_string())
    }

    type Case = (
        &'static str,
        // per iteration: tree at its start, at its end, HEAD at its end ("-": none)
        &'static [(&'static str, &'static str, &'static str)],
        // start commit, end commit
        (&'static str, &'static str),
        // per iteration: files changed, files uncommitted at its end (None: unknown)
        &'static [(Option<usize>, Option<usize>)],
        // the run: files changed, files uncommitted at the end
        (Option<usize>, Option<usize>),
    );

    const CASES: &[Case] = &[
        (
            "work committed by the next checkpoint and by the final commit",
            &[("", "p", ""), ("p", "pw", "pw"), ("pw", "pwt", "pw")],
            ("", "pwt"),
            &[(Some(1), Some(1)), (Some(1), Some(0)), (Some(1), Some(1))],
            (Some(3), Some(0)),
        ),
        (
            "work never committed (wip_commit = false)",
            &[("", "p", ""), ("p", "pw", "")],
            ("", ""),
            &[(Some(1), Some(1)), (Some(1), Some(2))],
            (Some(2), Some(2)),
        ),
        (
            "the user's edit between two runs is neither iteration's",
            &[("", "p", "p"), ("pu", "puw", "puw")],
            ("", "puw"),
            &[(Some(1), Some(0)), (Some(1), Some(0))],
            (Some(3), Some(0)),
        ),
        (
            "a start not recorded: the previous iteration's end",
            &[("", "p", "p"), ("-", "pw", "pw")],
            ("", "pw"),
            &[(Some(1), Some(0)), (Some(1), Some(0))],
            (Some(2), Some(0)),
        ),
        (
            "an older run without trees: commits only",
            &[("-", "-", "p"), ("-", "-", "pw")],
            ("", "pw"),
            &[(None, None), (None, None)],
            (Some(2), None),
        ),
        (
            "a run still going: up to its last iteration",
            &[("", "p", "")],
            ("", "-"),
            &[(Some(1), Some(1))],
            (Some(1), Some(1)),
        ),
    ];

    #[test]
    fn what_each_iteration_changed_is_its_work_tree_from_start_to_end() {
        for (name, rows, (start, end), want_rows, want_run) in CASES {
            let mut r = crate::report::gather::build(
                "run",
                &[],
                None,
                crate::context::Thresholds::DEFAULT,
                Default::default(),
            );
            r.story.start_commit = some(start);
            r.story.end_commit = some(end);
            r.iterations = rows
                .iter()
                .enumerate()
                .map(|(n, (a, b, head))| IterationRow {
                    iteration: n as u32 + 1,
                    story: IterationStory {
                        tree_start: some(a),
                        tree_end: some(b),
                        head: some(head),
                        ..IterationStory::default()
                    },
                    ..IterationRow::default()
                })
                .collect();
            diffstats(&mut r, diff);
            let got: Vec<_> = r
                .iterations
                .iter()
                .map(|i| {
                    (
                        i.story.diffstat.map(|d| d.files),
                        i.story.uncommitted.map(|d| d.files),
                    )
                })
                .collect();
            assert_eq!(got, *want_rows, "{name}");
            let run = (
                r.story.diffstat.map(|d| d.files),
                r.story.uncommitted.map(|d| d.files),
            );
            assert_eq!(run, *want_run, "{name}");
        }
    }

    #[test]
    fn one_commit_count_in_the_header_the_story_and_the_page() {
        let mut r = crate::report::gather::build(
            "run",
            &[],
            None,
            crate::context::Thresholds::DEFAULT,
            Default::default(),
        );
        r.story.start_commit = some("a");
        r.story.ralph_commits = 2;
        r.story.commits_read = true;
        r.story.agent_commits = vec![CommitLine {
            id: "b".repeat(40),
            summary: "parser".into(),
        }];
        let text = crate::report::text::render(&r, &jiff::tz::TimeZone::UTC);
        assert!(text.contains(" · 3 commit(s)\n"), "{text}");
        assert!(
            text.contains("commits        3: 1 by the agent, 2 by ralph\n"),
            "{text}"
        );
        let mut page = String::new();
        changes_html(&mut page, &r);
        assert!(
            page.contains("3 commit(s): 1 by the agent, 2 by ralph"),
            "{page}"
        );
    }
}
