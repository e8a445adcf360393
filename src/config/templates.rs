//! Templates: the embedded defaults (`prompts/*.j2`), the user's overrides
//! in the project's `prompts/`, and rendering them with MiniJinja, strictly
//! (an undefined variable is an error with file and line).

use std::path::{Path, PathBuf};

use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

use crate::error::{Error, Result};

pub(crate) const PROMPT: &str = "PROMPT.md.j2";
pub(crate) const CHECKPOINT_REQUEST: &str = "checkpoint-request.md.j2";
pub(crate) const HANDOFF: &str = "handoff.md.j2";
pub(crate) const NUDGE: &str = "nudge.md.j2";

/// The templates compiled into ralph, as `ralph init` writes them out.
pub const EMBEDDED: [(&str, &str); 4] = [
    (PROMPT, include_str!("../../prompts/PROMPT.md.j2")),
    (
        CHECKPOINT_REQUEST,
        include_str!("../../prompts/checkpoint-request.md.j2"),
    ),
    (HANDOFF, include_str!("../../prompts/handoff.md.j2")),
    (NUDGE, include_str!("../../prompts/nudge.md.j2")),
];

/// The variables each template is rendered with (docs/commands.md).
pub(crate) const VARIABLES: [(&str, &[&str]); 3] = [
    (
        PROMPT,
        &[
            "iteration",
            "max_iterations",
            "objective",
            "plan_file",
            "plan",
            "plan_tiers",
            "promise",
            "history",
            "history_older",
            "resume",
            "decisions",
            "decisions_file",
            "shard",
            "carry_over",
            "verify",
            "items_per_session",
        ],
    ),
    (
        CHECKPOINT_REQUEST,
        &[
            "percent",
            "level",
            "tokens",
            "usable",
            "notes_path",
            "grace",
            "trigger",
            "reason",
        ],
    ),
    (
        HANDOFF,
        &[
            "front_matter",
            "title",
            "date",
            "time",
            "branch",
            "iteration",
            "trigger",
            "level",
            "percent",
            "tokens",
            "usable",
            "window",
            "commit",
            "reason",
            "last_text",
            "last_tools",
            "files_touched",
            "files_touched_more",
            "agent_notes",
            "notes_path",
            "unasked",
            "git_available",
            "will_commit",
            "left_uncommitted",
            "changes",
            "changes_more",
            "diff_stat",
            "commit_note",
            "stashed",
            "left_out",
            "plan",
            "plan_tiers",
            "plan_file",
            "reload",
        ],
    ),
];

pub struct Templates {
    env: Environment<'static>,
    /// Where each template came from and its source, for error messages.
    origins: Vec<Origin>,
}

impl Templates {
    /// Load every template, preferring `<root>/prompts/<name>`; all are
    /// parsed now so a syntax error stops the run before any agent starts.
    pub fn load(root: &Path) -> Result<Templates> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env.set_keep_trailing_newline(true);
        let mut origins = Vec::new();
        for (name, embedded) in EMBEDDED {
            let path: PathBuf = root.join("prompts").join(name);
            let (source, origin) = match std::fs::read_to_string(&path) {
                Ok(text) => (text, format!("prompts/{name}")),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    (embedded.to_string(), format!("embedded {name}"))
                }
                Err(e) => return Err(Error::io("cannot read template", &path, e)),
            };
            origins.push(Origin {
                name: name.to_string(),
                origin,
                source: source.clone(),
            });
            env.add_template_owned(name, source)
                .map_err(|e| template_error(&origins, name, &e))?;
        }
        Ok(Templates { env, origins })
    }

    /// Each of `names` uses only the variables ralph gives it
    /// ([`VARIABLES`]): an undefined one is bad input (exit 2) when the run
    /// starts, not a warning at the first checkpoint. Static, so it covers
    /// branches a first render does not take.
    pub(crate) fn check(&self, names: &[&str]) -> Result<()> {
        for (name, known) in VARIABLES.iter().filter(|(n, _)| names.contains(n)) {
            let tmpl = self
                .env
                .get_template(name)
                .map_err(|e| template_error(&self.origins, name, &e))?;
            let mut unknown: Vec<String> = tmpl
                .undeclared_variables(false)
                .into_iter()
                .filter(|v| !known.contains(&v.as_str()))
                .filter(|v| self.env.globals().all(|(g, _)| g != v))
                .collect();
            unknown.sort();
            let Some(var) = unknown.first() else { continue };
            let origin = self.origins.iter().find(|o| o.name == *name);
            let line = origin
                .and_then(|o| {
                    let word = regex::Regex::new(&format!(r"\b{}\b", regex::escape(var))).ok()?;
                    let at = word.find(&o.source)?.start();
                    Some(format!(":{}", o.source[..at].lines().count().max(1)))
                })
                .unwrap_or_default();
            let origin = origin.map_or(name.to_string(), |o| o.origin.clone());
            return Err(Error::Template {
                name: format!("{origin}{line}"),
                message: format!(
                    "undefined value in `{var}` (this template gets: {})",
                    known.join(", ")
                ),
                hint: Some(if origin.starts_with("prompts/") {
                    format!("fix the template, or delete {origin} to use the embedded default")
                } else {
                    "this is a bug in ralph's embedded template; please report it".into()
                }),
            });
        }
        Ok(())
    }

    pub(crate) fn render(&self, name: &str, ctx: impl Serialize) -> Result<String> {
        let tmpl = self
            .env
            .get_template(name)
            .map_err(|e| template_error(&self.origins, name, &e))?;
        tmpl.render(ctx)
            .map_err(|e| template_error(&self.origins, name, &e))
    }
}
/// Render a one-off template string (e.g. `git.commit_message`).
pub(crate) fn render_str(source: &str, what: &str, ctx: impl Serialize) -> Result<String> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.render_str(source, ctx).map_err(|e| Error::Template {
        name: what.to_string(),
        message: format!("{}{}", e.kind(), culprit(source, &e)),
        hint: None,
    })
}

