//! `ralph.toml`: the configuration keys of DESIGN.md, their defaults, and
//! their validation (unknown keys and bad values name the key and line).
//!
//! ```text
//! config.rs          this map
//! config/
//!   agent.rs         [agent]: AgentConfig, AgentKind as a config value
//!   schema.rs        Config and its sections, their defaults, load, what they derive (meter, thresholds)
//!   workers.rs       [workers]: WorkersConfig (docs/workers.md)
//!   fleet.rs         [fleet]: FleetConfig (docs/fleet.md)
//!   notify.rs        [notify]: channels, events (`Kind`), limits, `variable` (docs/notifications.md)
//!   sandbox.rs       [agent] sandbox (`Kind`) and [sandbox]: SandboxConfig (docs/sandbox.md)
//!   runs.rs          [runs]: RunsConfig, transcripts kept, capped, compressed
//!   verify.rs        [verify]: VerifyConfig, the checks ralph runs and when
//!   validate.rs      the text parsed and checked: every refusal names `section.key` and its line
//!   templates.rs     the prompt templates (prompts/*.j2) embedded and the user's overrides, strict rendering (a leaf: imports only error)
//!   token_budget.rs  [prompt]/[handoff] max_tokens, their defaults and why (a leaf)
//!   trust.rs         trust fixed at a run's start: what ralph acts on (config, templates, named scripts, git hooks), `.ralph/trust.json`, the decision at the next start
//! ```

mod agent;
pub(crate) mod fleet;
pub(crate) mod notify;
mod runs;
pub(crate) mod sandbox;
mod schema;
pub(crate) mod templates;
pub(crate) mod token_budget;
pub(crate) mod trust;
mod validate;
mod verify;
mod workers;

pub(crate) use fleet::FleetConfig;
pub(crate) use runs::RunsConfig;
pub(crate) use sandbox::SandboxConfig;
pub use schema::*;
pub(crate) use verify::VerifyConfig;
pub(crate) use workers::WorkersConfig;
