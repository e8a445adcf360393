//! The report as one self-contained HTML page: inline CSS and SVG, no
//! script, no font or image from anywhere (its Content-Security-Policy
//! forbids every load). Written as well-formed XHTML-compatible markup.

use std::fmt::Write as _;

use super::charts::{self, Clock, duration, money, outcome_class, short};
use super::model::{IterationRow, RunReport};
use super::svg::esc;
use crate::events::terminal::tokens_short;

/// How the page refers to the project: `root_href` is the project root
/// relative to the page (`../` for `.ralph/report.html`), for the handoff
/// links; `tz` is the zone its clock times are shown in.
pub struct Page<'a> {
    pub root_href: &'a str,
    pub tz: jiff::tz::TimeZone,
    pub generated_at: &'a str,
}

const STYLE: &str = include_str!("report.css");
/// Marks a page as ralph's: only such a file is overwritten by the next one.
pub(super) const GENERATOR: &str = r#"<meta name="generator" content="ralph"/>"#;

pub fn render(runs: &[RunReport], page: &Page) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let title = match runs {
        [one] => format!("ralph · run {} · {}", one.run_id, headline(&one.outcome)),
        _ => format!("ralph · {} runs", runs.len()),
    };
    let _ = write!(
        out,
        concat!(
            "<!DOCTYPE html>\n",
            r#"<html xmlns="http://www.w3.org/1999/xhtml" lang="en"><head><meta charset="utf-8"/>"#,
            r#"<meta name="viewport" content="width=device-width, initial-scale=1"/>"#,
            "{}",
            r#"<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'"/>"#,
            "<title>{}</title><style>{}</style></head><body>\n"
        ),
        GENERATOR,
        esc(&title),
        STYLE
    );
    if runs.len() > 1 {
        out.push_str(r#"<nav class="runs"><b>Runs</b>"#);
        for r in runs {
            let _ = write!(
                out,
                r##"<a href="#run-{id}">{id} · {}</a>"##,
                esc(&headline(&r.outcome)),
                id = esc(&r.run_id)
            );
        }
        out.push_str("</nav>\n");
    }
    for r in runs {
        run(&mut out, r, page);
    }
    let _ = write!(
        out,
        r#"<footer>Written by ralph {} at {} from .ralph/events.jsonl and .ralph/state.json · <code>ralph report</code></footer></body></html>"#,
        env!("CARGO_PKG_VERSION"),
        esc(page.generated_at)
    );
    out.push('\n');
    out
}

