//! The processes ralph ends: the agent's process group and session, the
//! sessions its tools made for themselves (recorded while the agent runs,
//! ended by a supervisor taking over after a crash), and the orphans that
//! were re-parented to ralph (a child subreaper, Linux only). The process
//! table is read through `crate::platform`.

use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::platform::{ProcStat, gone, has_children, proc_stat, procs_with_stat};

/// SIGKILL a process group if anything is left in it.
pub(crate) fn kill_group(pgid: i32) {
    if pgid > 1 {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// A process group this run started for itself (a hook's), as recorded in
/// `.ralph/hook-groups.json` while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct GroupRecord {
    pub(crate) pgid: i32,
    /// When its leader started (clock ticks since boot).
    pub(crate) leader_start: Option<u64>,
}

impl GroupRecord {
    /// The group led by `pid`, as it is now.
    pub(crate) fn of(pid: i32) -> GroupRecord {
        GroupRecord {
            pgid: pid,
            leader_start: proc_stat(pid).map(|p| p.start),
        }
    }
}

/// End a recorded group a dead supervisor left behind: SIGKILL to the
/// group, unless its leader is alive with another start time (a reused
/// pid: someone else's group).
pub(crate) fn kill_recorded_group(g: &GroupRecord) {
    let leader = proc_stat(g.pgid).filter(|p| !p.zombie);
    if let (Some(p), Some(start)) = (leader, g.leader_start)
        && p.start != start
    {
        return;
    }
    kill_group(g.pgid);
}

/// A session that a process of this run lives in, as recorded in the lock
/// (`project::LockInfo::sessions`): Claude Code starts each Bash tool in a
/// session of its own, out of reach of the agent's session and group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SessionRecord {
    pub sid: i32,
    /// When the session's leader started (clock ticks since boot), if it
    /// was alive when seen: a live leader with another start time is a
    /// reused pid, someone else's session.
    pub(crate) leader_start: Option<u64>,
}

/// The sessions of every descendant of this process (the agent, its tools,
/// the orphans re-parented to ralph), other than ralph's own: one scan of
/// the process table.
pub(crate) fn descendant_sessions() -> Vec<SessionRecord> {
    let me = std::process::id() as i32;
    let procs = procs_with_stat();
    let own_session = procs
        .iter()
        .find(|(pid, _)| *pid == me)
        .map(|(_, p)| p.session);
    let mut ours = vec![me];
    let mut sessions: Vec<SessionRecord> = Vec::new();
    // Parents before children is not guaranteed: repeat until nothing new.
    let mut grew = true;
    while grew {
        grew = false;
        for (pid, p) in &procs {
            if !ours.contains(pid) && ours.contains(&p.ppid) {
                ours.push(*pid);
                grew = true;
                if Some(p.session) != own_session && !sessions.iter().any(|s| s.sid == p.session) {
                    let leader_start = procs
                        .iter()
                        .find(|(l, lp)| *l == p.session && !lp.zombie)
                        .map(|(_, lp)| lp.start);
                    sessions.push(SessionRecord {
                        sid: p.session,
                        leader_start,
                    });
                }
            }
        }
    }
    sessions.sort_by_key(|s| s.sid);
    sessions
}

/// SIGKILL every session below this process (the agent's, its tools'):
/// where no kernel kills an agent with its ralph (macOS), a ralph told of
/// its parent's death does it before it dies itself
/// (`platform::watch_parent`).
pub(crate) fn kill_descendant_sessions() {
    for s in descendant_sessions() {
        kill_group(s.sid);
        kill_members(s.sid);
    }
}

/// After a supervisor died: SIGKILL what is left in a session it recorded,
/// unless its leader is alive and not the one recorded (a reused pid).
pub(crate) fn kill_recorded_session(s: &SessionRecord) {
    let leader = proc_stat(s.sid).filter(|p| !p.zombie);
    match (leader, s.leader_start) {
        (None, _) => kill_session(s.sid),
        (Some(p), Some(start)) if p.start == start => {
            kill_group(s.sid);
            kill_members(s.sid);
        }
        _ => {}
    }
}

/// SIGKILL everything left in the session of an agent whose supervisor
/// died: its process group and the tools it started in groups of their own.
/// Nobody reaps them here (they were re-parented to init), so each pass only
/// kills; it repeats while processes are found, since a dying shell's child
/// may still fork.
///
/// The agent itself died with its supervisor (parent-death signal): a live
/// process with its pid means the number was reused, and that session is
/// someone else's.
pub(crate) fn kill_session(sid: i32) {
    let leader_alive = !gone(sid);
    if sid <= 1 || leader_alive {
        return;
    }
    kill_group(sid);
    kill_members(sid);
}

