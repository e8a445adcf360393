//! What happens after a checkpointed iteration (and on `ralph checkpoint`
//! without a run): the handoff document, the WIP commit that carries it,
//! and the facts the state and the hooks get. Each step survives the
//! failure of the ones before it.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::Config;
use crate::context::Level;
use crate::plan::{self, Plan};
use crate::prompt::fit;
use crate::prompt::tiers::{self, Detail, PlanTiers};
use crate::prompt::{self, Templates};
use crate::repo::{CommitOutcome, LeftOut, OwnPaths, Repo, StashEntry};
use crate::state::{FileInProgress, Layout, Trigger};
use crate::stream::ToolCall;
use crate::text::cut;

/// Everything known about the moment of the checkpoint.
#[derive(Debug, Clone)]
pub struct Moment {
    pub iteration: u32,
    pub trigger: Trigger,
    pub level: Level,
    pub percent: f64,
    pub tokens: u64,
    pub usable: u64,
    pub window: u64,
    pub reason: String,
    pub last_text: Option<String>,
    pub last_tools: Vec<ToolCall>,
    pub files_touched: Vec<String>,
    /// Where the agent was asked to write its notes (relative to the root).
    pub notes_path: Option<PathBuf>,
    /// Why no notes were asked for, when the agent could not be asked (a
    /// kind that takes no message mid-session): the handoff says so.
    pub unasked: Option<String>,
    /// The item the checkpoint belongs to, when the loop followed the
    /// items (else the plan's current one), and whether it was checked
    /// off just before (the next item untouched).
    pub item: Option<String>,
    pub item_done: bool,
    /// The stash entries (ids) when the iteration began; None when no
    /// iteration was watched (`ralph checkpoint` without a run).
    pub stash_before: Option<Vec<String>>,
}

/// What the checkpoint produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Saved {
    pub title: String,
    pub commit: Option<String>,
    /// Why there is no commit, when there is none.
    pub commit_note: Option<String>,
    /// Relative path of the handoff document, when it was written.
    pub handoff: Option<String>,
    pub agent_notes: bool,
    pub files_in_progress: Vec<FileInProgress>,
    pub current_item: Option<String>,
    /// `current_item` was checked off just before the checkpoint.
    pub item_done: bool,
    pub resume_summary: String,
    pub warnings: Vec<String>,
    /// Decisions added to the decision log.
    pub decisions: usize,
    /// Stash entries the agent made during the iteration: work the WIP
    /// commit does not hold.
    pub stashed: Vec<StashEntry>,
    /// Work the WIP commit left out (too big, binary, too many new files).
    pub left_out: Vec<LeftOut>,
}

/// The title by trigger: "Context Checkpoint L2 at 87% - parser" for the
/// context, "Checkpoint (signal at 24%) - parser" for anything else.
fn titled(trigger: &str, level: Level, percent: f64, item: Option<&str>) -> String {
    let mut t = match trigger {
        "context" | "compact" => {
            format!("Context Checkpoint {level} at {}%", percent.round() as i64)
        }
        _ => format!(
            "Checkpoint ({})",
            crate::state::checkpoint_label(trigger, level.name(), percent)
        ),
    };
    if let Some(item) = item {
        t.push_str(" - ");
        t.push_str(item);
    }
    t
}

/// Where the agent writes its notes for iteration `n`.
pub fn notes_path(n: u32) -> PathBuf {
    PathBuf::from(format!(".ralph/notes/iter-{n:03}.md"))
}

#[derive(Clone, Serialize)]
struct ChangeView {
    kind: String,
    path: String,
}

