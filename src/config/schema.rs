//! `ralph.toml`: the configuration keys of DESIGN.md, their defaults, and
//! their validation (unknown keys and bad values name the key and line).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub(crate) use super::agent::AgentConfig;
pub use super::agent::AgentKind;
pub(crate) use crate::config::span::{Span, format_duration};
use crate::error::{Error, Result};
pub(crate) use crate::rules::breaker::BreakerConfig;

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
    pub(crate) runs: crate::agent::transcript::RunsConfig,
    pub(crate) verify: crate::hooks::verify::checks::VerifyConfig,
    pub(crate) notify: crate::events::notify::config::NotifyConfig,
    pub(crate) quota: crate::rules::quota::QuotaConfig,
    pub(crate) sandbox: crate::agent::sandbox::SandboxConfig,
    pub(crate) workers: crate::workers::WorkersConfig,
    pub(crate) fleet: crate::workers::fleet::FleetConfig,
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
    pub(crate) fn guard(&self) -> crate::repo::Guard {
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

    /// Parse and validate the text of a config file; `path` is for messages.
    pub(crate) fn parse(text: &str, path: &Path) -> Result<Config> {
        let config: Config = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| {
                text.as_bytes()[..s.start.min(text.len())]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count()
                    + 1
            });
            let location = line.map_or(String::new(), |l| format!(":{l}"));
            // toml names the offending key only by position: say which it is.
            let key = e
                .span()
                .and_then(|s| key_at(text, s.start))
                .map_or(String::new(), |k| format!("`{k}`: "));
            Error::config(format!(
                "invalid configuration in {}{location}: {key}{}",
                path.display(),
                e.message()
            ))
            .with_hint("see `ralph init` for a commented ralph.toml with every key and its default")
        })?;
        config.validate(text, path)?;
        Ok(config)
    }

    fn validate(&self, text: &str, path: &Path) -> Result<()> {
        let bad = |section: &str, key: &str, why: String| {
            let line = line_of(text, section, key).map_or(String::new(), |l| format!(":{l}"));
            let name = if section.is_empty() {
                key.to_string()
            } else {
                format!("{section}.{key}")
            };
            Err(Error::config(format!(
                "invalid value for `{name}` in {}{line}: {why}",
                path.display()
            )))
        };
        let c = &self.context;
        for (key, v) in [
            ("warn_percent", c.warn_percent),
            ("checkpoint_percent", c.checkpoint_percent),
            ("emergency_percent", c.emergency_percent),
            ("shard_percent", c.shard_percent),
            ("estimate_prior_percent", c.estimate_prior_percent),
        ] {
            if !(v > 0.0 && v <= 100.0) {
                return bad(
                    "context",
                    key,
                    format!("{v} is not a percentage in (0, 100]"),
                );
            }
        }
        // Out of order: name the key of the pair that the file sets (the
        // other may be a default the user never wrote).
        for ((low, lv), (high, hv)) in [
            (
                ("warn_percent", c.warn_percent),
                ("checkpoint_percent", c.checkpoint_percent),
            ),
            (
                ("checkpoint_percent", c.checkpoint_percent),
                ("emergency_percent", c.emergency_percent),
            ),
        ] {
            if lv >= hv {
                let key = if line_of(text, "context", low).is_some() {
                    low
                } else {
                    high
                };
                return bad(
                    "context",
                    key,
                    format!("{low} ({lv}) must be below {high} ({hv})"),
                );
            }
        }
        if c.checkpoint_tokens == Some(0) {
            return bad("context", "checkpoint_tokens", "must be at least 1".into());
        }
        if c.items_per_session == 0 {
            return bad("context", "items_per_session", "must be at least 1".into());
        }
        if let Some(command) = &self.agent.command
            && (command.trim().is_empty() || shlex::split(command).is_none())
        {
            return bad("agent", "command", "empty or unbalanced quotes".into());
        }
        let a = &self.agent;
        if let Some(why) = crate::context::no_usable_window(a.context_window, a.reserve_tokens) {
            // Name the key the file sets (the other may be a default).
            let window_only =
                a.context_window != 0 && line_of(text, "agent", "reserve_tokens").is_none();
            let key = if window_only {
                "context_window"
            } else {
                "reserve_tokens"
            };
            return bad("agent", key, why);
        }
        if self.runs.keep == 0 {
            return bad(
                "runs",
                "keep",
                "must be at least 1 (the current run)".into(),
            );
        }
        if self.loop_.max_iterations == 0 {
            return bad("loop", "max_iterations", "must be at least 1".into());
        }
        if self.loop_.completion_promise.trim().is_empty() {
            return bad("loop", "completion_promise", "must not be empty".into());
        }
        if let Some(cost) = self.loop_.max_cost_usd
            && !(cost > 0.0 && cost.is_finite())
        {
            return bad(
                "loop",
                "max_cost_usd",
                format!("{cost} is not a positive amount"),
            );
        }
        for (key, span) in [
            ("iteration_timeout", self.loop_.iteration_timeout),
            ("idle_timeout", self.loop_.idle_timeout),
        ] {
            if span.0.is_zero() {
                return bad("loop", key, "must be longer than 0s".into());
            }
        }
        for (key, v) in [
            ("no_progress", self.breaker.no_progress),
            ("same_error", self.breaker.same_error),
            ("consecutive_failures", self.breaker.consecutive_failures),
        ] {
            if v == 0 {
                return bad("breaker", key, "must be at least 1".into());
            }
        }
        (self.verify.problem()).map_or(Ok(()), |(key, why)| bad("verify", key, why))?;
        (self.fleet.problem()).map_or(Ok(()), |(key, why)| bad("fleet", key, why))?;
        if self.hooks.retries > MAX_HOOK_RETRIES {
            return bad(
                "hooks",
                "retries",
                format!("{} is more than {MAX_HOOK_RETRIES}", self.hooks.retries),
            );
        }
        for (key, span) in [
            ("max_duration", self.loop_.max_duration),
            ("timeout", Some(self.hooks.timeout)),
        ] {
            if span.is_some_and(|s| s.0.is_zero()) {
                let section = if key == "timeout" { "hooks" } else { "loop" };
                return bad(section, key, "must be longer than 0s".into());
            }
        }
        // Rendered now with sample values, so that an undefined variable is
        // an error here and not a silently replaced message at 3 a.m.
        if let Err(e) = crate::prompt::templates::render_str(
            &self.git.commit_message,
            "git.commit_message",
            commit_message_context(
                1,
                crate::context::Level::L2,
                85.0,
                crate::state::Trigger::Context,
                Some("item"),
                "title",
            ),
        ) {
            return bad("git", "commit_message", format!("template error: {e}"));
        }
        // What reaches a process (exec, environment) cannot hold a NUL byte.
        let a = &self.agent;
        let texts = a
            .command
            .iter()
            .map(|c| ("agent", "command", c))
            .chain(a.model.iter().map(|m| ("agent", "model", m)))
            .chain(a.args.iter().map(|s| ("agent", "args", s)))
            .chain(
                a.env
                    .iter()
                    .flat_map(|(k, v)| [("agent", "env", k), ("agent", "env", v)]),
            )
            .chain(
                self.hooks
                    .points()
                    .into_iter()
                    .flat_map(|(key, cmds)| cmds.iter().map(move |s| ("hooks", key, s))),
            );
        for (section, key, text) in texts {
            if text.contains('\0') {
                return bad(section, key, "contains a NUL character".into());
            }
        }
        if let Some(name) = a.env.keys().find(|k| k.is_empty() || k.contains('=')) {
            return bad(
                "agent",
                "env",
                format!("`{name}` is not an environment variable name"),
            );
        }
        for (section, max) in [
            ("prompt", self.prompt.max_tokens),
            ("handoff", self.handoff.max_tokens),
        ] {
            if max < crate::config::token_budget::MIN_TOKENS {
                return bad(
                    section,
                    "max_tokens",
                    format!("{max} is below {}", crate::config::token_budget::MIN_TOKENS),
                );
            }
        }
        for (section, check) in [
            ("notify", self.notify.check()),
            ("quota", self.quota.check()),
            ("workers", self.workers.check()),
        ] {
            if let Err((key, why)) = check {
                return bad(section, key, why);
            }
        }
        if self.plan.as_os_str().is_empty() {
            return bad("", "plan", "must name the plan file".into());
        }
        // The prompt file is rewritten every iteration: never over the plan,
        // the config or ralph's own files.
        let prompt = &self.prompt_file;
        if !crate::state::ownership::inside_project(prompt) {
            return bad(
                "",
                "prompt_file",
                format!(
                    "`{}` is inside .git/ or outside the project; name a file in the project",
                    prompt.display()
                ),
            );
        }
        if prompt.as_os_str().is_empty()
            || prompt.starts_with(crate::repo::RALPH_DIR)
            || *prompt == self.plan
            || *prompt == Path::new(FILE_NAME)
        {
            return bad(
                "",
                "prompt_file",
                format!(
                    "`{}` cannot be the prompt file (it is rewritten every iteration)",
                    prompt.display()
                ),
            );
        }
        Ok(())
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
    trigger: crate::state::Trigger,
    item: Option<&str>,
    title: &str,
) -> minijinja::Value {
    minijinja::context! {
        iteration => iteration,
        label => crate::state::checkpoint_label(trigger, level, percent),
        level => level.name(),
        percent => percent.round() as i64,
        trigger => trigger.name(),
        item => item,
        title => title,
    }
}

