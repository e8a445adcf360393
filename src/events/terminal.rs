//! The human view of a run: a live status line on a terminal (indicatif),
//! plain timestamped lines elsewhere, both rendered from the event stream.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::config::span::format_duration;
use crate::context::Level;
use crate::events::view::{LoopState, LoopView, RunView, SINGLE};
use crate::events::{Event, Record, Sink};
use crate::state::Trigger;

/// One line for the log, or `None` for events only the status line shows.
pub(crate) fn describe(event: &Event) -> Option<String> {
    Some(match event {
        Event::RunStarted {
            run_id,
            resumed,
            first_iteration,
            max_iterations,
            plan,
            ..
        } => format!(
            "{} run {run_id} on {plan}: iteration {first_iteration}, at most {max_iterations}",
            if *resumed { "continuing" } else { "starting" }
        ),
        Event::IterationStarted {
            iteration,
            resume_from,
            ..
        } => match resume_from {
            Some(h) => format!("iteration {iteration} started, resuming from {h}"),
            None => format!("iteration {iteration} started"),
        },
        Event::Context { .. } => return None,
        Event::LevelChanged {
            iteration,
            from,
            to,
            percent,
            tokens,
        } => format!(
            "iteration {iteration}: context {} → {} ({}) at {percent:.1}% ({})",
            from,
            to,
            to.meaning(),
            tokens_short(*tokens)
        ),
        Event::Compacted {
            iteration,
            pre_tokens,
            post_tokens,
        } => format!(
            "iteration {iteration}: the agent compacted its context ({} → {}): context was lost",
            tokens_short(*pre_tokens),
            tokens_short(*post_tokens)
        ),
        Event::ApiRetry {
            attempt,
            max_retries,
            error_status,
            error,
            ..
        } => format!(
            "API retry {attempt}/{max_retries}{}{}",
            error_status
                .map(|s| format!(" (HTTP {s})"))
                .unwrap_or_default(),
            error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        ),
        Event::ItemChecked {
            iteration,
            items,
            next,
            percent,
            ..
        } => format!(
            "iteration {iteration}: checked off {} at {percent:.1}%; next: {}",
            items.join(", "),
            next.as_deref().unwrap_or("nothing open")
        ),
        Event::Nudged {
            iteration, percent, ..
        } => format!(
            "iteration {iteration}: L1 at {percent:.1}%: told the agent to finish its item and not start another"
        ),
        Event::ShardSuggested {
            iteration,
            item,
            reason,
            ..
        } => format!("iteration {iteration}: asking to split \"{item}\" into sub-items ({reason})"),
        Event::CheckpointRequested {
            iteration,
            trigger,
            level,
            percent,
            notes_path,
        } => format!(
            "iteration {iteration}: checkpoint ({trigger}, {level} at {percent:.1}%){}",
            notes_path
                .as_deref()
                .map(|p| format!(": asked the agent for handoff notes in {p}"))
                .unwrap_or_default()
        ),
        Event::SessionContinued {
            iteration,
            session_id,
            notes_path,
            notes_written,
            seconds,
            ..
        } => format!(
            "iteration {iteration}: continued the agent's session {session_id} once to ask for handoff notes: {} ({})",
            if *notes_written {
                format!("written to {notes_path}")
            } else {
                "none written".to_string()
            },
            format_duration(Duration::from_secs_f64(*seconds))
        ),
        Event::AgentSignalled { signal, reason, .. } => {
            format!("sent {signal} to the agent ({reason})")
        }
        Event::AgentExited {
            iteration,
            code,
            signal,
            seconds,
        } => format!(
            "iteration {iteration}: agent exited ({}) after {}",
            match (code, signal) {
                (Some(c), _) => format!("code {c}"),
                (None, Some(s)) => format!("signal {s}"),
                _ => "unknown status".into(),
            },
            format_duration(Duration::from_secs_f64(*seconds))
        ),
        Event::Checkpoint {
            iteration,
            trigger,
            level,
            percent,
            commit,
            commit_note,
            handoff,
            ..
        } => format!(
            "iteration {iteration}: checkpoint {}: {}; handoff {}",
            match trigger {
                Trigger::Context | Trigger::Compact => format!("{level} at {percent:.1}%"),
                _ => crate::state::checkpoint_label(*trigger, *level, *percent),
            },
            match (commit, commit_note) {
                (Some(c), _) => format!("WIP commit {}", &c[..c.len().min(10)]),
                (None, Some(n)) => format!("no commit ({n})"),
                (None, None) => "no commit".into(),
            },
            handoff.as_deref().unwrap_or("not written")
        ),
        Event::Snapshot {
            iteration,
            reason,
            commit,
            ..
        } => format!(
            "iteration {iteration}: snapshot {} of the work tree ({reason}); `ralph recover` restores it",
            &commit[..commit.len().min(10)]
        ),
        Event::Hook {
            hook,
            command,
            ok,
            detail,
            ..
        } => format!(
            "hook {hook} `{command}` {}{}",
            if *ok { "ran" } else { "FAILED" },
            if detail.is_empty() {
                String::new()
            } else {
                format!(": {detail}")
            }
        ),
        Event::PrematurePromise {
            iteration,
            open_items,
        } => format!(
            "iteration {iteration}: the agent promised completion but {open_items} plan item(s) are open; going on"
        ),
        Event::Verify { verification: v } => format!(
            "iteration {}: verify at {}: {}{}",
            v.iteration,
            v.when.name(),
            v.summary(),
            v.checks
                .last()
                .map(|c| format!(" ({:.1}s)", c.seconds))
                .unwrap_or_default()
        ),
        Event::CompletionRefused { iteration, reason } => format!(
            "iteration {iteration}: completion refused: {reason}; the next iteration fixes it"
        ),
        Event::IterationEnded {
            iteration,
            outcome,
            progress,
            cost_usd,
            peak_percent,
            seconds,
            error,
            invalid_lines,
            not_metered,
            ..
        } => format!(
            "iteration {iteration} ended: {outcome}, {}, {}, ${cost_usd:.2}, {}{}{}",
            if *progress { "progress" } else { "no progress" },
            if *not_metered {
                "context not metered live".to_string()
            } else {
                format!("peak context {peak_percent:.1}%")
            },
            format_duration(Duration::from_secs_f64(*seconds)),
            error
                .as_deref()
                .map(|e| format!(", error: {e}"))
                .unwrap_or_default(),
            if *invalid_lines > 0 {
                format!(", {invalid_lines} undecodable line(s)")
            } else {
                String::new()
            }
        ),
        Event::Breaker {
            status,
            rule,
            message,
        } => format!(
            "circuit breaker {status}{}: {message}",
            rule.as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        Event::LimitWait {
            until,
            seconds,
            detail,
            ..
        } => format!(
            "usage limit: {detail}; waiting {} until {until}",
            format_duration(Duration::from_secs(*seconds))
        ),
        Event::Warning { message } => format!("warning: {message}"),
        Event::NeedsHuman {
            iteration,
            reason,
            message,
        } => format!("needs a human ({reason}, iteration {iteration}): {message}"),
        Event::WorkerStarted {
            item, task, branch, ..
        } => match task.as_str() {
            "update" => format!(
                "bring {branch} up to date with the run branch (merge conflict), item \"{item}\""
            ),
            _ => format!("started on \"{item}\" (branch {branch})"),
        },
        Event::WorkerEnded {
            item,
            exit_code,
            outcome,
        } => format!("\"{item}\" ended: {outcome} (exit {exit_code})"),
        Event::Merge {
            item,
            branch,
            attempt,
            merged,
            ..
        } => {
            use crate::workers::Merged;
            let what = match merged {
                Merged::AlreadyMerged => "already merged".to_string(),
                Merged::FastForward { to, .. } => format!("fast-forward to {}", cut_id(to)),
                Merged::MergeCommit { id, .. } => format!("merge commit {}", cut_id(id)),
                Merged::Conflict { files } => {
                    format!("CONFLICT in {}: handed back", files.join(", "))
                }
                Merged::Blocked { reason } => format!("blocked: {reason}"),
            };
            format!("merge {branch} (\"{item}\", attempt {attempt}): {what}")
        }
        Event::RunEnded {
            outcome,
            exit_code,
            reason,
            iterations,
            cost_usd,
            ..
        } => format!(
            "run ended: {outcome} (exit {exit_code}) after {iterations} iteration(s), ${cost_usd:.2}: {reason}"
        ),
    })
}

/// A commit id as people read it: its first 8 digits.
fn cut_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

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
/// so far, time since the start.
pub(crate) fn progress(view: &RunView, now: jiff::Timestamp) -> Vec<String> {
    let mut out = Vec::new();
    if !view.items.is_empty() {
        out.push(format!("{}/{} items", view.items_done(), view.items.len()));
    }
    out.push(format!("${:.2}", view.cost_usd));
    if let Some(e) = view.elapsed(now) {
        out.push(format_duration(Duration::from_secs(e)));
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

/// Plain lines are this wide (no terminal to fit).
const PLAIN_WIDTH: usize = 160;

/// The terminal sink: a live bar on a TTY, plain lines otherwise.
pub(crate) struct Terminal {
    bar: Option<ProgressBar>,
    detached: bool,
    /// The run as its events tell it (the live line's figures).
    view: RunView,
    /// The project, where the plan named by `run_started` is read.
    root: PathBuf,
    /// While a usage limit is waited out: when it resets (the countdown).
    waiting_until: Option<Instant>,
}

impl Terminal {
    pub(crate) fn new(root: &Path) -> Terminal {
        let tty = std::io::stderr().is_terminal();
        if std::env::var_os("NO_COLOR").is_some() {
            console::set_colors_enabled_stderr(false);
        }
        let bar = tty.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("style"));
            bar.enable_steady_tick(Duration::from_millis(250));
            bar
        });
        Terminal {
            bar,
            detached: false,
            view: RunView::default(),
            root: root.to_path_buf(),
            waiting_until: None,
        }
    }

    fn line(&mut self, text: &str) {
        if self.detached {
            return;
        }
        // Lines quote the agent and hooks (errors, warnings, last words).
        let text = &*crate::text::printable_lines(text);
        match &self.bar {
            Some(bar) => bar.println(text),
            None => {
                let ts = jiff::Zoned::now().strftime("%H:%M:%S");
                // One write per line (stderr is unbuffered: `writeln!` would
                // make five). A closed terminal or pipe must never crash the run.
                let line = format!("[{ts}] {text}\n");
                let _ = std::io::stderr().write_all(line.as_bytes());
            }
        }
    }

    /// The plan's items, read again when the run names it or checks one off.
    fn read_plan(&mut self) {
        if let Some(plan) = &self.view.plan
            && let Ok(p) = crate::plan::Plan::load(&self.root.join(plan))
        {
            self.view.set_plan(&p);
        }
    }

    fn redraw(&self) {
        let Some(bar) = &self.bar else { return };
        // The spinner and a space take two cells; the last one is left
        // free so that no terminal wraps the line.
        let width = (console::Term::stderr().size().1 as usize).saturating_sub(3);
        if let Some(until) = self.waiting_until {
            let left = until.saturating_duration_since(Instant::now());
            let text = format!(
                "waiting for the usage limit to reset · {} left",
                format_duration(left)
            );
            bar.set_message(console::truncate_str(&text, width, "…").into_owned());
            return;
        }
        let lines = live_lines(&self.view, jiff::Timestamp::now(), width);
        // A single loop's line turns to a warning from L1 on (plain text
        // when NO_COLOR).
        let level = (self.view.loops.get(SINGLE))
            .filter(|_| !self.view.parallel)
            .and_then(|l| l.reading.as_ref())
            .map_or(Level::L0, |(r, _)| r.level);
        let text = lines.join("\n");
        let styled = match level {
            Level::L0 => console::style(text),
            Level::L1 => console::style(text).yellow(),
            Level::L2 | Level::L3 => console::style(text).red().bold(),
        };
        bar.set_message(styled.for_stderr().to_string());
    }
}

