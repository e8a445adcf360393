//! ralph: a supervisor for overnight Claude Code loops that meters the
//! context window live and checkpoints before it fills. See ARCHITECTURE.md.

pub mod agent;
pub mod app;
pub mod checkpoint;
pub mod claude_code;
pub mod cli;
pub mod commands;
pub mod config;
pub mod context;
pub mod error;
pub mod events;
pub mod hooks;
pub mod notify;
pub mod plan;
pub mod project;
pub mod prompt;
pub mod repo;
pub mod report;
pub mod rules;
pub mod state;
pub mod stream;
pub mod supervisor;
pub mod text;

pub use error::{Error, Result};
