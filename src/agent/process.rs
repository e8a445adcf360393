//! The agent process: the exact command line, spawning it in its own
//! process group, feeding it messages, reading its stdout live (decoded,
//! and saved raw), stopping it (SIGINT → SIGTERM → SIGKILL), and ending
//! everything it left behind.
//!
//! What differs between CLIs is the agent's [`AgentKind`] (`agent/kind.rs`,
//! the seam): its command line, its messages, its decoder, its
//! capabilities. One module per kind holds its specifics (`agent/claude.rs`,
//! `agent/codex.rs`).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::formats::StopStep;
use crate::stream::{self, StreamEvent};

use super::{AgentKind, codex};

// Their home is `procs`; the supervisor has always called them here.
use crate::agent::procs::kill_group;
pub(crate) use crate::agent::procs::{become_subreaper, kill_session, reap_orphans};

/// How much of the agent's stderr is kept for reports.
const STDERR_TAIL: usize = 16 * 1024;
/// How much of the agent's stderr is saved beside the transcript.
const STDERR_FILE_CAP: u64 = 8 << 20;

/// What will be run, resolved from the config.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AgentCommand {
    pub(crate) kind: AgentKind,
    pub(crate) program: PathBuf,
    /// `agent.model`, for a kind that takes it in its protocol (Codex).
    pub(crate) model: Option<String>,
    pub(crate) args: Vec<String>,
    pub(crate) env: BTreeMap<String, String>,
    /// The agent gets `env` only, none of ralph's environment besides (the
    /// sandbox's allow-list is in `env`).
    pub(crate) env_clear: bool,
    /// Variables of ralph's environment the agent must not get (its CLI's
    /// own silent limit waits: `AgentKind::self_waiting_env`).
    pub(crate) env_remove: Vec<String>,
    /// Bytes of the transcript written as they come (`runs.transcript_cap_mib`).
    pub(crate) transcript_cap: u64,
}

impl AgentCommand {
    /// The agent of iteration `iteration` in the project at `root`, in the
    /// sandbox the config asks for (`agent::sandbox`).
    pub(crate) fn from_config(config: &Config, iteration: u32, root: &Path) -> AgentCommand {
        AgentCommand::build(config, iteration, root, Vec::new())
    }

    /// The same agent continuing its session `session` for one more turn
    /// (a kind that [`Capabilities::continues`](super::Capabilities)).
    pub(crate) fn continuing(
        config: &Config,
        iteration: u32,
        root: &Path,
        session: &str,
    ) -> AgentCommand {
        let more = config.agent.kind.continue_args(session);
        AgentCommand::build(config, iteration, root, more)
    }

    fn build(config: &Config, iteration: u32, root: &Path, more: Vec<String>) -> AgentCommand {
        let (program, lead) = config.agent_program();
        // `ralph` as the agent means this very binary: `ralph sim` demos
        // and tests run without ralph on PATH.
        let program = if program == "ralph" {
            std::env::current_exe().unwrap_or_else(|_| PathBuf::from("ralph"))
        } else {
            PathBuf::from(program)
        };
        let kind = config.agent.kind;
        let mut args = lead;
        args.extend(kind.args(config.agent.model.as_deref()));
        args.extend(more);
        args.extend(config.agent.args.iter().cloned());
        let mut env = config.agent.env.clone();
        env.insert("RALPH_ITERATION".into(), iteration.to_string());
        let mut cmd = AgentCommand {
            kind,
            model: config.agent.model.clone(),
            program,
            args,
            env,
            env_clear: false,
            env_remove: kind
                .self_waiting_env()
                .iter()
                .filter(|k| !config.agent.env.contains_key(**k))
                .map(|k| k.to_string())
                .collect(),
            transcript_cap: config.runs.transcript_cap_mib << 20,
        };
        if config.agent.sandbox == crate::config::sandbox::Kind::Bwrap {
            cmd.sandbox(config, root);
        }
        cmd
    }

    /// `sh -c` in the box the agent runs in, with the agent's environment
    /// (what is withheld from it withheld), for the commands ralph runs on
    /// its behalf (`[verify]`): code the agent wrote runs where the agent
    /// does. `None` without a sandbox. The caller appends the script.
    pub(crate) fn shell_in_box(config: &Config, root: &Path) -> Option<AgentCommand> {
        AgentCommand::in_box(config, root, &["sh".into(), "-c".into()])
    }

