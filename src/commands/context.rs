//! `ralph context`: how full the running iteration's context window is (the
//! latest `context` event of `.ralph/events.jsonl`), its trend, what to do
//! about it, and the peak of every earlier iteration; `--watch` follows a
//! run live until it ends.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::Report;
use super::estimate::ItemEstimate;
use super::status::Phase;
use crate::config::Config;
use crate::context::{Level, MeterReading, Thresholds};
use crate::error::Result;
use crate::events::LogTail;
use crate::events::terminal::{bar, sparkline, tokens_short};
use crate::formats::ItemAccount;
use crate::formats::{Event, Record};
use crate::formats::{HistoryEntry, Layout, RunState};
use crate::project::Project;
use crate::text::format_duration;

/// How often `--watch` looks for news.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// Below this time to the checkpoint level, "checkpoint soon".
const SOON: Duration = Duration::from_secs(10 * 60);
/// History rows shown to people (`--json` has them all).
const HISTORY_ROWS: usize = 20;

/// The latest reading of the context meter, and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Reading {
    pub(crate) iteration: u32,
    /// When the meter read this (RFC 3339).
    pub(crate) at: String,
    #[serde(flatten)]
    pub(crate) meter: MeterReading,
    /// `ok`, `warn`, `checkpoint`, `emergency`: what the level means.
    pub(crate) meaning: &'static str,
    /// The latest tool call of the iteration, as the status line shows it.
    pub(crate) tool: Option<String>,
    /// Times the agent compacted its context in this iteration (context lost).
    pub(crate) compactions: u32,
}

/// What the operator should make of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Recommendation {
    /// `not_running`, `between_iterations`, `starting`, `safe`,
    /// `checkpoint_soon`, `checkpoint_now`, `emergency`.
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

/// Everything `ralph context` reports (`--json`: this object).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ContextReport {
    #[serde(flatten)]
    pub(crate) phase: Phase,
    pub(crate) run_id: Option<String>,
    /// The latest iteration started.
    pub(crate) iteration: u32,
    /// `current` is the reading of an iteration that is running now.
    pub(crate) live: bool,
    /// The agent's kind reports its usage per model call; when it does not
    /// (Gemini CLI), no reading is shown, only "not metered live".
    pub(crate) metered_live: bool,
    /// The latest reading: of the live iteration, or the last one of the
    /// last iteration when none is running.
    pub(crate) current: Option<Reading>,
    pub(crate) thresholds: Thresholds,
    /// The first open item of the plan: what the agent is working on.
    pub(crate) plan_item: Option<String>,
    /// Its estimate, and whether it fits in what is left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) item: Option<ItemEstimate>,
    /// What each item worked on so far cost (`state.json` → `items`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) items: Vec<ItemAccount>,
    /// Per iteration: the item worked on, items checked off, tokens it took.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) iterations: Vec<IterationItems>,
    pub(crate) recommendation: Recommendation,
    /// One entry per finished iteration, oldest first.
    pub(crate) history: Vec<HistoryEntry>,
    /// A parallel run (`ralph run --workers N`): each running worker's own
    /// context, read from its worktree.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) workers: Vec<WorkerContext>,
}

/// One worker's context in a parallel run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct WorkerContext {
    pub(crate) worker: String,
    pub(crate) item: String,
    pub(crate) context: ContextReport,
}

/// The context of every worker of the parallel run recorded at `root`
/// that is running now.
fn worker_contexts(root: &Path) -> Vec<WorkerContext> {
    let Some(view) = crate::report::WorkersView::load(root) else {
        return Vec::new();
    };
    view.assignments
        .into_iter()
        .filter(|a| a.status == "running")
        .filter_map(|a| {
            let context = Watcher::new(Path::new(&a.project_dir)).report().ok()?;
            Some(WorkerContext {
                worker: a.worker,
                item: a.item,
                context,
            })
        })
        .collect()
}

/// An iteration's item accounting, from `state.json`'s history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct IterationItems {
    pub(crate) iteration: u32,
    pub(crate) item: Option<String>,
    pub(crate) items_checked: Vec<String>,
    pub(crate) item_tokens: u64,
    pub(crate) split: bool,
}

