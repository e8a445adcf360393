//! The morning report (`ralph report`): what happened in a run, as one
//! self-contained HTML page with charts, a short text summary and JSON, all
//! built from what the run recorded (`.ralph/events.jsonl`,
//! `.ralph/state.json`). Not the live terminal view; that is `report`.

use std::path::{Component, Path, PathBuf};

use super::{Budgets, RunReport, gather, html};
use crate::config::Config;
use crate::context::Thresholds;
use crate::error::{Error, Result};
use crate::events::Bus;
use crate::formats::{Event, Record, read_log};
use crate::formats::{Layout, RunState};
use crate::repo::OwnPaths;

/// Which runs to report on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Which {
    Latest,
    Run(String),
    All,
}

/// `.ralph/report.html`.
pub(crate) fn default_path(layout: &Layout) -> PathBuf {
    layout.report()
}

/// The reports of the runs asked for, from the project's recorded files.
/// `config` supplies the thresholds and budgets (defaults without one).
pub(crate) fn reports(
    layout: &Layout,
    config: Option<&Config>,
    which: &Which,
) -> Result<Vec<RunReport>> {
    let records = read_log(&layout.events());
    let state = RunState::load(&layout.state())?;
    let mut ids = gather::run_ids(&records);
    if let Some(s) = state.as_ref().filter(|s| !s.run_id.is_empty())
        && !ids.contains(&s.run_id)
    {
        ids.push(s.run_id.clone());
    }
    let chosen: Vec<String> = match which {
        Which::All => ids,
        Which::Latest => ids.last().cloned().into_iter().collect(),
        Which::Run(id) if ids.contains(id) => vec![id.clone()],
        Which::Run(id) => {
            return Err(
                Error::usage(format!("no run {id} is recorded in .ralph/")).with_hint(
                    if ids.is_empty() {
                        "start one with `ralph run`".to_string()
                    } else {
                        format!("recorded runs: {}", ids.join(", "))
                    },
                ),
            );
        }
    };
    if chosen.is_empty() {
        return Err(Error::usage("no ralph run is recorded here yet")
            .with_hint("start one with `ralph run` (or `ralph demo` to see a report)"));
    }
    Ok(chosen
        .iter()
        .map(|id| {
            let own = state
                .clone()
                .filter(|s| &s.run_id == id)
                .or_else(|| kept_state(layout, id));
            let parallel = crate::formats::ledger_of(&layout.dir, id);
            match (own, parallel.filter(|l| l.ended.is_none())) {
                (None, Some(ledger)) => {
                    // A parallel run not ended: its state as it stands, and
                    // what its workers did that no coordinator took in yet.
                    let live = live_state(layout, config, &ledger);
                    let mut records = records.clone();
                    if live.status != crate::formats::RunStatus::Running {
                        records.extend(ledger.unheard());
                    }
                    build(layout, id, &records, Some(&live), config)
                }
                (own, _) => build(layout, id, &records, own.as_ref(), config),
            }
        })
        .collect())
}

/// The state of a parallel run that has not ended (it keeps none until
/// it ends): running while its coordinator holds the project's lock, else
/// interrupted, as a single loop whose supervisor died.
fn live_state(
    layout: &Layout,
    config: Option<&Config>,
    ledger: &crate::formats::Ledger,
) -> RunState {
    let project = crate::project::Project::at(&layout.root);
    let text = match config {
        Some(c) => project.plan_text(c),
        None => project.plan_text_at(Path::new(&ledger.plan)),
    }
    .unwrap_or_default();
    let head = crate::repo::Repo::open(&layout.root)
        .ok()
        .flatten()
        .and_then(|r| r.head_id());
    let (status, reason) = if crate::project::running_supervisor(layout).is_some() {
        (crate::formats::RunStatus::Running, None)
    } else {
        (
            crate::formats::RunStatus::Interrupted,
            Some(format!(
                "its coordinator stopped before the run ended: `ralph run --workers {}` resumes it",
                ledger.workers.max(2)
            )),
        )
    };
    ledger.state(&text, head, status, reason)
}

/// The state a run had when it ended, kept beside its transcripts by
/// [`write_after_run`]: `.ralph/state.json` moves on to the next run, and
/// only the state has the plan items.
fn kept_state(layout: &Layout, run_id: &str) -> Option<RunState> {
    RunState::load(&layout.run_dir(run_id).join("state.json"))
        .ok()
        .flatten()
}

fn build(
    layout: &Layout,
    id: &str,
    records: &[Record],
    state: Option<&RunState>,
    config: Option<&Config>,
) -> RunReport {
    let thresholds = config.map_or(Thresholds::DEFAULT, Config::thresholds);
    let budgets = Budgets {
        max_iterations: None,
        max_cost_usd: config.and_then(|c| c.loop_.max_cost_usd),
        max_duration_secs: config.and_then(|c| c.loop_.max_duration.map(|d| d.0.as_secs_f64())),
        deadline: None,
    };
    let mut report = gather::build(id, records, state, thresholds, budgets);
    let kind = config.map(|c| c.agent.kind).unwrap_or_default();
    let own = config.map_or_else(OwnPaths::default, |c| OwnPaths::new(&c.prompt_file));
    let own_commits = crate::formats::ledger_of(&layout.dir, id).map(|l| l.commits);
    for c in own_commits.unwrap_or_default() {
        if !report.commits.contains(&c) {
            report.commits.push(c);
        }
    }
    super::changes::read_git(&mut report, &layout.root, kind, &own);
    report.story.lanes = super::lanes::Lanes::of(id, records);
    // A parallel run's branches not merged: listed with their commits.
    if let Some(view) = crate::report::WorkersView::load(&layout.root).filter(|v| v.run_id == id) {
        report.story.lanes.left = view.left();
    }
    // As the run last saw them, reset since or not.
    if let Some(s) = state.filter(|s| s.run_id == id) {
        report.quota = crate::rules::quota::WindowView::all(&s.quota, config.map(|c| &c.quota), 0);
    }
    report
}

