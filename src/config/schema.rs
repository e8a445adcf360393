//! `ralph.toml`: the configuration keys of DESIGN.md, their defaults, and
//! their validation (unknown keys and bad values name the key and line).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub(crate) use super::agent::AgentConfig;
pub use super::agent::AgentKind;
use crate::error::{Error, Result};
pub(crate) use crate::rules::breaker::BreakerConfig;
use crate::text::Span;

pub(crate) const FILE_NAME: &str = "ralph.toml";

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub plan: PathBuf,
    pub prompt_file: PathBuf,
    pub agent: AgentConfig,
    #[serde(rename = "loop")]
    pub loop_: LoopConfig,
    pub context: ContextConfig,
    pub breaker: BreakerConfig,
    pub git: GitConfig,
    pub rate_limit: RateLimitConfig,
    pub hooks: HooksConfig,
    pub prompt: crate::config::token_budget::PromptConfig,
    pub(crate) handoff: crate::config::token_budget::HandoffConfig,
    pub(crate) runs: crate::config::RunsConfig,
    pub(crate) verify: crate::config::VerifyConfig,
    pub(crate) notify: crate::config::notify::NotifyConfig,
    pub(crate) quota: crate::rules::quota::QuotaConfig,
    pub(crate) sandbox: crate::config::SandboxConfig,
    pub(crate) workers: crate::config::WorkersConfig,
    pub(crate) fleet: crate::config::FleetConfig,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LoopConfig {
    pub(crate) max_iterations: u32,
    pub(crate) completion_promise: String,
    pub(crate) require_plan_complete: bool,
    pub(crate) iteration_timeout: Span,
    pub(crate) idle_timeout: Span,
    pub(crate) max_duration: Option<Span>,
    pub(crate) max_cost_usd: Option<f64>,
}

