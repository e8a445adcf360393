//! Token shapes that are credentials wherever they come from (API keys,
//! private keys, webhooks, `Bearer …`), what ralph commits scrubbed of
//! them and of the known values ([`scrub_keeping`]), and the commit
//! filter's question: does a file hold a secret ([`secret_in`])? Key files
//! by name ([`is_key_file`]).

use std::borrow::Cow;
use std::sync::OnceLock;

use regex::Regex;

use super::{Known, known, replace_known_keeping};

/// Token shapes that are credentials wherever they come from, and what
/// replaces them (docs/reliability.md, "Secrets").
pub(super) const SHAPES: [(&str, &str); 9] = [
    // PEM private keys, whole, or to the end of the text when cut short.
    (
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
        "[redacted private key]",
    ),
    // Anthropic (sk-ant-…) and OpenAI (sk-…, sk-proj-…) API keys.
    (r"\bsk-[A-Za-z0-9_-]{20,}", "[redacted API key]"),
    // GitHub tokens: classic (ghp_, gho_, ghu_, ghs_, ghr_) and fine-grained.
    (
        r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
        "[redacted GitHub token]",
    ),
    // AWS access key ids.
    (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", "[redacted AWS key]"),
    // Slack tokens.
    (r"\bxox[abposr]-[A-Za-z0-9-]{10,}", "[redacted Slack token]"),
    // Google API keys.
    (r"\bAIza[0-9A-Za-z_-]{35}", "[redacted API key]"),
    // Incoming webhooks: the URL is the credential.
    (
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]+",
        "[redacted Slack webhook]",
    ),
    (
        r"https://(?:[a-z]+\.)?discord(?:app)?\.com/api/webhooks/[0-9]+/[A-Za-z0-9_-]+",
        "[redacted Discord webhook]",
    ),
    // HTTP bearer credentials (`Authorization: Bearer …`): see
    // `looks_like_token`, "bearer authentication" is words.
    (r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{8,}", BEARER),
];

/// The bearer shape's label: the one shape that needs its context.
pub(super) const BEARER: &str = "Bearer [redacted]";

/// Whether what follows "bearer" is a credential, not a word: a digit in
/// it, or too long for a word.
fn looks_like_token(token: &str) -> bool {
    (token.len() >= 12 && token.bytes().any(|b| b.is_ascii_digit())) || token.len() >= 32
}

pub(super) fn shapes() -> &'static [(Regex, &'static str)] {
    static SHAPES_RE: OnceLock<Vec<(Regex, &'static str)>> = OnceLock::new();
    SHAPES_RE.get_or_init(|| {
        SHAPES
            .iter()
            .map(|(re, label)| (Regex::new(re).expect("token shapes compile"), *label))
            .collect()
    })
}

/// What ralph commits (handoffs, PROMPT.md, commit messages): known
/// secrets redacted, and every well-known token shape too, whether or not
/// ralph's environment holds it (the agent may have read it from a file);
/// but what `plan` holds is left alone: ralph's prompt and handoff
/// quote the plan, the user's own words in a file they commit themselves,
/// and rewriting them would change the task ("reset [redacted] flow").
/// A secret the user wrote into the plan stays where the plan is quoted,
/// and is redacted everywhere else ralph writes.
pub(crate) fn scrub_keeping<'t>(text: &'t str, plan: &str) -> Cow<'t, str> {
    match known().lock() {
        Ok(known) => scrub_with(&known, text, plan),
        Err(_) => scrub_with(&Vec::new(), text, plan),
    }
}

pub(super) fn scrub_with<'t>(known: &Known, text: &'t str, plan: &str) -> Cow<'t, str> {
    let mut out = replace_known_keeping(known, text, true, plan);
    for (re, label) in shapes() {
        let mut changed = false;
        let clean = re.replace_all(&out, |caps: &regex::Captures<'_>| {
            let whole = &caps[0];
            let keep = (!plan.is_empty() && plan.contains(whole))
                || caps
                    .get(1)
                    .is_some_and(|word| !looks_like_token(whole[word.len()..].trim_start()));
            if keep {
                return whole.to_string();
            }
            changed = true;
            match caps.get(1) {
                // "bearer" as it was written.
                Some(word) => format!("{} [redacted]", word.as_str()),
                None => label.to_string(),
            }
        });
        if changed {
            out = Cow::Owned(clean.into_owned());
        }
    }
    out
}

