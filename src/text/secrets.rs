//! Secrets ralph must never write down. Two kinds:
//!
//! - the values of credential-named environment variables (ralph's own
//!   environment and `agent.env`), and of any variable whose value is a
//!   URL with a user or password or a token shape ([`is_secret_value`]:
//!   `DATABASE_URL=postgres://u:pw@h/db`), replaced by `[redacted NAME]` in every
//!   file and stream ralph writes itself (events, state, handoffs,
//!   PROMPT.md, WIP commit messages, `--json` output) by [`redact`] — in
//!   their plain and their JSON-escaped forms, since most of what ralph
//!   writes is JSON and a value with a quote, a backslash or a newline is
//!   escaped there;
//! - well-known token shapes (API keys, PEM private keys, `Bearer …`),
//!   whatever their origin, scrubbed from everything ralph commits by
//!   [`scrub_keeping`]; and key files (`.env*`, `*.pem`, `id_rsa*` …), which a WIP
//!   commit never adds ([`is_key_file`]), nor a file holding a known value
//!   or a token shape new since its committed version ([`secret_in`]);
//! - a URL's password (`scheme://user:password@`) wherever ralph redacts.
//!
//! Redaction must not rewrite what is not a secret:
//!
//! - a common value (a word like `password` or `postgres`: letters, `_`
//!   and `-` only, under 20 characters) or one the plan holds at the start
//!   of the run ([`note_plan`]) is redacted only where a secret is written:
//!   right after its variable's name (`PGPASSWORD=password`,
//!   `"PGPASSWORD": "password"`) or as a URL's password
//!   (`postgres://app:postgres@db`);
//! - JSON (ralph's events and state, the agent's transcript line by line) is
//!   redacted inside its strings only, never in its structure;
//! - the plan's own text is never rewritten in ralph's prompt and handoff
//!   ([`scrub_keeping`]): the plan file holds it anyway;
//! - a token shape must look like a token (`bearer authentication` is
//!   words, `Bearer eyJhbGciOi…` a credential).
//!
//! The raw transcript and stderr are the agent's own output, redacted as
//! they stream ([`StreamRedactor`]), user-only, never committed.
//!
//! Files: this one (what is known, redaction, the stream redactor);
//! `secrets/shapes.rs` (token shapes, scrubbing, key files, the commit
//! filter's scan).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use regex::Regex;

mod shapes;

use shapes::{BEARER, shapes};
pub(crate) use shapes::{is_key_file, scrub_keeping, secret_in};
#[cfg(test)]
use shapes::{scrub_with, secret_in_with};

/// Words of a variable name that mark its value as a credential, matched
/// whole (`GIT_AUTHOR_NAME` holds the word AUTHOR, not AUTH): `SENTRY_DSN`
/// (a URL whose user is the key).
const SECRET_WORDS: [&str; 8] = [
    "KEY", "KEYS", "AUTH", "PASS", "PAT", "PRIVATE", "CREDS", "DSN",
];
/// A word that marks a credential only beside others: `MYSQL_PWD`, not the
/// working directory's `PWD`.
const SECRET_WORDS_BESIDE: [&str; 1] = ["PWD"];
/// Endings of a word that mark a credential (`PGPASSWORD`, `NPM_AUTHTOKEN`,
/// `CLIENTSECRET`, `AWS_SECRETKEY`, `SLACK_WEBHOOK_URL`: a webhook's URL
/// is its credential).
const SECRET_ENDINGS: [&str; 14] = [
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
    "WEBHOOK",
    "WEBHOOKS",
];
/// Shorter values are redacted in context only (`API_KEY=abc`, as common
/// words are): redacting "abc" or "1" everywhere would mangle every text,
/// and left alone `API_KEY=abc` reached the next prompt and its commit.
const MIN_SECRET_LEN: usize = 8;

/// A common value (a word) is at most this long.
const COMMON_MAX_CHARS: usize = 20;

