//! The agent in a box (`[agent] sandbox`, `[sandbox]`, docs/sandbox.md):
//! with `sandbox = "bwrap"` every agent, whatever its kind, runs under
//! bubblewrap. The project's work tree and its git dirs are writable;
//! the rest of the file system is read-only; the places where other
//! people's and the user's own files live (`/home`, `/root`, `/tmp`, …,
//! and `$HOME`) are hidden behind empty tmpfs, with `$HOME` a private one
//! holding only the entries the agent CLI needs (`sandbox.home`).
//! ralph's environment is passed by allow-list (`passed_env`): what every
//! agent needs, its kind's settings and credentials (`sandbox.pass_env`),
//! never a notification channel's secret; `agent.env` on top.
//!
//! `bwrap_args` is pure (what is mounted where, in order: later mounts
//! cover earlier ones); `wrap` applies it to an [`AgentCommand`]; `check`
//! runs at the start of a run and refuses to run without the sandbox it
//! was asked for. Pitfalls: a bind of a missing source fails, so optional
//! ones use `--bind-try`; the agent stays in ralph's session and process
//! group (no `--new-session`, no PID namespace), so ralph's signals, its
//! subreaper and the takeover after a crash reach everything inside; as
//! root the capabilities are dropped, or the agent could remount `/`.

pub(crate) mod protect;

use std::path::{Path, PathBuf};

use crate::config::SandboxConfig;
use crate::config::sandbox::Kind;
use crate::error::{Error, Result};

/// Where other people's and the user's own files live: hidden.
pub const HIDDEN: [&str; 8] = [
    "/home",
    "/root",
    "/tmp",
    "/var/tmp",
    "/mnt",
    "/media",
    "/srv",
    "/run/user",
];

/// What the box is made of for one project.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Layout {
    /// The project root (canonical).
    pub(crate) root: PathBuf,
    /// The repository's git dir and common dir when outside the root (a
    /// linked worktree, `--separate-git-dir`).
    pub(crate) git_dirs: Vec<PathBuf>,
    /// `$HOME` of the agent and of ralph (hidden, then the private one).
    pub(crate) homes: Vec<PathBuf>,
    /// The agent's program, resolved (made visible read-only: it may live
    /// under a hidden place).
    pub(crate) program: Option<PathBuf>,
    pub(crate) as_root: bool,
}

