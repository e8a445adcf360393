//! `ralph notify [--test]`: the `[notify]` channels and the events they
//! get; `--test` sends `ralph notify --test`'s notice on each, with the
//! run's retries and timeout, and says how it went.

use std::fmt::Write as _;

use serde::Serialize;

use super::{Report, print};
use crate::error::{Error, Result};
use crate::events::notify::{self, Channel};
use crate::project::Project;

#[derive(Debug, Serialize)]
pub(crate) struct NotifyReport {
    pub(crate) events: Vec<&'static str>,
    pub(crate) channels: Vec<ChannelReport>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ChannelReport {
    pub(crate) channel: &'static str,
    /// Set by `--test`: whether the test notification arrived.
    pub(crate) delivered: Option<bool>,
    pub(crate) attempts: Option<u32>,
    pub(crate) error: Option<String>,
}

impl Report for NotifyReport {
    fn human(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "events: {}", self.events.join(", "));
        for c in &self.channels {
            let _ = match (c.delivered, &c.error) {
                (None, _) => writeln!(out, "{}: configured", c.channel),
                (Some(true), _) => writeln!(
                    out,
                    "{}: test notification delivered ({} attempt(s))",
                    c.channel,
                    c.attempts.unwrap_or(1)
                ),
                (Some(false), e) => writeln!(
                    out,
                    "{}: NOT delivered after {} attempt(s): {}",
                    c.channel,
                    c.attempts.unwrap_or(1),
                    e.as_deref().unwrap_or("unknown error")
                ),
            };
        }
        out
    }
}

pub(crate) fn notify(project: &Project, test: bool, json: bool) -> Result<i32> {
    let root = project.root();
    let config = project.config()?;
    let channels = Channel::all(&config.notify)?;
    if channels.is_empty() {
        return Err(Error::config("no notification channel is configured")
            .with_hint("add a [notify] section to ralph.toml, e.g. `webhook = \"https://…\"` (docs/notifications.md)"));
    }
    let project = root.file_name().map_or_else(
        || root.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let notice = notify::test_notice(&project, &crate::formats::now_rfc3339());
    // The channels are tried side by side: one that hangs costs its own
    // timeout, not the others'.
    let results: Vec<ChannelReport> = std::thread::scope(|s| {
        let handles: Vec<_> = channels
            .iter()
            .map(|channel| {
                let (notice, config) = (&notice, &config.notify);
                s.spawn(move || {
                    let d = test.then(|| notify::deliver(channel, notice, config, root));
                    ChannelReport {
                        channel: channel.name(),
                        delivered: d.as_ref().map(|d| d.error.is_none()),
                        attempts: d.as_ref().map(|d| d.attempts),
                        error: d.and_then(|d| d.error),
                    }
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let failed = results.iter().any(|c| c.delivered == Some(false));
    let report = NotifyReport {
        events: config.notify.events.iter().map(|k| k.name()).collect(),
        channels: results,
    };
    print(&report.render(json))?;
    Ok(if failed { 1 } else { 0 })
}
