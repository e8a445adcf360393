//! The token budget of what ralph writes for the agent: `[prompt]
//! max_tokens` for PROMPT.md and `[handoff] max_tokens` for a handoff.
//! A document is rendered at the most detail ([`Detail::MOST`]) and the
//! detail is stepped down until the estimate fits; [`Stats`] says what each
//! section costs (`ralph prompt --stats`).

use std::path::Path;

use serde::Serialize;

use crate::config::Config;
use crate::config::templates::{PROMPT, Templates};
use crate::context::Level;
use crate::error::Result;
use crate::formats::{FileInProgress, RunState, Trigger};
use crate::plan::Plan;
use crate::plan::decisions;
use crate::prompt::tiers::{self, Detail, HistoryTiers, PlanTiers};
use crate::prompt::tokens;
use crate::text::cut;

/// A document rendered within (or as close as it gets to) its budget.
#[derive(Debug, Clone)]
pub struct Fitted {
    pub text: String,
    pub tokens: usize,
    pub(crate) detail: Detail,
    /// False when even the least detail is over the budget.
    pub fits: bool,
}

/// Render with `render` at the most detail, then less until the text fits
/// `max` tokens; `open_line_costs` are the costs of the plan's one-liners.
pub(crate) fn fit(
    max: usize,
    open_line_costs: &[usize],
    mut render: impl FnMut(&Detail) -> Result<String>,
) -> Result<Fitted> {
    let mut detail = Detail::MOST;
    loop {
        let text = render(&detail)?;
        let tokens = tokens::estimate(&text);
        let fits = tokens <= max;
        let shown = detail.open_lines.min(open_line_costs.len());
        if fits || !detail.shrink(tokens - max, &open_line_costs[..shown]) {
            return Ok(Fitted {
                text,
                tokens,
                detail,
                fits,
            });
        }
    }
}

/// PROMPT.md for `iteration`, tiered to fit `[prompt] max_tokens`.
pub fn render_prompt(
    root: &Path,
    templates: &Templates,
    config: &Config,
    state: &RunState,
    plan: &Plan,
    iteration: u32,
) -> Result<Fitted> {
    let log = decisions::load(root);
    let objective = plan
        .title
        .clone()
        .unwrap_or_else(|| format!("work through {}", config.plan.display()));
    let costs = PlanTiers::open_line_costs(plan);
    fit(config.prompt.max_tokens, &costs, |d| {
        let history = HistoryTiers::new(state, d);
        templates.render(
            PROMPT,
            minijinja::context! {
                iteration => iteration,
                max_iterations => config.loop_.max_iterations,
                items_per_session => config.context.items_per_session,
                objective => &objective,
                plan_file => config.plan.display().to_string(),
                plan => plan.view(),
                plan_tiers => PlanTiers::new(plan, d),
                promise => config.loop_.completion_promise.trim(),
                history => history.recent,
                history_older => history.older,
                resume => resume(state, iteration, d),
                decisions => decisions::view(&log, d.decisions),
                decisions_file => decisions::FILE,
                shard => crate::plan::items::shard_view(state.shard_request.as_ref(), config.context.shard_percent),
                carry_over => &state.carry_over,
                verify => state.verify.as_ref().and_then(|v| crate::formats::verification::view(v, d.verify_lines, config.verify.timeout.0)),
            },
        )
    })
}

/// The resume block's facts while a checkpoint is active.
fn resume(state: &RunState, iteration: u32, d: &Detail) -> Option<minijinja::Value> {
    let cp = &state.context_checkpoint;
    let files = tiers::cap(&cp.files_in_progress, d.files, |f: &FileInProgress| {
        f.path.as_str()
    });
    let left_out = tiers::cap(&cp.left_out, d.files, |p: &String| p.as_str());
    cp.active.then(|| {
        minijinja::context! {
            iteration => state.context_history.iter().rev().find(|h| h.checkpoint).map_or(iteration.saturating_sub(1), |h| h.iteration),
            level => cp.level.map_or("L2", Level::name),
            percent => cp.percent_at_checkpoint.round() as i64,
            handoff_file => cp.handoff_file.as_deref().unwrap_or("(no handoff was written)"),
            current_item => cp.current_todo_item.as_deref().map(|t| cut(t, 400)),
            progress => cp.progress_on_item.as_deref().map(|t| cut(t, 300)),
            files => files.shown,
            files_more => files.summary,
            commit => cp.commit.as_deref().map(|c| &c[..c.len().min(10)]),
            commit_note => &cp.commit_note,
            trigger => cp.trigger.map(Trigger::name),
            label => crate::formats::checkpoint_label(
                cp.trigger.unwrap_or(Trigger::Context),
                cp.level.unwrap_or(Level::L2),
                cp.percent_at_checkpoint,
            ),
            stashed => &cp.stashed,
            left_out => left_out.shown,
            left_out_more => left_out.summary,
        }
    })
}

/// What a document costs, section by section.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DocStats {
    /// The file it is (or will be) written to.
    pub(crate) file: String,
    pub(crate) budget: usize,
    pub(crate) tokens: usize,
    pub(crate) bytes: usize,
    pub(crate) fits: bool,
    pub(crate) sections: Vec<Section>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Section {
    /// The `## ` heading, or "(top)" for the text before the first.
    pub(crate) name: String,
    pub(crate) tokens: usize,
}

