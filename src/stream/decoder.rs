//! [`Decoder`]: the one decoder of each agent kind's stdout, as the agent's
//! readers and the replay of a saved transcript use it.

use std::io::BufRead;

use super::codex::{CodexDecoder, Control};
use super::event::StreamEvent;
use super::{GeminiDecoder, LineDecoder, OpencodeDecoder};

/// The decoder of one agent kind's stdout (`AgentKind::decoder`): fed with
/// whatever chunks the pipe gives, it yields ralph's own events. One per
/// agent process: a kind's decoder may carry state from line to line.
#[derive(Debug)]
pub enum Decoder {
    /// Claude Code's `stream-json`.
    Claude(LineDecoder),
    /// `codex app-server`'s JSON-RPC messages.
    Codex(CodexDecoder),
    /// opencode's `run --format json`.
    Opencode(OpencodeDecoder),
    /// Gemini CLI's `-o stream-json`.
    Gemini(GeminiDecoder),
}

impl Decoder {
    pub(crate) fn claude() -> Decoder {
        Decoder::Claude(LineDecoder::new())
    }

    /// What the last line means for the agent's wire (a protocol kind's).
    pub(crate) fn take_control(&mut self) -> Option<Control> {
        match self {
            Decoder::Claude(_) | Decoder::Opencode(_) | Decoder::Gemini(_) => None,
            Decoder::Codex(d) => d.take_control(),
        }
    }

    /// Feed the next bytes of the stream: how many were consumed (up to
    /// the end of the current line), and the event if a line ended there.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> (usize, Option<StreamEvent>) {
        match self {
            Decoder::Claude(d) => d.push(bytes),
            Decoder::Codex(d) => d.push(bytes),
            Decoder::Opencode(d) => d.push(bytes),
            Decoder::Gemini(d) => d.push(bytes),
        }
    }

    /// End of input: the last line, if it had no newline.
    pub(crate) fn finish(&mut self) -> Option<StreamEvent> {
        match self {
            Decoder::Claude(d) => d.finish(),
            Decoder::Codex(d) => d.finish(),
            Decoder::Opencode(d) => d.finish(),
            Decoder::Gemini(d) => d.finish(),
        }
    }

    /// The next event from a reader (see [`decode_from`]).
    pub fn next_from<R: BufRead>(
        &mut self,
        reader: &mut R,
        sink: &mut dyn FnMut(&[u8]),
    ) -> Option<StreamEvent> {
        loop {
            let available = match reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return self.finish(),
            };
            if available.is_empty() {
                return self.finish();
            }
            let (used, event) = self.push(available);
            sink(&available[..used]);
            reader.consume(used);
            if event.is_some() {
                return event;
            }
        }
    }
}
