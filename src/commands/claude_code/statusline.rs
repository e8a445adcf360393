//! `ralph statusline`: the one line Claude Code shows under its prompt —
//! ralph's meter applied to the session's own transcript: a bar, the
//! percent of the usable window, the tokens, the level, and the plan item.

use std::path::Path;

use console::Style;

use super::{Input, transcript};
use crate::config::Config;
use crate::context::Level;
use crate::project::Project;
use crate::stream::StreamEvent;
use crate::text::fit_width;

/// Cells of the bar.
const BAR: usize = 10;
/// Longest plan item shown, in characters.
const ITEM_CHARS: usize = 48;

/// What the status line shows; rendering it is pure.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct View {
    /// `None` before the session's first answer.
    pub(crate) tokens: Option<u64>,
    pub(crate) usable: u64,
    pub(crate) percent: f64,
    pub(crate) level: Level,
    /// The session was just compacted (the tokens are what it kept).
    pub(crate) compacted: bool,
    pub(crate) item: Option<String>,
    /// Something went wrong that the user should know about (stays short).
    pub(crate) note: Option<String>,
}

/// Build the view from Claude Code's input and the project at `root`.
pub(crate) fn view(input: &Input, root: &Path) -> View {
    let mut note = None;
    let config = Config::load(root).unwrap_or_else(|e| {
        note = Some(format!("ralph.toml: {}", first_line(&e.to_string())));
        Config::default()
    });
    let mut meter = super::meter(&config, input);
    let mut tokens = None;
    let mut compacted = false;
    match input.transcript_path.as_deref().map(transcript::occupancy) {
        Some(Ok(found)) => {
            if let Some(m) = found.message {
                tokens = Some(m.usage.occupancy());
                meter.observe(&StreamEvent::Assistant(m), std::time::Duration::ZERO);
            } else if let Some(post_tokens) = found.compacted_to {
                tokens = Some(post_tokens);
                compacted = true;
                meter.observe(
                    &StreamEvent::Compacted {
                        pre_tokens: 0,
                        post_tokens,
                    },
                    std::time::Duration::ZERO,
                );
            }
        }
        Some(Err(e)) if e.kind() != std::io::ErrorKind::NotFound => {
            note = Some(format!("transcript: {e}"));
        }
        _ => {}
    }
    View {
        tokens,
        usable: meter.usable(),
        percent: meter.percent(),
        level: meter.level(),
        compacted,
        item: current_item(root, &config),
        note,
    }
}

fn current_item(root: &Path, config: &Config) -> Option<String> {
    let plan = Project::at(root).plan(config).ok()?;
    if plan.items.is_empty() {
        return None;
    }
    Some(match plan.current() {
        // The agent can edit the plan: its escape sequences stay off the line.
        Some(item) => fit_width(&crate::text::printable(&item.text), ITEM_CHARS),
        None => "plan done".into(),
    })
}

/// The line, with ANSI colours when `color`.
pub(crate) fn render(v: &View, color: bool) -> String {
    let style = |s: Style| if color { s.force_styling(true) } else { s };
    let level_style = style(match v.level {
        Level::L0 => Style::new().green(),
        Level::L1 => Style::new().yellow(),
        Level::L2 => Style::new().color256(208),
        Level::L3 => Style::new().red().bold(),
    });
    let dim = style(Style::new().dim());
    let Some(tokens) = v.tokens else {
        let mut line = format!("[CTX: {} no usage yet]", "░".repeat(BAR));
        push_tail(&mut line, v);
        return dim.apply_to(line).to_string();
    };
    let filled = ((v.percent / 100.0 * BAR as f64).round() as usize).min(BAR);
    let bar = format!("{}{}", "█".repeat(filled), "░".repeat(BAR - filled));
    let marker = match v.level {
        Level::L0 => String::new(),
        Level::L1 => " L1".into(),
        Level::L2 => " ⚠️ L2".into(),
        Level::L3 => " 🛑 L3".into(),
    };
    let head = format!("[CTX: {bar} {:.0}%{marker}]", v.percent);
    let mut tail = format!(" {}/{}", human_tokens(tokens), human_tokens(v.usable));
    if v.compacted {
        tail.push_str(" (compacted)");
    }
    push_tail(&mut tail, v);
    format!("{}{}", level_style.apply_to(head), dim.apply_to(tail))
}

fn push_tail(line: &mut String, v: &View) {
    if let Some(item) = &v.item {
        line.push_str(" · ");
        line.push_str(item);
    }
    if let Some(note) = &v.note {
        line.push_str(" · ");
        line.push_str(&crate::text::printable(note));
    }
}

/// 950 · 12.3k · 137k · 1.2M
fn human_tokens(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..10_000 => format!("{:.1}k", n as f64 / 1e3),
        10_000..1_000_000 => format!("{}k", (n as f64 / 1e3).round()),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// What to print when even the input could not be read.
pub(crate) fn fallback(why: &str) -> String {
    format!("[CTX: ?] {why}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_counts_read_at_a_glance() {
        assert_eq!(human_tokens(950), "950");
        assert_eq!(human_tokens(12_345), "12k");
        assert_eq!(human_tokens(1_234), "1.2k");
        assert_eq!(human_tokens(167_000), "167k");
        assert_eq!(human_tokens(1_500_000), "1.5M");
    }

    #[test]
    fn long_items_are_cut() {
        assert_eq!(fit_width("short", 10), "short");
        assert_eq!(fit_width("a rather long item", 8), "a rathe…");
    }

    #[test]
    fn colour_only_when_asked() {
        let v = View {
            tokens: Some(10_000),
            usable: 167_000,
            percent: 6.0,
            level: Level::L0,
            compacted: false,
            item: None,
            note: None,
        };
        assert!(!render(&v, false).contains('\x1b'));
        assert!(render(&v, true).contains('\x1b'));
    }
}