/// SIGKILL every live member of session `sid`, in passes while any is found.
fn kill_members(sid: i32) {
    if sid <= 1 {
        return;
    }
    for _ in 0..10 {
        // Zombies are dead already (and init may be slow to reap them).
        let left = procs_where(|p| p.session == sid && !p.zombie);
        if left.is_empty() {
            return;
        }
        for pid in left {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Make this process a child subreaper: processes the agent puts in the
/// background are re-parented to ralph when their parent exits, so
/// [`reap_orphans`] can end them.
pub(crate) fn become_subreaper() {
    if let Err(e) = crate::platform::become_subreaper() {
        tracing::warn!("cannot become a child subreaper: {e}");
    }
}

/// How long orphans get to end on SIGTERM before SIGKILL. git removes its
/// `index.lock` on SIGTERM (and every signal it can catch), never on
/// SIGKILL: a `git add` the agent left running in a loop, killed outright,
/// left the lock behind, and every later WIP commit of the night skipped
/// on it (the user's own git refused too).
const ORPHAN_GRACE: Duration = Duration::from_millis(300);

/// End and reap every child of ours that is still running (orphans the
/// agent left behind, re-parented to us), until none is left: SIGTERM,
/// then SIGKILL for what is still there after [`ORPHAN_GRACE`].
pub(crate) fn reap_orphans() {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let me = std::process::id() as i32;
    for _ in 0..10 {
        // Mostly there is none: then the scan of the process table (on
        // Linux a read of every process's stat file) is not needed.
        if !has_children() {
            return;
        }
        let mut left = children_of(me);
        if left.is_empty() {
            return;
        }
        for pid in &left {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGTERM);
        }
        let deadline = std::time::Instant::now() + ORPHAN_GRACE;
        loop {
            left.retain(|pid| {
                matches!(
                    waitpid(Pid::from_raw(*pid), Some(WaitPidFlag::WNOHANG)),
                    Ok(WaitStatus::StillAlive)
                )
            });
            if left.is_empty() || std::time::Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for pid in &left {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        for pid in left {
            let _ = waitpid(Pid::from_raw(pid), None);
        }
    }
}

/// Pids whose parent is `ppid` (zombies included: they still need a wait).
fn children_of(ppid: i32) -> Vec<i32> {
    procs_where(|p| p.ppid == ppid)
}

/// Pids whose state satisfies `test`.
fn procs_where(test: impl Fn(&ProcStat) -> bool) -> Vec<i32> {
    procs_with_stat()
        .into_iter()
        .filter(|(_, p)| test(p))
        .map(|(pid, _)| pid)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Spawn `script` under `sh` as the leader of a new session.
    fn session_leader(script: &str) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        let mut c = std::process::Command::new("sh");
        c.args(["-c", script]);
        // SAFETY: setsid only changes the child's own attributes.
        unsafe {
            c.pre_exec(|| {
                nix::unistd::setsid()
                    .map(|_| ())
                    .map_err(std::io::Error::from)
            });
        }
        c.spawn().unwrap()
    }

    fn alive(pid: i32) -> bool {
        !gone(pid)
    }

    #[test]
    fn kill_session_ends_what_a_dead_leader_left_and_spares_a_live_one() {
        // A leader that is gone left a process in its session.
        let mut dead = session_leader("sleep 613 & exit 0");
        dead.wait().unwrap();
        let sid = dead.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(5);
        let left = loop {
            let left = procs_where(|p| p.session == sid && !p.zombie);
            if !left.is_empty() || Instant::now() > deadline {
                break left;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(left.len(), 1, "the background sleep is in the session");
        kill_session(sid);
        std::thread::sleep(Duration::from_millis(50));
        assert!(!alive(left[0]));

        // A live leader is someone else's session (a reused pid): spared.
        let mut live = session_leader("exec sleep 614");
        let pid = live.id() as i32;
        kill_session(pid);
        std::thread::sleep(Duration::from_millis(50));
        assert!(alive(pid), "a live session leader is not ours to kill");
        live.kill().unwrap();
        live.wait().unwrap();
    }

    #[test]
    fn tools_in_sessions_of_their_own_are_recorded_and_ended_by_record() {
        // A tool that made a session of its own, as Claude Code's Bash does.
        let mut tool = session_leader("exec sleep 615");
        let sid = tool.id() as i32;
        let record = descendant_sessions()
            .into_iter()
            .find(|s| s.sid == sid)
            .expect("the tool's session is seen");
        assert!(record.leader_start.is_some());
        // A record whose leader started at another time is a reused pid.
        let other = SessionRecord {
            sid,
            leader_start: record.leader_start.map(|t| t + 1),
        };
        kill_recorded_session(&other);
        std::thread::sleep(Duration::from_millis(50));
        assert!(alive(sid), "someone else's session is spared");
        kill_recorded_session(&record);
        tool.wait().unwrap();
        assert!(!alive(sid));
    }
}
