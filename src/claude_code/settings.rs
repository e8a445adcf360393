//! The project's `.claude/settings.json`: adding ralph's status line and
//! its `PreCompact`/`SessionStart` hooks to what is there (keys, order and
//! other hooks kept; an existing status line is never replaced), and
//! telling whether they are installed.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// The file, relative to the project root.
pub const PATH: &str = ".claude/settings.json";

/// A JSON value that keeps object keys in the order they were written, so
/// that a merge changes only what it adds.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    fn items(&self) -> &[Json] {
        match self {
            Json::Array(items) => items,
            _ => &[],
        }
    }

    /// The value at `key` of an object, inserted (last) as `default` when absent.
    fn entry(&mut self, key: &str, default: Json) -> Option<&mut Json> {
        let Json::Object(entries) = self else {
            return None;
        };
        let i = match entries.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                entries.push((key.to_string(), default));
                entries.len() - 1
            }
        };
        Some(&mut entries[i].1)
    }
}

/// `Json::Object` from literal pairs.
fn object(pairs: Vec<(&str, Json)>) -> Json {
    Json::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn string(s: &str) -> Json {
    Json::String(s.to_string())
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Json;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("JSON")
            }
            fn visit_unit<E>(self) -> Result<Json, E> {
                Ok(Json::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
                Ok(Json::Bool(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
                Ok(Json::Number(v.into()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
                Ok(Json::Number(v.into()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Json, E> {
                serde_json::Number::from_f64(v)
                    .map(Json::Number)
                    .ok_or_else(|| E::custom("not a finite number"))
            }
            fn visit_str<E>(self, v: &str) -> Result<Json, E> {
                Ok(Json::String(v.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Json::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
                let mut entries: Vec<(String, Json)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Json>()? {
                    // A repeated key: the last one wins, as in serde_json.
                    entries.retain(|(old, _)| *old != k);
                    entries.push((k, v));
                }
                Ok(Json::Object(entries))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => s.serialize_unit(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::Number(n) => n.serialize(s),
            Json::String(v) => s.serialize_str(v),
            Json::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Object(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

/// One thing ralph installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    StatusLine,
    PreCompact,
    SessionStart,
}

impl Part {
    pub const ALL: [Part; 3] = [Part::StatusLine, Part::PreCompact, Part::SessionStart];

    /// ralph's arguments for it.
    fn args(self) -> &'static [&'static str] {
        match self {
            Part::StatusLine => &["statusline"],
            Part::PreCompact => &["hook", "pre-compact"],
            Part::SessionStart => &["hook", "session-start"],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Part::StatusLine => "statusLine",
            Part::PreCompact => "hooks.PreCompact",
            Part::SessionStart => "hooks.SessionStart",
        }
    }

    /// The command line, with `program` quoted for the shell.
    pub fn command(self, program: &str) -> String {
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
    fn entry(self, program: &str) -> Json {
        let command = string(&self.command(program));
        match self {
            Part::StatusLine => object(vec![
                ("type", string("command")),
                ("command", command),
                ("padding", Json::Number(0.into())),
            ]),
            // A checkpoint commits the tree: give it time on a big repository.
            Part::PreCompact => object(vec![(
                "hooks",
                Json::Array(vec![object(vec![
                    ("type", string("command")),
                    ("command", command),
                    ("timeout", Json::Number(120.into())),
                ])]),
            )]),
            // Not `clear`: its point is a clean slate.
            Part::SessionStart => object(vec![
                ("matcher", string("startup|resume|compact")),
                (
                    "hooks",
                    Json::Array(vec![object(vec![
                        ("type", string("command")),
                        ("command", command),
                        ("timeout", Json::Number(10.into())),
                    ])]),
                ),
            ]),
        }
    }
}

/// Where a part stands in a settings file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Installed,
    Missing,
    /// The status line runs something else (its command).
    Other(String),
}

/// Where `part` stands in `settings`.
pub fn state(settings: &Json, part: Part) -> State {
    match part.event() {
        None => match settings.get("statusLine") {
            None => State::Missing,
            Some(line) => {
                let command = line.get("command").and_then(Json::str).unwrap_or("");
                if part.is(command) {
                    State::Installed
                } else {
                    State::Other(command.to_string())
                }
            }
        },
        Some(event) => {
            let groups = settings
                .get("hooks")
                .and_then(|h| h.get(event))
                .map_or(&[][..], Json::items);
            let found = groups
                .iter()
                .flat_map(|g| g.get("hooks").map_or(&[][..], Json::items))
                .filter_map(|h| h.get("command").and_then(Json::str))
                .any(|c| part.is(c));
            if found {
                State::Installed
            } else {
                State::Missing
            }
        }
    }
}

/// What a merge did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Merge {
    /// The new text of the file; `None` when nothing changes.
    pub text: Option<String>,
    pub added: Vec<&'static str>,
    pub present: Vec<&'static str>,
    /// Parts left out, and why.
    pub left: Vec<String>,
}

/// Add what is missing of ralph's parts to the settings text (`None`: no file).
pub fn merge(existing: Option<&str>, program: &str) -> Result<Merge, String> {
    let mut settings: Json = match existing {
        Some(text) if !text.trim().is_empty() => {
            serde_json::from_str(text).map_err(|e| format!("it is not valid JSON: {e}"))?
        }
        _ => Json::Object(Vec::new()),
    };
    if !matches!(settings, Json::Object(_)) {
        return Err("it is not a JSON object".into());
    }
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
                add(&mut settings, part, program)?;
                m.added.push(part.name());
            }
        }
    }
    if !m.added.is_empty() {
        m.text = Some(pretty(&settings, existing.map_or("", |t| t)));
    }
    Ok(m)
}

fn add(settings: &mut Json, part: Part, program: &str) -> Result<(), String> {
    let entry = part.entry(program);
    let Some(event) = part.event() else {
        settings.entry("statusLine", entry);
        return Ok(());
    };
    let hooks = settings
        .entry("hooks", Json::Object(Vec::new()))
        .filter(|h| matches!(h, Json::Object(_)))
        .ok_or("its `hooks` is not an object")?;
    match hooks.entry(event, Json::Array(Vec::new())) {
        Some(Json::Array(groups)) => {
            groups.push(entry);
            Ok(())
        }
        _ => Err(format!("its `hooks.{event}` is not an array")),
    }
}

/// Pretty JSON with the indentation the file already uses (default two spaces).
fn pretty(settings: &Json, old: &str) -> String {
    let indent: String = old
        .lines()
        .skip(1)
        .map(|l| &l[..l.len() - l.trim_start().len()])
        .find(|w| !w.is_empty())
        .unwrap_or("  ")
        .to_string();
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    settings.serialize(&mut ser).expect("JSON serializes");
    let mut text = String::from_utf8(out).expect("JSON is UTF-8");
    text.push('\n');
    text
}

/// A unified diff of the change, for people.
pub fn diff(old: &str, new: &str) -> String {
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
pub fn doctor(root: &std::path::Path) -> Option<(String, Option<String>)> {
    if !root.join(".claude").is_dir() {
        return None;
    }
    let fix = Some("`ralph init --claude` adds what is missing (and shows the diff)".to_string());
    let text = match std::fs::read_to_string(root.join(PATH)) {
        Ok(t) => t,
        Err(_) => {
            return Some((
                format!("no {PATH}: ralph's status line and hooks are not installed"),
                fix,
            ));
        }
    };
    let settings: Json = match serde_json::from_str(&text) {
        Ok(s) => s,
        Err(e) => {
            return Some((
                format!("{PATH} is not valid JSON: {e}"),
                Some(format!("fix {PATH}")),
            ));
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_unknown_keys_survive_a_round_trip() {
        let text = "{\n  \"z\": 1,\n  \"a\": {\"y\": [true, null, 1.5], \"b\": \"x\"}\n}";
        let v: Json = serde_json::from_str(text).unwrap();
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"z":1,"a":{"y":[true,null,1.5],"b":"x"}}"#
        );
    }

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
    fn the_file_keeps_its_indentation() {
        let old = "{\n    \"model\": \"opus\"\n}\n";
        let text = merge(Some(old), "ralph").unwrap().text.unwrap();
        assert!(
            text.starts_with("{\n    \"model\": \"opus\",\n    \"statusLine\""),
            "{text}"
        );
    }
}