/// Write the handoff, make the WIP commit, and say what was saved.
pub fn perform(root: &Path, config: &Config, templates: &Templates, m: &Moment) -> Saved {
    let layout = Layout::new(root);
    let mut saved = Saved::default();
    let plan_path = root.join(&config.plan);
    let plan_text = std::fs::read_to_string(&plan_path).unwrap_or_default();
    let plan = Plan::parse(&plan_text);
    saved.current_item = (m.item.clone()).or_else(|| plan.current().map(|i| i.text.clone()));
    saved.item_done = m.item.is_some() && m.item_done;
    saved.title = titled(
        m.trigger.name(),
        m.level,
        m.percent,
        saved.current_item.as_deref(),
    );
    let own = OwnPaths {
        prompt_file: config.prompt_file.clone(),
    };

    let repo = match Repo::open(root) {
        Ok(r) => r,
        Err(e) => {
            saved
                .warnings
                .push(format!("cannot open the git repository: {e}"));
            None
        }
    };
    let (changes, diff_stat) = match &repo {
        Some(r) => (
            r.changes(&own).unwrap_or_else(|e| {
                saved.warnings.push(format!("cannot read git status: {e}"));
                Vec::new()
            }),
            r.diff_stat(&own).unwrap_or_default(),
        ),
        None => (Vec::new(), String::new()),
    };
    if let (Some(r), Some(before)) = (&repo, &m.stash_before) {
        saved.stashed = r.stashed_since(before);
    }
    let blocker = repo.as_ref().and_then(Repo::commit_blocker);
    let will_commit = repo.is_some() && config.git.wip_commit && blocker.is_none();
    if will_commit && let Some(r) = &repo {
        saved.left_out = r.left_out(&own, &config.git.guard()).unwrap_or_else(|e| {
            saved
                .warnings
                .push(format!("cannot check new files against [git] limits: {e}"));
            Vec::new()
        });
    }
    let agent_notes = m
        .notes_path
        .as_ref()
        .and_then(|p| std::fs::read_to_string(root.join(p)).ok())
        .filter(|t| !t.trim().is_empty());
    saved.agent_notes = agent_notes.is_some();
    // The notes stay under `.ralph/notes/`: without the secrets they quote.
    if let (Some(p), Some(text)) = (&m.notes_path, &agent_notes)
        && let std::borrow::Cow::Owned(clean) = crate::text::secrets::redact(text)
    {
        let _ = crate::state::write_private(&root.join(p), clean.as_bytes());
    }
    let files_touched = work_files(&m.files_touched);
    saved.files_in_progress = files_touched
        .iter()
        .rev()
        .take(10)
        .map(|p| FileInProgress {
            path: p.clone(),
            lines: None,
            description: "changed by the agent this iteration".into(),
        })
        .collect();

    let key_files: Vec<String> = changes
        .iter()
        .filter(|c| crate::text::secrets::is_key_file(&c.path))
        .map(|c| crate::repo::display_path(c.path.as_bytes()))
        .collect();
    if config.git.wip_commit && !key_files.is_empty() {
        saved.warnings.push(format!(
            "key files left out of the WIP commit (commit them yourself if they hold no secret): {}",
            key_files.join(", ")
        ));
    }

    // 1. The handoff document, so that the WIP commit carries it.
    let now = jiff::Zoned::now();
    let handoff_rel = unique_handoff_name(&layout, &now, m.iteration);
    let branch = repo.as_ref().and_then(Repo::branch);
    let base_commit = repo.as_ref().and_then(Repo::head_id);
    // Logged before the WIP commit, which carries the log.
    match crate::plan::decisions::record(root, m.iteration, agent_notes.as_deref(), &plan_text) {
        Ok(new) => saved.decisions = new.len(),
        Err(e) => saved
            .warnings
            .push(format!("cannot write the decision log: {e}")),
    }
    let changes: Vec<ChangeView> = changes
        .iter()
        .map(|c| ChangeView {
            kind: c.kind.clone(),
            path: crate::repo::display_path(c.path.as_bytes()),
        })
        .collect();
    // Every section stays; long notes are cut to half the budget.
    let max = config.handoff.max_tokens;
    let agent_notes = agent_notes.map(|n| {
        let asked = m.notes_path.as_ref().map(|p| p.display().to_string());
        let tail = format!(
            "\n… (cut to fit the handoff; the rest is in `{}`)",
            asked.unwrap_or_default()
        );
        tiers::cut_tokens(&n, max / 2, &tail)
    });
    let reload = plan::context_files(root, &plan_text);
    let costs = PlanTiers::open_line_costs(&plan);
    let (title, stashed, left_out) = (
        saved.title.clone(),
        saved.stashed.clone(),
        saved.left_out.clone(),
    );
    let render = |d: &Detail, will_commit: bool, commit_note: Option<&str>| {
        // The latest touched files, so that `last` is still the latest.
        let shown = d.files.min(files_touched.len());
        let (older, touched) = files_touched.split_at(files_touched.len() - shown);
        let listed = tiers::cap_spread(&changes, d.changes, |c: &ChangeView| c.path.as_str());
        // The stat of the files listed, when the list is cut.
        let in_list = |p: &str| listed.more == 0 || listed.shown.iter().any(|c| c.path == p);
        let ctx = minijinja::context! {
        front_matter => front_matter(&[
            ("title", title.as_str().into()),
            ("date", now.strftime("%Y-%m-%d").to_string().into()),
            ("time", now.strftime("%H:%M:%S %Z").to_string().into()),
            ("branch", branch.as_deref().unwrap_or("none").into()),
            ("iteration", m.iteration.into()),
            ("trigger", m.trigger.name().into()),
            ("level", m.level.name().into()),
            ("context_percent", crate::context::round1(m.percent).into()),
            ("context_tokens", m.tokens.into()),
            ("context_usable", m.usable.into()),
            ("context_window", m.window.into()),
            ("base_commit", base_commit.as_deref().unwrap_or("none").into()),
            ("wip_commit", if will_commit { "the commit that adds this file" } else { "none" }.into()),
        ]),
        title => &title,
        date => now.strftime("%Y-%m-%d").to_string(),
        time => now.strftime("%H:%M:%S %Z").to_string(),
        branch => repo.as_ref().and_then(Repo::branch),
        iteration => m.iteration,
        trigger => m.trigger.name(),
        level => m.level.name(),
        percent => crate::context::round1(m.percent),
        tokens => m.tokens,
        usable => m.usable,
        window => m.window,
        // The WIP commit's id cannot be inside the commit itself: the
        // handoff names the commit it was made on top of.
        commit => repo.as_ref().and_then(Repo::head_id),
        reason => &m.reason,
        last_text => m.last_text.as_deref().map(|t| cut(t, 1500)),
        last_tools => m.last_tools.iter().rev().take(8).rev().map(|t| minijinja::context! {
            name => &t.name, path => &t.path, summary => t.summary.as_deref().map(one_line),
        }).collect::<Vec<_>>(),
        files_touched => touched,
        files_touched_more => tiers::cap(older, 0, |p: &String| p.as_str()).summary,
        agent_notes => &agent_notes,
        notes_path => m.notes_path.as_ref().map(|p| p.display().to_string()),
        unasked => &m.unasked,
        git_available => repo.is_some(),
        will_commit => will_commit,
        left_uncommitted => &key_files,
        commit_note => commit_note,
        changes => listed.shown,
        changes_more => listed.summary,
        diff_stat => tiers::cap_stat(diff_stat.trim_end(), d.changes, in_list),
        stashed => &stashed,
        left_out => &left_out,
        plan => plan.view(),
        plan_tiers => PlanTiers::new(&plan, d),
        plan_file => config.plan.display().to_string(),
        reload => &reload,
        };
        templates.render(prompt::HANDOFF, ctx)
    };
    // Written again, with the truth, should the WIP commit it promises fail.
    let write_handoff = |saved: &mut Saved, will_commit: bool, commit_note: Option<String>| {
        let fitted = fit::fit(max, &costs, |d: &Detail| {
            render(d, will_commit, commit_note.as_deref())
        });
        match fitted {
            Ok(fitted) => {
                let path = root.join(&handoff_rel);
                match layout.ensure().and_then(|()| {
                    // Committed: the agent's notes and words must not carry a secret.
                    crate::state::write_private(
                        &path,
                        crate::text::secrets::scrub_keeping(&fitted.text, &plan_text).as_bytes(),
                    )
                }) {
                    Ok(()) => saved.handoff = Some(handoff_rel.display().to_string()),
                    Err(e) => saved
                        .warnings
                        .push(format!("cannot write the handoff: {e}")),
                }
            }
            Err(e) => saved
                .warnings
                .push(format!("cannot render the handoff: {e}")),
        }
    };
    let note = if will_commit || repo.is_none() {
        None
    } else if !config.git.wip_commit {
        Some("git.wip_commit is off: the changes were left uncommitted".to_string())
    } else {
        blocker.map(|b| format!("no WIP commit, the changes were left uncommitted: {b}"))
    };
    write_handoff(&mut saved, will_commit, note);

    // 2. The WIP commit of the tree as it stands (handoff included).
    match &repo {
        None => saved.commit_note = Some("not a git repository".into()),
        Some(_) if !config.git.wip_commit => {
            saved.commit_note = Some("git.wip_commit is off".into());
        }
        Some(r) => {
            let message = commit_message(config, m, &mut saved);
            let message = crate::text::secrets::scrub_keeping(&message, &plan_text);
            match r.wip_commit_leaving_out(&message, &own, &saved.left_out) {
                CommitOutcome::Committed { id, .. } => saved.commit = Some(id),
                CommitOutcome::NothingToCommit => {
                    saved.commit_note = Some("nothing to commit".into());
                }
                CommitOutcome::Skipped { reason } => {
                    if saved.handoff.is_some() {
                        write_handoff(&mut saved, false, Some(reason.clone()));
                    }
                    saved.warnings.push(reason.clone());
                    saved.commit_note = Some(reason);
                }
            }
        }
    }

    saved.resume_summary = format!(
        "Iteration {} was checkpointed ({}){}. {}",
        m.iteration,
        match m.trigger.name() {
            "context" => format!("context, {} at {:.0}%", m.level, m.percent),
            trigger => crate::state::checkpoint_label(trigger, m.level.name(), m.percent),
        },
        match (saved.current_item.as_deref(), saved.item_done) {
            (Some(i), true) => format!(" right after \"{i}\" was checked off"),
            (Some(i), false) => format!(" while working on \"{i}\""),
            (None, _) => String::new(),
        },
        saved
            .handoff
            .as_deref()
            .map(|h| format!("Read {h} first."))
            .unwrap_or_default()
    );
    if !saved.stashed.is_empty() {
        saved.resume_summary.push_str(&format!(
            " Part of its work is in the stash ({}): `git stash pop` gets it back.",
            stash_names(&saved.stashed).join(", ")
        ));
    }
    saved
}

