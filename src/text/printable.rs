//! Text from the agent made safe to show on a terminal: its escape
//! sequences and control characters (clear screen, window title, OSC 52
//! clipboard writes, carriage returns that overwrite a line) removed.

use std::borrow::Cow;

/// `text` as one printable line: escape sequences removed whole, tabs and
/// line breaks turned into spaces, every other control character (C0, DEL,
/// C1) dropped.
pub fn printable(text: &str) -> Cow<'_, str> {
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

/// Each line of `text` made [`printable`] (line breaks kept).
pub fn printable_lines(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\n') {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.split('\n')
            .map(printable)
            .collect::<Vec<_>>()
            .join("\n"),
    )
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
    fn lines_keep_their_breaks() {
        assert_eq!(printable_lines("a\u{1b}[31mb\nc\rd"), "ab\ncd");
    }
}
