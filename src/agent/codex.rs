//! Codex through `codex app-server`: JSON-RPC over stdio (no `"jsonrpc"`
//! member, one object per line). ralph is the client: `initialize`,
//! `initialized`, `thread/start`, then one `turn/start` with the prompt.
//! Its messages mid-session (the L1 nudge, the L2 request for notes) go in
//! with `turn/steer`; the clean stop is `turn/interrupt`; closing stdin
//! ends the server once no turn is left. Requests from the server
//! (approvals, questions) are answered at once from the stdout reader
//! thread: declined, since nobody watches a headless loop (the decoder
//! books each as a permission denial for the breaker).
//!
//! [`Wire`] is the client's state: the thread and turn ids, messages
//! waiting for a turn, whether stdin is to close. The decoder
//! (`stream/codex.rs`) tells it what each line means ([`Control`]).

use std::collections::BTreeMap;
use std::io::{PipeWriter, Write};

use serde_json::{Value, json};

use crate::stream::Control;

/// What to do when the `codex` program is not found.
pub(crate) const NOT_FOUND_HINT: &str = "install Codex (`npm install -g @openai/codex`), or set agent.command in ralph.toml to the agent to run";

/// ralph's own arguments: the app-server (the model goes in `thread/start`).
pub(crate) fn args() -> Vec<String> {
    vec!["app-server".into()]
}

/// The window Codex reports (`modelContextWindow`) for the GPT-5 models
/// and for a model it has no metadata for: 95% of 272k (measured on
/// 0.169.0 and 0.171.0). The meter's window until Codex reports one, when
/// no earlier iteration learnt the model's.
pub(crate) const WINDOW: u64 = 258_400;

/// Why a request from the server was declined, for the breaker.
pub(crate) const DECLINED: &str = "ralph runs headless: nobody to approve";

/// The client side of one app-server session.
#[derive(Debug)]
pub(crate) struct Wire {
    writer: Option<PipeWriter>,
    next_id: u64,
    cwd: String,
    model: Option<String>,
    thread: Option<String>,
    /// The turn in progress, if any.
    turn: Option<String>,
    interrupted: bool,
    /// Messages waiting for a turn (the prompt before the thread exists;
    /// a message whose steer came too late).
    pending: Vec<String>,
    /// `turn/steer` requests in flight, by id: a refused one starts a turn.
    steers: BTreeMap<u64, String>,
    /// `thread/start` and `turn/start` in flight: if one fails, nothing
    /// will happen any more, so stdin closes and the server exits.
    starts: Vec<u64>,
    /// No more turns once none is running and no message waits.
    closing: bool,
}

impl Wire {
    /// Open the session: the handshake and `thread/start` in `cwd`.
    pub(crate) fn start(writer: PipeWriter, cwd: &str, model: Option<&str>) -> Wire {
        let mut wire = Wire {
            writer: Some(writer),
            next_id: 0,
            cwd: cwd.to_string(),
            model: model.map(str::to_string),
            thread: None,
            turn: None,
            interrupted: false,
            pending: Vec::new(),
            steers: BTreeMap::new(),
            starts: Vec::new(),
            closing: false,
        };
        let version = env!("CARGO_PKG_VERSION");
        wire.request(
            "initialize",
            json!({"clientInfo": {"name": "ralph", "title": "ralph", "version": version}}),
        );
        wire.write(&json!({"method": "initialized"}));
        let mut params = json!({"cwd": wire.cwd});
        if let Some(m) = &wire.model {
            params["model"] = json!(m);
        }
        let id = wire.request("thread/start", params);
        wire.starts.push(id);
        wire
    }

    /// A message for the agent: a new turn, or into the running one.
    pub(crate) fn send(&mut self, text: &str) -> bool {
        // Closed to input, as Claude Code's stdin is once closed.
        if !self.is_open() {
            return false;
        }
        match (&self.thread, &self.turn) {
            (Some(thread), Some(turn)) if !turn.is_empty() => {
                let params = json!({
                    "threadId": thread,
                    "expectedTurnId": turn,
                    "input": [{"type": "text", "text": text}],
                });
                let id = self.request("turn/steer", params);
                self.steers.insert(id, text.to_string());
            }
            // Before the thread, or while a turn is on its way: the
            // message waits for the next turn.
            _ => {
                self.pending.push(text.to_string());
                self.start_turn();
            }
        }
        self.writer.is_some()
    }