/// What the event log says about the latest run and iteration.
#[derive(Debug, Default)]
struct Live {
    /// The run's plan (`ralph run PLAN` may name another than ralph.toml).
    plan: Option<PathBuf>,
    started: Option<u32>,
    ended: Option<u32>,
    reading: Option<Reading>,
}

impl Live {
    fn apply(&mut self, record: &Record) {
        match &record.event {
            Event::RunStarted { plan, .. } => {
                *self = Live {
                    plan: Some(PathBuf::from(plan)),
                    ..Live::default()
                }
            }
            Event::IterationStarted { iteration, .. } => {
                self.started = Some(*iteration);
                self.reading = None;
            }
            Event::Context {
                iteration,
                reading,
                tool,
            } => {
                let previous = self.reading.take().filter(|r| r.iteration == *iteration);
                self.reading = Some(Reading {
                    iteration: *iteration,
                    at: record.ts.clone(),
                    meter: *reading,
                    meaning: reading.level.meaning(),
                    tool: tool
                        .clone()
                        .or_else(|| previous.as_ref().and_then(|p| p.tool.clone())),
                    compactions: previous.map_or(0, |p| p.compactions),
                });
            }
            Event::Compacted { iteration, .. } => {
                if let Some(r) = self.reading.as_mut().filter(|r| r.iteration == *iteration) {
                    r.compactions += 1;
                }
            }
            Event::IterationEnded { iteration, .. } => self.ended = Some(*iteration),
            _ => {}
        }
    }

    fn iteration_running(&self) -> bool {
        self.started.is_some() && self.started != self.ended
    }
}

/// Builds reports, reading only what was appended to the log since the last one.
struct Watcher {
    root: PathBuf,
    layout: Layout,
    tail: LogTail,
    live: Live,
}

impl Watcher {
    fn new(root: &Path) -> Watcher {
        let layout = Layout::new(root);
        Watcher {
            root: root.to_path_buf(),
            tail: LogTail::new(layout.events()),
            layout,
            live: Live::default(),
        }
    }

    fn report(&mut self) -> Result<ContextReport> {
        let config = Config::load(&self.root)?;
        // The events after the state: a run that ends in between still
        // shows its last events, and the next report shows it ended.
        let (phase, state) = Phase::load(&self.layout)?;
        let records = loop {
            match self.tail.read_new()? {
                Some(records) => break records,
                None => self.live = Live::default(),
            }
        };
        // A parallel run's log holds its workers' records too: each has
        // its own context (`workers`), not the coordinator's.
        for r in records.iter().filter(|r| r.worker.is_none()) {
            self.live.apply(r);
        }
        let state = state.unwrap_or_default();
        let live = phase.is_live() && self.live.iteration_running();
        let thresholds = config.thresholds();
        // The plan item is a courtesy: an unreadable plan only leaves it out.
        let plan = self.live.plan.as_ref().unwrap_or(&config.plan);
        let loaded = Project::at(&self.root).plan_at(plan).ok();
        let plan_item = (loaded.as_ref()).and_then(|p| p.current().map(|i| i.text.clone()));
        let metered_live = config.agent.kind.capabilities().metered_live();
        let current = self.live.reading.clone();
        let occupancy = current.as_ref().filter(|_| live).map(|r| r.meter.tokens);
        let item = plan_item
            .as_deref()
            .map(|i| ItemEstimate::of(&self.root, &config, &state, loaded.as_ref(), i, occupancy));
        let iterations = state
            .history
            .iter()
            .filter(|h| h.item.is_some() || !h.items_checked.is_empty())
            .map(|h| IterationItems {
                iteration: h.iteration,
                item: h.item.clone(),
                items_checked: h.items_checked.clone(),
                item_tokens: h.item_tokens,
                split: h.split,
            })
            .collect();
        Ok(ContextReport {
            item,
            items: state.items.clone(),
            iterations,
            recommendation: if metered_live || !live {
                recommend(&phase, live, current.as_ref(), &thresholds)
            } else {
                Recommendation {
                    code: "not_metered_live",
                    message: format!(
                        "{} reports its usage only when its run ends: the context is not metered live, no level acts mid-session; budgets, the breaker and handoffs at the iteration's end still do",
                        config.agent.kind.product()
                    ),
                }
            },
            run_id: (!state.run_id.is_empty()).then(|| state.run_id.clone()),
            iteration: state.iteration.max(self.live.started.unwrap_or(0)),
            phase,
            live,
            metered_live,
            current,
            thresholds,
            plan_item,
            history: state.context_history,
            workers: worker_contexts(&self.root),
        })
    }
}

