//! Input: the stdin reader, signals (a self-pipe and a thread), and the handoff path a
//! checkpoint request names.

use std::io::{self, BufRead, Read};
use std::os::fd::{BorrowedFd, IntoRawFd};
use std::process::ExitStatus;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::mpsc::Sender;
use std::thread;

use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::unistd::Pid;
use regex::Regex;
use serde_json::Value;

use crate::format::Input;
use crate::format::codex::{self, Asked, Shared};
use crate::ids::Ids;
use crate::player::write_line;
use crate::scenario::OnSigterm;
use crate::{Error, Result};

pub(crate) enum Event {
    Message(String),
    /// Codex's `turn/interrupt`: stop the running turn, as SIGINT stops Claude Code.
    Interrupt,
    Eof,
    Signal(i32),
    ToolDone(Option<ExitStatus>),
}

/// The text of a stream-json user message (content as a string or text blocks).
fn user_message_text(line: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(line).ok()?;
    if value.get("type")?.as_str()? != "user" {
        return None;
    }
    match value.get("message")?.get("content")? {
        Value::String(text) => Some(text.clone()),
        Value::Array(blocks) => Some(
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

/// The background reader: messages can arrive while a step plays. What a line is
/// depends on the CLI the sim speaks like (`format`).
pub(crate) fn spawn_stdin_reader(tx: Sender<Event>, input: Input, session: Shared) {
    thread::spawn(move || {
        let stdin = io::stdin();
        let mut input_lines = stdin.lock();
        if input == Input::PlainToEof {
            // The whole of stdin is the prompt.
            let mut prompt = Vec::new();
            if input_lines.read_to_end(&mut prompt).is_ok() && !prompt.is_empty() {
                let _ = tx.send(Event::Message(
                    String::from_utf8_lossy(&prompt).into_owned(),
                ));
            }
            let _ = tx.send(Event::Eof);
            return;
        }
        let mut ids = Ids::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            match input_lines.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) if line.iter().all(u8::is_ascii_whitespace) => {}
                Ok(_) if input == Input::JsonRpc => {
                    let (replies, asked) = codex::serve(&line, &session, &mut ids);
                    for reply in replies {
                        if write_line(reply.as_bytes(), true).is_err() {
                            return;
                        }
                    }
                    let event = match asked {
                        Some(Asked::Message(text)) => Event::Message(text),
                        Some(Asked::Interrupt) => Event::Interrupt,
                        None => continue,
                    };
                    if tx.send(event).is_err() {
                        return;
                    }
                }
                Ok(_) => match user_message_text(&line) {
                    Some(text) => {
                        if tx.send(Event::Message(text)).is_err() {
                            return;
                        }
                    }
                    None => eprintln!(
                        "ralph sim: ignoring a stdin line that is not a stream-json user message"
                    ),
                },
            }
        }
        let _ = tx.send(Event::Eof);
    });
}

/// Write end of the self-pipe the signal handler writes to (-1 until installed).
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);
/// Process group of the running Bash tool (0: none), so any thread can kill it.
pub(crate) static TOOL_PGID: AtomicI32 = AtomicI32::new(0);
static SIGTERM_EXITS: AtomicBool = AtomicBool::new(true);
/// Set before the SIGTERM exit kills the tool, so the main thread, woken by the tool's
/// death, cannot print its result before the process is gone.
pub(crate) static EXITING: AtomicBool = AtomicBool::new(false);

extern "C" fn note_signal(sig: nix::libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: `fd` is the write end of the self-pipe, which is never closed.
        let pipe = unsafe { BorrowedFd::borrow_raw(fd) };
        // write(2) is async-signal-safe; a full pipe only loses a duplicate signal.
        let _ = nix::unistd::write(pipe, &[sig as u8]);
    }
}

