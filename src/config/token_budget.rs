//! The budgets of what ralph writes for the agent, as `ralph.toml` keys:
//! `[prompt] max_tokens` and `[handoff] max_tokens`, their defaults and
//! why (a leaf: `config` reads it, `prompt_budget` fits documents to it).

use serde::{Deserialize, Serialize};

/// Default `[prompt] max_tokens`: about 5% of the usable window of a 200k
/// model (200,000 − 33,000 reserve): a prompt is paid for in every
/// iteration and comes out of the agent's working room, yet leaves space
/// for a long open list, ten iterations of history and the decisions.
pub(crate) const PROMPT_MAX_TOKENS: usize = 8_000;
/// Default `[handoff] max_tokens`: the next iteration reads the handoff
/// first, so prompt and handoff together stay under 8% of the window.
pub(crate) const HANDOFF_MAX_TOKENS: usize = 4_000;
/// Budgets below this cannot hold a prompt's fixed text and current item.
pub(crate) const MIN_TOKENS: usize = 500;

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PromptConfig {
    /// Most tokens (estimated) of the PROMPT.md ralph renders.
    pub max_tokens: usize,
}

impl Default for PromptConfig {
    fn default() -> Self {
        PromptConfig {
            max_tokens: PROMPT_MAX_TOKENS,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct HandoffConfig {
    /// Most tokens (estimated) of a handoff document.
    pub(crate) max_tokens: usize,
}

impl Default for HandoffConfig {
    fn default() -> Self {
        HandoffConfig {
            max_tokens: HANDOFF_MAX_TOKENS,
        }
    }
}
