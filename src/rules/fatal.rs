//! Errors that no further session can get past: the agent is not logged in
//! or its key is refused, the account has no credit, the agent's program
//! cannot be started. Each would fail every iteration of the night the
//! same way, paid or not, so the first one stops the run (the breaker's
//! `fatal` rule) with what to do; other errors keep the breaker's counting.
//!
//! Read from what each kind reports (docs/agents.md): an `is_error`
//! result's HTTP status (401/403 authentication, 402 payment; Codex's
//! `unauthorized` and opencode's `statusCode` are decoded to the same
//! numbers) and its words (Claude Code's "Credit balance is too low" comes
//! as `subtype: "success"`, `is_error: true`, often with a 400; OpenAI's
//! `insufficient_quota` is a 429 that no wait cures), Gemini CLI's exit
//! codes (41 authentication, 52 configuration), and a program that is gone
//! or not executable.

use crate::stream::ResultMessage;

/// Which kind of fatal error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FatalKind {
    Authentication,
    Billing,
    CannotStart,
}

/// A fatal error: what happened and what the user does about it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fatal {
    pub(crate) kind: FatalKind,
    pub(crate) message: String,
    pub(crate) hint: String,
}

/// The agent CLI whose words are judged (the config's `AgentKind`, passed
/// in: rules depend on no configuration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum AgentKind {
    #[default]
    Claude,
    Codex,
    Opencode,
    Gemini,
}

impl AgentKind {
    /// The CLI's name as people know it (the one list of these names:
    /// `config::AgentKind::product` asks here).
    pub(crate) fn product(self) -> &'static str {
        match self {
            AgentKind::Claude => "Claude Code",
            AgentKind::Codex => "Codex",
            AgentKind::Opencode => "opencode",
            AgentKind::Gemini => "Gemini CLI",
        }
    }
}

/// What one iteration showed of its agent's end.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Signs<'a> {
    pub(crate) agent: AgentKind,
    /// How to install the agent's CLI (`config::AgentKind::install_hint`).
    pub(crate) install_hint: &'a str,
    /// The program could not be started: missing or not executable.
    pub(crate) cannot_start: Option<&'a str>,
    pub(crate) result: Option<&'a ResultMessage>,
    pub(crate) exit_code: Option<i32>,
}

/// Words of the agents' authentication refusals (lowercase).
const AUTH_WORDS: [&str; 9] = [
    "invalid api key",
    "please run /login",
    "authentication_error",
    "authentication failed",
    "not logged in",
    "oauth token has expired",
    "invalid x-api-key",
    "providerautherror",
    "api key not valid",
];

/// Words of billing refusals (lowercase).
/// Not "exceeded your current quota … billing details": Gemini's per-minute
/// free-tier quota says the same and is retried after a wait.
const BILLING_WORDS: [&str; 4] = [
    "credit balance is too low",
    "insufficient_quota",
    "billing_error",
    "payment required",
];

/// Gemini CLI's exit codes (its `FatalAuthenticationError`, `FatalConfigError`).
const GEMINI_AUTH_EXIT: i32 = 41;
const GEMINI_CONFIG_EXIT: i32 = 52;

