//! The wire: fetch and push through the user's own `git` binary.
//!
//! Why the binary and not git2's transports: ralph's git2 is built without
//! its network features (`default-features = false`: HTTPS would need
//! OpenSSL, SSH libssh2), and even with them git2 honours only what its
//! callbacks re-implement. The `git` on the machine already does what the
//! user configured for this remote: credential helpers (`credential.helper`,
//! the token `actions/checkout` leaves in `http.extraheader`, `gh auth
//! setup-git`), the SSH agent and `~/.ssh/config`, `GIT_SSH_COMMAND`,
//! `url.*.insteadOf`, proxies and CA bundles. A fleet worker runs unattended,
//! so every call gets `GIT_TERMINAL_PROMPT=0` (a missing credential fails
//! instead of waiting for a password at 3 a.m.), stdin closed, and a time
//! limit (a dead network fails instead of hanging). Everything that does
//! not cross the network (commits, merges, reading refs) stays in git2.
//!
//! Compare-and-swap: every ref update is pushed with
//! `--force-with-lease=<ref>:<expected>` (empty: the ref must not exist) and
//! `--atomic`. The receiving side checks each ref's old value under its lock
//! as it updates it, so of two workers that push over the same expected
//! value exactly one succeeds — the claim, the lease renewal and the run
//! branch's update all rest on this.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use git2::Oid;

/// What a ref must be on the remote for an update to go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    /// The ref must not exist (a create).
    Absent,
    /// The ref must point at this commit (a compare-and-swap).
    Is(Oid),
}

/// One ref update of an atomic push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Update {
    pub(crate) refname: String,
    /// `None` deletes the ref.
    pub(crate) new: Option<Oid>,
    pub(crate) expect: Expect,
}

impl Update {
    pub(crate) fn create(refname: impl Into<String>, new: Oid) -> Update {
        Update {
            refname: refname.into(),
            new: Some(new),
            expect: Expect::Absent,
        }
    }

    pub(crate) fn swap(refname: impl Into<String>, old: Oid, new: Oid) -> Update {
        Update {
            refname: refname.into(),
            new: Some(new),
            expect: Expect::Is(old),
        }
    }

    pub(crate) fn delete(refname: impl Into<String>, old: Oid) -> Update {
        Update {
            refname: refname.into(),
            new: None,
            expect: Expect::Is(old),
        }
    }
}

/// Why a push or fetch did not go through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WireError {
    /// The remote answered and refused: a ref was not what we expected
    /// (another worker got there first). Nothing was changed (`--atomic`).
    Rejected(String),
    /// The remote answered and refused by its own rule (a pre-receive or
    /// update hook, a protected ref): not a race lost, and trying again
    /// gets the same answer. The message is the server's (`remote:` lines).
    Refused(String),
    /// The remote did not answer (network, credentials, time limit): worth
    /// retrying later; the message is git's own, last lines.
    Unreachable(String),
    /// The clone itself failed (writing an object, reading a ref).
    Local(String),
}

impl From<git2::Error> for WireError {
    fn from(e: git2::Error) -> Self {
        WireError::Local(e.message().to_string())
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Rejected(m) => write!(f, "the remote refused the update: {m}"),
            WireError::Refused(m) => write!(f, "the remote's rules refused the push: {m}"),
            WireError::Unreachable(m) => write!(f, "the remote cannot be reached: {m}"),
            WireError::Local(m) => write!(f, "the clone's repository failed: {m}"),
        }
    }
}

impl std::error::Error for WireError {}

/// A remote as the user's `git` reaches it from one clone.
#[derive(Debug, Clone)]
pub(crate) struct Wire {
    /// Any directory inside the clone (its work tree or a worktree of it).
    dir: PathBuf,
    /// A remote name (`origin`) or URL, as `git push` takes it.
    remote: String,
    timeout: Duration,
    /// Shared by its `bounded` copies: they reach the same remote.
    sight: std::sync::Arc<std::sync::Mutex<Sight>>,
}

