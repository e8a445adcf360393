//! The report's charts as inline SVG: the context of one iteration, cost
//! per iteration and cumulative; the clock and the figures' short forms
//! every chart uses. The charts of the night against the clock (the
//! timeline, plan progress) are `night.rs`.

use super::model::{IterationRow, MarkKind, RunReport};
use super::svg::{Scale, Shape, Svg, thin, ticks, time_ticks};
use crate::events::terminal::tokens_short;
use crate::formats::IterationOutcome;
use crate::text::format_duration;

/// Turns clock offsets (seconds since the run's start) into local times.
pub(crate) struct Clock {
    start: Option<jiff::Timestamp>,
    tz: jiff::tz::TimeZone,
    format: &'static str,
}

impl Clock {
    /// A clock for a run `span` seconds long: a short one shows seconds.
    pub(crate) fn new(start: Option<&str>, tz: jiff::tz::TimeZone, span: f64) -> Clock {
        Clock {
            start: start.and_then(|s| s.parse().ok()),
            tz,
            format: if span < 600.0 { "%H:%M:%S" } else { "%H:%M" },
        }
    }

    /// Seconds from the start to `at` (RFC 3339): where it sits on a
    /// chart (None without a start, or when `at` is before it or no time).
    pub(crate) fn offset(&self, at: &str) -> Option<f64> {
        let at: jiff::Timestamp = at.parse().ok()?;
        let secs = at.duration_since(self.start?).as_secs_f64();
        (secs >= 0.0).then_some(secs)
    }

    /// The local time `offset` seconds after the start, or `+1h05m` without one.
    pub(crate) fn label(&self, offset: f64) -> String {
        let at = self.start.and_then(|s| {
            s.checked_add(jiff::SignedDuration::from_secs_f64(offset))
                .ok()
        });
        match at {
            Some(t) => t
                .to_zoned(self.tz.clone())
                .strftime(self.format)
                .to_string(),
            None => format!("+{}", duration(offset)),
        }
    }
}

/// `1h05m`, `4m10s`, `12s`; `0.8s` below ten seconds.
pub(crate) fn duration(secs: f64) -> String {
    let tenths = (secs.max(0.0) * 10.0).round() / 10.0;
    match tenths {
        t if t < 10.0 && t.fract() != 0.0 => format!("{t:.1}s"),
        t => format_duration(std::time::Duration::from_secs_f64(t)),
    }
}

/// The CSS class of an iteration's outcome: its colour in every chart.
pub(crate) fn outcome_class(outcome: &IterationOutcome) -> &'static str {
    match outcome {
        IterationOutcome::Checkpoint(..) => "o-cp",
        IterationOutcome::UsageLimit => "o-limit",
        o if o.is_failure() => "o-fail",
        IterationOutcome::Promise => "o-promise",
        _ => "o-done",
    }
}

/// Runs up to this many iterations get a point per turn in each chart.
const DOTS_UP_TO: usize = 100;

pub(super) const PAD_L: f64 = 46.0;
pub(super) const PAD_R: f64 = 56.0;
pub(super) const PAD_T: f64 = 14.0;
pub(super) const PAD_B: f64 = 26.0;

fn mark_style(kind: MarkKind) -> (Shape, &'static str) {
    match kind {
        MarkKind::Nudge => (Shape::Triangle, "m-nudge"),
        MarkKind::Stop => (Shape::Square, "m-stop"),
        MarkKind::Checkpoint => (Shape::Diamond, "m-cp"),
        MarkKind::Compaction => (Shape::Circle, "m-compact"),
    }
}

/// Tokens over the iteration's time, one point per turn, with the L1/L2/L3
/// lines and a marker where ralph nudged, stopped or checkpointed.
pub(crate) fn context_chart(row: &IterationRow, report: &RunReport) -> String {
    let (w, h) = (380.0, 170.0);
    let mut svg = Svg::new(
        w as u32,
        h as u32,
        "chart ctx",
        &format!("context of iteration {}", row.iteration),
    );
    let usable = row.usable_tokens.max(1);
    let top = (usable as f64).max(row.peak_tokens as f64) * 1.04;
    let end = row
        .readings
        .iter()
        .map(|r| r.at)
        .chain(row.marks.iter().map(|m| m.at))
        .fold(row.seconds, f64::max)
        .max(1.0);
    let x = Scale::new((0.0, end), (PAD_L, w - PAD_R));
    let y = Scale::new((0.0, top), (h - PAD_B, PAD_T));
    for t in ticks(top, 4) {
        svg.line((PAD_L, y.at(t)), (w - PAD_R, y.at(t)), "grid");
        svg.text(
            (PAD_L - 6.0, y.at(t) + 4.0),
            "end",
            "ax",
            &tokens_short(t as u64),
        );
    }
    for t in time_ticks(end, 5) {
        svg.text((x.at(t), h - 8.0), "middle", "ax", &duration(t));
    }
    let th = &report.thresholds;
    for (name, pct, class) in [
        ("L1", th.warn, "th th1"),
        ("L2", th.checkpoint, "th th2"),
        ("L3", th.emergency, "th th3"),
    ] {
        let v = usable as f64 * pct / 100.0;
        svg.line((PAD_L, y.at(v)), (w - PAD_R, y.at(v)), class);
        svg.text(
            (w - PAD_R + 4.0, y.at(v) + 4.0),
            "start",
            "thl",
            &format!("{name} {pct:.0}%"),
        );
    }
    let readings = thin(&row.readings, 240, |r| r.tokens as f64);
    if !readings.is_empty() {
        let mut line: Vec<(f64, f64)> = vec![(x.at(0.0), y.at(0.0))];
        line.extend(readings.iter().map(|r| (x.at(r.at), y.at(r.tokens as f64))));
        let mut area = line.clone();
        area.push((line[line.len() - 1].0, y.at(0.0)));
        svg.polygon(&area, "area");
        svg.polyline(&line, "tokens");
        // Every turn a point with its figures, unless the night is long:
        // then the line alone keeps the page a few megabytes.
        let dots = if report.iterations.len() <= DOTS_UP_TO {
            readings.as_slice()
        } else {
            &[]
        };
        for r in dots {
            svg.dot(
                (x.at(r.at), y.at(r.tokens as f64)),
                "pt",
                &format!(
                    "{} tokens, {:.1}% at {}",
                    r.tokens,
                    r.percent,
                    duration(r.at)
                ),
            );
        }
    } else {
        svg.text(
            ((PAD_L + w - PAD_R) / 2.0, h / 2.0),
            "middle",
            "none",
            "no context readings recorded",
        );
    }
    for m in &row.marks {
        let (shape, class) = mark_style(m.kind);
        svg.line(
            (x.at(m.at), PAD_T),
            (x.at(m.at), h - PAD_B),
            &format!("mk {class}"),
        );
        svg.marker((x.at(m.at), PAD_T + 2.0), shape, class, &m.label);
    }
    svg.line((PAD_L, h - PAD_B), (w - PAD_R, h - PAD_B), "axis");
    svg.finish()
}