    /// No new turn: stdin closes once the running turn (and any message
    /// waiting for one) is done, and the server exits.
    pub(crate) fn close(&mut self) {
        self.closing = true;
        self.close_if_idle();
    }

    pub(crate) fn is_open(&self) -> bool {
        self.writer.is_some() && !self.closing
    }

    /// The clean stop: interrupt the running turn. False when there is
    /// none (or it was interrupted already): then a signal it is.
    pub(crate) fn interrupt(&mut self) -> bool {
        let (Some(thread), Some(turn)) = (&self.thread, &self.turn) else {
            return false;
        };
        if self.interrupted || self.writer.is_none() {
            return false;
        }
        let params = json!({"threadId": thread, "turnId": turn});
        self.request("turn/interrupt", params);
        self.interrupted = true;
        // Nothing may start after the interrupted turn.
        self.pending.clear();
        self.closing = true;
        true
    }

    /// What a line of the server's meant (from the stdout reader).
    pub(crate) fn on_control(&mut self, control: Control) {
        match control {
            Control::ThreadStarted { thread_id } => {
                self.thread = Some(thread_id);
                self.start_turn();
                self.close_if_idle();
            }
            Control::TurnStarted { turn_id } => self.turn = Some(turn_id),
            Control::TurnEnded => {
                self.turn = None;
                self.interrupted = false;
                self.start_turn();
                self.close_if_idle();
            }
            Control::Request { id, method } => {
                let answer = answer(&method);
                let reply = match answer {
                    Some(result) => json!({"id": id, "result": result}),
                    None => json!({"id": id, "error": {"code": -32601, "message": DECLINED}}),
                };
                self.write(&reply);
            }
            Control::Response { id, error } => {
                let Some(id) = id.as_u64() else { return };
                let steered = self.steers.remove(&id);
                let started = self.starts.iter().position(|&s| s == id);
                if let Some(i) = started {
                    self.starts.remove(i);
                }
                if error.is_none() {
                    return self.close_if_idle();
                }
                if started.is_some() {
                    // The thread or the turn cannot start: end the server.
                    self.writer = None;
                } else if let Some(text) = steered {
                    // The turn ended before the message got in: a turn of its own.
                    self.pending.push(text);
                    self.start_turn();
                }
            }
        }
    }

    fn start_turn(&mut self) {
        if self.turn.is_some() || self.pending.is_empty() || self.interrupted {
            return;
        }
        let Some(thread) = self.thread.clone() else {
            return;
        };
        let input: Vec<Value> = self
            .pending
            .drain(..)
            .map(|text| json!({"type": "text", "text": text}))
            .collect();
        let id = self.request("turn/start", json!({"threadId": thread, "input": input}));
        self.starts.push(id);
        // Until `turn/started` names it, a turn is on its way.
        self.turn = Some(String::new());
    }

    fn close_if_idle(&mut self) {
        // A steer in flight may yet be refused and need a turn of its own.
        let idle = self.turn.is_none() && self.pending.is_empty() && self.steers.is_empty();
        if self.closing && idle {
            self.writer = None;
        }
    }

    fn request(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.write(&json!({"method": method, "id": id, "params": params}));
        id
    }

    fn write(&mut self, message: &Value) {
        let Some(w) = self.writer.as_mut() else {
            return;
        };
        let mut line = message.to_string();
        line.push('\n');
        if w.write_all(line.as_bytes())
            .and_then(|()| w.flush())
            .is_err()
        {
            self.writer = None;
        }
    }
}

/// The `agent.args` `ralph init --agent codex` writes: Codex runs headless,
/// so it must not ask (`never`), and its sandbox must let commands write
/// the project (Codex's default, `read-only`, fails every one).
pub(crate) const INIT_ARGS: [&str; 4] = [
    "-c",
    "approval_policy=\"never\"",
    "-c",
    "sandbox_mode=\"workspace-write\"",
];