impl Sink for Terminal {
    fn event(&mut self, record: &Record) {
        let moved = match (&record.event, self.view.loops.get(SINGLE)) {
            (Event::Context { reading, .. }, Some(l)) => l
                .reading
                .as_ref()
                .is_none_or(|(r, _)| r.tokens != reading.tokens),
            (Event::Context { .. }, None) => true,
            _ => false,
        };
        self.view.apply(record);
        match &record.event {
            Event::RunStarted { .. } | Event::ItemChecked { .. } | Event::Merge { .. }
                if record.worker.is_none() || matches!(record.event, Event::Merge { .. }) =>
            {
                self.read_plan();
            }
            _ => {}
        }
        // A worker's events (`ralph run --workers N`) are lines named after
        // it; the live lines are one per worker, so N workers never fight
        // over one line.
        if let Some(worker) = &record.worker {
            if let Some(text) = describe(&record.event) {
                self.line(&format!("[{worker}] {text}"));
            }
            self.redraw();
            return;
        }
        match &record.event {
            Event::IterationStarted { .. } => self.waiting_until = None,
            Event::LimitWait { seconds, .. } => {
                self.waiting_until = Some(Instant::now() + Duration::from_secs(*seconds));
            }
            // Plain lines only when the context moved: one line a turn (the
            // tool of a turn arrives on a later line than its usage).
            Event::Context { .. } if self.bar.is_none() && moved => {
                if let Some(l) = self.view.loops.get(SINGLE) {
                    let now = jiff::Timestamp::now();
                    let text = loop_line(None, l, &progress(&self.view, now), now, PLAIN_WIDTH);
                    self.line(&text);
                }
            }
            Event::RunEnded { .. } => {
                if let Some(bar) = self.bar.take() {
                    bar.finish_and_clear();
                }
            }
            _ => {}
        }
        if let Some(text) = describe(&record.event) {
            self.line(&text);
        }
        if let Event::RunEnded {
            report: Some(path), ..
        } = &record.event
        {
            self.line(&format!("report: {path} (`ralph report` for a summary)"));
        }
        self.redraw();
    }

    fn tick(&mut self) {
        self.redraw();
    }

    fn detach(&mut self) {
        self.detached = true;
        if let Some(bar) = self.bar.take() {
            bar.set_draw_target(ProgressDrawTarget::hidden());
        }
    }
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

    #[test]
    fn every_event_but_context_has_a_line() {
        let e = Event::LevelChanged {
            iteration: 2,
            from: Level::L0,
            to: Level::L1,
            percent: 71.2,
            tokens: 118_900,
        };
        assert_eq!(
            describe(&e).unwrap(),
            "iteration 2: context L0 → L1 (warn) at 71.2% (118k)"
        );
    }
}
