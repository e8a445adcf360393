//! The human view of a run: a live status line on a terminal (indicatif),
//! plain timestamped lines elsewhere, both rendered from the event stream.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::config::span::format_duration;
use crate::context::{Level, MeterReading};
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
        Event::Trust { message, .. } => format!("WARNING (trust): {message}"),
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

/// The status line: `iter 3 ▕██████░░░░▏ 62.0% 103k/167k L0 +4k/min ETA 5m Write src/x.rs 12m04s`.
/// The status line of a parallel run: each working worker's iteration and
/// context, one short field each ("w1 iter 2 45% · w2 iter 1 12%").
pub(crate) fn workers_line(
    workers: &std::collections::BTreeMap<String, (u32, Option<f64>)>,
) -> String {
    workers
        .iter()
        .map(|(w, (iteration, percent))| match percent {
            Some(p) => format!("{w} iter {iteration} {p:.0}%"),
            None => format!("{w} iter {iteration}"),
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

pub(crate) fn status_line(
    iteration: u32,
    reading: Option<&MeterReading>,
    tool: Option<&str>,
    elapsed: Duration,
) -> String {
    let mut s = format!("iter {iteration}");
    if reading.is_some_and(|r| r.not_metered) {
        s.push_str(" context not metered live");
    } else if let Some(r) = reading {
        s.push_str(&format!(
            " {} {:.1}% {}/{} {}",
            bar(r.percent, 20),
            r.percent,
            tokens_short(r.tokens),
            tokens_short(r.usable),
            r.level
        ));
        if let Some(rate) = r.rate_per_min {
            s.push_str(&format!(" +{}/min", tokens_short(rate.max(0.0) as u64)));
        }
        if let Some(eta) = r.eta_to_checkpoint_secs.filter(|_| r.level < Level::L2) {
            s.push_str(&format!(
                " ETA {}",
                format_duration(Duration::from_secs(eta))
            ));
        }
    }
    if let Some(t) = tool {
        // The agent's own words: no escape sequence reaches the terminal.
        s.push_str(&format!(" · {}", crate::text::printable(t)));
    }
    s.push_str(&format!(" · {}", format_duration(elapsed)));
    s
}

/// The terminal sink: a live bar on a TTY, plain lines otherwise.
pub(crate) struct Terminal {
    bar: Option<ProgressBar>,
    detached: bool,
    iteration: u32,
    reading: Option<MeterReading>,
    tool: Option<String>,
    started: Instant,
    /// While a usage limit is waited out: when it resets (the countdown).
    waiting_until: Option<Instant>,
    /// A parallel run's workers whose loops run: iteration and percent.
    workers: std::collections::BTreeMap<String, (u32, Option<f64>)>,
}

impl Terminal {
    pub(crate) fn new() -> Terminal {
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
            iteration: 0,
            reading: None,
            tool: None,
            started: Instant::now(),
            waiting_until: None,
            workers: Default::default(),
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

    fn redraw(&self) {
        let Some(bar) = &self.bar else { return };
        if let Some(until) = self.waiting_until {
            let left = until.saturating_duration_since(Instant::now());
            bar.set_message(format!(
                "waiting for the usage limit to reset · {} left",
                format_duration(left)
            ));
            return;
        }
        if !self.workers.is_empty() {
            bar.set_message(workers_line(&self.workers));
            return;
        }
        let line = status_line(
            self.iteration,
            self.reading.as_ref(),
            self.tool.as_deref(),
            self.started.elapsed(),
        );
        // The line turns to a warning from L1 on (plain text when NO_COLOR).
        let styled = match self.reading.map_or(Level::L0, |r| r.level) {
            Level::L0 => console::style(line),
            Level::L1 => console::style(line).yellow(),
            Level::L2 | Level::L3 => console::style(line).red().bold(),
        };
        bar.set_message(styled.for_stderr().to_string());
    }
}

impl Default for Terminal {
    fn default() -> Self {
        Terminal::new()
    }
}

impl Sink for Terminal {
    fn event(&mut self, record: &Record) {
        // A worker's events (`ralph run --workers N`) are lines named after
        // it; the status line stays the coordinator's, so N workers never
        // fight over one line.
        if let Some(worker) = &record.worker {
            match &record.event {
                Event::IterationStarted { iteration, .. } => {
                    self.workers.insert(worker.clone(), (*iteration, None));
                }
                Event::Context { reading, .. } => {
                    if let Some(w) = self.workers.get_mut(worker) {
                        w.1 = Some(reading.percent);
                    }
                }
                Event::RunEnded { .. } => {
                    self.workers.remove(worker);
                }
                _ => {}
            }
            if let Some(text) = describe(&record.event) {
                self.line(&format!("[{worker}] {text}"));
            }
            self.redraw();
            return;
        }
        match &record.event {
            Event::IterationStarted { iteration, .. } => {
                self.iteration = *iteration;
                self.reading = None;
                self.tool = None;
                self.started = Instant::now();
                self.waiting_until = None;
            }
            Event::LimitWait { seconds, .. } => {
                self.waiting_until = Some(Instant::now() + Duration::from_secs(*seconds));
            }
            Event::Context { reading, tool, .. } => {
                if tool.is_some() {
                    self.tool.clone_from(tool);
                }
                // Plain lines only when the context moved: one line a turn
                // (the tool of a turn arrives on a later line than its usage).
                let moved = self.reading.is_none_or(|r| r.tokens != reading.tokens);
                if self.bar.is_none() && moved {
                    let text =
                        status_line(self.iteration, Some(reading), None, self.started.elapsed());
                    self.line(&text);
                }
                self.reading = Some(*reading);
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

    #[test]
    fn the_workers_line_names_each_worker_briefly() {
        let workers = [
            ("w1".to_string(), (2, Some(45.2))),
            ("w2".to_string(), (1, None)),
        ]
        .into_iter()
        .collect();
        assert_eq!(workers_line(&workers), "w1 iter 2 45% · w2 iter 1");
    }

    #[test]
    fn status_line_shape() {
        let r = MeterReading {
            tokens: 142_000,
            usable: 167_000,
            window: 200_000,
            percent: 85.0,
            level: Level::L2,
            peak_percent: 85.0,
            rate_per_min: Some(4_100.0),
            eta_to_checkpoint_secs: Some(0),
            not_metered: false,
        };
        let line = status_line(
            3,
            Some(&r),
            Some("Write src/x.rs"),
            Duration::from_secs(724),
        );
        assert_eq!(
            line,
            "iter 3 ▕█████████████████░░░▏ 85.0% 142k/167k L2 +4k/min · Write src/x.rs · 12m04s"
        );
        // An agent that reports no usage per call: no number is shown.
        let r = MeterReading {
            tokens: 0,
            percent: 0.0,
            level: Level::L0,
            not_metered: true,
            ..r
        };
        let line = status_line(3, Some(&r), None, Duration::from_secs(5));
        assert_eq!(line, "iter 3 context not metered live · 5s");
    }

    #[test]
    fn the_agents_escape_sequences_never_reach_the_status_line() {
        let line = status_line(
            1,
            None,
            Some("Bash echo \u{1b}[2J\u{1b}]0;title\u{7}\u{1b}]52;c;ZXZpbA==\u{7}\rok"),
            Duration::from_secs(1),
        );
        assert_eq!(line, "iter 1 · Bash echo ok · 1s");
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
