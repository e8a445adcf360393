//! The screen of `ralph watch`, drawn from a [`RunView`] and the [`Ui`]'s
//! own state with ratatui widgets. Pure: the time comes in as a value, and
//! nothing here reads a file or the clock (tests draw into a `TestBackend`).

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use crate::context::{Level, Thresholds};
use crate::events::checkpoint_phrase;
use crate::events::terminal::tokens_short;
use crate::events::view::{LoopState, LoopView, RunView, clock};
use crate::text::format_duration;

/// What the view needs besides the events: from ralph.toml. (The budgets
/// come from the run's `run_started`: what the run counts, not what the
/// file says now.)
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settings {
    pub(crate) thresholds: Thresholds,
    /// Colours on (off with NO_COLOR).
    pub(crate) colour: bool,
}

/// What the person at the keyboard has open.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Ui {
    /// The loop the keys act on (index in the view's loops).
    pub(crate) selected: usize,
    /// The answer to the last key, until the next one.
    pub(crate) message: Option<String>,
    /// `s` was pressed: the next `y` stops the run.
    pub(crate) confirm_stop: bool,
    /// The transcript tail open: the loop's name and its last lines.
    pub(crate) transcript: Option<(String, Vec<String>)>,
    /// A fleet, watched read-only, fetched this often.
    pub(crate) read_only: Option<std::time::Duration>,
    /// What keeps the view from being fresh (a fetch that failed).
    pub(crate) problem: Option<String>,
    /// When the view shown was fetched (a fleet: a fetch may hang).
    pub(crate) fetched: Option<jiff::Timestamp>,
}

/// The keys, as the footer names them.
const KEYS: &str = "↑↓ loop · c checkpoint · s stop · t transcript · r report · q quit";

fn secs(s: u64) -> String {
    format_duration(std::time::Duration::from_secs(s))
}

/// `text` cut to `width` terminal cells, `…` included.
fn fit(text: &str, width: usize) -> String {
    console::truncate_str(&crate::text::printable(text), width, "…").into_owned()
}

fn level_colour(level: Level) -> Color {
    match level {
        Level::L0 => Color::Green,
        Level::L1 => Color::Yellow,
        Level::L2 => Color::Red,
        Level::L3 => Color::Magenta,
    }
}

impl Settings {
    fn style(&self, colour: Color) -> Style {
        if self.colour {
            Style::new().fg(colour)
        } else {
            Style::new()
        }
    }
}

/// `width` cells of context: filled to `percent`, with the level marks
/// (L1, L2, L3 thresholds) drawn where the bar has not reached them.
pub(crate) fn gauge(
    percent: f64,
    level: Level,
    t: &Thresholds,
    width: usize,
    s: &Settings,
) -> Vec<Span<'static>> {
    let cell = |p: f64| ((p / 100.0) * width as f64).round() as usize;
    let filled = cell(percent).min(width);
    let marks = [
        (cell(t.warn), Level::L1),
        (cell(t.checkpoint), Level::L2),
        (cell(t.emergency), Level::L3),
    ];
    let mut spans = vec![Span::raw("▕")];
    spans.push(Span::styled(
        "█".repeat(filled),
        s.style(level_colour(level)),
    ));
    for i in filled..width {
        match marks.iter().find(|(at, _)| *at == i) {
            Some((_, l)) => spans.push(Span::styled("┃", s.style(level_colour(*l)))),
            None => spans.push(Span::styled("░", s.style(Color::DarkGray))),
        }
    }
    spans.push(Span::raw("▏"));
    spans
}

