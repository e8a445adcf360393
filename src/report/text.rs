//! The report on the terminal: a short summary with sparklines, every line
//! within 80 columns.

use std::fmt::Write as _;

use super::charts::{duration, money};
use super::html::headline;
use super::model::RunReport;
use crate::events::terminal::{sparkline, tokens_short};
use crate::text::fit_width;

/// Cells a sparkline may take (the label column is 15 wide).
const SPARK: usize = 40;
/// Iterations listed at the end; the page and `--json` have all of them.
const LAST_ROWS: usize = 12;

pub fn render(r: &RunReport, tz: &jiff::tz::TimeZone) -> String {
    let mut out = String::new();
    let when = r
        .started_at
        .as_deref()
        .and_then(|s| s.parse::<jiff::Timestamp>().ok())
        .map(|t| {
            t.to_zoned(tz.clone())
                .strftime(" · %a %d %b %H:%M")
                .to_string()
        })
        .unwrap_or_default();
    let _ = writeln!(out, "ralph report · run {}{when}", r.run_id);
    let why = r.reason.as_deref().unwrap_or("the run has not ended yet");
    let code = r
        .exit_code
        .map(|c| format!(" (exit {c})"))
        .unwrap_or_default();
    for line in wrap(&format!("{}: {why}{code}", headline(&r.outcome)), 80) {
        let _ = writeln!(out, "{line}");
    }
    let items = match (r.items_done, r.items_open) {
        (Some(d), Some(o)) => format!("items {d}/{} done", d + o),
        _ => "items not recorded".into(),
    };
    let _ = writeln!(
        out,
        "{} · {} · {} iteration(s) · {items} · {} commit(s)",
        duration(r.seconds),
        money(r.cost_usd),
        r.iterations.len(),
        r.story.commit_count()
    );
    for w in &r.quota {
        let _ = writeln!(out, "quota: {}", w.line(str::to_string));
    }
    out.push('\n');
    let m = &r.metrics;
    let peaks: Vec<f64> = r.iterations.iter().map(|i| i.peak_percent).collect();
    if !r.iterations.is_empty() && r.iterations.iter().all(|i| i.not_metered) {
        let _ = writeln!(
            out,
            "{:<15}not metered live (the agent reports usage only when its run ends)",
            "context peaks"
        );
    } else {
        line(
            &mut out,
            "context peaks",
            &peaks,
            &format!(
                "max {:.1}% · median {:.1}%",
                m.peak_percent_max, m.peak_percent_median
            ),
        );
    }
    let costs: Vec<f64> = r.iterations.iter().map(|i| i.cost_usd).collect();
    let per = money(r.cost_usd / r.iterations.len().max(1) as f64);
    let budget = r
        .budgets
        .max_cost_usd
        .map(|b| format!(" · budget {}", money(b)))
        .unwrap_or_default();
    line(
        &mut out,
        "cost",
        &costs,
        &format!("{per} per iteration{budget}"),
    );
    let done: Vec<f64> = r
        .iterations
        .iter()
        .filter_map(|i| {
            Some((i.items_done? as f64) / ((i.items_done? + i.items_open?).max(1) as f64) * 100.0)
        })
        .collect();
    line(
        &mut out,
        "plan done",
        &done,
        &format!(
            "{} checked · {:.2} per context window",
            m.items_checked, m.items_per_context_window
        ),
    );
    let levels: Vec<String> = m
        .checkpoints_by_level
        .iter()
        .map(|(l, n)| format!("{l} {n}"))
        .collect();
    let _ = writeln!(
        out,
        "{:<15}{} ({}) · {} handoff request(s) · {} stop(s)",
        "checkpoints",
        m.checkpoints,
        if levels.is_empty() {
            "none".into()
        } else {
            levels.join(", ")
        },
        m.nudges,
        m.stops
    );
    let _ = writeln!(
        out,
        "{:<15}{} seen · {} tokens lost",
        "compactions",
        m.compactions,
        tokens_short(m.context_lost_tokens)
    );
    let resumes = match m.resumes_completed {
        _ if m.resumes == 0 => "none".to_string(),
        Some(d) => format!(
            "{d} of {} completed their item ({:.0}%)",
            m.resumes,
            100.0 * f64::from(d) / f64::from(m.resumes)
        ),
        None => format!("{} (items not recorded)", m.resumes),
    };
    let _ = writeln!(out, "{:<15}{resumes}", "resumes");
    let _ = writeln!(
        out,
        "{}",
        fit_width(&super::story::verify_text(&r.verify), 80)
    );
    for l in super::changes::changes_text(r) {
        let _ = writeln!(out, "{}", fit_width(&l, 80));
    }
    for line in super::lanes::lanes_text(&r.story.lanes).lines() {
        let _ = writeln!(out, "{}", fit_width(line, 80));
    }
    let _ = writeln!(
        out,
        "{:<15}{} breaker trip(s) · {} usage-limit wait(s), {}",
        "interruptions",
        m.breaker_trips,
        m.limit_waits,
        duration(m.waited_seconds as f64)
    );
    for w in &r.warnings {
        let times = match w.count {
            1 => String::new(),
            n => format!(" ({n}×)"),
        };
        for (i, l) in wrap(&format!("{}{times}", w.message), 65)
            .iter()
            .enumerate()
        {
            let _ = writeln!(out, "{:<15}{l}", if i == 0 { "warning" } else { "" });
        }
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "{:>4}  {:<22} {:>6} {:>7} {:>7}  item",
        "#", "outcome", "peak", "time", "cost"
    );
    let skip = r.iterations.len().saturating_sub(LAST_ROWS);
    if skip > 0 {
        let _ = writeln!(
            out,
            "      … {skip} earlier iteration(s): see the page or --json"
        );
    }
    for i in &r.iterations[skip..] {
        let peak = if i.not_metered {
            "n/m".to_string()
        } else {
            format!("{:.1}%", i.peak_percent)
        };
        let _ = writeln!(
            out,
            "{:>4}  {:<22} {:>6} {:>7} {:>7}  {}",
            i.iteration,
            fit_width(&i.outcome.to_string(), 22),
            peak,
            duration(i.seconds),
            money(i.cost_usd),
            fit_width(
                Some(i.item_label())
                    .filter(|l| !l.is_empty())
                    .as_deref()
                    .unwrap_or("-"),
                27
            )
        );
    }
    let changed = super::changes::iterations_text(r);
    if !changed.is_empty() {
        let _ = writeln!(
            out,
            "\nwhat each iteration changed, and how to reopen its agent session:"
        );
        for l in changed {
            let _ = writeln!(out, "{}", fit_width(&l, 80));
        }
    }
    out
}

/// `label  ▁▃█▅  note`: values scaled to their maximum, at most [`SPARK`]
/// cells (the highest of each group when there are more).
fn line(out: &mut String, label: &str, values: &[f64], note: &str) {
    if values.is_empty() {
        return;
    }
    let groups = super::svg::thin(values, SPARK, |v| *v);
    let top = groups.iter().copied().fold(0.0, f64::max);
    let cells = sparkline(
        groups
            .iter()
            .map(|v| if top > 0.0 { v / top * 100.0 } else { 0.0 }),
    );
    let room = 80usize.saturating_sub(15 + groups.len() + 2);
    let _ = writeln!(out, "{label:<15}{cells}  {}", fit_width(note, room));
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let last = lines.last_mut().expect("one line");
        if !last.is_empty() && last.chars().count() + 1 + word.chars().count() > width {
            lines.push(fit_width(word, width));
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(&fit_width(word, width));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_and_wrap_keep_to_the_width() {
        assert_eq!(fit_width("abcdef", 4), "abc…");
        assert_eq!(fit_width("abc", 4), "abc");
        let long = "word ".repeat(40);
        assert!(wrap(&long, 80).iter().all(|l| l.chars().count() <= 80));
    }
}
