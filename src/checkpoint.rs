//! What happens after a checkpointed iteration (and on `ralph checkpoint`
//! without a run): the handoff document, the WIP commit that carries it,
//! and the facts the state and the hooks get. Each step survives the
//! failure of the ones before it: `gather` (reads; what it cannot read is a
//! warning), `write_handoff` (through the pure `render_handoff`), `commit`
//! (a skipped commit rewrites the handoff to say so), `resume_summary`
//! (pure).
//!
//! ```text
//! checkpoint.rs        Moment, Saved, perform: gather, commit, the resume summary
//! checkpoint/
//!   handoff.rs         the handoff document: title, front matter, name, render (pure), write
//! ```

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::context::Level;
use crate::formats::{ContextCheckpoint, FileInProgress, Layout, RunState, RunStatus, Trigger};
use crate::plan::{self, Plan};
use crate::prompt::tiers;
use crate::prompt::{self, Templates};
use crate::repo::{CommitOutcome, LeftOut, OwnPaths, Repo, StashEntry};
use crate::stream::ToolCall;

/// The checkpoint a new session (SessionStart) or a new run may resume
/// from, by the state's truth: the one still to be resumed
/// (`context_checkpoint.active`: no iteration of ralph's took it over yet),
/// unless the run it belongs to completed after it was made (days later,
/// for other work, its handoff would send the session the wrong way).
/// `Err` says why there is none.
pub(crate) fn to_resume(state: &RunState) -> std::result::Result<&ContextCheckpoint, String> {
    let cp = &state.context_checkpoint;
    if !cp.active {
        return Err("the latest checkpoint was resumed already (by ralph's loop)".into());
    }
    let at = |t: Option<&str>| t.and_then(|t| t.parse::<jiff::Timestamp>().ok());
    if state.status == RunStatus::Completed
        && let (Some(made), Some(ended)) =
            (at(cp.timestamp.as_deref()), at(state.ended_at.as_deref()))
        && made <= ended
    {
        return Err("the run the latest checkpoint belongs to has completed".into());
    }
    Ok(cp)
}

/// Everything known about the moment of the checkpoint.
#[derive(Debug, Clone)]
pub(crate) struct Moment {
    pub(crate) iteration: u32,
    pub(crate) trigger: Trigger,
    pub(crate) level: Level,
    pub(crate) percent: f64,
    pub(crate) tokens: u64,
    pub(crate) usable: u64,
    pub(crate) window: u64,
    pub(crate) reason: String,
    pub(crate) last_text: Option<String>,
    pub(crate) last_tools: Vec<ToolCall>,
    pub(crate) files_touched: Vec<String>,
    /// Where the agent was asked to write its notes (relative to the root).
    pub(crate) notes_path: Option<PathBuf>,
    /// Why no notes were asked for, when the agent could not be asked (a
    /// kind that takes no message mid-session): the handoff says so.
    pub(crate) unasked: Option<String>,
    /// The item the checkpoint belongs to, when the loop followed the
    /// items (else the plan's current one), and whether it was checked
    /// off just before (the next item untouched).
    pub(crate) item: Option<String>,
    pub(crate) item_done: bool,
    /// The stash entries (ids) when the iteration began; None when no
    /// iteration was watched (`ralph checkpoint` without a run).
    pub(crate) stash_before: Option<Vec<String>>,
}

/// What the checkpoint produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Saved {
    pub(crate) title: String,
    pub(crate) commit: Option<String>,
    /// Why there is no commit, when there is none.
    pub(crate) commit_note: Option<String>,
    /// Relative path of the handoff document, when it was written.
    pub(crate) handoff: Option<String>,
    pub(crate) agent_notes: bool,
    pub(crate) files_in_progress: Vec<FileInProgress>,
    pub(crate) current_item: Option<String>,
    /// `current_item` was checked off just before the checkpoint.
    pub(crate) item_done: bool,
    pub(crate) resume_summary: String,
    pub(crate) warnings: Vec<String>,
    /// Decisions added to the decision log.
    pub(crate) decisions: usize,
    /// Stash entries the agent made during the iteration: work the WIP
    /// commit does not hold.
    pub(crate) stashed: Vec<StashEntry>,
    /// Work the WIP commit left out (too big, binary, too many new files).
    pub(crate) left_out: Vec<LeftOut>,
}

/// Where the agent writes its notes for iteration `n`.
pub(crate) fn notes_path(n: u32) -> PathBuf {
    PathBuf::from(format!(".ralph/notes/iter-{n:03}.md"))
}

mod handoff;

use handoff::{ChangeView, titled, unique_handoff_name, write_handoff};

