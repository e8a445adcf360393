//! Sending notices: one worker thread per channel, so that a channel that
//! hangs holds up neither the loop nor the other channels; each attempt
//! bounded by `notify.timeout`, failed ones retried with back-off. The
//! [`Notifier`] is a [`Sink`] on the supervisor's bus; when the run ends it
//! waits at most `notify.timeout` for what is still being delivered.

use std::path::Path;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::message::{self, Notice, Watch};
use crate::config::notify::{Kind, NotifyConfig};
use crate::error::{Error, Result};
use crate::events::Sink;
use crate::formats::{Event, Record};

/// Where notices go; secrets (URLs with tokens) already resolved.
#[derive(Debug, Clone)]
pub(crate) enum Channel {
    Webhook(String),
    Ntfy(String),
    Slack(String),
    Telegram { url: String, chat: String },
    Desktop,
    Email(String),
}

impl Channel {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Channel::Webhook(_) => "webhook",
            Channel::Ntfy(_) => "ntfy",
            Channel::Slack(_) => "slack",
            Channel::Telegram { .. } => "telegram",
            Channel::Desktop => "desktop",
            Channel::Email(_) => "email",
        }
    }

    /// The channels `config` names. A `$NAME` value is read from the
    /// environment (an unset one is an error) and remembered as a secret.
    pub(crate) fn all(config: &NotifyConfig) -> Result<Vec<Channel>> {
        let mut secrets = std::collections::BTreeMap::new();
        let mut value = |key: &str, v: &Option<String>| -> Result<Option<String>> {
            let Some(v) = v else { return Ok(None) };
            let resolved = match crate::config::notify::variable(v) {
                Some(var) => match std::env::var(var) {
                    // An empty value is as unusable as none: every notice of
                    // the night would fail.
                    Ok(v) if !v.trim().is_empty() => v,
                    Ok(_) => {
                        return Err(Error::config(format!(
                            "`notify.{key}` names the environment variable {var}, which is empty"
                        )));
                    }
                    Err(_) => {
                        return Err(Error::config(format!(
                            "`notify.{key}` names the environment variable {var}, which is not set"
                        )));
                    }
                },
                None => v.clone(),
            };
            // Labelled as a credential so that it is redacted everywhere.
            secrets.insert(
                format!("RALPH_NOTIFY_{}_TOKEN", key.to_uppercase()),
                resolved.clone(),
            );
            Ok(Some(resolved))
        };
        let mut out = Vec::new();
        if let Some(url) = value("webhook", &config.webhook)? {
            out.push(Channel::Webhook(url));
        }
        if let Some(url) = value("ntfy", &config.ntfy)? {
            out.push(Channel::Ntfy(url));
        }
        if let Some(url) = value("slack", &config.slack)? {
            out.push(Channel::Slack(url));
        }
        match (
            value("telegram_token", &config.telegram_token)?,
            value("telegram_chat", &config.telegram_chat)?,
        ) {
            (Some(token), Some(chat)) => out.push(Channel::Telegram {
                url: format!(
                    "{}/bot{token}/sendMessage",
                    config.telegram_api.trim_end_matches('/')
                ),
                chat,
            }),
            (None, None) => {}
            _ => {
                return Err(Error::config(
                    "`notify.telegram_token` and `notify.telegram_chat` go together",
                ));
            }
        }
        if config.desktop {
            out.push(Channel::Desktop);
        }
        if let Some(command) = &config.email_command {
            out.push(Channel::Email(command.clone()));
        }
        crate::text::secrets::remember(&secrets);
        Ok(out)
    }

    /// One attempt.
    fn send(
        &self,
        n: &Notice,
        http: &ureq::Agent,
        root: &Path,
        timeout: Duration,
    ) -> std::result::Result<(), String> {
        let post = |url: &str, body: serde_json::Value| {
            http.post(url)
                .header("Content-Type", "application/json")
                .send(body.to_string())
                .map(drop)
                .map_err(describe)
        };
        match self {
            Channel::Webhook(url) => post(url, message::webhook_body(n)),
            Channel::Slack(url) => post(url, message::slack_body(n)),
            Channel::Telegram { url, chat } => post(url, message::telegram_body(n, chat)),
            Channel::Ntfy(url) => {
                let mut request = http.post(url);
                for (name, value) in message::ntfy_headers(n) {
                    request = request.header(name, value);
                }
                request.send(n.text.as_str()).map(drop).map_err(describe)
            }
            Channel::Desktop => {
                let critical = matches!(n.kind, Kind::NeedsHuman | Kind::BreakerOpen);
                let command = crate::platform::desktop_notification(critical);
                command_send(&command, n, root, timeout)
            }
            Channel::Email(command) => command_send(command, n, root, timeout),
        }
    }
}

/// ureq's error, without the URL (which may hold a token).
fn describe(e: ureq::Error) -> String {
    match e {
        ureq::Error::StatusCode(code) => format!("HTTP {code}"),
        ureq::Error::Timeout(_) => "timed out".into(),
        other => other.to_string(),
    }
}