/// A secret value and what replaces it.
#[derive(Clone)]
struct Secret {
    value: String,
    /// The value as it appears inside a JSON string, when that differs.
    escaped: Option<String>,
    label: String,
    /// For a common value: the only places it is redacted (after its
    /// variable's name, as a URL's password), the value in group 1 or 2.
    context: Option<Regex>,
}

impl Secret {
    /// A common word, or a value the plan holds: redacted in context only.
    fn weaken(&mut self, name: &str) {
        let value = regex::escape(&self.value);
        let name = regex::escape(name);
        // `NAME=value`, `NAME: value`, `"NAME":"value"`, `NAME='value'`; and
        // `scheme://user:value@host`.
        let re = format!(
            r#"(?:(?i:\b{name})["']?\s*[:=]\s*["']?({value})(?:["'\s,;&)}}]|$))|(?:://[^\s/@:]*:({value})@)"#
        );
        self.context = Regex::new(&re).ok();
    }
}

/// A value made of one word (letters, `_`, `-`), short: `password`,
/// `postgres`, `changeme`, `assistant`. Such a value is also a word of
/// ordinary text and of JSON's structure.
fn is_common(value: &str) -> bool {
    value.chars().count() < COMMON_MAX_CHARS
        && value
            .chars()
            .all(|c| c.is_alphabetic() || c == '_' || c == '-')
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
        let secret = is_credential_name(&name) || is_secret_value(&value);
        // A URL's password, however short, where a URL holds it.
        if secret
            && let Some(password) = url_password(&value)
            && password != value
            && !known.iter().any(|s| s.value == password)
        {
            let mut s = Secret {
                value: password.to_string(),
                escaped: None,
                label: label_of(&name),
                context: None,
            };
            s.weaken(&label_name(&name));
            known.push(s);
        }
        let short = value.trim().len() < MIN_SECRET_LEN;
        if !value.trim().is_empty() && secret && !known.iter().any(|s| s.value == value) {
            let escaped = json_inner(&value).filter(|e| *e != value);
            let name = label_name(&name);
            let mut secret = Secret {
                label: label_of(&name),
                context: None,
                escaped,
                value,
            };
            if short || is_common(&secret.value) {
                secret.weaken(&name);
            }
            known.push(secret);
        }
    }
    known.sort_by_key(|s| std::cmp::Reverse(s.value.len()));
}

/// A variable's name as a label shows it: safe to put in JSON and markdown.
fn label_name(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn label_of(name: &str) -> String {
    format!("[redacted {}]", label_name(name))
}

/// The plan at the start of the run: a value it holds is the user's own
/// words (a host, a database name), redacted in context only. Only the
/// start is taken: an agent that edits the plan cannot weaken a secret.
pub(crate) fn note_plan(plan_text: &str) {
    if let Ok(mut known) = known().lock() {
        weaken_found_in(&mut known, plan_text);
    }
}

fn weaken_found_in(known: &mut Known, text: &str) {
    for s in known.iter_mut() {
        if s.context.is_none() && text.contains(s.value.as_str()) {
            let name = s.label["[redacted ".len()..s.label.len() - 1].to_string();
            s.weaken(&name);
        }
    }
}

/// How many secrets are known: a scan's result holds while it is the same.
pub(crate) fn known_count() -> usize {
    known().lock().map_or(0, |k| k.len())
}

/// Also treat these variables (`agent.env`) as possible secrets.
pub(crate) fn remember(vars: &BTreeMap<String, String>) {
    if let Ok(mut known) = known().lock() {
        add(&mut known, vars.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
}

/// Whether a variable of this name holds a credential: one of its words
/// (split at anything but letters and digits) is a credential word or ends
/// in one.
pub(crate) fn is_credential_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let words: Vec<&str> = upper
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    words.iter().any(|word| {
        SECRET_WORDS.contains(word)
            || SECRET_ENDINGS.iter().any(|e| word.ends_with(e))
            || (words.len() > 1 && SECRET_WORDS_BESIDE.contains(word))
    })
}

/// Whether a value is a credential whatever its variable's name: a URL
/// that carries a user or password (`postgres://u:pw@h/db`, a Sentry DSN's
/// `https://key@host`), or a well-known token shape (a private key,
/// `ghp_…`, `sk-ant-…`, `AKIA…`, a Slack webhook).
pub(crate) fn is_secret_value(value: &str) -> bool {
    url_userinfo().is_match(value)
        || shapes()
            .iter()
            .any(|(re, label)| *label != BEARER && re.is_match(value))
}

/// `scheme://user[:password]@`: the user in group 1, the password in 2.
fn url_userinfo() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"\b[A-Za-z][A-Za-z0-9+.-]*://([^\s/@:?#]*)(?::([^\s/@?#]+))?@")
            .expect("the URL rule compiles")
    })
}