/// A template and where it came from (`prompts/NAME` or embedded).
struct Origin {
    name: String,
    origin: String,
    source: String,
}

/// " in `nope.deeper`": the expression an error points at, since
/// minijinja's "undefined value" does not say which.
fn culprit(source: &str, e: &minijinja::Error) -> String {
    e.range()
        .and_then(|r| source.get(r))
        .map(|s| s.trim())
        .filter(|s| !s.is_empty() && s.len() <= 80 && !s.contains('\n'))
        .map_or(String::new(), |s| format!(" in `{s}`"))
}

fn template_error(origins: &[Origin], name: &str, e: &minijinja::Error) -> Error {
    let found = origins.iter().find(|o| o.name == name);
    let origin = found.map_or(name.to_string(), |o| o.origin.clone());
    let line = e.line().map_or(String::new(), |l| format!(":{l}"));
    let detail = e.detail().map_or(String::new(), |d| format!(" ({d})"));
    let culprit = found.map_or(String::new(), |o| culprit(&o.source, e));
    Error::Template {
        name: format!("{origin}{line}"),
        message: format!("{}{culprit}{detail}", e.kind()),
        hint: Some(if origin.starts_with("prompts/") {
            format!("fix the template, or delete {origin} to use the embedded default")
        } else {
            "this is a bug in ralph's embedded template; please report it".into()
        }),
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_templates_parse() {
        let dir = tempfile::tempdir().unwrap();
        Templates::load(dir.path()).unwrap();
    }

    #[test]
    fn embedded_templates_use_only_their_variables() {
        let dir = tempfile::tempdir().unwrap();
        let t = Templates::load(dir.path()).unwrap();
        t.check(&[PROMPT, CHECKPOINT_REQUEST, HANDOFF]).unwrap();
    }

    #[test]
    fn an_undefined_variable_on_any_branch_is_found_before_rendering() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("prompts")).unwrap();
        std::fs::write(
            dir.path().join("prompts").join(CHECKPOINT_REQUEST),
            "Write {{ notes_path }}.\n{% if level == \"L3\" %}\n{{ no_such_fact }}\n{% endif %}\n",
        )
        .unwrap();
        let t = Templates::load(dir.path()).unwrap();
        t.check(&[PROMPT]).unwrap();
        let e = t.check(&[PROMPT, CHECKPOINT_REQUEST]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let text = e.to_string();
        assert!(
            text.starts_with(
                "template prompts/checkpoint-request.md.j2:3: undefined value in `no_such_fact`"
            ),
            "{text}"
        );
    }

    #[test]
    fn override_with_syntax_error_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("prompts")).unwrap();
        std::fs::write(
            dir.path().join("prompts").join(PROMPT),
            "line one\n{% if %}\n",
        )
        .unwrap();
        let e = Templates::load(dir.path()).err().unwrap();
        let text = e.to_string();
        assert!(text.contains("prompts/PROMPT.md.j2:2"), "{text}");
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn undefined_variable_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("prompts")).unwrap();
        std::fs::write(
            dir.path().join("prompts").join(PROMPT),
            "ok\n\n{{ nope }}\n",
        )
        .unwrap();
        let t = Templates::load(dir.path()).unwrap();
        let e = t.render(PROMPT, minijinja::context! {}).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("prompts/PROMPT.md.j2:3"), "{text}");
        assert!(text.contains("undefined"), "{text}");
    }

    #[test]
    fn render_str_strict() {
        assert_eq!(
            render_str(
                "iter {{ i }}",
                "git.commit_message",
                minijinja::context! { i => 3 }
            )
            .unwrap(),
            "iter 3"
        );
        assert!(render_str("{{ x }}", "m", minijinja::context! {}).is_err());
    }
}