/// What Codex will allow the agent, as its configuration says: the
/// sandbox and when it asks for approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Policy {
    /// `read-only`, `workspace-write` or `danger-full-access`.
    pub(crate) sandbox: String,
    /// Where the sandbox value came from, for a person.
    pub(crate) sandbox_from: String,
    /// `never`, `on-request`, `on-failure`, `untrusted`; None: Codex's default.
    pub(crate) approval: Option<String>,
}

/// The policy Codex applies, by its own precedence: a `-c key=value` (or
/// `--config`) in `args` (after `app-server`), then the active profile of
/// `config_toml` (`$CODEX_HOME/config.toml`), then its top level; without
/// any, `workspace-write` for a project `config_toml` marks trusted
/// (`[projects."<root>"] trust_level = "trusted"`), else `read-only`.
pub(crate) fn policy(args: &[String], config_toml: &str, root: &std::path::Path) -> Policy {
    let file: toml::Table = config_toml.parse().unwrap_or_default();
    let mut overrides: BTreeMap<String, toml::Value> = BTreeMap::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let pair = match a.as_str() {
            "-c" | "--config" => it.next().map(String::as_str),
            other => other.strip_prefix("--config="),
        };
        if let Some((key, value)) = pair.and_then(|p| p.split_once('=')) {
            // The value is TOML; a bare word is taken as a string, as Codex does.
            let parsed = format!("v = {value}")
                .parse::<toml::Table>()
                .ok()
                .and_then(|mut t| t.remove("v"))
                .unwrap_or_else(|| toml::Value::String(value.trim().to_string()));
            overrides.insert(key.trim().to_string(), parsed);
        }
    }
    let profile = overrides
        .get("profile")
        .or_else(|| file.get("profile"))
        .and_then(toml::Value::as_str)
        .and_then(|p| file.get("profiles")?.get(p));
    let lookup = |key: &str| -> Option<(String, String)> {
        let text = |v: &toml::Value| v.as_str().map(str::to_string);
        if let Some(v) = overrides.get(key).and_then(text) {
            return Some((v, format!("`-c {key}=…` in agent.args")));
        }
        if let Some(v) = profile.and_then(|p| p.get(key)).and_then(text) {
            return Some((
                v,
                format!("{key} of the active profile in Codex's config.toml"),
            ));
        }
        file.get(key)
            .and_then(text)
            .map(|v| (v, format!("{key} in Codex's config.toml")))
    };
    let trusted = || {
        let projects = file.get("projects")?.as_table()?;
        let canonical = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        projects.iter().find_map(|(dir, p)| {
            let dir = std::path::Path::new(dir);
            let here = dir == root || dir == canonical;
            (here && p.get("trust_level")?.as_str()? == "trusted").then_some(())
        })
    };
    let (sandbox, sandbox_from) = match lookup("sandbox_mode") {
        Some(found) => found,
        None if trusted().is_some() => (
            "workspace-write".into(),
            "Codex's default for a trusted project".into(),
        ),
        None => (
            "read-only".into(),
            "Codex's default (no sandbox_mode set)".into(),
        ),
    };
    Policy {
        sandbox,
        sandbox_from,
        approval: lookup("approval_policy").map(|(v, _)| v),
    }
}

