//! Finding the installed CLI under test (or a clean skip), and running it
//! directly against a mock: a throwaway directory with a git repository
//! and its own `HOME`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// One CLI the suite can test.
pub struct Cli {
    /// For messages: "opencode", "Gemini CLI".
    pub product: &'static str,
    /// `$RALPH_E2E_<…>`: where a person points the suite at another binary.
    pub env: &'static str,
    /// scripts/install-<name>.sh.
    pub script: &'static str,
    /// The pinned version (scripts/<name>-version).
    pub pinned: &'static str,
    /// Where the install script puts it, under the repository.
    pub default_path: String,
}

/// The CLI found, and the version it reports.
#[derive(Debug, Clone)]
pub struct Installed {
    pub path: PathBuf,
    pub version: String,
}

impl Cli {
    /// The CLI to test: `$env`, else the install script's default location.
    /// `None` (after saying why) when there is none that runs; with
    /// `RALPH_E2E_REQUIRE=1` that is a failure instead of a skip.
    pub fn find(&self, test: &str) -> Option<Installed> {
        let pinned = self.pinned.trim();
        let required = std::env::var("RALPH_E2E_REQUIRE").is_ok_and(|v| v == "1");
        let skip = |why: String| {
            if required {
                panic!("{test}: {why} (and RALPH_E2E_REQUIRE=1)");
            }
            // Straight to stderr: libtest captures eprintln! of passing tests.
            let _ = writeln!(
                std::io::stderr(),
                "skipped: {test}: {why}; run {} ({} {pinned}) or set {}",
                self.script,
                self.product,
                self.env
            );
            None
        };
        let path = match std::env::var_os(self.env).filter(|p| !p.is_empty()) {
            Some(p) => PathBuf::from(p),
            None => Path::new(env!("CARGO_MANIFEST_DIR")).join(&self.default_path),
        };
        if !path.exists() {
            return skip(format!(
                "{} is not installed at {}",
                self.product,
                path.display()
            ));
        }
        let out = Command::new(&path)
            .arg("--version")
            .stdin(Stdio::null())
            .output();
        let version = match out {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
            Ok(o) => return skip(format!("{} --version: {}", path.display(), o.status)),
            Err(e) => return skip(format!("{} --version: {e}", path.display())),
        };
        if !version.contains(pinned) {
            let _ = writeln!(
                std::io::stderr(),
                "note: {test}: testing {} {version}, not the pinned {pinned}",
                self.product
            );
        }
        Some(Installed { path, version })
    }
}

/// Run `cmd` with stdin closed, killing it after `timeout`.
pub fn run(cmd: &mut Command, timeout: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the CLI");
    let pid = child.id() as i32;
    let deadline = Instant::now() + timeout;
    let watchdog = std::thread::spawn(move || {
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err() {
                return;
            }
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    });
    let out = child.wait_with_output().expect("wait for the CLI");
    let _ = watchdog.join();
    out
}

/// With `RALPH_RECORD_FIXTURES=1`, save `bytes` as `tests/fixtures/<dir>/<name>`
/// (how the decoders' fixtures were made).
pub fn record(dir: &str, name: &str, bytes: &[u8]) {
    if std::env::var("RALPH_RECORD_FIXTURES").is_ok_and(|v| v == "1") {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}
