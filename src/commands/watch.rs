//! `ralph watch`: a full-screen view of the run in this project, live from
//! any shell (or the last one, replayed from its log): every loop's item,
//! context, time to the checkpoint, rate, cost and state; the run's items,
//! cost, iterations, merges and warnings; keys to checkpoint a loop, stop
//! the run, read a loop's transcript and open the report.
//!
//! ```text
//! watch.rs          this map and the driver: the log tailed, keys, resize, signals
//! watch/
//!   render.rs       the screen (ratatui widgets): pure, tested on a TestBackend
//! ```
//!
//! The view is `events::view::RunView`, built from `.ralph/events.jsonl`
//! (the one event stream; a parallel run's coordinator log holds every
//! worker's records) and the plan read by the one plan loader; or, with
//! `--fleet`, from the fleet's refs (`workers::fleet::Watcher`: a lane per
//! machine), fetched on a thread of its own so that a slow or vanished
//! remote never holds the keys or the screen (the screen keeps the last
//! fetch and says what failed). A fleet is watched read-only: its loops
//! run on other machines. Pitfalls:
//! the terminal is restored on every way out (an error, a panic through
//! ratatui's hook, SIGTERM, SIGHUP, SIGINT from another shell); without a terminal it refuses (exit 2).

mod render;

use std::io::{IsTerminal, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use ratatui::crossterm::event::{self, Event as TermEvent, KeyCode, KeyEventKind, KeyModifiers};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::events::LogTail;
use crate::events::view::{RunView, SINGLE};
use crate::formats::Layout;
use crate::platform::signals::Request;
use crate::project::Project;
use render::{Settings, Ui};

/// How often the log is read and the keys looked at.
const POLL: Duration = Duration::from_millis(200);
/// Redraw at least this often (elapsed times, the checkpoint countdown).
const REDRAW: Duration = Duration::from_secs(1);
/// The end of a transcript read for its tail.
const TAIL_BYTES: u64 = 256 << 10;
/// Lines of a transcript tail kept.
const TAIL_LINES: usize = 200;

/// What a key asks for.
#[derive(Debug, Clone, PartialEq)]
enum Action {
    Quit,
    Checkpoint(String),
    Stop,
    Transcript(String),
    Report,
    Redraw,
}

/// The key's meaning for the person at the screen: the pure half of the keys.
fn key(ui: &mut Ui, view: &RunView, code: KeyCode, ctrl: bool) -> Option<Action> {
    let loops: Vec<&String> = view.loops.keys().collect();
    let selected = loops
        .get(ui.selected.min(loops.len().saturating_sub(1)))
        .map(|s| s.to_string());
    if ui.confirm_stop {
        ui.confirm_stop = false;
        ui.message = None;
        return match code {
            KeyCode::Char('y') | KeyCode::Char('Y') => Some(Action::Stop),
            _ => {
                ui.message = Some("not stopped".into());
                Some(Action::Redraw)
            }
        };
    }
    ui.message = None;
    match code {
        KeyCode::Char('c') if ctrl => Some(Action::Quit),
        KeyCode::Char('q') => Some(Action::Quit),
        KeyCode::Esc if ui.transcript.is_some() => {
            ui.transcript = None;
            Some(Action::Redraw)
        }
        KeyCode::Esc => Some(Action::Quit),
        KeyCode::Up | KeyCode::Char('k') => {
            ui.selected = ui.selected.saturating_sub(1);
            Some(Action::Redraw)
        }
        KeyCode::Down | KeyCode::Char('j') | KeyCode::Tab => {
            ui.selected = (ui.selected + 1).min(loops.len().saturating_sub(1));
            Some(Action::Redraw)
        }
        // A fleet's loops run on other machines: nothing here to act on.
        KeyCode::Char('c' | 's' | 't' | 'r') if ui.read_only.is_some() => {
            ui.message = Some(
                "a fleet is watched read-only: stop its workers where they run (SIGTERM); `ralph report --fleet NAME` writes its report"
                    .into(),
            );
            Some(Action::Redraw)
        }
        KeyCode::Char('c') => selected.map(Action::Checkpoint),
        KeyCode::Char('s') => {
            ui.confirm_stop = true;
            Some(Action::Redraw)
        }
        KeyCode::Char('t') if ui.transcript.is_some() => {
            ui.transcript = None;
            Some(Action::Redraw)
        }
        KeyCode::Char('t') => selected.map(Action::Transcript),
        KeyCode::Char('r') => Some(Action::Report),
        _ => None,
    }
}

/// Wait up to `timeout` for input on the terminal (standard input, which
/// crossterm reads); whether it hung up instead.
fn terminal_gone(timeout: Duration) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let stdin = std::io::stdin();
    let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
    let wait = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
    let gone = PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL;
    matches!(poll(&mut fds, wait), Ok(n) if n > 0)
        && fds[0].revents().is_some_and(|r| r.intersects(gone))
}

