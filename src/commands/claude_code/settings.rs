//! The project's `.claude/settings.json`: adding ralph's status line and
//! its `PreCompact`/`SessionStart` hooks to what is there, and telling
//! whether they are installed. The file is edited as a concrete syntax tree
//! (`jsonc-parser`): other keys, their order, the author's formatting and
//! other hooks stay exactly as written; an existing status line is never
//! replaced.

use jsonc_parser::ParseOptions;
use jsonc_parser::cst::{CstInputValue, CstObject, CstObjectProp, CstRootNode};

/// The file, relative to the project root.
pub(crate) const PATH: &str = ".claude/settings.json";

/// One thing ralph installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    StatusLine,
    PreCompact,
    SessionStart,
}

impl Part {
    pub(crate) const ALL: [Part; 3] = [Part::StatusLine, Part::PreCompact, Part::SessionStart];

    /// ralph's arguments for it.
    fn args(self) -> &'static [&'static str] {
        match self {
            Part::StatusLine => &["statusline"],
            Part::PreCompact => &["hook", "pre-compact"],
            Part::SessionStart => &["hook", "session-start"],
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Part::StatusLine => "statusLine",
            Part::PreCompact => "hooks.PreCompact",
            Part::SessionStart => "hooks.SessionStart",
        }
    }

    /// The command line, with `program` quoted for the shell.
    pub(crate) fn command(self, program: &str) -> String {
        let program = shlex::try_quote(program).map_or_else(|_| program.to_string(), Into::into);
        format!("{program} {}", self.args().join(" "))
    }

    /// Whether `command` runs this part of ralph (any path to a `ralph`).
    fn is(self, command: &str) -> bool {
        let Some(words) = shlex::split(command) else {
            return false;
        };
        let Some((program, args)) = words.split_first() else {
            return false;
        };
        std::path::Path::new(program)
            .file_name()
            .is_some_and(|n| n == "ralph")
            && args == self.args()
    }

    /// The hook event it belongs to, for the hooks.
    fn event(self) -> Option<&'static str> {
        match self {
            Part::StatusLine => None,
            Part::PreCompact => Some("PreCompact"),
            Part::SessionStart => Some("SessionStart"),
        }
    }

    /// What is added to settings: the status line object, or a hook group.
    fn entry(self, program: &str) -> CstInputValue {
        let command = string(&self.command(program));
        let hook = |timeout: u32| {
            object(vec![
                ("type", string("command")),
                ("command", command.clone()),
                ("timeout", CstInputValue::Number(timeout.to_string())),
            ])
        };
        match self {
            Part::StatusLine => object(vec![
                ("type", string("command")),
                ("command", command.clone()),
                ("padding", CstInputValue::Number("0".into())),
            ]),
            // A checkpoint commits the tree: give it time on a big repository.
            Part::PreCompact => object(vec![("hooks", CstInputValue::Array(vec![hook(120)]))]),
            // Not `clear`: its point is a clean slate.
            Part::SessionStart => object(vec![
                ("matcher", string("startup|resume|compact")),
                ("hooks", CstInputValue::Array(vec![hook(10)])),
            ]),
        }
    }
}

fn object(pairs: Vec<(&str, CstInputValue)>) -> CstInputValue {
    CstInputValue::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn string(s: &str) -> CstInputValue {
    CstInputValue::String(s.to_string())
}

/// The string value of a property, if it is one.
fn string_of(prop: Option<CstObjectProp>) -> Option<String> {
    prop?.value()?.as_string_lit()?.decoded_value().ok()
}

/// Where a part stands in a settings file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    Installed,
    Missing,
    /// The status line runs something else (its command).
    Other(String),
}

/// Where `part` stands in the settings object.
fn state(settings: &CstObject, part: Part) -> State {
    let Some(event) = part.event() else {
        return match settings.get("statusLine") {
            None => State::Missing,
            Some(line) => {
                let command = string_of(line.object_value().and_then(|o| o.get("command")))
                    .unwrap_or_default();
                if part.is(&command) {
                    State::Installed
                } else {
                    State::Other(command)
                }
            }
        };
    };
    let groups = settings
        .object_value("hooks")
        .and_then(|h| h.array_value(event))
        .map(|a| a.elements())
        .unwrap_or_default();
    let installed = groups
        .iter()
        .filter_map(|g| g.as_object()?.array_value("hooks"))
        .flat_map(|hooks| hooks.elements())
        .filter_map(|h| string_of(h.as_object()?.get("command")))
        .any(|c| part.is(&c));
    if installed {
        State::Installed
    } else {
        State::Missing
    }
}

/// What a merge did.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Merge {
    /// The new text of the file; `None` when nothing changes.
    pub(crate) text: Option<String>,
    pub(crate) added: Vec<&'static str>,
    pub(crate) present: Vec<&'static str>,
    /// Parts left out, and why.
    pub(crate) left: Vec<String>,
}

