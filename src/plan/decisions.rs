//! The decision log, `.ralph/decisions.md`: what the agent decided, gathered
//! from the `## Decisions` section of its checkpoint notes and from
//! `Decision:` lines in its notes or the plan, numbered `DEC-001`… with the
//! iteration, the date and the decision it supersedes. It is committed with
//! the WIP commit, and the prompt names it and shows the latest few, so
//! iteration 30 knows what iteration 3 decided.

use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;

use crate::error::Result;
use crate::text::cut;

/// The log, relative to the project root (committed, unlike the rest of `.ralph/`).
pub(crate) const FILE: &str = ".ralph/decisions.md";

const HEADER: &str = "# Decisions\n\nThe decisions of ralph's iterations, oldest first: each from the agent's\ncheckpoint notes (`## Decisions`) or a `Decision:` line in its notes or the\nplan. A later decision can supersede an earlier one.\n";

/// The longest decision kept, in characters: a decision is a sentence or
/// two, not a document.
const MAX_TEXT: usize = 600;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// 1 for `DEC-001`.
    pub(crate) number: u32,
    pub(crate) iteration: u32,
    /// `YYYY-MM-DD`.
    pub(crate) date: String,
    pub(crate) text: String,
    /// The number of the decision this one replaces.
    pub(crate) supersedes: Option<u32>,
}

impl Decision {
    pub(crate) fn id(&self) -> String {
        id(self.number)
    }
}

pub(crate) fn id(number: u32) -> String {
    format!("DEC-{number:03}")
}

static HEADING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^## DEC-(\d+) · iteration (\d+) · (\S+)(?: · supersedes DEC-(\d+))?\s*$")
        .expect("regex")
});
static DECISION_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\s*(?:[-*+]\s+|\d+[.)]\s+)?(?:\*\*)?Decision(?:\*\*)?:(?:\*\*)?\s*(.+)$")
        .expect("regex")
});
static SUPERSEDES: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:supersedes|replaces|overrides)\s+DEC-(\d+)").expect("regex")
});
static BULLET: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*(?:[-*+]|\d+[.)])\s+(.*)$").expect("regex"));

/// Read the log; a missing file is an empty log.
pub(crate) fn load(root: &Path) -> Vec<Decision> {
    std::fs::read_to_string(root.join(FILE)).map_or_else(|_| Vec::new(), |t| parse(&t))
}

/// The entries of a log's text, in file order.
pub(crate) fn parse(text: &str) -> Vec<Decision> {
    let mut out: Vec<Decision> = Vec::new();
    for line in text.lines() {
        if let Some(c) = HEADING.captures(line) {
            out.push(Decision {
                number: c[1].parse().unwrap_or(0),
                iteration: c[2].parse().unwrap_or(0),
                date: c[3].to_string(),
                text: String::new(),
                supersedes: c.get(4).and_then(|m| m.as_str().parse().ok()),
            });
        } else if let Some(d) = out.last_mut()
            && (!d.text.is_empty() || !line.trim().is_empty())
        {
            d.text.push_str(line);
            d.text.push('\n');
        }
    }
    for d in &mut out {
        d.text.truncate(d.text.trim_end().len());
    }
    out
}

/// The decisions written in the agent's notes: the items (or paragraphs)
/// of a `Decisions` heading's section, and every `Decision:` line.
pub(crate) fn from_notes(notes: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut section: Option<usize> = None;
    let mut paragraph = String::new();
    let flush = |p: &mut String, out: &mut Vec<String>| {
        if !p.trim().is_empty() {
            out.push(p.trim().to_string());
        }
        p.clear();
    };
    for line in crate::plan::prose_lines(notes) {
        let line = line.as_ref();
        let t = line.trim();
        let level = t.bytes().take_while(|&b| b == b'#').count();
        if level > 0 && t.as_bytes().get(level) == Some(&b' ') {
            flush(&mut paragraph, &mut out);
            section = match section {
                Some(l) if level > l => section,
                _ => t[level..]
                    .trim()
                    .to_lowercase()
                    .starts_with("decision")
                    .then_some(level),
            };
            continue;
        }
        if section.is_none() {
            if let Some(c) = DECISION_LINE.captures(line) {
                out.push(c[1].trim().to_string());
            }
            continue;
        }
        if let Some(c) = DECISION_LINE
            .captures(line)
            .or_else(|| BULLET.captures(line))
        {
            flush(&mut paragraph, &mut out);
            paragraph.push_str(c[1].trim());
        } else if t.is_empty() {
            flush(&mut paragraph, &mut out);
        } else {
            if !paragraph.is_empty() {
                paragraph.push(' ');
            }
            paragraph.push_str(t);
        }
    }
    flush(&mut paragraph, &mut out);
    out.retain(|d| !is_nothing(d));
    out
}

