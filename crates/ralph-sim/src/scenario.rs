//! The scenario file as written: the options (top level and per iteration), the keys a
//! step may have and which of them each step kind allows, and `Scenario::parse`, which
//! turns the TOML into iterations of typed steps (docs/sim.md).

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use crate::step::Step;
use crate::{Error, Result};

/// Where config errors send the user.
const FORMAT_HINT: &str = "the scenario format is described in docs/sim.md";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OnSigint {
    /// Like the real CLI: kill the tool, print an `error_during_execution` result, exit 0.
    #[default]
    Abort,
    Ignore,
    /// Exit 130 at once, without a result line.
    Exit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OnSigterm {
    /// Like the real CLI: exit 143 at once, without a result line.
    #[default]
    Exit,
    Ignore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OnMessage {
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
        pub(crate) struct Options { $(pub(crate) $field: Option<$ty>,)* }

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
        pub(crate) struct $name { $(pub(crate) $field: Option<$ty>,)* }

        impl $name {
            pub(crate) fn keys(&self) -> Vec<&'static str> {
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
    utilization: f64,
    // errors and results
    error: String,
    api_error_status: u16,
    terminal_reason: String,
    result: String,
    result_file: String,
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
pub(crate) const KINDS: &[(&str, &[&str])] = &[
    ("raw", &["newline"]),
    ("raw_hex", &["newline"]),
    ("big_line_bytes", &[]),
    ("partial", &["exit_code"]),
    (
        "api_retry",
        &["max_retries", "error_status", "retry_delay_ms"],
    ),
    ("compact", &["trigger", "pre_tokens", "post_tokens"]),
    (
        "rate_limit",
        &["resets_in_secs", "rate_limit_type", "utilization"],
    ),
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
            "result_file",
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

pub(crate) const TURN_KEYS: &[&str] = &[
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
pub(crate) struct Scenario {
    pub(crate) iterations: Vec<Iteration>,
}

#[derive(Debug)]
pub(crate) struct Iteration {
    /// Top-level options with this iteration's on top.
    pub(crate) options: Options,
    pub(crate) steps: Vec<Step>,
}

impl Scenario {
    pub(crate) fn parse(text: &str, origin: &str) -> Result<Scenario> {
        let raw: RawScenario = toml::from_str(text).map_err(|e| {
            Error::config(
                format!("invalid scenario {origin}: {}", e.to_string().trim_end()),
                FORMAT_HINT,
            )
        })?;
        let top = raw.options();
        if !raw.iteration.is_empty() && !raw.step.is_empty() {
            return Err(Error::config(
                format!(
                    "invalid scenario {origin}: it has both top-level [[step]] and [[iteration]]"
                ),
                "put the steps of each iteration under [[iteration.step]]",
            ));
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
                        Error::config(
                            format!(
                                "invalid scenario {origin}, line {line} (iteration {iteration}, step {}): {message}",
                                i + 1
                            ),
                            FORMAT_HINT,
                        )
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
    pub(crate) fn iteration(&self, n: usize) -> &Iteration {
        let index = n.clamp(1, self.iterations.len()) - 1;
        &self.iterations[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lines::default_error_text;
    use crate::step::StepKind;
    use std::fs;
    use std::path::Path;

    fn parse(text: &str) -> Scenario {
        Scenario::parse(text, "test.toml").unwrap_or_else(|e| panic!("{e}"))
    }

    fn parse_err(text: &str) -> String {
        Scenario::parse(text, "test.toml").unwrap_err().to_string()
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
    fn example_scenarios_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sim");
        let mut seen = 0;
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let text = fs::read_to_string(&path).unwrap();
                Scenario::parse(&text, &path.display().to_string())
                    .unwrap_or_else(|e| panic!("{e}"));
                seen += 1;
            }
        }
        assert!(seen >= 2, "examples/sim has {seen} scenarios");
    }
}
