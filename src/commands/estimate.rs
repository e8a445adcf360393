//! An item's estimate as people and scripts see it: `ralph context`'s
//! "item" block and `ralph context --estimate [ITEM]` (does it fit in what
//! is left of this window, in a fresh one, or should it be split).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::Report;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::events::terminal::tokens_short;
use crate::formats::Confidence;
use crate::formats::{Layout, RunState};
use crate::plan::Plan;
use crate::plan::estimate::{Basis, Estimate, Fit, fit};
use crate::plan::items::{self, checkpoint_at};

/// What a fresh Claude Code session holds before any work: system prompt,
/// tools, CLAUDE.md and the prompt (about 20k tokens in the recorded
/// transcripts). An item's own cost is its climb above this.
pub(crate) const SESSION_BASE: u64 = 20_000;

/// One item's estimate and what it means now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ItemEstimate {
    pub(crate) item: String,
    /// Estimated context tokens.
    pub(crate) tokens: u64,
    /// Tokens to have in hand, margin included.
    pub(crate) needed: u64,
    pub(crate) confidence: Confidence,
    pub(crate) basis: Basis,
    pub(crate) similar: usize,
    pub(crate) named_tokens: u64,
    pub(crate) correction: f64,
    /// Percent of the usable window the estimate is.
    pub(crate) percent: f64,
    /// Tokens left before the checkpoint now (a fresh window's when no
    /// iteration is running).
    pub(crate) remaining: u64,
    /// What a fresh window offers before its checkpoint.
    pub(crate) fresh: u64,
    /// `fits`, `fresh_window` or `split`.
    pub(crate) fit: Fit,
    pub(crate) advice: String,
}

impl ItemEstimate {
    /// `occupancy`: the running iteration's latest reading, if any.
    pub(crate) fn of(
        root: &Path,
        config: &Config,
        state: &RunState,
        plan: Option<&Plan>,
        item: &str,
        occupancy: Option<u64>,
    ) -> ItemEstimate {
        let usable = usable(config, state);
        let c = &config.context;
        let e = estimate_of(root, config, state, plan, item, usable);
        let at = checkpoint_at(usable, c.checkpoint_percent, c.checkpoint_tokens);
        let fresh = at.saturating_sub(SESSION_BASE);
        let remaining = occupancy.map_or(fresh, |o| at.saturating_sub(o));
        let shard_at = (usable as f64 * c.shard_percent / 100.0) as u64;
        let fit = fit(&e, remaining, fresh, shard_at);
        let advice = match fit {
            Fit::Fits => format!(
                "fits: needs about {} of the {} {} before the checkpoint",
                tokens_short(e.needed()),
                tokens_short(remaining),
                if occupancy.is_some() {
                    "left"
                } else {
                    "of a fresh window"
                }
            ),
            Fit::FreshWindow => format!(
                "needs about {}, more than the {} left; it fits in a fresh window ({}): best done in a fresh session",
                tokens_short(e.needed()),
                tokens_short(remaining),
                tokens_short(fresh)
            ),
            Fit::Split => format!(
                "too big for one window: split it into indented sub-items (estimate above {}% of the window, or above a fresh window's {})",
                c.shard_percent,
                tokens_short(fresh)
            ),
        };
        ItemEstimate {
            item: item.to_string(),
            tokens: e.tokens,
            needed: e.needed(),
            confidence: e.confidence,
            basis: e.basis,
            similar: e.similar,
            named_tokens: e.named_tokens,
            correction: e.correction,
            percent: crate::context::round1(e.tokens as f64 * 100.0 / usable.max(1) as f64),
            remaining,
            fresh,
            fit,
            advice,
        }
    }

    /// The lines `ralph context` and `--estimate` print.
    pub(crate) fn lines(&self) -> String {
        let basis = match self.basis {
            Basis::Similar => format!("{} similar finished item(s)", self.similar),
            Basis::NamedFiles => {
                format!("prior + {} of named files", tokens_short(self.named_tokens))
            }
            Basis::Prior => "prior (nothing known yet)".into(),
        };
        let correction = if self.correction == 1.0 {
            String::new()
        } else {
            format!(", corrected ×{:.2}", self.correction)
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "estimate  ~{} ({:.1}% of the window) · {} confidence · from {basis}{correction}",
            tokens_short(self.tokens),
            self.percent,
            self.confidence.name()
        );
        let _ = writeln!(out, "fit       {}", self.advice);
        out
    }
}

impl Report for ItemEstimate {
    fn human(&self) -> String {
        format!("item      {}\n{}", self.item, self.lines())
    }
}

/// `item`'s estimate against this run's and earlier runs' finished items.
fn estimate_of(
    root: &Path,
    config: &Config,
    state: &RunState,
    plan: Option<&Plan>,
    item: &str,
    usable: u64,
) -> Estimate {
    let history = items::history(items::read_ledger(&Layout::new(root).items()), &state.items);
    let prior = (usable as f64 * config.context.estimate_prior_percent / 100.0) as u64;
    items::estimate_item(root, plan, item, &history, prior, usable)
}

/// The usable window the next session is metered on: the live meter's own
/// choice (the configured window, the agent kind's, the model's as
/// results told it), so the estimate and the checkpoint agree.
fn usable(config: &Config, state: &RunState) -> u64 {
    crate::supervisor::meter(config, state).usable()
}

/// `ralph context --estimate [ITEM]`: the named item, or the plan's current one.
pub(crate) fn estimate(
    root: &Path,
    config: &Config,
    state: &RunState,
    plan: Option<&Plan>,
    item: Option<&str>,
    occupancy: Option<u64>,
) -> Result<ItemEstimate> {
    let item = match item {
        Some(i) => i.to_string(),
        None => plan
            .and_then(|p| p.current().map(|i| i.text.clone()))
            .ok_or_else(|| {
                Error::usage("no open item in the plan to estimate")
                    .with_hint("name one: `ralph context --estimate \"ITEM\"`")
            })?,
    };
    Ok(ItemEstimate::of(
        root, config, state, plan, &item, occupancy,
    ))
}