/// The handoff's YAML front matter, one `key: value` line each. A string
/// is written plain when YAML reads it back as that same string (letters,
/// digits, `._/+-` and inner spaces; not a number, bool or null), and as a
/// JSON string otherwise, which YAML 1.2 reads as it is: a quote, a colon
/// or a line break in a plan item or a branch name cannot break the
/// document. The title and time are always quoted (the established form).
fn front_matter(fields: &[(&str, serde_json::Value)]) -> String {
    let plain = |key: &str, s: &str| {
        !matches!(key, "title" | "time")
            && s.trim() == s
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || " ._/+-".contains(c))
            && s.parse::<f64>().is_err()
            && !["true", "false", "yes", "no", "on", "off", "null"]
                .contains(&s.to_ascii_lowercase().as_str())
    };
    fields
        .iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) if plain(k, s) => format!("{k}: {s}\n"),
            v => format!("{k}: {v}\n"),
        })
        .collect()
}

/// `stash@{0} (On main: baseline)`: how the prompt and the handoff name
/// a stash entry.
pub fn stash_names(stashed: &[StashEntry]) -> Vec<String> {
    stashed
        .iter()
        .map(|e| format!("{} ({})", e.name, e.message))
        .collect()
}

/// The files the agent changed that are work in progress: not the notes
/// it wrote on ralph's request, nor anything else in ralph's `.ralph/`
/// (the handoff carries the notes themselves).
fn work_files(files_touched: &[String]) -> Vec<String> {
    files_touched
        .iter()
        .filter(|p| !Path::new(p).starts_with(".ralph"))
        .cloned()
        .collect()
}

