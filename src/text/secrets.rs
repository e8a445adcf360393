//! Secrets ralph must never write down. Two kinds:
//!
//! - the values of credential-named environment variables (ralph's own
//!   environment and `agent.env`), replaced by `[redacted NAME]` in every
//!   file and stream ralph writes itself (events, state, handoffs,
//!   PROMPT.md, WIP commit messages, `--json` output) by [`redact`] — in
//!   their plain and their JSON-escaped forms, since most of what ralph
//!   writes is JSON and a value with a quote, a backslash or a newline is
//!   escaped there;
//! - well-known token shapes (API keys, PEM private keys, `Bearer …`),
//!   whatever their origin, scrubbed from everything ralph commits by
//!   [`scrub`]; and key files (`.env*`, `*.pem`, `id_rsa*` …), which a WIP
//!   commit never adds ([`is_key_file`]).
//!
//! The raw transcript is the agent's own stdout, kept verbatim (user-only,
//! never committed).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use regex::Regex;

/// Words of a variable name that mark its value as a credential, matched
/// whole (`GIT_AUTHOR_NAME` holds the word AUTHOR, not AUTH).
const SECRET_WORDS: [&str; 7] = ["KEY", "KEYS", "AUTH", "PASS", "PAT", "PRIVATE", "CREDS"];
/// Endings of a word that mark a credential (`PGPASSWORD`, `NPM_AUTHTOKEN`,
/// `CLIENTSECRET`, `AWS_SECRETKEY`).
const SECRET_ENDINGS: [&str; 12] = [
    "TOKEN",
    "TOKENS",
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "CREDENTIALS",
    "APIKEY",
    "ACCESSKEY",
    "SECRETKEY",
    "PRIVATEKEY",
];
/// Shorter values are left alone: redacting "1" or "true" would mangle
/// every text, and such values guard nothing.
const MIN_SECRET_LEN: usize = 8;

/// A secret value and what replaces it.
struct Secret {
    value: String,
    /// The value as it appears inside a JSON string, when that differs.
    escaped: Option<String>,
    label: String,
}

/// Longest value first, so that a secret containing another is replaced whole.
type Known = Vec<Secret>;

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
        if value.trim().len() >= MIN_SECRET_LEN
            && is_credential_name(&name)
            && !known.iter().any(|s| s.value == value)
        {
            let escaped = json_inner(&value).filter(|e| *e != value);
            // The label itself must be safe to put in JSON and markdown.
            let name: String = name
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            known.push(Secret {
                value,
                escaped,
                label: format!("[redacted {name}]"),
            });
        }
    }
    known.sort_by_key(|s| std::cmp::Reverse(s.value.len()));
}

/// Also treat these variables (`agent.env`) as possible secrets.
pub fn remember(vars: &BTreeMap<String, String>) {
    if let Ok(mut known) = known().lock() {
        add(&mut known, vars.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
}

/// Whether a variable of this name holds a credential: one of its words
/// (split at anything but letters and digits) is a credential word or ends
/// in one.
pub fn is_credential_name(name: &str) -> bool {
    name.to_ascii_uppercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|word| {
            SECRET_WORDS.contains(&word) || SECRET_ENDINGS.iter().any(|e| word.ends_with(e))
        })
}

/// `value` as it appears between the quotes of a JSON string.
fn json_inner(value: &str) -> Option<String> {
    let json = serde_json::to_string(value).ok()?;
    Some(json[1..json.len() - 1].to_string())
}

/// `text` with every known secret, plain or JSON-escaped, replaced by
/// `[redacted NAME]`: for text ralph writes that may quote JSON (a tool's
/// input). JSON escaping is per character, so the escaped form of a secret
/// inside a longer string is found too.
pub fn redact(text: &str) -> Cow<'_, str> {
    let Ok(known) = known().lock() else {
        return Cow::Borrowed(text);
    };
    replace_known(&known, text, true)
}

fn replace_known<'t>(known: &Known, text: &'t str, escaped_too: bool) -> Cow<'t, str> {
    let mut out = Cow::Borrowed(text);
    for s in known.iter() {
        let escaped = s.escaped.iter().filter(|_| escaped_too);
        for form in std::iter::once(&s.value).chain(escaped) {
            if out.contains(form.as_str()) {
                out = Cow::Owned(out.replace(form.as_str(), &s.label));
            }
        }
    }
    out
}

