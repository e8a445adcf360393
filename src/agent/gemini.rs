//! Gemini CLI: `gemini -o stream-json [-m model]`, the prompt on stdin
//! (headless when stdin is not a terminal; read to its end, so stdin closes
//! after it: no message mid-session). Its output decodes with
//! `stream::GeminiDecoder`; usage comes only as the run's totals, so the
//! context is not metered live. Exit codes: 41 auth, 53 turn limit, 130
//! SIGINT. Tools that change files need `--yolo` (or `--approval-mode`) in
//! `agent.args`: headless, the CLI offers no tool that would ask.

/// What to do when the `gemini` program is not found.
pub(crate) const NOT_FOUND_HINT: &str = "install Gemini CLI (`npm install -g @google/gemini-cli`), or set agent.command in ralph.toml to the agent to run";

/// ralph's own arguments.
pub(crate) fn args(model: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = ["-o", "stream-json"].map(String::from).into();
    if let Some(model) = model {
        args.push("-m".into());
        args.push(model.to_string());
    }
    args
}