/// UTF-8's byte-order mark.
const BOM: &str = "\u{feff}";

/// The settings text as a tree whose root is an object (`{}` for no text).
fn parse(text: Option<&str>) -> Result<(CstRootNode, CstObject), String> {
    // Editors on Windows save JSON with a byte-order mark; Claude Code reads it.
    let text = text.map(|t| t.strip_prefix(BOM).unwrap_or(t));
    let text = text.filter(|t| !t.trim().is_empty()).unwrap_or("{}\n");
    let root = CstRootNode::parse(text, &ParseOptions::default())
        .map_err(|e| format!("it is not valid JSON: {e}"))?;
    let settings = root.object_value().ok_or("it is not a JSON object")?;
    Ok((root, settings))
}

/// Add what is missing of ralph's parts to the settings text (`None`: no file).
pub(crate) fn merge(existing: Option<&str>, program: &str) -> Result<Merge, String> {
    let (root, settings) = parse(existing)?;
    let mut m = Merge::default();
    for part in Part::ALL {
        match state(&settings, part) {
            State::Installed => m.present.push(part.name()),
            State::Other(command) => m.left.push(format!(
                "{} already runs `{command}`: left as is (set its command to `{}` to use ralph's)",
                part.name(),
                part.command(program)
            )),
            State::Missing => {
                add(&settings, part, program)?;
                m.added.push(part.name());
            }
        }
    }
    if !m.added.is_empty() {
        // The file keeps its byte-order mark, as it keeps its formatting.
        let bom = existing.filter(|t| t.starts_with(BOM)).map_or("", |_| BOM);
        let mut text = format!("{bom}{root}");
        if !text.ends_with('\n') {
            text.push('\n');
        }
        m.text = Some(text);
    }
    Ok(m)
}

fn add(settings: &CstObject, part: Part, program: &str) -> Result<(), String> {
    let entry = part.entry(program);
    let Some(event) = part.event() else {
        settings.append("statusLine", entry);
        return Ok(());
    };
    let hooks = settings
        .object_value_or_create("hooks")
        .ok_or("its `hooks` is not an object")?;
    hooks
        .array_value_or_create(event)
        .ok_or_else(|| format!("its `hooks.{event}` is not an array"))?
        .append(entry);
    Ok(())
}

/// A unified diff of the change, for people.
pub(crate) fn diff(old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{PATH}"), &format!("b/{PATH}"))
        .to_string()
}

/// What `ralph doctor` says about the project's Claude Code settings:
/// `None` when the project has no `.claude/` (Claude Code's project
/// settings are not in use, and ralph's parts are optional); else a
/// sentence, and a fix when something is missing.
pub(crate) fn doctor(root: &std::path::Path) -> Option<(String, Option<String>)> {
    if !root.join(".claude").is_dir() {
        return None;
    }
    let fix = Some("`ralph init --claude` adds what is missing (and shows the diff)".to_string());
    let Ok(text) = std::fs::read_to_string(root.join(PATH)) else {
        return Some((
            format!("no {PATH}: ralph's status line and hooks are not installed"),
            fix,
        ));
    };
    let settings = match parse(Some(&text)) {
        Ok((_, settings)) => settings,
        Err(why) => return Some((format!("{PATH}: {why}"), Some(format!("fix {PATH}")))),
    };
    let (mut installed, mut missing) = (Vec::new(), Vec::new());
    for part in Part::ALL {
        match state(&settings, part) {
            State::Installed => installed.push(part.name().to_string()),
            State::Missing => missing.push(part.name().to_string()),
            State::Other(c) => missing.push(format!("{} (runs `{c}`)", part.name())),
        }
    }
    if missing.is_empty() {
        return Some((
            format!("{PATH}: ralph's status line, PreCompact and SessionStart hooks are installed"),
            None,
        ));
    }
    let installed = if installed.is_empty() {
        String::new()
    } else {
        format!("; installed: {}", installed.join(", "))
    };
    Some((
        format!("{PATH}: not installed: {}{installed}", missing.join(", ")),
        fix,
    ))
}