/// Redacts the known secrets, plain or JSON-escaped, from a byte stream
/// written in chunks (the agent's raw transcript and stderr): a secret split
/// across two chunks is still found, because as many bytes as the longest
/// form, less one, are held back until the next chunk or [`Self::finish`].
/// With no secret known, chunks pass through untouched and uncopied.
#[derive(Default)]
pub struct StreamRedactor {
    /// (form, label), from the secrets known when the stream began.
    forms: Vec<(Vec<u8>, Vec<u8>)>,
    held: Vec<u8>,
    out: Vec<u8>,
}

impl StreamRedactor {
    pub fn new() -> StreamRedactor {
        known()
            .lock()
            .map(|known| StreamRedactor::of(&known))
            .unwrap_or_default()
    }

    fn of(known: &Known) -> StreamRedactor {
        let forms = known
            .iter()
            .flat_map(|s| {
                std::iter::once(&s.value)
                    .chain(s.escaped.iter())
                    .map(|f| (f.as_bytes().to_vec(), s.label.as_bytes().to_vec()))
            })
            .collect();
        StreamRedactor {
            forms,
            ..StreamRedactor::default()
        }
    }

    /// The part of the stream so far that can be written now, redacted.
    pub fn feed<'a>(&'a mut self, chunk: &'a [u8]) -> &'a [u8] {
        if self.forms.is_empty() {
            return chunk;
        }
        self.held.extend_from_slice(chunk);
        let longest = self.forms.iter().map(|(f, _)| f.len()).max().unwrap_or(1);
        let safe = self.held.len().saturating_sub(longest - 1);
        self.drain(safe)
    }

    /// What is still held back, redacted: the end of the stream.
    pub fn finish(&mut self) -> &[u8] {
        let all = self.held.len();
        self.drain(all)
    }

    /// Redact and hand out `held[..upto]` (further, should a secret start
    /// before `upto` and end after it); keep the rest.
    fn drain(&mut self, upto: usize) -> &[u8] {
        let mut found: Vec<(usize, usize, usize)> = Vec::new();
        for (i, (form, _)) in self.forms.iter().enumerate() {
            for start in memchr::memmem::find_iter(&self.held, form) {
                if start < upto {
                    found.push((start, start + form.len(), i));
                }
            }
        }
        // Earliest first; at one start the longest form wins.
        found.sort_by_key(|&(start, end, _)| (start, std::cmp::Reverse(end)));
        self.out.clear();
        let mut pos = 0;
        for (start, end, i) in found {
            if start < pos {
                continue;
            }
            self.out.extend_from_slice(&self.held[pos..start]);
            self.out.extend_from_slice(&self.forms[i].1);
            pos = end;
        }
        let cut = upto.max(pos);
        self.out.extend_from_slice(&self.held[pos..cut]);
        self.held.drain(..cut);
        &self.out
    }
}

/// Serialized JSON with every known secret redacted inside its strings
/// (keys included): each string that holds one is decoded, redacted and
/// encoded again, so a secret with quotes, backslashes or newlines is found
/// and the structure is never touched (a secret that happens to match a
/// number or a piece of syntax is left to the strings that hold it).
pub fn redact_json(json: &str) -> Cow<'_, str> {
    match known().lock() {
        Ok(known) => redact_json_with(&known, json),
        Err(_) => Cow::Borrowed(json),
    }
}

fn redact_json_with<'t>(known: &Known, json: &'t str) -> Cow<'t, str> {
    // Mostly nothing matches: one search per secret, no decoding.
    let found = known.iter().any(|s| {
        json.contains(s.value.as_str()) || s.escaped.as_ref().is_some_and(|e| json.contains(e))
    });
    if !found {
        return Cow::Borrowed(json);
    }
    let bytes = json.as_bytes();
    let mut out = String::with_capacity(json.len());
    let mut at = 0;
    while let Some(q) = memchr::memchr(b'"', &bytes[at..]) {
        let start = at + q;
        out.push_str(&json[at..start]);
        // The closing quote: the first one not escaped by a backslash.
        let mut end = start + 1;
        loop {
            match memchr::memchr2(b'"', b'\\', bytes.get(end..).unwrap_or_default()) {
                Some(k) if bytes[end + k] == b'\\' => end += k + 2,
                Some(k) => break end += k + 1,
                None => break end = json.len(),
            }
        }
        let end = end.min(json.len());
        let literal = &json[start..end];
        match serde_json::from_str::<String>(literal) {
            Ok(s) => match replace_known(known, &s, false) {
                Cow::Owned(clean) => {
                    out.push_str(&serde_json::to_string(&clean).unwrap_or_default())
                }
                Cow::Borrowed(_) => out.push_str(literal),
            },
            Err(_) => out.push_str(literal),
        }
        at = end;
    }
    out.push_str(&json[at..]);
    Cow::Owned(out)
}