/// The password of a `scheme://user:password@` URL in `value`, if any.
fn url_password(value: &str) -> Option<&str> {
    url_userinfo()
        .captures(value)
        .and_then(|c| c.get(2))
        .map(|m| m.as_str())
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
pub(crate) fn redact(text: &str) -> Cow<'_, str> {
    let Ok(known) = known().lock() else {
        return Cow::Borrowed(text);
    };
    replace_known(&known, text, true)
}

fn replace_known<'t>(known: &Known, text: &'t str, escaped_too: bool) -> Cow<'t, str> {
    replace_known_keeping(known, text, escaped_too, "")
}

/// [`replace_known`], except where the match is found in `keep` too.
fn replace_known_keeping<'t>(
    known: &Known,
    text: &'t str,
    escaped_too: bool,
    keep: &str,
) -> Cow<'t, str> {
    let mut out = Cow::Borrowed(text);
    for s in known.iter() {
        if let Some(context) = &s.context {
            if let Cow::Owned(clean) = replace_in_context(context, &out, &s.label, keep, 1) {
                out = Cow::Owned(clean);
            }
            continue;
        }
        let escaped = s.escaped.iter().filter(|_| escaped_too);
        for form in std::iter::once(&s.value).chain(escaped) {
            if out.contains(form.as_str()) && !keep.contains(form.as_str()) {
                out = Cow::Owned(out.replace(form.as_str(), &s.label));
            }
        }
    }
    // Known values first, labelled with their names; then any other URL's.
    if let Cow::Owned(clean) = redact_url_passwords(&out, keep) {
        out = Cow::Owned(clean);
    }
    out
}

/// The password of every `scheme://user:password@` URL replaced, but for
/// URLs `keep` holds: a password wherever it comes from.
fn redact_url_passwords<'t>(text: &'t str, keep: &str) -> Cow<'t, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    replace_in_context(url_userinfo(), text, "[redacted password]", keep, 2)
}

/// The value (group `group` or the next) of every match of `context`
/// replaced by `label`, but for matches `keep` holds.
fn replace_in_context<'t>(
    context: &Regex,
    text: &'t str,
    label: &str,
    keep: &str,
    group: usize,
) -> Cow<'t, str> {
    let mut out = String::new();
    let mut at = 0;
    for caps in context.captures_iter(text) {
        let (Some(whole), Some(value)) = (caps.get(0), caps.get(group).or(caps.get(group + 1)))
        else {
            continue;
        };
        if !keep.is_empty() && keep.contains(whole.as_str()) {
            continue;
        }
        out.push_str(&text[at..value.start()]);
        out.push_str(label);
        at = value.end();
    }
    if at == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[at..]);
    Cow::Owned(out)
}

/// Redacts the known secrets from a byte stream written in chunks (the
/// agent's raw transcript and stderr), line by line:
///
/// - in a JSON-lines stream ([`Self::json_lines`], the transcript), a line
///   that is a JSON object is redacted inside its strings only, so no
///   secret can rewrite its structure (`"type":"assistant"` stays, and a
///   takeover still replays it);
/// - other lines: common values where a secret is written (see the module
///   doc), other values plain or JSON-escaped, wherever they are — held
///   back as many bytes as the longest form less one, so a secret split
///   across lines or reads is still found.
///
/// A line is written once it is complete (or at [`Self::finish`]). With no
/// secret known, chunks pass through untouched and uncopied.
/// Most bytes of one unfinished line held for redaction inside its JSON
/// strings; a longer line is redacted as plain text (as stream decoding
/// bounds a line at 4 MiB too).
const LINE_HOLD: usize = 4 << 20;

