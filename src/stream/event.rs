//! The typed events a stream-json line decodes to: only what ralph reads.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Token usage of one API message, as the CLI reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub(crate) struct Usage {
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) cache_creation_input_tokens: u64,
    pub(crate) cache_read_input_tokens: u64,
}

impl Usage {
    /// Context occupancy: the formula of Claude Code's own status line.
    pub(crate) fn occupancy(&self) -> u64 {
        self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens
    }
}

/// A tool call the agent made, with the fields ralph reports on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub(crate) id: String,
    pub(crate) name: String,
    /// The file the tool works on (Write/Edit/Read/NotebookEdit), if any.
    pub(crate) path: Option<String>,
    /// A Bash command or a short description, cut to a reportable length.
    pub(crate) summary: Option<String>,
}

impl ToolCall {
    /// The call as people read it: `Edit src/x.rs`, `Bash cargo test` (the
    /// first line of its summary), or its name alone.
    pub(crate) fn label(&self) -> String {
        let first = |s: &str| -> String {
            let line = s.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            line.trim().chars().take(120).collect()
        };
        match (&self.path, &self.summary) {
            (Some(p), _) => format!("{} {p}", self.name),
            (None, Some(s)) => format!("{} {}", self.name, first(s)),
            _ => self.name.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    Init {
        model: Option<String>,
        session_id: Option<String>,
    },
    Assistant(AssistantMessage),
    /// A user line (tool results, echoed input); content is never kept.
    User {
        parent_tool_use_id: Option<String>,
    },
    ApiRetry {
        attempt: u64,
        max_retries: u64,
        error_status: Option<u64>,
        error: Option<String>,
    },
    Compacted {
        pre_tokens: u64,
        post_tokens: u64,
    },
    RateLimit {
        status: String,
        resets_at: Option<i64>,
        kind: Option<String>,
        /// How much of each subscription window is used (the quota guard).
        windows: Vec<WindowUsage>,
    },
    Result(ResultMessage),
    /// Valid JSON of a type or subtype ralph does not use (skipped, counted).
    Other {
        kind: String,
    },
    /// Not JSON, not an object, or not UTF-8 (skipped, counted, reported).
    Invalid {
        reason: String,
    },
}

/// One subscription window's usage as the agent reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowUsage {
    /// The agent's name for it (`five_hour`, `seven_day`, …).
    pub(crate) name: String,
    /// The fraction used (1.0 at the limit; more when past it).
    pub(crate) utilization: f64,
    /// Epoch seconds.
    pub(crate) resets_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssistantMessage {
    pub(crate) id: String,
    pub(crate) model: String,
    pub(crate) parent_tool_use_id: Option<String>,
    pub(crate) usage: Usage,
    pub(crate) text: Vec<String>,
    pub tool_calls: Vec<ToolCall>,
    /// Set on synthetic error messages (`rate_limit`, `invalid_request`, …).
    pub(crate) error: Option<String>,
    /// The window size the agent reported with this usage (Codex's
    /// `modelContextWindow`); Claude Code reports it only in results.
    pub(crate) context_window: Option<u64>,
}

impl AssistantMessage {
    pub fn is_main_thread(&self) -> bool {
        self.parent_tool_use_id.is_none()
    }

    pub fn is_synthetic(&self) -> bool {
        self.model == "<synthetic>"
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResultMessage {
    pub(crate) subtype: String,
    pub(crate) is_error: bool,
    pub(crate) api_error_status: Option<u64>,
    pub(crate) text: Option<String>,
    pub(crate) total_cost_usd: f64,
    pub(crate) num_turns: u64,
    pub(crate) terminal_reason: Option<String>,
    /// When the claude.ai login the CLI used ends for good, as it reckons
    /// (Claude Code 2.1.33x; absent for API keys and other credentials).
    pub(crate) credential_expires_at: Option<jiff::Timestamp>,
    pub(crate) errors: Vec<String>,
    pub(crate) permission_denials: Vec<String>,
    /// `modelUsage.<model>.contextWindow` for each model that reported one.
    pub(crate) context_windows: BTreeMap<String, u64>,
}