/// Where the view comes from.
enum Source {
    Log(LogSource),
    Fleet(FleetSource),
}

impl Source {
    /// Take in what changed; whether anything did.
    fn poll(&mut self, view: &mut RunView, ui: &mut Ui, default_plan: &Path) -> Result<bool> {
        match self {
            Source::Log(s) => s.poll(view, default_plan),
            Source::Fleet(s) => Ok(s.poll(view, ui)),
        }
    }
}

/// A fleet's views, fetched by a thread of their own (`fetching`).
struct FleetSource {
    first: Option<Box<RunView>>,
    views: std::sync::mpsc::Receiver<std::result::Result<RunView, String>>,
    every: Duration,
}

impl FleetSource {
    /// The newest fetch's view, or what kept it from coming.
    fn poll(&mut self, view: &mut RunView, ui: &mut Ui) -> bool {
        let mut changed = false;
        if let Some(first) = self.first.take() {
            *view = *first;
            ui.fetched = Some(jiff::Timestamp::now());
            changed = true;
        }
        while let Ok(next) = self.views.try_recv() {
            changed = true;
            match next {
                Ok(v) => {
                    *view = v;
                    ui.problem = None;
                    ui.fetched = Some(jiff::Timestamp::now());
                }
                Err(e) => {
                    ui.problem = Some(format!(
                        "{e} (tried again every {}; shown: the last fetch)",
                        crate::text::format_duration(self.every)
                    ))
                }
            }
        }
        changed
    }
}

/// Fetch the fleet every `every` until the screen is gone.
fn fetching(
    mut watcher: crate::workers::fleet::Watcher,
    every: Duration,
) -> std::sync::mpsc::Receiver<std::result::Result<RunView, String>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(every);
            if tx.send(watcher.poll()).is_err() {
                return;
            }
        }
    });
    rx
}

/// The project's log and plan, read as they grow.
struct LogSource {
    root: PathBuf,
    tail: LogTail,
    plan_seen: Option<(PathBuf, Option<SystemTime>)>,
}

impl LogSource {
    /// Take in what the log gained and the plan if it changed; whether
    /// anything did.
    fn poll(&mut self, view: &mut RunView, default_plan: &Path) -> Result<bool> {
        let mut changed = false;
        let records = loop {
            match self.tail.read_new()? {
                Some(records) => break records,
                None => {
                    *view = RunView::default();
                    changed = true;
                }
            }
        };
        changed |= !records.is_empty();
        for r in &records {
            view.apply(r);
        }
        let plan = self
            .root
            .join(view.plan.as_deref().map_or(default_plan, Path::new));
        let stamp = std::fs::metadata(&plan).and_then(|m| m.modified()).ok();
        if self.plan_seen.as_ref() != Some(&(plan.clone(), stamp)) {
            // The plan is a courtesy: an unreadable one only leaves the list empty.
            if let Ok(p) = crate::project::Project::at(&self.root).plan_at(&plan) {
                view.set_plan(&p);
            }
            self.plan_seen = Some((plan, stamp));
            changed = true;
        }
        Ok(changed)
    }
}