/// Whether the last call reached the remote, and when one first did again
/// after calls that could not.
#[derive(Debug, Default)]
struct Sight {
    cut_off: bool,
    regained: Option<Instant>,
}

impl Wire {
    pub(crate) fn new(dir: &Path, remote: &str, timeout: Duration) -> Wire {
        Wire {
            dir: dir.to_path_buf(),
            remote: remote.to_string(),
            timeout,
            sight: Default::default(),
        }
    }

    /// When a call first reached the remote again after calls that could
    /// not (`None`: never cut off).
    pub(crate) fn regained(&self) -> Option<Instant> {
        self.sight.lock().map_or(None, |s| s.regained)
    }

    /// Note whether `result` of a call reached the remote.
    fn seen(&self, result: Result<(), WireError>) -> Result<(), WireError> {
        if let Ok(mut sight) = self.sight.lock() {
            match &result {
                Err(WireError::Unreachable(_)) => sight.cut_off = true,
                // The clone failed: nothing was learnt of the remote.
                Err(WireError::Local(_)) => {}
                _ if sight.cut_off => {
                    sight.cut_off = false;
                    sight.regained = Some(Instant::now());
                }
                _ => {}
            }
        }
        result
    }

    pub(crate) fn remote(&self) -> &str {
        &self.remote
    }

    /// The same remote, each call given at most `timeout`.
    pub(crate) fn bounded(&self, timeout: Duration) -> Wire {
        Wire {
            timeout,
            ..self.clone()
        }
    }

    /// Fetch `refspecs` (each `+src:dst`), pruning what the remote no longer has.
    pub(crate) fn fetch(&self, refspecs: &[String]) -> Result<(), WireError> {
        self.seen(self.fetch_once(refspecs))
    }

    fn fetch_once(&self, refspecs: &[String]) -> Result<(), WireError> {
        let mut args = vec![
            "fetch",
            "--prune",
            "--no-tags",
            "--quiet",
            "--no-write-fetch-head",
        ];
        args.push(&self.remote);
        args.extend(refspecs.iter().map(String::as_str));
        let out = self.git(&args)?;
        if out.ok {
            Ok(())
        } else {
            Err(WireError::Unreachable(tail(&out.stderr)))
        }
    }

    /// Push `updates` all or nothing, each checked against its expected value.
    pub(crate) fn push(&self, updates: &[Update]) -> Result<(), WireError> {
        self.seen(self.push_once(updates))
    }