fn about(d: Duration) -> String {
    format!("about {}", format_duration(d))
}

fn recommend(
    phase: &Phase,
    live: bool,
    current: Option<&Reading>,
    t: &Thresholds,
) -> Recommendation {
    let (code, message) = match current.filter(|_| live) {
        _ if !phase.is_live() => (
            "not_running",
            "no run is going; the next iteration starts with a fresh context window".to_string(),
        ),
        _ if !live => (
            "between_iterations",
            "between iterations; the next one starts with a fresh context window".to_string(),
        ),
        None => (
            "starting",
            "the iteration has just started; no turn has been metered yet".to_string(),
        ),
        Some(r) => {
            let eta = r.meter.eta_to_checkpoint_secs.map(Duration::from_secs);
            match r.meter.level {
                Level::L3 => (
                    "emergency",
                    format!(
                        "past the emergency level ({}%): ralph is stopping the agent now and saving its work",
                        t.emergency
                    ),
                ),
                Level::L2 => (
                    "checkpoint_now",
                    format!(
                        "checkpoint now: past the checkpoint level ({}%), ralph is asking the agent for its handoff and will then stop it",
                        t.checkpoint
                    ),
                ),
                level if level == Level::L1 || eta.is_some_and(|d| d <= SOON) => (
                    "checkpoint_soon",
                    format!(
                        "checkpoint soon: the checkpoint level ({}%) is {} away; ralph will checkpoint there, or now on `ralph checkpoint`",
                        t.checkpoint,
                        eta.map_or("not far".into(), about)
                    ),
                ),
                _ => (
                    "safe",
                    format!(
                        "safe to continue{}",
                        eta.map(|d| format!(
                            ": the checkpoint level ({}%) is {} away at this rate",
                            t.checkpoint,
                            about(d)
                        ))
                        .unwrap_or_default()
                    ),
                ),
            }
        }
    };
    Recommendation { code, message }
}

impl Report for ContextReport {
    fn human(&self) -> String {
        // A parallel run's coordinator runs no agent: its workers' blocks
        // are the report, under one line for the run.
        let mut out = if self.workers.is_empty() {
            self.own_lines()
        } else {
            format!(
                "run       parallel run · {} · {} worker(s) at work\n",
                self.phase.headline(None, None),
                self.workers.len()
            )
        };
        for w in &self.workers {
            let _ = writeln!(
                out,
                "\nworker    {} · {}",
                w.worker,
                crate::text::printable(&w.item)
            );
            out.push_str(&w.context.own_lines());
        }
        out
    }
}

