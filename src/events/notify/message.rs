//! What a notification says: which events become one ([`Watch`]), their
//! title and text, and each channel's payload. Pure: records in, data out.

use serde_json::{Value, json};

use crate::config::notify::Kind;
use crate::formats::RunStatus;
use crate::formats::{Event, FleetEvent, Record};

/// One notification, the same for every channel.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Notice {
    pub(crate) kind: Kind,
    /// The project's directory name.
    pub(crate) project: String,
    pub(crate) ts: String,
    /// One line: "ralph · myproject: run completed".
    pub(crate) title: String,
    /// A few lines for a person.
    pub(crate) text: String,
    /// The event's own fields (docs/events.md), plus `items_done` at the end
    /// of a run: what a program receiving the webhook reads.
    pub(crate) details: Value,
}

/// Turns the supervisor's records into notices: which ones matter, and
/// what the run did so far (items checked off) for the last one.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    project: String,
    wanted: Vec<Kind>,
    items_done: Vec<String>,
}

impl Watch {
    pub(crate) fn new(project: &str, wanted: &[Kind]) -> Watch {
        Watch {
            project: project.to_string(),
            wanted: wanted.to_vec(),
            items_done: Vec::new(),
        }
    }

    /// The notice `record` calls for, if any.
    pub(crate) fn notice(&mut self, record: &Record) -> Option<Notice> {
        // A worker's loop ending (`ralph run --workers N`) is not the run's
        // end: its coordinator's `run_ended` is.
        if record.worker.is_some() && matches!(record.event, Event::RunEnded { .. }) {
            return None;
        }
        if let Event::ItemChecked { items, .. } = &record.event {
            self.items_done.extend(items.iter().cloned());
        }
        let (kind, headline, text) = describe(&record.event, &self.items_done)?;
        if !self.wanted.contains(&kind) {
            return None;
        }
        let mut details = serde_json::to_value(&record.event).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut details {
            map.remove("event");
            if matches!(kind, Kind::RunEnded | Kind::BudgetStop) {
                map.insert("items_done".into(), json!(self.items_done));
            }
        }
        // What leaves ralph quotes the plan and the agent: no escape
        // sequence reaches a phone, a chat or a terminal running
        // `ntfy subscribe`, in any channel's body or field.
        crate::text::printable_value(&mut details);
        let title = format!("ralph · {}: {headline}", self.project);
        Some(Notice {
            kind,
            project: crate::text::printable(&self.project).into_owned(),
            ts: record.ts.clone(),
            title: crate::text::printable(&title).into_owned(),
            text: crate::text::printable_lines(&text).into_owned(),
            details,
        })
    }
}

/// `ralph notify --test`'s notice.
pub(crate) fn test_notice(project: &str, ts: &str) -> Notice {
    Notice {
        kind: Kind::Test,
        project: project.to_string(),
        ts: ts.to_string(),
        title: format!("ralph · {project}: test notification"),
        text: "ralph can reach this channel (ralph notify --test).".into(),
        details: json!({}),
    }
}

/// The kind, headline and text of an event that is notified.
fn describe(event: &Event, items_done: &[String]) -> Option<(Kind, String, String)> {
    match event {
        Event::RunEnded {
            outcome,
            exit_code,
            reason,
            iterations,
            cost_usd,
            report,
        } => {
            let kind = if *outcome == RunStatus::BudgetSpent {
                Kind::BudgetStop
            } else {
                Kind::RunEnded
            };
            let headline = match kind {
                Kind::BudgetStop => "stopped on budget".to_string(),
                _ => format!("run {}", outcome.name().replace('_', " ")),
            };
            let mut text = format!(
                "{reason}\n{iterations} iteration(s), ${cost_usd:.2}, exit code {exit_code}.\n{} item(s) done",
                items_done.len()
            );
            if !items_done.is_empty() {
                text.push_str(": ");
                text.push_str(&items_done.join("; "));
            }
            text.push('.');
            if let Some(report) = report {
                text.push_str(&format!("\nReport: {report}"));
            }
            Some((kind, headline, text))
        }
        Event::Breaker {
            status,
            rule,
            message,
        } if *status == crate::rules::breaker::Status::Open => Some((
            Kind::BreakerOpen,
            "circuit breaker open".into(),
            match rule {
                Some(rule) => format!("{message} (rule: {rule})"),
                None => message.clone(),
            },
        )),
        Event::LimitWait {
            until,
            seconds,
            detail,
            ..
        } => Some((
            Kind::LimitWait,
            format!("usage limit, waiting until {until}"),
            format!(
                "{detail}\nThe run sleeps {} and goes on by itself.",
                crate::text::format_duration(std::time::Duration::from_secs(*seconds))
            ),
        )),
        Event::Fleet(fleet) => fleet_notice(fleet),
        Event::NeedsHuman {
            reason, message, ..
        } => Some((
            Kind::NeedsHuman,
            format!("needs a human ({})", reason.replace('_', " ")),
            message.clone(),
        )),
        _ => None,
    }
}

