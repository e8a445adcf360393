//! `[agent] sandbox` and `[sandbox]` in ralph.toml: whether the agent runs
//! in a box and what the box lets through (docs/sandbox.md). Building the
//! box is `agent::sandbox`.

use serde::{Deserialize, Serialize};

/// `[agent] sandbox`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    /// The agent runs as ralph does (today's behaviour).
    #[default]
    None,
    /// bubblewrap (Linux).
    Bwrap,
}

/// `[sandbox]`: what the box lets through.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct SandboxConfig {
    /// Entries of `$HOME` shared (read-write) with the private home: the
    /// agent CLI's config and credentials. Unset: the agent kind's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) home: Option<Vec<String>>,
    /// More writable paths (`~/` is the agent's home, relative paths are
    /// the project's).
    pub(crate) read_write: Vec<String>,
    /// Paths inside the hidden places made visible read-only (a tool
    /// chain under `$HOME`, e.g. `~/.nvm`).
    pub(crate) read_only: Vec<String>,
    /// More paths hidden (other repositories outside the hidden places).
    pub(crate) hide: Vec<String>,
    /// The network: `true` shares the host's (the agent needs its API);
    /// `false` gives the agent none at all (a local model only).
    pub(crate) network: bool,
    /// Credential variables of ralph's environment the agent still gets.
    /// Unset: the agent kind's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pass_env: Option<Vec<String>>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            home: None,
            read_write: Vec::new(),
            read_only: Vec::new(),
            hide: Vec::new(),
            network: true,
            pass_env: None,
        }
    }
}

impl SandboxConfig {
    /// The `$HOME` entries shared: `home`, or `kind_own` (the agent kind's,
    /// [`AgentKind::home_entries`](crate::config::AgentKind::home_entries)).
    pub(crate) fn home_or(&self, kind_own: &[&str]) -> Vec<String> {
        self.home.clone().unwrap_or_else(|| owned(kind_own))
    }

    /// The credential variables passed: `pass_env`, or `kind_own`
    /// ([`AgentKind::credential_env`](crate::config::AgentKind::credential_env)).
    pub(crate) fn pass_env_or(&self, kind_own: &[&str]) -> Vec<String> {
        self.pass_env.clone().unwrap_or_else(|| owned(kind_own))
    }
}

fn owned(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}