    /// `words` (a program and its arguments) in the agent's box, as
    /// [`shell_in_box`](Self::shell_in_box): `ralph doctor` asks the agent
    /// program its version there (`agent.command` may be a script in the
    /// project, which the agent can rewrite). `None` without a sandbox.
    pub(crate) fn in_box(config: &Config, root: &Path, words: &[String]) -> Option<AgentCommand> {
        if config.agent.sandbox != crate::config::sandbox::Kind::Bwrap {
            return None;
        }
        let mut cmd = AgentCommand::from_config(config, 0, root);
        // bwrap's own arguments end at the first `--`; the agent's follow.
        let at = cmd.args.iter().position(|a| a == "--")?;
        cmd.args.truncate(at + 1);
        cmd.args.extend(words.iter().cloned());
        cmd.env.remove("RALPH_ITERATION");
        Some(cmd)
    }

    /// Run it under bubblewrap (`Supervisor::new` checked that it works).
    fn sandbox(&mut self, config: &Config, root: &Path) {
        use super::sandbox;
        let program = resolve_program(&self.program.display().to_string(), root);
        let home = config.agent.env.get("HOME").map(String::as_str);
        let layout = sandbox::layout(root, home, program);
        let kind = config.agent.kind;
        let home = config.sandbox.home_or(kind.home_entries());
        let mut args = sandbox::bwrap_args(&layout, &config.sandbox, &home);
        args.extend(sandbox::protect::binds(&sandbox::protect::protected(
            root,
            &config.plan,
        )));
        args.push("--".into());
        args.push(self.program.display().to_string());
        args.append(&mut self.args);
        self.args = args;
        self.program = sandbox::bwrap().unwrap_or_else(|| "bwrap".into());
        let mut env = sandbox::passed_env(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
            kind.env_prefixes(),
            &config.sandbox.pass_env_or(kind.credential_env()),
            &config.notify.secret_values(),
        );
        env.retain(|k, _| !self.env_remove.contains(k));
        env.append(&mut self.env);
        self.env = env;
        self.env_clear = true;
    }

    /// The command line as a user would type it (for `--dry-run` and logs).
    pub(crate) fn display(&self) -> Vec<String> {
        std::iter::once(self.program.display().to_string())
            .chain(self.args.iter().cloned())
            .collect()
    }
}

/// A decoded line and when it arrived.
pub(crate) type Line = (StreamEvent, Instant);

/// How ralph talks to the agent.
enum Input {
    /// Messages are lines on stdin (Claude Code's stream-json; the plain
    /// prompt of opencode and Gemini CLI); `None` once closed.
    Lines(Option<ChildStdin>),
    /// A protocol client that also answers the server (Codex's app-server),
    /// shared with the stdout reader.
    Rpc(Arc<Mutex<codex::Wire>>),
}

pub(crate) struct Agent {
    kind: AgentKind,
    child: Option<Child>,
    pub(crate) pid: i32,
    input: Input,
    stderr_tail: Arc<Mutex<Vec<u8>>>,
    /// What the transcript writer has to report once the stdout reader is done.
    transcript_notes: Arc<Mutex<Vec<String>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    pub(crate) started: Instant,
}