/// `bwrap`'s arguments for `layout`, up to (not including) the `--` and
/// the agent's command; `home`: the entries of `$HOME` shared.
pub(crate) fn bwrap_args(layout: &Layout, config: &SandboxConfig, home: &[String]) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let mut push = |words: &[&str]| a.extend(words.iter().map(|w| w.to_string()));
    let s = |p: &Path| p.display().to_string();
    push(&["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]);
    let agent_home = layout
        .homes
        .first()
        .cloned()
        .unwrap_or_else(|| "/nonexistent".into());
    let expand = |p: &str| -> PathBuf {
        match p.strip_prefix("~/") {
            Some(rest) => agent_home.join(rest),
            None if p == "~" => agent_home.clone(),
            None => layout.root.join(p),
        }
    };
    let mut hidden: Vec<PathBuf> = HIDDEN.iter().map(PathBuf::from).collect();
    hidden.extend(layout.homes.iter().cloned());
    hidden.extend(config.hide.iter().map(|p| expand(p)));
    for h in &hidden {
        // `--tmpfs` needs the mount point: only what exists is hidden.
        if h.exists() {
            push(&["--tmpfs", &s(h)]);
        }
    }
    // The private home: empty but for what the agent CLI needs.
    for dir in &layout.homes {
        for entry in home {
            let p = dir.join(entry);
            push(&["--bind-try", &s(&p), &s(&p)]);
        }
    }
    for p in config.read_only.iter().map(|p| expand(p)) {
        push(&["--ro-bind-try", &s(&p), &s(&p)]);
    }
    if let Some(program) = &layout.program {
        // Its package: the directory of the file it resolves to, or, for a
        // Node CLI (`node_modules/.bin/gemini` → `…/dist/index.js`), the
        // whole outermost `node_modules` its dependencies live in. Then
        // the name it is called by (a symlink elsewhere).
        if let Some(dir) = program.canonicalize().ok().as_deref().and_then(package_dir) {
            push(&["--ro-bind-try", &s(&dir), &s(&dir)]);
        }
        push(&["--ro-bind-try", &s(program), &s(program)]);
    }
    push(&["--bind", &s(&layout.root), &s(&layout.root)]);
    for d in &layout.git_dirs {
        push(&["--bind", &s(d), &s(d)]);
    }
    for p in config.read_write.iter().map(|p| expand(p)) {
        push(&["--bind-try", &s(&p), &s(&p)]);
    }
    if !config.network {
        push(&["--unshare-net"]);
    }
    if layout.as_root {
        push(&["--cap-drop", "ALL"]);
    }
    push(&["--die-with-parent", "--chdir", &s(&layout.root)]);
    a
}

/// What of the agent's program (resolved) the box shows: the outermost
/// `node_modules` above it, else its directory.
fn package_dir(resolved: &Path) -> Option<PathBuf> {
    let outermost = resolved
        .ancestors()
        .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .last();
    outermost
        .or_else(|| resolved.parent())
        .map(Path::to_path_buf)
}

/// Whether this process runs as root (its effective user).
pub(crate) fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The box of the project at `root` for an agent whose environment sets
/// `agent_home` (`agent.env.HOME`), running `program`.
pub(crate) fn layout(root: &Path, agent_home: Option<&str>, program: Option<PathBuf>) -> Layout {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut git_dirs = Vec::new();
    if let Ok(repo) = git2::Repository::discover(&root) {
        for d in [repo.path(), repo.commondir()] {
            let d = d.canonicalize().unwrap_or_else(|_| d.to_path_buf());
            if !d.starts_with(&root) && !git_dirs.contains(&d) {
                git_dirs.push(d);
            }
        }
    }
    let mut homes: Vec<PathBuf> = Vec::new();
    for h in agent_home
        .map(PathBuf::from)
        .into_iter()
        .chain(std::env::var_os("HOME").map(PathBuf::from))
    {
        if !h.as_os_str().is_empty() && h != Path::new("/") && !homes.contains(&h) {
            homes.push(h);
        }
    }
    Layout {
        root,
        git_dirs,
        homes,
        program,
        as_root: running_as_root(),
    }
}

/// The bubblewrap binary on PATH.
pub(crate) fn bwrap() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("bwrap"))
        .find(|p| p.is_file())
}

const MISSING_HINT: &str = "install bubblewrap (`apt-get install bubblewrap`, `dnf install bubblewrap`, `pacman -S bubblewrap`), or set `sandbox = \"none\"` under [agent] in ralph.toml";
const BROKEN_HINT: &str = "bubblewrap needs user namespaces: `sysctl kernel.unprivileged_userns_clone=1` (Debian), `sysctl kernel.apparmor_restrict_unprivileged_userns=0` (Ubuntu 24.04+); in a container, allow them (e.g. docker run --security-opt seccomp=unconfined --cap-add SYS_ADMIN) or run ralph as root there; or set `sandbox = \"none\"` under [agent]";

/// Whether a box can be made here: bubblewrap is installed and runs.
/// Err: the message and the fix.
pub(crate) fn probe() -> std::result::Result<PathBuf, (String, &'static str)> {
    if !cfg!(target_os = "linux") {
        return Err((
            "`sandbox = \"bwrap\"` needs Linux (bubblewrap); this is not Linux".into(),
            "on macOS use Claude Code's own sandbox (docs/sandbox.md) or run ralph in a Linux container or VM, and set `sandbox = \"none\"` under [agent]",
        ));
    }
    let Some(bwrap) = bwrap() else {
        return Err((
            "`sandbox = \"bwrap\"` but bubblewrap (`bwrap`) is not installed".into(),
            MISSING_HINT,
        ));
    };
    let mut cmd = std::process::Command::new(&bwrap);
    cmd.args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]);
    if running_as_root() {
        cmd.args(["--cap-drop", "ALL"]);
    }
    let out = cmd
        .arg("true")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| (format!("cannot run {}: {e}", bwrap.display()), MISSING_HINT))?;
    if out.status.success() {
        Ok(bwrap)
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err((
            format!(
                "bubblewrap cannot make a sandbox here ({}): {}",
                out.status,
                err.trim()
            ),
            BROKEN_HINT,
        ))
    }
}

