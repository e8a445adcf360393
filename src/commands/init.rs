//! `ralph init`: a commented `ralph.toml` with every key at its default,
//! the embedded templates in `prompts/` for editing, a starter plan and
//! `.ralph/.gitignore`. Never overwrites a file without `--force`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use std::borrow::Cow;

use super::Report;
use crate::agent::AgentKind;
use crate::config::FILE_NAME;
use crate::error::{Error, Result};
use crate::state::{self, Layout};

/// The commented `ralph.toml`; parses to `Config::default()`.
const CONFIG_TEMPLATE: &str = include_str!("ralph.toml");
/// The starter plan.
const PLAN_TEMPLATE: &str = include_str!("fix_plan.md");

/// What `ralph init` did to each file (paths relative to the project root).
#[derive(Debug, Default, Serialize)]
pub struct InitReport {
    pub created: Vec<String>,
    /// Existing files replaced (only with `--force`).
    pub overwritten: Vec<String>,
    /// Existing files that already had the content `init` would write.
    pub unchanged: Vec<String>,
    /// What stands in the way of a run (a prompt file ralph did not write).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
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
        for w in &self.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        out.push_str(
            "next: write the plan in fix_plan.md, then check the setup with `ralph doctor` and `ralph run --dry-run`\n",
        );
        out
    }
}

/// Every file `ralph init` writes, relative to the root, with its content.
fn scaffold(kind: AgentKind) -> Vec<(PathBuf, Cow<'static, str>)> {
    let mut files = vec![(PathBuf::from(FILE_NAME), config_template(kind))];
    for (name, text) in crate::prompt::EMBEDDED {
        files.push((Path::new("prompts").join(name), text.into()));
    }
    files.push((PathBuf::from("fix_plan.md"), PLAN_TEMPLATE.into()));
    files.push((
        Path::new(".ralph").join(".gitignore"),
        state::GITIGNORE.into(),
    ));
    files
}

/// The commented `ralph.toml` for an agent kind: the defaults with its `kind`.
fn config_template(kind: AgentKind) -> Cow<'static, str> {
    let default = format!("\nkind = \"{}\"\n", AgentKind::default().name());
    if kind == AgentKind::default() {
        return CONFIG_TEMPLATE.into();
    }
    let chosen = format!("\nkind = \"{}\"\n", kind.name());
    CONFIG_TEMPLATE.replacen(&default, &chosen, 1).into()
}

/// `ralph init [--agent KIND] [--force] [--json]`.
pub fn init(root: &Path, kind: AgentKind, force: bool, json: bool) -> Result<i32> {
    let mut report = InitReport::default();
    let mut writes = Vec::new();
    for (rel, text) in scaffold(kind) {
        let path = root.join(&rel);
        let name = rel.display().to_string();
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
        .with_hint("`ralph init --force` overwrites them; move away what you want to keep first"));
    }
    std::fs::create_dir_all(root.join("prompts"))
        .map_err(|e| Error::io("cannot create", root.join("prompts"), e))?;
    Layout::new(root).ensure()?;
    for (path, text) in writes {
        std::fs::write(&path, text.as_bytes()).map_err(|e| Error::io("cannot write", &path, e))?;
    }
    report.warnings = crate::state::ownership::setup_warnings(
        root,
        &crate::config::Config::load(root)?.prompt_file,
    );
    super::print(&report.render(json))?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

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
            let text = config_template(kind);
            let c = Config::parse(&text, Path::new(FILE_NAME)).unwrap();
            assert_eq!(c.agent.kind, kind);
            let mut expected = Config::default();
            expected.agent.kind = kind;
            assert_eq!(c, expected, "only the kind differs");
        }
    }

    #[test]
    fn config_template_names_every_key() {
        let mut full = Config::default();
        full.agent.model = Some("m".into());
        full.agent.command = Some("c".into());
        full.loop_.max_duration = Some(crate::config::Span::secs(1));
        full.loop_.max_cost_usd = Some(1.0);
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
