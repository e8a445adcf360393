//! The live lines of `ralph run` and the figures' short forms (`142k`, a
//! bar, a sparkline): one line per loop, the run's progress and the time
//! to the checkpoint spelled out, fitted to a width so that no
//! terminal wraps them (what does not fit whole is left out). Pure: drawn
//! from a `RunView` at a given time; `terminal` puts them on the screen.

use std::time::Duration;

use crate::context::Level;
use crate::events::view::{LoopState, LoopView, RunView, SINGLE, clock};
use crate::text::format_duration;

/// "142k", "1.2M".
pub(crate) fn tokens_short(t: u64) -> String {
    match t {
        0..1_000 => t.to_string(),
        1_000..1_000_000 => format!("{}k", t / 1_000),
        _ => format!("{:.1}M", t as f64 / 1e6),
    }
}

/// `▕██████░░░░▏`: `percent` of 100 as a bar `width` cells wide.
pub(crate) fn bar(percent: f64, width: usize) -> String {
    let filled = ((percent / 100.0) * width as f64)
        .round()
        .clamp(0.0, width as f64) as usize;
    format!("▕{}{}▏", "█".repeat(filled), "░".repeat(width - filled))
}

/// `▁▃█▅`: one cell per value, each a percentage of 100.
pub(crate) fn sparkline(percents: impl IntoIterator<Item = f64>) -> String {
    const CELLS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    percents
        .into_iter()
        .map(|p| CELLS[((p / 100.0 * 8.0).ceil() as usize).clamp(1, 8) - 1])
        .collect()
}

/// The time to the checkpoint, spelled out: "checkpoint in ~9 min".
pub(crate) fn checkpoint_phrase(level: Level, secs: Option<u64>) -> String {
    match secs {
        _ if level >= Level::L2 => "checkpointing".into(),
        None => "checkpoint: no trend yet".into(),
        Some(s) if s < 60 => "checkpoint in <1 min".into(),
        Some(s) if s < 3600 => format!("checkpoint in ~{} min", (s + 30) / 60),
        Some(s) => format!("checkpoint in ~{}h{:02}", s / 3600, (s % 3600) / 60),
    }
}

/// A line of a loop for the live view: its iteration, context (a bar when
/// there is room), the time to the checkpoint, then `rest` (the run's
/// progress, the last tool) as far as `width` cells allow. Never wider.
pub(crate) fn loop_line(
    name: Option<&str>,
    l: &LoopView,
    rest: &[String],
    now: jiff::Timestamp,
    width: usize,
) -> String {
    let lead = match name {
        Some(n) => format!("{n} iter {}", l.iteration),
        None => format!("iter {}", l.iteration),
    };
    let mut level = String::new();
    let mut facts: Vec<String> = Vec::new();
    let metered = l.reading.as_ref().filter(|(r, _)| !r.not_metered);
    match &l.reading {
        Some((r, _)) if r.not_metered => level.push_str(" context not metered live"),
        Some((r, _)) => {
            level = format!(" {:.1}% {}", r.percent, r.level);
            facts.push(checkpoint_phrase(r.level, l.checkpoint_in(now)));
        }
        None => {}
    }
    facts.extend(rest.iter().cloned());
    let tail: String = facts.iter().map(|f| format!(" · {f}")).collect();
    let used = [&lead, &level, &tail]
        .iter()
        .map(|s| console::measure_text_width(s))
        .sum::<usize>();
    // The bar takes the room left, up to 20 cells; none in less than 5.
    // The rate and the last tool come last: they take what is left.
    let more = metered.and_then(|(r, _)| r.rate_per_min).is_some() || l.tool.is_some();
    let room = width.saturating_sub(used + 3 + if more { 4 } else { 0 });
    let gauge = match metered {
        Some((r, _)) if room >= 5 => format!(" {}", bar(r.percent, room.min(20))),
        _ => String::new(),
    };
    let mut line = format!("{lead}{gauge}{level}");
    // The facts in order, each whole, as far as they fit.
    for f in &facts {
        let f = format!(" · {f}");
        if console::measure_text_width(&line) + console::measure_text_width(&f) > width {
            break;
        }
        line.push_str(&f);
    }
    // Each only when it fits whole; the tool also cut short when some of
    // it fits: no line ends in a lone "· …".
    if let Some(rate) = metered.and_then(|(r, _)| r.rate_per_min) {
        let rate = format!(" · +{}/min", tokens_short(rate.max(0.0) as u64));
        if console::measure_text_width(&line) + console::measure_text_width(&rate) <= width {
            line.push_str(&rate);
        }
    }
    if let Some(t) = &l.tool {
        // The agent's own words: no escape sequence reaches the terminal.
        let left = width.saturating_sub(console::measure_text_width(&line) + 3);
        if left >= 8 {
            line.push_str(" · ");
            line.push_str(&console::truncate_str(
                &crate::text::printable(t),
                left,
                "…",
            ));
        }
    }
    console::truncate_str(&line, width, "…").into_owned()
}

