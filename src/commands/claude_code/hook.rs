//! Claude Code's `PreCompact` and `SessionStart` hooks: save the work
//! (handoff + WIP commit) before Claude Code summarizes the conversation
//! away, and hand the latest handoff to the session that starts after it.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Input, transcript};
use crate::checkpoint::{Moment, Saved};
use crate::config::Config;
use crate::error::Result;
use crate::formats::{ContextCheckpoint, Layout, RunState, Trigger};
use crate::project::Project;
use crate::stream::StreamEvent;

/// What a hook did, in one line for the person watching (or why it did nothing).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    Skipped(String),
    Done(String),
}

/// How long PreCompact waits for the turn's messages to reach the
/// transcript (`transcript::recent_when_written`).
const TRANSCRIPT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// `ralph hook pre-compact`: a handoff from the transcript and the tree,
/// and the WIP commit, before Claude Code compacts.
pub(crate) fn pre_compact(input: &Input, dir: &Path) -> Result<Outcome> {
    // A subagent's compaction loses none of the main session's work; a
    // handoff and WIP commit named after it would say the session compacted.
    if let Some(agent) = input.subagent() {
        return Ok(Outcome::Skipped(format!(
            "subagent {agent} compacts its own conversation, not the session's"
        )));
    }
    let Some(root) = Project::discover(dir).map(|p| p.root().to_path_buf()) else {
        return Ok(Outcome::Skipped(format!(
            "{} is not in a ralph project (no ralph.toml or .ralph/)",
            dir.display()
        )));
    };
    if super::under_supervisor() {
        return Ok(Outcome::Skipped(
            "this session is one of ralph's iterations: the supervisor checkpoints it".into(),
        ));
    }
    if let Some(info) = crate::project::running_supervisor(&Layout::new(&root)) {
        return Ok(Outcome::Skipped(format!(
            "a ralph run (pid {}) owns this project's state; it was left alone",
            info.pid
        )));
    }
    let recent = match input.transcript_path.as_deref() {
        Some(p) => transcript::recent_when_written(p, TRANSCRIPT_WAIT).unwrap_or_else(|e| {
            eprintln!("ralph: cannot read the transcript {}: {e}", p.display());
            transcript::Recent::default()
        }),
        None => transcript::Recent::default(),
    };
    let trigger = input.trigger.as_deref().unwrap_or("auto");
    let saved = crate::supervisor::checkpoint_outside_a_run(&root, |config, state| {
        moment(config, state, input, &root, recent, trigger)
    })?;
    for w in &saved.warnings {
        eprintln!("ralph: warning: {w}");
    }
    Ok(Outcome::Done(summary(&saved)))
}

fn moment(
    config: &Config,
    state: &RunState,
    input: &Input,
    root: &Path,
    recent: transcript::Recent,
    trigger: &str,
) -> Moment {
    let mut meter = super::meter(config, input);
    if let Some(m) = recent.latest {
        // PreCompact's input names no model: the message does.
        if input.model_id().is_none() {
            meter.set_model(&m.model);
        }
        meter.observe(&StreamEvent::Assistant(m), std::time::Duration::ZERO);
    }
    Moment {
        iteration: state.iteration,
        trigger: Trigger::Compact,
        level: meter.level(),
        percent: meter.percent(),
        tokens: meter.tokens(),
        usable: meter.usable(),
        window: meter.window(),
        reason: format!(
            "Claude Code was about to compact the conversation ({trigger} compaction): \
             ralph saved the work and wrote this handoff first, so that nothing is lost to the summary."
        ),
        last_text: recent.last_text,
        last_tools: recent.last_tools,
        files_touched: recent
            .files_touched
            .iter()
            .map(|p| relative(root, p))
            .collect(),
        notes_path: None,
        unasked: None,
        stash_before: None,
        item: None,
        item_done: false,
    }
}

/// A path under the project as the handoff names files: relative to it.
fn relative(root: &Path, path: &str) -> String {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    Path::new(path)
        .strip_prefix(&root)
        .map_or_else(|_| path.to_string(), |p| p.display().to_string())
}

fn summary(saved: &Saved) -> String {
    let handoff = saved.handoff.as_deref().unwrap_or("no handoff");
    match (&saved.commit, &saved.commit_note) {
        (Some(c), _) => format!(
            "ralph: handoff {handoff}, WIP commit {}",
            &c[..c.len().min(10)]
        ),
        (None, Some(note)) => format!("ralph: handoff {handoff}, no commit ({note})"),
        (None, None) => format!("ralph: handoff {handoff}"),
    }
}

/// Sources after which a session gets the resume block; not `clear`, whose
/// point is a clean slate.
const RESUME_SOURCES: [&str; 3] = ["startup", "resume", "compact"];
/// The handoff shown in full up to this many characters.
const HANDOFF_CHARS: usize = 6000;

/// The hook output Claude Code reads from a SessionStart hook's stdout.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionStartOutput {
    pub(crate) hook_specific_output: SessionStartContext,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionStartContext {
    pub(crate) hook_event_name: &'static str,
    pub(crate) additional_context: String,
}

