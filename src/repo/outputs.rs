//! The files ralph's own stdout and stderr write to (`nohup ralph run >
//! ralph.log &`, or through a pipe: `ralph run 2>&1 | tee ralph.log`):
//! ralph's files, never the agent's progress, never committed.
//!
//! A pipe is followed one step: the other processes that hold it (the
//! `tee`) are read in `/proc`, and the regular files they have open for
//! writing are taken as ralph's output. A pseudo-terminal is followed the
//! same way to the process holding its other side (`script -qfec 'ralph
//! run' ralph.typescript`, whose typescript grows with every line ralph
//! prints): the holder of `/dev/ptmx` whose `tty-index` is ralph's
//! terminal's number. The user's shell on the same terminal holds only
//! the terminal's own side, so its files are never taken. A reader that has not opened its
//! file yet when ralph starts (it starts beside ralph, and a loaded machine
//! may run it late) is found at the next look: each iteration looks again,
//! and a file once found stays ralph's.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

static OUTPUT_FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Note the regular files ralph's stdout and stderr write to, directly or
/// through a pipe, at the start of a run and again before each iteration:
/// they are ralph's files, never the agent's progress and never committed.
pub(crate) fn remember_output_files() {
    let mut found = Vec::new();
    for fd in [1, 2] {
        let Ok(target) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else {
            continue;
        };
        if std::fs::metadata(&target).is_ok_and(|m| m.is_file()) {
            found.push(target);
        } else if target.as_os_str().as_encoded_bytes().starts_with(b"pipe:[") {
            found.extend(written_by_holders(|_, _, held| held == target));
        } else if let Some(index) = pty_index(&target) {
            found.extend(written_by_holders(|proc_dir, fd, held| {
                pty_master_of(proc_dir, fd, held) == Some(index)
            }));
        }
    }
    let mut files = OUTPUT_FILES.lock().unwrap_or_else(|e| e.into_inner());
    files.extend(found);
    files.sort();
    files.dedup();
}

/// The files [`remember_output_files`] found so far (none before it ran).
pub(crate) fn output_files() -> Vec<PathBuf> {
    OUTPUT_FILES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

/// The number of a pseudo-terminal ralph writes to (`/dev/pts/3`: 3).
fn pty_index(target: &Path) -> Option<u32> {
    target.strip_prefix("/dev/pts").ok()?.to_str()?.parse().ok()
}

/// The pseudo-terminal whose other side `fd` (`/proc/PID/fd/N`, pointing
/// at `held`) is: the `tty-index:` line of its fdinfo, for `/dev/ptmx`.
fn pty_master_of(proc_dir: &Path, fd: &Path, held: &Path) -> Option<u32> {
    if held != Path::new("/dev/ptmx") && held != Path::new("/dev/pts/ptmx") {
        return None;
    }
    fdinfo_field(proc_dir, fd, "tty-index:")?
        .trim()
        .parse()
        .ok()
}

/// The regular files that the other processes holding a descriptor that
/// `holds` (its process's `/proc/PID`, the `/proc/PID/fd/N`, its target)
/// accepts have open for writing.
fn written_by_holders(holds: impl Fn(&Path, &Path, &Path) -> bool) -> Vec<PathBuf> {
    let me = std::process::id().to_string();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for entry in procs.flatten() {
        let pid = entry.file_name();
        if pid == me.as_str() || !pid.as_encoded_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        let dir = entry.path();
        let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
            continue;
        };
        let links: Vec<(PathBuf, PathBuf)> = fds
            .flatten()
            .filter_map(|fd| Some((std::fs::read_link(fd.path()).ok()?, fd.path())))
            .collect();
        if !links.iter().any(|(target, fd)| holds(&dir, fd, target)) {
            continue;
        }
        files.extend(
            links
                .into_iter()
                .filter(|(target, fd)| {
                    std::fs::metadata(target).is_ok_and(|m| m.is_file())
                        && opened_for_writing(&dir, fd)
                })
                .map(|(target, _)| target),
        );
    }
    files
}

/// Whether the descriptor `fd` (`/proc/PID/fd/N`) is open for writing, from
/// the `flags:` line (octal) of `/proc/PID/fdinfo/N`.
fn opened_for_writing(proc_dir: &Path, fd: &Path) -> bool {
    fdinfo_field(proc_dir, fd, "flags:")
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|flags| flags & 0o3 != 0)
}

/// The rest of the line of `/proc/PID/fdinfo/N` that starts with `key`.
fn fdinfo_field(proc_dir: &Path, fd: &Path, key: &str) -> Option<String> {
    let info = std::fs::read_to_string(proc_dir.join("fdinfo").join(fd.file_name()?)).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn the_file_a_pipe_reader_writes_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("ralph.log");
        let mut tee = Command::new("tee")
            .arg(&log)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            // tee's stderr would be this test's: a file when `cargo test > log`.
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The pipe as this process holds it: its write end.
        let stdin = tee.stdin.as_ref().unwrap();
        use std::os::fd::AsRawFd;
        let pipe = std::fs::read_link(format!("/proc/self/fd/{}", stdin.as_raw_fd())).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let found = loop {
            let found = written_by_holders(|_, _, held| held == pipe);
            if !found.is_empty() || std::time::Instant::now() > deadline {
                break found;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        drop(tee.stdin.take());
        tee.wait().unwrap();
        // Other tests' children forked meanwhile may hold the pipe for an
        // instant too (with their own output files): tee's file is there.
        assert!(found.contains(&log.canonicalize().unwrap()), "{found:?}");
    }
}