fn commit_message(config: &Config, m: &Moment, saved: &mut Saved) -> String {
    let subject = prompt::render_str(
        &config.git.commit_message,
        "git.commit_message",
        crate::config::commit_message_context(
            m.iteration,
            m.level.name(),
            m.percent,
            m.trigger.name(),
            saved.current_item.as_deref(),
            &saved.title,
        ),
    )
    .unwrap_or_else(|e| {
        // Validated at load, but a filter can still fail on this moment's
        // values: the checkpoint is worth more than its subject line.
        saved.warnings.push(format!(
            "git.commit_message: {e}; the default subject is used"
        ));
        format!("ralph: checkpoint iter {}", m.iteration)
    });
    let mut body = format!("{subject}\n\n{}\n", saved.title);
    if let Some(h) = &saved.handoff {
        body.push_str(&format!("\nHandoff: {h}\n"));
    }
    body.push_str(&format!("Trigger: {}\n", m.trigger));
    body
}

/// The worker this loop is, if `ralph run --workers N` started it
/// (`RALPH_WORKER`, set by the coordinator): a short printable name only.
fn this_worker() -> Option<String> {
    std::env::var("RALPH_WORKER").ok().filter(|w| {
        !w.is_empty() && w.len() <= 40 && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    })
}

fn unique_handoff_name(layout: &Layout, now: &jiff::Zoned, iteration: u32) -> PathBuf {
    let mut stamp = now.strftime("%Y-%m-%d-%H%M").to_string();
    // Workers' handoffs meet on the run branch: named apart, they merge
    // without an add/add conflict.
    if let Some(worker) = this_worker() {
        stamp = format!("{stamp}-{worker}");
    }
    let rel = |suffix: &str| {
        PathBuf::from(".ralph/handoffs").join(format!("{stamp}-iter{iteration:03}{suffix}.md"))
    };
    let mut candidate = rel("");
    let mut n = 2;
    while layout.root.join(&candidate).exists() {
        candidate = rel(&format!("-{n}"));
        n += 1;
    }
    candidate
}

