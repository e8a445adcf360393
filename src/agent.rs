//! The agent process and what it leaves: the exact command line, spawning
//! it in its own session and process group, feeding it stream-json user
//! messages, reading its stdout live (decoded, and saved raw), stopping it,
//! ending everything it left behind, and its raw transcripts.
//!
//! ```text
//! agent.rs           this map
//! agent/
//!   kind.rs          AgentKind, the seam per agent CLI: command line, messages, decoder,
//!                    capabilities
//!   claude.rs        Claude Code's specifics (stream-json flags, user messages)
//!   codex.rs         Codex's app-server client (Wire): handshake, turns, steer, interrupt,
//!                    answers to the server's requests; `policy`: what Codex's config
//!                    allows the agent (sandbox, approvals), for doctor and init
//!   opencode.rs      opencode's (`run --format json`, prompt on stdin)
//!   gemini.rs        Gemini CLI's (`-o stream-json`, prompt on stdin)
//!   process.rs       AgentCommand, Agent: spawn, stdin, reader threads, stop, reap
//!   shell.rs         one project command (a hook, a check, a notify command) in its own
//!                    process group: pipes, timeout, kill, groups left by kill -9
//!   procs.rs         the processes ralph ends (the process table read through
//!                    `crate::platform`): groups, sessions, orphans
//!   transcript.rs    the raw transcripts: cap, cut strings, retention, gzip ([runs])
//!   sandbox.rs       the box the agent may run in ([agent] sandbox = "bwrap"): bubblewrap's
//!                    arguments, the start-of-run probe, the environment it withholds
//! ```
//!
//! Pitfalls: the agent's output is hostile input (escape sequences, huge
//! lines, secrets); it is redacted as it streams and decoded with bounded
//! memory.

mod claude;
pub(crate) mod codex;
mod gemini;
mod kind;
mod opencode;
mod process;
pub(crate) mod procs;
pub mod sandbox;
pub(crate) mod shell;
pub(crate) mod transcript;

pub use kind::AgentKind;
pub(crate) use process::*;
