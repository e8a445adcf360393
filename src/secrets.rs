//! Secrets ralph must never write down: the values of credential-like
//! environment variables (ralph's own environment and `agent.env`). Text
//! that ralph copies from the agent or from hooks (the agent's last words,
//! result and error texts, a hook's stderr) can quote them; every file and
//! stream ralph writes itself (events, state, handoffs, PROMPT.md, WIP
//! commit messages) passes through [`redact`]. The raw transcript is the
//! agent's own stdout, kept verbatim (user-only, never committed).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

/// Parts of a variable name that mark its value as a credential.
const SECRET_NAMES: [&str; 8] = [
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "PRIVATE",
];
/// Shorter values are left alone: redacting "1" or "true" would mangle
/// every text, and such values guard nothing.
const MIN_SECRET_LEN: usize = 8;

/// (value, variable name), longest value first so that a secret containing
/// another is replaced whole.
type Known = Vec<(String, String)>;

fn known() -> &'static Mutex<Known> {
    static KNOWN: OnceLock<Mutex<Known>> = OnceLock::new();
    KNOWN.get_or_init(|| {
        let mut known = Vec::new();
        add(
            &mut known,
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        );
        Mutex::new(known)
    })
}

fn add(known: &mut Known, vars: impl IntoIterator<Item = (String, String)>) {
    for (name, value) in vars {
        let upper = name.to_ascii_uppercase();
        if value.trim().len() >= MIN_SECRET_LEN
            && SECRET_NAMES.iter().any(|s| upper.contains(s))
            && !known.iter().any(|(v, _)| *v == value)
        {
            known.push((value, name));
        }
    }
    known.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
}

/// Also treat these variables (`agent.env`) as possible secrets.
pub fn remember(vars: &BTreeMap<String, String>) {
    if let Ok(mut known) = known().lock() {
        add(&mut known, vars.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
}

/// `text` with every known secret replaced by `[redacted NAME]`.
pub fn redact(text: &str) -> Cow<'_, str> {
    let Ok(known) = known().lock() else {
        return Cow::Borrowed(text);
    };
    let mut out = Cow::Borrowed(text);
    for (value, name) in known.iter() {
        if out.contains(value.as_str()) {
            out = Cow::Owned(out.replace(value.as_str(), &format!("[redacted {name}]")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_like_values_are_replaced_short_and_plain_ones_kept() {
        let mut known = Vec::new();
        add(
            &mut known,
            [
                ("ANTHROPIC_API_KEY", "sk-ant-secret-0123456789"),
                ("GH_TOKEN", "ghp_short"),
                ("IS_SANDBOX", "1"),
                ("HOME", "/root/somewhere/long"),
                ("MY_PASSWORD", "pw"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let names: Vec<&str> = known.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(names, ["ANTHROPIC_API_KEY", "GH_TOKEN"]);
    }

    #[test]
    fn remembered_values_are_redacted_everywhere_in_the_text() {
        remember(&BTreeMap::from([(
            "SERVICE_TOKEN".to_string(),
            "tok-redact-test-42".to_string(),
        )]));
        assert_eq!(
            redact("a tok-redact-test-42 b tok-redact-test-42"),
            "a [redacted SERVICE_TOKEN] b [redacted SERVICE_TOKEN]"
        );
        assert!(matches!(redact("nothing here"), Cow::Borrowed(_)));
    }
}
