//! What ralph writes for the agent to read: PROMPT.md of each iteration and
//! the handoff at a checkpoint, rendered through MiniJinja templates and
//! fitted to a token budget by stepping tiered views down until they fit.
//! The templates themselves (embedded, overridden, strict) are the
//! configuration's: `config::templates`.
//!
//! ```text
//! prompt.rs          this map
//! prompt/
//!   render.rs        render_prompt: config + state + plan → PROMPT.md
//!   fit.rs           [prompt]/[handoff] max_tokens: render at less detail until it fits; stats
//!   tiers.rs         tiered views of the plan, iterations, file lists; Detail
//!   tokens.rs        the token estimator (fitted against a real BPE tokenizer)
//! ```
//!
//! Pitfalls: templates render strictly (an undefined variable is an error
//! with file and line); the handoff document's text is rendered in
//! `checkpoint` through `fit`.

pub mod fit;
mod render;

pub mod tiers;
pub mod tokens;

pub use render::*;