/// The run's progress for the live line: items done of the plan's, cost
/// so far (of the budget), time since the start, the deadline (both
/// budgets as the run's `run_started` said them).
pub(crate) fn progress(view: &RunView, now: jiff::Timestamp) -> Vec<String> {
    let mut out = Vec::new();
    if !view.items.is_empty() {
        out.push(format!("{}/{} items", view.items_done(), view.items.len()));
    }
    out.push(match view.max_cost_usd {
        Some(max) => format!("${:.2} of ${max:.2}", view.cost_usd),
        None => format!("${:.2}", view.cost_usd),
    });
    if let Some(e) = view.elapsed(now) {
        out.push(format_duration(Duration::from_secs(e)));
    }
    if let Some(at) = view.deadline {
        out.push(format!("deadline {}", clock(&at.to_string())));
    }
    out
}

/// The live lines: one for a single loop; for a parallel run one with the
/// run's progress, then one per worker whose loop runs.
pub(crate) fn live_lines(view: &RunView, now: jiff::Timestamp, width: usize) -> Vec<String> {
    let progress = progress(view, now);
    if !view.parallel {
        return match view.loops.get(SINGLE) {
            Some(l) => vec![loop_line(None, l, &progress, now, width)],
            None => vec![console::truncate_str(&progress.join(" · "), width, "…").into_owned()],
        };
    }
    let working: Vec<&LoopView> = (view.loops.values())
        .filter(|l| {
            matches!(
                l.state,
                LoopState::Working | LoopState::HandingOff | LoopState::Waiting(_)
            )
        })
        .collect();
    let head = format!(
        "{} worker(s) working · {}",
        working.len(),
        progress.join(" · ")
    );
    let mut lines = vec![console::truncate_str(&head, width, "…").into_owned()];
    for l in working {
        let item = view
            .item_of(l)
            .map(|i| crate::text::printable(i).into_owned());
        lines.push(loop_line(
            Some(&l.name),
            l,
            &item.into_iter().collect::<Vec<_>>(),
            now,
            width,
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log read into the view, at 07:02 (the loops' readings are from 07:01).
    fn view_of(log: &str) -> RunView {
        let mut v = RunView::default();
        for line in log.lines() {
            v.apply(&serde_json::from_str(line).unwrap());
        }
        v.set_plan(&crate::plan::Plan::parse(
            "- [x] one\n- [ ] two\n- [ ] three\n",
        ));
        v
    }

    fn at(hhmmss: &str) -> jiff::Timestamp {
        format!("2026-11-27T{hhmmss}Z").parse().unwrap()
    }

    const SINGLE_RUN: &str = r#"{"ts":"2026-11-27T07:00:00Z","event":"run_started","run_id":"r","resumed":false,"first_iteration":1,"max_iterations":50,"plan":"fix_plan.md","pid":1}
{"ts":"2026-11-27T07:00:01Z","event":"iteration_started","iteration":3,"command":[],"transcript":"t","resume_from":null}
{"ts":"2026-11-27T07:00:30Z","event":"iteration_ended","iteration":3,"outcome":"done","progress":true,"cost_usd":1.25,"peak_percent":30.0,"seconds":29.0,"error":null,"invalid_lines":0,"skipped_lines":0}
{"ts":"2026-11-27T07:00:31Z","event":"iteration_started","iteration":4,"command":[],"transcript":"t","resume_from":null}
{"ts":"2026-11-27T07:01:00Z","event":"context","iteration":4,"reading":{"tokens":103540,"usable":167000,"window":200000,"percent":62.0,"level":"L0","peak_percent":62.0,"rate_per_min":4100.0,"eta_to_checkpoint_secs":600},"tool":"Write src/a_rather_long_module_name/with_a_longer_file_name.rs"}
"#;

    #[test]
    fn the_live_line_tells_progress_and_fits_any_width() {
        let v = view_of(SINGLE_RUN);
        let now = at("07:02:00");
        let lines = live_lines(&v, now, 200);
        assert_eq!(
            lines,
            [
                "iter 4 ▕████████████░░░░░░░░▏ 62.0% L0 · checkpoint in ~9 min · 1/3 items · $1.25 · 2m00s · +4k/min · Write src/a_rather_long_module_name/with_a_longer_file_name.rs"
            ]
        );
        for width in [20, 40, 60, 77, 80, 120] {
            let line = &live_lines(&v, now, width)[0];
            assert!(
                console::measure_text_width(line) <= width,
                "{width}: {line}"
            );
        }
        let at_80 = &live_lines(&v, now, 80)[0];
        assert!(at_80.starts_with("iter 4 ▕"), "{at_80}");
        assert!(
            at_80.contains("62.0% L0 · checkpoint in ~9 min · 1/3 items · $1.25 · 2m00s"),
            "{at_80}"
        );
        // At 40 columns the bar goes first; the context and the checkpoint stay.
        let at_40 = &live_lines(&v, now, 40)[0];
        assert_eq!(at_40, "iter 4 62.0% L0 · checkpoint in ~9 min");
    }

    #[test]
    fn a_parallel_run_has_a_line_per_working_worker() {
        let log = r#"{"ts":"2026-11-27T07:00:00Z","event":"run_started","run_id":"r","resumed":false,"first_iteration":1,"max_iterations":50,"plan":"fix_plan.md","pid":1}
{"ts":"2026-11-27T07:00:01Z","worker":"w1","event":"worker_started","item":"two","task":"item","branch":"b1","worktree":"w"}
{"ts":"2026-11-27T07:00:01Z","worker":"w2","event":"worker_started","item":"three","task":"item","branch":"b2","worktree":"w"}
{"ts":"2026-11-27T07:00:02Z","worker":"w1","event":"iteration_started","iteration":1,"command":[],"transcript":"t","resume_from":null}
{"ts":"2026-11-27T07:00:02Z","worker":"w2","event":"iteration_started","iteration":2,"command":[],"transcript":"t","resume_from":null}
{"ts":"2026-11-27T07:01:00Z","worker":"w2","event":"context","iteration":2,"reading":{"tokens":150000,"usable":167000,"window":200000,"percent":89.8,"level":"L2","peak_percent":89.8,"rate_per_min":null,"eta_to_checkpoint_secs":0},"tool":null}
"#;
        let lines = live_lines(&view_of(log), at("07:02:00"), 80);
        assert_eq!(lines[0], "2 worker(s) working · 1/3 items · $0.00 · 2m00s");
        assert_eq!(lines[1], "w1 iter 1 · two");
        assert!(lines[2].starts_with("w2 iter 2 ▕"), "{lines:?}");
        assert!(
            lines[2].ends_with("89.8% L2 · checkpointing · three"),
            "{lines:?}"
        );
    }

    #[test]
    fn the_budgets_are_the_ones_the_run_started_with() {
        // The coordinator's start says the run's budgets; a worker's loop
        // starting with its own says nothing about the run's.
        let log = r#"{"ts":"2026-11-27T07:00:00Z","event":"run_started","run_id":"r","resumed":true,"first_iteration":4,"max_iterations":50,"plan":"fix_plan.md","pid":1,"deadline":"2026-11-27T07:40:00Z","max_cost_usd":5.0}
{"ts":"2026-11-27T07:00:01Z","worker":"w1","event":"worker_started","item":"two","task":"item","branch":"b1","worktree":"w"}
{"ts":"2026-11-27T07:00:01Z","worker":"w1","event":"run_started","run_id":"w","resumed":false,"first_iteration":1,"max_iterations":50,"plan":"fix_plan.md","pid":2,"deadline":"2026-11-27T09:00:00Z","max_cost_usd":50.0}
{"ts":"2026-11-27T07:00:02Z","worker":"w1","event":"iteration_started","iteration":1,"command":[],"transcript":"t","resume_from":null}
"#;
        let v = view_of(log);
        assert_eq!(v.deadline, Some(at("07:40:00")));
        assert_eq!(v.max_cost_usd, Some(5.0));
        let lines = live_lines(&v, at("07:02:00"), 120);
        assert_eq!(
            lines[0],
            format!(
                "1 worker(s) working · 1/3 items · $0.00 of $5.00 · 2m00s · deadline {}",
                clock("2026-11-27T07:40:00Z")
            )
        );
        // At 40 columns the deadline goes before the cost does.
        let narrow = &live_lines(&v, at("07:02:00"), 40)[0];
        assert!(!narrow.contains("deadline"), "{narrow}");
        // A run started without them (or an older log) shows none.
        let v = view_of(SINGLE_RUN);
        assert_eq!((v.deadline, v.max_cost_usd), (None, None));
        assert!(!live_lines(&v, at("07:02:00"), 300)[0].contains("deadline"));
    }

    #[test]
    fn the_checkpoint_is_spelled_out() {
        assert_eq!(
            checkpoint_phrase(Level::L0, Some(30)),
            "checkpoint in <1 min"
        );
        assert_eq!(
            checkpoint_phrase(Level::L1, Some(560)),
            "checkpoint in ~9 min"
        );
        assert_eq!(
            checkpoint_phrase(Level::L0, Some(7500)),
            "checkpoint in ~2h05"
        );
        assert_eq!(
            checkpoint_phrase(Level::L0, None),
            "checkpoint: no trend yet"
        );
        assert_eq!(checkpoint_phrase(Level::L2, Some(0)), "checkpointing");
    }

    #[test]
    fn the_agents_escape_sequences_never_reach_the_live_line() {
        let mut v = view_of(SINGLE_RUN);
        v.loops.get_mut(SINGLE).unwrap().tool =
            Some("Bash echo \u{1b}[2J\u{1b}]0;title\u{7}\u{1b}]52;c;ZXZpbA==\u{7}\rok".into());
        let line = &live_lines(&v, at("07:02:00"), 300)[0];
        assert!(line.ends_with("· Bash echo ok"), "{line}");
    }

    #[test]
    fn bars_and_sparklines() {
        assert_eq!(bar(50.0, 4), "▕██░░▏");
        assert_eq!(bar(130.0, 2), "▕██▏");
        assert_eq!(sparkline([0.0, 12.5, 50.0, 87.6, 100.0, 120.0]), "▁▁▄███");
    }
}
