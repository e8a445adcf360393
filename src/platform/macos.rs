//! macOS: libproc (`proc_pidinfo`, `proc_listallpids`), `F_GETPATH`, and a
//! pipe for the parent's death.

use std::mem::{MaybeUninit, size_of};
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::process::Command;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::{Heir, ProcStat, parent_pipe};

pub(super) fn proc_stat(pid: i32) -> Option<ProcStat> {
    let size = size_of::<libc::proc_bsdinfo>() as i32;
    let mut info = MaybeUninit::<libc::proc_bsdinfo>::zeroed();
    // SAFETY: the buffer is one proc_bsdinfo of `size` bytes.
    let n = unsafe {
        libc::proc_pidinfo(
            pid,
            libc::PROC_PIDTBSDINFO,
            0,
            info.as_mut_ptr().cast(),
            size,
        )
    };
    if n != size {
        return None;
    }
    // SAFETY: proc_pidinfo filled all of it.
    let info = unsafe { info.assume_init() };
    Some(ProcStat {
        zombie: info.pbi_status == libc::SZOMB,
        ppid: info.pbi_ppid as i32,
        // A zombie may have no session left to read: it matches none.
        session: nix::unistd::getsid(Some(Pid::from_raw(pid))).map_or(-1, Pid::as_raw),
        start: info.pbi_start_tvsec * 1_000_000 + info.pbi_start_tvusec,
    })
}

pub(super) fn pids() -> Vec<i32> {
    // SAFETY: a null buffer asks for the count only.
    let count = unsafe { libc::proc_listallpids(std::ptr::null_mut(), 0) };
    if count <= 0 {
        return Vec::new();
    }
    // Room for the processes started since the count.
    let mut pids = vec![0i32; count as usize + 64];
    let bytes = (pids.len() * size_of::<i32>()) as i32;
    // SAFETY: the buffer holds `bytes` bytes of pids.
    let n = unsafe { libc::proc_listallpids(pids.as_mut_ptr().cast(), bytes) };
    pids.truncate(n.max(0) as usize);
    pids.retain(|p| *p > 0);
    pids
}

pub(super) fn exists(pid: u32) -> bool {
    !matches!(
        nix::sys::signal::kill(Pid::from_raw(pid as i32), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

pub(super) fn become_subreaper() -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "macOS has no child subreaper: processes the agent leaves in the background are not ended unless they stay in its session",
    ))
}

/// No `waitid(WNOWAIT)` to ask cheaply: the caller reads the process table.
pub(super) fn has_children() -> bool {
    true
}

pub(super) fn die_with_parent(cmd: &mut Command, signal: Signal, heir: Heir) {
    match heir {
        Heir::Ralph => parent_pipe::arrange(cmd, signal),
        // Another program cannot watch ralph's pipe: the next run's
        // takeover ends what is left of it (the sessions in the lock).
        Heir::Program => {}
    }
}

pub(super) fn watch_parent(end_own: fn()) {
    parent_pipe::watch(end_own);
}

/// macOS keeps no count of a pipe's holders to follow: only a regular file
/// is recognised.
pub(super) fn files_written_by(fd: i32) -> Vec<PathBuf> {
    // SAFETY: only borrowed for two fcntl/fstat calls; 1 and 2 stay open.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    let regular = nix::sys::stat::fstat(fd).is_ok_and(|st| {
        use nix::sys::stat::SFlag;
        st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFREG.bits()
    });
    let mut path = PathBuf::new();
    if regular && nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETPATH(&mut path)).is_ok() {
        vec![path]
    } else {
        Vec::new()
    }
}

/// The title and text go to AppleScript as arguments, never as its source.
pub(super) fn desktop_notification(critical: bool) -> String {
    let sound = if critical {
        " sound name \"Basso\""
    } else {
        ""
    };
    format!(
        "osascript -e 'on run argv' -e 'display notification (item 2 of argv) with title (item 1 of argv){sound}' -e 'end run' \"$RALPH_NOTIFY_SUBJECT\" \"$(cat)\""
    )
}

/// macOS sizes pipes itself (up to 64 KiB as the reader lags).
pub(super) fn enlarge_pipe(_pipe: &impl std::os::fd::AsFd, _size: i32) {}
