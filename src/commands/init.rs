//! `ralph init`: a commented `ralph.toml` with every key at its default,
//! the embedded templates in `prompts/` for editing, a starter plan and
//! `.ralph/.gitignore`. Never overwrites a file without `--force`, and
//! never the plan: a project that has one (a team replacing another Ralph
//! loop) is adopted, its plan and hand-written `PROMPT.md` kept.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::Report;
use crate::agent::AgentKind;
use crate::config::FILE_NAME;
use crate::error::{Error, Result};
use crate::formats::{self, Layout};

/// The commented `ralph.toml`; parses to `Config::default()`.
const CONFIG_TEMPLATE: &str = include_str!("ralph.toml");
/// The starter plan.
const PLAN_TEMPLATE: &str = include_str!("fix_plan.md");
/// Where it goes; a plan already there is the project's (another loop's,
/// adopted), never written over.
const PLAN: &str = "fix_plan.md";
/// The prompt file a new config names when `PROMPT.md` is the project's own.
const ADOPTED_PROMPT_FILE: &str = ".ralph-prompt.md";

/// What `ralph init` did to each file (paths relative to the project root).
#[derive(Debug, Default, Serialize)]
pub(crate) struct InitReport {
    pub(crate) created: Vec<String>,
    /// Existing files replaced (only with `--force`).
    pub(crate) overwritten: Vec<String>,
    /// Existing files that already had the content `init` would write.
    pub(crate) unchanged: Vec<String>,
    /// The project's own files `init` adopts and never writes over, even
    /// with `--force` (a plan, a hand-written prompt), each with a note.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) kept: Vec<Kept>,
    /// What stands in the way of a run (a prompt file ralph did not write).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) warnings: Vec<String>,
    /// The sandbox on offer here (`[agent] sandbox`, docs/sandbox.md).
    pub(crate) sandbox: String,
    /// The `[verify] commands` proposed for the project found.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) verify: Vec<String>,
}

/// A file of the project's that `init` kept.
#[derive(Debug, Serialize)]
pub(crate) struct Kept {
    pub(crate) path: String,
    pub(crate) note: String,
}

impl Report for InitReport {
    fn human(&self) -> String {
        let mut out = String::new();
        for (verb, paths) in [
            ("created", &self.created),
            ("overwrote", &self.overwritten),
            ("unchanged", &self.unchanged),
        ] {
            for p in paths {
                let _ = writeln!(out, "{verb:<9} {p}");
            }
        }
        for k in &self.kept {
            let _ = writeln!(out, "{:<9} {}: {}", "kept", k.path, k.note);
        }
        for w in &self.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        let _ = writeln!(out, "sandbox: {}", self.sandbox);
        if !self.verify.is_empty() {
            let _ = writeln!(
                out,
                "proposed [verify] commands (ralph runs them before it accepts a completion): {}",
                self.verify.join(", ")
            );
        }
        out.push_str(if self.kept.iter().any(|k| k.path == PLAN) {
            "next: check the setup with `ralph doctor` and `ralph run --dry-run`\n"
        } else {
            "next: write the plan in fix_plan.md, then check the setup with `ralph doctor` and `ralph run --dry-run`\n"
        });
        out
    }
}

/// Every file `ralph init` writes, relative to the root, with its content:
/// the config proposes `[verify] commands` for the project it finds.
fn scaffold(root: &Path, kind: AgentKind) -> Vec<(PathBuf, Cow<'static, str>)> {
    let mut files = vec![(PathBuf::from(FILE_NAME), config_template(root, kind))];
    for (name, text) in crate::prompt::EMBEDDED {
        files.push((Path::new("prompts").join(name), text.into()));
    }
    files.push((PathBuf::from(PLAN), PLAN_TEMPLATE.into()));
    files.push((
        Path::new(".ralph").join(".gitignore"),
        formats::GITIGNORE.into(),
    ));
    files
}

/// The checks of the project kinds `root` shows (Cargo, npm with a test
/// script, pytest, Go), in that order.
pub(crate) fn verify_commands(root: &Path) -> Vec<String> {
    let has = |name: &str| root.join(name).exists();
    let read = |name: &str| std::fs::read_to_string(root.join(name)).unwrap_or_default();
    let mut out = Vec::new();
    if has("Cargo.toml") {
        out.push("cargo test".to_string());
    }
    let npm_test = serde_json::from_str::<serde_json::Value>(&read("package.json"))
        .ok()
        .and_then(|p| p["scripts"]["test"].as_str().map(str::to_string))
        // npm's placeholder script fails by design: not a check.
        .is_some_and(|t| !t.contains("no test specified"));
    if npm_test {
        out.push("npm test".to_string());
    }
    let pytest = has("pytest.ini")
        || has("conftest.py")
        || read("pyproject.toml").contains("[tool.pytest")
        || read("setup.cfg").contains("[tool:pytest]")
        || read("tox.ini").contains("[pytest]");
    if pytest {
        out.push("python -m pytest -q".to_string());
    }
    if has("go.mod") {
        out.push("go test ./...".to_string());
    }
    out
}