/// Token shapes that are credentials wherever they come from, and what
/// replaces them (docs/reliability.md, "Secrets").
const SHAPES: [(&str, &str); 7] = [
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
    // HTTP bearer credentials (`Authorization: Bearer …`).
    (
        r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}",
        "Bearer [redacted]",
    ),
];

fn shapes() -> &'static [(Regex, &'static str)] {
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
/// ralph's environment holds it (the agent may have read it from a file).
pub fn scrub(text: &str) -> Cow<'_, str> {
    let mut out = redact(text);
    for (re, label) in shapes() {
        if let Cow::Owned(clean) = re.replace_all(&out, *label) {
            out = Cow::Owned(clean);
        }
    }
    out
}

/// Files that hold keys by their name: a WIP commit never adds them, even
/// when no `.gitignore` keeps them out (`repo`).
pub fn is_key_file(path: &str) -> bool {
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
        let names: Vec<&str> = known.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            names,
            ["[redacted ANTHROPIC_API_KEY]", "[redacted GH_TOKEN]"]
        );
    }

    #[test]
    fn credential_names_match_by_word_not_substring() {
        for name in [
            "ANTHROPIC_API_KEY",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "PGPASSWORD",
            "NPM_AUTHTOKEN",
            "DB_PASS",
            "ssh_private_key",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "X-Auth",
        ] {
            assert!(is_credential_name(name), "{name}");
        }
        for name in [
            "GIT_AUTHOR_NAME",
            "GIT_AUTHOR_EMAIL",
            "AUTHORITY_URL",
            "MONKEY_PATH",
            "KEYBOARD_LAYOUT",
            "TOKENIZERS_PARALLELISM",
            "PASSENGER_HOME",
        ] {
            assert!(!is_credential_name(name), "{name}");
        }
        // The developer's name is not a secret: it stays in what ralph writes.
        let mut known = Vec::new();
        add(
            &mut known,
            [
                ("GIT_AUTHOR_NAME", "Jane Q. Developer"),
                ("GIT_AUTHOR_EMAIL", "jane@example.com"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        assert!(known.is_empty());
    }

    fn known_of(vars: &[(&str, &str)]) -> Known {
        let mut known = Vec::new();
        add(
            &mut known,
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
        );
        known
    }

    /// Every way of cutting a stream into two chunks, plain and JSON forms.
    #[test]
    fn a_stream_redactor_finds_secrets_split_across_chunks() {
        let secret = "pa\"ss\\word\nend";
        let known = known_of(&[("DB_PASSWORD", secret), ("API_TOKEN", "tok-12345678")]);
        let escaped = json_inner(secret).unwrap();
        let stream =
            format!("{{\"text\":\"{escaped} and tok-12345678\"}}\nraw {secret} tok-1234567\n");
        let want = "{\"text\":\"[redacted DB_PASSWORD] and [redacted API_TOKEN]\"}\nraw [redacted DB_PASSWORD] tok-1234567\n";
        let bytes = stream.as_bytes();
        for cut in 0..=bytes.len() {
            let mut r = StreamRedactor::of(&known);
            let mut out = r.feed(&bytes[..cut]).to_vec();
            out.extend_from_slice(r.feed(&bytes[cut..]));
            out.extend_from_slice(r.finish());
            assert_eq!(String::from_utf8_lossy(&out), want, "cut at {cut}");
        }
        // Nothing known: the chunk itself, uncopied.
        let mut none = StreamRedactor::of(&Vec::new());
        assert!(std::ptr::eq(none.feed(bytes), bytes));
    }

    #[test]
    fn secrets_with_quotes_backslashes_and_newlines_are_redacted_in_json() {
        let pem = "-----BEGIN KEY-----\nab\"c\\d\u{1b}é\n-----END KEY-----";
        let known = known_of(&[("DEPLOY_KEY", pem)]);
        let json = serde_json::json!({
            "message": format!("the agent said {pem} twice: {pem}"),
            pem: 1,
            "n": 12345678,
        })
        .to_string();
        let clean = redact_json_with(&known, &json);
        let v: serde_json::Value = serde_json::from_str(&clean).expect("still JSON");
        assert_eq!(
            v["message"],
            "the agent said [redacted DEPLOY_KEY] twice: [redacted DEPLOY_KEY]"
        );
        assert_eq!(v["[redacted DEPLOY_KEY]"], 1);
        assert!(!clean.contains("ab\\\"c"), "{clean}");
        // Plain text that quotes JSON: the escaped form goes too.
        let quoted = format!("input: {}", serde_json::to_string(pem).unwrap());
        assert_eq!(
            replace_known(&known, &quoted, true),
            "input: \"[redacted DEPLOY_KEY]\""
        );
    }

    #[test]
    fn a_secret_that_matches_json_syntax_leaves_the_structure_alone() {
        let known = known_of(&[("API_TOKEN", "12345678"), ("X_SECRET", "\",\"name\":")]);
        let json = r#"{"n":123456789,"s":"x\",\"name\":y 12345678","name":1}"#;
        let clean = redact_json_with(&known, json);
        let v: serde_json::Value = serde_json::from_str(&clean).unwrap();
        assert_eq!(v["n"], 123456789);
        assert_eq!(v["s"], "x[redacted X_SECRET]y [redacted API_TOKEN]");
        assert_eq!(v["name"], 1);
    }

    #[test]
    fn well_known_token_shapes_are_scrubbed_from_committed_text() {
        let text = "curl -H \"Authorization: Bearer abcdefgh12345678\" \
            -d key=sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv \
            ghp_0123456789abcdefghijABCDEFGHIJ github_pat_11ABCDEFG0123456789_abcdefghij \
            AKIAIOSFODNN7EXAMPLE xoxb-1234567890-abcdefghij \
            -----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY----- \
            -----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn cut short";
        let clean = scrub(text);
        for leaked in [
            "abcdefgh12345678",
            "sk-ant-api03",
            "ghp_0123",
            "github_pat_11",
            "AKIAIOSF",
            "xoxb-",
            "MIIEow",
            "b3Blbn",
        ] {
            assert!(!clean.contains(leaked), "{leaked} in {clean}");
        }
        for label in [
            "Bearer [redacted]",
            "[redacted API key]",
            "[redacted GitHub token]",
            "[redacted AWS key]",
            "[redacted Slack token]",
            "[redacted private key]",
        ] {
            assert!(clean.contains(label), "{label} not in {clean}");
        }
        // Ordinary text is left as it is.
        let plain = "fix the parser; see task-1234 and the sk- prefix doc";
        assert!(matches!(scrub(plain), Cow::Borrowed(_)));
    }

    #[test]
    fn key_files_are_known_by_name() {
        for path in [
            ".env",
            "app/.env.local",
            ".envrc",
            "certs/server.pem",
            "tls.KEY",
            "home/.ssh/id_rsa",
            "id_ed25519.pub",
            ".netrc",
        ] {
            assert!(is_key_file(path), "{path}");
        }
        for path in ["src/env.rs", "environment.md", "keys.rs", "docs/pem.md"] {
            assert!(!is_key_file(path), "{path}");
        }
    }

    proptest::proptest! {
        /// Whatever a secret holds (quotes, backslashes, newlines, control
        /// and non-ASCII characters), once known it appears nowhere in
        /// ralph's JSON, plain or escaped, and the JSON still parses.
        #[test]
        fn any_secret_is_redacted_from_any_json(
            secret in "[^\\s]\\PC{6,30}[^\\s]",
            before in "\\PC{0,10}",
            after in "[\\PC\\n\"\\\\]{0,10}",
        ) {
            let known = known_of(&[("SOME_API_TOKEN", &secret)]);
            let record = serde_json::json!({
                "kind": "warning",
                "message": format!("{before}{secret}{after}"),
                "list": [secret.clone(), 42],
            });
            for json in [record.to_string(), serde_json::to_string_pretty(&record).unwrap()] {
                let clean = redact_json_with(&known, &json);
                let escaped = json_inner(&secret).unwrap();
                proptest::prop_assert!(!clean.contains(&secret), "{}", clean);
                proptest::prop_assert!(!clean.contains(&escaped), "{}", clean);
                let v: serde_json::Value = serde_json::from_str(&clean).unwrap();
                proptest::prop_assert_eq!(&v["list"][0], "[redacted SOME_API_TOKEN]");
            }
        }
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