#[derive(Default)]
pub(crate) struct StreamRedactor {
    /// The secrets known when the stream began.
    known: Known,
    /// (form, label) of the values redacted wherever they are.
    forms: Vec<(Vec<u8>, Vec<u8>)>,
    /// Every known value as written and JSON-escaped, common ones too: a
    /// line holding none of them is written as it is, unparsed.
    finders: Vec<memchr::memmem::Finder<'static>>,
    /// A value spans lines (a PEM key): no line can be passed over, as
    /// one may begin it.
    multiline: bool,
    json: bool,
    /// The line not yet complete.
    line: Vec<u8>,
    /// Bytes of plain lines held back for a secret that may go on.
    held: Vec<u8>,
    out: Vec<u8>,
}

impl StreamRedactor {
    /// For a plain stream (stderr).
    pub(crate) fn new() -> StreamRedactor {
        known()
            .lock()
            .map(|known| StreamRedactor::of(&known))
            .unwrap_or_default()
    }

    /// For a stream of JSON lines (the agent's stdout).
    pub(crate) fn json_lines() -> StreamRedactor {
        StreamRedactor {
            json: true,
            ..StreamRedactor::new()
        }
    }

    fn of(known: &Known) -> StreamRedactor {
        let forms = known
            .iter()
            .filter(|s| s.context.is_none())
            .flat_map(|s| {
                std::iter::once(&s.value)
                    .chain(s.escaped.iter())
                    .map(|f| (f.as_bytes().to_vec(), s.label.as_bytes().to_vec()))
            })
            .collect();
        let values = || {
            known
                .iter()
                .flat_map(|s| std::iter::once(&s.value).chain(s.escaped.iter()))
        };
        StreamRedactor {
            known: known.clone(),
            forms,
            finders: values()
                .map(|v| memchr::memmem::Finder::new(v.as_bytes()).into_owned())
                .collect(),
            multiline: values().any(|v| v.contains('\n')),
            ..StreamRedactor::default()
        }
    }

    /// The part of the stream so far that can be written now, redacted.
    pub(crate) fn feed<'a>(&'a mut self, chunk: &'a [u8]) -> &'a [u8] {
        if self.known.is_empty() {
            return chunk;
        }
        self.out.clear();
        self.line.extend_from_slice(chunk);
        let mut done = 0;
        while let Some(nl) = memchr::memchr(b'\n', &self.line[done..]) {
            let end = done + nl + 1;
            let line = std::mem::take(&mut self.line);
            self.take_line(&line[done..end]);
            self.line = line;
            done = end;
        }
        self.line.drain(..done);
        // A line is held whole only up to the decoder's own bound; past it
        // the line goes on as plain text, so memory stays bounded whatever
        // the agent prints on one line.
        if self.line.len() > LINE_HOLD {
            let line = std::mem::take(&mut self.line);
            self.take_line(&line);
        }
        &self.out
    }

    /// What is still held back, redacted: the end of the stream.
    pub(crate) fn finish(&mut self) -> &[u8] {
        self.out.clear();
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            self.take_line(&line);
        }
        let all = self.held.len();
        self.drain(all);
        &self.out
    }

    fn take_line(&mut self, line: &[u8]) {
        // Most lines hold no secret: as they are, with no JSON parse. (With
        // nothing held back, a whole line and no value spanning lines, no
        // secret begins here to end in a later line.)
        if self.held.is_empty()
            && !self.multiline
            && line.ends_with(b"\n")
            && !self.finders.iter().any(|f| f.find(line).is_some())
        {
            self.out.extend_from_slice(line);
            return;
        }
        let text = std::str::from_utf8(line).ok();
        if self.json
            && let Some(text) = text
            && text.trim_start().starts_with('{')
            && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
        {
            let all = self.held.len();
            self.drain(all);
            let clean = redact_json_with(&self.known, text);
            self.out.extend_from_slice(clean.as_bytes());
            return;
        }
        match text {
            Some(text) => {
                let mut clean = Cow::Borrowed(text);
                for s in self.known.iter() {
                    if let Some(context) = &s.context
                        && let Cow::Owned(c) = replace_in_context(context, &clean, &s.label, "", 1)
                    {
                        clean = Cow::Owned(c);
                    }
                }
                self.held.extend_from_slice(clean.as_bytes());
            }
            None => self.held.extend_from_slice(line),
        }
        let longest = self.forms.iter().map(|(f, _)| f.len()).max().unwrap_or(1);
        let safe = self.held.len().saturating_sub(longest - 1);
        self.drain(safe);
    }

    /// Redact and append `held[..upto]` to the output (further, should a
    /// secret start before `upto` and end after it); keep the rest.
    fn drain(&mut self, upto: usize) {
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
    }
}