impl Agent {
    /// Start the agent in `cwd`; decoded stdout lines arrive on the returned
    /// channel, raw stdout goes to `transcript`.
    pub(crate) fn spawn(
        cmd: &AgentCommand,
        cwd: &Path,
        transcript: &Path,
    ) -> Result<(Agent, mpsc::Receiver<Line>)> {
        let (out_r, out_w) =
            std::io::pipe().map_err(|e| Error::wrap("cannot create a pipe for the agent", e))?;
        let (err_r, err_w) =
            std::io::pipe().map_err(|e| Error::wrap("cannot create a pipe for the agent", e))?;
        let raw =
            create_private(transcript).map_err(|e| Error::io("cannot create", transcript, e))?;
        let stderr_path = transcript.with_extension("stderr");
        // A protocol kind's stdin is written from two threads (the reader
        // answers the server): a plain pipe behind the wire's lock.
        let rpc_pipe = match cmd.kind {
            AgentKind::Claude | AgentKind::Opencode | AgentKind::Gemini => None,
            AgentKind::Codex => Some(
                std::io::pipe()
                    .map_err(|e| Error::wrap("cannot create a pipe for the agent", e))?,
            ),
        };
        let mut command = Command::new(&cmd.program);
        if cmd.env_clear {
            command.env_clear();
        }
        for k in &cmd.env_remove {
            command.env_remove(k);
        }
        command
            .args(&cmd.args)
            // PWD as a shell would set it: CLIs that take their project
            // directory from $PWD (opencode) must not work in the
            // directory ralph was started from (a subdirectory).
            .env("PWD", cwd)
            .envs(&cmd.env)
            .current_dir(cwd)
            .stdin(match &rpc_pipe {
                Some((r, _)) => Stdio::from(
                    r.try_clone()
                        .map_err(|e| Error::wrap("cannot create a pipe for the agent", e))?,
                ),
                None => Stdio::piped(),
            })
            .stdout(Stdio::from(out_w))
            .stderr(Stdio::from(err_w))
            .kill_on_drop(true);
        // SAFETY: setsid is an async-signal-safe system call that only
        // changes the child's own attributes.
        unsafe {
            command.pre_exec(|| {
                // A session of its own (its session id and process group id
                // are its pid): the group is what `signal` reaches, and the
                // session still holds the tools that the agent put in process
                // groups of their own, so that a supervisor taking over after
                // a crash finds them (`kill_session`).
                nix::unistd::setsid()
                    .map(drop)
                    .map_err(std::io::Error::from)
            });
        }
        // If the supervisor dies (kill -9), the agent dies with it (Linux;
        // on macOS the next run's takeover ends it). The signal fires when
        // the thread that forked exits: that is the main thread (the
        // runtime is current-thread).
        crate::platform::die_with_parent(
            command.as_std_mut(),
            Signal::SIGKILL,
            crate::platform::Heir::Program,
        );
        let mut child = command.spawn().map_err(|e| {
            Error::wrap(
                format!("cannot start the agent `{}`", cmd.program.display()),
                e,
            )
        })?;
        // Our copies of the write ends must go, or the readers never see EOF.
        drop(command);
        let pid = child.id().map_or(0, |p| p as i32);
        let input = match rpc_pipe {
            Some((_, writer)) => {
                let cwd = cwd.display().to_string();
                let wire = codex::Wire::start(writer, &cwd, cmd.model.as_deref());
                Input::Rpc(Arc::new(Mutex::new(wire)))
            }
            None => Input::Lines(child.stdin.take()),
        };
        let wire = match &input {
            Input::Rpc(w) => Some(w.clone()),
            Input::Lines(_) => None,
        };
        let (tx, rx) = mpsc::channel(1024);
        let raw = crate::agent::transcript::Writer::new(raw, cmd.transcript_cap);
        let transcript_notes = Arc::new(Mutex::new(Vec::new()));
        let notes = transcript_notes.clone();
        let cap = cmd.transcript_cap;
        let decoder = cmd.kind.decoder();
        let stdout_reader = std::thread::Builder::new()
            .name("agent-stdout".into())
            .spawn(move || {
                let raw = read_stdout(out_r, decoder, wire, raw, tx);
                if let Ok(mut notes) = notes.lock() {
                    notes.extend(transcript_notes_of(&raw, cap));
                }
            })
            .map_err(|e| Error::wrap("cannot start the stdout reader", e))?;
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        let tail = stderr_tail.clone();
        let stderr_file = create_private(&stderr_path).ok();
        let stderr_reader = std::thread::Builder::new()
            .name("agent-stderr".into())
            .spawn(move || read_stderr(err_r, stderr_file, &tail))
            .map_err(|e| Error::wrap("cannot start the stderr reader", e))?;
        Ok((
            Agent {
                kind: cmd.kind,
                child: Some(child),
                pid,
                input,
                stderr_tail,
                transcript_notes,
                readers: vec![stdout_reader, stderr_reader],
                started: Instant::now(),
            },
            rx,
        ))
    }

    /// Send the agent a message (the prompt, the L1 nudge, the L2 request
    /// for notes) in its kind's form: whether it went out.
    pub(crate) async fn send(&mut self, text: &str) -> bool {
        match &mut self.input {
            Input::Lines(None) => false,
            Input::Lines(Some(stdin)) => {
                let line = self.kind.message(text);
                stdin.write_all(line.as_bytes()).await.is_ok() && stdin.flush().await.is_ok()
            }
            Input::Rpc(wire) => lock(wire).send(text),
        }
    }

    /// No more input: the CLI ends after its current turn.
    pub(crate) fn close_stdin(&mut self) {
        match &mut self.input {
            Input::Lines(stdin) => *stdin = None,
            Input::Rpc(wire) => lock(wire).close(),
        }
    }

    pub(crate) fn stdin_open(&self) -> bool {
        match &self.input {
            Input::Lines(stdin) => stdin.is_some(),
            Input::Rpc(wire) => lock(wire).is_open(),
        }
    }

