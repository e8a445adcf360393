//! `[runs]` in ralph.toml: how many runs' transcripts stay, their cap and
//! compression. Writing and tidying them is `agent::transcript`.

use serde::{Deserialize, Serialize};

/// `[runs]` in ralph.toml.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RunsConfig {
    /// Runs whose transcripts stay in `.ralph/runs/` (the current one
    /// included); older ones are deleted when a run starts.
    pub(crate) keep: u32,
    /// MiB of a transcript written as the agent printed it; past this,
    /// strings longer than `agent::transcript::ELIDED_STRING` bytes are cut.
    pub(crate) transcript_cap_mib: u64,
    /// Gzip the transcripts of earlier runs when a run starts.
    pub(crate) compress: bool,
}

impl Default for RunsConfig {
    fn default() -> Self {
        RunsConfig {
            keep: 10,
            transcript_cap_mib: 64,
            compress: true,
        }
    }
}