impl DocStats {
    pub(crate) fn new(file: &str, text: &str, budget: usize) -> DocStats {
        let tokens = tokens::estimate(text);
        DocStats {
            file: file.to_string(),
            budget,
            tokens,
            bytes: text.len(),
            fits: tokens <= budget,
            sections: sections(text),
        }
    }
}

/// The text split at its `## ` headings (outside code fences).
pub(crate) fn sections(text: &str) -> Vec<Section> {
    let mut out: Vec<(String, String)> = vec![("(top)".into(), String::new())];
    let code = crate::plan::code_lines(text);
    for (i, line) in text.lines().enumerate() {
        if !code[i]
            && let Some(h) = line.strip_prefix("## ")
        {
            out.push((cut(h.trim(), 60), String::new()));
        }
        let body = &mut out.last_mut().expect("one section").1;
        body.push_str(line);
        body.push('\n');
    }
    out.into_iter()
        .filter(|(name, body)| name != "(top)" || !body.trim().is_empty())
        .map(|(name, body)| Section {
            name,
            tokens: tokens::estimate(&body),
        })
        .collect()
}

/// `ralph prompt --stats`: the next prompt and the handoff it points to.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Stats {
    pub(crate) iteration: u32,
    pub(crate) prompt: DocStats,
    /// How much of each list the prompt shows.
    pub(crate) detail: Detail,
    pub(crate) open_items: usize,
    pub(crate) open_items_shown: usize,
    pub(crate) done_items_shown: usize,
    pub(crate) iterations_in_detail: usize,
    pub(crate) decisions_shown: usize,
    /// The handoff the prompt's resume block names, if any.
    pub(crate) handoff: Option<DocStats>,
}

impl Stats {
    pub(crate) fn new(
        root: &Path,
        config: &Config,
        state: &RunState,
        plan: &Plan,
        fitted: &Fitted,
        iteration: u32,
    ) -> Stats {
        let shown = PlanTiers::new(plan, &fitted.detail);
        let handoff = state
            .context_checkpoint
            .active
            .then_some(())
            .and(state.context_checkpoint.handoff_file.as_deref())
            .and_then(|h| {
                let text = std::fs::read_to_string(root.join(h)).ok()?;
                Some(DocStats::new(h, &text, config.handoff.max_tokens))
            });
        Stats {
            iteration,
            prompt: DocStats::new(
                &config.prompt_file.display().to_string(),
                &fitted.text,
                config.prompt.max_tokens,
            ),
            // "All" is the number shown, not usize::MAX.
            detail: Detail {
                open_lines: shown.others.len(),
                ..fitted.detail
            },
            open_items: shown.open_count,
            open_items_shown: shown.full.len() + shown.others.len(),
            done_items_shown: shown.done_recent.len(),
            iterations_in_detail: HistoryTiers::new(state, &fitted.detail).recent.len(),
            decisions_shown: decisions::view(&decisions::load(root), fitted.detail.decisions)
                .map_or(0, |v| v.latest.len()),
            handoff,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::token_budget::{HANDOFF_MAX_TOKENS, PROMPT_MAX_TOKENS};

    #[test]
    fn fit_drops_one_liners_until_the_text_fits() {
        // Long one-liners: the ten shown at most are over the budget.
        let lines: Vec<String> = (0..500)
            .map(|i| format!("- [ ] item number {i}: {}\n", "word ".repeat(150)))
            .collect();
        let costs: Vec<usize> = lines.iter().map(|l| tokens::estimate(l)).collect();
        let f = fit(1000, &costs, |d| {
            Ok(lines.iter().take(d.open_lines).cloned().collect::<String>())
        })
        .unwrap();
        assert!(f.fits);
        assert!(f.detail.open_lines < tiers::OPEN_LINES, "{:?}", f.detail);
        assert!(
            f.tokens <= 1000 && f.tokens > 1000 - costs[0],
            "{}",
            f.tokens
        );
        // Short ones: never more than ten, however much budget is left.
        let f = fit(100_000, &costs, |d| Ok("x".repeat(d.open_lines.min(500)))).unwrap();
        assert_eq!(f.detail.open_lines, tiers::OPEN_LINES);
    }

    #[test]
    fn fit_says_when_nothing_fits() {
        let f = fit(10, &[], |_| Ok("word ".repeat(100))).unwrap();
        assert!(!f.fits);
        assert_eq!(f.detail.iterations, 0);
    }

    #[test]
    fn budgets_are_config_keys_with_defaults_and_a_floor() {
        let c = Config::parse("", Path::new("ralph.toml")).unwrap();
        assert_eq!(c.prompt.max_tokens, PROMPT_MAX_TOKENS);
        assert_eq!(c.handoff.max_tokens, HANDOFF_MAX_TOKENS);
        let c = Config::parse("[prompt]\nmax_tokens = 12000\n", Path::new("ralph.toml")).unwrap();
        assert_eq!(c.prompt.max_tokens, 12_000);
        let e = Config::parse(
            "[loop]\n\n[handoff]\nmax_tokens = 100\n",
            Path::new("ralph.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("`handoff.max_tokens` in ralph.toml:4: 100 is below 500"),
            "{e}"
        );
        let e = Config::parse("[prompt]\nmax_token = 1\n", Path::new("ralph.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ralph.toml:2"), "{e}");
    }

    #[test]
    fn sections_split_at_headings_outside_fences() {
        let s = sections("# Title\nintro\n## One\ntext\n```\n## not a heading\n```\n## Two\n");
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["(top)", "One", "Two"]);
        assert!(s[1].tokens > s[2].tokens);
    }
}
