//! ralph inside interactive Claude Code sessions: the status line, the
//! `PreCompact` and `SessionStart` hooks, and the project settings that
//! install them. Everything here runs at Claude Code's call, so it never
//! fails a session: errors become a short message and exit code 0.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::Config;
use crate::context::ContextMeter;

/// The JSON Claude Code writes on the stdin of a status line command or a
/// hook (the fields ralph reads; the rest is ignored).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Input {
    pub(crate) transcript_path: Option<PathBuf>,
    pub(crate) cwd: Option<PathBuf>,
    /// SessionStart: startup, resume, clear, compact.
    pub(crate) source: Option<String>,
    /// PreCompact: manual, auto.
    pub(crate) trigger: Option<String>,
    /// Set (since Claude Code 2.1.323) when the hook fires for a subagent's
    /// own conversation (a Task), not the main session's.
    pub(crate) agent_id: Option<String>,
    pub(crate) model: Option<Model>,
    pub(crate) workspace: Option<Workspace>,
    pub(crate) context_window: Option<ContextWindow>,
}

/// `model` is `{id, display_name}` for the status line and a plain id for
/// SessionStart.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Model {
    Id(String),
    Info { id: Option<String> },
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Workspace {
    pub(crate) current_dir: Option<PathBuf>,
    pub(crate) project_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ContextWindow {
    pub(crate) context_window_size: Option<u64>,
}

impl Input {
    /// Parse what was read from stdin; an empty input is an empty `Input`.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Input, serde_json::Error> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Input::default());
        }
        serde_json::from_slice(bytes)
    }

    /// The subagent whose conversation the hook is about, if not the main
    /// session's.
    pub(crate) fn subagent(&self) -> Option<&str> {
        self.agent_id.as_deref().filter(|id| !id.is_empty())
    }

    pub(crate) fn model_id(&self) -> Option<&str> {
        match self.model.as_ref()? {
            Model::Id(id) => Some(id.as_str()),
            Model::Info { id } => id.as_deref(),
        }
        .filter(|id| !id.is_empty())
    }

    /// The window Claude Code itself uses for the model, when it says.
    pub(crate) fn context_window_size(&self) -> Option<u64> {
        self.context_window
            .as_ref()?
            .context_window_size
            .filter(|&w| w > 0)
    }

    /// The directory the session works in: the project Claude Code was
    /// started in, else its current directory.
    pub(crate) fn dir(&self) -> Option<&Path> {
        let ws = self.workspace.as_ref();
        ws.and_then(|w| w.project_dir.as_deref())
            .or_else(|| ws.and_then(|w| w.current_dir.as_deref()))
            .or(self.cwd.as_deref())
    }
}

/// ralph's meter for this session: the configured window, else the one
/// Claude Code reports for the model, else the model's name.
pub(crate) fn meter(config: &Config, input: &Input) -> ContextMeter {
    let mut meter = config.meter();
    if let Some(model) = input.model_id() {
        if let Some(w) = input.context_window_size() {
            meter = meter.with_known_windows(&[(model.to_string(), w)].into());
        }
        meter.set_model(model);
    }
    meter
}

/// Claude Code's payload is a few KiB; more is not its payload.
const MAX_INPUT: u64 = 1 << 20;
/// Claude Code writes the payload and closes stdin at once; a caller that
/// never closes it must not hang the command.
const INPUT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Read and parse the payload on stdin (empty when stdin is a terminal);
/// the error is a sentence for stderr or the status line.
pub(crate) fn read_input() -> Result<Input, String> {
    let stdin = std::io::stdin();
    if std::io::IsTerminal::is_terminal(&stdin) {
        return Ok(Input::default());
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let read = std::io::stdin()
            .lock()
            .take(MAX_INPUT)
            .read_to_end(&mut bytes);
        let _ = tx.send(read.map(|_| bytes));
    });
    match rx.recv_timeout(INPUT_WAIT) {
        Ok(Ok(bytes)) => {
            Input::parse(&bytes).map_err(|e| format!("stdin is not Claude Code's JSON: {e}"))
        }
        Ok(Err(e)) => Err(format!("cannot read stdin: {e}")),
        Err(_) => Err(format!(
            "no input on stdin within {}s",
            INPUT_WAIT.as_secs()
        )),
    }
}

/// Set in the agent's environment by ralph's supervisor: the session is one
/// of ralph's own iterations, whose checkpoints and resume block the
/// supervisor owns.
pub(crate) fn under_supervisor() -> bool {
    std::env::var_os("RALPH_ITERATION").is_some_and(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_line_input_is_read() {
        let input = Input::parse(
            br#"{"session_id":"s","transcript_path":"/t.jsonl","cwd":"/w",
                "model":{"id":"claude-opus-4-6[1m]","display_name":"Opus"},
                "workspace":{"current_dir":"/w/sub","project_dir":"/w"},
                "context_window":{"context_window_size":1000000,"current_usage":null},
                "cost":{"total_cost_usd":1.5}}"#,
        )
        .unwrap();
        assert_eq!(input.model_id(), Some("claude-opus-4-6[1m]"));
        assert_eq!(input.context_window_size(), Some(1_000_000));
        assert_eq!(input.dir(), Some(Path::new("/w")));
    }

    #[test]
    fn hook_input_is_read() {
        let input = Input::parse(
            br#"{"session_id":"s","transcript_path":"/t.jsonl","cwd":"/w",
                "hook_event_name":"SessionStart","source":"compact","model":"claude-sonnet-4-5"}"#,
        )
        .unwrap();
        assert_eq!(input.model_id(), Some("claude-sonnet-4-5"));
        assert_eq!(input.source.as_deref(), Some("compact"));
        assert_eq!(input.dir(), Some(Path::new("/w")));
        assert!(Input::parse(b"  \n").unwrap().dir().is_none());
        assert!(Input::parse(b"{not json").is_err());
    }

    #[test]
    fn the_window_is_the_config_s_then_claude_code_s_then_the_model_name_s() {
        let input = |json: &str| Input::parse(json.as_bytes()).unwrap();
        let reported =
            input(r#"{"model":{"id":"m"},"context_window":{"context_window_size":1000000}}"#);
        let by_name = input(r#"{"model":{"id":"claude-opus-4-6[1m]"}}"#);
        let mut config = Config::default();
        assert_eq!(meter(&config, &reported).window(), 1_000_000);
        assert_eq!(meter(&config, &by_name).window(), 1_000_000);
        assert_eq!(meter(&config, &Input::default()).window(), 200_000);
        config.agent.context_window = 300_000;
        assert_eq!(meter(&config, &reported).window(), 300_000);
    }
}
