//! `.ralph/lock`: the `flock`ed record of the running supervisor, its
//! agent, whether it is inside a commit, and the sessions its agent's tools
//! made, for a supervisor that takes over after a crash.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::formats::{Layout, now_rfc3339, overwrite_padded};

/// What `.ralph/lock` records about the running supervisor.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LockInfo {
    pub(crate) pid: i32,
    pub(crate) run_id: String,
    pub agent_pgid: Option<i32>,
    pub(crate) started_at: String,
    /// Inside a checkpoint (handoff, WIP commit): a supervisor that dies
    /// now may leave git's lock files behind.
    #[serde(default)]
    pub(crate) committing: bool,
    /// Every session a process of the run was seen in while the agent ran
    /// (the tools' own sessions): a supervisor taking over ends them all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<crate::agent::procs::SessionRecord>,
}

/// The held lock: an exclusive `flock` on `.ralph/lock`, released by the
/// kernel when the supervisor dies, so a stale file never blocks a new run.
pub struct Lock {
    file: nix::fcntl::Flock<File>,
    pub(crate) info: LockInfo,
    /// The previous holder died with this agent process group recorded.
    pub(crate) stale_agent_pgid: Option<i32>,
    /// The previous holder died in the middle of a checkpoint.
    pub(crate) stale_committing: bool,
    /// The sessions the previous holder recorded.
    pub(crate) stale_sessions: Vec<crate::agent::procs::SessionRecord>,
}

impl Lock {
    pub fn acquire(layout: &Layout, run_id: &str) -> Result<Lock> {
        let path = layout.lock();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io("cannot open", &path, e))?;
        let file = match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        {
            Ok(f) => f,
            Err((_, _)) => {
                let pid = read_lock(layout).map_or(0, |i| i.pid);
                return Err(Error::Locked { pid });
            }
        };
        let stale = read_lock(layout).unwrap_or_default();
        let mut lock = Lock {
            file,
            info: LockInfo {
                pid: std::process::id() as i32,
                run_id: run_id.to_string(),
                agent_pgid: None,
                started_at: now_rfc3339(),
                committing: false,
                sessions: Vec::new(),
            },
            stale_agent_pgid: stale.agent_pgid,
            stale_committing: stale.committing,
            stale_sessions: stale.sessions,
        };
        lock.write()?;
        Ok(lock)
    }

    /// Whether `.ralph/lock` is still the file this lock holds, checked on
    /// every beat: `git clean -fdx` or `rm -rf .ralph` deletes it under a
    /// live run, and a second `ralph run` would lock a new one. A deleted or
    /// replaced lock is taken again (Ok(true)); Err(Locked) when another
    /// supervisor holds the new one, so that this one stops.
    pub(crate) fn revalidate(&mut self, layout: &Layout) -> Result<bool> {
        use std::os::unix::fs::MetadataExt;
        let held = self.file.metadata().ok();
        let on_disk = std::fs::metadata(layout.lock()).ok();
        if let (Some(held), Some(on_disk)) = (&held, &on_disk)
            && (held.dev(), held.ino()) == (on_disk.dev(), on_disk.ino())
        {
            return Ok(false);
        }
        layout.ensure()?;
        let taken = Lock::acquire(layout, &self.info.run_id)?;
        self.file = taken.file;
        self.write()?;
        Ok(true)
    }

    pub(crate) fn set_agent(&mut self, pgid: Option<i32>) -> Result<()> {
        self.info.agent_pgid = pgid;
        if pgid.is_none() {
            // The agent's leftovers were ended with it.
            self.info.sessions.clear();
        }
        self.write()
    }

    /// Add the sessions seen now to those recorded (written only when
    /// that adds one): a session stays recorded until the run ends, since
    /// its leader may exit and leave members behind.
    pub(crate) fn add_sessions(
        &mut self,
        seen: Vec<crate::agent::procs::SessionRecord>,
    ) -> Result<()> {
        let before = self.info.sessions.len();
        for s in seen {
            if !self.info.sessions.iter().any(|r| r.sid == s.sid) {
                self.info.sessions.push(s);
            }
        }
        if self.info.sessions.len() == before {
            return Ok(());
        }
        self.write()
    }

    pub(crate) fn set_committing(&mut self, committing: bool) -> Result<()> {
        self.info.committing = committing;
        self.write()
    }

    /// Rewrite the record in place with one positioned write, padded with
    /// spaces over whatever was longer: never truncated first, so a reader
    /// (`ralph stop`, a supervisor taking over after a `kill -9`) always
    /// finds a whole record, never an empty or half-written file.
    fn write(&mut self) -> Result<()> {
        let json = serde_json::to_vec(&self.info).expect("lock info serializes");
        // No sync: the lock's content matters only while the processes it
        // names live, and no power loss leaves them alive.
        overwrite_padded(&self.file, json).map_err(|e| Error::io("cannot write", ".ralph/lock", e))
    }
}

/// The lock file's content, whether or not anyone holds it.
pub fn read_lock(layout: &Layout) -> Option<LockInfo> {
    let bytes = std::fs::read(layout.lock()).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The running supervisor, if one holds the lock right now.
pub(crate) fn running_supervisor(layout: &Layout) -> Option<LockInfo> {
    let file = File::open(layout.lock()).ok()?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock) {
        Ok(_unlocked_on_drop) => None,
        Err(_) => read_lock(layout),
    }
}