fn command_send(
    command: &str,
    n: &Notice,
    root: &Path,
    timeout: Duration,
) -> std::result::Result<(), String> {
    use crate::agent::shell::{End, run};
    let env = [
        ("RALPH_NOTIFY_SUBJECT".to_string(), n.title.clone()),
        ("RALPH_NOTIFY_EVENT".to_string(), n.kind.name().to_string()),
    ];
    let done = run(command, root, &env, n.text.as_bytes(), timeout, &|| false);
    match done.end {
        End::Exited(status) if status.success() => Ok(()),
        End::Exited(status) => Err(format!(
            "{status}: {}",
            String::from_utf8_lossy(&done.stderr).trim()
        )),
        End::TimedOut => Err("timed out".into()),
        End::Interrupted => Err("interrupted".into()),
        End::CannotStart(e) | End::Lost(e) => Err(e.to_string()),
    }
}

/// How sending went: attempts made, and the last error if none succeeded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Delivery {
    pub(crate) attempts: u32,
    pub(crate) error: Option<String>,
}

/// Deliver `n` on `channel`: up to `1 + retries` attempts, `backoff`,
/// `2 × backoff`, … apart. Errors are redacted.
pub(crate) fn deliver(
    channel: &Channel,
    n: &Notice,
    config: &NotifyConfig,
    root: &Path,
) -> Delivery {
    let timeout = config.timeout.0;
    let http: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .build()
        .into();
    let mut pause = config.backoff.0;
    let mut attempts = 0;
    loop {
        attempts += 1;
        match channel.send(n, &http, root, timeout) {
            Ok(()) => {
                return Delivery {
                    attempts,
                    error: None,
                };
            }
            Err(e) if attempts > config.retries => {
                return Delivery {
                    attempts,
                    error: Some(crate::text::secrets::redact(&e).into_owned()),
                };
            }
            Err(_) => {
                std::thread::sleep(pause);
                pause = pause.saturating_mul(2);
            }
        }
    }
}

/// The bus's notification sink.
pub(crate) struct Notifier {
    watch: Watch,
    lanes: Vec<Sender<Arc<Notice>>>,
    /// The channels whose workers still run, and the condition they
    /// signal as they end.
    running: Arc<(Mutex<Vec<&'static str>>, Condvar)>,
    /// What the workers could not deliver, said as warnings on the bus.
    failed: Arc<Mutex<Vec<String>>>,
    timeout: Duration,
}

impl Notifier {
    /// A notifier for `config`'s channels, or None when there are none.
    pub(crate) fn start(config: &NotifyConfig, root: &Path) -> Result<Option<Notifier>> {
        let channels = Channel::all(config)?;
        if channels.is_empty() {
            return Ok(None);
        }
        let names: Vec<&str> = channels.iter().map(Channel::name).collect();
        let running = Arc::new((Mutex::new(names), Condvar::new()));
        let failed = Arc::new(Mutex::new(Vec::new()));
        let mut lanes = Vec::new();
        for channel in channels {
            let (tx, rx) = mpsc::channel::<Arc<Notice>>();
            let (config, root, running, failed) = (
                config.clone(),
                root.to_path_buf(),
                running.clone(),
                failed.clone(),
            );
            let spawned = std::thread::Builder::new()
                .name(format!("notify-{}", channel.name()))
                .spawn(move || {
                    for notice in rx {
                        let d = deliver(&channel, &notice, &config, &root);
                        if let Some(e) = d.error {
                            let message = format!(
                                "notification `{}` not delivered by {} after {} attempt(s): {e}",
                                notice.kind.name(),
                                channel.name(),
                                d.attempts
                            );
                            failed
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(message);
                        }
                    }
                    let (names, cv) = &*running;
                    if let Ok(mut names) = names.lock()
                        && let Some(i) = names.iter().position(|n| *n == channel.name())
                    {
                        names.swap_remove(i);
                    }
                    cv.notify_all();
                });
            match spawned {
                Ok(_) => lanes.push(tx),
                Err(e) => return Err(Error::wrap("cannot start a notification thread", e)),
            }
        }
        let project = root.file_name().map_or_else(
            || root.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        Ok(Some(Notifier {
            watch: Watch::new(&project, &config.events),
            lanes,
            running,
            failed,
            timeout: config.timeout.0,
        }))
    }
}

impl Sink for Notifier {
    fn event(&mut self, record: &Record) {
        if let Some(notice) = self.watch.notice(record) {
            let notice = Arc::new(notice);
            for lane in &self.lanes {
                let _ = lane.send(notice.clone());
            }
        }
    }

    /// Each notice a channel gave up on, as a warning: a channel failing
    /// all night is seen in the log, on the terminal and in the report.
    fn said(&mut self) -> Vec<Event> {
        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed
            .drain(..)
            .map(|message| Event::Warning { message })
            .collect()
    }

    /// The run is ending: let the workers finish what is queued, for at
    /// most `notify.timeout`; what is still pending then is given up, and
    /// said.
    fn settle(&mut self) {
        self.lanes.clear();
        let deadline = Instant::now() + self.timeout;
        let (names, cv) = &*self.running;
        let Ok(mut left) = names.lock() else { return };
        while !left.is_empty() {
            let now = Instant::now();
            if now >= deadline {
                left.sort_unstable();
                let message = format!(
                    "notification channel(s) {} still sending after notify.timeout ({}s); the run's last notices may not be delivered",
                    left.join(", "),
                    self.timeout.as_secs()
                );
                self.failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(message);
                return;
            }
            match cv.wait_timeout(left, deadline - now) {
                Ok((guard, _)) => left = guard,
                Err(_) => return,
            }
        }
    }
}
