//! What one step does: the typed step kinds, the tools a turn calls, and their
//! conversion from a step's raw keys, filling in the real CLI's defaults.

use serde_json::{Value, json};

use crate::ids::Ids;
use crate::scenario::{KINDS, RawStep, RawTool, TURN_KEYS};
use crate::usage::{DEFAULT_OUTPUT_TOKENS, Usage};

#[derive(Debug)]
pub(crate) struct Step {
    pub(crate) delay_ms: Option<u64>,
    pub(crate) kind: StepKind,
}

#[derive(Debug)]
pub(crate) enum StepKind {
    Turn(Turn),
    Raw {
        bytes: Vec<u8>,
        newline: bool,
    },
    BigLine {
        bytes: u64,
    },
    Partial {
        bytes: Vec<u8>,
        exit_code: Option<i32>,
    },
    ApiRetry(ApiRetry),
    Compact(Compact),
    RateLimit(RateLimit),
    Error(ErrorStep),
    Result(ResultStep),
    Hang,
    Sleep {
        ms: u64,
    },
    Exit {
        code: i32,
    },
    Stderr {
        text: String,
    },
    StderrFlood {
        bytes: u64,
    },
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Turn {
    pub(crate) text: Option<String>,
    pub(crate) usage: Option<Usage>,
    pub(crate) output_tokens: u64,
    pub(crate) subagent: bool,
    pub(crate) tools: Vec<Tool>,
}

#[derive(Debug, Clone)]
pub(crate) enum Tool {
    Write {
        path: String,
        content: String,
    },
    Edit {
        path: String,
        old: String,
        new: String,
        replace_all: bool,
    },
    Bash {
        command: String,
        description: Option<String>,
        inherit_stdout: bool,
    },
    Task {
        description: String,
        prompt: String,
        subagent_type: String,
        output: Option<String>,
    },
    Other {
        name: String,
        input: Value,
        output: String,
        is_error: bool,
    },
}

#[derive(Debug)]
pub(crate) struct ApiRetry {
    pub(crate) attempt: u32,
    pub(crate) max_retries: u32,
    pub(crate) error_status: u16,
    pub(crate) retry_delay_ms: f64,
}

#[derive(Debug)]
pub(crate) struct Compact {
    pub(crate) trigger: String,
    pub(crate) pre_tokens: Option<u64>,
    pub(crate) post_tokens: Option<u64>,
}

#[derive(Debug)]
pub(crate) struct RateLimit {
    pub(crate) status: String,
    pub(crate) resets_in_secs: i64,
    pub(crate) limit_type: String,
    /// The fraction of the window used (`utilization`, and the window in
    /// `unifiedWindows`), as Claude Code reports it past a warning threshold.
    pub(crate) utilization: Option<f64>,
}

#[derive(Debug)]
pub(crate) struct ErrorStep {
    pub(crate) kind: String,
    pub(crate) text: Option<String>,
    pub(crate) api_error_status: u16,
    pub(crate) terminal_reason: Option<String>,
    pub(crate) resets_in_secs: i64,
    pub(crate) cost_usd: Option<f64>,
    pub(crate) exit_code: Option<i32>,
}

#[derive(Debug)]
pub(crate) struct ResultStep {
    pub(crate) text: String,
    /// A file (relative to the cwd) whose text, when it exists as the step
    /// plays, is the result text instead: what the iteration's own tools
    /// concluded, e.g. the promise once a Bash step found the plan done.
    pub(crate) text_file: Option<String>,
    pub(crate) subtype: String,
    pub(crate) is_error: bool,
    pub(crate) errors: Vec<String>,
    pub(crate) permission_denials: Vec<Value>,
    pub(crate) api_error_status: Option<u16>,
    pub(crate) terminal_reason: String,
    pub(crate) cost_usd: Option<f64>,
    pub(crate) num_turns: Option<u64>,
    pub(crate) exit_code: Option<i32>,
    /// Occupancy of the assistant turn that says the result text.
    pub(crate) context: Option<u64>,
}

impl Step {
    pub(crate) fn from_raw(mut raw: RawStep) -> std::result::Result<Step, String> {
        let keys = raw.keys();
        let kinds: Vec<&str> = keys
            .iter()
            .copied()
            .filter(|k| KINDS.iter().any(|(kind, _)| kind == k))
            .collect();
        let allowed: &[&str] = match kinds.as_slice() {
            [] => TURN_KEYS,
            [kind] => KINDS
                .iter()
                .find(|(k, _)| k == kind)
                .map_or(&[], |(_, a)| a),
            many => {
                return Err(format!(
                    "a step does one thing, but this one sets {}",
                    many.iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(" and ")
                ));
            }
        };
        let kind_name = kinds.first().copied().unwrap_or("assistant");
        for key in &keys {
            if *key != "delay_ms" && *key != kind_name && !allowed.contains(key) {
                return Err(format!(
                    "`{key}` does not apply to a `{kind_name}` step (it allows: {})",
                    allowed
                        .iter()
                        .chain(["delay_ms"].iter())
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        let delay_ms = raw.delay_ms;
        let require_true = |value: Option<bool>, key: &str| match value {
            Some(true) => Ok(()),
            _ => Err(format!("`{key} = false` does nothing; remove the step")),
        };
        let kind = match kind_name {
            "assistant" => StepKind::Turn(Turn::from_raw(&mut raw)?),
            "raw" => StepKind::Raw {
                bytes: raw.raw.take().unwrap_or_default().into_bytes(),
                newline: raw.newline.unwrap_or(true),
            },
            "raw_hex" => StepKind::Raw {
                bytes: decode_hex(raw.raw_hex.as_deref().unwrap_or_default())?,
                newline: raw.newline.unwrap_or(true),
            },
            "big_line_bytes" => StepKind::BigLine {
                bytes: raw.big_line_bytes.unwrap_or_default(),
            },
            "partial" => StepKind::Partial {
                bytes: raw.partial.take().unwrap_or_default().into_bytes(),
                exit_code: raw.exit_code,
            },
            "api_retry" => {
                let attempt = raw.api_retry.unwrap_or(1).max(1);
                StepKind::ApiRetry(ApiRetry {
                    attempt,
                    max_retries: raw.max_retries.unwrap_or(10),
                    error_status: raw.error_status.unwrap_or(529),
                    retry_delay_ms: raw
                        .retry_delay_ms
                        .unwrap_or(500.0 * f64::from(1u32 << (attempt - 1).min(10))),
                })
            }
            "compact" => {
                require_true(raw.compact, "compact")?;
                StepKind::Compact(Compact {
                    trigger: raw.trigger.take().unwrap_or_else(|| "auto".into()),
                    pre_tokens: raw.pre_tokens,
                    post_tokens: raw.post_tokens,
                })
            }
            "rate_limit" => StepKind::RateLimit(RateLimit {
                status: raw.rate_limit.take().unwrap_or_default(),
                resets_in_secs: raw.resets_in_secs.unwrap_or(3600),
                limit_type: raw
                    .rate_limit_type
                    .take()
                    .unwrap_or_else(|| "five_hour".into()),
                utilization: raw.utilization,
            }),
            "error" => {
                let kind = raw.error.take().unwrap_or_default();
                StepKind::Error(ErrorStep {
                    api_error_status: raw
                        .api_error_status
                        .unwrap_or_else(|| default_error_status(&kind)),
                    kind,
                    text: raw.text.take(),
                    terminal_reason: raw.terminal_reason.take(),
                    resets_in_secs: raw.resets_in_secs.unwrap_or(3600),
                    cost_usd: raw.cost_usd,
                    exit_code: raw.exit_code,
                })
            }
            "result" => StepKind::Result(ResultStep::from_raw(&mut raw)?),
            "hang" => {
                require_true(raw.hang, "hang")?;
                StepKind::Hang
            }
            "sleep_ms" => StepKind::Sleep {
                ms: raw.sleep_ms.unwrap_or_default(),
            },
            "exit" => StepKind::Exit {
                code: raw.exit.unwrap_or_default(),
            },
            "stderr" => StepKind::Stderr {
                text: raw.stderr.take().unwrap_or_default(),
            },
            "stderr_bytes" => StepKind::StderrFlood {
                bytes: raw.stderr_bytes.unwrap_or_default(),
            },
            other => unreachable!("step kind {other} is listed in KINDS but not handled"),
        };
        Ok(Step { delay_ms, kind })
    }

    /// The main thread speaks again: an open sub-agent Task has finished.
    pub(crate) fn ends_subagent(&self) -> bool {
        match &self.kind {
            StepKind::Turn(turn) => !turn.subagent,
            StepKind::Result(_) | StepKind::Error(_) => true,
            _ => false,
        }
    }
}

impl Turn {
    pub(crate) fn from_raw(raw: &mut RawStep) -> std::result::Result<Turn, String> {
        let explicit = raw.input_tokens.is_some()
            || raw.cache_read_input_tokens.is_some()
            || raw.cache_creation_input_tokens.is_some();
        let usage = match (raw.context, explicit) {
            (Some(_), true) => {
                return Err(
                    "give either `context` or the token counts (`input_tokens`, …), not both"
                        .into(),
                );
            }
            (Some(context), false) => Some(Usage::from_context(context)),
            (None, true) => Some(Usage {
                input: raw.input_tokens.unwrap_or(0),
                cache_creation: raw.cache_creation_input_tokens.unwrap_or(0),
                cache_read: raw.cache_read_input_tokens.unwrap_or(0),
            }),
            (None, false) => None,
        };
        let inline = RawTool {
            tool: raw.tool.take(),
            path: raw.path.take(),
            content: raw.content.take(),
            old: raw.old.take(),
            new: raw.new.take(),
            replace_all: raw.replace_all.take(),
            command: raw.command.take(),
            description: raw.description.take(),
            inherit_stdout: raw.inherit_stdout.take(),
            prompt: raw.prompt.take(),
            subagent_type: raw.subagent_type.take(),
            input: raw.input.take(),
            output: raw.output.take(),
            is_error: raw.is_error.take(),
        };
        let mut tools = Vec::new();
        if !inline.keys().is_empty() {
            tools.push(Tool::from_raw(inline)?);
        }
        for (i, tool) in raw.tools.take().unwrap_or_default().into_iter().enumerate() {
            tools.push(Tool::from_raw(tool).map_err(|e| format!("tools[{i}]: {e}"))?);
        }
        let subagent = raw.subagent.unwrap_or(false);
        if subagent && tools.iter().any(|t| matches!(t, Tool::Task { .. })) {
            return Err("a sub-agent step cannot start another Task".into());
        }
        Ok(Turn {
            text: raw.text.take(),
            usage,
            output_tokens: raw.output_tokens.unwrap_or(DEFAULT_OUTPUT_TOKENS),
            subagent,
            tools,
        })
    }
}

impl Tool {
    pub(crate) fn from_raw(raw: RawTool) -> std::result::Result<Tool, String> {
        let keys = raw.keys();
        let name = match &raw.tool {
            Some(name) => name.clone(),
            None if raw.command.is_some() => "Bash".into(),
            None if raw.old.is_some() || raw.new.is_some() => "Edit".into(),
            None if raw.content.is_some() => "Write".into(),
            None if raw.prompt.is_some() => "Task".into(),
            None => {
                return Err(
                    "cannot tell which tool this calls: set `tool` (Write, Edit, Bash, Task or any other name)"
                        .into(),
                );
            }
        };
        let lower = name.to_ascii_lowercase();
        let allowed: &[&str] = match lower.as_str() {
            "write" => &["path", "content"],
            "edit" => &["path", "old", "new", "replace_all"],
            "bash" => &["command", "description", "inherit_stdout"],
            "task" => &["description", "prompt", "subagent_type", "output"],
            _ => &["input", "output", "is_error"],
        };
        for key in keys {
            if key != "tool" && !allowed.contains(&key) {
                return Err(format!(
                    "`{key}` does not apply to a {name} tool call (it allows: {})",
                    allowed.join(", ")
                ));
            }
        }
        let need = |value: Option<String>, key: &str| {
            value.ok_or_else(|| format!("a {name} tool call needs `{key}`"))
        };
        Ok(match lower.as_str() {
            "write" => Tool::Write {
                path: need(raw.path, "path")?,
                content: raw.content.unwrap_or_default(),
            },
            "edit" => Tool::Edit {
                path: need(raw.path, "path")?,
                old: need(raw.old, "old")?,
                new: need(raw.new, "new")?,
                replace_all: raw.replace_all.unwrap_or(false),
            },
            "bash" => Tool::Bash {
                command: need(raw.command, "command")?,
                description: raw.description,
                inherit_stdout: raw.inherit_stdout.unwrap_or(false),
            },
            "task" => Tool::Task {
                description: raw.description.unwrap_or_else(|| "Sub-task".into()),
                prompt: raw.prompt.unwrap_or_default(),
                subagent_type: raw
                    .subagent_type
                    .unwrap_or_else(|| "general-purpose".into()),
                output: raw.output,
            },
            _ => Tool::Other {
                input: match raw.input {
                    Some(input) => serde_json::to_value(input)
                        .map_err(|e| format!("`input` cannot be turned into JSON: {e}"))?,
                    None => json!({}),
                },
                name,
                output: raw.output.unwrap_or_default(),
                is_error: raw.is_error.unwrap_or(false),
            },
        })
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            Tool::Write { .. } => "Write",
            Tool::Edit { .. } => "Edit",
            Tool::Bash { .. } => "Bash",
            Tool::Task { .. } => "Task",
            Tool::Other { name, .. } => name,
        }
    }
}

impl ResultStep {
    pub(crate) fn from_raw(raw: &mut RawStep) -> std::result::Result<ResultStep, String> {
        let subtype = raw.subtype.take().unwrap_or_else(|| "success".into());
        let failed = subtype != "success";
        let permission_denials = raw
            .permission_denials
            .take()
            .unwrap_or_default()
            .into_iter()
            .map(|denial| {
                let mut value = serde_json::to_value(denial).map_err(|e| e.to_string())?;
                let object = value
                    .as_object_mut()
                    .filter(|o| o.get("tool_name").is_some_and(Value::is_string))
                    .ok_or("each of `permission_denials` needs a `tool_name` string")?;
                object
                    .entry("tool_use_id")
                    .or_insert_with(|| Value::from(Ids::new().tool_id()));
                object.entry("tool_input").or_insert_with(|| json!({}));
                Ok(value)
            })
            .collect::<std::result::Result<Vec<_>, String>>()?;
        Ok(ResultStep {
            text: raw.result.take().unwrap_or_default(),
            text_file: raw.result_file.take(),
            is_error: raw.is_error.unwrap_or(failed),
            errors: raw.errors.take().unwrap_or_else(|| {
                if failed {
                    vec![default_subtype_error(&subtype)]
                } else {
                    Vec::new()
                }
            }),
            terminal_reason: raw
                .terminal_reason
                .take()
                .unwrap_or_else(|| default_terminal_reason(&subtype).into()),
            subtype,
            permission_denials,
            api_error_status: raw.api_error_status,
            cost_usd: raw.cost_usd,
            num_turns: raw.num_turns,
            exit_code: raw.exit_code,
            context: raw.context,
        })
    }
}

fn default_error_status(kind: &str) -> u16 {
    match kind {
        "rate_limit" => 429,
        "invalid_request" => 400,
        "authentication_failed" => 401,
        "billing_error" => 402,
        "overloaded" => 529,
        _ => 500,
    }
}

pub(crate) fn default_subtype_error(subtype: &str) -> String {
    match subtype {
        "error_max_turns" => "Reached maximum number of turns".into(),
        "error_max_budget_usd" => "Reached maximum budget".into(),
        "error_during_execution" => {
            "[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=tool_use".into()
        }
        other => format!("simulated {other}"),
    }
}

fn default_terminal_reason(subtype: &str) -> &'static str {
    match subtype {
        "success" => "completed",
        "error_max_turns" => "max_turns",
        "error_max_budget_usd" => "max_budget_usd",
        "error_during_execution" => "aborted_tools",
        _ => "error",
    }
}

fn decode_hex(text: &str) -> std::result::Result<Vec<u8>, String> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if !digits.len().is_multiple_of(2) {
        return Err("`raw_hex` needs an even number of hex digits".into());
    }
    digits
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|s| u8::from_str_radix(s, 16).ok())
                .ok_or_else(|| {
                    format!(
                        "`raw_hex` has a bad byte {:?}",
                        String::from_utf8_lossy(pair)
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_decodes_with_spaces() {
        assert_eq!(decode_hex("ff fe\n7B").unwrap(), vec![0xff, 0xfe, 0x7b]);
        assert!(decode_hex("abc").is_err());
    }
}