/// Serialized JSON with every known secret redacted inside its strings
/// (keys included): each string that holds one is decoded, redacted and
/// encoded again, so a secret with quotes, backslashes or newlines is found
/// and the structure is never touched (a secret that happens to match a
/// number or a piece of syntax is left to the strings that hold it).
pub(crate) fn redact_json(json: &str) -> Cow<'_, str> {
    match known().lock() {
        Ok(known) => redact_json_with(&known, json),
        Err(_) => Cow::Borrowed(json),
    }
}

fn redact_json_with<'t>(known: &Known, json: &'t str) -> Cow<'t, str> {
    // Mostly nothing matches: one search per secret, no decoding.
    let found = url_userinfo().is_match(json)
        || known.iter().any(|s| {
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
        // The short credential is known in context only (`MY_PASSWORD=pw`):
        // "pw" as a word of a text is kept.
        assert_eq!(
            names,
            [
                "[redacted ANTHROPIC_API_KEY]",
                "[redacted GH_TOKEN]",
                "[redacted MY_PASSWORD]"
            ]
        );
        assert!(known[2].context.is_some() && known[0].context.is_none());
        assert_eq!(
            replace_known(&known, "pw is kept, MY_PASSWORD=pw is not", true),
            "pw is kept, MY_PASSWORD=[redacted MY_PASSWORD] is not"
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
        let clean = scrub_with(&Vec::new(), text, "");
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
        assert!(matches!(
            scrub_with(&Vec::new(), plain, ""),
            Cow::Borrowed(_)
        ));
    }

    /// Issue 22: `PGPASSWORD=password`, `POSTGRES_PASSWORD=postgres` on a
    /// dev machine rewrote the plan's words in the prompt and handoff.
    #[test]
    fn common_values_are_redacted_only_where_a_secret_is_written() {
        let known = known_of(&[
            ("PGPASSWORD", "password"),
            ("POSTGRES_PASSWORD", "postgres"),
            ("API_TOKEN", "tok-12345678"),
            ("API_KEY", "abc"),
        ]);
        let words = "reset password flow for postgres users, abc";
        assert!(matches!(
            replace_known(&known, words, true),
            Cow::Borrowed(_)
        ));
        assert!(matches!(scrub_with(&known, words, ""), Cow::Borrowed(_)));
        for (text, want) in [
            (
                "PGPASSWORD=password psql -h db",
                "PGPASSWORD=[redacted PGPASSWORD] psql -h db",
            ),
            (
                "export POSTGRES_PASSWORD='postgres'",
                "export POSTGRES_PASSWORD='[redacted POSTGRES_PASSWORD]'",
            ),
            (
                "url postgres://app:postgres@localhost/postgres",
                "url postgres://app:[redacted POSTGRES_PASSWORD]@localhost/postgres",
            ),
            ("pgpassword: password", "pgpassword: [redacted PGPASSWORD]"),
            // A short value: in context too, never as a word of the text.
            ("API_KEY=abc make", "API_KEY=[redacted API_KEY] make"),
            (
                "export API_KEY=\"abc\"",
                "export API_KEY=\"[redacted API_KEY]\"",
            ),
            ("abc is abc, API_KEY=abcd", "abc is abc, API_KEY=abcd"),
            ("tok-12345678 anywhere", "[redacted API_TOKEN] anywhere"),
        ] {
            assert_eq!(replace_known(&known, text, true), want, "{text}");
        }
        // In JSON, inside strings: `{"env":{"PGPASSWORD":"password"}}` too.
        let json =
            r#"{"cmd":"PGPASSWORD=password psql","env":{"PGPASSWORD":"password"},"t":"password"}"#;
        let v: serde_json::Value = serde_json::from_str(&redact_json_with(&known, json)).unwrap();
        assert_eq!(v["cmd"], "PGPASSWORD=[redacted PGPASSWORD] psql");
        assert_eq!(v["t"], "password");
    }

    /// A value the plan holds at the start is the user's word, in context
    /// only; the plan's text is never rewritten in what quotes it.
    #[test]
    fn the_plans_own_text_is_kept_and_its_values_are_weak() {
        let mut known = known_of(&[("DB_PASSWORD", "db-2024.example")]);
        let plan =
            "- [ ] move db-2024.example to the new host\n- [ ] support bearer authentication\n";
        let prompt = format!("Take the first open item (now: {})", &plan[6..38]);
        assert_eq!(scrub_with(&known, &prompt, plan), prompt);
        assert!(scrub_with(&known, &prompt, "").contains("[redacted DB_PASSWORD]"));
        weaken_found_in(&mut known, plan);
        assert_eq!(replace_known(&known, &prompt, true), prompt);
        assert_eq!(
            replace_known(&known, "DB_PASSWORD=db-2024.example", true),
            "DB_PASSWORD=[redacted DB_PASSWORD]"
        );
    }

    /// Issue 22: "support bearer authentication" became "support Bearer
    /// [redacted]".
    #[test]
    fn bearer_followed_by_a_word_is_not_a_token() {
        let none = Vec::new();
        for words in [
            "support bearer authentication in the API client",
            "the Bearer authorization header",
            "bearer tokens are documented",
        ] {
            assert_eq!(scrub_with(&none, words, ""), words);
        }
        assert_eq!(
            scrub_with(
                &none,
                "Authorization: bearer eyJhbGciOiJIUzI1NiJ9.e30.abc123",
                ""
            ),
            "Authorization: bearer [redacted]"
        );
    }

    #[test]
    fn a_line_longer_than_the_hold_is_not_buffered_whole() {
        let known = known_of(&[("API_KEY", "sk-0123456789")]);
        let mut r = StreamRedactor::of(&known);
        r.json = true;
        let mut chunk = vec![b'a'; 64 << 10];
        chunk[100..113].copy_from_slice(b"sk-0123456789");
        let mut out = Vec::new();
        let mut most = 0;
        for _ in 0..(16 << 20) / chunk.len() {
            out.extend_from_slice(r.feed(&chunk));
            most = most.max(r.line.len() + r.held.len());
        }
        out.extend_from_slice(r.finish());
        assert!(most <= LINE_HOLD + chunk.len(), "held {most} bytes");
        assert_eq!(
            out.len(),
            256 * (64 << 10) - 256 * 13 + 256 * b"[redacted API_KEY]".len()
        );
        assert!(!out.windows(13).any(|w| w == b"sk-0123456789"));
    }

    /// Issue 22: `MY_TOKEN=assistant` rewrote `"type":"assistant"` in the
    /// raw transcript, and a takeover found nothing in it.
    #[test]
    fn a_json_lines_stream_is_redacted_inside_strings_only() {
        let known = known_of(&[
            ("MY_TOKEN", "assistant"),
            ("OTHER_TOKEN", "type\":\"x-1234"),
            ("API_KEY", "sk-0123456789"),
        ]);
        let lines = [
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"key sk-0123456789, MY_TOKEN=assistant"}]}}"#,
            "not json: sk-0123456789 and assistant",
            r#"{"type":"result","result":"done"}"#,
        ];
        let stream = lines.join("\n") + "\n";
        let bytes = stream.as_bytes();
        for cut in 0..=bytes.len() {
            let mut r = StreamRedactor::of(&known);
            r.json = true;
            let mut out = r.feed(&bytes[..cut]).to_vec();
            out.extend_from_slice(r.feed(&bytes[cut..]));
            out.extend_from_slice(r.finish());
            let out = String::from_utf8(out).unwrap();
            let got: Vec<&str> = out.lines().collect();
            let first: serde_json::Value = serde_json::from_str(got[0]).unwrap();
            assert_eq!(first["type"], "assistant", "cut at {cut}");
            assert_eq!(
                first["message"]["content"][0]["text"],
                "key [redacted API_KEY], MY_TOKEN=[redacted MY_TOKEN]"
            );
            assert_eq!(got[1], "not json: [redacted API_KEY] and assistant");
            assert_eq!(got[2], lines[2]);
        }
    }

    /// A line that holds no known value goes out whole as soon as it is
    /// complete, unparsed; one after a line that left bytes held back, or
    /// with a value that spans lines known, takes the full path.
    #[test]
    fn a_line_without_a_secret_is_passed_whole() {
        let known = known_of(&[("API_KEY", "sk-0123456789")]);
        for line in [
            "{\"type\":\"result\",\"result\":\"done\"}\n",
            "plain text, no JSON\n",
            "{\"truncated\":\n",
        ] {
            let mut r = StreamRedactor::of(&known);
            r.json = true;
            assert_eq!(r.feed(line.as_bytes()), line.as_bytes());
            assert_eq!(r.finish(), b"");
        }
        // After a plain line with a secret, whose tail may still be held.
        let mut r = StreamRedactor::of(&known);
        r.json = true;
        let mut out = r.feed(b"oops sk-0123\n").to_vec();
        out.extend_from_slice(r.feed(b"{\"a\":1}\n"));
        out.extend_from_slice(r.finish());
        assert_eq!(out, b"oops sk-0123\n{\"a\":1}\n");
        let pem = "-----BEGIN KEY-----\nabcdefgh\n-----END KEY-----";
        let mut r = StreamRedactor::of(&known_of(&[("DEPLOY_KEY", pem)]));
        let mut out = r.feed(b"x -----BEGIN KEY-----\n").to_vec();
        out.extend_from_slice(r.feed(b"abcdefgh\n-----END KEY----- y\n"));
        out.extend_from_slice(r.finish());
        assert_eq!(out, b"x [redacted DEPLOY_KEY] y\n");
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
            // A one-word value (letters only, short) is common: redacted in
            // context only, by design (`common_values_are_redacted_only_where_a_secret_is_written`).
            proptest::prop_assume!(!is_common(&secret));
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

    /// Issue 34: `SLACK_WEBHOOK_URL`, `DATABASE_URL` with a password,
    /// `MYSQL_PWD` and `SENTRY_DSN` were not secrets. By rule: a name's
    /// word (`WEBHOOK`, `DSN`, `PWD` beside others), or a value that is a
    /// URL with a user or password or a token shape, whatever its name.
    #[test]
    fn urls_with_credentials_webhooks_and_dsns_are_secrets_by_rule() {
        for name in [
            "SLACK_WEBHOOK_URL",
            "SENTRY_DSN",
            "MYSQL_PWD",
            "DISCORD_WEBHOOK",
        ] {
            assert!(is_credential_name(name), "{name}");
        }
        for name in ["PWD", "OLDPWD", "DATABASE_URL", "HOOKS_DIR"] {
            assert!(!is_credential_name(name), "{name}");
        }
        let known = known_of(&[
            ("DATABASE_URL", "postgres://u:pw@h/db"),
            ("REDIS", "redis://:longer-pass-42@cache:6379"),
            (
                "ERRORS_AT",
                "https://abcdef0123456789@o1.ingest.sentry.io/42",
            ),
            (
                "NOTIFY",
                "https://hooks.slack.com/services/T0AB/B0CD/xyzXYZ0123",
            ),
            ("MYSQL_PWD", "hunter2-hunter2"),
            ("APP_URL", "https://example.com/app"),
            ("HOME", "/home/u"),
        ]);
        let labels: Vec<&str> = known.iter().map(|s| s.label.as_str()).collect();
        for name in ["DATABASE_URL", "REDIS", "ERRORS_AT", "NOTIFY", "MYSQL_PWD"] {
            assert!(
                labels.contains(&format!("[redacted {name}]").as_str()),
                "{name}: {labels:?}"
            );
        }
        assert!(
            !labels
                .iter()
                .any(|l| l.contains("APP_URL") || l.contains("HOME"))
        );
        // The whole URL, and its short password where a URL holds it.
        assert_eq!(
            replace_known(
                &known,
                "db at postgres://u:pw@h/db and mysql://root:pw@x",
                true
            ),
            "db at [redacted DATABASE_URL] and mysql://root:[redacted DATABASE_URL]@x"
        );
        assert_eq!(replace_known(&known, "pw is a word", true), "pw is a word");
        // A URL's password wherever it comes from, in text and in JSON.
        let none = Vec::new();
        assert_eq!(
            replace_known(&none, "use postgres://app:s3cr3t!@db:5432/x now", true),
            "use postgres://app:[redacted password]@db:5432/x now"
        );
        let json = r#"{"message":"git clone https://bob:tok123@git.example/r.git"}"#;
        let v: serde_json::Value = serde_json::from_str(&redact_json_with(&none, json)).unwrap();
        assert_eq!(
            v["message"],
            "git clone https://bob:[redacted password]@git.example/r.git"
        );
        assert!(matches!(
            replace_known(
                &none,
                "see https://docs.rs/regex and git@github.com:a/b",
                true
            ),
            Cow::Borrowed(_)
        ));
        assert!(
            scrub_with(
                &none,
                "hook https://hooks.slack.com/services/T0/B0/abcdef",
                ""
            )
            .contains("[redacted Slack webhook]")
        );
    }

    /// The commit filter's rule: a file holding a known value or a token
    /// shape, new since the file as last committed.
    #[test]
    fn a_file_with_a_secret_is_named_with_its_reason() {
        let known = known_of(&[
            ("GITHUB_TOKEN", "tok-0123456789-abc"),
            ("DATABASE_URL", "postgres://u:pw@h/db"),
            ("PGPASSWORD", "password"),
        ]);
        let why = |content: &str, before: Option<&str>| {
            secret_in_with(&known, content.as_bytes(), before.map(str::as_bytes))
        };
        assert_eq!(
            why("token = \"tok-0123456789-abc\"\n", None).as_deref(),
            Some("holds a secret (the value of GITHUB_TOKEN)")
        );
        assert_eq!(
            why("url: postgres://u:pw@h/db\n", None).as_deref(),
            Some("holds a secret (the value of DATABASE_URL)")
        );
        assert_eq!(
            why("x\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n", None).as_deref(),
            Some("holds a secret (private key)")
        );
        assert_eq!(
            why(
                "const K: &str = \"ghp_0123456789abcdefghijABCDEFGHIJ\";",
                None
            )
            .as_deref(),
            Some("holds a secret (GitHub token)")
        );
        assert!(
            why(
                "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc123",
                None
            )
            .is_some()
        );
        // Words are not secrets; a common value only where a secret is written.
        for clean in [
            "reset the password flow; bearer authentication",
            "see https://docs.rs and postgres://localhost/db",
            "fn main() {}",
        ] {
            assert_eq!(why(clean, None), None, "{clean}");
        }
        assert!(why("PGPASSWORD=password psql", None).is_some());
        // Already in the committed file: no new leak (a test fixture).
        let fixture = "let fake = \"ghp_0123456789abcdefghijABCDEFGHIJ\";\n";
        assert_eq!(why(&format!("{fixture}// more\n"), Some(fixture)), None);
        assert!(why("x = \"tok-0123456789-abc\"", Some("y = 1")).is_some());
        // Not UTF-8: still scanned.
        let mut bytes = vec![0xff, 0x00, 0xfe];
        bytes.extend_from_slice(b"AKIAIOSFODNN7EXAMPLE");
        assert_eq!(
            secret_in_with(&known, &bytes, None).as_deref(),
            Some("holds a secret (AWS key)")
        );
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
