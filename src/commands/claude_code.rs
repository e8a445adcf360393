//! ralph inside interactive Claude Code sessions: the status line, the
//! `PreCompact` and `SessionStart` hooks, and the project settings that
//! install them. Everything here runs at Claude Code's call, so it never
//! fails a session: errors become a short message and exit code 0.
//!
//! ```text
//! claude_code.rs     this map
//! claude_code/
//!   input.rs         Input (the stdin JSON), the meter for a session, read_input
//!   transcript.rs    a session's JSONL read backwards: newest main-thread usage, recent work
//!   statusline.rs    the status line: view + pure render
//!   hook.rs          PreCompact → a standalone checkpoint; SessionStart → the resume block
//!   settings.rs      merge into .claude/settings.json as a syntax tree (jsonc-parser)
//! ```

pub(crate) mod hook;
mod input;
pub(crate) mod settings;
pub(crate) mod statusline;
pub(crate) mod transcript;

pub(crate) use input::*;