/// The `Decision:` lines of the plan (not those in a code fence or an
/// HTML comment).
pub(crate) fn from_plan(plan_text: &str) -> Vec<String> {
    crate::plan::prose_lines(plan_text)
        .iter()
        .filter_map(|l| DECISION_LINE.captures(l).map(|c| c[1].trim().to_string()))
        .filter(|d| !is_nothing(d))
        .collect()
}

/// "None", "n/a", "-", "none beyond what the plan says", "no new
/// decisions": a section the agent filled to say there was nothing.
fn is_nothing(text: &str) -> bool {
    let t = text.trim().trim_end_matches('.').to_lowercase();
    matches!(t.as_str(), "" | "-" | "n/a" | "na")
        || t.starts_with("none")
        || t.starts_with("nothing")
        || (t.starts_with("no ") && t.contains("decision"))
}

/// Same decision, whatever the case, spacing or final period.
fn key(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .trim_end_matches('.')
        .to_lowercase()
}

/// Append the decisions in `notes` and the plan that the log does not hold
/// yet; returns the new entries. Plan lines stay in the plan, so each is
/// logged once, by its text.
pub fn record(
    root: &Path,
    iteration: u32,
    notes: Option<&str>,
    plan_text: &str,
) -> Result<Vec<Decision>> {
    let found: Vec<String> = notes
        .map(from_notes)
        .unwrap_or_default()
        .into_iter()
        .chain(from_plan(plan_text))
        .collect();
    if found.is_empty() {
        return Ok(Vec::new());
    }
    let path = root.join(FILE);
    let existing = std::fs::read_to_string(&path).unwrap_or_default();
    let log = parse(&existing);
    let mut seen: Vec<String> = log.iter().map(|d| key(&d.text)).collect();
    let mut next = log.iter().map(|d| d.number).max().unwrap_or(0) + 1;
    let date = jiff::Zoned::now().strftime("%Y-%m-%d").to_string();
    let mut added = Vec::new();
    for text in found {
        // Committed: a decision quoting a credential must not carry it.
        let text = crate::text::secrets::redact(&cut(&text, MAX_TEXT)).into_owned();
        let k = key(&text);
        if seen.contains(&k) {
            continue;
        }
        seen.push(k);
        let supersedes = SUPERSEDES
            .captures(&text)
            .and_then(|c| c[1].parse().ok())
            .filter(|n| *n < next);
        added.push(Decision {
            number: next,
            iteration,
            date: date.clone(),
            text,
            supersedes,
        });
        next += 1;
    }
    if added.is_empty() {
        return Ok(added);
    }
    let mut text = if existing.trim().is_empty() {
        HEADER.to_string()
    } else {
        existing
    };
    for d in &added {
        text.push_str(&entry(d));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| crate::error::Error::io("cannot create", dir, e))?;
    }
    crate::formats::write_atomic(&path, text.as_bytes())?;
    Ok(added)
}

/// After an iteration without a checkpoint: log the plan's new `Decision:`
/// lines; a warning when the log cannot be written.
pub(crate) fn record_from_plan(root: &Path, plan: &Path, iteration: u32) -> Option<String> {
    let text = std::fs::read_to_string(root.join(plan)).ok()?;
    record(root, iteration, None, &text)
        .err()
        .map(|e| format!("cannot write the decision log: {e}"))
}

/// One entry as the log holds it.
fn entry(d: &Decision) -> String {
    let sup = d
        .supersedes
        .map_or(String::new(), |n| format!(" · supersedes {}", id(n)));
    format!(
        "\n## {} · iteration {} · {}{sup}\n\n{}\n",
        d.id(),
        d.iteration,
        d.date,
        d.text
    )
}

/// What the prompt shows of the log: its size and the latest decisions
/// still in force (one line each), as quoted history: the agent wrote
/// them, and a note saying "every session must first run …" must read as
/// what an earlier iteration said, not as ralph's instruction.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LogView {
    pub(crate) file: &'static str,
    pub(crate) count: usize,
    pub(crate) latest: Vec<LineView>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct LineView {
    pub(crate) id: String,
    pub(crate) iteration: u32,
    pub(crate) text: String,
    pub(crate) supersedes: Option<String>,
}