/// Write the handoff, make the WIP commit, and say what was saved: gather
/// what the checkpoint works from, write the handoff (rendered by the pure
/// [`render_handoff`]), commit, and sum up for the next prompt.
pub(crate) fn perform(root: &Path, config: &Config, templates: &Templates, m: &Moment) -> Saved {
    // The file list, diffstat, limits and WIP commit from one walk of the
    // work tree (or the walk of the iteration's end this joins).
    let _pass = crate::repo::one_pass_to_commit(root);
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
    let project = crate::project::Project::at(root);
    let plan_text = project.plan_text(config).unwrap_or_default();
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
        let secret: Vec<String> = (saved.left_out.iter().filter(|l| l.secret))
            .map(crate::repo::LeftOut::named)
            .collect();
        if !secret.is_empty() {
            saved.warnings.push(format!(
                "left out of the WIP commit, still in the work tree: {}",
                secret.join(", ")
            ));
        }
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
        let _ = crate::formats::write_private(&root.join(p), clean.as_bytes());
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

/// The WIP commit of the tree as it stands, handoff included; a commit
/// that was skipped rewrites the handoff to say so.
impl Saved {
    /// Its WIP commit for the run's tally: made, failed (why), or not
    /// called for (nothing to commit, `git.wip_commit` off).
    pub(crate) fn commit_outcome(&self) -> Option<Result<(), &str>> {
        if self.commit.is_some() {
            return Some(Ok(()));
        }
        match self.commit_note.as_deref() {
            None | Some(NOTHING_TO_COMMIT) | Some(WIP_OFF) => None,
            Some(why) => Some(Err(why)),
        }
    }
}

const NOTHING_TO_COMMIT: &str = "nothing to commit";
const WIP_OFF: &str = "git.wip_commit is off";

fn commit(
    root: &Path,
    config: &Config,
    templates: &Templates,
    m: &Moment,
    g: &Gathered,
    saved: &mut Saved,
) {
    match &g.repo {
        _ if !config.git.wip_commit => saved.commit_note = Some(WIP_OFF.into()),
        None => saved.commit_note = Some("not a git repository".into()),
        Some(r) => {
            let message = commit_message(config, m, saved);
            let message = crate::text::secrets::scrub_keeping(&message, &g.plan_text);
            match r.wip_commit_leaving_out(&message, &g.own, &saved.left_out, &config.git.guard()) {
                CommitOutcome::Committed { id, .. } => saved.commit = Some(id),
                CommitOutcome::NothingToCommit => {
                    saved.commit_note = Some(NOTHING_TO_COMMIT.into());
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

/// The WIP commit of the work tree as it stands for the checkpoints of
/// iterations `pending`, whose own commit failed (`why`): a retry once git
/// may have room again, by the checkpoint's rules (the `[git]` guard,
/// secrets left out). `None` when there is no repository to commit in.
pub(crate) fn commit_late(
    root: &Path,
    config: &Config,
    own: &OwnPaths,
    pending: &[u32],
    why: &str,
) -> Option<CommitOutcome> {
    let repo = Repo::open(root).ok().flatten()?;
    let guard = config.git.guard();
    let left_out = repo.left_out(own, &guard).unwrap_or_default();
    let iterations: Vec<String> = pending.iter().map(u32::to_string).collect();
    let message = format!(
        "ralph: late WIP commit of the checkpoint of iteration {}\n\nIts WIP commit failed ({why}); this commits the work tree as it stands now.\nTrigger: retry\n",
        iterations.join(", ")
    );
    Some(repo.wip_commit_leaving_out(&message, own, &left_out, &guard))
}

/// What the next prompt says of this checkpoint (`context_checkpoint.resume_summary`).
fn resume_summary(m: &Moment, saved: &Saved) -> String {
    let mut summary = format!(
        "Iteration {} was checkpointed ({}){}. {}",
        m.iteration,
        match m.trigger {
            Trigger::Context => format!("context, {} at {:.0}%", m.level, m.percent),
            trigger => crate::formats::checkpoint_label(trigger, m.level, m.percent),
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

/// `stash@{0} (On main: baseline)`: how the prompt and the handoff name
/// a stash entry.
pub(crate) fn stash_names(stashed: &[StashEntry]) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_is_to_be_resumed_until_taken_over_or_completed_after() {
        let state = |active: bool, made: &str, status: RunStatus, ended: Option<&str>| RunState {
            status,
            ended_at: ended.map(str::to_string),
            context_checkpoint: ContextCheckpoint {
                active,
                timestamp: Some(made.into()),
                ..ContextCheckpoint::default()
            },
            ..RunState::default()
        };
        let (t1, t2) = ("2026-11-20T10:00:00Z", "2026-11-20T11:00:00Z");
        // (state, offered?)
        let table = [
            (state(true, t1, RunStatus::New, None), true),
            // resumed by ralph's loop already
            (state(false, t1, RunStatus::Running, None), false),
            // made during a run that completed after it
            (state(true, t1, RunStatus::Completed, Some(t2)), false),
            // made after the completion (`ralph checkpoint` the day after)
            (state(true, t2, RunStatus::Completed, Some(t1)), true),
            // a run that stopped otherwise: the checkpoint is still the way on
            (state(true, t1, RunStatus::BreakerOpen, Some(t2)), true),
        ];
        for (s, offered) in table {
            assert_eq!(to_resume(&s).is_ok(), offered, "{s:?}");
        }
    }

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

    pub(super) fn moment(trigger: Trigger, level: Level, percent: f64) -> Moment {
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
}