/// `ralph watch`.
pub(crate) fn watch(project: &Project, args: &crate::cli::WatchArgs) -> Result<i32> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(Error::usage("`ralph watch` needs a terminal, and its standard input or output is not one")
            .with_hint("without one, `ralph status`, `ralph context --watch` or the JSON lines of `ralph run --json` tell the same"));
    }
    let root = project.root();
    // ralph.toml gives the thresholds; a broken one must not
    // hide the run (`ralph doctor` reports it).
    let config = Config::load(root).unwrap_or_default();
    let settings = Settings {
        thresholds: config.thresholds(),
        colour: std::env::var_os("NO_COLOR").is_none(),
    };
    let mut ui = Ui::default();
    let mut source = match &args.fleet_args.fleet {
        // Fetched once before the screen opens: a wrong name, remote or
        // clone is said as an error, not drawn.
        Some(fleet) => {
            // A remote that does not answer takes up to its timeout: say why nothing shows yet.
            eprintln!(
                "fetching fleet `{}` from `{}`…",
                crate::text::printable(fleet),
                crate::text::printable(&args.fleet_args.remote)
            );
            let (watcher, first) = crate::workers::fleet::Watcher::open(
                root,
                &args.fleet_args.remote,
                fleet,
                &config,
            )?;
            ui.read_only = Some(args.every.0);
            Source::Fleet(FleetSource {
                first: Some(Box::new(first)),
                views: fetching(watcher, args.every.0),
                every: args.every.0,
            })
        }
        None => Source::Log(LogSource {
            root: root.to_path_buf(),
            tail: LogTail::new(project.layout().events()),
            plan_seen: None,
        }),
    };
    // SIGINT, SIGTERM and SIGHUP end the view (the terminal put back);
    // `ralph stop`'s and `ralph checkpoint`'s signals are for the run.
    let signals = crate::platform::signals::Catcher::new(None)?;
    let mut terminal =
        ratatui::try_init().map_err(|e| Error::wrap("cannot set up the terminal", e))?;
    let watching = Watching {
        signals: std::cell::RefCell::new(signals),
        project,
        config: &config,
        settings: &settings,
    };
    let result = watching.run(&mut terminal, &mut source, ui);
    ratatui::restore();
    result
}

struct Watching<'a> {
    project: &'a Project,
    config: &'a Config,
    settings: &'a Settings,
    signals: std::cell::RefCell<crate::platform::signals::Catcher>,
}