impl ContextReport {
    /// The report of this loop alone.
    fn own_lines(&self) -> String {
        let mut out = String::new();
        let headline = self.phase.headline(None, None);
        let _ = match &self.run_id {
            Some(id) => writeln!(
                out,
                "run       {id} · {headline} · iteration {}",
                self.iteration
            ),
            None => writeln!(out, "run       {headline}"),
        };
        match &self.current {
            _ if !self.metered_live => {
                let _ = writeln!(out, "context   not metered live");
            }
            Some(r) => {
                let m = &r.meter;
                let _ = writeln!(
                    out,
                    "context   {} {:.1}% · {} of {} usable (window {}{}) · {} {} · {}",
                    bar(m.percent, 20),
                    m.percent,
                    tokens_short(m.tokens),
                    tokens_short(m.usable),
                    tokens_short(m.window),
                    m.window_source
                        .map_or(String::new(), |s| format!(", {}", s.says())),
                    m.level,
                    r.meaning,
                    if self.live {
                        format!("read {}", super::local_time(&r.at))
                    } else {
                        format!("last reading of iteration {}", r.iteration)
                    }
                );
                if self.live {
                    let rate = m.rate_per_min.map_or("no trend yet".into(), |v| {
                        format!(
                            "{}{}/min",
                            if v < 0.0 { "-" } else { "+" },
                            tokens_short(v.abs() as u64)
                        )
                    });
                    let eta = match m.eta_to_checkpoint_secs {
                        Some(0) => "reached".into(),
                        Some(s) => format!("in {}", about(Duration::from_secs(s))),
                        None => "not estimated".into(),
                    };
                    let _ = writeln!(
                        out,
                        "trend     {rate} · checkpoint ({}%) {eta}",
                        self.thresholds.checkpoint
                    );
                }
                if let Some(t) = &r.tool {
                    let _ = writeln!(out, "tool      {}", crate::text::printable(t));
                }
                if r.compactions > 0 {
                    let _ = writeln!(
                        out,
                        "warning   the agent compacted its context {} time(s): context was lost",
                        r.compactions
                    );
                }
            }
            None => {
                let _ = writeln!(out, "context   no reading yet");
            }
        }
        if let Some(item) = &self.plan_item {
            let _ = writeln!(out, "plan item {}", crate::text::printable(item));
        }
        if let Some(e) = &self.item {
            out.push_str(&e.lines());
        }
        let _ = writeln!(out, "advice    {}", self.recommendation.message);
        if self.history.is_empty() || !self.metered_live {
            return out;
        }
        let shown = &self.history[self.history.len().saturating_sub(HISTORY_ROWS)..];
        let _ = writeln!(
            out,
            "\nhistory   {}  peak context per iteration{}",
            sparkline(self.history.iter().map(|h| h.peak_percent)),
            if shown.len() < self.history.len() {
                format!(" (last {} shown; --json has all)", shown.len())
            } else {
                String::new()
            }
        );
        let _ = writeln!(out, "  iter  {:<37}checkpoint  handoff", "peak");
        for h in shown {
            let _ = writeln!(
                out,
                "  {:>4}  {} {:>5.1}% {:>5}  {:<10}  {}",
                h.iteration,
                bar(h.peak_percent, 20),
                h.peak_percent,
                tokens_short(h.peak_tokens),
                match (h.checkpoint, h.level) {
                    (true, Some(l)) => format!("yes ({l})"),
                    (true, None) => "yes".into(),
                    (false, _) => "no".into(),
                },
                h.handoff.as_deref().unwrap_or("-")
            );
        }
        out
    }
}

