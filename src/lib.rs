//! ralph: a supervisor for overnight Claude Code loops that meters the
//! context window live and checkpoints before it fills. See ARCHITECTURE.md.

// `pub` is what tests/ and benches/ use; everything else is `pub(crate)`
// (so rustc reports dead code), and this keeps it so.
#![warn(unreachable_pub)]

pub mod agent;
pub mod app;
mod checkpoint;
mod cli;
mod commands;
pub mod config;
pub mod context;
mod error;
pub mod events;
pub mod formats;
mod hooks;
pub mod plan;
mod platform;
pub mod project;
pub mod prompt;
pub mod repo;
pub mod report;
mod rules;

pub mod stream;
mod supervisor;
mod text;
mod workers;

pub(crate) use error::{Error, Result};
