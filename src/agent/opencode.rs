//! opencode: `opencode run --format json [--model provider/model]`, the
//! prompt on stdin (read to its end, so stdin closes after it: no message
//! mid-session). Its output decodes with `stream::OpencodeDecoder`, usage
//! per model step. A session can be continued by id (`run --session ID`,
//! the id the decoder learns from the first line): at L2 ralph stops the
//! session and continues it once to ask for the handoff notes.

/// What to do when the `opencode` program is not found.
pub(crate) const NOT_FOUND_HINT: &str = "install opencode (`npm install -g opencode-ai`), or set agent.command in ralph.toml to the agent to run";

/// ralph's own arguments; `model` is opencode's `provider/model`.
pub(crate) fn args(model: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = ["run", "--format", "json"].map(String::from).into();
    if let Some(model) = model {
        args.push("--model".into());
        args.push(model.to_string());
    }
    args
}

/// The arguments that continue the stopped session `session` for one turn.
pub(crate) fn continue_args(session: &str) -> Vec<String> {
    vec!["--session".into(), session.to_string()]
}