/// The answer to a request from the server: each declines (or grants
/// nothing); `None`: an error answer (what ralph cannot do at all).
fn answer(method: &str) -> Option<Value> {
    Some(match method {
        "item/commandExecution/requestApproval" | "item/fileChange/requestApproval" => {
            json!({"decision": "decline"})
        }
        // The v1 forms.
        "applyPatchApproval" | "execCommandApproval" => json!({"decision": "denied"}),
        "item/permissions/requestApproval" => json!({"permissions": {}, "scope": "turn"}),
        "item/tool/requestUserInput" => json!({"answers": {}}),
        "mcpServer/elicitation/request" => json!({"action": "decline"}),
        "item/tool/call" => json!({"success": false, "contentItems": []}),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn codex_policy_follows_its_own_precedence() {
        let root = std::path::Path::new("/work/proj");
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let init: Vec<String> = args(&INIT_ARGS);
        // (args, config.toml, sandbox, approval)
        let table: [(Vec<String>, &str, &str, Option<&str>); 8] = [
            (vec![], "", "read-only", None),
            (init.clone(), "", "workspace-write", Some("never")),
            (
                vec![],
                "sandbox_mode = \"danger-full-access\"\napproval_policy = \"on-request\"\n",
                "danger-full-access",
                Some("on-request"),
            ),
            // The command line wins over the file.
            (
                init.clone(),
                "sandbox_mode = \"read-only\"\n",
                "workspace-write",
                Some("never"),
            ),
            // A profile wins over the top level.
            (
                vec![],
                "profile = \"night\"\nsandbox_mode = \"read-only\"\n[profiles.night]\nsandbox_mode = \"workspace-write\"\n",
                "workspace-write",
                None,
            ),
            (
                args(&["-c", "profile=night"]),
                "[profiles.night]\nsandbox_mode = \"danger-full-access\"\n",
                "danger-full-access",
                None,
            ),
            // A trusted project defaults to workspace-write.
            (
                vec![],
                "[projects.\"/work/proj\"]\ntrust_level = \"trusted\"\n",
                "workspace-write",
                None,
            ),
            // A bare word and --config=.
            (
                args(&["--config=sandbox_mode=workspace-write"]),
                "not toml [",
                "workspace-write",
                None,
            ),
        ];
        for (a, file, sandbox, approval) in table {
            let p = policy(&a, file, root);
            assert_eq!(p.sandbox, sandbox, "{a:?} {file:?}");
            assert_eq!(p.approval.as_deref(), approval, "{a:?} {file:?}");
        }
        assert!(policy(&[], "", root).sandbox_from.contains("default"));
    }

    /// A wire on a pipe, and what it wrote so far (read once it is dropped).
    fn wire() -> (Wire, std::io::PipeReader) {
        let (r, w) = std::io::pipe().unwrap();
        (Wire::start(w, "/repo", Some("gpt-5.1-codex")), r)
    }

    fn written(wire: Wire, mut r: std::io::PipeReader) -> Vec<Value> {
        drop(wire);
        let mut text = String::new();
        r.read_to_string(&mut text).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn methods(lines: &[Value]) -> Vec<String> {
        lines
            .iter()
            .map(|l| match l["method"].as_str() {
                Some(m) => m.to_string(),
                None => format!("answer {}", l["id"]),
            })
            .collect()
    }

    /// The first lines are the handshake, exactly as recorded from a
    /// session that worked (ids, and no `"jsonrpc"` member).
    #[test]
    fn the_handshake_matches_a_recorded_session() {
        let (w, r) = wire();
        let lines = written(w, r);
        assert_eq!(
            methods(&lines),
            ["initialize", "initialized", "thread/start"]
        );
        assert_eq!(lines[0]["id"], 1);
        assert_eq!(lines[0]["params"]["clientInfo"]["name"], "ralph");
        assert_eq!(lines[2]["params"]["cwd"], "/repo");
        assert_eq!(lines[2]["params"]["model"], "gpt-5.1-codex");
        assert!(lines.iter().all(|l| l.get("jsonrpc").is_none()));
        let recorded = include_str!("../../tests/fixtures/codex-0.169.0/write-file.in.jsonl");
        let recorded: Vec<Value> = recorded
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(methods(&recorded)[..3], methods(&lines)[..]);
    }

    #[test]
    fn the_prompt_waits_for_the_thread_then_steers_then_closes_after_the_turn() {
        let (mut w, r) = wire();
        assert!(w.send("the prompt"));
        w.on_control(Control::Response {
            id: 1.into(),
            error: None,
        });
        w.on_control(Control::ThreadStarted {
            thread_id: "th".into(),
        });
        w.on_control(Control::TurnStarted {
            turn_id: "tu".into(),
        });
        assert!(w.send("the L1 nudge"));
        w.on_control(Control::Request {
            id: "req-1".into(),
            method: "item/fileChange/requestApproval".into(),
        });
        w.close();
        assert!(!w.is_open(), "closing: no new input");
        assert!(w.writer.is_some(), "stdin stays open while the turn runs");
        w.on_control(Control::TurnEnded);
        assert!(w.writer.is_some(), "the steer's answer is still to come");
        w.on_control(Control::Response {
            id: 4.into(),
            error: None,
        });
        assert!(w.writer.is_none(), "closed once the turn ended");
        let lines = written(w, r);
        assert_eq!(
            methods(&lines),
            [
                "initialize",
                "initialized",
                "thread/start",
                "turn/start",
                "turn/steer",
                "answer \"req-1\""
            ]
        );
        assert_eq!(lines[3]["params"]["threadId"], "th");
        assert_eq!(lines[3]["params"]["input"][0]["text"], "the prompt");
        assert_eq!(lines[4]["params"]["expectedTurnId"], "tu");
        assert_eq!(lines[4]["params"]["input"][0]["text"], "the L1 nudge");
        assert_eq!(lines[5]["result"]["decision"], "decline");
    }

    #[test]
    fn a_steer_that_came_too_late_is_a_turn_of_its_own() {
        let (mut w, r) = wire();
        w.send("p");
        w.on_control(Control::ThreadStarted {
            thread_id: "th".into(),
        });
        w.on_control(Control::TurnStarted {
            turn_id: "tu".into(),
        });
        w.send("write your notes");
        w.close();
        w.on_control(Control::TurnEnded);
        assert!(w.writer.is_some(), "the steer is still in flight");
        w.on_control(Control::Response {
            id: 4.into(),
            error: Some("no active turn".into()),
        });
        w.on_control(Control::TurnStarted {
            turn_id: "tu2".into(),
        });
        w.on_control(Control::TurnEnded);
        assert!(w.writer.is_none());
        let lines = written(w, r);
        assert_eq!(
            methods(&lines)[3..],
            ["turn/start", "turn/steer", "turn/start"]
        );
        assert_eq!(lines[5]["params"]["input"][0]["text"], "write your notes");
    }

    #[test]
    fn interrupt_only_while_a_turn_runs_and_once() {
        let (mut w, r) = wire();
        assert!(!w.interrupt(), "no turn yet: a signal it is");
        w.send("p");
        w.on_control(Control::ThreadStarted {
            thread_id: "th".into(),
        });
        w.on_control(Control::TurnStarted {
            turn_id: "tu".into(),
        });
        assert!(w.interrupt());
        assert!(!w.interrupt(), "the second time: a signal");
        assert!(!w.send("too late"));
        w.on_control(Control::TurnEnded);
        assert!(w.writer.is_none(), "nothing starts after an interrupt");
        let lines = written(w, r);
        assert_eq!(methods(&lines)[3..], ["turn/start", "turn/interrupt"]);
        assert_eq!(lines[4]["params"]["turnId"], "tu");
    }

    #[test]
    fn a_thread_that_cannot_start_ends_the_server() {
        let (mut w, _r) = wire();
        w.send("p");
        w.on_control(Control::Response {
            id: 2.into(),
            error: Some("bad model".into()),
        });
        assert!(w.writer.is_none());
        assert!(!w.send("more"));
    }

    #[test]
    fn every_request_gets_an_answer() {
        for method in [
            "item/commandExecution/requestApproval",
            "item/fileChange/requestApproval",
            "applyPatchApproval",
            "execCommandApproval",
            "item/permissions/requestApproval",
            "item/tool/requestUserInput",
            "mcpServer/elicitation/request",
            "item/tool/call",
            "account/chatgptAuthTokens/refresh",
            "something/new",
        ] {
            let (mut w, r) = wire();
            w.on_control(Control::Request {
                id: 9.into(),
                method: method.into(),
            });
            let lines = written(w, r);
            let answer = lines.last().unwrap();
            assert_eq!(answer["id"], 9, "{method}");
            assert!(
                answer.get("result").is_some() || answer["error"]["message"] == DECLINED,
                "{method}: {answer}"
            );
        }
    }
}