/// The first line of a multi-line text (a heredoc in a Bash command), so
/// that it stays one item of a markdown list.
fn one_line(text: &str) -> String {
    match text.split_once('\n') {
        Some((first, _)) => format!("{} …", first.trim_end()),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn notes_and_runtime_files_are_not_work_in_progress() {
        let touched = [
            "src/parser.rs".to_string(),
            ".ralph/notes/iter-001.md".to_string(),
            ".ralphrc".to_string(),
            "/elsewhere/x.rs".to_string(),
        ];
        assert_eq!(
            work_files(&touched),
            ["src/parser.rs", ".ralphrc", "/elsewhere/x.rs"]
        );
    }

    #[test]
    fn front_matter_is_yaml_whatever_the_values_hold() {
        let title = "Context Checkpoint L2 at 87% - parse \"quoted\" key: value \\ # not a comment\n- [x] not a list";
        let text = front_matter(&[
            ("title", title.into()),
            ("branch", "feat/é: x".into()),
            ("iteration", 3.into()),
            ("context_percent", 87.4.into()),
            ("level", "L2".into()),
            ("base_commit", "none".into()),
            ("trigger", "true".into()),
        ]);
        assert!(
            text.contains("\nlevel: L2\nbase_commit: none\ntrigger: \"true\"\n"),
            "{text}"
        );
        let yaml: BTreeMap<String, serde_json::Value> = serde_norway::from_str(&text).unwrap();
        assert_eq!(yaml["title"], title);
        assert_eq!(yaml["branch"], "feat/é: x");
        assert_eq!(yaml["iteration"], 3);
        assert_eq!(yaml["context_percent"], 87.4);
        assert_eq!(yaml["trigger"], "true");
    }

    #[test]
    fn checkpoints_not_set_off_by_the_context_are_labelled_by_their_trigger() {
        assert_eq!(
            titled("signal", Level::L2, 24.4, Some("parser")),
            "Checkpoint (signal at 24%) - parser"
        );
        assert_eq!(
            titled("manual", Level::L2, 0.0, None),
            "Checkpoint (manual)"
        );
        assert_eq!(
            crate::state::checkpoint_label("context", "L3", 95.2),
            "L3 at 95%"
        );
        assert_eq!(
            crate::state::checkpoint_label("timeout", "L0", 40.0),
            "timeout at 40%"
        );
    }
}