    /// Signal the agent's whole process group (its tools included). For a
    /// kind with a clean stop of its own, SIGINT is that request while a
    /// turn runs (`turn/interrupt`); SIGTERM and SIGKILL are signals.
    /// Returns the step taken, for the `agent_signalled` event.
    pub(crate) fn signal(&self, sig: Signal) -> StopStep {
        if let (Signal::SIGINT, Input::Rpc(wire)) = (sig, &self.input)
            && lock(wire).interrupt()
        {
            return StopStep::TurnInterrupt;
        }
        if self.pid > 0 {
            let _ = killpg(Pid::from_raw(self.pid), sig);
        }
        sig.into()
    }

    /// Hand the child to whoever waits for its exit (a task of its own, so
    /// that waiting never holds a borrow of the agent).
    pub(crate) fn take_child(&mut self) -> Child {
        self.child.take().expect("the child is taken once")
    }

    pub(crate) fn stderr_tail(&self) -> String {
        let tail = self
            .stderr_tail
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default();
        String::from_utf8_lossy(&tail).into_owned()
    }

    /// What became of the transcript (cut past its cap, a write that
    /// failed), once [`Agent::join_readers`] returned.
    pub(crate) fn transcript_notes(&self) -> Vec<String> {
        self.transcript_notes
            .lock()
            .map(|n| n.clone())
            .unwrap_or_default()
    }

    /// After the agent exited: end its process group and every orphan it
    /// left (ralph is a child subreaper). Then nothing holds its pipes any
    /// more, and the readers reach EOF once their lines are taken.
    pub(crate) fn end_leftovers(&self) {
        kill_group(self.pid);
        reap_orphans();
    }

    /// Let the readers finish (only then is [`Agent::stderr_tail`]
    /// complete). The stdout reader can only finish once every line it
    /// decoded was received: drain the channel first.
    pub(crate) fn join_readers(&mut self) {
        for r in self.readers.drain(..) {
            // Readers end at EOF, which comes once every writer is gone.
            let deadline = Instant::now() + Duration::from_secs(2);
            while !r.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if r.is_finished() {
                let _ = r.join();
            }
        }
    }
}