    fn push_once(&self, updates: &[Update]) -> Result<(), WireError> {
        if updates.is_empty() {
            return Ok(());
        }
        let mut args: Vec<String> = ["push", "--porcelain", "--atomic", "--no-verify"]
            .map(String::from)
            .to_vec();
        for u in updates {
            let expect = match u.expect {
                Expect::Absent => String::new(),
                Expect::Is(oid) => oid.to_string(),
            };
            args.push(format!("--force-with-lease={}:{expect}", u.refname));
        }
        args.push(self.remote.clone());
        for u in updates {
            let src = u.new.map(|o| o.to_string()).unwrap_or_default();
            args.push(format!("{src}:{}", u.refname));
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = self.git(&refs)?;
        if out.ok {
            return Ok(());
        }
        Err(refusal(&out.stdout, &out.stderr))
    }

    fn git(&self, args: &[&str]) -> Result<Output, WireError> {
        let mut command = Command::new("git");
        command
            .arg("-C")
            .arg(&self.dir)
            .args(args)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GCM_INTERACTIVE", "never")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The one parent-death rule: a push of a worker killed -9 ends with it.
        crate::platform::die_with_parent(
            &mut command,
            nix::sys::signal::Signal::SIGKILL,
            crate::platform::Heir::Program,
        );
        // A group of its own, ended whole at the time limit: what git
        // started (ssh, a helper, a local remote's receive-pack and its
        // hooks) holds our pipes too, and would hold the reads below.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command
            .spawn()
            .map_err(|e| WireError::Unreachable(format!("cannot run git: {e}")))?;
        let group = nix::unistd::Pid::from_raw(child.id() as i32);
        // Read both pipes on threads so a chatty git cannot block on a full pipe.
        let mut stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        let out_thread = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        let err_thread = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() >= deadline => {
                    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => break None,
            }
        };
        let stdout = out_thread.join().unwrap_or_default();
        let stderr = err_thread.join().unwrap_or_default();
        match status {
            Some(status) => Ok(Output {
                ok: status.success(),
                stdout,
                stderr,
            }),
            None => Err(WireError::Unreachable(format!(
                "git {} took longer than {}s and was stopped",
                args.first().copied().unwrap_or_default(),
                self.timeout.as_secs()
            ))),
        }
    }
}

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Why a push that failed did not go through (pure). `--porcelain` prints
/// one `<flag>\t<from>:<to>\t<summary>` line per ref once the remote has
/// answered; `!` is a refusal. A compare-and-swap lost (`stale info`, a ref
/// that moved or exists, the rest of an atomic push) is `Rejected`; a
/// refusal the server's rules gave (`[remote rejected] (pre-receive hook
/// declined)`, `(protected branch …)`) is `Refused`, with what the server
/// said on `remote:` lines; no answer at all is `Unreachable`.
fn refusal(stdout: &str, stderr: &str) -> WireError {
    let refused: Vec<&str> = stdout.lines().filter(|l| l.starts_with('!')).collect();
    if refused.is_empty() {
        return WireError::Unreachable(tail(stderr));
    }
    const RACES: [&str; 10] = [
        "stale info",
        "atomic transaction failed",
        "incorrect old value",
        "fetch first",
        "non-fast-forward",
        "already exists",
        "atomic push failed",
        "failed to update ref",
        "failed to lock",
        "cannot lock ref",
    ];
    let by_rule = refused
        .iter()
        .find(|l| l.contains("[remote rejected]") && !RACES.iter().any(|race| l.contains(race)));
    match by_rule {
        Some(line) => {
            let reason = line.rsplit('\t').next().unwrap_or(line).trim();
            let said: Vec<&str> = stderr
                .lines()
                .filter_map(|l| l.strip_prefix("remote:"))
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let message = if said.is_empty() {
                reason.to_string()
            } else {
                format!("{reason}: {}", said.join(" / "))
            };
            WireError::Refused(crate::text::cut(&message, 400))
        }
        None => WireError::Rejected(refused.join("; ").replace('\t', " ")),
    }
}

/// git's last few stderr lines: the reason, without its progress chatter.
fn tail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let from = lines.len().saturating_sub(3);
    crate::text::cut(&lines[from..].join(" / "), 400)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_a_race_lost_a_servers_rule_or_no_answer() {
        let hook = "To ../r.git\n!\tHEAD:refs/heads/run\t[remote rejected] (pre-receive hook declined)\n!\tHEAD:refs/ralph/x\t[remote rejected] (pre-receive hook declined)\nDone\n";
        let said = "remote: policy: the run branch needs a review        \nerror: failed to push some refs to '../r.git'\n";
        assert_eq!(
            refusal(hook, said),
            WireError::Refused(
                "[remote rejected] (pre-receive hook declined): policy: the run branch needs a review"
                    .into()
            )
        );
        // Without a word from the server: its reason alone.
        assert!(
            matches!(refusal(hook, ""), WireError::Refused(m) if m == "[remote rejected] (pre-receive hook declined)")
        );
        for race in [
            "!\tHEAD:refs/heads/x\t[rejected] (stale info)\n",
            "!\tHEAD:refs/heads/x\t[remote rejected] (failed to update ref)\n!\tHEAD:refs/y\t[remote rejected] (atomic push failed)\n",
            "!\tHEAD:refs/heads/x\t[rejected] (already exists)\n",
            "!\tHEAD:refs/ralph/claims/i-0\t[remote rejected] (atomic transaction failed)\n",
        ] {
            assert!(
                matches!(refusal(race, ""), WireError::Rejected(_)),
                "{race}"
            );
        }
        assert!(matches!(
            refusal("", "fatal: unable to access: Could not resolve host\n"),
            WireError::Unreachable(m) if m.contains("resolve host")
        ));
    }
}