/// The three lines of one loop.
fn loop_lines(
    view: &RunView,
    l: &LoopView,
    selected: bool,
    now: jiff::Timestamp,
    width: usize,
    s: &Settings,
) -> Vec<Line<'static>> {
    let state_colour = match l.state {
        LoopState::Working => Color::Green,
        LoopState::HandingOff | LoopState::Waiting(_) | LoopState::Paused(_) => Color::Yellow,
        LoopState::Left(_) | LoopState::Dead(_) => Color::Red,
        _ => Color::Gray,
    };
    let head = format!("{}{:<4} ", if selected { "▸ " } else { "  " }, l.name);
    let mut facts = format!(" · iter {}", l.iteration);
    if let Some(e) = l
        .elapsed(now)
        .filter(|_| l.state == LoopState::Working || l.state == LoopState::HandingOff)
    {
        facts.push_str(&format!(" · {}", secs(e)));
    }
    facts.push_str(&format!(" · ${:.2}", l.cost_usd));
    let state = l.state.label();
    let item = view.item_of(l).unwrap_or("-");
    let used = head.chars().count() + state.chars().count() + facts.chars().count() + 3;
    let first = Line::from(vec![
        Span::styled(
            head,
            Style::new().add_modifier(if selected {
                Modifier::BOLD
            } else {
                Modifier::empty()
            }),
        ),
        Span::styled(fit(&state, width), s.style(state_colour)),
        Span::raw(facts),
        Span::raw(" · "),
        Span::raw(fit(item, width.saturating_sub(used))),
    ]);
    let indent = "       ";
    let second = match &l.reading {
        Some((r, _)) if r.not_metered => Line::from(format!("{indent}context not metered live")),
        Some((r, _)) => {
            let mut tail = format!(
                " {:>5.1}% {} {}/{}",
                r.percent,
                r.level,
                tokens_short(r.tokens),
                tokens_short(r.usable)
            );
            // The rate and the time to the checkpoint only while it runs.
            if matches!(l.state, LoopState::Working | LoopState::HandingOff) {
                if let Some(rate) = r.rate_per_min {
                    tail.push_str(&format!(" · +{}/min", tokens_short(rate.max(0.0) as u64)));
                }
                tail.push_str(&format!(
                    " · {}",
                    checkpoint_phrase(r.level, l.checkpoint_in(now))
                ));
            }
            let room = width.saturating_sub(indent.len() + 2);
            // One width for every loop's bar, so that they line up.
            let bar = width.saturating_sub(64).clamp(6, 40);
            let mut spans = vec![Span::raw(indent)];
            spans.extend(gauge(r.percent, r.level, &s.thresholds, bar, s));
            spans.push(Span::raw(fit(&tail, room.saturating_sub(bar))));
            Line::from(spans)
        }
        None => Line::from(format!("{indent}no reading yet")),
    };
    let third = Line::from(format!(
        "{indent}{}",
        fit(
            &format!("last tool: {}", l.tool.as_deref().unwrap_or("-")),
            width.saturating_sub(indent.len())
        )
    ));
    vec![first, second, third]
}

/// The run's two header lines.
fn header(view: &RunView, now: jiff::Timestamp, width: usize) -> Vec<Line<'static>> {
    let status = match &view.ended {
        Some(e) if view.fleet.is_some() => format!("ended: {}", e.outcome.replace('_', " ")),
        Some(e) => format!(
            "ended: {} (exit {})",
            e.outcome.replace('_', " "),
            e.exit_code
        ),
        None if view.run_id.is_none() && view.fleet.is_some() => {
            "no run on the remote yet (its first worker creates it)".into()
        }
        None if view.run_id.is_none() => "no run in the log yet".into(),
        None => "running".into(),
    };
    let what = match &view.fleet {
        Some(fleet) => format!("fleet {fleet}"),
        None => format!("run {}", view.run_id.as_deref().unwrap_or("-")),
    };
    let first = format!(
        "ralph watch · {what} · {status}{}",
        view.elapsed(now)
            .filter(|_| view.ended.is_none())
            .map(|e| format!(" · {}", secs(e)))
            .unwrap_or_default()
    );
    let mut second = format!(
        "items {}/{} · cost ${:.2}{} · iteration {}{}",
        view.items_done(),
        view.items.len(),
        view.cost_usd,
        view.max_cost_usd
            .map(|m| format!(" of ${m:.2}"))
            .unwrap_or_default(),
        view.iterations(),
        if view.max_iterations > 0 {
            format!(" of {}", view.max_iterations)
        } else {
            String::new()
        },
    );
    if let Some(at) = view.deadline {
        second.push_str(&format!(" · deadline {}", clock(&at.to_string())));
    }
    vec![
        Line::styled(
            fit(&first, width),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Line::from(fit(&second, width)),
    ]
}