/// Cost of each iteration (bars) and the running total (line, right axis),
/// with the cost budget when there is one.
pub(crate) fn cost_chart(report: &RunReport) -> String {
    let (w, h) = (540.0, 220.0);
    let mut svg = Svg::new(
        w as u32,
        h as u32,
        "chart cost",
        "cost per iteration and cumulative",
    );
    let rows = &report.iterations;
    let n = rows.len().max(1) as f64;
    let x = Scale::new((0.0, n), (PAD_L, w - PAD_R));
    let each_max = rows
        .iter()
        .map(|r| r.cost_usd)
        .fold(0.0, f64::max)
        .max(0.01)
        * 1.1;
    let total_max = report
        .budgets
        .max_cost_usd
        .unwrap_or(0.0)
        .max(report.cost_usd)
        .max(0.01)
        * 1.05;
    let y = Scale::new((0.0, each_max), (h - PAD_B, PAD_T));
    let y2 = Scale::new((0.0, total_max), (h - PAD_B, PAD_T));
    for t in ticks(each_max, 4) {
        svg.line((PAD_L, y.at(t)), (w - PAD_R, y.at(t)), "grid");
        svg.text((PAD_L - 6.0, y.at(t) + 4.0), "end", "ax", &money(t));
    }
    for t in ticks(total_max, 4) {
        svg.text(
            (w - PAD_R + 6.0, y2.at(t) + 4.0),
            "start",
            "ax cum",
            &money(t),
        );
    }
    let bw = ((w - PAD_L - PAD_R) / n * 0.7).max(0.5);
    let mut line = vec![(x.at(0.0), y2.at(0.0))];
    for (i, r) in rows.iter().enumerate() {
        let cx = x.at(i as f64 + 0.5);
        svg.rect(
            (cx - bw / 2.0, y.at(r.cost_usd)),
            (bw, y.at(0.0) - y.at(r.cost_usd)),
            &format!("bar {}", outcome_class(&r.outcome)),
            &format!(
                "iteration {}: ${:.2} (total ${:.2})",
                r.iteration, r.cost_usd, r.cumulative_cost_usd
            ),
        );
        line.push((x.at(i as f64 + 1.0), y2.at(r.cumulative_cost_usd)));
    }
    svg.polyline(&line, "cumline");
    if let Some(max) = report.budgets.max_cost_usd {
        svg.line((PAD_L, y2.at(max)), (w - PAD_R, y2.at(max)), "budget");
        svg.text(
            (w - PAD_R - 4.0, y2.at(max) - 4.0),
            "end",
            "thl",
            &format!("budget {}", money(max)),
        );
    }
    iteration_axis(&mut svg, &x, rows, h);
    svg.finish()
}

fn iteration_axis(svg: &mut Svg, x: &Scale, rows: &[IterationRow], h: f64) {
    let step = (rows.len() / 10).max(1);
    for (i, r) in rows.iter().enumerate().filter(|(i, _)| i % step == 0) {
        svg.text(
            (x.at(i as f64 + 0.5), h - 8.0),
            "middle",
            "ax",
            &r.iteration.to_string(),
        );
    }
    svg.line((x.at(0.0), h - PAD_B), (x.at(x.max()), h - PAD_B), "axis");
}

pub(crate) fn money(v: f64) -> String {
    if v >= 100.0 {
        format!("${v:.0}")
    } else {
        format!("${v:.2}")
    }
}

/// A commit id as people quote it.
pub(crate) fn short(commit: &str) -> &str {
    commit.get(..8).unwrap_or(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_to_tenths_below_ten_seconds() {
        assert_eq!(duration(0.98), "1s");
        assert_eq!(duration(0.74), "0.7s");
        assert_eq!(duration(0.0), "0s");
        assert_eq!(duration(72.4), "1m12s");
    }

    #[test]
    fn outcomes_have_their_colour() {
        for (text, class) in [
            ("checkpoint (context, L2)", "o-cp"),
            ("usage limit", "o-limit"),
            ("agent did not start: x", "o-fail"),
            ("failed", "o-fail"),
            ("crash", "o-fail"),
            ("promise", "o-promise"),
            ("done", "o-done"),
        ] {
            assert_eq!(outcome_class(&text.into()), class, "{text}");
        }
    }
}
