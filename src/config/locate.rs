//! Where a key sits in the text of `ralph.toml`, for messages that name
//! its line.

/// The dotted name (`loop.max_iterations`) of the key whose value or name
/// sits at byte `offset`: the nearest `key =` at or above that line (a
/// multi-line array spans lines) under the nearest `[table]` header.
pub(super) fn key_at(text: &str, offset: usize) -> Option<String> {
    let line_end = text
        .get(offset..)?
        .find('\n')
        .map_or(text.len(), |i| offset + i);
    let upto = &text[..line_end];
    let mut key = None;
    for line in upto.lines().rev() {
        let t = line.trim().trim_start_matches('\u{feff}');
        if let Some(name) = t.strip_prefix('[') {
            let table = name.trim_start_matches('[').trim_end_matches(']').trim();
            let table = table.replace(['"', '\''], "");
            return Some(match key {
                Some(k) => format!("{table}.{k}"),
                None => table,
            });
        }
        if key.is_none()
            && let Some((k, _)) = t.split_once('=')
            && !k.trim().is_empty()
        {
            key = Some(k.trim().replace(['"', '\''], ""));
        }
    }
    key
}

/// The 1-based line of `key = …` inside `[section]` (or the top level).
pub(super) fn line_of(text: &str, section: &str, key: &str) -> Option<usize> {
    let mut current = String::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            current = name.trim().to_string();
            continue;
        }
        if current == section
            && let Some(rest) = t.strip_prefix(key)
            && rest.trim_start().starts_with('=')
        {
            return Some(i + 1);
        }
    }
    None
}