/// The dotted name (`loop.max_iterations`) of the key whose value or name
/// sits at byte `offset`: the nearest `key =` at or above that line (a
/// multi-line array spans lines) under the nearest `[table]` header.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let line_end = text
        .get(offset..)?
        .find('\n')
        .map_or(text.len(), |i| offset + i);
    let upto = &text[..line_end];
    let mut key = None;
    for line in upto.lines().rev() {
        let t = line.trim().trim_start_matches('\u{feff}');
        if let Some(name) = t.strip_prefix('[') {
            let table = name.trim_start_matches('[').trim_end_matches(']').trim();
            let table = table.replace(['"', '\''], "");
            return Some(match key {
                Some(k) => format!("{table}.{k}"),
                None => table,
            });
        }
        if key.is_none()
            && let Some((k, _)) = t.split_once('=')
            && !k.trim().is_empty()
        {
            key = Some(k.trim().replace(['"', '\''], ""));
        }
    }
    key
}

/// The 1-based line of `key = …` inside `[section]` (or the top level).
fn line_of(text: &str, section: &str, key: &str) -> Option<usize> {
    let mut current = String::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            current = name.trim().to_string();
            continue;
        }
        if current == section
            && let Some(rest) = t.strip_prefix(key)
            && rest.trim_start().starts_with('=')
        {
            return Some(i + 1);
        }
    }
    None
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

    #[test]
    fn unknown_key_names_key_and_line() {
        let e = parse("[loop]\nmax_iterations = 3\nmax_iteration = 4\n").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("max_iteration"), "{text}");
        assert!(text.contains("ralph.toml:3"), "{text}");
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn wrong_type_names_line() {
        let e = parse("[context]\n\nwarn_percent = \"high\"\n").unwrap_err();
        assert!(e.to_string().contains("ralph.toml:3"), "{e}");
    }

    #[test]
    fn bad_duration_is_explained() {
        let e = parse("[loop]\nidle_timeout = \"soon\"\n").unwrap_err();
        assert!(e.to_string().contains("not a duration"), "{e}");
        assert!(e.to_string().contains(":2"), "{e}");
    }

    #[test]
    fn thresholds_must_be_ordered() {
        let e = parse("[context]\nwarn_percent = 90\ncheckpoint_percent = 85\n").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("context.warn_percent"), "{text}");
        assert!(text.contains(":2"), "{text}");
        let e = parse("[context]\nemergency_percent = 101\n").unwrap_err();
        assert!(e.to_string().contains("emergency_percent"));
        let e = parse("[context]\ncheckpoint_percent = 96\n").unwrap_err();
        assert!(e.to_string().contains("checkpoint_percent"));
    }

    #[test]
    fn a_reserve_that_leaves_no_usable_window_is_refused_naming_both_keys() {
        for (toml, key) in [
            ("[agent]\ncontext_window = 32000\n", "agent.context_window"),
            (
                "[agent]\ncontext_window = 32000\nreserve_tokens = 40000\n",
                "agent.reserve_tokens",
            ),
            // A detected window is at least 200,000.
            ("[agent]\nreserve_tokens = 300000\n", "agent.reserve_tokens"),
        ] {
            let e = parse(toml).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("invalid value for `{key}`")),
                "{text}"
            );
            assert!(
                text.contains("agent.reserve_tokens (") && text.contains("agent.context_window ("),
                "{text}"
            );
        }
        assert!(parse("[agent]\ncontext_window = 40000\nreserve_tokens = 8000\n").is_ok());
        // Issue 22: a 1-token usable window ("L3 at 2000000%") is refused too.
        let tiny = parse("[agent]\ncontext_window = 1000\nreserve_tokens = 999\n").unwrap_err();
        assert!(tiny.to_string().contains("agent.reserve_tokens"), "{tiny}");
        assert!(tiny.to_string().contains("leaves 1 of"), "{tiny}");
        assert!(parse("[agent]\ncontext_window = 20000\nreserve_tokens = 10001\n").is_err());
        assert!(parse("[agent]\ncontext_window = 20000\nreserve_tokens = 10000\n").is_ok());
        assert!(parse("[agent]\nreserve_tokens = 100000\n").is_ok());
    }

    #[test]
    fn new_hook_points_and_retries_are_validated() {
        let c = parse("[hooks]\non_level = [\"a\"]\non_breaker = [\"b\"]\non_limit_wait = [\"c\"]\nretries = 5\n").unwrap();
        assert_eq!(c.hooks.retries, 5);
        assert_eq!(c.hooks.points()[3], ("on_level", &["a".to_string()][..]));
        let e = parse("[hooks]\n\nretries = 6\n").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("`hooks.retries`"), "{e}");
        assert!(e.to_string().contains(":3"), "{e}");
        for key in ["on_level", "on_breaker", "on_limit_wait"] {
            let e = parse(&format!("[hooks]\n{key} = [\"a\\u0000\"]\n")).unwrap_err();
            assert!(e.to_string().contains(&format!("`hooks.{key}`")), "{e}");
        }
    }

    #[test]
    fn zero_counts_and_bad_budgets_are_refused() {
        assert!(parse("[loop]\nmax_iterations = 0\n").is_err());
        assert!(parse("[breaker]\nsame_error = 0\n").is_err());
        assert!(parse("[loop]\nmax_cost_usd = -1.0\n").is_err());
        assert!(parse("[agent]\ncommand = \"\"\n").is_err());
        assert!(parse("[agent]\ncontext_window = 1000\n").is_err());
        assert!(parse("[git]\ncommit_message = \"{{ oops\"\n").is_err());
    }

    /// Whatever ralph.toml holds, loading it gives a config or a config
    /// error (exit 2) that names the file, never a panic: known keys with
    /// values of every type, unknown keys, broken lines, odd bytes.
    #[test]
    fn any_config_text_parses_or_is_a_named_error() {
        use proptest::prelude::*;
        let key = prop_oneof![
            Just("plan"),
            Just("prompt_file"),
            Just("command"),
            Just("args"),
            Just("model"),
            Just("context_window"),
            Just("reserve_tokens"),
            Just("env"),
            Just("max_iterations"),
            Just("completion_promise"),
            Just("idle_timeout"),
            Just("max_cost_usd"),
            Just("warn_percent"),
            Just("checkpoint_percent"),
            Just("grace"),
            Just("no_progress"),
            Just("commit_message"),
            Just("max_wait"),
            Just("on_exit"),
            Just("timeout"),
            Just("unknown_key"),
        ];
        let value = prop_oneof![
            Just("1".to_string()),
            Just("-1".to_string()),
            Just("1e999".to_string()),
            Just("nan".to_string()),
            Just("true".to_string()),
            Just("\"10m\"".to_string()),
            Just("\"{{ iteration }}\"".to_string()),
            Just("\"{{ x\"".to_string()),
            Just("[\"a\", 1]".to_string()),
            Just("{ A = \"b\" }".to_string()),
            Just("\"\\u0000\"".to_string()),
            Just("".to_string()),
            "\\PC{0,12}",
        ];
        let line = prop_oneof![
            (key, value).prop_map(|(k, v)| format!("{k} = {v}")),
            prop_oneof![
                Just("[agent]"),
                Just("[loop]"),
                Just("[context]"),
                Just("[breaker]"),
                Just("[git]"),
                Just("[rate_limit]"),
                Just("[hooks]"),
                Just("[agent.env]"),
                Just("[nope]"),
                Just("[loop"),
                Just("\u{feff}[loop]"),
            ]
            .prop_map(str::to_string),
            "\\PC{0,20}",
        ];
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
            cases: 2000,
            failure_persistence: None,
            ..Default::default()
        });
        runner
            .run(&prop::collection::vec(line, 0..8), |lines| {
                let text = lines.join("\n");
                if let Err(e) = parse(&text) {
                    prop_assert_eq!(e.exit_code(), 2);
                    prop_assert!(e.to_string().contains("ralph.toml"), "{}", e);
                }
                Ok(())
            })
            .unwrap();
    }
}
