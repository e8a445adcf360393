//! User hooks from `ralph.toml` (`on_checkpoint`, `on_iteration_end`,
//! `on_exit`): run with `sh -c` exactly as written there, with facts passed
//! only through `RALPH_*` environment variables (never interpolated into
//! the command), each bounded by a timeout.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// What became of one hook command.
#[derive(Debug, Clone, PartialEq)]
pub struct HookRun {
    pub command: String,
    pub ok: bool,
    pub detail: String,
}

/// Run each command in `root` with `env` added; failures and timeouts are
/// reported, never raised: a hook must not stop the run.
pub fn run_all(
    commands: &[String],
    root: &Path,
    env: &[(&str, String)],
    timeout: Duration,
) -> Vec<HookRun> {
    commands
        .iter()
        .map(|c| run_one(c, root, env, timeout))
        .collect()
}

fn run_one(command: &str, root: &Path, env: &[(&str, String)], timeout: Duration) -> HookRun {
    let done = |ok: bool, detail: String| HookRun {
        command: command.to_string(),
        ok,
        detail,
    };
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return done(false, format!("cannot start: {e}")),
    };
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut err = String::new();
                if let Some(mut s) = child.stderr.take() {
                    use std::io::Read;
                    let _ = s.by_ref().take(4096).read_to_string(&mut err);
                }
                let err = err.trim().lines().last().unwrap_or("").to_string();
                return if status.success() {
                    done(true, String::new())
                } else {
                    done(
                        false,
                        format!(
                            "{status}{}",
                            if err.is_empty() {
                                String::new()
                            } else {
                                format!(": {err}")
                            }
                        ),
                    )
                };
            }
            Ok(None) if started.elapsed() >= timeout => {
                let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
                let _ = child.wait();
                return done(
                    false,
                    format!("timed out after {}s and was killed", timeout.as_secs()),
                );
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return done(false, format!("cannot wait: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_is_passed_and_never_interpolated() {
        let dir = tempfile::tempdir().unwrap();
        let hostile = "$(touch pwned) `touch pwned2`; touch pwned3".to_string();
        let runs = run_all(
            &["printf '%s|%s' \"$RALPH_ITERATION\" \"$RALPH_ITEM\" > out.txt".into()],
            dir.path(),
            &[
                ("RALPH_ITERATION", "3".into()),
                ("RALPH_ITEM", hostile.clone()),
            ],
            Duration::from_secs(5),
        );
        assert!(runs[0].ok, "{runs:?}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
            format!("3|{hostile}")
        );
        for f in ["pwned", "pwned2", "pwned3"] {
            assert!(!dir.path().join(f).exists());
        }
    }

    #[test]
    fn failing_and_slow_hooks_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let runs = run_all(
            &["echo boom >&2; exit 3".into(), "sleep 30".into()],
            dir.path(),
            &[],
            Duration::from_millis(300),
        );
        assert!(!runs[0].ok);
        assert!(runs[0].detail.contains("boom"), "{:?}", runs[0]);
        assert!(!runs[1].ok);
        assert!(runs[1].detail.contains("timed out"));
    }
}
