//! The charts of the night against the clock, as inline SVG: the timeline
//! (a lane per loop — the single loop, or each worker or fleet machine —
//! with its iterations as bars, the merge queue, what was left to a
//! person, checkpoints, usage-limit waits, breaker changes, the time
//! budget) and the plan's progress (per iteration for a single loop, per
//! item merged for a parallel run). Pure: a report in, markup out.

use super::charts::{Clock, PAD_B, PAD_L, PAD_R, PAD_T, duration, outcome_class, short};
use super::model::RunReport;
use super::svg::{Scale, Shape, Svg, ticks, time_ticks};
use crate::formats::Merged;

/// The loops of a run, as the timeline's lanes: the single loop's one
/// (`None`), or one per worker (or fleet machine), in name order.
fn lanes(report: &RunReport) -> Vec<Option<&str>> {
    let mut lanes: Vec<Option<&str>> = report
        .iterations
        .iter()
        .map(|r| r.worker.as_deref())
        .chain(
            report
                .story
                .lanes
                .workers
                .iter()
                .map(|l| Some(l.worker.as_str())),
        )
        .collect();
    lanes.sort();
    lanes.dedup();
    if lanes.is_empty() {
        lanes.push(None);
    }
    lanes
}

/// A merge's marker: its shape, class and what happened, as people say it.
fn merge_style(m: &Merged) -> (Shape, &'static str, &'static str) {
    match m {
        Merged::Conflict { .. } => (Shape::Square, "m-conflict", "conflict: handed back"),
        Merged::Blocked { .. } => (Shape::Square, "m-stop", "blocked"),
        Merged::AlreadyMerged => (Shape::Circle, "m-merge", "already merged"),
        Merged::FastForward { .. } => (Shape::Circle, "m-merge", "merged (fast-forward)"),
        Merged::MergeCommit { .. } => (Shape::Circle, "m-merge", "merged"),
    }
}

/// Height of a lane of the timeline, and of its bars.
const LANE: f64 = 30.0;
const BAR: f64 = 24.0;

