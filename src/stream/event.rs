//! The typed events a stream-json line decodes to: only what ralph reads.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Token usage of one API message, as the CLI reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// Context occupancy: the formula of Claude Code's own status line.
    pub fn occupancy(&self) -> u64 {
        self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens
    }
}

/// A tool call the agent made, with the fields ralph reports on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The file the tool works on (Write/Edit/Read/NotebookEdit), if any.
    pub path: Option<String>,
    /// A Bash command or a short description, cut to a reportable length.
    pub summary: Option<String>,
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
    pub name: String,
    /// The fraction used (1.0 at the limit; more when past it).
    pub utilization: f64,
    /// Epoch seconds.
    pub resets_at: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssistantMessage {
    pub id: String,
    pub model: String,
    pub parent_tool_use_id: Option<String>,
    pub usage: Usage,
    pub text: Vec<String>,
    pub tool_calls: Vec<ToolCall>,
    /// Set on synthetic error messages (`rate_limit`, `invalid_request`, …).
    pub error: Option<String>,
    /// The window size the agent reported with this usage (Codex's
    /// `modelContextWindow`); Claude Code reports it only in results.
    pub context_window: Option<u64>,
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
    pub subtype: String,
    pub is_error: bool,
    pub api_error_status: Option<u64>,
    pub text: Option<String>,
    pub total_cost_usd: f64,
    pub num_turns: u64,
    pub terminal_reason: Option<String>,
    pub errors: Vec<String>,
    pub permission_denials: Vec<String>,
    /// `modelUsage.<model>.contextWindow` for each model that reported one.
    pub context_windows: BTreeMap<String, u64>,
}
