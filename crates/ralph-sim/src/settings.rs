//! The settings of one run: the iteration's options resolved against the real CLI's
//! flags (`--model`, `--permission-mode`) and `RALPH_ITERATION`.

use std::path::PathBuf;
use std::time::Duration;

use crate::scenario::{OnMessage, OnSigint, OnSigterm, Options};
use crate::{Error, Result};

const DEFAULT_MODEL: &str = "claude-sonnet-4-5";
const DEFAULT_WINDOW: u64 = 200_000;

#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// As reported in `system`/`init` (keeps a `[1m]` suffix).
    pub(crate) model: String,
    /// As reported in `message.model` and `modelUsage` (without the suffix).
    pub(crate) api_model: String,
    pub(crate) context_window: u64,
    pub(crate) exit_code: i32,
    pub(crate) on_sigint: OnSigint,
    pub(crate) on_sigterm: OnSigterm,
    pub(crate) on_message: OnMessage,
    pub(crate) comply_delay: Duration,
    pub(crate) handoff_notes: Option<String>,
    pub(crate) reply: String,
    pub(crate) cost_usd: Option<f64>,
    pub(crate) step_delay: Duration,
    pub(crate) record_messages: Option<PathBuf>,
}

impl Settings {
    pub(crate) fn resolve(options: &Options, model_arg: Option<&str>) -> Settings {
        let model = model_arg
            .map(str::to_string)
            .or_else(|| options.model.clone())
            .unwrap_or_else(|| DEFAULT_MODEL.into());
        let one_million = model.ends_with("[1m]") || generation(&model).is_some_and(|g| g >= 5);
        let api_model = model.trim_end_matches("[1m]").to_string();
        Settings {
            context_window: options.context_window.unwrap_or(if one_million {
                1_000_000
            } else {
                DEFAULT_WINDOW
            }),
            model,
            api_model,
            exit_code: options.exit_code.unwrap_or(0),
            on_sigint: options.on_sigint.unwrap_or_default(),
            on_sigterm: options.on_sigterm.unwrap_or_default(),
            on_message: options.on_message.unwrap_or_default(),
            comply_delay: Duration::from_millis(options.comply_delay_ms.unwrap_or(0)),
            handoff_notes: options.handoff_notes.clone(),
            reply: options
                .reply
                .clone()
                .unwrap_or_else(|| "Noted. Nothing else to do in this session.".into()),
            cost_usd: options.cost_usd,
            step_delay: Duration::from_millis(options.step_delay_ms.unwrap_or(0)),
            record_messages: options.record_messages.clone(),
        }
    }
}

pub(crate) fn iteration_from_env() -> Result<usize> {
    match std::env::var("RALPH_ITERATION") {
        Err(std::env::VarError::NotPresent) => Ok(1),
        Ok(value) => value
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| {
                Error::Usage(format!(
                    "RALPH_ITERATION must be a positive integer, got {value:?}"
                ))
            }),
        Err(std::env::VarError::NotUnicode(_)) => Err(Error::Usage(
            "RALPH_ITERATION must be a positive integer".into(),
        )),
    }
}

/// `--model M` or `--model=M` among the flags meant for the real CLI.
pub(crate) fn model_arg(args: &[String]) -> Option<String> {
    let mut it = args.iter();
    let mut found = None;
    while let Some(arg) = it.next() {
        if arg == "--model" {
            found = it.next().cloned();
        } else if let Some(value) = arg.strip_prefix("--model=") {
            found = Some(value.to_string());
        }
    }
    found
}

pub(crate) fn permission_mode(args: &[String]) -> String {
    let mut mode = "default".to_string();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--dangerously-skip-permissions" {
            mode = "bypassPermissions".into();
        } else if arg == "--permission-mode" {
            if let Some(value) = it.next() {
                mode = value.clone();
            }
        } else if let Some(value) = arg.strip_prefix("--permission-mode=") {
            mode = value.into();
        }
    }
    mode
}

/// The model generation, as the real CLI runs it: the first number after
/// `claude-` (`claude-opus-5-5`: 5). Claude Code 2.1.328 and 2.1.330 give
/// generation 5 on a 1M window without the `[1m]` suffix.
fn generation(model: &str) -> Option<u32> {
    let (_, rest) = model.split_once("claude-")?;
    rest.split(['-', '[']).find_map(|w| w.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_flag_wins_and_1m_suffix_sets_the_window() {
        let options = Options {
            model: Some("claude-opus-4-1".into()),
            ..Options::default()
        };
        let s = Settings::resolve(&options, None);
        assert_eq!(
            (s.model.as_str(), s.context_window),
            ("claude-opus-4-1", 200_000)
        );
        let s = Settings::resolve(&options, Some("claude-sonnet-4-5[1m]"));
        assert_eq!(s.model, "claude-sonnet-4-5[1m]");
        assert_eq!(s.api_model, "claude-sonnet-4-5");
        assert_eq!(s.context_window, 1_000_000);
        let s = Settings::resolve(&options, Some("claude-sonnet-5"));
        assert_eq!(
            (s.api_model.as_str(), s.context_window),
            ("claude-sonnet-5", 1_000_000)
        );
        let s = Settings::resolve(&options, Some("claude-sonnet-4-5-20250929"));
        assert_eq!(s.context_window, 200_000);
        let args: Vec<String> = ["-p", "--model=x", "--verbose", "--model", "y"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(model_arg(&args).as_deref(), Some("y"));
        assert_eq!(model_arg(&args[..3]).as_deref(), Some("x"));
    }
}
