//! What happens after a checkpointed iteration (and on `ralph checkpoint`
//! without a run): the handoff document, the WIP commit that carries it,
//! and the facts the state and the hooks get. Each step survives the
//! failure of the ones before it: `gather` (reads; what it cannot read is a
//! warning), `write_handoff` (through the pure `render_handoff`), `commit`
//! (a skipped commit rewrites the handoff to say so), `resume_summary`
//! (pure).

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
fn titled(trigger: Trigger, level: Level, percent: f64, item: Option<&str>) -> String {
    let mut t = match trigger {
        Trigger::Context | Trigger::Compact => {
            format!("Context Checkpoint {level} at {}%", percent.round() as i64)
        }
        _ => format!(
            "Checkpoint ({})",
            crate::state::checkpoint_label(trigger, level, percent)
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

/// Write the handoff, make the WIP commit, and say what was saved: gather
/// what the checkpoint works from, write the handoff (rendered by the pure
/// [`render_handoff`]), commit, and sum up for the next prompt.
pub fn perform(root: &Path, config: &Config, templates: &Templates, m: &Moment) -> Saved {
    let mut saved = Saved::default();
    let g = gather(root, config, m, &mut saved);
    let note = if g.will_commit || g.repo.is_none() {
        None
    } else if !config.git.wip_commit {
        Some("git.wip_commit is off: the changes were left uncommitted".to_string())
    } else {
        g.blocker
            .as_ref()
            .map(|b| format!("no WIP commit, the changes were left uncommitted: {b}"))
    };
    // 1. The handoff document, so that the WIP commit carries it.
    write_handoff(
        root,
        config,
        templates,
        m,
        &g,
        &mut saved,
        g.will_commit,
        note,
    );
    // 2. The WIP commit of the tree as it stands (handoff included).
    commit(root, config, templates, m, &g, &mut saved);
    saved.resume_summary = resume_summary(m, &saved);
    saved
}

/// What a checkpoint works from, read once; what could not be read is a
/// warning in `saved`.
struct Gathered {
    plan_text: String,
    plan: Plan,
    repo: Option<Repo>,
    own: OwnPaths,
    changes: Vec<ChangeView>,
    diff_stat: String,
    /// Why a WIP commit would not be safe now.
    blocker: Option<String>,
    will_commit: bool,
    /// The agent's notes, cut to half the handoff's budget.
    agent_notes: Option<String>,
    files_touched: Vec<String>,
    key_files: Vec<String>,
    branch: Option<String>,
    /// HEAD before the WIP commit: the commit the handoff names.
    base_commit: Option<String>,
    reload: Vec<String>,
    now: jiff::Zoned,
    handoff_rel: PathBuf,
}

fn gather(root: &Path, config: &Config, m: &Moment, saved: &mut Saved) -> Gathered {
    let layout = Layout::new(root);
    let plan_path = root.join(&config.plan);
    let plan_text = std::fs::read_to_string(&plan_path).unwrap_or_default();
    let plan = Plan::parse(&plan_text);
    saved.current_item = (m.item.clone()).or_else(|| plan.current().map(|i| i.text.clone()));
    saved.item_done = m.item.is_some() && m.item_done;
    saved.title = titled(m.trigger, m.level, m.percent, saved.current_item.as_deref());
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
    Gathered {
        plan_text,
        plan,
        repo,
        own,
        changes,
        diff_stat,
        blocker,
        will_commit,
        agent_notes,
        files_touched,
        key_files,
        branch,
        base_commit,
        reload,
        now,
        handoff_rel,
    }
}

/// The handoff at detail `d` (pure: everything comes from `g`, `m` and
/// `saved`).
#[allow(clippy::too_many_arguments)]
fn render_handoff(
    config: &Config,
    templates: &Templates,
    m: &Moment,
    g: &Gathered,
    saved: &Saved,
    d: &Detail,
    will_commit: bool,
    commit_note: Option<&str>,
) -> crate::error::Result<String> {
    let now = &g.now;
    let files_touched = &g.files_touched;
    // The latest touched files, so that `last` is still the latest.
    let shown = d.files.min(files_touched.len());
    let (older, touched) = files_touched.split_at(files_touched.len() - shown);
    let listed = tiers::cap_spread(&g.changes, d.changes, |c: &ChangeView| c.path.as_str());
    // The stat of the files listed, when the list is cut.
    let in_list = |p: &str| listed.more == 0 || listed.shown.iter().any(|c| c.path == p);
    let title = &saved.title;
    let ctx = minijinja::context! {
    front_matter => front_matter(&[
        ("title", title.as_str().into()),
        ("date", now.strftime("%Y-%m-%d").to_string().into()),
        ("time", now.strftime("%H:%M:%S %Z").to_string().into()),
        ("branch", g.branch.as_deref().unwrap_or("none").into()),
        ("iteration", m.iteration.into()),
        ("trigger", m.trigger.name().into()),
        ("level", m.level.name().into()),
        ("context_percent", crate::context::round1(m.percent).into()),
        ("context_tokens", m.tokens.into()),
        ("context_usable", m.usable.into()),
        ("context_window", m.window.into()),
        ("base_commit", g.base_commit.as_deref().unwrap_or("none").into()),
        ("wip_commit", if will_commit { "the commit that adds this file" } else { "none" }.into()),
    ]),
    title => title,
    date => now.strftime("%Y-%m-%d").to_string(),
    time => now.strftime("%H:%M:%S %Z").to_string(),
    branch => &g.branch,
    iteration => m.iteration,
    trigger => m.trigger.name(),
    level => m.level.name(),
    percent => crate::context::round1(m.percent),
    tokens => m.tokens,
    usable => m.usable,
    window => m.window,
    // The WIP commit's id cannot be inside the commit itself: the
    // handoff names the commit it was made on top of.
    commit => &g.base_commit,
    reason => &m.reason,
    last_text => m.last_text.as_deref().map(|t| cut(t, 1500)),
    last_tools => m.last_tools.iter().rev().take(8).rev().map(|t| minijinja::context! {
        name => &t.name, path => &t.path, summary => t.summary.as_deref().map(one_line),
    }).collect::<Vec<_>>(),
    files_touched => touched,
    files_touched_more => tiers::cap(older, 0, |p: &String| p.as_str()).summary,
    agent_notes => &g.agent_notes,
    notes_path => m.notes_path.as_ref().map(|p| p.display().to_string()),
    unasked => &m.unasked,
    git_available => g.repo.is_some(),
    will_commit => will_commit,
    left_uncommitted => &g.key_files,
    commit_note => commit_note,
    changes => listed.shown,
    changes_more => listed.summary,
    diff_stat => tiers::cap_stat(g.diff_stat.trim_end(), d.changes, in_list),
    stashed => &saved.stashed,
    left_out => &saved.left_out,
    plan => g.plan.view(),
    plan_tiers => PlanTiers::new(&g.plan, d),
    plan_file => config.plan.display().to_string(),
    reload => &g.reload,
    };
    templates.render(prompt::HANDOFF, ctx)
}

/// Render the handoff at the most detail that fits `[handoff] max_tokens`
/// and write it; written again, with the truth, should the WIP commit it
/// promises fail.
#[allow(clippy::too_many_arguments)]
fn write_handoff(
    root: &Path,
    config: &Config,
    templates: &Templates,
    m: &Moment,
    g: &Gathered,
    saved: &mut Saved,
    will_commit: bool,
    commit_note: Option<String>,
) {
    let costs = PlanTiers::open_line_costs(&g.plan);
    let fitted = fit::fit(config.handoff.max_tokens, &costs, |d: &Detail| {
        render_handoff(
            config,
            templates,
            m,
            g,
            saved,
            d,
            will_commit,
            commit_note.as_deref(),
        )
    });
    match fitted {
        Ok(fitted) => {
            let path = root.join(&g.handoff_rel);
            match Layout::new(root).ensure().and_then(|()| {
                // Committed: the agent's notes and words must not carry a secret.
                crate::state::write_private(
                    &path,
                    crate::text::secrets::scrub_keeping(&fitted.text, &g.plan_text).as_bytes(),
                )
            }) {
                Ok(()) => saved.handoff = Some(g.handoff_rel.display().to_string()),
                Err(e) => saved
                    .warnings
                    .push(format!("cannot write the handoff: {e}")),
            }
        }
        Err(e) => saved
            .warnings
            .push(format!("cannot render the handoff: {e}")),
    }
}

/// The WIP commit of the tree as it stands, handoff included; a commit
/// that was skipped rewrites the handoff to say so.
fn commit(
    root: &Path,
    config: &Config,
    templates: &Templates,
    m: &Moment,
    g: &Gathered,
    saved: &mut Saved,
) {
    match &g.repo {
        None => saved.commit_note = Some("not a git repository".into()),
        Some(_) if !config.git.wip_commit => {
            saved.commit_note = Some("git.wip_commit is off".into());
        }
        Some(r) => {
            let message = commit_message(config, m, saved);
            let message = crate::text::secrets::scrub_keeping(&message, &g.plan_text);
            match r.wip_commit_leaving_out(&message, &g.own, &saved.left_out) {
                CommitOutcome::Committed { id, .. } => saved.commit = Some(id),
                CommitOutcome::NothingToCommit => {
                    saved.commit_note = Some("nothing to commit".into());
                }
                CommitOutcome::Skipped { reason } => {
                    if saved.handoff.is_some() {
                        write_handoff(
                            root,
                            config,
                            templates,
                            m,
                            g,
                            saved,
                            false,
                            Some(reason.clone()),
                        );
                    }
                    saved.warnings.push(reason.clone());
                    saved.commit_note = Some(reason);
                }
            }
        }
    }
}

/// What the next prompt says of this checkpoint (`context_checkpoint.resume_summary`).
fn resume_summary(m: &Moment, saved: &Saved) -> String {
    let mut summary = format!(
        "Iteration {} was checkpointed ({}){}. {}",
        m.iteration,
        match m.trigger {
            Trigger::Context => format!("context, {} at {:.0}%", m.level, m.percent),
            trigger => crate::state::checkpoint_label(trigger, m.level, m.percent),
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
        summary.push_str(&format!(
            " Part of its work is in the stash ({}): `git stash pop` gets it back.",
            stash_names(&saved.stashed).join(", ")
        ));
    }
    summary
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
            m.level,
            m.percent,
            m.trigger,
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

    fn moment(trigger: Trigger, level: Level, percent: f64) -> Moment {
        Moment {
            iteration: 4,
            trigger,
            level,
            percent,
            tokens: 0,
            usable: 0,
            window: 0,
            reason: String::new(),
            last_text: None,
            last_tools: Vec::new(),
            files_touched: Vec::new(),
            notes_path: None,
            unasked: None,
            item: None,
            item_done: false,
            stash_before: None,
        }
    }

    /// The handoff's render is pure: what it says of the commit follows
    /// from the gathered facts and the commit decision alone.
    #[test]
    fn the_handoff_says_what_the_wip_commit_holds() {
        let dir = tempfile::tempdir().unwrap();
        let templates = Templates::load(dir.path()).unwrap();
        let config = Config::default();
        let plan_text = "# Parser\n\n- [ ] parser\n- [ ] tests\n".to_string();
        let g = |repo: Option<Repo>| Gathered {
            plan: Plan::parse(&plan_text),
            plan_text: plan_text.clone(),
            repo,
            own: OwnPaths::new(Path::new("PROMPT.md")),
            changes: vec![ChangeView {
                kind: "M".into(),
                path: "src/parser.rs".into(),
            }],
            diff_stat: String::new(),
            blocker: None,
            will_commit: false,
            agent_notes: Some("Half of the parser is done.".into()),
            files_touched: vec!["src/parser.rs".into()],
            key_files: Vec::new(),
            branch: Some("main".into()),
            base_commit: Some("0123456789abcdef".into()),
            reload: Vec::new(),
            now: jiff::Zoned::now(),
            handoff_rel: PathBuf::from(".ralph/handoffs/h.md"),
        };
        let git = tempfile::tempdir().unwrap();
        git2::Repository::init(git.path()).unwrap();
        let saved = Saved {
            title: "Context Checkpoint L2 at 87% - parser".into(),
            ..Saved::default()
        };
        let m = moment(Trigger::Context, Level::L2, 87.4);
        for (repo, will_commit, note, has, lacks) in [
            (
                true,
                true,
                None,
                vec![
                    "wip_commit: the commit that adds this file",
                    "(committed in the WIP commit that adds this file, on top of 0123456789)",
                    "Half of the parser is done.",
                    "`src/parser.rs`",
                ],
                vec!["Note:"],
            ),
            (
                true,
                false,
                Some("no WIP commit: a merge is in progress"),
                vec![
                    "wip_commit: none",
                    "Note: no WIP commit: a merge is in progress",
                ],
                vec!["committed in the WIP commit"],
            ),
            (
                false,
                false,
                None,
                vec![
                    "wip_commit: none",
                    "# Context Checkpoint L2 at 87% - parser",
                ],
                vec!["committed in the WIP commit", "Changes at checkpoint time"],
            ),
        ] {
            let repo = repo.then(|| Repo::open(git.path()).unwrap().unwrap());
            let text = render_handoff(
                &config,
                &templates,
                &m,
                &g(repo),
                &saved,
                &Detail::MOST,
                will_commit,
                note,
            )
            .unwrap();
            for want in has {
                assert!(text.contains(want), "{want:?} missing:\n{text}");
            }
            for unwanted in lacks {
                assert!(!text.contains(unwanted), "{unwanted:?} present:\n{text}");
            }
        }
    }

    #[test]
    fn the_resume_summary_says_why_where_and_what_to_read() {
        let saved = |item: Option<&str>, done: bool, handoff: Option<&str>| Saved {
            current_item: item.map(String::from),
            item_done: done,
            handoff: handoff.map(String::from),
            ..Saved::default()
        };
        let h = Some(".ralph/handoffs/h.md");
        for (m, s, want) in [
            (
                moment(Trigger::Context, Level::L2, 87.4),
                saved(Some("parser"), false, h),
                "Iteration 4 was checkpointed (context, L2 at 87%) while working on \"parser\". Read .ralph/handoffs/h.md first.",
            ),
            (
                moment(Trigger::Compact, Level::L2, 90.0),
                saved(None, false, h),
                "Iteration 4 was checkpointed (L2 at 90%). Read .ralph/handoffs/h.md first.",
            ),
            (
                moment(Trigger::Boundary, Level::L1, 61.0),
                saved(Some("writer"), true, h),
                "Iteration 4 was checkpointed (boundary at 61%) right after \"writer\" was checked off. Read .ralph/handoffs/h.md first.",
            ),
            (
                moment(Trigger::Manual, Level::L0, 0.0),
                saved(None, false, None),
                "Iteration 4 was checkpointed (manual). ",
            ),
        ] {
            assert_eq!(resume_summary(&m, &s), want);
        }
    }

    #[test]
    fn checkpoints_not_set_off_by_the_context_are_labelled_by_their_trigger() {
        assert_eq!(
            titled(Trigger::Signal, Level::L2, 24.4, Some("parser")),
            "Checkpoint (signal at 24%) - parser"
        );
        assert_eq!(
            titled(Trigger::Manual, Level::L2, 0.0, None),
            "Checkpoint (manual)"
        );
        assert_eq!(
            crate::state::checkpoint_label(Trigger::Context, Level::L3, 95.2),
            "L3 at 95%"
        );
        assert_eq!(
            crate::state::checkpoint_label(Trigger::Timeout, Level::L0, 40.0),
            "timeout at 40%"
        );
    }
}
