//! The human view of a run: the log's lines and, on a terminal, the live
//! lines under them (indicatif; their text is `live`); plain timestamped
//! lines elsewhere, both rendered from the event stream.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::context::Level;
use crate::events::Sink;
pub(crate) use crate::events::live::{bar, sparkline, tokens_short};
use crate::events::live::{live_lines, loop_line, progress};
use crate::events::view::{RunView, SINGLE};
use crate::formats::Trigger;
use crate::formats::{Event, Record};
use crate::text::format_duration;

/// One line for the log, or `None` for events only the status line shows.
pub(crate) fn describe(event: &Event) -> Option<String> {
    Some(match event {
        Event::Fleet(fleet) => fleet.human(),
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
                _ => crate::formats::checkpoint_label(*trigger, *level, *percent),
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
            use crate::formats::Merged;
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
    /// `Plan::load` itself, not `Project::plan_at`: `events` sits below
    /// `project` (which says its warnings on a `Bus`); the path is the one
    /// the run recorded, joined to the root as `Project::plan_at` joins it.
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