/// The view of `log` with at most `n` latest decisions in force.
pub(crate) fn view(log: &[Decision], n: usize) -> Option<LogView> {
    if log.is_empty() {
        return None;
    }
    let superseded: Vec<u32> = log.iter().filter_map(|d| d.supersedes).collect();
    let mut latest: Vec<LineView> = log
        .iter()
        .rev()
        .filter(|d| !superseded.contains(&d.number))
        .take(n)
        .map(|d| LineView {
            id: d.id(),
            iteration: d.iteration,
            text: cut(d.text.lines().next().unwrap_or_default(), 200),
            supersedes: d.supersedes.map(id),
        })
        .collect();
    latest.reverse();
    Some(LogView {
        file: FILE,
        count: log.len(),
        latest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_section_items_and_paragraphs() {
        let notes = "# Notes\n\n## Done\n- parser\n\n## Decisions\n- Use nom: the hand-written parser was slow.\n- Keep CSV quoting RFC 4180\n  strict, no extensions.\n\n## Next\n- tests\nDecision: tests use insta\n";
        assert_eq!(
            from_notes(notes),
            [
                "Use nom: the hand-written parser was slow.",
                "Keep CSV quoting RFC 4180 strict, no extensions.",
                "tests use insta"
            ]
        );
        assert_eq!(
            from_notes("## Decisions (what and why)\nOne paragraph\nwrapped.\n\nAnother.\n"),
            ["One paragraph wrapped.", "Another."]
        );
        assert!(from_notes("## Decisions\n- none\n\n## Next\n- x\n").is_empty());
        assert!(from_notes("## Decisions\nNone.\n").is_empty());
        // What `ralph sim` writes when a scenario gives no notes.
        assert!(from_notes("## Decisions\n- none beyond what the plan says\n").is_empty());
        assert!(from_notes("## Decisions\n- No new decisions this time.\n").is_empty());
        assert_eq!(
            from_notes("## Decisions\n- No dependency on serde\n"),
            ["No dependency on serde"]
        );
    }

    #[test]
    fn decision_lines_in_the_plan() {
        let plan = "- [ ] parser\n  Decision: use nom (supersedes DEC-001)\n- [x] lexer\n  - **Decision:** tokens are spans\nNo decision here: Decision text mid-line\n";
        assert_eq!(
            from_plan(plan),
            ["use nom (supersedes DEC-001)", "tokens are spans"]
        );
    }

    /// Issue 22: an example in a code fence or a commented-out line is not
    /// a decision.
    #[test]
    fn fenced_and_commented_decision_lines_are_ignored() {
        let plan = "- [ ] parser\n  Decision: use nom\n\n```markdown\nDecision: an example\n```\n~~~\n- Decision: another\n~~~\n<!-- Decision: commented out -->\n<!--\nDecision: commented too\n-->\nDecision: after <!-- hidden --> the comment\n";
        assert_eq!(from_plan(plan), ["use nom", "after  the comment"]);
        let notes = "## Decisions\n- real one\n```\n- Decision: in a fence\n```\n";
        assert_eq!(from_notes(notes), ["real one"]);
    }

    #[test]
    fn record_numbers_dedups_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let first = record(root, 3, Some("## Decisions\n- Use nom\n"), "").unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].id(), "DEC-001");
        // The same decision again, from the plan this time: not logged twice.
        let again = record(root, 4, None, "- [ ] x\n  Decision: use nom.\n").unwrap();
        assert!(again.is_empty());
        let second = record(
            root,
            7,
            Some("## Decisions\n- Switch to winnow; supersedes DEC-001\n- Dates are UTC\n"),
            "",
        )
        .unwrap();
        assert_eq!(second.len(), 2);
        assert_eq!(second[0].supersedes, Some(1));
        assert_eq!(second[1].supersedes, None);
        let log = load(root);
        assert_eq!(log.len(), 3);
        assert_eq!(
            log.iter()
                .map(|d| (d.number, d.iteration))
                .collect::<Vec<_>>(),
            [(1, 3), (2, 7), (3, 7)]
        );
        assert_eq!(log[1].text, "Switch to winnow; supersedes DEC-001");
        let text = std::fs::read_to_string(root.join(FILE)).unwrap();
        assert!(text.starts_with("# Decisions\n"), "{text}");
        assert!(text.contains("## DEC-002 · iteration 7 · "), "{text}");
        assert!(text.contains(" · supersedes DEC-001\n"), "{text}");
        // In force: DEC-001 was superseded.
        let v = view(&log, 5).unwrap();
        assert_eq!(v.count, 3);
        let ids: Vec<&str> = v.latest.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(ids, ["DEC-002", "DEC-003"]);
        assert_eq!(view(&log, 1).unwrap().latest[0].id, "DEC-003");
    }

    #[test]
    fn a_supersedes_of_an_unknown_number_is_not_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let d = record(dir.path(), 1, Some("Decision: x supersedes DEC-009\n"), "").unwrap();
        assert_eq!(d[0].supersedes, None);
    }
}