/// Why a file ralph is about to commit must stay out: it holds a known
/// secret's value (`the value of GITHUB_TOKEN`) or a token shape (a
/// private key, a GitHub token) that `before` (the same file as last
/// committed) does not hold: what is in history already is no new leak,
/// and a project's own test fixtures stay committable.
pub(crate) fn secret_in(content: &[u8], before: Option<&[u8]>) -> Option<String> {
    match known().lock() {
        Ok(known) => secret_in_with(&known, content, before),
        Err(_) => secret_in_with(&Vec::new(), content, before),
    }
}

pub(super) fn secret_in_with(
    known: &Known,
    content: &[u8],
    before: Option<&[u8]>,
) -> Option<String> {
    let new = |found: &[u8]| before.is_none_or(|b| memchr::memmem::find(b, found).is_none());
    for s in known {
        let name = &s.label["[redacted ".len()..s.label.len() - 1];
        if memchr::memmem::find(content, s.value.as_bytes()).is_none() {
            continue;
        }
        let found = match &s.context {
            None => new(s.value.as_bytes()),
            Some(context) => {
                let text = String::from_utf8_lossy(content);
                context.find_iter(&text).any(|m| new(m.as_str().as_bytes()))
            }
        };
        if found {
            return Some(format!("holds a secret (the value of {name})"));
        }
    }
    // One pass over the file for all the shapes (their literal prefixes
    // found together); each shape's own pass only when one is there.
    if !any_byte_shape().is_match(content) {
        return None;
    }
    for (re, label) in byte_shapes() {
        let hit = re.find_iter(content).any(|m| {
            let whole = m.as_bytes();
            let token = *label != BEARER
                || std::str::from_utf8(whole).is_ok_and(|w| {
                    looks_like_token(w.get("bearer".len()..).unwrap_or_default().trim_start())
                });
            token && new(whole)
        });
        if hit {
            let what = label.trim_start_matches("[redacted ").trim_end_matches(']');
            let what = if *label == BEARER {
                "bearer token"
            } else {
                what
            };
            return Some(format!("holds a secret ({what})"));
        }
    }
    None
}

/// Any of [`SHAPES`], over bytes.
fn any_byte_shape() -> &'static regex::bytes::Regex {
    static ANY: OnceLock<regex::bytes::Regex> = OnceLock::new();
    ANY.get_or_init(|| {
        let any: Vec<String> = SHAPES.iter().map(|(re, _)| format!("(?:{re})")).collect();
        regex::bytes::Regex::new(&any.join("|")).expect("token shapes compile")
    })
}

/// [`SHAPES`] over bytes: a file need not be UTF-8.
fn byte_shapes() -> &'static [(regex::bytes::Regex, &'static str)] {
    static SHAPES_RE: OnceLock<Vec<(regex::bytes::Regex, &'static str)>> = OnceLock::new();
    SHAPES_RE.get_or_init(|| {
        SHAPES
            .iter()
            .map(|(re, label)| {
                let re = regex::bytes::Regex::new(re).expect("token shapes compile");
                (re, *label)
            })
            .collect()
    })
}

/// Files that hold keys by their name: a WIP commit never adds them, even
/// when no `.gitignore` keeps them out (`repo`).
pub(crate) fn is_key_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    name.starts_with(".env")
        || ["id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"]
            .iter()
            .any(|k| name.starts_with(k))
        || [".netrc", ".pgpass", "credentials.json"].contains(&name)
        || ext
            .is_some_and(|e| ["pem", "key", "p12", "pfx", "jks", "keystore"].contains(&e.as_str()))
}