impl Watching<'_> {
    /// Whether a signal asked the view to end.
    fn signalled(&self) -> bool {
        let mut signals = self.signals.borrow_mut();
        std::iter::from_fn(|| signals.take())
            .any(|r| matches!(r, Request::Interrupt | Request::Hangup))
    }

    fn run(
        &self,
        terminal: &mut ratatui::DefaultTerminal,
        source: &mut Source,
        mut ui: Ui,
    ) -> Result<i32> {
        let mut view = RunView::default();
        let mut drawn: Option<Instant> = None;
        let mut dirty = true;
        let io = |e: std::io::Error| Error::wrap("cannot draw on the terminal", e);
        while !self.signalled() {
            dirty |= source.poll(&mut view, &mut ui, &self.config.plan)?;
            if dirty && let Some((name, _)) = &ui.transcript {
                let lines = self.transcript(&view, name);
                ui.transcript = Some((name.clone(), lines));
            }
            if dirty || drawn.is_none_or(|d| d.elapsed() >= REDRAW) {
                let now = jiff::Timestamp::now();
                terminal
                    .draw(|f| render::draw(f, &view, &ui, self.settings, now))
                    .map_err(io)?;
                drawn = Some(Instant::now());
                dirty = false;
            }
            // Waited for here, not in crossterm: a terminal that went away
            // (the SSH connection, tmux or the window closed) keeps
            // crossterm's own wait reading it in a busy loop, forever.
            if terminal_gone(POLL) {
                break;
            }
            if !event::poll(Duration::ZERO).map_err(io)? {
                continue;
            }
            match event::read().map_err(io)? {
                TermEvent::Key(k) if k.kind == KeyEventKind::Press => {
                    let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
                    let Some(action) = key(&mut ui, &view, k.code, ctrl) else {
                        continue;
                    };
                    dirty = true;
                    match action {
                        Action::Quit => break,
                        Action::Redraw => {}
                        Action::Checkpoint(name) => {
                            ui.message = Some(self.checkpoint(&view, &name))
                        }
                        Action::Stop => ui.message = Some(self.stop()),
                        Action::Transcript(name) => {
                            let lines = self.transcript(&view, &name);
                            ui.transcript = Some((name, lines));
                        }
                        Action::Report => ui.message = Some(self.report(&view)),
                    }
                }
                TermEvent::Resize(..) => dirty = true,
                _ => {}
            }
        }
        Ok(0)
    }

    /// Where a loop runs: the project, or a worker's project in its worktree.
    fn loop_dir(&self, view: &RunView, name: &str) -> Option<PathBuf> {
        if !view.parallel || name == SINGLE {
            return Some(self.project.root().to_path_buf());
        }
        let workers = crate::report::WorkersView::load(self.project.root())?;
        (workers.assignments.into_iter())
            .find(|a| a.worker == name)
            .map(|a| PathBuf::from(a.project_dir))
    }

    /// `c`: the loop's supervisor checkpoints, as `ralph checkpoint` asks it.
    fn checkpoint(&self, view: &RunView, name: &str) -> String {
        let Some(dir) = self.loop_dir(view, name) else {
            return format!("{name} has no worktree now: nothing to checkpoint");
        };
        match super::control::send_to_supervisor(
            &Layout::new(&dir),
            nix::sys::signal::Signal::SIGUSR1,
            Some("ralph watch"),
        ) {
            Ok(Some(pid)) => {
                format!("asked {name} (pid {pid}) to checkpoint: notes, commit, handoff")
            }
            Ok(None) => format!("no supervisor runs {name} now: nothing to checkpoint"),
            Err(e) => e.to_string(),
        }
    }

    /// `s`, then `y`: the run stops, as `ralph stop` asks it.
    fn stop(&self) -> String {
        match super::control::send_to_supervisor(
            self.project.layout(),
            nix::sys::signal::Signal::SIGUSR2,
            None,
        ) {
            Ok(Some(pid)) => {
                format!("asked the run (pid {pid}) to checkpoint every loop and stop (exit 6)")
            }
            Ok(None) => "no ralph run is in progress here".into(),
            Err(e) => e.to_string(),
        }
    }

    /// `r`: the report's path, opened with xdg-open on a desktop.
    fn report(&self, view: &RunView) -> String {
        let root = self.project.root();
        let path = match view.ended.as_ref().and_then(|e| e.report.as_deref()) {
            Some(p) => root.join(p),
            None => self.project.layout().report(),
        };
        if !path.is_file() {
            return "no report yet: it is written when the run ends (`ralph report` writes it now)"
                .into();
        }
        let desktop =
            std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some();
        let opened = desktop
            && std::process::Command::new("xdg-open")
                .arg(&path)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .is_ok();
        format!(
            "report: {}{}",
            path.display(),
            if opened { " (opened)" } else { "" }
        )
    }

    /// The last lines of a loop's current transcript, as people read them.
    fn transcript(&self, view: &RunView, name: &str) -> Vec<String> {
        let file = view.loops.get(name).and_then(|l| l.transcript.clone());
        let (Some(dir), Some(file)) = (self.loop_dir(view, name), file) else {
            return vec![format!("{name} has no transcript yet")];
        };
        let path = dir.join(file);
        match read_tail(&path) {
            Ok(bytes) => transcript_lines(self.config.agent.kind.decoder(), &bytes),
            Err(e) => vec![format!("cannot read {}: {e}", path.display())],
        }
    }
}

/// The last [`TAIL_BYTES`] of a file, from the first whole line in them.
fn read_tail(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let start = len.saturating_sub(TAIL_BYTES);
    f.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    if start > 0 {
        let first = bytes
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |i| i + 1);
        bytes.drain(..first);
    }
    Ok(bytes)
}

