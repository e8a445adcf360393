//! `ralph sim`: a simulated Claude Code agent. Owns the scenario format (TOML, see
//! docs/sim.md) and plays a scenario over the same stream-json stdin/stdout protocol as
//! `claude -p --output-format stream-json --input-format stream-json`, acting for real in
//! the cwd and copying the real CLI's stdin-EOF and signal behaviour, so ralph can be
//! tested, demonstrated and run in CI without the real CLI.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, Read, Write};
use std::os::fd::{BorrowedFd, IntoRawFd};
use std::os::unix::fs::FileExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::fcntl::OFlag;
use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::unistd::Pid;
use regex::Regex;
use serde::Deserialize;
use serde_json::{Value, json};
use toml::Spanned;

use crate::{Error, Result};

/// `ralph sim SCENARIO [claude flags…]`
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Scenario file (TOML)
    pub scenario: PathBuf,
    /// Flags meant for the real claude CLI (-p, --output-format, --model M, ...): accepted, and only --model is used
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub claude_args: Vec<String>,
}

const DEFAULT_MODEL: &str = "claude-sonnet-4-5";
const DEFAULT_WINDOW: u64 = 200_000;
/// Occupancy of the first turn when a scenario does not say (about what Claude Code's
/// system prompt and tools take).
const DEFAULT_CONTEXT: u64 = 20_000;
/// Output tokens counted per message in `result.usage` (the lines carry a placeholder 1).
const DEFAULT_OUTPUT_TOKENS: u64 = 20;
/// The real CLI truncates tool output at about this many characters.
const TOOL_OUTPUT_LIMIT: usize = 30_000;
const FILE_STATE_NOTE: &str = "(file state is current in your context — no need to Read it back)";

/// Runs the simulated agent; returns the process exit code.
pub fn run(args: &SimArgs) -> Result<i32> {
    let cwd = std::env::current_dir()
        .map_err(|e| Error::io("cannot read the current directory", ".", e))?;
    let path = cwd.join(&args.scenario);
    let text =
        fs::read_to_string(&path).map_err(|e| Error::io("cannot read scenario", &path, e))?;
    let scenario = Scenario::parse(&text, &args.scenario.display().to_string())?;
    let number = iteration_from_env()?;
    let iteration = scenario.iteration(number);
    let settings = Settings::resolve(&iteration.options, model_arg(&args.claude_args).as_deref());

    let (tx, rx) = mpsc::channel();
    install_signal_handlers(tx.clone(), settings.on_sigterm)?;
    spawn_stdin_reader(tx.clone());

    let sim = Sim {
        permission_mode: permission_mode(&args.claude_args),
        scenario_name: args.scenario.display().to_string(),
        steps: &iteration.steps,
        iteration: number,
        cwd,
        rx,
        tx,
        ids: Ids::new(),
        session_id: String::new(),
        started: Instant::now(),
        inbox: VecDeque::new(),
        stdin_eof: false,
        running: false,
        context: Usage::from_context(DEFAULT_CONTEXT),
        sub_context: Usage::from_context(DEFAULT_CONTEXT),
        last_text: None,
        turn: Totals::default(),
        turns: 0,
        session: Totals::default(),
        cost_adjust: 0.0,
        open_task: None,
        orphan_parent: None,
        in_flight: None,
        exit_code: settings.exit_code,
        touched: Vec::new(),
        cfg: settings,
    };
    sim.run()
}