/// The plan's items, the open ones first.
fn plan_lines(view: &RunView, rows: usize, width: usize) -> Vec<Line<'static>> {
    let open = view.items.iter().filter(|(d, _)| !d);
    let done = view.items.iter().filter(|(d, _)| *d);
    open.chain(done)
        .take(rows)
        .map(|(done, text)| {
            Line::from(fit(
                &format!("{} {text}", if *done { "✓" } else { "·" }),
                width,
            ))
        })
        .collect()
}

/// The merge queue, its history (newest first) and the branches not merged.
fn merge_lines(view: &RunView, rows: usize, width: usize) -> Vec<Line<'static>> {
    let queued = view.queue.iter().map(|(w, i)| format!("queued  {w} {i}"));
    let history = view.merges.iter().rev().map(|m| {
        format!(
            "{} {} {} {}",
            clock(&m.at),
            m.worker.as_deref().unwrap_or("-"),
            m.result,
            m.item
        )
    });
    // A branch its worker still works on is not news.
    let idle = |b: &&crate::events::view::BranchView| {
        view.loops.get(&b.worker).is_none_or(|l| {
            matches!(
                l.state,
                LoopState::Paused(_) | LoopState::Left(_) | LoopState::Ended(_)
            )
        })
    };
    let unmerged = (view.unmerged.values())
        .filter(idle)
        .map(|b| format!("unmerged {} ({})", b.branch, b.item));
    queued
        .chain(history)
        .chain(unmerged)
        .take(rows)
        .map(|t| Line::from(fit(&t, width)))
        .collect()
}

/// Draw the whole screen.
pub(crate) fn draw(frame: &mut Frame, view: &RunView, ui: &Ui, s: &Settings, now: jiff::Timestamp) {
    let area = frame.area();
    let width = area.width as usize;
    let loops = view.loops.len().max(1) as u16;
    let warnings = view.warnings.len().min(3) as u16;
    let [top, loops_area, bottom, warn_area, footer] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(loops * 3 + 1),
        Constraint::Min(0),
        Constraint::Length(if warnings > 0 { warnings + 1 } else { 0 }),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(header(view, now, width)), top);
    let mut lines = Vec::new();
    for (i, l) in view.loops.values().enumerate() {
        lines.extend(loop_lines(view, l, i == ui.selected, now, width, s));
    }
    if view.loops.is_empty() {
        lines.push(Line::from("  no loop has started yet"));
    }
    frame.render_widget(
        Paragraph::new(lines).block(Block::new().borders(Borders::TOP).title(
            if view.fleet.is_some() {
                " machines "
            } else {
                " loops "
            },
        )),
        loops_area,
    );
    if bottom.height > 1 {
        let rows = bottom.height.saturating_sub(1) as usize;
        let titled = |t: &'static str| Block::new().borders(Borders::TOP).title(t);
        if view.parallel {
            let [left, right] =
                Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
                    .areas(bottom);
            let title = " plan ";
            frame.render_widget(
                Paragraph::new(plan_lines(
                    view,
                    rows,
                    left.width.saturating_sub(1) as usize,
                ))
                .block(titled(title)),
                left,
            );
            frame.render_widget(
                Paragraph::new(merge_lines(view, rows, right.width as usize))
                    .block(titled(" merges ")),
                right,
            );
        } else {
            frame.render_widget(
                Paragraph::new(plan_lines(view, rows, width)).block(titled(" plan ")),
                bottom,
            );
        }
    }
    if warnings > 0 {
        let lines: Vec<Line> = (view.warnings.iter().rev().take(3))
            .map(|(at, text)| {
                Line::styled(
                    fit(&format!("{} {text}", clock(at)), width),
                    s.style(Color::Yellow),
                )
            })
            .collect();
        frame.render_widget(
            Paragraph::new(lines).block(Block::new().borders(Borders::TOP).title(" warnings ")),
            warn_area,
        );
    }
    let foot = match (&ui.message, ui.confirm_stop, &ui.problem, ui.read_only) {
        (_, true, _, _) => {
            "stop the whole run (every loop checkpoints, exit 6)? y: stop · any other key: no"
                .to_string()
        }
        (Some(m), ..) => m.clone(),
        (None, _, Some(p), _) => p.clone(),
        (None, _, None, Some(every)) => format!(
            "↑↓ machine · q quit · read-only · fetched {} ago, every {}",
            secs(
                ui.fetched
                    .map_or(0, |t| now.duration_since(t).as_secs().max(0) as u64)
            ),
            secs(every.as_secs())
        ),
        (None, _, None, None) => KEYS.to_string(),
    };
    let style = match &ui.problem {
        Some(_) if ui.message.is_none() => s.style(Color::Red),
        _ => Style::new(),
    };
    frame.render_widget(
        Paragraph::new(Line::styled(
            fit(&foot, width),
            style.add_modifier(Modifier::REVERSED),
        )),
        footer,
    );
    if let Some((name, lines)) = &ui.transcript {
        transcript(frame, area, name, lines);
    }
}

