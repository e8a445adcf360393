//! The interpreter: `Sim` plays one iteration's steps in order, waits for stdin and
//! signals between them, and complies with a checkpoint request at a step boundary.
//! Its child modules hold the rest of `impl Sim`: `tools` (acting in the cwd),
//! `results` (how a turn ends) and `output` (writing lines).

mod output;
mod results;
mod tools;

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use self::output::flood_stderr;
pub(crate) use self::output::write_line;
use crate::format::{Format, Translator, codex};
use crate::ids::Ids;
use crate::input::{self, Event, kill_tool_group, notes_path};
use crate::lines::{
    LineCtx, Obj, ResultSpec, SubagentMeta, api_retry_line, assistant_line, compact_line,
    epoch_secs, init_line, rate_limit_line, text_block, tool_use_block,
};
use crate::scenario::{OnMessage, OnSigint};
use crate::settings::{Settings, permission_mode};
use crate::step::{Step, StepKind, Tool, Turn};
use crate::usage::{DEFAULT_CONTEXT, DEFAULT_OUTPUT_TOKENS, Totals, Usage};
use crate::{Error, Result};

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
    /// The tool calls that failed (their first lines), for the notes too:
    /// an agent says what it was refused.
    failed: Vec<String>,
    format: Format,
    /// opencode run with `--session ID`: a stopped session continued for one
    /// turn, whose prompt is answered as a message (not the scenario played).
    continues: bool,
    /// The player's lines in the CLI's format.
    translator: Translator,
}

/// Plays `steps` as iteration `iteration`; returns the process exit code.
pub(crate) fn play(
    steps: &[Step],
    iteration: usize,
    cfg: Settings,
    claude_args: &[String],
    scenario_name: &str,
    cwd: PathBuf,
) -> Result<i32> {
    let (tx, rx) = mpsc::channel();
    input::install_signal_handlers(tx.clone(), cfg.on_sigterm)?;
    let format = Format::from_args(claude_args);
    let session = codex::Shared::new(&cfg.api_model, cfg.context_window);
    let mut translator = Translator::new(format, &session);
    let continued = claude_args
        .windows(2)
        .find(|w| format == Format::Opencode && w[0] == "--session")
        .map(|w| w[1].clone());
    if let Some(id) = &continued {
        translator.continue_session(id);
    }
    input::spawn_stdin_reader(tx.clone(), format.input(), session.clone());

    let sim = Sim {
        permission_mode: permission_mode(claude_args),
        scenario_name: scenario_name.to_string(),
        steps,
        iteration,
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
        exit_code: cfg.exit_code,
        touched: Vec::new(),
        failed: Vec::new(),
        format,
        continues: continued.is_some(),
        translator,
        cfg,
    };
    sim.run()
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
        let prompt = self.wait(
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
        if self.continues {
            // The prompt of a continued session (ralph's request for notes).
            if let Wake::Message(text) = prompt {
                self.answer(&text)?;
            }
            return self.idle();
        }

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
                    limit.utilization,
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
                if self.running && notes_path(&text).is_none() {
                    // A note, not a checkpoint request (which names where the
                    // notes go): read, and played past, as a model goes on.
                    return Ok(None);
                }
                if until.message {
                    return Ok(Some(Wake::Message(text)));
                }
                self.inbox.push_back(text);
            }
            Event::Interrupt if self.running => {
                kill_tool_group();
                return Err(Halt::Abort);
            }
            Event::Interrupt => {}
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
        if self.format == Format::Codex {
            // The app-server dies on SIGINT; its clean stop is `turn/interrupt`.
            kill_tool_group();
            return Err(Halt::Exit(130));
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
        if !self.failed.is_empty() {
            notes.push_str("\n## Failed\n");
            for failure in &self.failed {
                notes.push_str(&format!("- {failure}\n"));
            }
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
}