/// A fleet worker's events that a person hears of: an item given up
/// (only a person settles it), the fleet's budget spent, a usage limit
/// shared, and each machine's end.
fn fleet_notice(event: &FleetEvent) -> Option<(Kind, String, String)> {
    let text = event.human();
    match event {
        FleetEvent::GivenUp { text: item, .. } => Some((
            Kind::NeedsHuman,
            format!(
                "needs a human (fleet item given up: {})",
                crate::text::cut(item, 60)
            ),
            text,
        )),
        FleetEvent::BudgetSpent { .. } => {
            Some((Kind::BudgetStop, "fleet stopped on budget".into(), text))
        }
        FleetEvent::LimitShared { until } => Some((
            Kind::LimitWait,
            format!("usage limit, the fleet waits until {until}"),
            text,
        )),
        FleetEvent::Finished { exit_code } => Some((
            Kind::RunEnded,
            format!("fleet worker ended (exit {exit_code})"),
            text,
        )),
        _ => None,
    }
}

/// The generic webhook's JSON body (docs/notifications.md).
pub(crate) fn webhook_body(n: &Notice) -> Value {
    json!({
        "source": "ralph",
        "event": n.kind.name(),
        "project": n.project,
        "ts": n.ts,
        "title": n.title,
        "text": n.text,
        "details": n.details,
    })
}

/// A Slack incoming webhook's body.
pub(crate) fn slack_body(n: &Notice) -> Value {
    json!({ "text": format!("*{}*\n{}", n.title, n.text) })
}

/// A Telegram `sendMessage` body.
pub(crate) fn telegram_body(n: &Notice, chat: &str) -> Value {
    json!({
        "chat_id": chat,
        "text": format!("{}\n\n{}", n.title, n.text),
        "disable_web_page_preview": true,
    })
}

