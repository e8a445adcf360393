//! `[notify]` in `ralph.toml`: the channels, which events go out, and the
//! delivery limits (docs/notifications.md). A leaf: imports only `text`'s `Span`. Delivering is `events::notify`.

use serde::{Deserialize, Serialize};

use crate::text::Span;

/// What a notification is about; the `event` field of every payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// The run ended (any outcome but a spent budget).
    RunEnded,
    /// The run stopped because a budget (cost, duration, deadline, quota) was spent.
    BudgetStop,
    BreakerOpen,
    /// A usage limit: the run sleeps until it resets.
    LimitWait,
    /// Something only a person can settle (a merge conflict, verify failing
    /// again and again): `Event::NeedsHuman`.
    NeedsHuman,
    /// `ralph notify --test`.
    Test,
}

impl Kind {
    pub(crate) const ALL: [Kind; 5] = [
        Kind::RunEnded,
        Kind::BudgetStop,
        Kind::BreakerOpen,
        Kind::LimitWait,
        Kind::NeedsHuman,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::RunEnded => "run_ended",
            Kind::BudgetStop => "budget_stop",
            Kind::BreakerOpen => "breaker_open",
            Kind::LimitWait => "limit_wait",
            Kind::NeedsHuman => "needs_human",
            Kind::Test => "test",
        }
    }
}

/// `[notify]`. A value that starts with `$` names an environment variable
/// holding it (`slack = "$SLACK_WEBHOOK"`), so that no secret need be
/// committed with `ralph.toml`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct NotifyConfig {
    /// A JSON POST of the documented payload to this URL.
    pub(crate) webhook: Option<String>,
    /// An ntfy topic URL (`https://ntfy.sh/my-topic`).
    pub(crate) ntfy: Option<String>,
    /// A Slack incoming-webhook URL.
    pub(crate) slack: Option<String>,
    /// A Telegram bot token and the chat it writes to.
    pub(crate) telegram_token: Option<String>,
    pub(crate) telegram_chat: Option<String>,
    /// The Bot API's address (a proxy, or a local server in tests).
    pub(crate) telegram_api: String,
    /// `notify-send` on this machine, when it is installed (macOS:
    /// Notification Center through `osascript`).
    pub(crate) desktop: bool,
    /// A command that sends mail: run with `sh -c`, the text on stdin,
    /// `RALPH_NOTIFY_SUBJECT` and `RALPH_NOTIFY_EVENT` in its environment
    /// (e.g. `mail -s "$RALPH_NOTIFY_SUBJECT" me@example.com`).
    pub(crate) email_command: Option<String>,
    /// Which events are sent (all by default).
    pub(crate) events: Vec<Kind>,
    /// The longest one delivery attempt may take; also the longest the end
    /// of a run waits for notifications still being delivered.
    pub(crate) timeout: Span,
    /// Attempts after a failed one, `backoff`, then twice that, … apart.
    pub(crate) retries: u32,
    pub(crate) backoff: Span,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        NotifyConfig {
            webhook: None,
            ntfy: None,
            slack: None,
            telegram_token: None,
            telegram_chat: None,
            telegram_api: "https://api.telegram.org".into(),
            desktop: false,
            email_command: None,
            events: Kind::ALL.to_vec(),
            timeout: Span::secs(10),
            retries: 3,
            backoff: Span::secs(1),
        }
    }
}

/// The most `notify.retries` may be.
pub(crate) const MAX_RETRIES: u32 = 10;

impl NotifyConfig {
    /// The channels' secret settings as written (a value, or `$NAME`):
    /// the URLs that carry their tokens, and the bot's.
    pub(crate) fn secret_settings(&self) -> [(&'static str, Option<&str>); 5] {
        [
            ("webhook", self.webhook.as_deref()),
            ("ntfy", self.ntfy.as_deref()),
            ("slack", self.slack.as_deref()),
            ("telegram_token", self.telegram_token.as_deref()),
            ("telegram_chat", self.telegram_chat.as_deref()),
        ]
    }

    /// The values of [`Self::secret_settings`] that are set, resolved
    /// (an unset `$NAME` is none): what the agent never gets.
    pub(crate) fn secret_values(&self) -> Vec<String> {
        self.secret_settings()
            .into_iter()
            .filter_map(|(_, raw)| {
                let raw = raw?;
                match variable(raw) {
                    Some(name) => std::env::var(name).ok(),
                    None => Some(raw.to_string()),
                }
            })
            .collect()
    }

    /// The key that is wrong, and why.
    pub(crate) fn check(&self) -> Result<(), (&'static str, String)> {
        if self.retries > MAX_RETRIES {
            return Err((
                "retries",
                format!("{} is more than {MAX_RETRIES}", self.retries),
            ));
        }
        if self.timeout.0.is_zero() {
            return Err(("timeout", "must be longer than 0s".into()));
        }
        for (key, url) in [
            ("webhook", &self.webhook),
            ("ntfy", &self.ntfy),
            ("slack", &self.slack),
        ] {
            if let Some(url) = url
                && !url.starts_with('$')
                && !url.starts_with("https://")
                && !url.starts_with("http://")
            {
                return Err((key, "is not an http(s) URL or a $VARIABLE".into()));
            }
        }
        Ok(())
    }
}

/// The environment variable a setting names (`$NAME`, `${NAME}`), if any.
pub(crate) fn variable(raw: &str) -> Option<&str> {
    let name = raw.strip_prefix('$')?;
    Some(name.trim_start_matches('{').trim_end_matches('}'))
}
