//! Cutting text short, the one way each: by characters with `…` after what
//! is kept ([`cut`]), keeping both ends ([`cut_middle`]), to a width that
//! includes the `…` ([`fit_width`]), and by bytes on a character boundary
//! ([`cut_bytes`]).

/// The first `max` characters of `text`, and `…` when there was more.
pub(crate) fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The first and the last characters of `text`, `max` in all, with `…`
/// between when there was more: a long line whose end (a test runner's
/// verdict, an error's detail) matters as much as its start.
pub(crate) fn cut_middle(text: &str, max: usize) -> String {
    let chars = text.chars().count();
    if chars <= max {
        return text.to_string();
    }
    let head = max / 2;
    let tail = max - head;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(chars - tail).collect();
    format!("{start}…{end}")
}

/// `text` in at most `width` characters, the `…` that marks a cut included
/// (for columns on a terminal).
pub(crate) fn fit_width(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    cut(text, width.saturating_sub(1))
}

/// At most `max` bytes of `text`, cut on a character boundary, and `…` when
/// there was more.
pub(crate) fn cut_bytes(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// "1h02m", "4m05s", "12s": short, for status lines and reports.
pub(crate) fn format_duration(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_max_characters_then_marks_the_cut() {
        for (text, max, want) in [
            ("", 3, ""),
            ("abc", 3, "abc"),
            ("abcd", 3, "abc…"),
            ("ééé", 2, "éé…"),
            ("abc", 0, "…"),
        ] {
            assert_eq!(cut(text, max), want, "{text:?} {max}");
        }
    }

    #[test]
    fn cut_middle_keeps_both_ends() {
        for (text, max, want) in [
            ("abc", 3, "abc"),
            ("abcdef", 4, "ab…ef"),
            ("abcdefg", 3, "a…fg"),
            ("éàüöß", 2, "é…ß"),
            ("abc", 0, "…"),
        ] {
            assert_eq!(cut_middle(text, max), want, "{text:?} {max}");
        }
    }

    #[test]
    fn fit_width_counts_the_mark() {
        for (text, width, want) in [
            ("abc", 3, "abc"),
            ("abcd", 3, "ab…"),
            ("日本語テキスト", 4, "日本語…"),
            ("abcd", 0, "…"),
        ] {
            assert_eq!(fit_width(text, width), want, "{text:?} {width}");
        }
    }

    #[test]
    fn cut_bytes_stays_on_a_character_boundary() {
        assert_eq!(cut_bytes("abc".into(), 3), "abc");
        assert_eq!(cut_bytes("abcd".into(), 3), "abc…");
        // 'é' is two bytes: a cut inside it backs off before it.
        assert_eq!(cut_bytes("aé".into(), 2), "a…");
    }
}
