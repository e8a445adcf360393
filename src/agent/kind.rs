//! Agent kinds: which CLI runs an iteration (`[agent] kind`). Each kind says
//! how it is started and given its prompt, how its output decodes into
//! ralph's [`StreamEvent`](crate::stream::StreamEvent)s, where its window
//! size comes from, how it is stopped, and what it can do ([`Capabilities`]).
//! Everything past this seam (the iteration machine, the meter, the rules)
//! sees only ralph's own events and these capabilities, never a vendor name.
//!
//! Adding a kind: a variant of [`AgentKind`] (a plain config value in
//! `config/agent.rs`) and its row in each `match` below, a module
//! beside this one with its command line (and, if it speaks a protocol on
//! stdin, its wire), a decoder in `stream/`, and its row in docs/agents.md.

use serde::Serialize;

use super::{claude, codex, gemini, opencode};
pub use crate::config::AgentKind;
use crate::stream::Decoder;

/// How the context is metered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Metering {
    /// Usage of every model call, as it happens: levels act mid-session.
    Live,
    /// Usage only once the process ends: no live level ("not metered live").
    PerProcess,
}

/// How a session is stopped cleanly, before SIGTERM and SIGKILL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CleanStop {
    /// SIGINT to the agent's process group (the CLI ends its turn).
    Sigint,
    /// A protocol request that interrupts the turn (`turn/interrupt`).
    Interrupt,
}

/// Where the size of the context window comes from (besides
/// `agent.context_window`, which always wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WindowFrom {
    /// The model's name, then `modelUsage.contextWindow` of its results.
    ModelAndResult,
    /// Reported with the usage of every model call.
    Reported,
    /// The model's name only (the CLI reports no window): set
    /// `agent.context_window` for a model ralph does not know.
    ModelName,
}

/// What a kind can do; the supervisor's checkpoint protocol follows them,
/// so behaviour degrades honestly where a CLI cannot do something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Capabilities {
    pub(crate) metering: Metering,
    /// Takes a message mid-session: the L1 nudge and the L2 request for
    /// handoff notes.
    pub(crate) message: bool,
    pub(crate) stop: CleanStop,
    pub(crate) window: WindowFrom,
    /// Its transcript as ralph saved it replays through the decoder for a
    /// takeover after kill -9.
    pub(crate) replay: bool,
    /// Without a message mid-session, a stopped session can be continued
    /// by its id for one more turn: at L2 ralph asks for the handoff notes
    /// that way ([`AgentKind::continue_args`]).
    pub(crate) continues: bool,
}

impl AgentKind {
    /// The product, for people.
    pub(crate) fn product(self) -> &'static str {
        self.cli().product()
    }

    /// The same CLI as the rules know it (they depend on no configuration).
    pub(crate) fn cli(self) -> crate::rules::fatal::AgentKind {
        use crate::rules::fatal::AgentKind as Cli;
        match self {
            AgentKind::Claude => Cli::Claude,
            AgentKind::Codex => Cli::Codex,
            AgentKind::Opencode => Cli::Opencode,
            AgentKind::Gemini => Cli::Gemini,
        }
    }

    /// Whether its sessions report what they cost: `loop.max_cost_usd`
    /// binds only then (Codex reports tokens, Gemini CLI neither).
    pub(crate) fn reports_cost(self) -> bool {
        matches!(self, AgentKind::Claude | AgentKind::Opencode)
    }

    /// What to do when the agent's program is not found.
    pub(crate) fn install_hint(self) -> &'static str {
        match self {
            AgentKind::Claude => claude::NOT_FOUND_HINT,
            AgentKind::Codex => codex::NOT_FOUND_HINT,
            AgentKind::Opencode => opencode::NOT_FOUND_HINT,
            AgentKind::Gemini => gemini::NOT_FOUND_HINT,
        }
    }

    /// How the prompt reaches the agent, for `--dry-run`.
    pub(crate) fn prompt_via(self) -> &'static str {
        match self {
            AgentKind::Claude => "sent as the first stream-json user message",
            AgentKind::Codex => {
                "sent as the first turn (`turn/start`) of a `codex app-server` thread"
            }
            AgentKind::Opencode | AgentKind::Gemini => "written to stdin, which then closes",
        }
    }

    pub(crate) fn capabilities(self) -> Capabilities {
        match self {
            AgentKind::Claude => Capabilities {
                metering: Metering::Live,
                message: true,
                stop: CleanStop::Sigint,
                window: WindowFrom::ModelAndResult,
                replay: true,
                continues: false,
            },
            AgentKind::Codex => Capabilities {
                metering: Metering::Live,
                message: true,
                stop: CleanStop::Interrupt,
                window: WindowFrom::Reported,
                replay: true,
                continues: false,
            },
            AgentKind::Opencode => Capabilities {
                metering: Metering::Live,
                message: false,
                stop: CleanStop::Sigint,
                window: WindowFrom::ModelName,
                replay: true,
                continues: true,
            },
            AgentKind::Gemini => Capabilities {
                metering: Metering::PerProcess,
                message: false,
                stop: CleanStop::Sigint,
                window: WindowFrom::ModelName,
                replay: true,
                continues: false,
            },
        }
    }

    /// The window to meter on before the agent has reported one, for a
    /// kind that reports it with its usage ([`WindowFrom::Reported`]):
    /// its own, not a guess from Claude's model table.
    pub(crate) fn window_before_report(self) -> Option<u64> {
        match self {
            AgentKind::Codex => Some(codex::WINDOW),
            AgentKind::Claude | AgentKind::Opencode | AgentKind::Gemini => None,
        }
    }

    /// ralph's own arguments, after the command's leading words and before
    /// `agent.args`.
    /// (Codex takes the model in `thread/start`.)
    pub(crate) fn args(self, model: Option<&str>) -> Vec<String> {
        match self {
            AgentKind::Claude => claude::args(model),
            AgentKind::Codex => codex::args(),
            AgentKind::Opencode => opencode::args(model),
            AgentKind::Gemini => gemini::args(model),
        }
    }

    /// The arguments that continue the session `session` (after the kind's
    /// own, before `agent.args`), for a kind that [`Capabilities::continues`].
    pub(crate) fn continue_args(self, session: &str) -> Vec<String> {
        match self {
            AgentKind::Opencode => opencode::continue_args(session),
            AgentKind::Claude | AgentKind::Codex | AgentKind::Gemini => Vec::new(),
        }
    }

    /// The line written to stdin for a message (the prompt; the L1 nudge
    /// and the L2 request for kinds that take them). Codex's messages go
    /// through its app-server client instead.
    pub(crate) fn message(self, text: &str) -> String {
        match self {
            AgentKind::Claude | AgentKind::Codex => claude::user_message(text),
            // The prompt as it is; stdin closes after it.
            AgentKind::Opencode | AgentKind::Gemini => text.to_string(),
        }
    }

    /// A decoder of the agent's stdout into ralph's events (live, and for
    /// the replay of a saved transcript).
    pub fn decoder(self) -> Decoder {
        match self {
            AgentKind::Claude => Decoder::claude(),
            AgentKind::Codex => Decoder::Codex(crate::stream::CodexDecoder::new()),
            AgentKind::Opencode => Decoder::Opencode(crate::stream::OpencodeDecoder::new()),
            AgentKind::Gemini => Decoder::Gemini(crate::stream::GeminiDecoder::new()),
        }
    }
}