/// The wire's lock; a reader thread that panicked holding it leaves a
/// wire that is still usable (every change is complete before a write).
fn lock(wire: &Mutex<codex::Wire>) -> std::sync::MutexGuard<'_, codex::Wire> {
    wire.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The program `agent.command` names, as ralph would start it (`ralph`
/// is this binary; a path with a `/` is relative to the project root).
pub(crate) fn resolve_program(program: &str, root: &Path) -> Option<PathBuf> {
    let executable = |p: &Path| {
        p.metadata().is_ok_and(|m| {
            m.is_file() && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
        })
    };
    if program == "ralph" {
        return std::env::current_exe().ok();
    }
    if program.contains('/') {
        // The agent runs in the project root.
        let p = root.join(program);
        return executable(&p).then_some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}

/// "`claud` (agent.command) is not on PATH".
pub(crate) fn not_found(program: &str) -> String {
    format!(
        "`{program}` (agent.command) is not {}",
        if program.contains('/') {
            "an executable file"
        } else {
            "on PATH"
        }
    )
}

/// A mistyped `agent.command` is bad input (exit 2) before the first
/// iteration, not a failure per iteration until the breaker opens.
pub(crate) fn check_program(config: &Config, root: &Path) -> Result<()> {
    let (program, _) = config.agent_program();
    match resolve_program(&program, root) {
        Some(_) => Ok(()),
        None => Err(Error::config(not_found(&program)).with_hint(config.agent.kind.install_hint())),
    }
}

/// A new file readable by the user only: the agent's output may quote
/// anything it read.
fn create_private(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// How much the reader takes from the pipe at once: small enough that the
/// chunk is still in the CPU cache when it is decoded and then written (a
/// 1 MiB chunk costs about 25% more CPU per byte on the stream benchmark).
const READ_CHUNK: usize = 128 << 10;
/// Pipe capacity asked for: a fast agent can run ahead by two chunks
/// instead of waiting for the reader at every 64 KiB.
const PIPE_SIZE: i32 = 256 << 10;

/// The stdout reader: decode each chunk's lines and hand them over, then
/// append the chunk as read to the raw transcript (one write per read, no
/// copy; the file is complete whenever the agent is quiet).
fn read_stdout(
    pipe: std::io::PipeReader,
    mut decoder: stream::Decoder,
    wire: Option<Arc<Mutex<codex::Wire>>>,
    mut raw: crate::agent::transcript::Writer,
    tx: mpsc::Sender<Line>,
) -> crate::agent::transcript::Writer {
    crate::platform::enlarge_pipe(&pipe, PIPE_SIZE);
    let mut pipe = pipe;
    let mut buf = vec![0u8; READ_CHUNK];
    // The supervisor may stop listening: keep draining so the agent never
    // blocks on a full pipe, and keep saving the transcript.
    let send = |event| {
        let _ = tx.blocking_send((event, Instant::now()));
    };
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        // Lines first: reaction time matters more than the file.
        let mut rest = &buf[..n];
        while !rest.is_empty() {
            let (used, event) = decoder.push(rest);
            // The server's requests are answered before anything else.
            if let (Some(wire), Some(control)) = (&wire, decoder.take_control()) {
                lock(wire).on_control(control);
            }
            if let Some(event) = event {
                send(event);
            }
            rest = &rest[used..];
        }
        raw.write(&buf[..n]);
    }
    if let Some(event) = decoder.finish() {
        send(event);
    }
    raw.finish();
    raw
}

/// Warnings about a finished transcript.
fn transcript_notes_of(raw: &crate::agent::transcript::Writer, cap: u64) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(e) = &raw.error {
        notes.push(format!(
            "cannot save the transcript, the rest of it is lost (disk full?): {e}"
        ));
    }
    if raw.cut_strings > 0 {
        notes.push(format!(
            "the transcript passed runs.transcript_cap_mib ({} MiB): {} long strings after it were cut to {} bytes",
            cap >> 20,
            raw.cut_strings,
            crate::agent::transcript::ELIDED_STRING
        ));
    }
    notes
}

fn read_stderr(pipe: std::io::PipeReader, mut file: Option<File>, tail: &Mutex<Vec<u8>>) {
    let mut pipe = pipe;
    let mut buf = vec![0u8; 16 * 1024];
    let mut saved = 0u64;
    let mut redact = crate::text::secrets::StreamRedactor::new();
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(f) = file.as_mut()
            && saved < STDERR_FILE_CAP
        {
            let _ = f.write_all(redact.feed(&buf[..n]));
            saved += n as u64;
        }
        if let Ok(mut t) = tail.lock() {
            t.extend_from_slice(&buf[..n]);
            if t.len() > STDERR_TAIL {
                let cut = t.len() - STDERR_TAIL;
                t.drain(..cut);
            }
        }
    }
    if let Some(f) = file.as_mut() {
        let _ = f.write_all(redact.finish());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_has_stream_flags_model_then_user_args() {
        let mut c = Config::default();
        c.agent.model = Some("claude-opus-4-1".into());
        c.agent.args = vec!["--dangerously-skip-permissions".into()];
        let cmd = AgentCommand::from_config(&c, 4, Path::new("."));
        assert_eq!(cmd.program, PathBuf::from("claude"));
        assert_eq!(
            cmd.args,
            [
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--input-format",
                "stream-json",
                "--model",
                "claude-opus-4-1",
                "--dangerously-skip-permissions"
            ]
        );
        assert_eq!(cmd.env["RALPH_ITERATION"], "4");
    }

    #[test]
    fn claude_code_does_not_wait_out_limits_silently_unless_asked() {
        let mut c = Config::default();
        let cmd = AgentCommand::from_config(&c, 1, Path::new("."));
        for k in AgentKind::Claude.self_waiting_env() {
            assert!(cmd.env_remove.iter().any(|r| r == k), "{k} not removed");
        }
        c.agent
            .env
            .insert("CLAUDE_CODE_RETRY_WATCHDOG".into(), "1".into());
        let cmd = AgentCommand::from_config(&c, 1, Path::new("."));
        assert!(
            !cmd.env_remove
                .iter()
                .any(|r| r == "CLAUDE_CODE_RETRY_WATCHDOG")
        );
        assert_eq!(cmd.env["CLAUDE_CODE_RETRY_WATCHDOG"], "1");
        assert!(
            cmd.env_remove
                .iter()
                .any(|r| r == "CLAUDE_CODE_RETRY_WATCHDOG_MAX_WAIT_MS")
        );
    }

    #[test]
    fn ralph_means_this_binary() {
        let mut c = Config::default();
        c.agent.command = Some("ralph sim 'a b.toml'".into());
        let cmd = AgentCommand::from_config(&c, 1, Path::new("."));
        assert_eq!(cmd.program, std::env::current_exe().unwrap());
        assert_eq!(&cmd.args[..2], ["sim", "a b.toml"]);
    }
}