/// `ralph hook session-start`: the latest handoff's resume block as
/// additional context, or nothing.
pub(crate) fn session_start(
    input: &Input,
    dir: &Path,
) -> std::result::Result<SessionStartOutput, String> {
    let source = input.source.as_deref().unwrap_or("startup");
    if !RESUME_SOURCES.contains(&source) {
        return Err(format!("source `{source}`"));
    }
    // A subagent resuming after its own compaction is not the session: the
    // resume block would hand it the main session's work as its task.
    if let Some(agent) = input.subagent() {
        return Err(format!("subagent {agent}"));
    }
    let root = Project::discover(dir)
        .map(|p| p.root().to_path_buf())
        .ok_or_else(|| format!("{} is not in a ralph project", dir.display()))?;
    if super::under_supervisor() {
        return Err(
            "this session is one of ralph's iterations: PROMPT.md carries the resume block".into(),
        );
    }
    let block = resume_block(&root)?;
    Ok(SessionStartOutput {
        hook_specific_output: SessionStartContext {
            hook_event_name: "SessionStart",
            additional_context: block,
        },
    })
}

/// The newest handoff (relative to the root): the state's, else the
/// newest file (their names sort by time).
fn latest_handoff(root: &Path) -> Option<PathBuf> {
    let layout = Layout::new(root);
    let from_state = RunState::load(&layout.state())
        .ok()
        .flatten()
        .and_then(|s| s.last_handoff)
        .map(PathBuf::from)
        .filter(|p| root.join(p).is_file());
    from_state.or_else(|| {
        let mut names: Vec<String> = std::fs::read_dir(layout.handoffs())
            .ok()?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".md"))
            .collect();
        names.sort();
        names
            .pop()
            .map(|n| Path::new(crate::repo::HANDOFFS_DIR).join(n))
    })
}

/// What the state says of the checkpoint's work: committed, nothing to
/// commit, or not committed (and why).
fn committed(cp: &ContextCheckpoint) -> String {
    match (&cp.commit, cp.commit_note.as_deref()) {
        (Some(c), _) => format!("its work is committed ({})", &c[..c.len().min(10)]),
        (None, Some("nothing to commit")) => "it left nothing uncommitted".into(),
        (None, Some(note)) => {
            format!("its work is NOT committed ({note}): the changes are in the work tree")
        }
        (None, None) => "its work is NOT committed: the changes are in the work tree".into(),
    }
}

/// What the session is told: where the work stopped and the handoff
/// itself — or `Err` with why not (docs/commands.md, SessionStart's rule).
pub(crate) fn resume_block(root: &Path) -> std::result::Result<String, String> {
    let state = RunState::load(&Layout::new(root).state()).ok().flatten();
    let (rel, truth) = match &state {
        Some(s) => {
            let cp = crate::checkpoint::to_resume(s)?;
            let rel = cp
                .handoff_file
                .as_deref()
                .map(PathBuf::from)
                .filter(|p| root.join(p).is_file())
                .ok_or("the latest checkpoint has no handoff file")?;
            (rel, Some(cp))
        }
        // No state (a copied handoff, an older ralph): the newest file,
        // without claims about commits.
        None => (
            latest_handoff(root).ok_or("no handoff in .ralph/handoffs yet")?,
            None,
        ),
    };
    let text = std::fs::read_to_string(root.join(&rel)).map_err(|e| e.to_string())?;
    let body = strip_front_matter(&text).trim();
    let config = Config::load(root).unwrap_or_default();
    let item = Project::at(root)
        .plan(&config)
        .ok()
        .and_then(|p| p.current().map(|i| i.text.clone()));
    let written = front_matter_value(&text, "date")
        .map(|d| match front_matter_value(&text, "time") {
            Some(t) => format!(" (written {d} {t})"),
            None => format!(" (written {d})"),
        })
        .unwrap_or_default();
    let what = match truth {
        Some(cp) => format!(
            "This project's work was checkpointed by ralph and not resumed since: {}. \
             The handoff `{}`{written} says where it stopped. Go on from there; do not restart from scratch.\n",
            committed(cp),
            rel.display()
        ),
        None => format!(
            "The newest ralph handoff in this project is `{}`{written}: it says where the work stopped. \
             Check `git status` and `git log` before you go on.\n",
            rel.display()
        ),
    };
    let mut out = format!("# Resume from a ralph checkpoint\n\n{what}");
    if let Some(item) = item {
        out.push_str(&format!(
            "The current plan item (`{}`): **{item}**\n",
            config.plan.display()
        ));
    }
    out.push_str("\n---\n\n");
    if body.chars().count() > HANDOFF_CHARS {
        out.extend(body.chars().take(HANDOFF_CHARS));
        out.push_str(&format!(
            "\n\n(cut here: read `{}` for the rest)\n",
            rel.display()
        ));
    } else {
        out.push_str(body);
        out.push('\n');
    }
    Ok(out)
}