impl Capabilities {
    /// Usage of every model call as it happens: levels act mid-session.
    pub(crate) fn metered_live(&self) -> bool {
        self.metering == Metering::Live
    }

    /// What they mean for a run, in one line (doctor, `--dry-run`).
    pub(crate) fn describe(&self) -> String {
        let meter = match self.metering {
            Metering::Live => "metered live",
            Metering::PerProcess => "not metered live",
        };
        let message = match (self.message, self.continues) {
            (true, _) => "mid-session messages",
            (false, true) => "no mid-session message (notes asked for by continuing the session)",
            (false, false) => "no mid-session message",
        };
        let stop = match self.stop {
            CleanStop::Sigint => "stop: SIGINT",
            CleanStop::Interrupt => "stop: turn/interrupt",
        };
        let window = match self.window {
            WindowFrom::ModelAndResult => "window: model name, results",
            WindowFrom::Reported => "window: reported per call",
            WindowFrom::ModelName => "window: model name or agent.context_window",
        };
        let replay = if self.replay {
            "replay after a crash"
        } else {
            "no replay after a crash"
        };
        format!("{meter}, {message}, {stop}, {window}, {replay}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_config_values() {
        for kind in AgentKind::ALL {
            let toml = format!("kind = \"{}\"", kind.name());
            #[derive(serde::Deserialize)]
            struct K {
                kind: AgentKind,
            }
            let k: K = toml::from_str(&toml).unwrap();
            assert_eq!(k.kind, kind);
            assert_eq!(kind.to_string(), kind.name());
            let value = clap::ValueEnum::to_possible_value(&kind).unwrap();
            assert_eq!(value.get_name(), kind.name());
        }
    }

    #[test]
    fn claude_is_the_default_and_does_everything() {
        assert_eq!(AgentKind::default(), AgentKind::Claude);
        let c = AgentKind::Claude.capabilities();
        assert_eq!(c.metering, Metering::Live);
        assert!(c.message && c.replay);
    }

    #[test]
    fn opencode_meters_live_without_messages_and_gemini_does_not_meter_live() {
        let o = AgentKind::Opencode.capabilities();
        assert_eq!((o.metering, o.message), (Metering::Live, false));
        assert!(o.continues);
        assert_eq!(
            AgentKind::Opencode.continue_args("ses_1"),
            ["--session", "ses_1"]
        );
        let g = AgentKind::Gemini.capabilities();
        assert_eq!((g.metering, g.message), (Metering::PerProcess, false));
        assert_eq!(
            AgentKind::Opencode.args(Some("p/m")),
            ["run", "--format", "json", "--model", "p/m"]
        );
        assert_eq!(AgentKind::Gemini.args(None), ["-o", "stream-json"]);
        // The prompt as it is, on stdin.
        assert_eq!(AgentKind::Gemini.message("Do it."), "Do it.");
    }
}