/// The fatal error these signs show, if any.
pub(crate) fn classify(signs: Signs<'_>) -> Option<Fatal> {
    let agent = signs.agent;
    if let Some(why) = signs.cannot_start {
        return Some(cannot_start(agent, signs.install_hint, why.to_string()));
    }
    if let Some(r) = signs.result.filter(|r| r.is_error) {
        let words = std::iter::once(r.text.as_deref().unwrap_or(""))
            .chain(r.errors.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("\n");
        let said = crate::text::cut(words.lines().next().unwrap_or("").trim(), 200);
        let lower = words.to_lowercase();
        let has = |list: &[&str]| list.iter().any(|w| lower.contains(w));
        if matches!(r.api_error_status, Some(402)) || has(&BILLING_WORDS) {
            return Some(billing(agent, said));
        }
        if matches!(r.api_error_status, Some(401 | 403)) || has(&AUTH_WORDS) {
            return Some(authentication(agent, said));
        }
    }
    if agent == AgentKind::Gemini {
        match signs.exit_code {
            Some(GEMINI_AUTH_EXIT) => {
                return Some(authentication(
                    agent,
                    format!("Gemini CLI exited with {GEMINI_AUTH_EXIT} (authentication)"),
                ));
            }
            Some(GEMINI_CONFIG_EXIT) => {
                return Some(cannot_start(
                    agent,
                    signs.install_hint,
                    format!("Gemini CLI exited with {GEMINI_CONFIG_EXIT} (configuration)"),
                ));
            }
            _ => {}
        }
    }
    None
}

fn authentication(agent: AgentKind, said: String) -> Fatal {
    let login = match agent {
        AgentKind::Claude => {
            "log Claude Code in again (`claude` then `/login`), or give it a valid ANTHROPIC_API_KEY ([agent] env)"
        }
        AgentKind::Codex => "run `codex login`, or give Codex a valid OPENAI_API_KEY ([agent] env)",
        AgentKind::Opencode => {
            "run `opencode auth login` for the provider, or give it a valid key ([agent] env)"
        }
        AgentKind::Gemini => {
            "run `gemini` once to log in, or give it a valid GEMINI_API_KEY ([agent] env) and security.auth.selectedType in ~/.gemini/settings.json"
        }
    };
    Fatal {
        kind: FatalKind::Authentication,
        message: format!("{} refused the login: {said}", agent.product()),
        hint: format!("{login}; then `ralph run --reset-breaker`"),
    }
}

fn billing(agent: AgentKind, said: String) -> Fatal {
    Fatal {
        kind: FatalKind::Billing,
        message: format!(
            "{}'s account cannot pay for the session: {said}",
            agent.product()
        ),
        hint: "add credit to the account the agent uses (or log it in with a subscription); then `ralph run --reset-breaker`".into(),
    }
}

fn cannot_start(agent: AgentKind, install_hint: &str, why: String) -> Fatal {
    Fatal {
        kind: FatalKind::CannotStart,
        message: format!("{} cannot start: {why}", agent.product()),
        hint: format!(
            "check agent.command in ralph.toml and `ralph doctor` ({}); then `ralph run --reset-breaker`",
            install_hint
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(status: Option<u64>, text: &str, errors: &[&str]) -> ResultMessage {
        ResultMessage {
            subtype: "success".into(),
            is_error: true,
            api_error_status: status,
            text: Some(text.into()),
            errors: errors.iter().map(|e| e.to_string()).collect(),
            ..ResultMessage::default()
        }
    }

    /// (kind, cannot start, result, exit code) → the fatal kind
    type Case<'a> = (
        AgentKind,
        Option<&'a str>,
        Option<&'a ResultMessage>,
        Option<i32>,
        Option<FatalKind>,
    );

    #[test]
    fn fatal_errors_of_every_kind_and_the_retryable_ones() {
        use AgentKind::*;
        use FatalKind::*;
        let claude_billing = result(
            Some(400),
            "Credit balance is too low · Add funds: https://console.anthropic.com/settings/billing",
            &[],
        );
        let claude_login = result(Some(401), "Invalid API key · Please run /login", &[]);
        let expired = result(
            None,
            "OAuth token has expired. Please obtain a new token",
            &[],
        );
        let codex_unauthorized = result(Some(401), "unexpected status 401 Unauthorized", &[]);
        let openai_quota = result(
            Some(429),
            "insufficient_quota: You exceeded your current quota, please check your plan and billing details.",
            &[],
        );
        let gemini_minute_quota = result(
            Some(429),
            "You exceeded your current quota, please check your plan and billing details. Please retry in 41.6s.",
            &[],
        );
        let opencode_auth = result(
            None,
            "Unauthorized for provider anthropic",
            &["ProviderAuthError"],
        );
        let forbidden = result(Some(403), "Forbidden", &[]);
        let payment = result(Some(402), "API Error: 402 billing_error", &[]);
        let overloaded = result(Some(529), "Overloaded", &[]);
        let limit = result(
            Some(429),
            "You've hit your session limit · resets 3:45pm",
            &[],
        );
        let server = result(Some(500), "internal server error", &[]);
        let too_long = result(Some(400), "Prompt is too long", &[]);
        let not_error = ResultMessage {
            is_error: false,
            ..claude_login.clone()
        };
        // (kind, cannot start, result, exit code) → the fatal kind
        let table: Vec<Case> = vec![
            (Claude, None, Some(&claude_billing), Some(1), Some(Billing)),
            (
                Claude,
                None,
                Some(&claude_login),
                Some(1),
                Some(Authentication),
            ),
            (Claude, None, Some(&expired), Some(1), Some(Authentication)),
            (
                Claude,
                None,
                Some(&forbidden),
                Some(1),
                Some(Authentication),
            ),
            (Claude, None, Some(&payment), Some(1), Some(Billing)),
            (
                Codex,
                None,
                Some(&codex_unauthorized),
                None,
                Some(Authentication),
            ),
            (Codex, None, Some(&openai_quota), None, Some(Billing)),
            (Gemini, None, Some(&gemini_minute_quota), None, None),
            (
                Opencode,
                None,
                Some(&opencode_auth),
                Some(1),
                Some(Authentication),
            ),
            (Gemini, None, None, Some(41), Some(Authentication)),
            (Gemini, None, None, Some(52), Some(CannotStart)),
            (
                Claude,
                Some("No such file or directory"),
                None,
                None,
                Some(CannotStart),
            ),
            // Retryable or the agent's own: the breaker counts them as before.
            (Claude, None, Some(&overloaded), Some(1), None),
            (Claude, None, Some(&limit), Some(1), None),
            (Claude, None, Some(&server), Some(1), None),
            (Claude, None, Some(&too_long), Some(1), None),
            (Claude, None, Some(&not_error), Some(0), None),
            (Claude, None, None, Some(41), None),
            (Gemini, None, None, Some(53), None),
            (Gemini, None, None, Some(1), None),
        ];
        for (i, (agent, cannot_start, result, exit_code, kind)) in table.into_iter().enumerate() {
            let fatal = classify(Signs {
                agent,
                install_hint: "install it",
                cannot_start,
                result,
                exit_code,
            });
            assert_eq!(fatal.as_ref().map(|f| f.kind), kind, "case {i}");
            if let Some(f) = fatal {
                assert!(f.message.starts_with(agent.product()), "{}", f.message);
                assert!(
                    f.hint.ends_with("`ralph run --reset-breaker`"),
                    "{}",
                    f.hint
                );
            }
        }
    }

    #[test]
    fn the_message_quotes_the_agent_and_the_hint_names_its_login() {
        let r = result(Some(401), "Invalid API key · Please run /login", &[]);
        let f = classify(Signs {
            agent: AgentKind::Claude,
            result: Some(&r),
            ..Signs::default()
        })
        .unwrap();
        assert_eq!(
            f.message,
            "Claude Code refused the login: Invalid API key · Please run /login"
        );
        assert!(f.hint.starts_with("log Claude Code in again"), "{}", f.hint);
        let f = classify(Signs {
            agent: AgentKind::Codex,
            result: Some(&r),
            ..Signs::default()
        })
        .unwrap();
        assert!(f.hint.starts_with("run `codex login`"), "{}", f.hint);
    }
}
