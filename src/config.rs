//! `ralph.toml`: the configuration keys of DESIGN.md, their defaults, and
//! their validation (unknown keys and bad values name the key and line).
//!
//! ```text
//! config.rs          this map
//! config/
//!   agent.rs         [agent]: AgentConfig, AgentKind as a config value
//!   schema.rs        Config and its sections, defaults, load, validation
//!   span.rs          Span: a duration as ralph.toml writes it ("90s", "1h30m")
//!   token_budget.rs  [prompt]/[handoff] max_tokens, their defaults and why (a leaf)
//! ```

mod agent;
mod schema;
pub(crate) mod span;
pub(crate) mod token_budget;

pub use schema::*;
