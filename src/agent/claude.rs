//! Claude Code: `claude -p --output-format stream-json --input-format
//! stream-json`. The prompt and every later message are stream-json user
//! messages on stdin; its stdout decodes with `stream::LineDecoder`.

/// The flags every Claude Code agent gets: DESIGN.md "The loop", step 2.
pub(crate) const STREAM_FLAGS: [&str; 6] = [
    "-p",
    "--output-format",
    "stream-json",
    "--verbose",
    "--input-format",
    "stream-json",
];

/// What to do when the `claude` program is not found.
pub(crate) const NOT_FOUND_HINT: &str = "install Claude Code (`npm install -g @anthropic-ai/claude-code`), or set agent.command in ralph.toml to the agent to run";

/// ralph's own arguments: the stream flags, then `--model`.
pub(crate) fn args(model: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = STREAM_FLAGS.iter().map(|s| s.to_string()).collect();
    if let Some(model) = model {
        args.push("--model".into());
        args.push(model.to_string());
    }
    args
}

/// The first (and later) user message in stream-json input format.
pub(crate) fn user_message(text: &str) -> String {
    let msg = serde_json::json!({
        "type": "user",
        "message": { "role": "user", "content": [{ "type": "text", "text": text }] }
    });
    format!("{msg}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_message_matches_the_recorded_stdin() {
        let line = user_message("Work through fix_plan.md.");
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let recorded: serde_json::Value = serde_json::from_str(
            include_str!("../../tests/fixtures/claude-2.1.197/mid-session-message.stdin.jsonl")
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(v, recorded);
    }
}