/// At the start of a run: the sandbox asked for can be made, and the
/// project is not a place the sandbox hides whole.
pub(crate) fn check(kind: Kind, root: &Path, agent_home: Option<&str>) -> Result<()> {
    if kind == Kind::None {
        return Ok(());
    }
    probe().map_err(|(message, hint)| Error::config(message).with_hint(hint))?;
    let l = layout(root, agent_home, None);
    if l.root == Path::new("/") || l.homes.iter().any(|h| h.starts_with(&l.root)) {
        return Err(Error::config(format!(
            "the sandbox cannot run an agent in {}: it would see the whole home directory",
            l.root.display()
        ))
        .with_hint("run ralph in a project directory below $HOME, or set `sandbox = \"none\"` under [agent]"));
    }
    Ok(())
}

/// What every agent gets of ralph's environment in the box, by name: where
/// programs are, who and where it is, its locale and terminal, the proxy
/// and certificates that reach its API. (`TMPDIR` is not: it may name a
/// hidden place; the agent has a private `/tmp`.)
const BASE_ENV: [&str; 32] = [
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "FORCE_COLOR",
    "COLUMNS",
    "LINES",
    // Claude Code's own word that it runs in a box (needed as root).
    "IS_SANDBOX",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    // A parallel run's worker: what the agent is told of its unit
    // (docs/workers.md), set by the coordinator.
    "RALPH_WORKER",
    "RALPH_ITEM",
    "RALPH_WORKER_TASK",
    "RALPH_RUN_BRANCH",
    "RALPH_WORKER_BRANCH",
];
/// …and by prefix: the locale's parts, the XDG directories.
const BASE_PREFIXES: [&str; 2] = ["LC_", "XDG_"];

