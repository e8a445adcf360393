//! The wire shapes of stream-json lines, with only the fields ralph reads,
//! tolerant of fields that change type between CLI versions, and their
//! translation into [`StreamEvent`]s.

use std::collections::BTreeMap;

use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::event::*;
use crate::text::cut_bytes;

pub(super) fn classify(parsed: serde_json::Result<RawLine>, first: Option<u8>) -> StreamEvent {
    match parsed {
        Ok(raw) => raw.into_event(),
        Err(e) => StreamEvent::Invalid {
            reason: if first == Some(b'{') {
                format!("malformed JSON line: {e}")
            } else {
                format!("not a JSON object: {e}")
            },
        },
    }
}

// ---- the wire shapes, with only the fields ralph reads ----

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct RawLine {
    #[serde(rename = "type")]
    kind: String,
    subtype: Option<String>,
    model: Option<String>,
    session_id: Option<String>,
    message: Option<RawMessage>,
    parent_tool_use_id: Option<String>,
    error: Option<Lenient>,
    // result
    is_error: Option<bool>,
    api_error_status: Option<Lenient>,
    result: Option<Lenient>,
    total_cost_usd: Option<f64>,
    num_turns: Option<u64>,
    terminal_reason: Option<String>,
    credential_expires_at: Option<String>,
    errors: Option<Vec<Lenient>>,
    permission_denials: Option<Vec<RawDenial>>,
    #[serde(rename = "modelUsage")]
    model_usage: Option<BTreeMap<String, RawModelUsage>>,
    // system/api_retry
    attempt: Option<u64>,
    max_retries: Option<u64>,
    error_status: Option<Lenient>,
    // system/compact_boundary
    compact_metadata: Option<RawCompact>,
    // rate_limit_event
    rate_limit_info: Option<RawRateLimit>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawMessage {
    id: String,
    model: String,
    usage: Usage,
    #[serde(deserialize_with = "blocks")]
    content: Vec<RawBlock>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawBlock {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<ToolInput>,
}

/// A tool call's input, as every kind's decoder reads it: the file it works
/// on, a command or a description. Claude Code, Gemini CLI (`file_path`)
/// and opencode (`filePath`) name the file differently.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ToolInput {
    #[serde(alias = "filePath")]
    file_path: Option<Lenient>,
    notebook_path: Option<Lenient>,
    path: Option<Lenient>,
    command: Option<Lenient>,
    description: Option<Lenient>,
    pattern: Option<Lenient>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawDenial {
    tool_name: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawModelUsage {
    #[serde(rename = "contextWindow")]
    context_window: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawCompact {
    pre_tokens: u64,
    post_tokens: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawRateLimit {
    status: String,
    #[serde(rename = "resetsAt")]
    resets_at: Option<Lenient>,
    #[serde(rename = "rateLimitType")]
    kind: Option<String>,
    /// The fraction used of the window `rateLimitType` names.
    utilization: Option<Lenient>,
    /// Every window the API reported (`anthropic-ratelimit-unified-*`
    /// headers), whichever limits now.
    #[serde(rename = "unifiedWindows")]
    windows: Option<BTreeMap<String, RawWindow>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawWindow {
    utilization: Option<Lenient>,
    #[serde(rename = "resetsAt")]
    resets_at: Option<Lenient>,
}

impl RawRateLimit {
    /// The windows with a utilization: each of `unifiedWindows`, then the
    /// top-level one (which wins: it describes the limiting window).
    fn windows(&mut self) -> Vec<WindowUsage> {
        let at = |r: Option<&Lenient>| {
            r.and_then(|l| l.0.as_deref())
                .and_then(|s| s.parse::<f64>().ok())
                .map(|n| n as i64)
        };
        let mut out: Vec<WindowUsage> = std::mem::take(&mut self.windows)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(name, w)| {
                Some(WindowUsage {
                    name,
                    resets_at: at(w.resets_at.as_ref()),
                    utilization: w.utilization.and_then(Lenient::fraction)?,
                })
            })
            .collect();
        if let (Some(name), Some(utilization)) = (
            self.kind.clone(),
            self.utilization.take().and_then(Lenient::fraction),
        ) {
            out.retain(|w| w.name != name);
            out.push(WindowUsage {
                name,
                utilization,
                resets_at: at(self.resets_at.as_ref()),
            });
        }
        out
    }
}

/// A scalar of any JSON type, kept as text; objects and arrays are skipped
/// without being built. Fields whose type changed between CLI versions must
/// not make the whole line undecodable.
#[derive(Debug, Default)]
struct Lenient(Option<String>);

impl<'de> Deserialize<'de> for Lenient {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Lenient;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_str<E>(self, v: &str) -> Result<Lenient, E> {
                Ok(Lenient(Some(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Lenient, E> {
                Ok(Lenient(Some(v)))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Lenient, E> {
                Ok(Lenient(Some(v.to_string())))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Lenient, E> {
                Ok(Lenient(Some(v.to_string())))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Lenient, E> {
                Ok(Lenient(Some(v.to_string())))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Lenient, E> {
                Ok(Lenient(Some(v.to_string())))
            }
            fn visit_unit<E>(self) -> Result<Lenient, E> {
                Ok(Lenient(None))
            }
            fn visit_none<E>(self) -> Result<Lenient, E> {
                Ok(Lenient(None))
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Lenient, D::Error> {
                d.deserialize_any(V)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Lenient, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Lenient(None))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Lenient, A::Error> {
                // Keep an error object's "message" or "type", the useful part.
                let mut found = None;
                while let Some(key) = map.next_key::<String>()? {
                    if (key == "message" || key == "type") && found.is_none() {
                        found = map.next_value::<Lenient>()?.0;
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Lenient(found))
            }
        }
        d.deserialize_any(V)
    }
}

impl ToolInput {
    /// The file the tool works on, if any.
    pub(super) fn path(&self) -> Option<String> {
        [&self.file_path, &self.notebook_path, &self.path]
            .into_iter()
            .flatten()
            .find_map(|l| l.0.clone())
    }

    /// A command or a short description, cut to a reportable length.
    pub(super) fn summary(&self) -> Option<String> {
        [&self.command, &self.description, &self.pattern]
            .into_iter()
            .flatten()
            .find_map(|l| l.0.clone())
            .map(|t| cut_bytes(t, SUMMARY_LEN))
    }
}

impl Lenient {
    fn text(self) -> Option<String> {
        self.0
    }
    fn number(self) -> Option<u64> {
        self.fraction().map(|f| f as u64)
    }
    fn fraction(self) -> Option<f64> {
        self.0
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|f| f.is_finite())
    }
}

/// `content` is an array of blocks, or a plain string (skipped).
fn blocks<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<RawBlock>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<RawBlock>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("content blocks")
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(block) = seq.next_element::<RawBlock>()? {
                // Tool results and unknown block types carry nothing ralph reads.
                if block.kind == "text" || block.kind == "tool_use" {
                    out.push(block);
                }
            }
            Ok(out)
        }
    }
    d.deserialize_any(V)
}

pub(super) const SUMMARY_LEN: usize = 200;

impl RawLine {
    fn into_event(self) -> StreamEvent {
        let subtype = self.subtype.as_deref().unwrap_or("");
        match (self.kind.as_str(), subtype) {
            ("system", "init") => StreamEvent::Init {
                model: self.model,
                session_id: self.session_id,
            },
            ("system", "api_retry") => StreamEvent::ApiRetry {
                attempt: self.attempt.unwrap_or(0),
                max_retries: self.max_retries.unwrap_or(0),
                error_status: self.error_status.and_then(Lenient::number),
                error: self.error.and_then(Lenient::text),
            },
            ("system", "compact_boundary") => {
                let meta = self.compact_metadata.unwrap_or_default();
                StreamEvent::Compacted {
                    pre_tokens: meta.pre_tokens,
                    post_tokens: meta.post_tokens.unwrap_or(0),
                }
            }
            ("assistant", _) => {
                let message = self.message.unwrap_or_default();
                let mut text = Vec::new();
                let mut tool_calls = Vec::new();
                for block in message.content {
                    match block.kind.as_str() {
                        "text" => text.extend(block.text),
                        _ => {
                            let input = block.input.unwrap_or_default();
                            tool_calls.push(ToolCall {
                                id: block.id.unwrap_or_default(),
                                name: block.name.unwrap_or_default(),
                                path: input.path(),
                                summary: input.summary(),
                            });
                        }
                    }
                }
                StreamEvent::Assistant(AssistantMessage {
                    id: message.id,
                    model: message.model,
                    parent_tool_use_id: self.parent_tool_use_id,
                    usage: message.usage,
                    text,
                    tool_calls,
                    error: self.error.and_then(Lenient::text),
                    context_window: None,
                })
            }
            ("user", _) => StreamEvent::User {
                parent_tool_use_id: self.parent_tool_use_id,
            },
            ("rate_limit_event", _) => {
                let mut info = self.rate_limit_info.unwrap_or_default();
                StreamEvent::RateLimit {
                    windows: info.windows(),
                    status: info.status,
                    resets_at: info.resets_at.and_then(Lenient::number).map(|n| n as i64),
                    kind: info.kind,
                }
            }
            ("result", _) => StreamEvent::Result(ResultMessage {
                subtype: self.subtype.unwrap_or_default(),
                is_error: self.is_error.unwrap_or(false),
                api_error_status: self.api_error_status.and_then(Lenient::number),
                text: self.result.and_then(Lenient::text),
                total_cost_usd: self.total_cost_usd.unwrap_or(0.0),
                num_turns: self.num_turns.unwrap_or(0),
                terminal_reason: self.terminal_reason,
                credential_expires_at: self.credential_expires_at.and_then(|t| t.parse().ok()),
                errors: self
                    .errors
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(Lenient::text)
                    .collect(),
                permission_denials: self
                    .permission_denials
                    .unwrap_or_default()
                    .into_iter()
                    .map(|d| d.tool_name)
                    .collect(),
                context_windows: self
                    .model_usage
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|(m, u)| u.context_window.map(|w| (m, w)))
                    .collect(),
            }),
            (kind, sub) => StreamEvent::Other {
                kind: if sub.is_empty() {
                    kind.to_string()
                } else {
                    format!("{kind}/{sub}")
                },
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::decode::tests::{decode_all, fixtures};
    use super::super::*;

    #[test]
    fn every_fixture_line_decodes() {
        let all = fixtures();
        assert!(all.len() >= 7, "fixtures missing");
        for (name, bytes) in all {
            for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
                if line.is_empty() {
                    continue;
                }
                let event = decode_line(line);
                assert!(
                    !matches!(event, StreamEvent::Invalid { .. }),
                    "{name}:{}: {event:?}",
                    i + 1
                );
            }
        }
    }

    #[test]
    fn tool_loop_fixture_shape() {
        let (_, bytes) = fixtures()
            .into_iter()
            .find(|(n, _)| n == "tool-loop-with-promise.jsonl")
            .unwrap();
        let events = decode_all(&bytes);
        let StreamEvent::Init { model, .. } = &events[0] else {
            panic!("{:?}", events[0])
        };
        assert_eq!(model.as_deref(), Some("claude-sonnet-4-5"));
        let writes: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Assistant(m) => Some(m.tool_calls.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(writes[0].name, "Bash");
        assert_eq!(writes[0].summary.as_deref(), Some("cat fix_plan.md"));
        assert_eq!(writes[1].name, "Write");
        assert_eq!(
            writes[1].path.as_deref(),
            Some("/home/user/project/parser.py")
        );
        let StreamEvent::Result(r) = events.last().unwrap() else {
            panic!()
        };
        assert!(
            r.text
                .as_deref()
                .unwrap()
                .contains("<promise>COMPLETE</promise>")
        );
        assert_eq!(r.context_windows["claude-sonnet-4-5"], 200_000);
        assert!((r.total_cost_usd - 0.255075).abs() < 1e-9);
    }

    #[test]
    fn error_fixtures() {
        let all = fixtures();
        let bytes = &all
            .iter()
            .find(|(n, _)| n == "api-error-prompt-too-long.jsonl")
            .unwrap()
            .1;
        let events = decode_all(bytes);
        let StreamEvent::Assistant(m) = &events[1] else {
            panic!()
        };
        assert!(m.is_synthetic());
        assert_eq!(m.error.as_deref(), Some("invalid_request"));
        let StreamEvent::Result(r) = &events[2] else {
            panic!()
        };
        assert!(r.is_error);
        assert_eq!(r.api_error_status, Some(400));
        assert_eq!(r.subtype, "success");

        let bytes = &all
            .iter()
            .find(|(n, _)| n == "sigint-during-tool.jsonl")
            .unwrap()
            .1;
        let StreamEvent::Result(r) = decode_all(bytes).pop().unwrap() else {
            panic!()
        };
        assert_eq!(r.subtype, "error_during_execution");
        assert_eq!(r.terminal_reason.as_deref(), Some("aborted_tools"));
        assert_eq!(r.errors.len(), 1);

        let bytes = &all
            .iter()
            .find(|(n, _)| n == "api-retry-then-success.jsonl")
            .unwrap()
            .1;
        let retries: Vec<_> = decode_all(bytes)
            .into_iter()
            .filter(|e| matches!(e, StreamEvent::ApiRetry { .. }))
            .collect();
        assert_eq!(
            retries[0],
            StreamEvent::ApiRetry {
                attempt: 1,
                max_retries: 10,
                error_status: Some(529),
                error: Some("overloaded".into())
            }
        );
    }

    #[test]
    fn subagent_lines_carry_their_parent() {
        let all = fixtures();
        let bytes = &all
            .iter()
            .find(|(n, _)| n == "subagent-task.jsonl")
            .unwrap()
            .1;
        let events = decode_all(bytes);
        let sub: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Assistant(m) if !m.is_main_thread() => Some(m),
                _ => None,
            })
            .collect();
        assert_eq!(sub.len(), 1);
        assert_eq!(sub[0].usage.occupancy(), 90_500);
        assert!(
            events.iter().any(
                |e| matches!(e, StreamEvent::Other { kind } if kind == "system/task_progress")
            )
        );
    }

    #[test]
    fn rate_limit_and_compaction_lines() {
        let e = decode_line(
            br#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1795300000,"rateLimitType":"five_hour"},"session_id":"x"}"#,
        );
        assert_eq!(
            e,
            StreamEvent::RateLimit {
                status: "rejected".into(),
                resets_at: Some(1_795_300_000),
                kind: Some("five_hour".into()),
                windows: Vec::new(),
            }
        );
        // Claude Code 2.1.328 as a subscriber past a warning threshold
        // (recorded against a mock API sending the
        // anthropic-ratelimit-unified-{5h,7d}-* headers): every window, and
        // the limiting one at the top level (which wins).
        let e = decode_line(
            br#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1795758011,"rateLimitType":"seven_day","utilization":0.93,"isUsingOverage":false,"surpassedThreshold":0.9,"unifiedWindows":{"five_hour":{"utilization":0.42,"resetsAt":1795502411,"status":"allowed"},"seven_day":{"utilization":0.93,"resetsAt":1795758011,"status":"allowed_warning","surpassedThreshold":0.9}}},"uuid":"dda3e0b7-3096-4e7d-9132-c422d24d0cb1","session_id":"3adab3a9-49b7-4873-9a5a-81e67079b5a4"}"#,
        );
        let StreamEvent::RateLimit {
            windows, status, ..
        } = e
        else {
            panic!("{e:?}")
        };
        assert_eq!(status, "allowed_warning");
        assert_eq!(
            windows,
            [
                WindowUsage {
                    name: "five_hour".into(),
                    utilization: 0.42,
                    resets_at: Some(1_795_502_411)
                },
                WindowUsage {
                    name: "seven_day".into(),
                    utilization: 0.93,
                    resets_at: Some(1_795_758_011)
                },
            ]
        );
        let e = decode_line(
            br#"{"type":"system","subtype":"compact_boundary","compact_metadata":{"trigger":"auto","pre_tokens":167000,"post_tokens":21000}}"#,
        );
        assert_eq!(
            e,
            StreamEvent::Compacted {
                pre_tokens: 167_000,
                post_tokens: 21_000
            }
        );
    }

    #[test]
    fn garbage_is_invalid_not_fatal() {
        for line in [
            &b"not json"[..],
            b"{\"type\":",
            b"[1,2,3]",
            b"\xff\xfe\x00garbage",
            b"{\"type\":\"assistant\",\"message\":{\"usage\":\"weird\"}}",
        ] {
            assert!(
                matches!(decode_line(line), StreamEvent::Invalid { .. }),
                "{line:?}"
            );
        }
        assert!(matches!(
            decode_line(br#"{"type":"stream_event","event":{}}"#),
            StreamEvent::Other { .. }
        ));
    }

    #[test]
    fn changed_field_types_do_not_lose_the_line() {
        let e = decode_line(
            br#"{"type":"result","subtype":"error_max_turns","is_error":true,"api_error_status":"429","errors":[{"message":"max turns"}, "x"],"result":null}"#,
        );
        let StreamEvent::Result(r) = e else {
            panic!("{e:?}")
        };
        assert_eq!(r.api_error_status, Some(429));
        assert_eq!(r.errors, vec!["max turns".to_string(), "x".into()]);
        assert_eq!(r.text, None);
    }
}