/// What the agent said and did, one line each: its words, its tool calls,
/// how its turns ended (decoded by its kind's own decoder).
fn transcript_lines(mut decoder: crate::stream::Decoder, bytes: &[u8]) -> Vec<String> {
    use crate::stream::StreamEvent;
    let mut reader = std::io::BufReader::new(bytes);
    let mut lines = Vec::new();
    while let Some(event) = decoder.next_from(&mut reader, &mut |_| {}) {
        match event {
            StreamEvent::Assistant(m) => {
                for t in m
                    .text
                    .iter()
                    .flat_map(|t| t.lines())
                    .filter(|l| !l.trim().is_empty())
                {
                    lines.push(t.to_string());
                }
                for c in &m.tool_calls {
                    lines.push(format!("→ {}", c.label()));
                }
            }
            StreamEvent::Result(r) => lines.push(format!(
                "■ turn ended: {}{}",
                r.subtype,
                if r.is_error { " (error)" } else { "" }
            )),
            StreamEvent::Compacted { .. } => lines.push("■ the agent compacted its context".into()),
            _ => {}
        }
    }
    if lines.is_empty() {
        lines.push("nothing said yet".into());
    }
    lines.drain(..lines.len().saturating_sub(TAIL_LINES));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_select_act_and_ask_before_stopping() {
        let view = render::tests::view_of(render::tests::PARALLEL);
        let mut ui = Ui::default();
        let press = |ui: &mut Ui, code| key(ui, &view, code, false);
        assert_eq!(
            press(&mut ui, KeyCode::Char('c')),
            Some(Action::Checkpoint("w1".into()))
        );
        press(&mut ui, KeyCode::Down);
        press(&mut ui, KeyCode::Down);
        press(&mut ui, KeyCode::Down);
        assert_eq!(ui.selected, 2, "stays on the last loop");
        assert_eq!(
            press(&mut ui, KeyCode::Char('t')),
            Some(Action::Transcript("w3".into()))
        );
        assert_eq!(press(&mut ui, KeyCode::Char('s')), Some(Action::Redraw));
        assert!(ui.confirm_stop);
        assert_eq!(press(&mut ui, KeyCode::Char('n')), Some(Action::Redraw));
        assert_eq!(ui.message.as_deref(), Some("not stopped"));
        press(&mut ui, KeyCode::Char('s'));
        assert_eq!(press(&mut ui, KeyCode::Char('y')), Some(Action::Stop));
        assert_eq!(press(&mut ui, KeyCode::Char('q')), Some(Action::Quit));
        assert_eq!(
            key(&mut ui, &view, KeyCode::Char('c'), true),
            Some(Action::Quit)
        );
        ui.transcript = Some(("w1".into(), vec![]));
        assert_eq!(press(&mut ui, KeyCode::Esc), Some(Action::Redraw));
        assert_eq!(ui.transcript, None);
    }

    #[test]
    fn a_fleet_is_watched_read_only() {
        let view = render::tests::view_of(render::tests::PARALLEL);
        let mut ui = Ui {
            read_only: Some(Duration::from_secs(5)),
            ..Ui::default()
        };
        for c in ['c', 's', 't', 'r'] {
            assert_eq!(
                key(&mut ui, &view, KeyCode::Char(c), false),
                Some(Action::Redraw),
                "{c}"
            );
            assert!(ui.message.as_deref().unwrap().contains("read-only"), "{c}");
            assert!(!ui.confirm_stop && ui.transcript.is_none());
        }
        assert_eq!(
            key(&mut ui, &view, KeyCode::Down, false),
            Some(Action::Redraw)
        );
        assert_eq!(ui.selected, 1);
        assert_eq!(
            key(&mut ui, &view, KeyCode::Char('q'), false),
            Some(Action::Quit)
        );
    }

    #[test]
    fn a_transcript_tail_is_the_agents_words_and_tools() {
        let text = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/claude-2.1.197/tool-loop-with-promise.jsonl"),
        )
        .unwrap_or_default();
        let lines = transcript_lines(crate::stream::Decoder::claude(), &text);
        assert!(lines.iter().any(|l| l.starts_with("→ ")), "{lines:?}");
        assert!(lines.iter().any(|l| l.starts_with("■ ")), "{lines:?}");
    }
}
