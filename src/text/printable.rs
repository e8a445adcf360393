//! Text from the agent made safe to show on a terminal: its escape
//! sequences and control characters (clear screen, window title, OSC 52
//! clipboard writes, carriage returns that overwrite a line) removed.

use std::borrow::Cow;

/// `text` as one printable line: escape sequences removed whole, tabs and
/// line breaks turned into spaces, every other control character (C0, DEL,
/// C1) dropped.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let stripped = strip_ansi_escapes::strip_str(text);
    Cow::Owned(
        stripped
            .chars()
            .filter_map(|c| match c {
                '\t' | '\n' => Some(' '),
                c if c.is_control() => None,
                c => Some(c),
            })
            .collect(),
    )
}

/// Each line of `text` made [`printable`] (line breaks and tabs kept):
/// what every command prints to stdout goes through here
/// (`commands::print`), so no plan or agent text it quotes reaches the
/// terminal as an escape sequence.
pub(crate) fn printable_lines(text: &str) -> Cow<'_, str> {
    if !text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.split('\n')
            .map(|line| {
                line.split('\t')
                    .map(printable)
                    .collect::<Vec<_>>()
                    .join("\t")
            })
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Serialized JSON with the control characters serde_json leaves raw (DEL
/// and the C1 range, U+0080–U+009F, which a terminal may obey as CSI or OSC)
/// written as `\u00XX` escapes: the same JSON value, safe to print. Outside
/// strings valid JSON holds none, so every one found is inside a string.
pub(crate) fn printable_json(json: &str) -> Cow<'_, str> {
    if !json.chars().any(char::is_control) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        match c {
            // serde_json escapes C0 itself; a raw one here is not JSON's.
            '\n' | '\r' | '\t' => out.push(c),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Every string in `value` (keys too) made [`printable_lines`]: a JSON
/// value sent out of ralph (a webhook's `details`) carries no escape
/// sequence, even encoded (`\u001b]52;…`), for whoever shows it.
pub(crate) fn printable_value(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::String(s) => {
            if let Cow::Owned(clean) = printable_lines(s) {
                *s = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(printable_value),
        Value::Object(map) => {
            let dirty = map
                .keys()
                .any(|k| matches!(printable_lines(k), Cow::Owned(_)));
            if dirty {
                *map = std::mem::take(map)
                    .into_iter()
                    .map(|(k, v)| (printable_lines(&k).into_owned(), v))
                    .collect();
            }
            map.values_mut().for_each(printable_value);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_control_characters_are_removed() {
        let hostile = "ls\u{1b}[2J\u{1b}[H\u{1b}]0;pwned\u{7}\u{1b}]52;c;ZXZpbA==\u{7} -la\r\u{8}\u{7f}\u{9b}31m\tdone";
        let clean = printable(hostile);
        assert!(!clean.chars().any(char::is_control), "{clean:?}");
        assert!(
            !clean.contains("52;"),
            "the OSC payload goes too: {clean:?}"
        );
        assert!(clean.starts_with("ls") && clean.contains("-la") && clean.ends_with("done"));
        assert!(matches!(printable("Write src/é.rs"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_json_values_strings_and_keys_are_made_printable() {
        let mut v = serde_json::json!({
            "item": "fix \u{1b}]52;c;ZXZpbA==\u{7}parser\u{9b}31m",
            "list": ["a\u{1b}[2Jb", 3],
            "k\u{1b}[31m": {"deep": "x\ny\r"},
        });
        printable_value(&mut v);
        let text = v.to_string();
        assert!(
            !text.contains("\\u001b") && !text.chars().any(char::is_control),
            "{text}"
        );
        assert_eq!(v["item"], "fix parser31m");
        assert_eq!(v["list"][0], "ab");
        assert_eq!(v["k"]["deep"], "x\ny");
    }

    #[test]
    fn lines_keep_their_breaks() {
        assert_eq!(printable_lines("a\u{1b}[31mb\nc\rd\te"), "ab\ncd\te");
    }

    #[test]
    fn json_keeps_its_value_without_raw_c1_bytes() {
        let value = serde_json::json!({"t": "a\u{9b}31m\u{1b}]0;x\u{7}\u{7f}é"});
        let raw = value.to_string();
        assert!(raw.contains('\u{9b}'), "serde_json leaves C1 raw: {raw:?}");
        let safe = printable_json(&raw);
        assert!(!safe.chars().any(char::is_control), "{safe:?}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
        assert!(matches!(printable_json("{\"a\":\"é\"}"), Cow::Borrowed(_)));
    }
}
