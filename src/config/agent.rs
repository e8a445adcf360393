//! The `[agent]` section: which CLI runs the iterations and how. The kind
//! is a plain value here; what each kind does is `agent/kind.rs`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[agent] kind`: the CLI ralph runs (default: Claude Code). Its
/// behaviour (command line, decoder, capabilities) is in `agent/kind.rs`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum AgentKind {
    /// Claude Code (`claude -p --output-format stream-json`).
    #[default]
    Claude,
    /// Codex (`codex app-server`).
    Codex,
    /// opencode (`opencode run --format json`).
    Opencode,
    /// Gemini CLI (`gemini -o stream-json`).
    Gemini,
}

impl AgentKind {
    pub const ALL: [AgentKind; 4] = [
        AgentKind::Claude,
        AgentKind::Codex,
        AgentKind::Opencode,
        AgentKind::Gemini,
    ];

    /// The name in `ralph.toml` and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            AgentKind::Claude => "claude",
            AgentKind::Codex => "codex",
            AgentKind::Opencode => "opencode",
            AgentKind::Gemini => "gemini",
        }
    }

    /// `agent.command` when `ralph.toml` does not set it.
    pub(crate) fn default_command(self) -> &'static str {
        match self {
            AgentKind::Claude => "claude",
            AgentKind::Codex => "codex",
            AgentKind::Opencode => "opencode",
            AgentKind::Gemini => "gemini",
        }
    }

    /// The entries of `$HOME` the CLI keeps its config and credentials in:
    /// all the sandbox's private home holds unless `[sandbox] home` says
    /// otherwise (docs/sandbox.md).
    pub(crate) fn home_entries(self) -> &'static [&'static str] {
        match self {
            AgentKind::Claude => &[".claude", ".claude.json"],
            AgentKind::Codex => &[".codex"],
            // XDG config, data (auth.json, sessions), cache (provider packages), state.
            AgentKind::Opencode => &[
                ".config/opencode",
                ".local/share/opencode",
                ".cache/opencode",
                ".local/state/opencode",
            ],
            AgentKind::Gemini => &[".gemini"],
        }
    }

    /// Prefixes of the settings the CLI reads from its environment (its
    /// endpoint, its switches): passed into the sandbox unless they are
    /// credentials (those pass by [`Self::credential_env`] only).
    pub(crate) fn env_prefixes(self) -> &'static [&'static str] {
        match self {
            AgentKind::Claude => &[
                "ANTHROPIC_",
                "CLAUDE_",
                "DISABLE_",
                "MCP_",
                "MAX_THINKING_TOKENS",
            ],
            AgentKind::Codex => &["CODEX_", "OPENAI_"],
            AgentKind::Opencode => &[
                "OPENCODE_",
                "ANTHROPIC_",
                "OPENAI_",
                "OPENROUTER_",
                "GEMINI_",
                "GOOGLE_",
            ],
            AgentKind::Gemini => &["GEMINI_", "GOOGLE_"],
        }
    }

    /// Variables that make the CLI wait out rate and usage limits by itself,
    /// silently and for hours (Claude Code's retry watchdog, 2.1.33x): ralph
    /// waits out limits itself, visibly, and its idle timeout would kill the
    /// silent session. Removed from the agent's environment unless
    /// `[agent] env` sets them.
    pub(crate) fn self_waiting_env(self) -> &'static [&'static str] {
        match self {
            AgentKind::Claude => &[
                "CLAUDE_CODE_RETRY_WATCHDOG",
                "CLAUDE_CODE_RETRY_WATCHDOG_MAX_WAIT_MS",
                "CLAUDE_CODE_RETRY_WATCHDOG_MAX_USAGE_LIMIT_WAIT_MS",
                "CLAUDE_CODE_RETRY_WATCHDOG_USAGE_LIMIT_RECHECK_MS",
            ],
            AgentKind::Codex | AgentKind::Opencode | AgentKind::Gemini => &[],
        }
    }

    /// The credential variables the CLI reads: passed into the sandbox
    /// unless `[sandbox] pass_env` says otherwise; everything else of
    /// ralph's environment that is not on the box's allow-list is withheld.
    pub(crate) fn credential_env(self) -> &'static [&'static str] {
        match self {
            AgentKind::Claude => &[
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_AUTH_TOKEN",
                "CLAUDE_CODE_OAUTH_TOKEN",
            ],
            AgentKind::Codex => &["OPENAI_API_KEY", "CODEX_API_KEY"],
            // opencode speaks to many providers; these are the common ones.
            AgentKind::Opencode => &[
                "ANTHROPIC_API_KEY",
                "OPENAI_API_KEY",
                "OPENROUTER_API_KEY",
                "GEMINI_API_KEY",
                "GOOGLE_GENERATIVE_AI_API_KEY",
                "OPENCODE_API_KEY",
            ],
            AgentKind::Gemini => &[
                "GEMINI_API_KEY",
                "GOOGLE_API_KEY",
                "GOOGLE_APPLICATION_CREDENTIALS",
            ],
        }
    }
}

impl std::fmt::Display for AgentKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// Which CLI it is: its command line, protocol, decoder, capabilities.
    pub kind: AgentKind,
    /// Program, optionally followed by leading arguments (shell-style
    /// quoting); `ralph` means this very binary (for `ralph sim`). Unset:
    /// the kind's own CLI ([`AgentKind::default_command`]).
    pub(crate) command: Option<String>,
    pub(crate) args: Vec<String>,
    pub(crate) model: Option<String>,
    /// 0 = detect from the model.
    pub(crate) context_window: u64,
    pub reserve_tokens: u64,
    pub(crate) env: BTreeMap<String, String>,
    /// `none` or `bwrap`: the agent in a box (`[sandbox]`, docs/sandbox.md).
    pub(crate) sandbox: crate::config::sandbox::Kind,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            kind: AgentKind::Claude,
            command: None,
            args: Vec::new(),
            model: None,
            context_window: 0,
            reserve_tokens: 33_000,
            env: BTreeMap::new(),
            sandbox: Default::default(),
        }
    }
}

impl AgentConfig {
    /// The program and its leading arguments: `command`, or the kind's CLI.
    pub(crate) fn program(&self) -> (String, Vec<String>) {
        let default = self.kind.default_command();
        let command = self.command.as_deref().unwrap_or(default);
        let mut words = shlex::split(command).unwrap_or_default();
        let program = if words.is_empty() {
            default.to_string()
        } else {
            words.remove(0)
        };
        (program, words)
    }
}