/// Write the page for `runs` to `path` (atomically, user-only: it quotes
/// the agent). Handoff links are relative to where the page lands.
pub(crate) fn write_html(root: &Path, path: &Path, runs: &[RunReport]) -> Result<()> {
    if !overwritable(path) {
        return Err(crate::Error::usage(format!(
            "refusing to overwrite {}: it is not a report ralph wrote",
            path.display()
        ))
        .with_hint("give --html the name of a new file, e.g. `--html report.html`"));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let root_href = relative(&parent, root);
    let page = html::Page {
        root_href: &root_href,
        tz: jiff::tz::TimeZone::system(),
        generated_at: &jiff::Zoned::now().strftime("%Y-%m-%d %H:%M %Z").to_string(),
    };
    let text = html::render(runs, &page);
    crate::formats::write_atomic(path, crate::text::secrets::redact(&text).as_bytes())
}

/// Whether the report may be written at `path`: nothing there yet, or a
/// page ralph wrote before (`--html fix_plan.md` must not eat the plan).
fn overwritable(path: &Path) -> bool {
    use std::io::Read as _;
    let Ok(file) = std::fs::File::open(path) else {
        return true;
    };
    let mut head = Vec::new();
    let _ = file.take(4096).read_to_end(&mut head);
    memchr::memmem::find(&head, html::GENERATOR.as_bytes()).is_some()
}

/// The way from directory `from` to directory `to`, as a URL prefix
/// ending in `/` (`../` from `.ralph/` to the project).
fn relative(from: &Path, to: &Path) -> String {
    let (Ok(from), Ok(to)) = (from.canonicalize(), to.canonicalize()) else {
        return format!("file://{}/", to.display());
    };
    let a: Vec<Component> = from.components().collect();
    let b: Vec<Component> = to.components().collect();
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = "../".repeat(a.len() - common);
    for c in &b[common..] {
        out.push_str(&c.as_os_str().to_string_lossy());
        out.push('/');
    }
    out
}

/// At the end of `ralph run`: [`write_after_run`], and its path for
/// `run_ended` (so the display, `--json` and the `on_exit` hooks get it);
/// `None` after a warning when it cannot be written: the run's outcome
/// does not depend on its report.
pub(crate) fn after_run(
    layout: &Layout,
    config: &Config,
    state: &RunState,
    bus: &mut Bus,
) -> Option<String> {
    match write_after_run(layout, config, state) {
        Ok(path) => Some(path.display().to_string()),
        Err(e) => {
            bus.emit(Event::Warning {
                message: format!("cannot write the report: {e}"),
            });
            None
        }
    }
}

/// The page of the run that just ended, at [`default_path`], and a copy of
/// its state beside its transcripts. On failure no stale page from an
/// earlier run is left behind.
pub(crate) fn write_after_run(
    layout: &Layout,
    config: &Config,
    state: &RunState,
) -> Result<PathBuf> {
    let path = default_path(layout);
    let kept = layout.run_dir(&state.run_id);
    if kept.is_dir() {
        // As state.json itself is written: no secrets in it.
        let json = serde_json::to_string(state)
            .map_err(|e| Error::wrap("cannot serialize the run state", e))?;
        crate::formats::write_atomic(
            &kept.join("state.json"),
            crate::text::secrets::redact(&json).as_bytes(),
        )?;
    }
    let records = read_log(&layout.events());
    let report = build(layout, &state.run_id, &records, Some(state), Some(config));
    write_html(&layout.root, &path, &[report]).inspect_err(|_| {
        let _ = std::fs::remove_file(&path);
    })?;
    Ok(path)
}

// The ledger is a format (`formats::ledger`); what the report makes of it
// is the report's.
impl crate::formats::Ledger {
    /// The parallel run as a run's state, for its morning report (as a
    /// single loop's `state.json` is): its outcome, its items (the plan's
    /// units), its cost, and the run branch from its start to `head`.
    pub(crate) fn state(
        &self,
        plan_text: &str,
        head: Option<String>,
        status: crate::formats::RunStatus,
        reason: Option<String>,
    ) -> crate::formats::RunState {
        let units = crate::plan::units::units(plan_text).unwrap_or_default();
        let keys = |state: crate::plan::units::UnitState| -> Vec<String> {
            (units.iter().filter(|u| u.state == state))
                .map(|u| u.key.clone())
                .collect()
        };
        crate::formats::RunState {
            run_id: self.run_id.clone(),
            plan: self.plan.clone(),
            started_at: self.started_at.clone(),
            status,
            exit_reason: reason,
            completed_items: keys(crate::plan::units::UnitState::Done),
            todo_items: keys(crate::plan::units::UnitState::Open),
            cost_usd: self.cost_usd,
            start_commit: self.start_commit.clone(),
            end_commit: head,
            ended_at: self.ended.clone(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_between_directories() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".ralph")).unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        assert_eq!(relative(&root.join(".ralph"), root), "../");
        assert_eq!(relative(root, root), "");
        assert_eq!(relative(&root.join("a/b"), root), "../../");
    }
}