/// The night: a lane per loop with its iterations as bars (a parallel
/// run's workers side by side, as they ran), the merge queue (each merge,
/// each conflict handed back), checkpoints, usage-limit waits, breaker
/// changes, what was left to a person, and the time budget against the
/// clock.
pub(crate) fn timeline(report: &RunReport, clock: &Clock) -> String {
    let lanes = lanes(report);
    let merges = &report.story.lanes.merges;
    let parallel = lanes.iter().any(Option::is_some) || !merges.is_empty();
    let mut rows: Vec<(String, f64)> = Vec::new();
    let mut y = 18.0;
    for lane in &lanes {
        let name = lane.map_or("iterations".to_string(), |l| {
            crate::text::fit_width(&crate::text::printable(l), 10)
        });
        rows.push((name, y));
        y += LANE;
    }
    let mut row = |name: &str, rows: &mut Vec<(String, f64)>| {
        rows.push((name.to_string(), y));
        y += LANE;
        y - LANE
    };
    let merge_row = parallel.then(|| row("merges", &mut rows));
    let human_row = (!report.needs_human.is_empty()).then(|| row("to a person", &mut rows));
    let limits_row = y;
    let breaker_row = y + LANE;
    rows.push(("limits".into(), limits_row));
    rows.push(("breaker".into(), breaker_row));
    let w = 1100.0;
    let h = breaker_row + LANE + 30.0;
    let mut svg = Svg::new(w as u32, h as u32, "chart timeline", "timeline of the run");
    let span = report
        .iterations
        .iter()
        .filter_map(|r| r.end_offset)
        .chain(
            report
                .waits
                .iter()
                .filter_map(|w| w.offset.map(|o| o + w.seconds as f64)),
        )
        .chain(merges.iter().filter_map(|m| clock.offset(&m.at)))
        .fold(report.seconds, f64::max)
        .max(1.0);
    let x = Scale::new((0.0, span), (PAD_L + 44.0, w - 20.0));
    for (name, ry) in &rows {
        svg.text((PAD_L + 36.0, ry + 17.0), "end", "ax lane", name);
        svg.line(
            (x.at(0.0), ry + BAR + 2.0),
            (w - 20.0, ry + BAR + 2.0),
            "grid",
        );
    }
    for t in time_ticks(span, 10) {
        svg.line((x.at(t), 14.0), (x.at(t), h - 28.0), "grid");
        svg.text((x.at(t), h - 10.0), "middle", "ax", &clock.label(t));
    }
    for r in &report.iterations {
        let (Some(s), Some(e)) = (r.start_offset, r.end_offset) else {
            continue;
        };
        let lane = lanes.iter().position(|l| *l == r.worker.as_deref());
        let bar_y = rows[lane.unwrap_or(0)].1;
        let tip = format!(
            "iteration {}: {} · {} · peak {:.1}% · ${:.2}{}{}",
            r.iteration,
            r.outcome,
            duration(e - s),
            r.peak_percent,
            r.cost_usd,
            Some(r.item_label())
                .filter(|l| !l.is_empty())
                .map(|l| format!(" · {l}"))
                .unwrap_or_default(),
            r.story
                .session_id
                .as_deref()
                .map(|id| format!(" · session {id}"))
                .unwrap_or_default()
        );
        let class = format!("bar {}", outcome_class(&r.outcome));
        svg.rect((x.at(s), bar_y), (x.at(e) - x.at(s), BAR), &class, &tip);
        if x.at(e) - x.at(s) > 22.0 {
            svg.text(
                ((x.at(s) + x.at(e)) / 2.0, bar_y + 16.0),
                "middle",
                "barl",
                &r.iteration.to_string(),
            );
        }
        if let Some(level) = r.level.filter(|_| r.trigger.is_some()) {
            svg.marker(
                (x.at(e), bar_y - 3.0),
                Shape::Diamond,
                "m-cp",
                &format!(
                    "checkpoint after iteration {} ({}, {level}){}",
                    r.iteration,
                    r.trigger.as_deref().unwrap_or(""),
                    r.commit
                        .as_deref()
                        .map(|c| format!(", commit {}", short(c)))
                        .unwrap_or_default()
                ),
            );
        }
    }
    if let Some(row) = merge_row {
        for m in merges {
            let Some(o) = clock.offset(&m.at) else {
                continue;
            };
            let (shape, class, what) = merge_style(&m.merged);
            let tip = format!(
                "{} \"{}\" (attempt {}): {what} at {}",
                m.worker,
                crate::text::printable(&m.item),
                m.attempt,
                clock.label(o)
            );
            svg.marker((x.at(o), row + 13.0), shape, class, &tip);
        }
    }
    for wt in &report.waits {
        let Some(o) = wt.offset else { continue };
        let tip = format!(
            "waited {} for the usage limit ({}), until {}",
            duration(wt.seconds as f64),
            wt.source,
            wt.until
        );
        let x0 = x.at(o);
        svg.rect(
            (x0, limits_row + 4.0),
            (x.at(o + wt.seconds as f64) - x0, 18.0),
            "wait",
            &tip,
        );
    }
    for b in &report.breaker {
        let Some(o) = b.offset else { continue };
        let class = if b.status == "open" { "m-stop" } else { "m-ok" };
        let tip = format!("breaker {}: {}", b.status, b.message);
        svg.marker((x.at(o), breaker_row + 13.0), Shape::Triangle, class, &tip);
    }
    for (n, row) in report.needs_human.iter().zip(human_row.into_iter().cycle()) {
        let Some(o) = n.offset else { continue };
        let tip = format!(
            "left to a person ({}): {}",
            n.reason,
            crate::text::printable(&n.message)
        );
        svg.marker((x.at(o), row + 13.0), Shape::Diamond, "m-human", &tip);
    }
    // Where the run's time was up: the deadline its start recorded, or
    // (an older log) max_duration from the start.
    let time_up = match &report.budgets.deadline {
        Some(at) => clock.offset(at).map(|o| (o, "deadline")),
        None => report
            .budgets
            .max_duration_secs
            .map(|m| (m, "max_duration")),
    };
    if let Some((at, label)) = time_up.filter(|(at, _)| (0.0..=span).contains(at)) {
        svg.line((x.at(at), 10.0), (x.at(at), h - 28.0), "budget");
        svg.text((x.at(at) - 4.0, 10.0), "end", "thl", label);
    }
    svg.finish()
}