/// The agent's environment in the box, taken from ralph's (`vars`) by
/// allow-list: [`BASE_ENV`], the agent kind's own settings (`prefixes`:
/// [`AgentKind::env_prefixes`](crate::config::AgentKind::env_prefixes),
/// `ANTHROPIC_BASE_URL`), and its credentials (`pass`: `[sandbox]
/// pass_env`, or the kind's). Of the first two, nothing ralph treats as a
/// secret (a credential's name, a URL with a password, a token shape:
/// `text::secrets`) passes; and no variable holding a notification
/// channel's secret (`channels`) passes at all, whatever list names it.
/// `agent.env` and `RALPH_ITERATION` are set on top, by the caller.
pub(crate) fn passed_env(
    vars: impl IntoIterator<Item = (String, String)>,
    prefixes: &[&str],
    pass: &[String],
    channels: &[String],
) -> std::collections::BTreeMap<String, String> {
    use crate::text::secrets::{is_credential_name, is_secret_value};
    vars.into_iter()
        .filter(|(_, value)| {
            !channels
                .iter()
                .any(|c| !c.trim().is_empty() && value.contains(c.as_str()))
        })
        .filter(|(name, value)| {
            let allowed = BASE_ENV.contains(&name.as_str())
                || BASE_PREFIXES
                    .iter()
                    .chain(prefixes)
                    .any(|p| name.starts_with(p));
            pass.contains(name) || (allowed && !is_credential_name(name) && !is_secret_value(value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AgentKind;

    fn words(args: &[String]) -> String {
        args.join(" ")
    }

    #[test]
    fn the_project_is_bound_after_the_hidden_places_and_the_home_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        let root = dir.path().join("proj");
        let layout = Layout {
            root: root.clone(),
            git_dirs: vec!["/repos/main/.git".into()],
            homes: vec![home.clone()],
            program: None,
            as_root: false,
        };
        let config = SandboxConfig {
            read_write: vec!["~/.cache/pip".into(), "build-out".into()],
            ..SandboxConfig::default()
        };
        let a = bwrap_args(
            &layout,
            &config,
            &config.home_or(AgentKind::Claude.home_entries()),
        );
        let w = words(&a);
        assert!(
            w.starts_with("--ro-bind / / --dev /dev --proc /proc"),
            "{w}"
        );
        let pos = |needle: &str| w.find(needle).unwrap_or_else(|| panic!("{needle} in {w}"));
        // /tmp exists everywhere: hidden; the home too.
        let tmp = pos("--tmpfs /tmp ");
        let home_hidden = pos(&format!("--tmpfs {} ", home.display()));
        let project = pos(&format!("--bind {0} {0}", root.display()));
        assert!(tmp < project && home_hidden < project, "{w}");
        assert!(w.contains(&format!(
            "--bind-try {0}/.claude {0}/.claude",
            home.display()
        )));
        assert!(
            w.contains("--bind /repos/main/.git /repos/main/.git"),
            "{w}"
        );
        assert!(w.contains(&format!(
            "--bind-try {0}/.cache/pip {0}/.cache/pip",
            home.display()
        )));
        assert!(w.contains(&format!(
            "--bind-try {0}/build-out {0}/build-out",
            root.display()
        )));
        assert!(!w.contains(".ssh"), "{w}");
        assert!(
            !w.contains("--unshare-net") && !w.contains("--cap-drop"),
            "{w}"
        );
        assert!(w.ends_with(&format!("--die-with-parent --chdir {}", root.display())));
    }

    #[test]
    fn no_network_and_root_drop_what_they_must() {
        let layout = Layout {
            root: "/p".into(),
            git_dirs: Vec::new(),
            homes: Vec::new(),
            program: None,
            as_root: true,
        };
        let config = SandboxConfig {
            network: false,
            ..SandboxConfig::default()
        };
        let w = words(&bwrap_args(&layout, &config, &[]));
        assert!(w.contains("--unshare-net"), "{w}");
        assert!(w.contains("--cap-drop ALL"), "{w}");
    }

    /// Issue 34: the box withheld credentials by name pattern only, so
    /// `SLACK_WEBHOOK_URL`, `DATABASE_URL` with a password, `MYSQL_PWD` and
    /// `SENTRY_DSN` reached the agent. Now an allow-list: what every agent
    /// needs, its kind's settings, its credentials, the user's `pass_env`;
    /// never a notification channel's secret.
    #[test]
    fn the_box_passes_the_environment_by_allow_list() {
        let slack = "https://hooks.slack.com/services/T0/B0/abcdef0123";
        let vars = [
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/home/u"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C.UTF-8"),
            ("TERM", "xterm-256color"),
            ("TMPDIR", "/tmp/u"),
            ("ANTHROPIC_API_KEY", "sk-ant-0123456789abcdefghij"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("OPENAI_API_KEY", "sk-proj-0123456789abcdefghij"),
            ("GITHUB_TOKEN", "ghp_0123456789abcdefghijABCDEFGHIJ"),
            ("SLACK_WEBHOOK_URL", slack),
            ("RALPH_NOTIFY_URL", slack),
            ("DATABASE_URL", "postgres://u:pw@h/db"),
            ("MYSQL_PWD", "hunter2-hunter2"),
            ("SENTRY_DSN", "https://abc123@o1.ingest.sentry.io/1"),
            ("SOME_SERVICE_HOST", "db.internal"),
            ("HTTPS_PROXY", "http://user:pw@proxy:3128"),
            ("NPM_CONFIG_REGISTRY", "https://registry.example"),
            ("MY_TOOL_SETTING", "on"),
            ("RALPH_ITEM", "first"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let kind = AgentKind::Claude;
        let config = SandboxConfig::default();
        let pass = config.pass_env_or(kind.credential_env());
        let env = passed_env(vars.clone(), kind.env_prefixes(), &pass, &[slack.into()]);
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_BASE_URL",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
                "HOME",
                "LANG",
                "LC_ALL",
                "PATH",
                "RALPH_ITEM",
                "TERM",
            ]
        );
        // The user's `pass_env`: exactly their credentials, plus what they
        // name; a channel's secret never, even named.
        let mine = SandboxConfig {
            pass_env: Some(vec![
                "MY_TOOL_SETTING".into(),
                "DATABASE_URL".into(),
                "SLACK_WEBHOOK_URL".into(),
            ]),
            ..SandboxConfig::default()
        };
        let pass = mine.pass_env_or(kind.credential_env());
        let env = passed_env(vars, kind.env_prefixes(), &pass, &[slack.into()]);
        assert!(env.contains_key("MY_TOOL_SETTING") && env.contains_key("DATABASE_URL"));
        assert!(!env.contains_key("SLACK_WEBHOOK_URL") && !env.contains_key("ANTHROPIC_API_KEY"));
        assert!(env.contains_key("ANTHROPIC_BASE_URL"), "{env:?}");
    }

    /// Each kind's box holds its own CLI's home entries and credentials
    /// only, unless `[sandbox] home` / `pass_env` say otherwise.
    #[test]
    fn each_kind_gets_its_own_home_entries_and_credentials() {
        let layout = Layout {
            root: "/p".into(),
            git_dirs: Vec::new(),
            homes: vec!["/h".into()],
            program: None,
            as_root: false,
        };
        let cases: [(AgentKind, &str, &str, &str); 4] = [
            (
                AgentKind::Claude,
                "/h/.claude.json",
                "/h/.codex",
                "ANTHROPIC_API_KEY",
            ),
            (
                AgentKind::Codex,
                "/h/.codex",
                "/h/.claude",
                "OPENAI_API_KEY",
            ),
            (
                AgentKind::Opencode,
                "/h/.local/share/opencode",
                "/h/.gemini",
                "OPENROUTER_API_KEY",
            ),
            (
                AgentKind::Gemini,
                "/h/.gemini",
                "/h/.codex",
                "GEMINI_API_KEY",
            ),
        ];
        let config = SandboxConfig::default();
        for (kind, shared, not_shared, key) in cases {
            let home = config.home_or(kind.home_entries());
            let w = words(&bwrap_args(&layout, &config, &home));
            assert!(
                w.contains(&format!("--bind-try {shared} {shared}")),
                "{kind}: {w}"
            );
            assert!(!w.contains(not_shared), "{kind}: {w}");
            let pass = config.pass_env_or(kind.credential_env());
            assert!(pass.iter().any(|k| k == key), "{kind}");
        }
        // Gemini's key is withheld from Claude, passed to Gemini.
        let claude = config.pass_env_or(AgentKind::Claude.credential_env());
        assert!(!claude.contains(&"GEMINI_API_KEY".into()));
        // Set, the lists are exactly the user's.
        let mine = SandboxConfig {
            home: Some(vec![".gitconfig".into()]),
            pass_env: Some(Vec::new()),
            ..SandboxConfig::default()
        };
        let home = mine.home_or(AgentKind::Gemini.home_entries());
        let w = words(&bwrap_args(&layout, &mine, &home));
        assert!(
            w.contains("/h/.gitconfig") && !w.contains("/h/.gemini"),
            "{w}"
        );
        assert!(
            mine.pass_env_or(AgentKind::Gemini.credential_env())
                .is_empty()
        );
    }

    #[test]
    fn a_node_clis_whole_node_modules_is_shown_else_the_programs_directory() {
        let cases: [(&str, &str); 3] = [
            (
                "/h/.npm/lib/node_modules/@google/gemini-cli/dist/index.js",
                "/h/.npm/lib/node_modules",
            ),
            (
                "/t/node_modules/a/node_modules/b/bin/cli.js",
                "/t/node_modules",
            ),
            ("/opt/claude/bin/claude", "/opt/claude/bin"),
        ];
        for (program, shown) in cases {
            assert_eq!(
                package_dir(Path::new(program)),
                Some(PathBuf::from(shown)),
                "{program}"
            );
        }
    }
}