/// The commented `ralph.toml` for an agent kind: the defaults with its
/// `kind`, and the checks proposed for the project found.
fn config_template(root: &Path, kind: AgentKind) -> Cow<'static, str> {
    let mut text: Cow<'static, str> = CONFIG_TEMPLATE.into();
    if kind != AgentKind::default() {
        let default = format!("\nkind = \"{}\"\n", AgentKind::default().name());
        let chosen = format!("\nkind = \"{}\"\n", kind.name());
        text = text.replacen(&default, &chosen, 1).into();
    }
    if kind == AgentKind::Codex {
        // Codex's default sandbox is read-only: every command would fail.
        let args: Vec<String> = crate::agent::codex::INIT_ARGS
            .iter()
            .map(|a| format!("'{a}'"))
            .collect();
        let line = format!(
            "args = [{}]  # Codex runs headless: never ask, write the project (docs/agents.md)",
            args.join(", ")
        );
        text = text
            .replacen("\nargs = []\n", &format!("\n{line}\n"), 1)
            .into();
    }
    let proposed = verify_commands(root);
    if !proposed.is_empty() {
        let list: Vec<String> = proposed.iter().map(|c| format!("{c:?}")).collect();
        let line = format!(
            "commands = [{}]  # proposed by `ralph init`",
            list.join(", ")
        );
        text = text
            .replacen("\ncommands = []\n", &format!("\n{line}\n"), 1)
            .into();
    }
    text
}

