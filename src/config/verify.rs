//! `[verify]` in ralph.toml: the project's checks ralph runs itself
//! (`hooks::verify`), when, and how long each may take (docs/verify.md).

use serde::{Deserialize, Serialize};

use crate::formats::verification::When;
use crate::text::Span;

/// `[verify]` in ralph.toml.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct VerifyConfig {
    /// Shell commands, run in order in the project root (`sh -c`).
    pub(crate) commands: Vec<String>,
    /// How long each command may run before it (and its group) is killed.
    pub(crate) timeout: Span,
    /// When they run besides a completion, which is always verified.
    pub(crate) on: Vec<When>,
    /// After this many failed runs of the checks in a row, the run asks for
    /// a person once (`needs_human`, reason `verify_failing`); 0: never.
    pub(crate) needs_human_after: u32,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        VerifyConfig {
            commands: Vec::new(),
            timeout: Span::secs(10 * 60),
            on: vec![When::Completion],
            needs_human_after: 3,
        }
    }
}

impl VerifyConfig {
    /// Whether the checks run at `when` (a completion: whenever there are any).
    pub(crate) fn runs_on(&self, when: When) -> bool {
        !self.commands.is_empty() && (when == When::Completion || self.on.contains(&when))
    }

    /// The key that is wrong and why, if one is.
    pub(crate) fn problem(&self) -> Option<(&'static str, String)> {
        if self.commands.iter().any(|c| c.trim().is_empty()) {
            return Some(("commands", "a command is empty".into()));
        }
        if self.timeout.0.is_zero() {
            return Some(("timeout", "must be longer than 0s".into()));
        }
        self.on.contains(&When::Doctor).then(|| {
            (
                "on",
                "`doctor` is not a moment of a run: use completion, item, checkpoint".into(),
            )
        })
    }
}
