//! The output formats of the agent CLIs ralph runs. The player plays its scenario as
//! Claude Code would; a [`Translator`] rewrites each line into what the CLI ralph thinks
//! it runs prints for the same moment, so every decoder of ralph's can be driven by the
//! sim (see the fixtures under tests/fixtures/ for the real output of each):
//!
//! - `codex`: Codex's app-server, JSON-RPC over stdio; its requests are served by
//!   `codex::serve` on the stdin thread, its notifications come from the translator;
//! - `opencode`: `opencode run --format json` (steps with their token counts);
//! - `gemini`: Gemini CLI's `-o stream-json` (no usage until the end).
//!
//! The format follows the arguments ralph gives each kind (`app-server`, `run --format
//! json`, `-o stream-json`), so `[agent] kind = "codex"` with `command = "ralph sim
//! scenario.toml"` exercises the Codex decoder and wire. opencode and Gemini CLI read
//! their prompt as plain text up to the end of stdin.
//!
//! Lines of sub-agents have no counterpart in the other CLIs and are left out.

pub(crate) mod codex;
mod gemini;
mod opencode;

use serde_json::Value;

/// Which CLI the sim speaks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Claude,
    Codex,
    Opencode,
    Gemini,
}

impl Format {
    /// From the arguments ralph passes: `app-server` is Codex's, `run --format json`
    /// opencode's, `-o stream-json` Gemini CLI's; anything else is Claude Code's.
    pub(crate) fn from_args(args: &[String]) -> Format {
        let pair = |a: &str, b: &str| args.windows(2).any(|w| w[0] == a && w[1] == b);
        if args.first().is_some_and(|a| a == "app-server") {
            Format::Codex
        } else if pair("--format", "json") {
            Format::Opencode
        } else if pair("-o", "stream-json") {
            Format::Gemini
        } else {
            Format::Claude
        }
    }

    /// How the prompt arrives on stdin.
    pub(crate) fn input(self) -> Input {
        match self {
            Format::Claude => Input::StreamJson,
            Format::Codex => Input::JsonRpc,
            Format::Opencode | Format::Gemini => Input::PlainToEof,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Input {
    /// One stream-json user message a line, any time.
    StreamJson,
    /// The app-server's requests (`turn/start`, `turn/steer`, `turn/interrupt`).
    JsonRpc,
    /// The whole of stdin is the prompt.
    PlainToEof,
}

/// Rewrites Claude Code lines into one format; keeps what a format needs across lines
/// (the open step of opencode, the turn of Codex).
pub(crate) enum Translator {
    Claude,
    Codex(codex::Translator),
    Opencode(opencode::Translator),
    Gemini(gemini::Translator),
}

impl Translator {
    pub(crate) fn new(format: Format, session: &codex::Shared) -> Translator {
        match format {
            Format::Claude => Translator::Claude,
            Format::Codex => Translator::Codex(codex::Translator::new(session.clone())),
            Format::Opencode => Translator::Opencode(opencode::Translator::default()),
            Format::Gemini => Translator::Gemini(gemini::Translator::default()),
        }
    }

    /// Print the session `id` (opencode's `run --session ID` continues it)
    /// rather than one of its own.
    pub(crate) fn continue_session(&mut self, id: &str) {
        if let Translator::Opencode(t) = self {
            t.continue_session(id);
        }
    }

    /// The lines this format prints for one Claude Code line (none for a line it has no
    /// counterpart of). A line that is not JSON passes as it is (scenarios write
    /// garbage on purpose).
    pub(crate) fn translate(&mut self, line: &str) -> Vec<String> {
        if let Translator::Claude = self {
            return vec![line.to_string()];
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            return vec![line.to_string()];
        };
        let main_thread = v["parent_tool_use_id"].is_null();
        match self {
            Translator::Claude => unreachable!("passed through above"),
            _ if !main_thread => Vec::new(),
            Translator::Codex(t) => t.translate(&v),
            Translator::Opencode(t) => t.translate(&v),
            Translator::Gemini(t) => t.translate(&v),
        }
    }
}

/// The content blocks of an assistant or user line.
fn blocks(v: &Value) -> &[Value] {
    v["message"]["content"]
        .as_array()
        .map_or(&[], Vec::as_slice)
}

/// A tool result's text: a string, or its text blocks joined.
fn result_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// What one model call of a Claude line used: (input, cache read, cache write, output).
fn usage(v: &Value) -> (u64, u64, u64, u64) {
    let u = &v["message"]["usage"];
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    (
        n("input_tokens"),
        n("cache_read_input_tokens"),
        n("cache_creation_input_tokens"),
        n("output_tokens"),
    )
}

/// A JSON object as one line with its `type` first, as opencode and Gemini CLI print
/// theirs (`json!` sorts the keys): what a decoder reads first matters to its speed.
fn type_first(v: &Value) -> String {
    let Some((kind, map)) = v.get("type").zip(v.as_object()) else {
        return v.to_string();
    };
    let mut line = format!("{{\"type\":{kind}");
    for (key, value) in map.iter().filter(|(k, _)| *k != "type") {
        line.push(',');
        line.push_str(&Value::from(key.as_str()).to_string());
        line.push(':');
        line.push_str(&value.to_string());
    }
    line.push('}');
    line
}

/// A line Claude Code prints for an API call that failed (`<synthetic>` model).
fn is_synthetic(v: &Value) -> bool {
    v["message"]["model"] == "<synthetic>"
}

/// Rewrites a Claude Code stream-json transcript (`input`, one line each) into
/// what the CLI that ralph runs with `args` prints for it (`ralph sim`'s
/// translation, without playing anything): the benchmarks feed each kind's
/// decoder with it.
pub fn translate_transcript(
    args: &[String],
    input: impl std::io::BufRead,
    mut output: impl std::io::Write,
) -> std::io::Result<()> {
    let session = codex::Shared::new("claude-sonnet-4-5", 200_000);
    let mut translator = Translator::new(Format::from_args(args), &session);
    for line in input.lines() {
        for out in translator.translate(&line?) {
            output.write_all(out.as_bytes())?;
            output.write_all(b"\n")?;
        }
    }
    output.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_arguments_choose_the_format() {
        assert_eq!(Format::from_args(&args("app-server")), Format::Codex);
        assert_eq!(
            Format::from_args(&args("run --format json --model m")),
            Format::Opencode
        );
        assert_eq!(
            Format::from_args(&args("-o stream-json -m g")),
            Format::Gemini
        );
        assert_eq!(
            Format::from_args(&args(
                "-p --output-format stream-json --input-format stream-json --verbose"
            )),
            Format::Claude
        );
        assert_eq!(Format::Opencode.input(), Input::PlainToEof);
        assert_eq!(Format::Codex.input(), Input::JsonRpc);
    }

    #[test]
    fn claude_lines_pass_and_sub_agents_are_left_out() {
        let session = codex::Shared::default();
        let line = r#"{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"x"}]},"parent_tool_use_id":"toolu_1"}"#;
        assert_eq!(
            Translator::new(Format::Claude, &session).translate(line),
            [line]
        );
        for format in [Format::Codex, Format::Opencode, Format::Gemini] {
            let mut t = Translator::new(format, &session);
            assert!(t.translate(line).is_empty(), "{format:?}");
            assert_eq!(t.translate("not json"), ["not json"]);
        }
    }
}