/// A step of the plan's progress: when, items done and open after it,
/// and what it checked off.
struct Step {
    at: f64,
    done: usize,
    open: usize,
    items: Vec<String>,
}

/// The plan's progress: items done at the start, then a step for each
/// iteration that recorded its plan (a single loop), or for each item
/// merged (a parallel run: an item is done when the queue merged it and
/// the coordinator checked it off; its workers' plans are their own).
fn plan_steps(report: &RunReport, clock: &Clock) -> Option<(usize, Vec<Step>)> {
    let merged: Vec<(f64, &str)> = (report.story.lanes.merges.iter())
        .filter(|m| !matches!(m.merged, Merged::Conflict { .. } | Merged::Blocked { .. }))
        .filter_map(|m| Some((clock.offset(&m.at)?, m.item.as_str())))
        .collect();
    if !merged.is_empty() {
        let total = report.items_done? + report.items_open?;
        let start = report.items_done?.saturating_sub(merged.len());
        let steps = (merged.iter().enumerate())
            .map(|(i, (at, item))| Step {
                at: *at,
                done: (start + i + 1).min(total),
                open: total.saturating_sub(start + i + 1),
                items: vec![item.to_string()],
            })
            .collect();
        return Some((start, steps));
    }
    let steps: Vec<Step> = (report.iterations.iter())
        .filter_map(|r| {
            Some(Step {
                at: r.end_offset?,
                done: r.items_done?,
                open: r.items_open?,
                items: r.items_checked.clone(),
            })
        })
        .collect();
    let first = report.iterations.first()?;
    // Before the first iteration: what it found done.
    let start = steps
        .first()?
        .done
        .saturating_sub(first.items_checked.len());
    Some((start, steps))
}

