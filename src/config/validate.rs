//! Reading `ralph.toml`'s text into a `Config`: toml's errors told with the
//! key and line they are about (toml names a key only by its position), then
//! the rules no serde type holds (order of thresholds, a usable window,
//! counts and budgets, templates that compile, hook commands without NUL),
//! each refusal naming `section.key` and its line. The sections and their
//! defaults are `schema.rs`.

use std::path::Path;

use super::schema::*;
use crate::error::{Error, Result};

impl Config {
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
        if let Err(e) = crate::config::templates::render_str(
            &self.git.commit_message,
            "git.commit_message",
            commit_message_context(
                1,
                crate::context::Level::L2,
                85.0,
                crate::formats::Trigger::Context,
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
        if let Some(pass) = &self.sandbox.pass_env {
            if let Some(name) = pass
                .iter()
                .find(|k| k.is_empty() || k.contains(['=', '\0']))
            {
                return bad(
                    "sandbox",
                    "pass_env",
                    format!("`{name}` is not an environment variable name"),
                );
            }
            for (key, raw) in self.notify.secret_settings() {
                if let Some(var) = raw.and_then(crate::config::notify::variable)
                    && pass.iter().any(|k| k == var)
                {
                    return bad(
                        "sandbox",
                        "pass_env",
                        format!(
                            "`{var}` holds `notify.{key}`'s secret, which the agent never gets; take it out of the list"
                        ),
                    );
                }
            }
        }
        if self.plan.as_os_str().is_empty() {
            return bad("", "plan", "must name the plan file".into());
        }
        // The prompt file is rewritten every iteration: never over the plan,
        // the config or ralph's own files.
        let prompt = &self.prompt_file;
        if !crate::formats::inside_project(prompt) {
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
            || prompt.starts_with(crate::formats::RALPH_DIR)
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
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(text, Path::new("ralph.toml"))
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
    fn sandbox_pass_env_names_variables_and_never_a_channels_secret() {
        let ok = parse("[sandbox]\npass_env = [\"ANTHROPIC_API_KEY\", \"PGHOST\"]\n").unwrap();
        assert_eq!(ok.sandbox.pass_env.unwrap().len(), 2);
        let e = parse("[sandbox]\n\npass_env = [\"A=B\"]\n").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("`sandbox.pass_env`"), "{e}");
        assert!(e.to_string().contains(":3"), "{e}");
        let e = parse(
            "[notify]\nslack = \"${SLACK_WEBHOOK_URL}\"\n[sandbox]\npass_env = [\"SLACK_WEBHOOK_URL\"]\n",
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("`sandbox.pass_env`") && text.contains(":4"),
            "{text}"
        );
        assert!(text.contains("notify.slack"), "{text}");
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