/// `ralph init [--agent KIND] [--force] [--json]`.
pub(crate) fn init(root: &Path, kind: AgentKind, force: bool, json: bool) -> Result<i32> {
    let mut report = InitReport {
        verify: verify_commands(root),
        ..InitReport::default()
    };
    let mut writes = Vec::new();
    // A project another loop ran: its plan and its hand-written prompt stay.
    let default_prompt = crate::config::Config::default().prompt_file;
    let foreign_prompt = crate::project::ownership::prompt_owner(root, &default_prompt)
        == crate::project::ownership::PromptOwner::Foreign;
    for (rel, mut text) in scaffold(root, kind) {
        let path = root.join(&rel);
        let name = rel.display().to_string();
        if name == PLAN && path.exists() {
            report.kept.push(Kept {
                note: match crate::project::Project::at(root).plan_at(&rel) {
                    Ok(plan) => format!(
                        "your plan ({} open, {} done), adopted as it is",
                        plan.open_count(),
                        plan.done_count()
                    ),
                    Err(e) => format!("your plan, adopted as it is ({e})"),
                },
                path: name,
            });
            continue;
        }
        if name == FILE_NAME && foreign_prompt {
            let line = format!(
                "prompt_file = \"{ADOPTED_PROMPT_FILE}\"  # {} is the project's own (kept by ralph init)",
                default_prompt.display()
            );
            text = text
                .replacen(
                    &format!("prompt_file = \"{}\"", default_prompt.display()),
                    &line,
                    1,
                )
                .into();
            report.kept.push(Kept {
                path: default_prompt.display().to_string(),
                note: format!(
                    "your prompt, not written by ralph: ralph writes each iteration's prompt to {ADOPTED_PROMPT_FILE} (prompt_file) instead; to keep its instructions, put them into prompts/PROMPT.md.j2 or name the file in the plan"
                ),
            });
        }
        match std::fs::read(&path) {
            Ok(old) if old == text.as_bytes() => report.unchanged.push(name),
            Ok(_) => {
                report.overwritten.push(name);
                writes.push((path, text));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                report.created.push(name);
                writes.push((path, text));
            }
            Err(e) => return Err(Error::io("cannot read", &path, e)),
        }
    }
    if !force && !report.overwritten.is_empty() {
        return Err(Error::usage(format!(
            "ralph init would overwrite {}; nothing was written",
            report.overwritten.join(", ")
        ))
        .with_hint("`ralph init --force` overwrites them (never the plan); move away what you want to keep first"));
    }
    std::fs::create_dir_all(root.join("prompts"))
        .map_err(|e| Error::io("cannot create", root.join("prompts"), e))?;
    Layout::new(root).ensure()?;
    for (path, text) in writes {
        std::fs::write(&path, text.as_bytes()).map_err(|e| Error::io("cannot write", &path, e))?;
    }
    report.warnings = crate::project::ownership::setup_warnings(
        root,
        &crate::config::Config::load(root)?.prompt_file,
    );
    report.sandbox = match crate::agent::sandbox::probe() {
        Ok(_) => "bubblewrap works here: set `sandbox = \"bwrap\"` under [agent] in ralph.toml to keep the agent inside the project (docs/sandbox.md)".into(),
        Err((why, fix)) => format!("not available ({why}); {fix}"),
    };
    super::print(&report.render(json))?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn init_proposes_the_checks_of_the_project_it_finds() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert!(verify_commands(root).is_empty());
        let config = |root: &Path| {
            let (_, text) = scaffold(root, AgentKind::default()).swap_remove(0);
            Config::parse(&text, Path::new(FILE_NAME))
                .unwrap()
                .verify
                .commands
        };
        assert!(config(root).is_empty());
        std::fs::write(
            root.join("package.json"),
            r#"{"scripts": {"test": "echo \"Error: no test specified\" && exit 1"}}"#,
        )
        .unwrap();
        assert!(
            verify_commands(root).is_empty(),
            "npm's placeholder is no check"
        );
        std::fs::write(
            root.join("package.json"),
            r#"{"scripts": {"test": "vitest"}}"#,
        )
        .unwrap();
        std::fs::write(root.join("Cargo.toml"), "[package]\n").unwrap();
        std::fs::write(root.join("pyproject.toml"), "[tool.pytest.ini_options]\n").unwrap();
        std::fs::write(root.join("go.mod"), "module x\n").unwrap();
        let all = [
            "cargo test",
            "npm test",
            "python -m pytest -q",
            "go test ./...",
        ];
        assert_eq!(verify_commands(root), all);
        assert_eq!(config(root), all);
    }

    #[test]
    fn config_template_parses_to_the_defaults() {
        let c = Config::parse(CONFIG_TEMPLATE, Path::new(FILE_NAME)).unwrap();
        assert_eq!(c, Config::default());
    }

    /// Every key of the config, unset options included, is in the template
    /// (commented out when it has no default value).
    #[test]
    fn init_agent_writes_the_kind() {
        for kind in AgentKind::ALL {
            let text = config_template(Path::new("/nonexistent"), kind);
            let c = Config::parse(&text, Path::new(FILE_NAME)).unwrap();
            assert_eq!(c.agent.kind, kind);
            let mut expected = Config::default();
            expected.agent.kind = kind;
            if kind == AgentKind::Codex {
                let args = crate::agent::codex::INIT_ARGS.map(String::from).to_vec();
                let policy = crate::agent::codex::policy(&args, "", Path::new("/p"));
                assert_eq!(policy.sandbox, "workspace-write");
                assert_eq!(policy.approval.as_deref(), Some("never"));
                expected.agent.args = args;
            }
            assert_eq!(c, expected, "only the kind (and Codex's args) differ");
        }
    }

    #[test]
    fn config_template_names_every_key() {
        let mut full = Config::default();
        full.agent.model = Some("m".into());
        full.agent.command = Some("c".into());
        full.loop_.max_duration = Some(crate::text::Span::secs(1));
        full.loop_.max_cost_usd = Some(1.0);
        full.quota.five_hour_percent = Some(90.0);
        full.quota.weekly_percent = Some(80.0);
        let n = &mut full.notify;
        for key in [
            &mut n.webhook,
            &mut n.ntfy,
            &mut n.slack,
            &mut n.email_command,
        ] {
            *key = Some("x".into());
        }
        (n.telegram_token, n.telegram_chat) = (Some("t".into()), Some("c".into()));
        full.workers.dir = Some(".ralph/worktrees".into());
        let value = toml::Value::try_from(&full).unwrap();
        let table = value.as_table().unwrap();
        for (key, v) in table {
            let keys: Vec<String> = match v.as_table() {
                Some(section) => {
                    assert!(
                        CONFIG_TEMPLATE.contains(&format!("\n[{key}]\n")),
                        "section [{key}] missing"
                    );
                    section.keys().cloned().collect()
                }
                None => vec![key.clone()],
            };
            for k in keys {
                assert!(
                    CONFIG_TEMPLATE.contains(&format!("\n{k} = "))
                        || CONFIG_TEMPLATE.contains(&format!("\n# {k} = ")),
                    "key {k} missing"
                );
            }
        }
    }
}