// ---------------------------------------------------------------------------------------
// Scenario format

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnSigint {
    /// Like the real CLI: kill the tool, print an `error_during_execution` result, exit 0.
    #[default]
    Abort,
    Ignore,
    /// Exit 130 at once, without a result line.
    Exit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnSigterm {
    /// Like the real CLI: exit 143 at once, without a result line.
    #[default]
    Exit,
    Ignore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnMessage {
    /// Stop at the next step boundary, write handoff notes, print a result.
    #[default]
    Comply,
    Ignore,
}

/// The options allowed both at the top level and in each `[[iteration]]` (the iteration
/// wins). Written once here so the two raw structs and `Options` cannot drift apart.
macro_rules! scenario_options {
    ($($field:ident: $ty:ty),* $(,)?) => {
        #[derive(Debug, Default, Clone)]
        struct Options { $($field: Option<$ty>,)* }

        impl Options {
            /// `over` wins field by field.
            fn merged(&self, over: &Options) -> Options {
                Options { $($field: over.$field.clone().or_else(|| self.$field.clone()),)* }
            }
        }

        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct RawScenario {
            $($field: Option<$ty>,)*
            #[serde(default)]
            iteration: Vec<RawIteration>,
            #[serde(default)]
            step: Vec<Spanned<RawStep>>,
        }

        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct RawIteration {
            $($field: Option<$ty>,)*
            #[serde(default)]
            step: Vec<Spanned<RawStep>>,
        }

        impl RawScenario {
            fn options(&self) -> Options { Options { $($field: self.$field.clone(),)* } }
        }

        impl RawIteration {
            fn options(&self) -> Options { Options { $($field: self.$field.clone(),)* } }
        }
    };
}

scenario_options! {
    model: String,
    context_window: u64,
    exit_code: i32,
    on_sigint: OnSigint,
    on_sigterm: OnSigterm,
    on_message: OnMessage,
    comply_delay_ms: u64,
    handoff_notes: String,
    reply: String,
    cost_usd: f64,
    step_delay_ms: u64,
    record_messages: PathBuf,
}

/// A struct of optional keys that can list which keys the scenario set, so a key that
/// does not apply to a step is an error instead of being silently ignored.
macro_rules! keyed_struct {
    ($name:ident { $($field:ident: $ty:ty),* $(,)? }) => {
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct $name { $($field: Option<$ty>,)* }

        impl $name {
            fn keys(&self) -> Vec<&'static str> {
                let mut keys = Vec::new();
                $(if self.$field.is_some() { keys.push(stringify!($field)); })*
                keys
            }
        }
    };
}

keyed_struct!(RawStep {
    delay_ms: u64,
    // assistant turn
    text: String,
    context: u64,
    input_tokens: u64,
    cache_read_input_tokens: u64,
    cache_creation_input_tokens: u64,
    output_tokens: u64,
    subagent: bool,
    tools: Vec<RawTool>,
    // one tool call written inline in the step
    tool: String,
    path: String,
    content: String,
    old: String,
    new: String,
    replace_all: bool,
    command: String,
    description: String,
    inherit_stdout: bool,
    prompt: String,
    subagent_type: String,
    input: toml::Value,
    output: String,
    // raw output
    raw: String,
    raw_hex: String,
    newline: bool,
    big_line_bytes: u64,
    partial: String,
    // system lines and events
    api_retry: u32,
    max_retries: u32,
    error_status: u16,
    retry_delay_ms: f64,
    compact: bool,
    trigger: String,
    pre_tokens: u64,
    post_tokens: u64,
    rate_limit: String,
    resets_in_secs: i64,
    rate_limit_type: String,
    // errors and results
    error: String,
    api_error_status: u16,
    terminal_reason: String,
    result: String,
    subtype: String,
    is_error: bool,
    errors: Vec<String>,
    permission_denials: Vec<toml::Value>,
    cost_usd: f64,
    num_turns: u64,
    exit_code: i32,
    // process behaviour
    hang: bool,
    sleep_ms: u64,
    exit: i32,
    stderr: String,
    stderr_bytes: u64,
});

keyed_struct!(RawTool {
    tool: String,
    path: String,
    content: String,
    old: String,
    new: String,
    replace_all: bool,
    command: String,
    description: String,
    inherit_stdout: bool,
    prompt: String,
    subagent_type: String,
    input: toml::Value,
    output: String,
    is_error: bool,
});

/// Step kinds other than an assistant turn: the key that selects the kind, and the
/// other keys that may accompany it (`delay_ms` is allowed on every step).
const KINDS: &[(&str, &[&str])] = &[
    ("raw", &["newline"]),
    ("raw_hex", &["newline"]),
    ("big_line_bytes", &[]),
    ("partial", &["exit_code"]),
    (
        "api_retry",
        &["max_retries", "error_status", "retry_delay_ms"],
    ),
    ("compact", &["trigger", "pre_tokens", "post_tokens"]),
    ("rate_limit", &["resets_in_secs", "rate_limit_type"]),
    (
        "error",
        &[
            "text",
            "api_error_status",
            "terminal_reason",
            "resets_in_secs",
            "cost_usd",
            "exit_code",
        ],
    ),
    (
        "result",
        &[
            "subtype",
            "is_error",
            "errors",
            "permission_denials",
            "api_error_status",
            "terminal_reason",
            "cost_usd",
            "num_turns",
            "exit_code",
            "context",
        ],
    ),
    ("hang", &[]),
    ("sleep_ms", &[]),
    ("exit", &[]),
    ("stderr", &[]),
    ("stderr_bytes", &[]),
];

const TURN_KEYS: &[&str] = &[
    "text",
    "context",
    "input_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "output_tokens",
    "subagent",
    "tools",
    "tool",
    "path",
    "content",
    "old",
    "new",
    "replace_all",
    "command",
    "description",
    "inherit_stdout",
    "prompt",
    "subagent_type",
    "input",
    "output",
    "is_error",
];

#[derive(Debug)]
struct Scenario {
    iterations: Vec<Iteration>,
}

#[derive(Debug)]
struct Iteration {
    /// Top-level options with this iteration's on top.
    options: Options,
    steps: Vec<Step>,
}

#[derive(Debug)]
struct Step {
    delay_ms: Option<u64>,
    kind: StepKind,
}

#[derive(Debug)]
enum StepKind {
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
struct Turn {
    text: Option<String>,
    usage: Option<Usage>,
    output_tokens: u64,
    subagent: bool,
    tools: Vec<Tool>,
}

#[derive(Debug, Clone)]
enum Tool {
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
struct ApiRetry {
    attempt: u32,
    max_retries: u32,
    error_status: u16,
    retry_delay_ms: f64,
}

#[derive(Debug)]
struct Compact {
    trigger: String,
    pre_tokens: Option<u64>,
    post_tokens: Option<u64>,
}

#[derive(Debug)]
struct RateLimit {
    status: String,
    resets_in_secs: i64,
    limit_type: String,
}

#[derive(Debug)]
struct ErrorStep {
    kind: String,
    text: Option<String>,
    api_error_status: u16,
    terminal_reason: Option<String>,
    resets_in_secs: i64,
    cost_usd: Option<f64>,
    exit_code: Option<i32>,
}

#[derive(Debug)]
struct ResultStep {
    text: String,
    subtype: String,
    is_error: bool,
    errors: Vec<String>,
    permission_denials: Vec<Value>,
    api_error_status: Option<u16>,
    terminal_reason: String,
    cost_usd: Option<f64>,
    num_turns: Option<u64>,
    exit_code: Option<i32>,
    /// Occupancy of the assistant turn that says the result text.
    context: Option<u64>,
}

impl Scenario {
    fn parse(text: &str, origin: &str) -> Result<Scenario> {
        let raw: RawScenario = toml::from_str(text).map_err(|e| {
            Error::config(format!(
                "invalid scenario {origin}: {}",
                e.to_string().trim_end()
            ))
            .with_hint("the scenario format is described in docs/sim.md")
        })?;
        let top = raw.options();
        if !raw.iteration.is_empty() && !raw.step.is_empty() {
            return Err(Error::config(format!(
                "invalid scenario {origin}: it has both top-level [[step]] and [[iteration]]"
            ))
            .with_hint("put the steps of each iteration under [[iteration.step]]"));
        }
        let convert = |steps: Vec<Spanned<RawStep>>, iteration: usize| -> Result<Vec<Step>> {
            steps
                .into_iter()
                .enumerate()
                .map(|(i, spanned)| {
                    let line = text[..spanned.span().start.min(text.len())]
                        .matches('\n')
                        .count()
                        + 1;
                    Step::from_raw(spanned.into_inner()).map_err(|message| {
                        Error::config(format!(
                            "invalid scenario {origin}, line {line} (iteration {iteration}, step {}): {message}",
                            i + 1
                        ))
                        .with_hint("the scenario format is described in docs/sim.md")
                    })
                })
                .collect()
        };
        let iterations = if raw.iteration.is_empty() {
            vec![Iteration {
                options: top.clone(),
                steps: convert(raw.step, 1)?,
            }]
        } else {
            raw.iteration
                .into_iter()
                .enumerate()
                .map(|(i, it)| {
                    Ok(Iteration {
                        options: top.merged(&it.options()),
                        steps: convert(it.step, i + 1)?,
                    })
                })
                .collect::<Result<Vec<_>>>()?
        };
        Ok(Scenario { iterations })
    }

    /// Iteration `n` (1-based); past the end, the last one, so one iteration repeats.
    fn iteration(&self, n: usize) -> &Iteration {
        let index = n.clamp(1, self.iterations.len()) - 1;
        &self.iterations[index]
    }
}

impl Step {
    fn from_raw(mut raw: RawStep) -> std::result::Result<Step, String> {
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
    fn ends_subagent(&self) -> bool {
        match &self.kind {
            StepKind::Turn(turn) => !turn.subagent,
            StepKind::Result(_) | StepKind::Error(_) => true,
            _ => false,
        }
    }
}

impl Turn {
    fn from_raw(raw: &mut RawStep) -> std::result::Result<Turn, String> {
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
    fn from_raw(raw: RawTool) -> std::result::Result<Tool, String> {
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

    fn name(&self) -> &str {
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
    fn from_raw(raw: &mut RawStep) -> std::result::Result<ResultStep, String> {
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

fn retry_error_name(status: u16) -> &'static str {
    match status {
        429 => "rate_limit",
        529 => "overloaded",
        401 => "authentication_failed",
        400 => "invalid_request",
        _ => "api_error",
    }
}

fn default_subtype_error(subtype: &str) -> String {
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

// ---------------------------------------------------------------------------------------
// Settings of one run

#[derive(Debug, Clone)]
struct Settings {
    /// As reported in `system`/`init` (keeps a `[1m]` suffix).
    model: String,
    /// As reported in `message.model` and `modelUsage` (without the suffix).
    api_model: String,
    context_window: u64,
    exit_code: i32,
    on_sigint: OnSigint,
    on_sigterm: OnSigterm,
    on_message: OnMessage,
    comply_delay: Duration,
    handoff_notes: Option<String>,
    reply: String,
    cost_usd: Option<f64>,
    step_delay: Duration,
    record_messages: Option<PathBuf>,
}

impl Settings {
    fn resolve(options: &Options, model_arg: Option<&str>) -> Settings {
        let model = model_arg
            .map(str::to_string)
            .or_else(|| options.model.clone())
            .unwrap_or_else(|| DEFAULT_MODEL.into());
        let one_million = model.ends_with("[1m]");
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

fn iteration_from_env() -> Result<usize> {
    match std::env::var("RALPH_ITERATION") {
        Err(std::env::VarError::NotPresent) => Ok(1),
        Ok(value) => value
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| {
                Error::usage(format!(
                    "RALPH_ITERATION must be a positive integer, got {value:?}"
                ))
            }),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(Error::usage("RALPH_ITERATION must be a positive integer"))
        }
    }
}

/// `--model M` or `--model=M` among the flags meant for the real CLI.
fn model_arg(args: &[String]) -> Option<String> {
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

fn permission_mode(args: &[String]) -> String {
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

// ---------------------------------------------------------------------------------------
// Token accounting

/// The input side of one API message: what the context holds after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Usage {
    input: u64,
    cache_creation: u64,
    cache_read: u64,
}

impl Usage {
    /// `context = N`: a small uncached part, the rest read from cache, like the fixtures.
    fn from_context(context: u64) -> Usage {
        let input = context.min(2_000);
        Usage {
            input,
            cache_creation: 0,
            cache_read: context - input,
        }
    }

    fn total(&self) -> u64 {
        self.input + self.cache_creation + self.cache_read
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Totals {
    input: u64,
    output: u64,
    cache_creation: u64,
    cache_read: u64,
    messages: u64,
}

impl Totals {
    fn add(&mut self, usage: &Usage, output: u64) {
        self.input += usage.input;
        self.cache_creation += usage.cache_creation;
        self.cache_read += usage.cache_read;
        self.output += output;
        self.messages += 1;
    }

    /// Sonnet list prices; they reproduce the fixtures' `total_cost_usd` exactly.
    fn cost(&self) -> f64 {
        (self.input as f64 * 3.0
            + self.cache_creation as f64 * 3.75
            + self.cache_read as f64 * 0.30
            + self.output as f64 * 15.0)
            / 1_000_000.0
    }
}

// ---------------------------------------------------------------------------------------
// Output lines, shaped like the real CLI's (see fixtures/claude-2.1.197)

/// A JSON object written key by key, so lines keep the real CLI's key order (`type`
/// first), which serde_json's sorted maps would not.
struct Obj(String);

impl Obj {
    fn new() -> Obj {
        Obj(String::from("{"))
    }

    fn key(&mut self, key: &str) {
        if self.0.len() > 1 {
            self.0.push(',');
        }
        self.0.push_str(&Value::from(key).to_string());
        self.0.push(':');
    }

    fn v(mut self, key: &str, value: impl Into<Value>) -> Obj {
        self.key(key);
        self.0.push_str(&value.into().to_string());
        self
    }

    fn raw(mut self, key: &str, json: &str) -> Obj {
        self.key(key);
        self.0.push_str(json);
        self
    }

    fn o(self, key: &str, object: Obj) -> Obj {
        self.raw(key, &object.done())
    }

    fn done(mut self) -> String {
        self.0.push('}');
        self.0
    }
}

/// What every line of one session shares.
struct LineCtx<'a> {
    session_id: &'a str,
    model: &'a str,
}

fn init_line(
    ctx: &LineCtx,
    init_model: &str,
    cwd: &Path,
    permission_mode: &str,
    uuid: &str,
    scenario: &str,
) -> String {
    Obj::new()
        .v("type", "system")
        .v("subtype", "init")
        .v("cwd", cwd.display().to_string())
        .v("session_id", ctx.session_id)
        .v(
            "tools",
            json!([
                "Task",
                "Bash",
                "Edit",
                "Read",
                "Write",
                "Glob",
                "Grep",
                "TodoWrite"
            ]),
        )
        .v("mcp_servers", json!([]))
        .v("model", init_model)
        .v("permissionMode", permission_mode)
        .v(
            "slash_commands",
            json!(["compact", "context", "init", "review"]),
        )
        .v("apiKeySource", "none")
        .v("claude_code_version", "2.1.197")
        .v("output_style", "default")
        .v("agents", json!(["general-purpose"]))
        .v("skills", json!([]))
        .v("plugins", json!([]))
        .v("uuid", uuid)
        .v("ralph_sim", scenario)
        .done()
}

fn usage_obj(usage: &Usage) -> Obj {
    Obj::new()
        .v("input_tokens", usage.input)
        .v("output_tokens", 1)
        .v("cache_creation_input_tokens", usage.cache_creation)
        .v("cache_read_input_tokens", usage.cache_read)
}

fn text_block(text: &str) -> String {
    Obj::new().v("type", "text").v("text", text).done()
}

fn tool_use_block(id: &str, name: &str, input_json: &str) -> String {
    Obj::new()
        .v("type", "tool_use")
        .v("id", id)
        .v("name", name)
        .raw("input", input_json)
        .done()
}

/// Sub-agent lines say which Task they belong to.
struct SubagentMeta<'a> {
    parent: &'a str,
    subagent_type: &'a str,
    description: &'a str,
}

fn assistant_line(
    ctx: &LineCtx,
    msg_id: &str,
    block: &str,
    usage: &Usage,
    sub: Option<&SubagentMeta>,
    uuid: &str,
) -> String {
    let message = Obj::new()
        .v("id", msg_id)
        .v("type", "message")
        .v("role", "assistant")
        .v("model", ctx.model)
        .raw("content", &format!("[{block}]"))
        .v("stop_reason", Value::Null)
        .v("stop_sequence", Value::Null)
        .o("usage", usage_obj(usage))
        .v("context_management", Value::Null);
    let mut line = Obj::new()
        .v("type", "assistant")
        .o("message", message)
        .v("parent_tool_use_id", sub.map(|s| s.parent))
        .v("session_id", ctx.session_id)
        .v("uuid", uuid);
    if let Some(sub) = sub {
        line = line
            .v("subagent_type", sub.subagent_type)
            .v("task_description", sub.description);
    }
    line.done()
}

/// The message Claude Code makes up when the API call fails (model `<synthetic>`).
fn synthetic_error_line(
    ctx: &LineCtx,
    msg_id: &str,
    text: &str,
    error: &str,
    uuid: &str,
) -> String {
    let usage = Obj::new()
        .v("input_tokens", 0)
        .v("output_tokens", 0)
        .v("cache_creation_input_tokens", 0)
        .v("cache_read_input_tokens", 0)
        .v(
            "server_tool_use",
            json!({"web_search_requests": 0, "web_fetch_requests": 0}),
        )
        .v("service_tier", Value::Null);
    let message = Obj::new()
        .v("id", msg_id)
        .v("container", Value::Null)
        .v("model", "<synthetic>")
        .v("role", "assistant")
        .v("stop_details", Value::Null)
        .v("stop_reason", "stop_sequence")
        .v("stop_sequence", "")
        .v("type", "message")
        .o("usage", usage)
        .raw("content", &format!("[{}]", text_block(text)))
        .v("context_management", Value::Null);
    Obj::new()
        .v("type", "assistant")
        .o("message", message)
        .v("parent_tool_use_id", Value::Null)
        .v("session_id", ctx.session_id)
        .v("uuid", uuid)
        .v("error", error)
        .done()
}

struct ToolOutcome {
    content: Value,
    is_error: Option<bool>,
    tool_use_result: Option<Value>,
}

fn tool_result_line(
    ctx: &LineCtx,
    tool_id: &str,
    outcome: &ToolOutcome,
    parent: Option<&str>,
    uuid: &str,
    timestamp: &str,
) -> String {
    let mut block = Obj::new()
        .v("tool_use_id", tool_id)
        .v("type", "tool_result")
        .v("content", outcome.content.clone());
    if let Some(is_error) = outcome.is_error {
        block = block.v("is_error", is_error);
    }
    let message = Obj::new()
        .v("role", "user")
        .raw("content", &format!("[{}]", block.done()));
    let mut line = Obj::new()
        .v("type", "user")
        .o("message", message)
        .v("parent_tool_use_id", parent)
        .v("session_id", ctx.session_id)
        .v("uuid", uuid)
        .v("timestamp", timestamp);
    if let Some(result) = &outcome.tool_use_result {
        line = line.v("tool_use_result", result.clone());
    }
    line.done()
}

fn user_text_line(
    ctx: &LineCtx,
    text: &str,
    parent: Option<&str>,
    uuid: &str,
    timestamp: &str,
) -> String {
    let message = Obj::new()
        .v("role", "user")
        .raw("content", &format!("[{}]", text_block(text)));
    Obj::new()
        .v("type", "user")
        .o("message", message)
        .v("parent_tool_use_id", parent)
        .v("session_id", ctx.session_id)
        .v("uuid", uuid)
        .v("timestamp", timestamp)
        .done()
}

fn api_retry_line(ctx: &LineCtx, retry: &ApiRetry, uuid: &str) -> String {
    Obj::new()
        .v("type", "system")
        .v("subtype", "api_retry")
        .v("attempt", retry.attempt)
        .v("max_retries", retry.max_retries)
        .v("retry_delay_ms", retry.retry_delay_ms)
        .v("error_status", retry.error_status)
        .v("error", retry_error_name(retry.error_status))
        .v("session_id", ctx.session_id)
        .v("uuid", uuid)
        .done()
}

fn compact_line(ctx: &LineCtx, trigger: &str, pre: u64, post: u64, uuid: &str) -> String {
    Obj::new()
        .v("type", "system")
        .v("subtype", "compact_boundary")
        .v("session_id", ctx.session_id)
        .v("uuid", uuid)
        .o(
            "compact_metadata",
            Obj::new()
                .v("trigger", trigger)
                .v("pre_tokens", pre)
                .v("post_tokens", post),
        )
        .done()
}

fn rate_limit_line(
    ctx: &LineCtx,
    status: &str,
    resets_at: i64,
    limit_type: &str,
    uuid: &str,
) -> String {
    Obj::new()
        .v("type", "rate_limit_event")
        .o(
            "rate_limit_info",
            Obj::new()
                .v("status", status)
                .v("resetsAt", resets_at)
                .v("rateLimitType", limit_type),
        )
        .v("uuid", uuid)
        .v("session_id", ctx.session_id)
        .done()
}

fn task_system_line(
    ctx: &LineCtx,
    subtype: &str,
    task_id: &str,
    tool_use_id: &str,
    description: &str,
    uuid: &str,
) -> String {
    let mut line = Obj::new()
        .v("type", "system")
        .v("subtype", subtype)
        .v("task_id", task_id)
        .v("tool_use_id", tool_use_id);
    line = if subtype == "task_started" {
        line.v("description", description)
    } else {
        line.v("status", "completed").v("summary", description)
    };
    line.v("uuid", uuid).v("session_id", ctx.session_id).done()
}

/// What a result line reports; the numbers come from the session's accounting.
struct ResultSpec {
    subtype: String,
    is_error: bool,
    text: Option<String>,
    api_error_status: Option<u16>,
    errors: Vec<String>,
    permission_denials: Vec<Value>,
    terminal_reason: String,
    stop_reason: &'static str,
    /// Overrides `total_cost_usd` (later results keep counting from it).
    cost_usd: Option<f64>,
    num_turns: Option<u64>,
}

impl ResultSpec {
    fn success(text: String, cost_usd: Option<f64>) -> ResultSpec {
        ResultSpec {
            subtype: "success".into(),
            is_error: false,
            text: Some(text),
            api_error_status: None,
            errors: Vec::new(),
            permission_denials: Vec::new(),
            terminal_reason: "completed".into(),
            stop_reason: "end_turn",
            cost_usd,
            num_turns: None,
        }
    }
}

struct ResultStats {
    duration_ms: u64,
    num_turns: u64,
    turn: Totals,
    session: Totals,
    cost: f64,
    context_window: u64,
}

fn result_line(ctx: &LineCtx, spec: &ResultSpec, stats: &ResultStats, uuid: &str) -> String {
    let success = spec.subtype == "success";
    let usage = Obj::new()
        .v("input_tokens", stats.turn.input)
        .v("cache_creation_input_tokens", stats.turn.cache_creation)
        .v("cache_read_input_tokens", stats.turn.cache_read)
        .v("output_tokens", stats.turn.output)
        .v(
            "server_tool_use",
            json!({"web_search_requests": 0, "web_fetch_requests": 0}),
        )
        .v("service_tier", "standard")
        .v(
            "cache_creation",
            json!({"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0}),
        )
        .v("inference_geo", "")
        .v("iterations", json!([]))
        .v("speed", "standard");
    // Like the real CLI, no entry until the model has answered at least once.
    let mut model_usage = Obj::new();
    if stats.session.messages > 0 {
        model_usage = model_usage.o(
            ctx.model,
            Obj::new()
                .v("inputTokens", stats.session.input)
                .v("outputTokens", stats.session.output)
                .v("cacheReadInputTokens", stats.session.cache_read)
                .v("cacheCreationInputTokens", stats.session.cache_creation)
                .v("webSearchRequests", 0)
                .v("costUSD", stats.cost)
                .v("contextWindow", stats.context_window)
                .v("maxOutputTokens", 32_000),
        );
    }
    let mut line = Obj::new()
        .v("type", "result")
        .v("subtype", spec.subtype.as_str())
        .v("is_error", spec.is_error);
    if success {
        line = line.v("api_error_status", spec.api_error_status);
    }
    line = line
        .v("duration_ms", stats.duration_ms)
        .v("duration_api_ms", stats.duration_ms * 9 / 10)
        .v("num_turns", stats.num_turns);
    // Error subtypes carry `errors` and no result text.
    if success {
        line = line.v("result", spec.text.clone().unwrap_or_default());
    }
    line = line
        .v("stop_reason", spec.stop_reason)
        .v("session_id", ctx.session_id)
        .v("total_cost_usd", stats.cost)
        .o("usage", usage)
        .o("modelUsage", model_usage)
        .v("permission_denials", spec.permission_denials.clone())
        .v("terminal_reason", spec.terminal_reason.as_str())
        .v("fast_mode_state", "off")
        .v("uuid", uuid);
    if !success || !spec.errors.is_empty() {
        line = line.v("errors", spec.errors.clone());
    }
    line.done()
}

fn timestamp() -> String {
    format!("{:.3}", jiff::Timestamp::now())
}

fn epoch_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// "3:45pm" in local time, `secs` from now, as in "You've hit your session limit · resets 3:45pm".
fn local_clock_in(secs: i64) -> String {
    let at = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(secs))
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_zoned(jiff::tz::TimeZone::system());
    let hour = at.hour();
    let twelve = if hour % 12 == 0 { 12 } else { hour % 12 };
    let half = if hour < 12 { "am" } else { "pm" };
    format!("{twelve}:{:02}{half}", at.minute())
}

fn default_error_text(kind: &str, status: u16, resets_in_secs: i64) -> String {
    match kind {
        "rate_limit" => format!(
            "You've hit your session limit · resets {}",
            local_clock_in(resets_in_secs)
        ),
        "invalid_request" => "Prompt is too long".into(),
        "authentication_failed" => "Invalid API key · Please run /login".into(),
        other => format!("API Error: {status} {other}"),
    }
}

// ---------------------------------------------------------------------------------------
// Input: the stdin reader, signals, handoff path

enum Event {
    Message(String),
    Eof,
    Signal(i32),
    ToolDone(Option<ExitStatus>),
}

/// The text of a stream-json user message (content as a string or text blocks).
fn user_message_text(line: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(line).ok()?;
    if value.get("type")?.as_str()? != "user" {
        return None;
    }
    match value.get("message")?.get("content")? {
        Value::String(text) => Some(text.clone()),
        Value::Array(blocks) => Some(
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

/// The background reader: messages can arrive while a step plays.
fn spawn_stdin_reader(tx: Sender<Event>) {
    thread::spawn(move || {
        let stdin = io::stdin();
        let mut input = stdin.lock();
        let mut line = Vec::new();
        loop {
            line.clear();
            match input.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => match user_message_text(&line) {
                    Some(text) => {
                        if tx.send(Event::Message(text)).is_err() {
                            return;
                        }
                    }
                    None if line.iter().all(u8::is_ascii_whitespace) => {}
                    None => eprintln!(
                        "ralph sim: ignoring a stdin line that is not a stream-json user message"
                    ),
                },
            }
        }
        let _ = tx.send(Event::Eof);
    });
}

/// Write end of the self-pipe the signal handler writes to (-1 until installed).
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);
/// Process group of the running Bash tool (0: none), so any thread can kill it.
static TOOL_PGID: AtomicI32 = AtomicI32::new(0);
static SIGTERM_EXITS: AtomicBool = AtomicBool::new(true);
/// Set before the SIGTERM exit kills the tool, so the main thread, woken by the tool's
/// death, cannot print its result before the process is gone.
static EXITING: AtomicBool = AtomicBool::new(false);

extern "C" fn note_signal(sig: nix::libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: `fd` is the write end of the self-pipe, which is never closed.
        let pipe = unsafe { BorrowedFd::borrow_raw(fd) };
        // write(2) is async-signal-safe; a full pipe only loses a duplicate signal.
        let _ = nix::unistd::write(pipe, &[sig as u8]);
    }
}

fn kill_tool_group() {
    let pgid = TOOL_PGID.load(Ordering::SeqCst);
    if pgid > 0 {
        let _ = signal::killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// A handler (not SIG_IGN) even for "ignore", because an ignored disposition would be
/// inherited by the Bash tools, and a caught one is reset to default on exec.
fn install_signal_handlers(tx: Sender<Event>, on_sigterm: OnSigterm) -> Result<()> {
    SIGTERM_EXITS.store(on_sigterm == OnSigterm::Exit, Ordering::SeqCst);
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)
        .map_err(|e| Error::wrap("cannot create the signal pipe", e))?;
    SIGNAL_PIPE.store(write.into_raw_fd(), Ordering::SeqCst);
    let action = SigAction::new(
        SigHandler::Handler(note_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: the handler only loads an atomic and calls write(2).
        unsafe { signal::sigaction(sig, &action) }
            .map_err(|e| Error::wrap(format!("cannot install a {sig} handler"), e))?;
    }
    thread::spawn(move || {
        let mut pipe = File::from(read);
        let mut byte = [0u8; 1];
        while pipe.read_exact(&mut byte).is_ok() {
            let sig = i32::from(byte[0]);
            // Handled here, not by the main thread, so it is immediate even while the
            // main thread is blocked writing to a full pipe.
            if sig == Signal::SIGTERM as i32 && SIGTERM_EXITS.load(Ordering::SeqCst) {
                EXITING.store(true, Ordering::SeqCst);
                kill_tool_group();
                std::process::exit(143);
            }
            if tx.send(Event::Signal(sig)).is_err() {
                break;
            }
        }
    });
    Ok(())
}

static BACKTICKED_MD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"`([^`\n]*\.md)`").expect("valid regex"));
static BARE_MD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(?:^|[\s(\["'])([\w~][\w./~-]*\.md)\b"#).expect("valid regex"));

/// Where a checkpoint request wants the notes: the first backticked path ending in
/// `.md`, else the first bare word ending in `.md`.
fn notes_path(message: &str) -> Option<String> {
    if let Some(found) = BACKTICKED_MD
        .captures_iter(message)
        .map(|c| c[1].trim().to_string())
        .find(|p| p.len() > 3)
    {
        return Some(found);
    }
    BARE_MD.captures(message).map(|c| c[1].to_string())
}

// ---------------------------------------------------------------------------------------
// Ids

/// Random-looking ids without a rand dependency (splitmix64).
struct Ids {
    state: u64,
}

impl Ids {
    fn new() -> Ids {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Ids {
            state: nanos
                ^ (u64::from(std::process::id()) << 32)
                ^ COUNTER.fetch_add(0x9E37_79B9, Ordering::Relaxed),
        }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn hex20(&mut self) -> String {
        format!("{:016x}{:04x}", self.next(), self.next() & 0xffff)
    }

    fn uuid(&mut self) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            ((b >> 48) & 0x3fff) | 0x8000,
            b & 0xffff_ffff_ffff
        )
    }

    fn msg_id(&mut self) -> String {
        format!("msg_{}", self.hex20())
    }

    fn tool_id(&mut self) -> String {
        format!("toolu_{}", self.hex20())
    }
}

// ---------------------------------------------------------------------------------------
// The player

/// Why playing stopped early.
enum Halt {
    /// Exit now with this code, printing nothing more.
    Exit(i32),
    /// SIGINT while running: print the abort lines, exit 0.
    Abort,
    Fail(Error),
}

impl From<Error> for Halt {
    fn from(e: Error) -> Halt {
        Halt::Fail(e)
    }
}

type Flow<T> = std::result::Result<T, Halt>;

enum Wake {
    Timeout,
    Message(String),
    Eof,
    ToolDone(Option<ExitStatus>),
}

/// Which events end a wait; the others are recorded (messages queue in the inbox).
#[derive(Clone, Copy, Default)]
struct Until {
    message: bool,
    eof: bool,
    tool: bool,
}

struct OpenTask {
    id: String,
    task_id: String,
    description: String,
    prompt: String,
    subagent_type: String,
    output: Option<String>,
    last_text: Option<String>,
}

struct InFlight {
    tool_id: String,
    parent: Option<String>,
}

struct Sim<'a> {
    cfg: Settings,
    permission_mode: String,
    scenario_name: String,
    steps: &'a [Step],
    iteration: usize,
    cwd: PathBuf,
    rx: Receiver<Event>,
    /// Kept so tool waiter threads can report, and so `rx` never disconnects.
    tx: Sender<Event>,
    ids: Ids,
    session_id: String,
    started: Instant,
    inbox: VecDeque<String>,
    stdin_eof: bool,
    /// Between the prompt and the final result (SIGINT aborts instead of just exiting).
    running: bool,
    /// Main-thread occupancy of the newest turn, the next turn's default.
    context: Usage,
    sub_context: Usage,
    last_text: Option<String>,
    /// Main-thread usage since the last result.
    turn: Totals,
    turns: u64,
    /// Every message of the session, for `modelUsage` and the cost.
    session: Totals,
    cost_adjust: f64,
    open_task: Option<OpenTask>,
    /// Parent id for sub-agent steps that have no Task before them.
    orphan_parent: Option<String>,
    in_flight: Option<InFlight>,
    exit_code: i32,
    /// What the Write/Edit calls touched, for the default handoff notes.
    touched: Vec<String>,
}

impl Sim<'_> {
    fn run(mut self) -> Result<i32> {
        match self.play() {
            Ok(code) | Err(Halt::Exit(code)) => Ok(code),
            Err(Halt::Abort) => match self.abort() {
                Ok(()) | Err(Halt::Exit(_)) | Err(Halt::Abort) => Ok(0),
                Err(Halt::Fail(e)) => Err(e),
            },
            Err(Halt::Fail(e)) => Err(e),
        }
    }

    fn play(&mut self) -> Flow<i32> {
        // Like the real CLI, nothing happens before the prompt (or stdin's end) arrives;
        // its text plays no part beyond `record_messages`.
        self.wait(
            None,
            Until {
                message: true,
                eof: true,
                tool: false,
            },
        )?;
        self.session_id = self.ids.uuid();
        self.running = true;
        let uuid = self.ids.uuid();
        let line = init_line(
            &self.ctx(),
            &self.cfg.model,
            &self.cwd,
            &self.permission_mode,
            &uuid,
            &self.scenario_name,
        );
        self.emit(&line)?;

        let steps = self.steps;
        let has_result = steps
            .iter()
            .any(|s| matches!(s.kind, StepKind::Result(_) | StepKind::Error(_)));
        for step in steps {
            if self.boundary()? {
                return self.idle();
            }
            let delay = step
                .delay_ms
                .map_or(self.cfg.step_delay, Duration::from_millis);
            if !delay.is_zero() {
                self.pause(delay)?;
                if self.boundary()? {
                    return self.idle();
                }
            }
            if step.ends_subagent() {
                self.close_task()?;
                self.orphan_parent = None;
            }
            if self.play_step(&step.kind)? {
                return self.idle();
            }
        }
        if self.boundary()? {
            return self.idle();
        }
        self.close_task()?;
        if !has_result {
            let text = self.last_text.clone().unwrap_or_default();
            self.emit_result(ResultSpec::success(text, self.cfg.cost_usd))?;
        }
        self.idle()
    }

    /// Plays one step; true when the script ends here (an API error).
    fn play_step(&mut self, kind: &StepKind) -> Flow<bool> {
        match kind {
            StepKind::Turn(turn) => self.play_turn(turn)?,
            StepKind::Raw { bytes, newline } => self.emit_bytes(bytes, *newline)?,
            StepKind::BigLine { bytes } => self.emit_big_line(*bytes)?,
            StepKind::Partial { bytes, exit_code } => {
                self.emit_bytes(bytes, false)?;
                return Err(Halt::Exit(exit_code.unwrap_or(self.exit_code)));
            }
            StepKind::ApiRetry(retry) => {
                let uuid = self.ids.uuid();
                let line = api_retry_line(&self.ctx(), retry, &uuid);
                self.emit(&line)?;
            }
            StepKind::Compact(compact) => {
                let pre = compact.pre_tokens.unwrap_or(self.context.total());
                let post = compact.post_tokens.unwrap_or(pre.min(DEFAULT_CONTEXT));
                let uuid = self.ids.uuid();
                let line = compact_line(&self.ctx(), &compact.trigger, pre, post, &uuid);
                self.emit(&line)?;
                // What follows a compaction starts from the summary.
                self.context = Usage::from_context(post);
            }
            StepKind::RateLimit(limit) => {
                let uuid = self.ids.uuid();
                let line = rate_limit_line(
                    &self.ctx(),
                    &limit.status,
                    epoch_secs() + limit.resets_in_secs,
                    &limit.limit_type,
                    &uuid,
                );
                self.emit(&line)?;
            }
            StepKind::Error(error) => {
                self.play_error(error)?;
                return Ok(true);
            }
            StepKind::Result(result) => self.play_result(result)?,
            StepKind::Hang => {
                self.wait(None, Until::default())?;
            }
            StepKind::Sleep { ms } => self.pause(Duration::from_millis(*ms))?,
            StepKind::Exit { code } => return Err(Halt::Exit(*code)),
            StepKind::Stderr { text } => {
                let mut err = io::stderr().lock();
                let _ = writeln!(err, "{text}");
            }
            StepKind::StderrFlood { bytes } => flood_stderr(*bytes),
        }
        Ok(false)
    }

    fn ctx(&self) -> LineCtx<'_> {
        LineCtx {
            session_id: &self.session_id,
            model: &self.cfg.api_model,
        }
    }

    // --- waiting -----------------------------------------------------------------------

    fn wait(&mut self, deadline: Option<Instant>, until: Until) -> Flow<Wake> {
        loop {
            let event = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(Wake::Timeout);
                    }
                    match self.rx.recv_timeout(left) {
                        Ok(event) => event,
                        Err(RecvTimeoutError::Timeout) => return Ok(Wake::Timeout),
                        Err(RecvTimeoutError::Disconnected) => {
                            unreachable!("the sim holds a sender")
                        }
                    }
                }
                None => self.rx.recv().expect("the sim holds a sender"),
            };
            if let Some(wake) = self.take(event, until)? {
                return Ok(wake);
            }
        }
    }

    /// Records one event; returns it as a wake-up if `until` asks for it.
    fn take(&mut self, event: Event, until: Until) -> Flow<Option<Wake>> {
        match event {
            Event::Signal(sig) => self.on_signal(sig)?,
            Event::Message(text) => {
                self.record_message(&text);
                if until.message {
                    return Ok(Some(Wake::Message(text)));
                }
                self.inbox.push_back(text);
            }
            Event::Eof => {
                self.stdin_eof = true;
                if until.eof {
                    return Ok(Some(Wake::Eof));
                }
            }
            Event::ToolDone(status) => {
                if until.tool {
                    return Ok(Some(Wake::ToolDone(status)));
                }
            }
        }
        Ok(None)
    }

    /// Takes what has arrived without blocking.
    fn drain(&mut self) -> Flow<()> {
        loop {
            match self.rx.try_recv() {
                Ok(event) => {
                    self.take(event, Until::default())?;
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return Ok(()),
            }
        }
    }

    /// A delay between steps is model time: a checkpoint request cuts it short.
    fn pause(&mut self, delay: Duration) -> Flow<()> {
        let until = Until {
            message: self.cfg.on_message == OnMessage::Comply,
            ..Until::default()
        };
        if let Wake::Message(text) = self.wait(Some(Instant::now() + delay), until)? {
            self.inbox.push_back(text);
        }
        Ok(())
    }

    fn on_signal(&mut self, sig: i32) -> Flow<()> {
        if sig != Signal::SIGINT as i32 {
            // SIGTERM only gets here when the scenario ignores it.
            return Ok(());
        }
        match self.cfg.on_sigint {
            OnSigint::Ignore => Ok(()),
            OnSigint::Exit => {
                kill_tool_group();
                Err(Halt::Exit(130))
            }
            OnSigint::Abort if self.running => {
                kill_tool_group();
                Err(Halt::Abort)
            }
            OnSigint::Abort => Err(Halt::Exit(0)),
        }
    }

    fn record_message(&mut self, text: &str) {
        let Some(path) = &self.cfg.record_messages else {
            return;
        };
        let path = self.cwd.join(path);
        let line = Obj::new()
            .v("iteration", self.iteration)
            .v("text", text)
            .done();
        let written = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = written {
            eprintln!(
                "ralph sim: cannot record a message in {}: {e}",
                path.display()
            );
        }
    }

    // --- messages ----------------------------------------------------------------------

    /// At a step boundary: true when a checkpoint request was complied with.
    fn boundary(&mut self) -> Flow<bool> {
        self.drain()?;
        match self.cfg.on_message {
            OnMessage::Ignore => {
                self.inbox.clear();
                Ok(false)
            }
            OnMessage::Comply => match self.inbox.pop_front() {
                Some(text) => {
                    self.inbox.clear();
                    self.comply(&text)?;
                    Ok(true)
                }
                None => Ok(false),
            },
        }
    }

    /// After the final result: like the real CLI, wait for stdin's end or another message.
    fn idle(&mut self) -> Flow<i32> {
        self.running = false;
        loop {
            self.drain()?;
            if let Some(text) = self.inbox.pop_front() {
                self.running = true;
                self.answer(&text)?;
                self.running = false;
                continue;
            }
            if self.stdin_eof {
                return Ok(self.exit_code);
            }
            let until = Until {
                message: true,
                eof: true,
                tool: false,
            };
            if let Wake::Message(text) = self.wait(None, until)? {
                self.inbox.push_back(text);
            }
        }
    }

    fn answer(&mut self, text: &str) -> Flow<()> {
        if self.cfg.on_message == OnMessage::Comply && notes_path(text).is_some() {
            return self.comply(text);
        }
        let reply = Turn {
            text: Some(self.cfg.reply.clone()),
            output_tokens: DEFAULT_OUTPUT_TOKENS,
            ..Turn::default()
        };
        self.play_turn(&reply)?;
        self.emit_result(ResultSpec::success(self.cfg.reply.clone(), None))
    }

    fn comply(&mut self, message: &str) -> Flow<()> {
        if !self.cfg.comply_delay.is_zero() {
            self.wait(
                Some(Instant::now() + self.cfg.comply_delay),
                Until::default(),
            )?;
        }
        self.close_task()?;
        let path = notes_path(message).unwrap_or_else(|| "handoff.md".into());
        let content = self
            .cfg
            .handoff_notes
            .clone()
            .unwrap_or_else(|| self.default_notes());
        let write = Turn {
            text: Some(format!(
                "Writing my handoff notes to {path} as asked, then stopping."
            )),
            output_tokens: DEFAULT_OUTPUT_TOKENS,
            tools: vec![Tool::Write {
                path: path.clone(),
                content,
            }],
            ..Turn::default()
        };
        self.play_turn(&write)?;
        let done = format!("Handoff notes written to {path}; stopping here.");
        let stop = Turn {
            text: Some(done.clone()),
            output_tokens: DEFAULT_OUTPUT_TOKENS,
            ..Turn::default()
        };
        self.play_turn(&stop)?;
        self.emit_result(ResultSpec::success(done, self.cfg.cost_usd))
    }

    fn default_notes(&self) -> String {
        let mut notes = format!(
            "# Handoff notes\n\nIteration {} stopped on request (context checkpoint).\n\n## Done\n",
            self.iteration
        );
        if self.touched.is_empty() {
            notes.push_str("- nothing finished yet\n");
        }
        for item in &self.touched {
            notes.push_str(&format!("- {item}\n"));
        }
        notes.push_str(
            "\n## In progress\n- nothing: the last edit was finished before stopping\n\n\
             ## Decisions\n- none beyond what the plan says\n\n\
             ## Next\n- continue with the first unchecked item of the plan\n",
        );
        notes
    }

    // --- steps -------------------------------------------------------------------------

    fn play_turn(&mut self, turn: &Turn) -> Flow<()> {
        let msg_id = self.ids.msg_id();
        let usage = turn.usage.unwrap_or(if turn.subagent {
            self.sub_context
        } else {
            self.context
        });
        let text = match (&turn.text, turn.tools.is_empty()) {
            (Some(text), _) => Some(text.clone()),
            // An assistant message always has content.
            (None, true) => Some("Working on it.".to_string()),
            (None, false) => None,
        };
        let parent = if turn.subagent {
            Some(self.subagent_parent())
        } else {
            None
        };
        let (sub_type, sub_desc) = match &self.open_task {
            Some(task) if turn.subagent => (task.subagent_type.clone(), task.description.clone()),
            _ => ("general-purpose".to_string(), "Sub-task".to_string()),
        };
        let sub = parent.as_deref().map(|parent| SubagentMeta {
            parent,
            subagent_type: &sub_type,
            description: &sub_desc,
        });

        let mut blocks = Vec::new();
        if let Some(text) = &text {
            blocks.push(text_block(text));
        }
        let mut calls = Vec::new();
        for tool in &turn.tools {
            let id = self.ids.tool_id();
            blocks.push(tool_use_block(&id, tool.name(), &self.tool_input(tool)));
            calls.push((id, tool));
        }
        for block in &blocks {
            let uuid = self.ids.uuid();
            let line = assistant_line(&self.ctx(), &msg_id, block, &usage, sub.as_ref(), &uuid);
            self.emit(&line)?;
        }

        self.session.add(&usage, turn.output_tokens);
        if turn.subagent {
            self.sub_context = usage;
            if let (Some(task), Some(text)) = (&mut self.open_task, &text) {
                task.last_text = Some(text.clone());
            }
        } else {
            self.context = usage;
            self.turn.add(&usage, turn.output_tokens);
            self.turns += 1;
            if let Some(text) = text {
                self.last_text = Some(text);
            }
        }
        for (id, tool) in calls {
            self.run_tool(tool, &id, parent.as_deref())?;
        }
        Ok(())
    }

    fn subagent_parent(&mut self) -> String {
        if let Some(task) = &self.open_task {
            return task.id.clone();
        }
        let ids = &mut self.ids;
        self.orphan_parent
            .get_or_insert_with(|| ids.tool_id())
            .clone()
    }

    fn abs(&self, path: &str) -> PathBuf {
        self.cwd.join(path)
    }

    /// The tool_use `input`, keys in the real CLI's order.
    fn tool_input(&self, tool: &Tool) -> String {
        match tool {
            Tool::Write { path, content } => Obj::new()
                .v("file_path", self.abs(path).display().to_string())
                .v("content", content.as_str())
                .done(),
            Tool::Edit {
                path,
                old,
                new,
                replace_all,
            } => Obj::new()
                .v("replace_all", *replace_all)
                .v("file_path", self.abs(path).display().to_string())
                .v("old_string", old.as_str())
                .v("new_string", new.as_str())
                .done(),
            Tool::Bash {
                command,
                description,
                ..
            } => Obj::new()
                .v("command", command.as_str())
                .v(
                    "description",
                    description.as_deref().unwrap_or("Run a shell command"),
                )
                .done(),
            Tool::Task {
                description,
                prompt,
                subagent_type,
                ..
            } => Obj::new()
                .v("description", description.as_str())
                .v("prompt", prompt.as_str())
                .v("subagent_type", subagent_type.as_str())
                .done(),
            Tool::Other { input, .. } => input.to_string(),
        }
    }

    fn run_tool(&mut self, tool: &Tool, id: &str, parent: Option<&str>) -> Flow<()> {
        let outcome = match tool {
            Tool::Write { path, content } => self.write_file(path, content),
            Tool::Edit {
                path,
                old,
                new,
                replace_all,
            } => self.edit_file(path, old, new, *replace_all),
            Tool::Bash {
                command,
                inherit_stdout,
                ..
            } => {
                self.in_flight = Some(InFlight {
                    tool_id: id.to_string(),
                    parent: parent.map(str::to_string),
                });
                let outcome = self.run_bash(command, *inherit_stdout)?;
                self.in_flight = None;
                outcome
            }
            Tool::Task {
                description,
                prompt,
                subagent_type,
                output,
            } => {
                let task_id = self.ids.hex20()[..17].to_string();
                return self.open_task(OpenTask {
                    id: id.to_string(),
                    task_id,
                    description: description.clone(),
                    prompt: prompt.clone(),
                    subagent_type: subagent_type.clone(),
                    output: output.clone(),
                    last_text: None,
                });
            }
            Tool::Other {
                output, is_error, ..
            } => ToolOutcome {
                content: Value::from(output.as_str()),
                is_error: Some(*is_error),
                tool_use_result: Some(Value::from(output.as_str())),
            },
        };
        self.emit_tool_result(id, &outcome, parent)
    }

    fn emit_tool_result(
        &mut self,
        id: &str,
        outcome: &ToolOutcome,
        parent: Option<&str>,
    ) -> Flow<()> {
        let uuid = self.ids.uuid();
        let line = tool_result_line(&self.ctx(), id, outcome, parent, &uuid, &timestamp());
        self.emit(&line)
    }

    fn write_file(&mut self, path: &str, content: &str) -> ToolOutcome {
        let abs = self.abs(path);
        let shown = abs.display().to_string();
        let original = fs::read_to_string(&abs).ok();
        let written = abs
            .parent()
            .map_or(Ok(()), fs::create_dir_all)
            .and_then(|()| fs::write(&abs, content));
        if let Err(e) = written {
            return tool_error(format!("Cannot write {shown}: {e}"));
        }
        self.touched.push(format!("wrote {path}"));
        let message = if original.is_some() {
            format!("The file {shown} has been updated successfully. {FILE_STATE_NOTE}")
        } else {
            format!("File created successfully at: {shown} {FILE_STATE_NOTE}")
        };
        ToolOutcome {
            content: Value::from(message),
            is_error: None,
            tool_use_result: Some(json!({
                "type": if original.is_some() { "update" } else { "create" },
                "filePath": shown,
                "content": content,
                "structuredPatch": [],
                "originalFile": original,
                "userModified": false,
            })),
        }
    }

    fn edit_file(&mut self, path: &str, old: &str, new: &str, replace_all: bool) -> ToolOutcome {
        let abs = self.abs(path);
        let shown = abs.display().to_string();
        let Ok(original) = fs::read_to_string(&abs) else {
            return tool_error("File does not exist.".into());
        };
        let found = if old.is_empty() {
            0
        } else {
            original.matches(old).count()
        };
        if found == 0 {
            return tool_error(format!(
                "String to replace not found in file.\nString: {old}"
            ));
        }
        if found > 1 && !replace_all {
            return tool_error(format!(
                "Found {found} matches of the string to replace, but replace_all is false. \
                 To replace all occurrences, set replace_all to true. To replace only one \
                 occurrence, please provide more context to uniquely identify the \
                 instance.\nString: {old}"
            ));
        }
        let updated = if replace_all {
            original.replace(old, new)
        } else {
            original.replacen(old, new, 1)
        };
        if let Err(e) = fs::write(&abs, &updated) {
            return tool_error(format!("Cannot write {shown}: {e}"));
        }
        self.touched.push(format!("edited {path}"));
        ToolOutcome {
            content: Value::from(format!(
                "The file {shown} has been updated successfully. {FILE_STATE_NOTE}"
            )),
            is_error: None,
            tool_use_result: Some(json!({
                "filePath": shown,
                "oldString": old,
                "newString": new,
                "originalFile": original,
                "structuredPatch": [],
                "userModified": false,
                "replaceAll": replace_all,
            })),
        }
    }

    /// Runs `sh -c command` in its own process group (so an abort can kill everything it
    /// started), with output going to an unlinked temp file rather than a pipe, so a
    /// process it leaves in the background cannot keep the sim waiting.
    fn run_bash(&mut self, command: &str, inherit_stdout: bool) -> Flow<ToolOutcome> {
        let capture = capture_file()
            .map_err(|e| Error::io("cannot create a capture file in", std::env::temp_dir(), e))?;
        let clone = || {
            capture
                .try_clone()
                .map_err(|e| Halt::Fail(Error::io("cannot duplicate", "the capture file", e)))
        };
        let stdout = if inherit_stdout {
            Stdio::inherit()
        } else {
            Stdio::from(clone()?)
        };
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(&self.cwd)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::from(clone()?))
            .process_group(0)
            .spawn()
            .map_err(|e| Error::io("cannot run", "sh", e))?;
        TOOL_PGID.store(child.id() as i32, Ordering::SeqCst);
        let tx = self.tx.clone();
        thread::spawn(move || {
            let status = child.wait().ok();
            let _ = tx.send(Event::ToolDone(status));
        });
        let until = Until {
            tool: true,
            ..Until::default()
        };
        let status = loop {
            // On a halt the group stays recorded so the abort can reap it.
            if let Wake::ToolDone(status) = self.wait(None, until)? {
                break status;
            }
        };
        TOOL_PGID.store(0, Ordering::SeqCst);
        let mut output = read_capture(&capture);
        let code = status.map_or(1, |s| s.code().unwrap_or(128 + s.signal().unwrap_or(0)));
        let stdout_text = output.clone();
        if code != 0 {
            output = format!("Exit code {code}\n{output}").trim_end().to_string();
        } else if output.is_empty() {
            output = "(Bash completed with no output)".into();
        }
        Ok(ToolOutcome {
            content: Value::from(output),
            is_error: Some(code != 0),
            tool_use_result: Some(json!({
                "stdout": stdout_text,
                "stderr": "",
                "interrupted": false,
                "isImage": false,
                "noOutputExpected": false,
            })),
        })
    }

    fn open_task(&mut self, task: OpenTask) -> Flow<()> {
        let uuid = self.ids.uuid();
        let line = task_system_line(
            &self.ctx(),
            "task_started",
            &task.task_id,
            &task.id,
            &task.description,
            &uuid,
        );
        self.emit(&line)?;
        let uuid = self.ids.uuid();
        let line = user_text_line(
            &self.ctx(),
            &task.prompt,
            Some(&task.id),
            &uuid,
            &timestamp(),
        );
        self.emit(&line)?;
        self.open_task = Some(task);
        Ok(())
    }

    /// A Task's result comes after its sub-agent's lines, before the main thread goes on.
    fn close_task(&mut self) -> Flow<()> {
        let Some(task) = self.open_task.take() else {
            return Ok(());
        };
        let uuid = self.ids.uuid();
        let line = task_system_line(
            &self.ctx(),
            "task_notification",
            &task.task_id,
            &task.id,
            &task.description,
            &uuid,
        );
        self.emit(&line)?;
        let output = task
            .output
            .or(task.last_text)
            .unwrap_or_else(|| "Done.".into());
        let content = json!([{"type": "text", "text": output}]);
        let outcome = ToolOutcome {
            content: content.clone(),
            is_error: None,
            tool_use_result: Some(json!({
                "status": "completed",
                "prompt": task.prompt,
                "agentType": task.subagent_type,
                "content": content,
            })),
        };
        self.emit_tool_result(&task.id, &outcome, None)
    }

    fn play_error(&mut self, error: &ErrorStep) -> Flow<()> {
        self.close_task()?;
        let text = error.text.clone().unwrap_or_else(|| {
            default_error_text(&error.kind, error.api_error_status, error.resets_in_secs)
        });
        let (msg_id, uuid) = (self.ids.msg_id(), self.ids.uuid());
        let line = synthetic_error_line(&self.ctx(), &msg_id, &text, &error.kind, &uuid);
        self.emit(&line)?;
        self.turns += 1;
        if let Some(code) = error.exit_code {
            self.exit_code = code;
        }
        let terminal_reason = error.terminal_reason.clone().unwrap_or_else(|| {
            if text.contains("Prompt is too long") {
                "prompt_too_long".into()
            } else {
                "api_error".into()
            }
        });
        self.emit_result(ResultSpec {
            subtype: "success".into(),
            is_error: true,
            text: Some(text),
            api_error_status: Some(error.api_error_status),
            errors: Vec::new(),
            permission_denials: Vec::new(),
            terminal_reason,
            stop_reason: "stop_sequence",
            cost_usd: error.cost_usd.or(self.cfg.cost_usd),
            num_turns: None,
        })
    }

    fn play_result(&mut self, result: &ResultStep) -> Flow<()> {
        let success = result.subtype == "success";
        // The real CLI's result text is the last assistant text: say it first.
        if success && !result.is_error && self.last_text.as_deref() != Some(&result.text) {
            let turn = Turn {
                text: Some(result.text.clone()),
                usage: result.context.map(Usage::from_context),
                output_tokens: DEFAULT_OUTPUT_TOKENS,
                ..Turn::default()
            };
            self.play_turn(&turn)?;
        }
        if let Some(code) = result.exit_code {
            self.exit_code = code;
        }
        self.emit_result(ResultSpec {
            subtype: result.subtype.clone(),
            is_error: result.is_error,
            text: success.then(|| result.text.clone()),
            api_error_status: result.api_error_status,
            errors: result.errors.clone(),
            permission_denials: result.permission_denials.clone(),
            terminal_reason: result.terminal_reason.clone(),
            stop_reason: if success { "end_turn" } else { "tool_use" },
            cost_usd: result.cost_usd.or(self.cfg.cost_usd),
            num_turns: result.num_turns,
        })
    }

    fn emit_result(&mut self, spec: ResultSpec) -> Flow<()> {
        let computed = self.session.cost();
        if let Some(cost) = spec.cost_usd {
            self.cost_adjust = cost - computed;
        }
        let stats = ResultStats {
            duration_ms: self.started.elapsed().as_millis() as u64,
            num_turns: spec.num_turns.unwrap_or(self.turns.max(1)),
            turn: self.turn,
            session: self.session,
            cost: (computed + self.cost_adjust).max(0.0),
            context_window: self.cfg.context_window,
        };
        let uuid = self.ids.uuid();
        let line = result_line(&self.ctx(), &spec, &stats, &uuid);
        self.emit(&line)?;
        self.turn = Totals::default();
        self.turns = 0;
        Ok(())
    }

    /// SIGINT while running: what the real CLI prints before it exits 0.
    fn abort(&mut self) -> Flow<()> {
        if TOOL_PGID.load(Ordering::SeqCst) > 0 {
            // Reap the killed tool so it is gone by the time anyone looks.
            let deadline = Instant::now() + Duration::from_millis(200);
            while let Ok(event) = self
                .rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                if matches!(event, Event::ToolDone(_)) {
                    break;
                }
            }
            TOOL_PGID.store(0, Ordering::SeqCst);
        }
        let in_flight = self.in_flight.take().or_else(|| {
            self.open_task.take().map(|task| InFlight {
                tool_id: task.id,
                parent: None,
            })
        });
        let ts = timestamp();
        let interrupted = if let Some(tool) = &in_flight {
            let outcome = ToolOutcome {
                content: Value::from(
                    "The user doesn't want to proceed with this tool use. The tool use was \
                     rejected (eg. if it was a file edit, the new_string was NOT written to the \
                     file). STOP what you are doing and wait for the user to tell you how to \
                     proceed.",
                ),
                is_error: Some(true),
                tool_use_result: Some(Value::from("User rejected tool use")),
            };
            let uuid = self.ids.uuid();
            let line = tool_result_line(
                &self.ctx(),
                &tool.tool_id,
                &outcome,
                tool.parent.as_deref(),
                &uuid,
                &ts,
            );
            self.emit(&line)?;
            "[Request interrupted by user for tool use]"
        } else {
            "[Request interrupted by user]"
        };
        let uuid = self.ids.uuid();
        let line = user_text_line(&self.ctx(), interrupted, None, &uuid, &ts);
        self.emit(&line)?;
        self.emit_result(ResultSpec {
            subtype: "error_during_execution".into(),
            is_error: true,
            text: None,
            api_error_status: None,
            errors: vec![default_subtype_error("error_during_execution")],
            permission_denials: Vec::new(),
            terminal_reason: "aborted_tools".into(),
            stop_reason: "tool_use",
            cost_usd: None,
            num_turns: None,
        })
    }

    // --- output ------------------------------------------------------------------------

    fn emit(&mut self, line: &str) -> Flow<()> {
        self.emit_bytes(line.as_bytes(), true)
    }

    fn emit_bytes(&mut self, bytes: &[u8], newline: bool) -> Flow<()> {
        hold_if_exiting();
        let mut out = io::stdout().lock();
        out.write_all(bytes)
            .and_then(|()| {
                if newline {
                    out.write_all(b"\n")
                } else {
                    Ok(())
                }
            })
            .and_then(|()| out.flush())
            .map_err(|e| Halt::Fail(Error::io("cannot write to", "stdout", e)))
    }

    /// A valid tool_result line of about `bytes` bytes, written in chunks so that a
    /// 64 MiB line never sits in memory.
    fn emit_big_line(&mut self, bytes: u64) -> Flow<()> {
        let (id, uuid) = (self.ids.tool_id(), self.ids.uuid());
        let prefix = format!(
            r#"{{"type":"user","message":{{"role":"user","content":[{{"tool_use_id":"{id}","type":"tool_result","content":""#
        );
        let suffix = format!(
            r#"","is_error":false}}]}},"parent_tool_use_id":null,"session_id":"{}","uuid":"{uuid}","timestamp":"{}"}}"#,
            self.session_id,
            timestamp()
        );
        let overhead = (prefix.len() + suffix.len() + 1) as u64;
        let mut left = bytes.saturating_sub(overhead);
        let chunk = [b'x'; 64 * 1024];
        hold_if_exiting();
        let mut out = io::stdout().lock();
        let fail = |e| Halt::Fail(Error::io("cannot write to", "stdout", e));
        out.write_all(prefix.as_bytes()).map_err(fail)?;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            out.write_all(&chunk[..n]).map_err(fail)?;
            left -= n as u64;
        }
        out.write_all(suffix.as_bytes()).map_err(fail)?;
        out.write_all(b"\n").map_err(fail)?;
        out.flush().map_err(fail)
    }
}

/// The signal thread is exiting the process: print nothing more.
fn hold_if_exiting() {
    while EXITING.load(Ordering::SeqCst) {
        thread::park();
    }
}

fn tool_error(message: String) -> ToolOutcome {
    ToolOutcome {
        content: Value::from(format!("<tool_use_error>{message}</tool_use_error>")),
        is_error: Some(true),
        tool_use_result: Some(Value::from(format!("Error: {message}"))),
    }
}

fn flood_stderr(bytes: u64) {
    let line = "ralph sim: stderr flood .......................................................\n";
    let chunk = line.repeat(800);
    let mut err = io::stderr().lock();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        if err.write_all(&chunk.as_bytes()[..n]).is_err() {
            return;
        }
        left -= n as u64;
    }
}

/// An anonymous temp file (unlinked at once) for a tool's output.
fn capture_file() -> io::Result<File> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir();
    loop {
        let path = dir.join(format!(
            "ralph-sim-{}-{}.out",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => {
                let _ = fs::remove_file(&path);
                return Ok(file);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Reads with pread, so the offset that background writers share is left alone.
fn read_capture(file: &File) -> String {
    let mut buf = vec![0u8; TOOL_OUTPUT_LIMIT + 1];
    let mut len = 0;
    while len < buf.len() {
        match file.read_at(&mut buf[len..], len as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => len += n,
        }
    }
    let truncated = len > TOOL_OUTPUT_LIMIT;
    buf.truncate(len.min(TOOL_OUTPUT_LIMIT));
    let mut text = String::from_utf8_lossy(&buf).trim_end().to_string();
    if truncated {
        text.push_str("\n... [output truncated]");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn parse(text: &str) -> Scenario {
        Scenario::parse(text, "test.toml").unwrap_or_else(|e| panic!("{}", e.render()))
    }

    fn parse_err(text: &str) -> String {
        Scenario::parse(text, "test.toml").unwrap_err().render()
    }

    fn keys(value: &Value) -> BTreeSet<String> {
        value.as_object().unwrap().keys().cloned().collect()
    }

    // Lines copied from fixtures/claude-2.1.197 (the shapes the sim must reproduce).
    const FIXTURE_ASSISTANT: &str = r##"{"type":"assistant","message":{"id":"msg_61950bff2e094d629020","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"toolu_ac36c3dad4c1424abc0a","name":"Bash","input":{"command":"cat fix_plan.md","description":"Read the plan"}}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3200,"output_tokens":1,"cache_creation_input_tokens":18000,"cache_read_input_tokens":0},"context_management":null},"parent_tool_use_id":null,"session_id":"1e95a07a-cda7-423e-94cb-8b187ea761d5","uuid":"c0ff72c5-5120-4531-b28f-bcc80ca17314"}"##;
    const FIXTURE_TOOL_RESULT: &str = r##"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_ac36c3dad4c1424abc0a","type":"tool_result","content":"# Plan\n- [ ] parser\n- [ ] tests","is_error":false}]},"parent_tool_use_id":null,"session_id":"1e95a07a-cda7-423e-94cb-8b187ea761d5","uuid":"41154c00-db0d-43b3-a0b8-ef8119b6d07f","timestamp":"2026-11-21T22:18:24.779Z","tool_use_result":{"stdout":"# Plan\n- [ ] parser\n- [ ] tests","stderr":"","interrupted":false,"isImage":false,"noOutputExpected":false}}"##;
    const FIXTURE_RESULT: &str = r##"{"type":"result","subtype":"success","is_error":false,"api_error_status":null,"duration_ms":833,"duration_api_ms":236,"ttft_ms":148,"ttft_stream_ms":146,"time_to_request_ms":128,"num_turns":5,"result":"All items are done.\n\n<promise>COMPLETE</promise>","stop_reason":"end_turn","session_id":"1e95a07a-cda7-423e-94cb-8b187ea761d5","total_cost_usd":0.255075,"usage":{"input_tokens":5700,"cache_creation_input_tokens":26300,"cache_read_input_tokens":459500,"output_tokens":100,"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0},"service_tier":"standard","cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0},"inference_geo":"","iterations":[],"speed":"standard"},"modelUsage":{"claude-sonnet-4-5":{"inputTokens":5700,"outputTokens":100,"cacheReadInputTokens":459500,"cacheCreationInputTokens":26300,"webSearchRequests":0,"costUSD":0.255075,"contextWindow":200000,"maxOutputTokens":32000}},"permission_denials":[],"terminal_reason":"completed","fast_mode_state":"off","uuid":"845ecbfd-ec9f-426b-9680-ba8e22e525b7"}"##;
    const FIXTURE_ABORT_RESULT: &str = r##"{"type":"result","subtype":"error_during_execution","duration_ms":2454,"duration_api_ms":40,"is_error":true,"num_turns":3,"stop_reason":"tool_use","session_id":"860e2125-9e1d-47d1-bb12-58b52b8e70cb","total_cost_usd":0.0312,"usage":{"input_tokens":1500,"cache_creation_input_tokens":0,"cache_read_input_tokens":88000,"output_tokens":20,"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0},"service_tier":"standard","cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0},"inference_geo":"","iterations":[],"speed":"standard"},"modelUsage":{"claude-sonnet-4-5":{"inputTokens":1500,"outputTokens":20,"cacheReadInputTokens":88000,"cacheCreationInputTokens":0,"webSearchRequests":0,"costUSD":0.0312,"contextWindow":200000,"maxOutputTokens":32000}},"permission_denials":[],"terminal_reason":"aborted_tools","fast_mode_state":"off","uuid":"6d7f4cd7-7146-46f8-976b-7af66d308a97","errors":["[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=tool_use"]}"##;
    const FIXTURE_RETRY: &str = r##"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":518.8062258992633,"error_status":529,"error":"overloaded","session_id":"a0b79a45-c479-469e-a415-33159b842acc","uuid":"f9b7cbba-5034-4d84-a38d-6a3fea9a995c"}"##;
    const FIXTURE_SYNTHETIC: &str = r##"{"type":"assistant","message":{"id":"ddadfa80-40ed-41ae-8bc2-8e094da75434","container":null,"model":"<synthetic>","role":"assistant","stop_details":null,"stop_reason":"stop_sequence","stop_sequence":"","type":"message","usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0},"service_tier":null},"content":[{"type":"text","text":"Prompt is too long"}],"context_management":null},"parent_tool_use_id":null,"session_id":"2df9e6d7-1113-4fa7-87ce-460998f5b2d2","uuid":"780ef7e4-fdb4-4918-b974-7ec1a321297e","error":"invalid_request"}"##;

    fn ctx() -> LineCtx<'static> {
        LineCtx {
            session_id: "s-1",
            model: "claude-sonnet-4-5",
        }
    }

    #[test]
    fn single_script_is_one_iteration() {
        let s = parse(
            r#"
            model = "claude-opus-4-1"
            [[step]]
            context = 50000
            text = "hi"
            "#,
        );
        assert_eq!(s.iterations.len(), 1);
        assert_eq!(
            s.iteration(7).options.model.as_deref(),
            Some("claude-opus-4-1")
        );
        match &s.iteration(1).steps[0].kind {
            StepKind::Turn(turn) => {
                assert_eq!(turn.usage.unwrap().total(), 50_000);
                assert_eq!(turn.text.as_deref(), Some("hi"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn iterations_past_the_end_repeat_the_last() {
        let s = parse(
            r#"
            exit_code = 3
            [[iteration]]
            [[iteration.step]]
            text = "one"
            [[iteration]]
            exit_code = 4
            on_message = "ignore"
            [[iteration.step]]
            text = "two"
            "#,
        );
        assert_eq!(s.iteration(1).options.exit_code, Some(3));
        assert_eq!(s.iteration(2).options.exit_code, Some(4));
        assert_eq!(s.iteration(9).options.exit_code, Some(4));
        assert_eq!(s.iteration(9).options.on_message, Some(OnMessage::Ignore));
        assert_eq!(s.iteration(1).options.on_message, None);
    }

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
        let args: Vec<String> = ["-p", "--model=x", "--verbose", "--model", "y"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(model_arg(&args).as_deref(), Some("y"));
        assert_eq!(model_arg(&args[..3]).as_deref(), Some("x"));
    }

    #[test]
    fn tools_are_inferred_or_named() {
        let s = parse(
            r#"
            [[step]]
            path = "fix_plan.md"
            old = "- [ ] parser"
            new = "- [x] parser"
            [[step]]
            command = "ls"
            tools = [{ path = "a.txt", content = "x" }, { tool = "Read", input = { file_path = "a.txt" }, output = "x" }]
            "#,
        );
        let names = |i: usize| match &s.iterations[0].steps[i].kind {
            StepKind::Turn(turn) => turn
                .tools
                .iter()
                .map(|t| t.name().to_string())
                .collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(names(0), ["Edit"]);
        assert_eq!(names(1), ["Bash", "Write", "Read"]);
    }

    #[test]
    fn bad_steps_name_the_line_and_the_key() {
        let e = parse_err("[[step]]\ntext = \"a\"\n\n[[step]]\nraw = \"x\"\ntext = \"y\"\n");
        assert!(e.contains("line 4"), "{e}");
        assert!(e.contains("`text` does not apply to a `raw` step"), "{e}");

        let e = parse_err("[[step]]\nraw = \"x\"\nhang = true\n");
        assert!(e.contains("`raw` and `hang`"), "{e}");

        let e = parse_err("[[step]]\ncontxt = 5\n");
        assert!(e.contains("contxt"), "{e}");

        let e = parse_err("[[step]]\ncontext = 5\ninput_tokens = 3\n");
        assert!(e.contains("either `context`"), "{e}");

        let e = parse_err("[[step]]\ntool = \"Edit\"\npath = \"a\"\n");
        assert!(e.contains("needs `old`"), "{e}");

        let e = parse_err("[[step]]\ntool = \"Write\"\npath = \"a\"\ncommand = \"ls\"\n");
        assert!(e.contains("`command` does not apply to a Write"), "{e}");

        let e = parse_err("[[step]]\ntext = \"a\"\n[[iteration]]\n");
        assert!(e.contains("both top-level"), "{e}");

        let e = parse_err("on_sigint = \"maybe\"\n");
        assert!(e.contains("maybe"), "{e}");

        let e = parse_err("[[step]]\nraw_hex = \"fg\"\n");
        assert!(e.contains("raw_hex"), "{e}");
    }

    #[test]
    fn result_and_error_defaults() {
        let s = parse(
            r#"
            [[step]]
            result = ""
            subtype = "error_max_turns"
            permission_denials = [{ tool_name = "Bash" }]
            [[step]]
            error = "rate_limit"
            text = "You've hit your session limit · resets 3:45pm"
            "#,
        );
        match &s.iterations[0].steps[0].kind {
            StepKind::Result(r) => {
                assert!(r.is_error);
                assert_eq!(r.errors, ["Reached maximum number of turns"]);
                assert_eq!(r.terminal_reason, "max_turns");
                assert_eq!(r.permission_denials[0]["tool_name"], "Bash");
                assert!(r.permission_denials[0]["tool_use_id"].is_string());
            }
            other => panic!("{other:?}"),
        }
        match &s.iterations[0].steps[1].kind {
            StepKind::Error(e) => assert_eq!(e.api_error_status, 429),
            other => panic!("{other:?}"),
        }
        assert!(
            default_error_text("rate_limit", 429, 60)
                .starts_with("You've hit your session limit · resets ")
        );
    }

    #[test]
    fn context_shorthand_splits_into_input_and_cache_read() {
        for n in [0, 500, 2_000, 120_000] {
            let u = Usage::from_context(n);
            assert_eq!(u.total(), n);
            assert_eq!(u.cache_creation, 0);
        }
        assert_eq!(Usage::from_context(120_000).input, 2_000);
    }

    #[test]
    fn cost_matches_the_fixture() {
        let totals = Totals {
            input: 5700,
            output: 100,
            cache_creation: 26300,
            cache_read: 459500,
            messages: 5,
        };
        assert!((totals.cost() - 0.255075).abs() < 1e-9);
    }

    #[test]
    fn notes_path_is_the_first_backticked_md_path() {
        let m = "Context is at 85%. Read `fix_plan.md`? No: write your handoff notes to `.ralph/handoffs/notes.md`, then stop.";
        assert_eq!(notes_path(m).as_deref(), Some("fix_plan.md"));
        let m = "Context is at 85%. Finish the edit, write your handoff notes to `/tmp/x y/notes.md`, then stop.";
        assert_eq!(notes_path(m).as_deref(), Some("/tmp/x y/notes.md"));
        let m = "Finish the edit in progress, write handoff.md (what is done, what is next), then stop.";
        assert_eq!(notes_path(m).as_deref(), Some("handoff.md"));
        assert_eq!(notes_path("just stop, please"), None);
        assert_eq!(notes_path("use `x.rs` then"), None);
    }

    #[test]
    fn stdin_messages_take_string_or_blocks() {
        let blocks = br#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"a"},{"type":"image"},{"type":"text","text":"b"}]}}"#;
        assert_eq!(user_message_text(blocks).as_deref(), Some("a\nb"));
        let plain = br#"{"type": "user", "message": {"role": "user", "content": "hi"}}"#;
        assert_eq!(user_message_text(plain).as_deref(), Some("hi"));
        assert_eq!(user_message_text(b"{\"type\":\"control\"}"), None);
        assert_eq!(user_message_text(b"garbage"), None);
    }

    #[test]
    fn hex_decodes_with_spaces() {
        assert_eq!(decode_hex("ff fe\n7B").unwrap(), vec![0xff, 0xfe, 0x7b]);
        assert!(decode_hex("abc").is_err());
    }

    #[test]
    fn assistant_and_tool_result_lines_have_the_fixture_keys() {
        let usage = Usage::from_context(21_200);
        let block = tool_use_block("toolu_1", "Bash", r#"{"command":"ls"}"#);
        let ours: Value =
            serde_json::from_str(&assistant_line(&ctx(), "msg_1", &block, &usage, None, "u"))
                .unwrap();
        let theirs: Value = serde_json::from_str(FIXTURE_ASSISTANT).unwrap();
        assert_eq!(keys(&ours), keys(&theirs));
        assert_eq!(keys(&ours["message"]), keys(&theirs["message"]));
        assert_eq!(
            keys(&ours["message"]["usage"]),
            keys(&theirs["message"]["usage"])
        );
        assert_eq!(
            keys(&ours["message"]["content"][0]),
            keys(&theirs["message"]["content"][0])
        );
        assert_eq!(ours["message"]["model"], "claude-sonnet-4-5");
        assert!(ours["parent_tool_use_id"].is_null());
        // `type` comes first, as in the real CLI.
        assert!(
            assistant_line(&ctx(), "m", &block, &usage, None, "u")
                .starts_with(r#"{"type":"assistant","#)
        );

        let sub = SubagentMeta {
            parent: "toolu_task",
            subagent_type: "general-purpose",
            description: "Find TODOs",
        };
        let line: Value = serde_json::from_str(&assistant_line(
            &ctx(),
            "m",
            &block,
            &usage,
            Some(&sub),
            "u",
        ))
        .unwrap();
        assert_eq!(line["parent_tool_use_id"], "toolu_task");

        let outcome = ToolOutcome {
            content: Value::from("out"),
            is_error: Some(false),
            tool_use_result: Some(
                json!({"stdout": "out", "stderr": "", "interrupted": false, "isImage": false, "noOutputExpected": false}),
            ),
        };
        let ours: Value = serde_json::from_str(&tool_result_line(
            &ctx(),
            "toolu_1",
            &outcome,
            None,
            "u",
            &timestamp(),
        ))
        .unwrap();
        let theirs: Value = serde_json::from_str(FIXTURE_TOOL_RESULT).unwrap();
        assert_eq!(keys(&ours), keys(&theirs));
        assert_eq!(
            keys(&ours["message"]["content"][0]),
            keys(&theirs["message"]["content"][0])
        );
        assert_eq!(
            keys(&ours["tool_use_result"]),
            keys(&theirs["tool_use_result"])
        );

        let ours: Value = serde_json::from_str(&synthetic_error_line(
            &ctx(),
            "m",
            "Prompt is too long",
            "invalid_request",
            "u",
        ))
        .unwrap();
        let theirs: Value = serde_json::from_str(FIXTURE_SYNTHETIC).unwrap();
        assert_eq!(keys(&ours), keys(&theirs));
        assert_eq!(keys(&ours["message"]), keys(&theirs["message"]));
        assert_eq!(ours["message"]["model"], "<synthetic>");
    }

    #[test]
    fn result_and_system_lines_have_the_fixture_keys() {
        let stats = ResultStats {
            duration_ms: 10,
            num_turns: 5,
            turn: Totals {
                input: 5700,
                output: 100,
                cache_creation: 26300,
                cache_read: 459500,
                messages: 5,
            },
            session: Totals {
                input: 5700,
                output: 100,
                cache_creation: 26300,
                cache_read: 459500,
                messages: 5,
            },
            cost: 0.255075,
            context_window: 200_000,
        };
        let spec = ResultSpec::success("done <promise>COMPLETE</promise>".into(), None);
        let ours: Value = serde_json::from_str(&result_line(&ctx(), &spec, &stats, "u")).unwrap();
        let theirs: Value = serde_json::from_str(FIXTURE_RESULT).unwrap();
        let timing: BTreeSet<String> = ["ttft_ms", "ttft_stream_ms", "time_to_request_ms"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(keys(&ours), &keys(&theirs) - &timing);
        assert_eq!(keys(&ours["usage"]), keys(&theirs["usage"]));
        assert_eq!(ours["modelUsage"], theirs["modelUsage"]);
        assert_eq!(ours["usage"], theirs["usage"]);

        let abort = ResultSpec {
            subtype: "error_during_execution".into(),
            is_error: true,
            text: None,
            api_error_status: None,
            errors: vec![default_subtype_error("error_during_execution")],
            permission_denials: Vec::new(),
            terminal_reason: "aborted_tools".into(),
            stop_reason: "tool_use",
            cost_usd: None,
            num_turns: None,
        };
        let ours: Value = serde_json::from_str(&result_line(&ctx(), &abort, &stats, "u")).unwrap();
        let theirs: Value = serde_json::from_str(FIXTURE_ABORT_RESULT).unwrap();
        assert_eq!(keys(&ours), keys(&theirs));
        assert_eq!(ours["errors"], theirs["errors"]);

        let retry = ApiRetry {
            attempt: 1,
            max_retries: 10,
            error_status: 529,
            retry_delay_ms: 500.0,
        };
        let ours: Value = serde_json::from_str(&api_retry_line(&ctx(), &retry, "u")).unwrap();
        let theirs: Value = serde_json::from_str(FIXTURE_RETRY).unwrap();
        assert_eq!(keys(&ours), keys(&theirs));
        assert_eq!(ours["error"], "overloaded");

        let compact: Value =
            serde_json::from_str(&compact_line(&ctx(), "auto", 160_000, 30_000, "u")).unwrap();
        assert_eq!(compact["subtype"], "compact_boundary");
        assert_eq!(
            compact["compact_metadata"],
            json!({"trigger": "auto", "pre_tokens": 160000, "post_tokens": 30000})
        );

        let limit: Value = serde_json::from_str(&rate_limit_line(
            &ctx(),
            "rejected",
            1_800_000_000,
            "five_hour",
            "u",
        ))
        .unwrap();
        assert_eq!(
            limit["rate_limit_info"],
            json!({"status": "rejected", "resetsAt": 1_800_000_000i64, "rateLimitType": "five_hour"})
        );
    }

    #[test]
    fn ids_look_like_the_real_ones() {
        let mut ids = Ids::new();
        let uuid = ids.uuid();
        assert_eq!(uuid.len(), 36);
        assert_eq!(&uuid[14..15], "4");
        assert!(ids.msg_id().starts_with("msg_"));
        assert_eq!(ids.tool_id().len(), "toolu_".len() + 20);
        assert_ne!(ids.uuid(), ids.uuid());
    }

    #[test]
    fn example_scenarios_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/sim");
        let mut seen = 0;
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let text = fs::read_to_string(&path).unwrap();
                Scenario::parse(&text, &path.display().to_string())
                    .unwrap_or_else(|e| panic!("{}", e.render()));
                seen += 1;
            }
        }
        assert!(seen >= 2, "examples/sim has {seen} scenarios");
    }
}