/// What allows a headless (`-p`) agent some tools, which it cannot ask
/// for: its flags in `agent.args`, or the project's Claude Code settings
/// (`permissions.allow`, or a `defaultMode` that accepts edits). `None`:
/// every tool call its defaults do not allow is refused (`ralph doctor`).
pub(crate) fn allowed_tools(root: &std::path::Path, args: &[String]) -> Option<String> {
    const FLAGS: [&str; 3] = ["--allowedTools", "--allowed-tools", "--permission-mode"];
    if let Some(flag) = args
        .iter()
        .find(|a| FLAGS.iter().any(|f| a.split('=').next() == Some(f)))
    {
        return Some(format!("{flag} in agent.args"));
    }
    [PATH, ".claude/settings.local.json"]
        .into_iter()
        .find(|file| {
            let Ok(text) = std::fs::read_to_string(root.join(file)) else {
                return false;
            };
            let text = text.strip_prefix(BOM).unwrap_or(&text);
            let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
                return false;
            };
            let p = &v["permissions"];
            p["allow"].as_array().is_some_and(|a| !a.is_empty())
                || matches!(
                    p["defaultMode"].as_str(),
                    Some("acceptEdits" | "bypassPermissions")
                )
        })
        .map(|file| format!("{file} (permissions)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ralph_commands_are_recognised_by_any_path() {
        assert!(Part::StatusLine.is("ralph statusline"));
        assert!(Part::StatusLine.is("/opt/bin/ralph statusline"));
        assert!(Part::PreCompact.is("'/a b/ralph' hook pre-compact"));
        assert!(!Part::PreCompact.is("ralph hook session-start"));
        assert!(!Part::StatusLine.is("ralphy statusline"));
        assert!(!Part::StatusLine.is("echo ralph statusline"));
    }

    #[test]
    fn a_new_file_gets_all_three_and_a_second_merge_changes_nothing() {
        let m = merge(None, "ralph").unwrap();
        assert_eq!(
            m.added,
            ["statusLine", "hooks.PreCompact", "hooks.SessionStart"]
        );
        let text = m.text.unwrap();
        let again = merge(Some(&text), "ralph").unwrap();
        assert_eq!(again.text, None);
        assert_eq!(again.present.len(), 3);
    }

    #[test]
    fn another_status_line_is_left_alone() {
        let old = r#"{"statusLine": {"type": "command", "command": "~/bin/line.sh"}}"#;
        let m = merge(Some(old), "ralph").unwrap();
        assert_eq!(m.added, ["hooks.PreCompact", "hooks.SessionStart"]);
        assert!(m.left[0].contains("~/bin/line.sh"), "{:?}", m.left);
        assert!(m.text.unwrap().contains("~/bin/line.sh"));
    }

    #[test]
    fn malformed_settings_are_refused() {
        assert!(merge(Some("{nope"), "ralph").is_err());
        assert!(merge(Some("[]"), "ralph").is_err());
        assert!(merge(Some(r#"{"hooks": []}"#), "ralph").is_err());
        assert!(merge(Some(r#"{"hooks": {"PreCompact": {}}}"#), "ralph").is_err());
    }

    /// Claude Code writes its settings as `JSON.stringify(v, null, 2)`,
    /// the same form: the diff of a merge is only what it adds.
    #[test]
    fn a_file_in_claude_codes_own_form_changes_only_where_ralph_adds() {
        let old = "{\n  \"model\": \"opus\",\n  \"hooks\": {\n    \"Stop\": [\n      {\n        \"hooks\": [\n          {\n            \"type\": \"command\",\n            \"command\": \"say done\"\n          }\n        ]\n      }\n    ]\n  },\n  \"env\": {}\n}\n";
        let new = merge(Some(old), "ralph").unwrap().text.unwrap();
        let d = diff(old, &new);
        let changed = |sign: char| -> Vec<&str> {
            d.lines()
                .filter(|l| l.starts_with(sign) && !l.starts_with("---") && !l.starts_with("+++"))
                .map(|l| &l[1..])
                .collect()
        };
        let (removed, added) = (changed('-'), changed('+'));
        // A removed line only comes back with a comma after it.
        assert!(!removed.is_empty() && removed.len() <= 2, "{d}");
        for line in removed {
            assert!(added.contains(&format!("{line},").as_str()), "{line}\n{d}");
        }
    }

    #[test]
    fn comments_and_packed_values_keep_their_text() {
        let old = "{\n  // team settings\n  \"env\": {\"A\": \"1\"},\n  \"hooks\": {\"Stop\": [{\"hooks\": [{\"type\": \"command\", \"command\": \"say done\"}]}]}\n}\n";
        let new = merge(Some(old), "ralph").unwrap().text.unwrap();
        for kept in [
            "  // team settings",
            "  \"env\": {\"A\": \"1\"},",
            "\"command\": \"say done\"}]}]",
        ] {
            assert!(new.contains(kept), "{kept} in\n{new}");
        }
        assert_eq!(merge(Some(&new), "ralph").unwrap().text, None);
    }

    #[test]
    fn the_file_keeps_its_indentation() {
        let old = "{\n    \"model\": \"opus\"\n}\n";
        let text = merge(Some(old), "ralph").unwrap().text.unwrap();
        assert!(
            text.starts_with("{\n    \"model\": \"opus\",\n    \"statusLine\""),
            "{text}"
        );
    }
}
