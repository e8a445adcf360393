//! ralph: a supervisor for overnight Claude Code loops that meters the
//! context window live and checkpoints before it fills. See ARCHITECTURE.md.

pub mod agent;
pub mod app;
pub mod breaker;
pub mod checkpoint;
pub mod claude_code;
pub mod cli;
pub mod commands;
pub mod completion;
pub mod config;
pub mod context;
pub mod decisions;
pub mod error;
pub mod estimate;
pub mod events;
pub mod hooks;
pub mod items;
pub mod limits;
pub mod morning;
pub mod notify;
pub mod ownership;
pub mod plan;
pub mod procs;
pub mod prompt;
pub mod prompt_budget;
pub mod repo;
pub mod report;
pub mod secrets;
pub mod span;
pub mod state;
pub mod stream;
pub mod supervisor;
pub mod templates;
pub mod text;
pub mod tiers;
pub mod token_budget;
pub mod tokens;
pub mod transcript;

pub use error::{Error, Result};