/// Plan items done over the night, against the clock.
pub(crate) fn plan_chart(report: &RunReport, clock: &Clock) -> Option<String> {
    let (start_done, steps) = plan_steps(report, clock)?;
    let (w, h) = (540.0, 220.0);
    let mut svg = Svg::new(w as u32, h as u32, "chart plan", "plan progress over time");
    let total = steps
        .iter()
        .map(|p| p.done + p.open)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let span = steps
        .iter()
        .map(|p| p.at)
        .fold(report.seconds, f64::max)
        .max(1.0);
    let x = Scale::new((0.0, span), (PAD_L, w - PAD_R));
    let y = Scale::new((0.0, total * 1.08), (h - PAD_B, PAD_T));
    for t in ticks(total, 4).into_iter().filter(|t| t.fract() == 0.0) {
        svg.line((PAD_L, y.at(t)), (w - PAD_R, y.at(t)), "grid");
        svg.text((PAD_L - 6.0, y.at(t) + 4.0), "end", "ax", &format!("{t}"));
    }
    for t in time_ticks(span, 5) {
        svg.text((x.at(t), h - 8.0), "middle", "ax", &clock.label(t));
    }
    svg.line((PAD_L, y.at(total)), (w - PAD_R, y.at(total)), "th th2");
    svg.text(
        (w - PAD_R + 4.0, y.at(total) + 4.0),
        "start",
        "thl",
        &format!("{total} items"),
    );
    let mut line = vec![(x.at(0.0), y.at(start_done as f64))];
    let mut last = start_done as f64;
    for p in &steps {
        line.push((x.at(p.at), y.at(last)));
        line.push((x.at(p.at), y.at(p.done as f64)));
        last = p.done as f64;
        let items: Vec<String> = (p.items.iter())
            .map(|i| format!("\"{}\"", crate::text::printable(i)))
            .collect();
        svg.dot(
            (x.at(p.at), y.at(p.done as f64)),
            "pt",
            &format!(
                "{} done, {} open at {}{}",
                p.done,
                p.open,
                clock.label(p.at),
                match items.as_slice() {
                    [] => String::new(),
                    _ => format!(": {}", items.join(", ")),
                }
            ),
        );
    }
    line.push((x.at(span), y.at(last)));
    let mut area = line.clone();
    area.push((x.at(span), y.at(0.0)));
    area.push((x.at(0.0), y.at(0.0)));
    svg.polygon(&area, "area plan");
    svg.polyline(&line, "tokens plan");
    svg.line((PAD_L, h - PAD_B), (w - PAD_R, h - PAD_B), "axis");
    Some(svg.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three workers at once, as the run's log holds them: a merge, a
    /// conflict handed back and merged on the second attempt, an item
    /// left to a person.
    const PARALLEL: &str = r#"{"ts":"2026-11-27T07:00:00Z","event":"run_started","run_id":"r","resumed":false,"first_iteration":1,"max_iterations":50,"plan":"fix_plan.md","pid":1,"deadline":"2026-11-27T07:01:30Z"}
{"ts":"2026-11-27T07:00:01Z","worker":"w1","event":"worker_started","item":"alpha","task":"item","branch":"b1","worktree":"w"}
{"ts":"2026-11-27T07:00:01Z","worker":"w2","event":"worker_started","item":"bravo","task":"item","branch":"b2","worktree":"w"}
{"ts":"2026-11-27T07:00:01Z","worker":"w3","event":"worker_started","item":"charlie","task":"item","branch":"b3","worktree":"w"}
{"ts":"2026-11-27T07:00:01Z","worker":"w1","event":"run_started","run_id":"l1","resumed":false,"first_iteration":1,"max_iterations":50,"plan":"p","pid":2}
{"ts":"2026-11-27T07:00:01Z","worker":"w2","event":"run_started","run_id":"l2","resumed":false,"first_iteration":1,"max_iterations":50,"plan":"p","pid":3}
{"ts":"2026-11-27T07:00:01Z","worker":"w3","event":"run_started","run_id":"l3","resumed":false,"first_iteration":1,"max_iterations":50,"plan":"p","pid":4}
{"ts":"2026-11-27T07:00:02Z","worker":"w1","event":"iteration_started","iteration":1,"command":[],"transcript":"t","resume_from":null}
{"ts":"2026-11-27T07:00:02Z","worker":"w2","event":"iteration_started","iteration":1,"command":[],"transcript":"t","resume_from":null}
{"ts":"2026-11-27T07:00:03Z","worker":"w3","event":"iteration_started","iteration":1,"command":[],"transcript":"t","resume_from":null}
{"ts":"2026-11-27T07:00:40Z","worker":"w1","event":"iteration_ended","iteration":1,"outcome":"promise","progress":true,"cost_usd":0.5,"peak_percent":30.0,"seconds":38.0,"error":null,"invalid_lines":0,"skipped_lines":0,"session_id":"s-one"}
{"ts":"2026-11-27T07:00:41Z","worker":"w1","event":"merge","item":"alpha","branch":"b1","attempt":1,"outcome":"fast_forward","from":"a","to":"b","backup":null}
{"ts":"2026-11-27T07:00:50Z","worker":"w2","event":"iteration_ended","iteration":1,"outcome":"promise","progress":true,"cost_usd":0.5,"peak_percent":30.0,"seconds":48.0,"error":null,"invalid_lines":0,"skipped_lines":0}
{"ts":"2026-11-27T07:00:51Z","worker":"w2","event":"merge","item":"bravo","branch":"b2","attempt":1,"outcome":"conflict","files":["x"],"backup":null}
{"ts":"2026-11-27T07:00:55Z","worker":"w3","event":"iteration_ended","iteration":1,"outcome":"failed","progress":false,"cost_usd":0.5,"peak_percent":30.0,"seconds":52.0,"error":"x","invalid_lines":0,"skipped_lines":0}
{"ts":"2026-11-27T07:00:56Z","event":"needs_human","iteration":3,"reason":"verify_failing","message":"w3 (\"charlie\"): left"}
{"ts":"2026-11-27T07:00:57Z","worker":"w2","event":"iteration_started","iteration":2,"command":[],"transcript":"t","resume_from":null}
{"ts":"2026-11-27T07:01:10Z","worker":"w2","event":"iteration_ended","iteration":2,"outcome":"promise","progress":true,"cost_usd":0.5,"peak_percent":30.0,"seconds":13.0,"error":null,"invalid_lines":0,"skipped_lines":0}
{"ts":"2026-11-27T07:01:11Z","worker":"w2","event":"merge","item":"bravo","branch":"b2","attempt":2,"outcome":"merge_commit","from":"a","id":"c","backup":null}
{"ts":"2026-11-27T07:01:40Z","event":"run_ended","outcome":"stopped","exit_code":6,"reason":"r","iterations":4,"cost_usd":2.0}
"#;

    fn parallel_report() -> RunReport {
        let records: Vec<crate::formats::Record> = PARALLEL
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        let mut report = super::super::gather::build(
            "r",
            &records,
            None,
            crate::context::Thresholds::DEFAULT,
            super::super::Budgets::default(),
        );
        report.story.lanes = super::super::lanes::Lanes::of("r", &records);
        report.items_done = Some(2);
        report.items_open = Some(1);
        report
    }

    /// Each `<tag class="…class…" … attr="v">` of `svg`: the value of `attr`.
    fn attrs<'a>(svg: &'a str, tag: &str, class: &str, attr: &str) -> Vec<&'a str> {
        svg.split(&format!("<{tag} class=\""))
            .skip(1)
            .filter(|e| e.split('"').next().unwrap().contains(class))
            .map(|e| {
                let at = e.find(&format!(" {attr}=\"")).unwrap() + attr.len() + 3;
                e[at..].split('"').next().unwrap()
            })
            .collect()
    }

    #[test]
    fn a_parallel_run_has_a_lane_per_worker_and_its_merges_on_the_timeline() {
        let report = parallel_report();
        let clock = Clock::new(report.started_at.as_deref(), jiff::tz::TimeZone::UTC, 100.0);
        let svg = timeline(&report, &clock);
        // The workers' concurrent iterations each in their worker's lane.
        let ys = attrs(&svg, "rect", "bar", "y");
        assert_eq!(ys.len(), 4, "{svg}");
        let lane_of = |iteration: usize| ys[iteration - 1];
        // 1: w1, 2: w2, 3: w3 (in the order they started), 4: w2 again.
        assert_ne!(lane_of(1), lane_of(2));
        assert_ne!(lane_of(2), lane_of(3));
        assert_ne!(lane_of(1), lane_of(3));
        assert_eq!(lane_of(2), lane_of(4));
        for name in [
            ">w1<",
            ">w2<",
            ">w3<",
            ">merges<",
            ">to a person<",
            ">limits<",
            ">breaker<",
        ] {
            assert!(svg.contains(name), "{name}: {svg}");
        }
        // Two merges and a conflict handed back, in the merge queue's row,
        // at their times; what was left to a person in a row of its own.
        let merged = attrs(&svg, "path", "m-merge", "d");
        assert_eq!(merged.len(), 2, "{svg}");
        assert_eq!(attrs(&svg, "path", "m-conflict", "d").len(), 1, "{svg}");
        assert_eq!(attrs(&svg, "path", "m-human", "d").len(), 1, "{svg}");
        assert!(
            svg.contains("bravo&quot; (attempt 1): conflict: handed back at 07:00:51"),
            "{svg}"
        );
        assert!(svg.contains("left to a person (verify_failing)"), "{svg}");
        // The merges come after the bars they merged.
        let x_of = |d: &str| d[1..].split(' ').next().unwrap().parse::<f64>().unwrap();
        let bar_ends: Vec<f64> = attrs(&svg, "rect", "bar", "x")
            .iter()
            .zip(attrs(&svg, "rect", "bar", "width"))
            .map(|(x, w)| x.parse::<f64>().unwrap() + w.parse::<f64>().unwrap())
            .collect();
        assert!(x_of(merged[0]) > bar_ends[0], "{svg}");
        // The session of each row, in its tip; the deadline its start said.
        assert!(svg.contains("session s-one"), "{svg}");
        assert!(svg.contains(">deadline<"), "{svg}");
    }

    #[test]
    fn a_parallel_runs_plan_progress_is_its_merges() {
        let report = parallel_report();
        let clock = Clock::new(report.started_at.as_deref(), jiff::tz::TimeZone::UTC, 100.0);
        let svg = plan_chart(&report, &clock).expect("a plan chart");
        // Two items merged (the conflict is no progress), of three.
        let tips: Vec<&str> = svg
            .split("<title>")
            .skip(1)
            .map(|t| t.split('<').next().unwrap())
            .collect();
        assert_eq!(
            tips,
            [
                "1 done, 2 open at 07:00:41: &quot;alpha&quot;",
                "2 done, 1 open at 07:01:11: &quot;bravo&quot;"
            ],
            "{svg}"
        );
        assert!(svg.contains(">3 items<"), "{svg}");
    }
}