/// The transcript tail over the screen.
fn transcript(frame: &mut Frame, area: Rect, name: &str, lines: &[String]) {
    // Over everything but the footer.
    let inner = Rect {
        height: area.height.saturating_sub(1),
        ..area
    };
    let rows = inner.height.saturating_sub(2) as usize;
    let width = inner.width.saturating_sub(2) as usize;
    let shown: Vec<Line> = lines[lines.len().saturating_sub(rows)..]
        .iter()
        .map(|l| Line::from(fit(l, width)))
        .collect();
    frame.render_widget(Clear, inner);
    frame.render_widget(
        Paragraph::new(shown)
            .block(Block::bordered().title(format!(" {name}: transcript (t or Esc closes) "))),
        inner,
    );
}

#[cfg(test)]
pub(crate) mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use super::*;
    use crate::formats::Record;

    /// A parallel run's log: three workers, one merged, warnings.
    pub(crate) const PARALLEL: &str = r#"{"ts":"2026-11-27T07:00:00Z","event":"run_started","run_id":"20261127-070000","resumed":false,"first_iteration":1,"max_iterations":50,"plan":"fix_plan.md","pid":1,"deadline":"2026-11-27T08:30:00Z","max_cost_usd":10.0}
{"ts":"2026-11-27T07:00:01Z","worker":"w1","event":"worker_started","item":"alpha: write the parser","task":"item","branch":"ralph/r/w1","worktree":"wt/w1"}
{"ts":"2026-11-27T07:00:01Z","worker":"w2","event":"worker_started","item":"bravo: the writer","task":"item","branch":"ralph/r/w2","worktree":"wt/w2"}
{"ts":"2026-11-27T07:00:01Z","worker":"w3","event":"worker_started","item":"charlie: docs","task":"item","branch":"ralph/r/w3","worktree":"wt/w3"}
{"ts":"2026-11-27T07:00:02Z","worker":"w1","event":"iteration_started","iteration":1,"command":[],"transcript":".ralph/runs/x/iter-001.jsonl","resume_from":null}
{"ts":"2026-11-27T07:00:02Z","worker":"w2","event":"iteration_started","iteration":1,"command":[],"transcript":".ralph/runs/x/iter-001.jsonl","resume_from":null}
{"ts":"2026-11-27T07:00:02Z","worker":"w3","event":"iteration_started","iteration":1,"command":[],"transcript":".ralph/runs/x/iter-001.jsonl","resume_from":null}
{"ts":"2026-11-27T07:01:00Z","worker":"w1","event":"context","iteration":1,"reading":{"tokens":103540,"usable":167000,"window":200000,"percent":62.0,"level":"L0","peak_percent":62.0,"rate_per_min":4100.0,"eta_to_checkpoint_secs":560},"tool":"Edit src/parser.rs"}
{"ts":"2026-11-27T07:01:00Z","worker":"w2","event":"context","iteration":1,"reading":{"tokens":120000,"usable":167000,"window":200000,"percent":71.9,"level":"L1","peak_percent":71.9,"rate_per_min":9000.0,"eta_to_checkpoint_secs":140},"tool":"Bash cargo test"}
{"ts":"2026-11-27T07:01:30Z","worker":"w3","event":"iteration_ended","iteration":1,"outcome":"done","progress":true,"cost_usd":0.42,"peak_percent":30.0,"seconds":88.0,"error":null,"invalid_lines":0,"skipped_lines":0}
{"ts":"2026-11-27T07:01:31Z","worker":"w3","event":"worker_ended","item":"charlie: docs","exit_code":0,"outcome":"completed"}
{"ts":"2026-11-27T07:01:32Z","worker":"w3","event":"merge","item":"charlie: docs","branch":"ralph/r/w3","attempt":1,"outcome":"fast_forward","from":"a","to":"b","backup":null}
{"ts":"2026-11-27T07:01:33Z","event":"warning","message":"a hook failed"}
"#;

    pub(crate) fn view_of(log: &str) -> RunView {
        let mut v = RunView::default();
        for line in log.lines() {
            let r: Record = serde_json::from_str(line).unwrap();
            v.apply(&r);
        }
        v.set_plan(&crate::plan::Plan::parse(
            "- [ ] alpha: write the parser\n- [ ] bravo: the writer\n- [x] charlie: docs\n",
        ));
        v
    }

    pub(crate) fn settings() -> Settings {
        Settings {
            thresholds: Thresholds::DEFAULT,
            colour: false,
        }
    }

    pub(crate) fn screen(view: &RunView, ui: &Ui, w: u16, h: u16) -> Vec<String> {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        let now: jiff::Timestamp = "2026-11-27T07:02:00Z".parse().unwrap();
        t.draw(|f| draw(f, view, ui, &settings(), now)).unwrap();
        let buf = t.backend().buffer().clone();
        (0..h)
            .map(|y| {
                (0..w)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
                    .trim_end()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn a_parallel_run_at_80_by_24_shows_every_worker_and_the_run() {
        let view = view_of(PARALLEL);
        let rows = screen(&view, &Ui::default(), 80, 24);
        let text = rows.join("\n");
        assert!(
            rows[0].starts_with("ralph watch · run 20261127-070000 · running · 2m00s"),
            "{text}"
        );
        // The budgets as the run's start said them.
        assert_eq!(
            rows[1],
            format!(
                "items 1/3 · cost $0.42 of $10.00 · iteration 3 of 50 · deadline {}",
                clock("2026-11-27T08:30:00Z")
            ),
            "{text}"
        );
        for (worker, item) in [("w1", "alpha"), ("w2", "bravo"), ("w3", "charlie")] {
            assert!(
                rows.iter().any(|r| r.contains(worker) && r.contains(item)),
                "{worker}: {text}"
            );
        }
        // w1: 560 s to the checkpoint from 07:01:00, seen at 07:02:00.
        assert!(
            text.contains("62.0% L0 103k/167k · +4k/min · checkpoint in ~8 min"),
            "{text}"
        );
        assert!(text.contains("checkpoint in ~1 min"), "{text}");
        assert!(text.contains("last tool: Bash cargo test"), "{text}");
        assert!(
            text.contains("done, to merge") || text.contains("fast-forward"),
            "{text}"
        );
        assert!(text.contains("w3 fast-forward charlie: docs"), "{text}");
        assert!(
            !text.contains("unmerged ralph/r/w1"),
            "w1 works on it: {text}"
        );
        assert!(text.contains("a hook failed"), "{text}");
        assert!(rows[23].starts_with("↑↓ loop · c checkpoint"), "{text}");
        assert!(rows.iter().all(|r| console::measure_text_width(r) <= 80));
    }

    #[test]
    fn the_gauge_marks_the_levels_it_has_not_reached() {
        let s = settings();
        let text: String = gauge(50.0, Level::L0, &s.thresholds, 20, &s)
            .iter()
            .map(|s| s.content.to_string())
            .collect();
        assert_eq!(text, "▕██████████░░░░┃░░┃░┃▏");
    }

    #[test]
    fn every_size_draws_without_a_panic_and_within_its_width() {
        let view = view_of(PARALLEL);
        let ui = Ui {
            transcript: Some(("w1".into(), vec!["→ Edit src/parser.rs".into(); 50])),
            ..Ui::default()
        };
        for (w, h) in [(80, 24), (200, 60), (40, 12), (20, 5), (1, 1)] {
            for ui in [&Ui::default(), &ui] {
                let rows = screen(&view, ui, w, h);
                assert!(
                    rows.iter()
                        .all(|r| console::measure_text_width(r) <= w as usize)
                );
            }
        }
        let rows = screen(&view, &ui, 80, 24).join("\n");
        assert!(rows.contains("w1: transcript"), "{rows}");
    }

    #[test]
    fn a_fleet_shows_its_machines_read_only_and_a_hostile_item_cannot_break_the_screen() {
        let mut view = RunView::default();
        view.fleet = Some("night on origin".into());
        view.run_id = Some("fleet-night".into());
        view.parallel = true;
        view.started = Some("2026-11-27T07:00:00Z".parse().unwrap());
        view.set_iterations(7);
        let hostile = format!(
            "evil \u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[31m{}",
            "A".repeat(1 << 20)
        );
        view.items = vec![(true, "alpha".into()), (false, hostile.clone())];
        let mut wa = LoopView::new("wa");
        wa.item = Some(hostile.clone());
        wa.state = LoopState::Working;
        let mut wb = LoopView::new("wb");
        wb.item = Some("alpha".into());
        wb.state = LoopState::Dead(312);
        view.loops.insert("wa".into(), wa);
        view.loops.insert("wb".into(), wb);
        let ui = Ui {
            read_only: Some(std::time::Duration::from_secs(5)),
            fetched: Some("2026-11-27T07:01:48Z".parse().unwrap()),
            ..Ui::default()
        };
        let rows = screen(&view, &ui, 80, 24);
        let text = rows.join("\n");
        assert!(
            rows[0].starts_with("ralph watch · fleet night on origin · running · 2m00s"),
            "{text}"
        );
        assert!(
            rows[1].starts_with("items 1/2 · cost $0.00 · iteration 7"),
            "{text}"
        );
        assert!(
            text.contains("wb   dead: silent 5m12s (killed, or cut off)"),
            "{text}"
        );
        assert!(
            rows.iter().any(|r| r.contains("wa") && r.contains("evil ")),
            "{text}"
        );
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text:?}"
        );
        assert!(
            rows.iter().all(|r| console::measure_text_width(r) <= 80),
            "{text}"
        );
        assert_eq!(rows.len(), 24);
        assert_eq!(
            rows[23], "↑↓ machine · q quit · read-only · fetched 12s ago, every 5s",
            "{text}"
        );
        // A fetch that failed is said in the footer; the view stays.
        let ui = Ui {
            problem: Some("cannot fetch from `origin`: the remote cannot be reached".into()),
            ..ui
        };
        let rows = screen(&view, &ui, 80, 24);
        assert!(
            rows[23].starts_with("cannot fetch from `origin`"),
            "{rows:?}"
        );
        assert!(rows.iter().any(|r| r.contains("wb   dead")), "{rows:?}");
        for (w, h) in [(200, 60), (40, 12), (1, 1)] {
            let rows = screen(&view, &ui, w, h);
            assert!(rows.iter().all(|r| {
                console::measure_text_width(r) <= w as usize && !r.contains('\u{1b}')
            }));
        }
    }
}
