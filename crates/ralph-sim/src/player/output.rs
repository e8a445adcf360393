//! Writing: whole lines and raw bytes to stdout, a huge line in chunks, a flood of
//! stderr; nothing once the SIGTERM exit has begun.

use std::io::{self, Write};
use std::sync::atomic::Ordering;
use std::thread;

use super::{Flow, Halt, Sim};
use crate::Error;
use crate::input::EXITING;
use crate::lines::timestamp;

impl Sim<'_> {
    /// One line of the player's, in the format the sim speaks.
    pub(super) fn emit(&mut self, line: &str) -> Flow<()> {
        for line in self.translator.translate(line) {
            self.emit_bytes(line.as_bytes(), true)?;
        }
        Ok(())
    }

    pub(super) fn emit_bytes(&mut self, bytes: &[u8], newline: bool) -> Flow<()> {
        write_line(bytes, newline)
            .map_err(|e| Halt::Fail(Error::io("cannot write to", "stdout", e)))
    }

    /// A valid tool_result line of about `bytes` bytes, written in chunks so that a
    /// 64 MiB line never sits in memory.
    pub(super) fn emit_big_line(&mut self, bytes: u64) -> Flow<()> {
        let (id, uuid) = (self.ids.tool_id(), self.ids.uuid());
        let prefix = format!(
            r#"{{"type":"user","message":{{"role":"user","content":[{{"tool_use_id":"{id}","type":"tool_result","content":""#
        );
        let suffix = format!(
            r#"","is_error":false}}]}},"parent_tool_use_id":null,"session_id":"{}","uuid":"{uuid}","timestamp":"{}"}}"#,
            self.session_id,
            timestamp()
        );
        let overhead = (prefix.len() + suffix.len() + 1) as u64;
        let mut left = bytes.saturating_sub(overhead);
        let chunk = [b'x'; 64 * 1024];
        hold_if_exiting();
        let mut out = io::stdout().lock();
        let fail = |e| Halt::Fail(Error::io("cannot write to", "stdout", e));
        out.write_all(prefix.as_bytes()).map_err(fail)?;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            out.write_all(&chunk[..n]).map_err(fail)?;
            left -= n as u64;
        }
        out.write_all(suffix.as_bytes()).map_err(fail)?;
        out.write_all(b"\n").map_err(fail)?;
        out.flush().map_err(fail)
    }
}

/// Writes whole under the stdout lock, so that the player's lines and the stdin
/// thread's answers (Codex's app-server) never interleave.
pub(crate) fn write_line(bytes: &[u8], newline: bool) -> io::Result<()> {
    hold_if_exiting();
    let mut out = io::stdout().lock();
    out.write_all(bytes)?;
    if newline {
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// The signal thread is exiting the process: print nothing more.
fn hold_if_exiting() {
    while EXITING.load(Ordering::SeqCst) {
        thread::park();
    }
}

pub(super) fn flood_stderr(bytes: u64) {
    let line = "ralph sim: stderr flood .......................................................\n";
    let chunk = line.repeat(800);
    let mut err = io::stderr().lock();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        if err.write_all(&chunk.as_bytes()[..n]).is_err() {
            return;
        }
        left -= n as u64;
    }
}
