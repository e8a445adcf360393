//! The tools, acting for real in the cwd: Write and Edit change files, Bash runs
//! `sh -c` in its own process group with its output in an unlinked temp file, Task
//! opens a sub-agent whose lines follow until the main thread speaks again.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;

use serde_json::{Value, json};

use super::{Flow, Halt, InFlight, OpenTask, Sim, Until, Wake};
use crate::Error;
use crate::input::{Event, TOOL_PGID};
use crate::lines::{
    Obj, ToolOutcome, task_system_line, timestamp, tool_result_line, user_text_line,
};
use crate::step::Tool;

/// The real CLI truncates tool output at about this many characters.
const TOOL_OUTPUT_LIMIT: usize = 30_000;
const FILE_STATE_NOTE: &str = "(file state is current in your context — no need to Read it back)";

impl Sim<'_> {
    fn abs(&self, path: &str) -> PathBuf {
        self.cwd.join(path)
    }

    /// The tool_use `input`, keys in the real CLI's order.
    pub(super) fn tool_input(&self, tool: &Tool) -> String {
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

    pub(super) fn run_tool(&mut self, tool: &Tool, id: &str, parent: Option<&str>) -> Flow<()> {
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
        if outcome.is_error == Some(true)
            && let Some(text) = outcome.content.as_str()
        {
            let text = text
                .replace("<tool_use_error>", "")
                .replace("</tool_use_error>", "");
            let lines: Vec<&str> = text
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with("Exit code"))
                .take(3)
                .collect();
            self.failed.push(lines.join("; "));
        }
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
        let spawned = Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(&self.cwd)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::from(clone()?))
            .process_group(0)
            .spawn();
        // No shell (a `FROM scratch` image): the tool fails, the session
        // goes on, as the real CLI's does.
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => return Ok(tool_error(format!("Exit code 127\ncannot run sh: {e}"))),
        };
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
    pub(super) fn close_task(&mut self) -> Flow<()> {
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
}

fn tool_error(message: String) -> ToolOutcome {
    ToolOutcome {
        content: Value::from(format!("<tool_use_error>{message}</tool_use_error>")),
        is_error: Some(true),
        tool_use_result: Some(Value::from(format!("Error: {message}"))),
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