/// `context.checkpoint_tokens` unless set. Never binds on a 200k window; on
/// a 1M one (Sonnet 5, Opus 5) L2 would be ~822k, each turn re-reading it
/// all (docs/estimates.md, "Long windows").
pub(crate) const DEFAULT_CHECKPOINT_TOKENS: u64 = 200_000;

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ContextConfig {
    pub(crate) warn_percent: f64,
    pub(crate) checkpoint_percent: f64,
    pub(crate) emergency_percent: f64,
    pub(crate) grace: Span,
    pub(crate) agent_handoff: bool,
    /// At L1, send one message: finish and commit the current item.
    pub(crate) nudge_at_l1: bool,
    /// Items one session may finish while the boundary rule says the next
    /// fits (1: one item per session); docs/estimates.md says why 3.
    pub(crate) items_per_session: u32,
    /// An item estimated above this percent of the usable window is to be
    /// split before it is worked on.
    pub(crate) shard_percent: f64,
    /// Absolute cap: L2 at this many tokens at the latest, L1 at
    /// warn/checkpoint of it ([`DEFAULT_CHECKPOINT_TOKENS`] unless set).
    pub(crate) checkpoint_tokens: Option<u64>,
    /// What an item is estimated at when nothing is known about it, in
    /// percent of the usable window.
    pub(crate) estimate_prior_percent: f64,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GitConfig {
    pub(crate) wip_commit: bool,
    pub(crate) commit_message: String,
    /// New files larger than this many bytes stay out of WIP commits (0: no limit).
    pub(crate) max_file_size: u64,
    /// More new files than this in one WIP commit: the biggest new
    /// directories stay out (0: no limit).
    pub(crate) max_new_files: usize,
    /// Whether new binary files go into WIP commits.
    pub(crate) commit_binaries: bool,
    /// How often, during an iteration, the work tree is recorded on a hidden
    /// snapshot ref (`ralph recover`); "0s" turns snapshots off.
    pub(crate) snapshot_interval: Span,
    /// Snapshot refs of this many runs are kept; older runs' are deleted.
    pub(crate) snapshot_keep_runs: usize,
}

impl GitConfig {
    /// The limits a WIP commit applies to new files.
    pub fn guard(&self) -> crate::repo::Guard {
        crate::repo::Guard {
            max_file_size: self.max_file_size,
            max_new_files: self.max_new_files,
            commit_binaries: self.commit_binaries,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RateLimitConfig {
    pub(crate) wait: bool,
    pub(crate) max_wait: Span,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HooksConfig {
    pub(crate) on_checkpoint: Vec<String>,
    pub(crate) on_iteration_end: Vec<String>,
    pub(crate) on_exit: Vec<String>,
    /// The context crossed up into L1, L2 or L3 (run in the background).
    pub(crate) on_level: Vec<String>,
    /// The circuit breaker opened, went half-open or closed.
    pub(crate) on_breaker: Vec<String>,
    /// A wait for a usage limit to reset begins.
    pub(crate) on_limit_wait: Vec<String>,
    pub(crate) on_verify: Vec<String>,
    /// How long one hook may run before it is killed and logged.
    pub(crate) timeout: Span,
    /// How many times a failed hook command is run again.
    pub(crate) retries: u32,
}

/// The most `hooks.retries` may be: each retry can take `hooks.timeout`.
pub(crate) const MAX_HOOK_RETRIES: u32 = 5;

impl HooksConfig {
    /// Each hook point's key with its commands.
    pub(crate) fn points(&self) -> [(&'static str, &[String]); 7] {
        [
            ("on_checkpoint", &self.on_checkpoint),
            ("on_iteration_end", &self.on_iteration_end),
            ("on_exit", &self.on_exit),
            ("on_level", &self.on_level),
            ("on_breaker", &self.on_breaker),
            ("on_limit_wait", &self.on_limit_wait),
            ("on_verify", &self.on_verify),
        ]
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            plan: "fix_plan.md".into(),
            prompt_file: "PROMPT.md".into(),
            agent: AgentConfig::default(),
            loop_: LoopConfig::default(),
            context: ContextConfig::default(),
            breaker: BreakerConfig::default(),
            git: GitConfig::default(),
            rate_limit: RateLimitConfig::default(),
            hooks: HooksConfig::default(),
            prompt: Default::default(),
            handoff: Default::default(),
            runs: Default::default(),
            verify: Default::default(),
            notify: Default::default(),
            quota: Default::default(),
            sandbox: Default::default(),
            workers: Default::default(),
            fleet: Default::default(),
        }
    }
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            max_iterations: 50,
            completion_promise: "COMPLETE".into(),
            require_plan_complete: true,
            iteration_timeout: Span::secs(60 * 60),
            idle_timeout: Span::secs(10 * 60),
            max_duration: None,
            max_cost_usd: None,
        }
    }
}

impl Default for ContextConfig {
    fn default() -> Self {
        let t = crate::context::Thresholds::DEFAULT;
        ContextConfig {
            warn_percent: t.warn,
            checkpoint_percent: t.checkpoint,
            emergency_percent: t.emergency,
            grace: Span::secs(60),
            agent_handoff: true,
            nudge_at_l1: true,
            items_per_session: 3,
            shard_percent: 60.0,
            checkpoint_tokens: Some(DEFAULT_CHECKPOINT_TOKENS),
            estimate_prior_percent: 20.0,
        }
    }
}

impl Default for GitConfig {
    fn default() -> Self {
        GitConfig {
            wip_commit: true,
            commit_message: "ralph: checkpoint iter {{ iteration }} ({{ label }})".into(),
            max_file_size: 10_000_000,
            max_new_files: 1000,
            commit_binaries: false,
            snapshot_interval: Span::secs(600),
            snapshot_keep_runs: 5,
        }
    }
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig {
            wait: true,
            max_wait: Span::secs(6 * 60 * 60),
        }
    }
}

impl Default for HooksConfig {
    fn default() -> Self {
        HooksConfig {
            on_checkpoint: Vec::new(),
            on_iteration_end: Vec::new(),
            on_exit: Vec::new(),
            on_level: Vec::new(),
            on_breaker: Vec::new(),
            on_limit_wait: Vec::new(),
            on_verify: Vec::new(),
            timeout: Span::secs(60),
            retries: 0,
        }
    }
}

impl Config {
    /// Load `ralph.toml` from `root`, or the defaults when there is none.
    pub fn load(root: &Path) -> Result<Config> {
        let path = root.join(FILE_NAME);
        match std::fs::read(&path) {
            Ok(bytes) => {
                let text = String::from_utf8(bytes)
                    .map_err(|_| Error::config(format!("{} is not UTF-8 text", path.display())))?;
                Config::parse(&text, &path)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(e) => Err(Error::io("cannot read", &path, e)),
        }
    }

    /// The agent program and its leading arguments from `agent.command`.
    pub(crate) fn agent_program(&self) -> (String, Vec<String>) {
        self.agent.program()
    }

    /// The context meter as this config sets it up: `[agent]`'s window and
    /// reserve, `[context]`'s thresholds and `checkpoint_tokens`. The one
    /// constructor: `ralph run`'s iterations, the status line and the
    /// PreCompact hook all start from it, so they agree on the level.
    pub(crate) fn meter(&self) -> crate::context::ContextMeter {
        crate::context::ContextMeter::new(
            self.agent.context_window,
            self.agent.reserve_tokens,
            self.thresholds(),
        )
        .with_checkpoint_cap(self.context.checkpoint_tokens)
    }

    /// Usable percentage thresholds in order L1, L2, L3.
    pub(crate) fn thresholds(&self) -> crate::context::Thresholds {
        crate::context::Thresholds {
            warn: self.context.warn_percent,
            checkpoint: self.context.checkpoint_percent,
            emergency: self.context.emergency_percent,
        }
    }
}

/// What `git.commit_message` can use; the same for validation and for the
/// WIP commit (`checkpoint`).
pub(crate) fn commit_message_context(
    iteration: u32,
    level: crate::context::Level,
    percent: f64,
    trigger: crate::formats::Trigger,
    item: Option<&str>,
    title: &str,
) -> minijinja::Value {
    minijinja::context! {
        iteration => iteration,
        label => crate::formats::checkpoint_label(trigger, level, percent),
        level => level.name(),
        percent => percent.round() as i64,
        trigger => trigger.name(),
        item => item,
        title => title,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(text, Path::new("ralph.toml"))
    }

    #[test]
    fn empty_file_gives_design_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.plan, PathBuf::from("fix_plan.md"));
        assert_eq!(c.agent.reserve_tokens, 33_000);
        assert_eq!(c.loop_.iteration_timeout.0, Duration::from_secs(3600));
        assert_eq!(c.rate_limit.max_wait.0, Duration::from_secs(6 * 3600));
        assert_eq!(c.breaker.cooldown.0, Duration::from_secs(1800));
    }

    #[test]
    fn full_file_parses() {
        let c = parse(
            r#"
plan = "TODO.md"
[agent]
command = "ralph sim 'my scenario.toml'"
args = ["--dangerously-skip-permissions"]
model = "claude-opus-4-1[1m]"
env = { IS_SANDBOX = "1" }
[loop]
max_iterations = 3
max_duration = "8h"
max_cost_usd = 12.5
idle_timeout = "90s"
[context]
grace = "1m30s"
[hooks]
on_checkpoint = ["echo hi"]
"#,
        )
        .unwrap();
        assert_eq!(c.plan, PathBuf::from("TODO.md"));
        assert_eq!(
            c.agent_program(),
            (
                "ralph".to_string(),
                vec!["sim".into(), "my scenario.toml".into()]
            )
        );
        assert_eq!(c.loop_.max_duration, Some(Span::secs(8 * 3600)));
        assert_eq!(c.loop_.idle_timeout, Span::secs(90));
        assert_eq!(c.context.grace, Span::secs(90));
        assert_eq!(c.agent.env["IS_SANDBOX"], "1");
    }
}
