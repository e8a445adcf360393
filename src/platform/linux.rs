//! Linux: `/proc`, `prctl`, `waitid`, `F_SETPIPE_SZ`.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sys::signal::Signal;

use super::{Heir, ProcStat};

/// `/proc/PID/stat`'s fields ralph reads.
fn parse_stat(stat: &str) -> Option<ProcStat> {
    // The command name may hold spaces and parens: split after the last ')'.
    let mut fields = stat.get(stat.rfind(')')? + 2..)?.split(' ');
    let zombie = fields.next()? == "Z";
    let ppid = fields.next()?.parse().ok()?;
    let session = fields.nth(1)?.parse().ok()?;
    // Field 22 of stat(5); `session` was field 6.
    let start = fields.nth(15)?.parse().ok()?;
    Some(ProcStat {
        zombie,
        ppid,
        session,
        start,
    })
}

pub(super) fn proc_stat(pid: i32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

pub(super) fn pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .collect()
}

pub(super) fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

pub(super) fn become_subreaper() -> std::io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(std::io::Error::from)
}

/// Any child, running or exited and not yet waited for (`waitid` with
/// `WNOWAIT` reaps nothing).
pub(super) fn has_children() -> bool {
    use nix::sys::wait::{Id, WaitPidFlag, waitid};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    !matches!(waitid(Id::All, flags), Err(nix::errno::Errno::ECHILD))
}

pub(super) fn die_with_parent(cmd: &mut Command, signal: Signal, _heir: Heir) {
    let parent = std::process::id() as i32;
    // SAFETY: prctl and getppid are async-signal-safe system calls that
    // change only the child's own attributes.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(signal).map_err(std::io::Error::from)?;
            // Dead already, before that took hold: no orphan.
            if nix::unistd::getppid().as_raw() != parent {
                return Err(std::io::Error::other("ralph, its parent, is gone"));
            }
            Ok(())
        });
    }
}

pub(super) fn watch_parent(_end_own: fn()) {}

pub(super) fn enlarge_pipe(pipe: &impl std::os::fd::AsFd, size: i32) {
    let _ = nix::fcntl::fcntl(pipe, nix::fcntl::FcntlArg::F_SETPIPE_SZ(size));
}

pub(super) fn desktop_notification(critical: bool) -> String {
    let urgency = if critical { "critical" } else { "normal" };
    format!("notify-send --app-name=ralph -u {urgency} -- \"$RALPH_NOTIFY_SUBJECT\" \"$(cat)\"")
}

pub(super) fn files_written_by(fd: i32) -> Vec<PathBuf> {
    let Ok(target) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else {
        return Vec::new();
    };
    if std::fs::metadata(&target).is_ok_and(|m| m.is_file()) {
        vec![target]
    } else if target.as_os_str().as_encoded_bytes().starts_with(b"pipe:[") {
        written_by_holders(|_, _, held| held == target)
    } else if let Some(index) = pty_index(&target) {
        // A terminal recorder (`script -qfec 'ralph run' file`): the
        // holder of the terminal's other side writes the typescript.
        written_by_holders(|proc_dir, fd, held| pty_master_of(proc_dir, fd, held) == Some(index))
    } else {
        Vec::new()
    }
}

/// The number of a pseudo-terminal ralph writes to (`/dev/pts/3`: 3).
fn pty_index(target: &Path) -> Option<u32> {
    target.strip_prefix("/dev/pts").ok()?.to_str()?.parse().ok()
}

/// The pseudo-terminal whose other side `fd` (`/proc/PID/fd/N`, pointing
/// at `held`) is: the `tty-index:` line of its fdinfo, for `/dev/ptmx`.
/// The user's shell on the same terminal holds only the terminal's own
/// side, so its files are never taken.
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
/// the `flags:` line of `/proc/PID/fdinfo/N`.
fn opened_for_writing(proc_dir: &Path, fd: &Path) -> bool {
    let Some(n) = fd.file_name() else {
        return false;
    };
    std::fs::read_to_string(proc_dir.join("fdinfo").join(n)).is_ok_and(|info| fdinfo_writes(&info))
}

/// The rest of the line of `/proc/PID/fdinfo/N` that starts with `key`.
fn fdinfo_field(proc_dir: &Path, fd: &Path, key: &str) -> Option<String> {
    let info = std::fs::read_to_string(proc_dir.join("fdinfo").join(fd.file_name()?)).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::to_string)
}

/// Whether an fdinfo text's `flags:` (octal) open the file for writing.
fn fdinfo_writes(info: &str) -> bool {
    info.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|flags| flags & 0o3 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    #[test]
    fn stat_lines_are_read_past_any_command_name() {
        let rest = "0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0";
        let cases = [
            (
                format!("42 (sleep) S 7 42 42 {rest} 99 1000 100"),
                Some((false, 7, 42, 99)),
            ),
            // Spaces and parens in the name: the last ')' ends it.
            (
                format!("9 (a) b) (c) Z 1 9 5 {rest} 4242 1000 100"),
                Some((true, 1, 5, 4242)),
            ),
            // Cut short, or not a stat line at all.
            (format!("42 (sleep) S 7 42 42 {rest}"), None),
            ("12 (x)".to_string(), None),
            (String::new(), None),
        ];
        for (line, want) in cases {
            let got = parse_stat(&line).map(|p| (p.zombie, p.ppid, p.session, p.start));
            assert_eq!(got, want, "{line}");
        }
    }

    #[test]
    fn fdinfo_flags_say_whether_a_file_is_written() {
        for (info, writes) in [
            ("pos:\t0\nflags:\t0100001\nmnt_id:\t25\n", true),
            ("pos:\t0\nflags:\t02\n", true),
            ("pos:\t0\nflags:\t0100000\n", false),
            ("pos:\t0\n", false),
            ("flags:\tzz\n", false),
        ] {
            assert_eq!(fdinfo_writes(info), writes, "{info:?}");
        }
    }

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
