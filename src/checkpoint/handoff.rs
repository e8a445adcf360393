//! The handoff document: its title, its YAML front matter, its name on
//! disk, and its text — rendered (pure, from what `gather` read) at the
//! most detail that fits `[handoff] max_tokens`, and written.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Gathered, Moment, Saved};
use crate::config::Config;
use crate::context::Level;
use crate::formats::{Layout, Trigger};
use crate::prompt::fit;
use crate::prompt::tiers::{self, Detail, PlanTiers};
use crate::prompt::{self, Templates};
use crate::text::cut;

/// The title by trigger: "Context Checkpoint L2 at 87% - parser" for the
/// context, "Checkpoint (signal at 24%) - parser" for anything else.
pub(super) fn titled(trigger: Trigger, level: Level, percent: f64, item: Option<&str>) -> String {
    let mut t = match trigger {
        Trigger::Context | Trigger::Compact => {
            format!("Context Checkpoint {level} at {}%", percent.round() as i64)
        }
        _ => format!(
            "Checkpoint ({})",
            crate::formats::checkpoint_label(trigger, level, percent)
        ),
    };
    if let Some(item) = item {
        t.push_str(" - ");
        t.push_str(item);
    }
    t
}

#[derive(Clone, Serialize)]
pub(super) struct ChangeView {
    pub(super) kind: String,
    pub(super) path: String,
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
pub(super) fn write_handoff(
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
                crate::formats::write_private(
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

/// The worker this loop is, if `ralph run --workers N` started it
/// (`RALPH_WORKER`, set by the coordinator): a short printable name only.
fn this_worker() -> Option<String> {
    std::env::var("RALPH_WORKER").ok().filter(|w| {
        !w.is_empty() && w.len() <= 40 && w.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    })
}

pub(super) fn unique_handoff_name(layout: &Layout, now: &jiff::Zoned, iteration: u32) -> PathBuf {
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
    use std::collections::BTreeMap;

    use super::super::tests::moment;
    use super::*;
    use crate::plan::Plan;
    use crate::repo::{OwnPaths, Repo};

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
            crate::formats::checkpoint_label(Trigger::Context, Level::L3, 95.2),
            "L3 at 95%"
        );
        assert_eq!(
            crate::formats::checkpoint_label(Trigger::Timeout, Level::L0, 40.0),
            "timeout at 40%"
        );
    }
}
