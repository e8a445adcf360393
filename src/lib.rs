//! ralph: a supervisor for overnight Claude Code loops that meters the
//! context window live and checkpoints before it fills. See ARCHITECTURE.md.

pub mod agent;
pub mod app;
mod checkpoint;
mod cli;
mod commands;
pub mod config;
pub mod context;
pub mod error;
pub mod events;
mod hooks;
pub mod plan;
mod project;
pub mod prompt;
pub mod repo;
pub mod report;
mod rules;
pub mod state;
pub mod stream;
mod supervisor;
mod text;
pub mod workers;

pub use error::{Error, Result};
