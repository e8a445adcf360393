//! The agent's `stream-json` output decoded into ralph's events: one line →
//! one typed [`StreamEvent`], reading only the fields ralph needs, with
//! bounded memory however long the line (tool results can be megabytes).
//!
//! ```text
//! stream.rs          this map
//! stream/
//!   codex.rs         CodexDecoder: `codex app-server` lines into the same events, and the
//!                    Controls its client (agent/codex.rs) acts on
//!   decode.rs        LineDecoder and Shape, decode_line, decode_from: short lines parsed in place,
//!                    long ones compacted while they stream past (≤ MAX_COMPACTED a line)
//!   decoder.rs       Decoder: one per kind (`AgentKind::decoder`), dispatching to its decoder
//!   event.rs         StreamEvent and its parts: what ralph knows about a line
//!   raw.rs           the wire shapes (serde), Lenient, ToolInput, classify, into_event
//!   opencode.rs      OpencodeDecoder: `opencode run --format json` (usage per model step)
//!   gemini.rs        GeminiDecoder: Gemini CLI's `-o stream-json` (no usage passed on)
//! ```
//!
//! Every kind's decoder reads its lines through the same `LineDecoder`
//! (`push_with`) with its kind's `Shape` (which strings are the model's
//! words, kept whole; what ralph never reads, skipped unparsed): a long
//! tool output costs one `memchr` pass whatever the CLI. Each yields the
//! same events: the iteration machine never learns which CLI spoke. Tool names are translated into ralph's
//! vocabulary (`Write`, `Edit`, `Bash`…) by each decoder.
//!
//! Pitfalls: a line that fails to decode is an `Invalid` event, never an
//! error (the agent's output is not ours to trust); keep decoding pure so
//! `benches/perf.rs` measures it alone.

mod codex;
mod decode;
mod decoder;
mod event;
mod gemini;
mod opencode;
mod raw;

pub use codex::CodexDecoder;
pub(crate) use codex::Control;
pub use decode::*;
pub use decoder::Decoder;
pub use event::*;
pub use gemini::GeminiDecoder;
pub use opencode::OpencodeDecoder;