pub(crate) fn kill_tool_group() {
    let pgid = TOOL_PGID.load(Ordering::SeqCst);
    if pgid > 0 {
        let _ = signal::killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// A handler (not SIG_IGN) even for "ignore", because an ignored disposition would be
/// inherited by the Bash tools, and a caught one is reset to default on exec.
pub(crate) fn install_signal_handlers(tx: Sender<Event>, on_sigterm: OnSigterm) -> Result<()> {
    SIGTERM_EXITS.store(on_sigterm == OnSigterm::Exit, Ordering::SeqCst);
    // std's pipe is close-on-exec on every platform (pipe2 is not on macOS).
    let (read, write) = std::io::pipe().map_err(|source| Error::Io {
        action: "cannot create the signal pipe",
        path: None,
        source,
    })?;
    SIGNAL_PIPE.store(
        std::os::fd::OwnedFd::from(write).into_raw_fd(),
        Ordering::SeqCst,
    );
    let action = SigAction::new(
        SigHandler::Handler(note_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for (sig, what) in [
        (Signal::SIGINT, "cannot install a SIGINT handler"),
        (Signal::SIGTERM, "cannot install a SIGTERM handler"),
    ] {
        // SAFETY: the handler only loads an atomic and calls write(2).
        unsafe { signal::sigaction(sig, &action) }.map_err(|e| signal_error(what, e))?;
    }
    thread::spawn(move || {
        let mut pipe = read;
        let mut byte = [0u8; 1];
        while pipe.read_exact(&mut byte).is_ok() {
            let sig = i32::from(byte[0]);
            // Handled here, not by the main thread, so it is immediate even while the
            // main thread is blocked writing to a full pipe.
            if sig == Signal::SIGTERM as i32 && SIGTERM_EXITS.load(Ordering::SeqCst) {
                EXITING.store(true, Ordering::SeqCst);
                kill_tool_group();
                std::process::exit(143);
            }
            if tx.send(Event::Signal(sig)).is_err() {
                break;
            }
        }
    });
    Ok(())
}

static BACKTICKED_MD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"`([^`\n]*\.md)`").expect("valid regex"));
static BARE_MD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(?:^|[\s(\["'])([\w~][\w./~-]*\.md)\b"#).expect("valid regex"));

/// Where a checkpoint request wants the notes: the first backticked path ending in
/// `.md`, else the first bare word ending in `.md`.
pub(crate) fn notes_path(message: &str) -> Option<String> {
    if let Some(found) = BACKTICKED_MD
        .captures_iter(message)
        .map(|c| c[1].trim().to_string())
        .find(|p| p.len() > 3)
    {
        return Some(found);
    }
    BARE_MD.captures(message).map(|c| c[1].to_string())
}

/// The errno keeps its own wording (`EMFILE: Too many open files`) as the cause.
fn signal_error(action: &'static str, errno: nix::Error) -> Error {
    Error::Io {
        action,
        path: None,
        source: io::Error::other(errno),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_path_is_the_first_backticked_md_path() {
        let m = "Context is at 85%. Read `fix_plan.md`? No: write your handoff notes to `.ralph/handoffs/notes.md`, then stop.";
        assert_eq!(notes_path(m).as_deref(), Some("fix_plan.md"));
        let m = "Context is at 85%. Finish the edit, write your handoff notes to `/tmp/x y/notes.md`, then stop.";
        assert_eq!(notes_path(m).as_deref(), Some("/tmp/x y/notes.md"));
        let m = "Finish the edit in progress, write handoff.md (what is done, what is next), then stop.";
        assert_eq!(notes_path(m).as_deref(), Some("handoff.md"));
        assert_eq!(notes_path("just stop, please"), None);
        assert_eq!(notes_path("use `x.rs` then"), None);
    }

    #[test]
    fn stdin_messages_take_string_or_blocks() {
        let blocks = br#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"a"},{"type":"image"},{"type":"text","text":"b"}]}}"#;
        assert_eq!(user_message_text(blocks).as_deref(), Some("a\nb"));
        let plain = br#"{"type": "user", "message": {"role": "user", "content": "hi"}}"#;
        assert_eq!(user_message_text(plain).as_deref(), Some("hi"));
        assert_eq!(user_message_text(b"{\"type\":\"control\"}"), None);
        assert_eq!(user_message_text(b"garbage"), None);
    }
}