/// "Completed", "Breaker open", …
pub(crate) fn headline(outcome: &str) -> String {
    let text = outcome.replace('_', " ");
    let mut c = text.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

fn run(out: &mut String, r: &RunReport, page: &Page) {
    let clock = Clock::new(r.started_at.as_deref(), page.tz.clone(), r.seconds);
    let tone = match r.outcome.as_str() {
        "completed" => "good",
        "running" | "waiting" => "live",
        "failed" | "breaker_open" | "interrupted" => "bad",
        _ => "warn",
    };
    let _ = write!(
        out,
        r#"<article id="run-{}"><header class="hero {tone}"><div class="kicker">ralph morning report · run {} · {}</div><h1>{}</h1>"#,
        esc(&r.run_id),
        esc(&r.run_id),
        esc(&when(r, page)),
        esc(&headline(&r.outcome))
    );
    let why = match (&r.reason, r.exit_code) {
        (Some(reason), Some(code)) => format!("{reason} (exit {code})"),
        (Some(reason), None) => reason.clone(),
        (None, _) => "the run has not ended yet".into(),
    };
    let _ = write!(out, r#"<p class="why">{}</p>"#, esc(&why));
    if let Some(o) = &r.objective {
        let _ = write!(out, r#"<p class="objective">{}</p>"#, esc(o));
    }
    out.push_str(r#"<div class="cards">"#);
    let items = match (r.items_done, r.items_open) {
        (Some(d), Some(o)) => (format!("{d} / {}", d + o), format!("{o} open")),
        _ => ("?".into(), "not recorded".into()),
    };
    let cards = [
        (
            "Duration",
            duration(r.seconds),
            format!("{} session(s)", r.sessions),
        ),
        ("Cost", money(r.cost_usd), per_iteration(r)),
        (
            "Iterations",
            r.iterations.len().to_string(),
            r.budgets
                .max_iterations
                .map(|m| format!("limit {m} per session"))
                .unwrap_or_default(),
        ),
        ("Items done", items.0, items.1),
        (
            "Commits",
            r.story.commit_count().to_string(),
            r.story.commits_by(),
        ),
        (
            "Peak context",
            format!("{:.1}%", r.metrics.peak_percent_max),
            format!("{} tokens", tokens_short(r.metrics.peak_tokens_max)),
        ),
    ];
    let quota = r.quota.iter().map(|w| {
        (
            if w.window == crate::rules::quota::Window::FiveHour {
                "5-hour quota"
            } else {
                "Weekly quota"
            },
            format!("{:.0}%", w.percent),
            w.line(str::to_string),
        )
    });
    for (name, value, note) in cards.into_iter().chain(quota) {
        let _ = write!(
            out,
            r#"<div class="card"><div class="k">{name}</div><div class="v">{}</div><div class="n">{}</div></div>"#,
            esc(&value),
            esc(&note)
        );
    }
    out.push_str("</div></header>\n");

    section(out, "The night", "timeline");
    out.push_str(&super::night::timeline(r, &clock));
    out.push_str(concat!(
        r#"<div class="legend"><span class="sw o-done"></span>done <span class="sw o-promise"></span>promise "#,
        r#"<span class="sw o-cp"></span>checkpointed <span class="sw o-fail"></span>failed "#,
        r#"<span class="sw o-limit"></span>usage limit <span class="sw wait"></span>waiting for a limit "#,
        r#"<span class="gl m-cp">◆</span>checkpoint <span class="gl m-stop">▲</span>breaker opened "#,
        r#"<span class="gl m-human">◆</span>left to a person"#,
    ));
    if !r.story.lanes.merges.is_empty() {
        out.push_str(concat!(
            r#" <span class="gl m-merge">●</span>merged <span class="gl m-conflict">■</span>conflict, handed back "#,
            r#"<span class="gl m-stop">■</span>merge blocked"#,
        ));
    }
    out.push_str("</div></section>\n");

    out.push_str(r#"<div class="pair">"#);
    section(out, "Cost per iteration and cumulative", "cost");
    out.push_str(&charts::cost_chart(r));
    out.push_str("</section>");
    section(out, "Plan progress", "plan");
    match super::night::plan_chart(r, &clock) {
        Some(svg) => out.push_str(&svg),
        None => {
            out.push_str(r#"<p class="none">This run did not record plan items per iteration.</p>"#)
        }
    }
    out.push_str("</section></div>\n");

    super::changes::changes_html(out, r);
    super::story::verify_html(out, &r.verify);
    super::lanes::lanes_html(out, &r.story.lanes);
    warnings(out, r);
    metrics(out, r);
    contexts(out, r);
    table(out, r, page);
    out.push_str("</article>\n");
}

/// The run's warnings, each distinct one once (none: no section).
fn warnings(out: &mut String, r: &RunReport) {
    if r.warnings.is_empty() {
        return;
    }
    section(out, "Warnings", "warnings");
    out.push_str("<ul>");
    for w in &r.warnings {
        let times = match w.count {
            1 => String::new(),
            n => format!(" ({n}×)"),
        };
        let _ = write!(out, "<li>{}{}</li>", esc(&w.message), esc(&times));
    }
    out.push_str("</ul></section>\n");
}

fn section(out: &mut String, title: &str, class: &str) {
    let _ = write!(out, r#"<section class="{class}"><h2>{}</h2>"#, esc(title));
}

fn when(r: &RunReport, page: &Page) -> String {
    r.started_at
        .as_deref()
        .and_then(|s| s.parse::<jiff::Timestamp>().ok())
        .map(|t| {
            t.to_zoned(page.tz.clone())
                .strftime("%a %d %b %Y, %H:%M")
                .to_string()
        })
        .unwrap_or_default()
}

fn per_iteration(r: &RunReport) -> String {
    match r.iterations.len() {
        0 => String::new(),
        n => format!("{} per iteration", money(r.cost_usd / n as f64)),
    }
}

fn metrics(out: &mut String, r: &RunReport) {
    let m = &r.metrics;
    section(out, "How the loop did", "metrics");
    let levels = if m.checkpoints_by_level.is_empty() {
        "none".to_string()
    } else {
        m.checkpoints_by_level
            .iter()
            .map(|(l, n)| format!("{l} {n}"))
            .collect::<Vec<_>>()
            .join(" · ")
    };
    let resumes = match m.resumes_completed {
        Some(done) if m.resumes > 0 => format!(
            "{done} of {} ({:.0}%)",
            m.resumes,
            100.0 * f64::from(done) / f64::from(m.resumes)
        ),
        _ if m.resumes == 0 => "no resumes".into(),
        _ => format!("{} resumes, items not recorded", m.resumes),
    };
    let rows = [
        (
            "Checkpoints by level",
            format!("{} ({levels})", m.checkpoints),
        ),
        (
            "Handoff requests · stops",
            format!("{} · {}", m.nudges, m.stops),
        ),
        (
            "Compactions seen",
            format!(
                "{} ({} tokens lost)",
                m.compactions,
                tokens_short(m.context_lost_tokens)
            ),
        ),
        ("Resumes that completed their item", resumes),
        (
            "Items per iteration",
            format!("{:.2} ({} checked)", m.items_per_iteration, m.items_checked),
        ),
        (
            "Items per context window",
            format!("{:.2} (per agent session)", m.items_per_context_window),
        ),
        (
            "Context peaks: max · median",
            format!("{:.1}% · {:.1}%", m.peak_percent_max, m.peak_percent_median),
        ),
        ("Breaker trips", m.breaker_trips.to_string()),
        (
            "Usage-limit waits",
            format!("{} ({})", m.limit_waits, duration(m.waited_seconds as f64)),
        ),
    ];
    out.push_str("<dl>");
    for (k, v) in rows {
        let _ = write!(out, "<div><dt>{}</dt><dd>{}</dd></div>", esc(k), esc(&v));
    }
    out.push_str("</dl></section>\n");
}

fn contexts(out: &mut String, r: &RunReport) {
    section(out, "Context per iteration", "contexts");
    out.push_str(concat!(
        r#"<div class="legend"><span class="sw tok"></span>tokens after each turn "#,
        r#"<span class="ln th1"></span>L1 warn <span class="ln th2"></span>L2 checkpoint <span class="ln th3"></span>L3 emergency "#,
        r#"<span class="gl m-nudge">▲</span>asked for handoff <span class="gl m-stop">■</span>stopped "#,
        r#"<span class="gl m-cp">◆</span>checkpointed <span class="gl m-compact">●</span>compacted</div>"#
    ));
    // A long night: the charts are there, folded, so the page opens fast.
    let fold = r.iterations.len() > 24;
    if fold {
        let _ = write!(
            out,
            "<details><summary>{} charts</summary>",
            r.iterations.len()
        );
    }
    out.push_str(r#"<div class="ctxgrid">"#);
    for row in &r.iterations {
        let _ = write!(
            out,
            r#"<figure id="{}"><figcaption><b>#{}</b> <span class="pill {}">{}</span> peak {:.1}%<span class="item">{}</span></figcaption>"#,
            anchor(r, row),
            row.iteration,
            outcome_class(&row.outcome),
            esc(&row.outcome.to_string()),
            row.peak_percent,
            esc(&row.item_label())
        );
        out.push_str(&charts::context_chart(row, r));
        out.push_str("</figure>");
    }
    out.push_str("</div>");
    if fold {
        out.push_str("</details>");
    }
    out.push_str("</section>\n");
}

fn table(out: &mut String, r: &RunReport, page: &Page) {
    section(out, "Iterations", "iterations");
    out.push_str(concat!(
        "<table><thead><tr><th>#</th><th>item</th><th>outcome</th><th>started</th><th>time</th>",
        "<th>peak</th><th>trigger</th><th>cost</th><th>handoff</th><th>commit</th></tr></thead><tbody>"
    ));
    let clock = Clock::new(r.started_at.as_deref(), page.tz.clone(), r.seconds);
    for row in &r.iterations {
        cells(out, &anchor(r, row), row, &clock, page);
    }
    out.push_str("</tbody></table></section>\n");
}

/// The id of an iteration's chart, unique on a page of several runs.
fn anchor(r: &RunReport, row: &IterationRow) -> String {
    esc(&format!("ctx-{}-{}", r.run_id, row.iteration))
}

fn cells(out: &mut String, anchor: &str, row: &IterationRow, clock: &Clock, page: &Page) {
    let checked = if row.items_checked.is_empty() {
        String::new()
    } else {
        format!(r#" <span class="ok">✓ {}</span>"#, row.items_checked.len())
    };
    let handoff = row.handoff.as_deref().map_or(String::new(), |h| {
        let name = h.rsplit('/').next().unwrap_or(h);
        format!(
            r#"<a href="{}{}">{}</a>"#,
            esc(page.root_href),
            esc(h),
            esc(name)
        )
    });
    let commit = row.commit.as_deref().map_or(String::new(), |c| {
        format!(r#"<code title="{}">{}</code>"#, esc(c), esc(short(c)))
    });
    let trigger = match (&row.trigger, row.level) {
        (Some(t), Some(l)) => format!("{t} ({l})"),
        (Some(t), None) => t.clone(),
        _ => String::new(),
    };
    let _ = write!(
        out,
        concat!(
            r##"<tr><td><a href="#{anchor}">{n}</a></td><td class="item">{}{}</td>"##,
            r#"<td><span class="pill {}">{}</span></td><td>{}</td><td>{}</td>"#,
            r#"<td class="num">{:.1}%</td><td>{}</td><td class="num">{}</td><td>{}</td><td>{}</td></tr>"#
        ),
        esc(&row.item_label()),
        checked,
        outcome_class(&row.outcome),
        esc(&row.outcome.to_string()),
        row.start_offset.map(|o| clock.label(o)).unwrap_or_default(),
        duration(row.seconds),
        row.peak_percent,
        esc(&trigger),
        money(row.cost_usd),
        handoff,
        commit,
        n = row.iteration,
        anchor = anchor,
    );
}