/// ntfy's headers (the body is the text): a title, a tag, and a higher
/// priority for what needs someone.
pub(crate) fn ntfy_headers(n: &Notice) -> [(&'static str, String); 3] {
    let (tag, priority) = match n.kind {
        Kind::NeedsHuman | Kind::BreakerOpen => ("warning", "high"),
        Kind::BudgetStop | Kind::LimitWait => ("hourglass", "default"),
        Kind::RunEnded | Kind::Test => ("robot", "default"),
    };
    // Header values must be visible ASCII.
    let title: String = n
        .title
        .replace('·', "-")
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    [
        ("Title", title),
        ("Tags", tag.to_string()),
        ("Priority", priority.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(event: Event) -> Record {
        Record {
            ts: "2026-11-24T03:00:00Z".into(),
            worker: None,
            event,
        }
    }

    fn ended(outcome: &str) -> Event {
        Event::RunEnded {
            outcome: outcome.into(),
            exit_code: 0,
            reason: "plan complete".into(),
            iterations: 3,
            cost_usd: 1.5,
            report: Some(".ralph/report.html".into()),
        }
    }

    /// Issue 34: a plan item with OSC 52 / CSI sequences reached the ntfy
    /// body (a clipboard write for whoever runs `ntfy subscribe`).
    #[test]
    fn every_channels_text_is_printable() {
        let hostile = "parser \u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[2J\u{9b}31mdone";
        let mut w = Watch::new("proj\u{1b}[31m", &Kind::ALL);
        let checked = Event::ItemChecked {
            iteration: 1,
            items: vec![hostile.into()],
            next: None,
            percent: 10.0,
            next_estimate: None,
            remaining: 0,
        };
        assert_eq!(w.notice(&record(checked)), None);
        let n = w.notice(&record(ended("completed"))).unwrap();
        let stuck = Event::NeedsHuman {
            iteration: 2,
            reason: "verify\u{1b}]0;x\u{7}".into(),
            message: format!("stuck on {hostile}"),
        };
        let m = w.notice(&record(stuck)).unwrap();
        for n in [n, m] {
            let bodies = [
                webhook_body(&n).to_string(),
                slack_body(&n).to_string(),
                telegram_body(&n, "42").to_string(),
                n.text.clone(),
                n.title.clone(),
                ntfy_headers(&n).map(|(_, v)| v).join("\n"),
            ];
            for body in bodies {
                assert!(
                    !body.chars().any(|c| c.is_control() && c != '\n'),
                    "{body:?}"
                );
                assert!(
                    !body.contains("\\u001b") && !body.contains("\\u009b") && !body.contains("52;"),
                    "{body}"
                );
            }
            assert!(
                n.text.contains("parser") && n.text.contains("done"),
                "{}",
                n.text
            );
        }
    }

    #[test]
    fn the_events_that_matter_become_notices_and_the_rest_do_not() {
        let mut w = Watch::new("proj", &Kind::ALL);
        let warning = Event::Warning {
            message: "x".into(),
        };
        assert_eq!(w.notice(&record(warning)), None);
        let half = Event::Breaker {
            status: crate::rules::breaker::Status::HalfOpen,
            rule: None,
            message: "cooldown over".into(),
        };
        assert_eq!(w.notice(&record(half)), None);
        let open = Event::Breaker {
            status: crate::rules::breaker::Status::Open,
            rule: Some("no_progress".into()),
            message: "3 iterations without progress".into(),
        };
        assert_eq!(w.notice(&record(open)).unwrap().kind, Kind::BreakerOpen);
        let wait = Event::LimitWait {
            until: "2026-11-24T09:00:00Z".into(),
            seconds: 3600,
            source: crate::rules::limits::LimitSource::RateLimitEvent,
            detail: "limit".into(),
        };
        let n = w.notice(&record(wait)).unwrap();
        assert_eq!(n.kind, Kind::LimitWait);
        assert!(n.title.contains("2026-11-24T09:00:00Z"), "{}", n.title);
        let human = Event::NeedsHuman {
            iteration: 4,
            reason: "conflict".into(),
            message: "merge conflict in src/a.rs".into(),
        };
        assert_eq!(w.notice(&record(human)).unwrap().kind, Kind::NeedsHuman);
    }

    #[test]
    fn a_fleet_item_given_up_needs_a_human_and_a_machines_end_is_told() {
        let mut w = Watch::new("proj", &Kind::ALL);
        let fleet = |e| Record {
            worker: Some("w1".into()),
            ..record(Event::Fleet(e))
        };
        let given = w
            .notice(&fleet(FleetEvent::GivenUp {
                item: "i-1".into(),
                text: "Add parser".into(),
                why: "still conflicts".into(),
            }))
            .unwrap();
        assert_eq!(given.kind, Kind::NeedsHuman);
        assert!(given.text.contains("still conflicts"), "{}", given.text);
        assert_eq!(given.details["why"], "still conflicts");
        let end = w
            .notice(&fleet(FleetEvent::Finished { exit_code: 4 }))
            .unwrap();
        assert_eq!(end.kind, Kind::RunEnded);
        assert_eq!(w.notice(&fleet(FleetEvent::Waiting { open: 2 })), None);
    }

    #[test]
    fn a_workers_loop_ending_is_not_the_runs_end() {
        let mut w = Watch::new("proj", &Kind::ALL);
        let mut of_worker = record(ended("completed"));
        of_worker.worker = Some("w1".into());
        assert_eq!(w.notice(&of_worker), None);
        assert_eq!(
            w.notice(&record(ended("completed"))).unwrap().kind,
            Kind::RunEnded
        );
    }

    #[test]
    fn the_end_of_a_run_says_outcome_cost_items_and_report() {
        let mut w = Watch::new("proj", &Kind::ALL);
        let checked = Event::ItemChecked {
            iteration: 1,
            items: vec!["Add parser".into()],
            next: None,
            percent: 10.0,
            next_estimate: None,
            remaining: 0,
        };
        assert_eq!(w.notice(&record(checked)), None);
        let n = w.notice(&record(ended("completed"))).unwrap();
        assert_eq!(n.kind, Kind::RunEnded);
        assert_eq!(n.title, "ralph · proj: run completed");
        assert!(n.text.contains("$1.50"), "{}", n.text);
        assert!(n.text.contains("1 item(s) done: Add parser"), "{}", n.text);
        assert!(n.text.contains("Report: .ralph/report.html"), "{}", n.text);
        let body = webhook_body(&n);
        assert_eq!(body["event"], "run_ended");
        assert_eq!(body["details"]["outcome"], "completed");
        assert_eq!(body["details"]["cost_usd"], 1.5);
        assert_eq!(body["details"]["items_done"], json!(["Add parser"]));
        assert_eq!(body["details"].get("event"), None);
        let budget = w.notice(&record(ended("budget_spent"))).unwrap();
        assert_eq!(budget.kind, Kind::BudgetStop);
    }

    #[test]
    fn only_the_wanted_kinds_are_sent() {
        let mut w = Watch::new("proj", &[Kind::BreakerOpen]);
        assert_eq!(w.notice(&record(ended("completed"))), None);
    }

    #[test]
    fn channel_payloads() {
        let n = test_notice("proj", "t");
        assert_eq!(
            slack_body(&n)["text"],
            "*ralph · proj: test notification*\nralph can reach this channel (ralph notify --test)."
        );
        assert_eq!(telegram_body(&n, "42")["chat_id"], "42");
        let headers = ntfy_headers(&n);
        assert_eq!(
            headers[0],
            ("Title", "ralph - proj: test notification".into())
        );
    }
}