/// `ralph context [--json] [--watch] [--estimate [ITEM]]`.
pub(crate) fn context(
    project: &Project,
    json: bool,
    watch: bool,
    estimate: Option<Option<String>>,
) -> Result<i32> {
    let root = project.root();
    let mut watcher = Watcher::new(root);
    if let Some(item) = estimate {
        let report = watcher.report()?;
        let config = project.config()?;
        let state = RunState::load(&watcher.layout.state())?.unwrap_or_default();
        let plan = (project.plan_at(watcher.live.plan.as_ref().unwrap_or(&config.plan))).ok();
        let occupancy = report
            .current
            .filter(|_| report.live)
            .map(|r| r.meter.tokens);
        let e = super::estimate::estimate(
            root,
            &config,
            &state,
            plan.as_ref(),
            item.as_deref(),
            occupancy,
        )?;
        super::print(&e.render(json))?;
        return Ok(0);
    }
    if !watch {
        super::print(&watcher.report()?.render(json))?;
        return Ok(0);
    }
    let tty = !json && std::io::stdout().is_terminal();
    let term = console::Term::stdout();
    let mut last: Option<ContextReport> = None;
    loop {
        let report = watcher.report()?;
        let ended = !report.phase.is_live();
        if tty {
            let _ = term.clear_screen();
            let footer = if ended {
                "the run is not going; stopped watching"
            } else {
                "watching: refreshes every second, Ctrl-C to quit"
            };
            super::print(&format!("{}\n{footer}\n", report.human()))?;
        } else if last.as_ref() != Some(&report) {
            // Not a terminal: a new block only when something changed.
            let sep = if json || last.is_none() { "" } else { "\n" };
            super::print(&format!("{sep}{}", report.render(json)))?;
        }
        if ended {
            return Ok(0);
        }
        last = Some(report);
        std::thread::sleep(WATCH_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thresholds = Thresholds::DEFAULT;

    fn reading(percent: f64, level: Level, eta: Option<u64>) -> Reading {
        Reading {
            iteration: 1,
            at: "2026-11-21T22:00:00Z".into(),
            meter: MeterReading {
                tokens: 1000,
                usable: 167_000,
                window: 200_000,
                percent,
                level,
                peak_percent: percent,
                rate_per_min: eta.map(|_| 1000.0),
                eta_to_checkpoint_secs: eta,
                not_metered: false,
                window_source: None,
            },
            meaning: level.meaning(),
            tool: None,
            compactions: 0,
        }
    }

    fn live() -> Phase {
        Phase {
            status: "running".into(),
            supervisor_pid: Some(1),
        }
    }

    #[test]
    fn recommendations_follow_level_and_eta() {
        let code = |r: Option<&Reading>| recommend(&live(), true, r, &T).code;
        assert_eq!(code(None), "starting");
        assert_eq!(code(Some(&reading(20.0, Level::L0, None))), "safe");
        assert_eq!(code(Some(&reading(20.0, Level::L0, Some(3600)))), "safe");
        assert_eq!(
            code(Some(&reading(60.0, Level::L0, Some(300)))),
            "checkpoint_soon"
        );
        assert_eq!(
            code(Some(&reading(72.0, Level::L1, None))),
            "checkpoint_soon"
        );
        assert_eq!(
            code(Some(&reading(86.0, Level::L2, Some(0)))),
            "checkpoint_now"
        );
        assert_eq!(code(Some(&reading(96.0, Level::L3, Some(0)))), "emergency");
        let r = reading(96.0, Level::L3, None);
        assert_eq!(
            recommend(&live(), false, Some(&r), &T).code,
            "between_iterations"
        );
        let ended = Phase {
            status: "completed".into(),
            supervisor_pid: None,
        };
        assert_eq!(recommend(&ended, false, Some(&r), &T).code, "not_running");
    }

    #[test]
    fn an_agent_not_metered_live_shows_no_number() {
        let report = |metered_live| ContextReport {
            phase: live(),
            run_id: Some("r".into()),
            iteration: 2,
            live: true,
            metered_live,
            current: Some(reading(0.0, Level::L0, None)),
            thresholds: T,
            plan_item: None,
            item: None,
            items: Vec::new(),
            iterations: Vec::new(),
            recommendation: recommend(&live(), true, None, &T),
            history: vec![HistoryEntry::default()],
            workers: Vec::new(),
        };
        let text = report(false).human();
        assert!(text.contains("context   not metered live"), "{text}");
        assert!(!text.contains('%'), "no invented percentage: {text}");
        assert!(report(true).human().contains("0.0%"));
    }

    #[test]
    fn a_parallel_run_is_its_workers_blocks_under_one_line() {
        let worker = |is_live, current| ContextReport {
            phase: Phase {
                status: "running".into(),
                supervisor_pid: Some(7),
            },
            run_id: Some("w".into()),
            iteration: 1,
            live: is_live,
            metered_live: true,
            current,
            thresholds: T,
            plan_item: None,
            item: None,
            items: Vec::new(),
            iterations: Vec::new(),
            recommendation: recommend(&live(), is_live, None, &T),
            history: Vec::new(),
            workers: Vec::new(),
        };
        // The coordinator: no reading, between iterations by its own count.
        let mut run = worker(false, None);
        run.workers = vec![WorkerContext {
            worker: "w1".into(),
            item: "alpha".into(),
            context: worker(true, Some(reading(40.0, Level::L0, Some(600)))),
        }];
        let text = run.human();
        assert!(
            text.starts_with("run       parallel run · running (supervisor pid 7) · 1 worker(s) at work\n\nworker    w1 · alpha\n"),
            "{text}"
        );
        assert!(!text.contains("no reading yet"), "{text}");
        assert!(!text.contains("between iterations"), "{text}");
        assert!(text.contains("40.0%"), "{text}");
    }
}