/// A plain `key: value` of the handoff's front matter, unquoted.
fn front_matter_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let front = text.strip_prefix("---\n")?.split_once("\n---\n")?.0;
    front
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(": "))
        .map(|v| v.trim().trim_matches('"'))
}

/// The handoff without its YAML front matter (the body repeats what matters).
fn strip_front_matter(text: &str) -> &str {
    text.strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---\n"))
        .map_or(text, |(_, body)| body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_is_dropped_and_read() {
        assert_eq!(strip_front_matter("---\na: 1\n---\n# T\n"), "# T\n");
        assert_eq!(strip_front_matter("# T\n"), "# T\n");
        let text = "---\ndate: 2026-11-23\ntime: \"16:12:03 UTC\"\n---\n# T\n";
        assert_eq!(front_matter_value(text, "date"), Some("2026-11-23"));
        assert_eq!(front_matter_value(text, "time"), Some("16:12:03 UTC"));
        assert_eq!(front_matter_value("# T\n", "date"), None);
    }

    #[test]
    fn clear_gets_no_resume_block() {
        let d = tempfile::tempdir().unwrap();
        let input = Input {
            source: Some("clear".into()),
            ..Input::default()
        };
        assert_eq!(
            session_start(&input, d.path()).unwrap_err(),
            "source `clear`"
        );
    }

    #[test]
    fn the_newest_handoff_is_resumed() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join(".ralph/handoffs");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("2026-01-01-1000-iter001.md"),
            "---\nx: 1\n---\n# Old\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("2026-01-02-0900-iter002.md"),
            "---\nx: 1\n---\n# New\n",
        )
        .unwrap();
        std::fs::write(d.path().join("fix_plan.md"), "- [x] a\n- [ ] b\n").unwrap();
        let block = resume_block(d.path()).unwrap();
        assert!(
            block.contains("Check `git status`"),
            "no state, no claims: {block}"
        );
        assert!(
            block.contains("`.ralph/handoffs/2026-01-02-0900-iter002.md`"),
            "{block}"
        );
        assert!(
            block.contains("# New") && !block.contains("# Old"),
            "{block}"
        );
        assert!(block.contains("**b**"), "{block}");
        assert!(!block.contains("x: 1"), "{block}");
    }

    #[test]
    fn the_block_says_whether_the_checkpoints_work_is_committed() {
        let cp = |commit: Option<&str>, note: Option<&str>| ContextCheckpoint {
            commit: commit.map(str::to_string),
            commit_note: note.map(str::to_string),
            ..ContextCheckpoint::default()
        };
        assert_eq!(
            committed(&cp(Some("0123456789abcdef"), None)),
            "its work is committed (0123456789)"
        );
        assert_eq!(
            committed(&cp(None, Some("nothing to commit"))),
            "it left nothing uncommitted"
        );
        assert!(
            committed(&cp(None, Some("git.wip_commit is off")))
                .starts_with("its work is NOT committed (git.wip_commit is off)")
        );
    }

    #[test]
    fn a_subagents_compaction_is_not_the_sessions() {
        let d = tempfile::tempdir().unwrap();
        let handoffs = d.path().join(".ralph/handoffs");
        std::fs::create_dir_all(&handoffs).unwrap();
        std::fs::write(d.path().join("ralph.toml"), "").unwrap();
        std::fs::write(handoffs.join("2026-01-01-1000-iter001.md"), "# H\n").unwrap();
        // Claude Code 2.1.323+: the hooks' input for a Task's own compaction.
        let sub = Input::parse(
            br#"{"session_id":"s","transcript_path":"/nowhere.jsonl","cwd":"/w",
                "hook_event_name":"PreCompact","trigger":"auto",
                "agent_id":"a1b2c3","agent_type":"general-purpose"}"#,
        )
        .unwrap();
        assert_eq!(sub.subagent(), Some("a1b2c3"));
        match pre_compact(&sub, d.path()).unwrap() {
            Outcome::Skipped(why) => assert!(why.contains("subagent a1b2c3"), "{why}"),
            done => panic!("{done:?}"),
        }
        assert_eq!(std::fs::read_dir(&handoffs).unwrap().count(), 1);
        assert!(!d.path().join(".ralph/state.json").exists());
        let start = Input {
            source: Some("compact".into()),
            ..sub
        };
        assert_eq!(
            session_start(&start, d.path()).unwrap_err(),
            "subagent a1b2c3"
        );
        let main = Input {
            agent_id: None,
            ..start
        };
        assert!(session_start(&main, d.path()).is_ok());
    }

    #[test]
    fn nothing_outside_a_project() {
        let d = tempfile::tempdir().unwrap();
        let input = Input::default();
        assert!(matches!(
            pre_compact(&input, d.path()).unwrap(),
            Outcome::Skipped(_)
        ));
        assert!(session_start(&input, d.path()).is_err());
        assert!(!d.path().join(".ralph").exists());
    }
}
