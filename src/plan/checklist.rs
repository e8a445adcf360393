//! The plan file (`fix_plan.md`): markdown checkbox items — open `[ ]`,
//! in progress `[~]` (open, and the current item), done `[x]`, cancelled
//! `[-]` (not work: neither open nor done) — outside code fences and HTML
//! comments, and the specs it names (for the handoff's "context to reload").

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Plans larger than this are refused: they would not fit in a prompt anyway.
pub(crate) const MAX_PLAN_BYTES: u64 = 4 << 20;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    pub text: String,
    pub(crate) done: bool,
    /// 1-based line in the plan file.
    pub(crate) line: usize,
    /// Its indentation (bytes of leading white space): the items right
    /// after it that are indented deeper are its sub-items.
    #[serde(default)]
    pub(crate) indent: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The first `# heading`, if any: the run's objective.
    pub(crate) title: Option<String>,
    /// Open and done items (`[~]` ones are open).
    pub(crate) items: Vec<Item>,
    /// The indented lines under an item (its notes), by index in `items`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) notes: BTreeMap<usize, String>,
    /// Lines of the open items marked `[~]`, in progress.
    #[serde(default)]
    pub(crate) in_progress: Vec<usize>,
    /// `[-]` items: dropped from the plan, shown but never worked on.
    #[serde(default)]
    pub(crate) cancelled: Vec<Item>,
}

/// How an item is marked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Open,
    InProgress,
    Done,
    Cancelled,
}

/// The longest item text ralph takes from the plan, in characters: enough
/// for any real task; a 1 MB line would otherwise be copied into every
/// prompt, handoff, state save and status line.
pub(crate) const ITEM_MAX_CHARS: usize = 2_000;
/// The longest title (the run's objective).
const TITLE_MAX_CHARS: usize = 300;

/// An item's text as ralph carries it (prompts, events, a worker's
/// `RALPH_ITEM`): at most [`ITEM_MAX_CHARS`], saying where the rest is.
pub(crate) fn bounded_item(text: &str) -> String {
    bounded(text, ITEM_MAX_CHARS)
}

/// `text` cut to `max` characters, with a pointer to where the rest is
/// (not its line: an item keeps its text when lines are added above it).
fn bounded(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!(
            "{}… (cut by ralph at {max} characters: the whole text is in the plan)",
            &text[..at]
        ),
        None => text.to_string(),
    }
}

/// Which lines of a Markdown text are fenced code, the fences included
/// (CommonMark's rule: a fence of three or more backticks or tildes is
/// closed only by a line of the same character at least as long, with
/// nothing after it). A fence never closed is taken as text: an agent's
/// stray fence must not hide the rest of the plan's items. The one reading
/// of fences for the plan, the prompt and the workers' units.
pub(crate) fn code_lines(text: &str) -> Vec<bool> {
    let mut code = Vec::new();
    // (line, character, length) of the fence open at this point.
    let mut open: Option<(usize, char, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let run = |c: char| t.chars().take_while(|&x| x == c).count();
        match open {
            Some((_, c, len)) => {
                let n = run(c);
                if n >= len && t[n..].trim().is_empty() {
                    open = None;
                }
                code.push(true);
            }
            None => {
                let c = t.chars().next().filter(|c| matches!(c, '`' | '~'));
                let fence = c
                    .map(|c| (c, run(c)))
                    .filter(|&(c, n)| n >= 3 && !(c == '`' && t[n..].contains('`')));
                if let Some((c, n)) = fence {
                    open = Some((i, c, n));
                }
                code.push(fence.is_some());
            }
        }
    }
    if let Some((from, _, _)) = open {
        // Never closed: text again from the stray fence on, re-read.
        let rest: String = text.lines().skip(from + 1).fold(String::new(), |mut s, l| {
            s.push_str(l);
            s.push('\n');
            s
        });
        code.truncate(from);
        code.push(false);
        code.extend(code_lines(&rest));
    }
    code
}

impl Plan {
    pub fn parse(text: &str) -> Plan {
        let mut plan = Plan::default();
        let code = code_lines(text);
        let mut in_comment = false;
        // The indentation of the last item while the lines below it are its notes.
        let mut under: Option<usize> = None;
        for (i, line) in text.lines().enumerate() {
            let uncommented = outside_comments(line, &mut in_comment);
            let line = uncommented.as_ref();
            let t = line.trim_start();
            let indent = line.len() - t.len();
            let in_code = code[i];
            if under.is_some_and(|at| indent > at || t.is_empty())
                && (in_code || checkbox(t).is_none())
            {
                let note = plan.notes.entry(plan.items.len() - 1).or_default();
                note.push_str(line.trim_end());
                note.push('\n');
            } else if !t.is_empty() {
                under = None;
            }
            if in_code {
                continue;
            }
            if plan.title.is_none()
                && let Some(h) = t.strip_prefix("# ")
            {
                plan.title = Some(bounded(h.trim(), TITLE_MAX_CHARS));
                continue;
            }
            if let Some((mark, text)) = checkbox(t) {
                let item = Item {
                    text: bounded_item(text),
                    done: mark == Mark::Done,
                    line: i + 1,
                    indent,
                };
                match mark {
                    // Not work: no notes either.
                    Mark::Cancelled => plan.cancelled.push(item),
                    Mark::InProgress => {
                        plan.in_progress.push(item.line);
                        plan.items.push(item);
                        under = Some(indent);
                    }
                    Mark::Open | Mark::Done => {
                        plan.items.push(item);
                        under = Some(indent);
                    }
                }
            }
        }
        for note in plan.notes.values_mut() {
            note.truncate(note.trim_end().len());
        }
        plan.notes.retain(|_, n| !n.is_empty());
        plan
    }

    /// The notes under item `index` (its indented lines), if any.
    pub(crate) fn notes_of(&self, index: usize) -> Option<&str> {
        self.notes.get(&index).map(String::as_str)
    }

    /// Read and parse the plan; missing, binary or huge files are errors.
    pub fn load(path: &Path) -> Result<Plan> {
        Plan::read_text(path).map(|text| Plan::parse(&text))
    }

    /// The plan's text, under [`Plan::load`]'s one policy: missing, not a
    /// file, huge, binary or not UTF-8 is an error naming it.
    pub(crate) fn read_text(path: &Path) -> Result<String> {
        let meta = std::fs::metadata(path).map_err(|e| {
            let err = Error::io("cannot read the plan", path, e);
            if !path.exists() {
                return Error::usage(format!("plan file {} does not exist", path.display()))
                    .with_hint(
                        "create it with `ralph init`, or name another: `ralph run PLAN.md`",
                    );
            }
            err
        })?;
        if !meta.is_file() {
            return Err(Error::usage(format!(
                "plan {} is not a file",
                path.display()
            )));
        }
        if meta.len() > MAX_PLAN_BYTES {
            return Err(Error::usage(format!(
                "plan {} is {} bytes; plans over {} bytes are refused",
                path.display(),
                meta.len(),
                MAX_PLAN_BYTES
            ))
            .with_hint("split the plan, or keep details in specs it links to"));
        }
        let bytes = std::fs::read(path).map_err(|e| Error::io("cannot read the plan", path, e))?;
        if bytes.contains(&0) {
            return Err(Error::usage(format!(
                "plan {} looks binary (it contains NUL bytes)",
                path.display()
            )));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            Error::usage(format!(
                "plan {} is not UTF-8 text (bad byte at offset {})",
                path.display(),
                e.utf8_error().valid_up_to()
            ))
        })?;
        Ok(text)
    }

    pub fn open(&self) -> impl Iterator<Item = &Item> {
        self.items.iter().filter(|i| !i.done)
    }

    pub(crate) fn done(&self) -> impl Iterator<Item = &Item> {
        self.items.iter().filter(|i| i.done)
    }

    pub fn open_count(&self) -> usize {
        self.open().count()
    }

    pub(crate) fn done_count(&self) -> usize {
        self.done().count()
    }

    /// The item the agent is working on: the first one marked in
    /// progress, else the first open one — and of that, while it has open
    /// sub-items, its first open sub-item (a split item hands its slot to
    /// its parts; it is current again once they are all done).
    pub(crate) fn current(&self) -> Option<&Item> {
        let open = |i: &&Item| !i.done;
        let mut at = (self.items.iter())
            .position(|i| !i.done && self.in_progress.contains(&i.line))
            .or_else(|| self.items.iter().position(|i| open(&i)))?;
        while let Some(k) = self.sub_items(at).iter().position(|i| !i.done) {
            at += 1 + k;
        }
        self.items.get(at)
    }

    /// The items right after item `index` indented deeper than it: its
    /// sub-items (and theirs).
    pub(crate) fn sub_items(&self, index: usize) -> &[Item] {
        let Some(parent) = self.items.get(index) else {
            return &[];
        };
        let rest = &self.items[index + 1..];
        let n = rest.iter().take_while(|i| i.indent > parent.indent).count();
        &rest[..n]
    }

    /// Whether the open item `text` was split: it has sub-items.
    pub(crate) fn is_split(&self, text: &str) -> bool {
        (self.items.iter())
            .position(|i| i.text == text && !i.done)
            .is_some_and(|at| !self.sub_items(at).is_empty())
    }

    /// The split items above the open item `text`, nearest first, each
    /// with its number of parts (direct sub-items): empty for an item that
    /// is no part of a split.
    pub(crate) fn split_above(&self, text: &str) -> Vec<(&Item, usize)> {
        let Some(mut at) = self.items.iter().position(|i| i.text == text && !i.done) else {
            return Vec::new();
        };
        let mut above = Vec::new();
        while let Some(parent) = (0..at)
            .rev()
            .find(|&p| self.items[p].indent < self.items[at].indent)
        {
            let parts = self.sub_items(parent);
            let depth = parts.iter().map(|i| i.indent).min().unwrap_or(0);
            let direct = parts.iter().filter(|i| i.indent == depth).count();
            above.push((&self.items[parent], direct.max(1)));
            at = parent;
        }
        above
    }

    /// What templates see of the plan: every item in file order, with its
    /// mark (` `, `~`, `x`, `-`).
    pub(crate) fn view(&self) -> PlanView<'_> {
        let mut items: Vec<ItemView<'_>> = self
            .items
            .iter()
            .map(|i| {
                let (mark, status) = if i.done {
                    ("x", "done")
                } else if self.in_progress.contains(&i.line) {
                    ("~", "in_progress")
                } else {
                    (" ", "open")
                };
                ItemView::of(i, mark, status)
            })
            .chain(
                self.cancelled
                    .iter()
                    .map(|i| ItemView::of(i, "-", "cancelled")),
            )
            .collect();
        items.sort_by_key(|i| i.line);
        PlanView {
            items,
            done_count: self.done_count(),
            open_count: self.open_count(),
            in_progress: &self.in_progress,
            in_progress_count: self.in_progress.len(),
            cancelled_count: self.cancelled.len(),
            current: self.current().map(|i| i.text.as_str()),
            current_parts_done: self.current().is_some_and(|i| self.is_split(&i.text)),
        }
    }

    /// Items done in `self` that were open in `before`.
    pub(crate) fn newly_done(&self, before: &Plan) -> Vec<String> {
        self.done()
            .filter(|i| before.open().any(|b| b.text == i.text))
            .map(|i| i.text.clone())
            .collect()
    }
}

#[derive(Debug, Serialize)]
pub(crate) struct PlanView<'a> {
    pub(crate) items: Vec<ItemView<'a>>,
    pub(crate) done_count: usize,
    /// Open items, those in progress included.
    pub(crate) open_count: usize,
    /// Lines of the items in progress (`[~]`).
    pub(crate) in_progress: &'a [usize],
    pub(crate) in_progress_count: usize,
    pub(crate) cancelled_count: usize,
    pub(crate) current: Option<&'a str>,
    /// The current item was split and its sub-items are all done: what is
    /// left is to check it as a whole and tick it.
    pub(crate) current_parts_done: bool,
}

#[derive(Debug, Serialize)]
pub(crate) struct ItemView<'a> {
    pub(crate) text: &'a str,
    pub(crate) done: bool,
    pub(crate) line: usize,
    /// The checkbox's mark: " ", "~", "x" or "-".
    pub(crate) mark: &'static str,
    /// "open", "in_progress", "done" or "cancelled".
    pub(crate) status: &'static str,
}

impl<'a> ItemView<'a> {
    fn of(item: &'a Item, mark: &'static str, status: &'static str) -> ItemView<'a> {
        ItemView {
            text: &item.text,
            done: item.done,
            line: item.line,
            mark,
            status,
        }
    }
}

/// The lines of a Markdown text that are prose: outside code fences, their
/// HTML comments removed (a `Decision:` line in an example block or a
/// commented-out note is not one).
pub(crate) fn prose_lines(text: &str) -> Vec<std::borrow::Cow<'_, str>> {
    let code = code_lines(text);
    let mut in_comment = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = outside_comments(line, &mut in_comment);
        if !code[i] {
            out.push(line);
        }
    }
    out
}

/// `line` without its HTML comments (`<!-- … -->`, which may span lines:
/// `in_comment` carries that over). A checkbox inside one is not an item.
fn outside_comments<'l>(line: &'l str, in_comment: &mut bool) -> std::borrow::Cow<'l, str> {
    if !*in_comment && !line.contains("<!--") {
        return std::borrow::Cow::Borrowed(line);
    }
    let mut out = String::new();
    let mut rest = line;
    loop {
        if *in_comment {
            match rest.find("-->") {
                Some(end) => {
                    rest = &rest[end + 3..];
                    *in_comment = false;
                }
                None => break,
            }
        } else {
            match rest.find("<!--") {
                Some(start) => {
                    out.push_str(&rest[..start]);
                    rest = &rest[start + 4..];
                    *in_comment = true;
                }
                None => {
                    out.push_str(rest);
                    break;
                }
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `- [ ] text`, `* [x] text`, `1. [X] text`, `- [~] text`, `- [-] text`
/// → (mark, text).
fn checkbox(line: &str) -> Option<(Mark, &str)> {
    let rest = if let Some(r) = line.strip_prefix(['-', '*', '+']) {
        r
    } else {
        let digits = line.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        line[digits..].strip_prefix(['.', ')'])?
    };
    let rest = rest.strip_prefix(' ')?.trim_start();
    let mark = rest.get(..3)?;
    let mark = match mark {
        "[ ]" => Mark::Open,
        "[x]" | "[X]" => Mark::Done,
        "[~]" => Mark::InProgress,
        "[-]" => Mark::Cancelled,
        _ => return None,
    };
    let text = rest[3..].trim();
    (!text.is_empty()).then_some((mark, text))
}

/// Files a plan points at that the next session should reload: markdown
/// links and backticked paths that exist under `root`, plus CLAUDE.md.
pub(crate) fn context_files(root: &Path, plan_text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for candidate in ["CLAUDE.md", "AGENTS.md"] {
        if root.join(candidate).is_file() {
            out.push(candidate.to_string());
        }
    }
    let link = regex::Regex::new(r"\]\(([^)\s#]+)\)|`([^`\s]+\.[A-Za-z0-9]+)`").expect("regex");
    for cap in link.captures_iter(plan_text) {
        let Some(m) = cap.get(1).or_else(|| cap.get(2)) else {
            continue;
        };
        let path = m.as_str().trim_start_matches("./");
        if path.contains("://") || out.iter().any(|p| p == path) {
            continue;
        }
        if root.join(path).is_file() {
            out.push(path.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_items_title_and_lines() {
        let p = Plan::parse(
            "# Ship the parser\n\nIntro text.\n- [x] tokenizer\n- [ ] parser  \n  * [X] nested done\n1. [ ] numbered\n- [] not an item\n- plain bullet\n",
        );
        assert_eq!(p.title.as_deref(), Some("Ship the parser"));
        assert_eq!(
            p.items,
            vec![
                Item {
                    text: "tokenizer".into(),
                    done: true,
                    line: 4,
                    indent: 0
                },
                Item {
                    text: "parser".into(),
                    done: false,
                    line: 5,
                    indent: 0
                },
                Item {
                    text: "nested done".into(),
                    done: true,
                    line: 6,
                    indent: 2
                },
                Item {
                    text: "numbered".into(),
                    done: false,
                    line: 7,
                    indent: 0
                },
            ]
        );
        assert_eq!(p.current().unwrap().text, "parser");
        assert_eq!((p.open_count(), p.done_count()), (2, 2));
    }

    #[test]
    fn an_item_with_open_sub_items_hands_its_slot_to_the_first() {
        // (plan, current) — issue 23 case 2: a split parent is never current
        // while a part of it is open.
        let table: &[(&str, &str)] = &[
            (
                "- [ ] big\n  - [ ] part a\n  - [ ] part b\n- [ ] next\n",
                "part a",
            ),
            (
                "- [ ] big\n  - [x] part a\n  - [ ] part b\n- [ ] next\n",
                "part b",
            ),
            // every part done: the parent again (to be checked off)
            (
                "- [ ] big\n  - [x] part a\n  - [x] part b\n- [ ] next\n",
                "big",
            ),
            // nested twice
            (
                "- [ ] big\n  - [ ] part a\n    - [ ] a.1\n- [ ] next\n",
                "a.1",
            ),
            // in progress on the parent: still its first open part
            ("- [ ] first\n- [~] big\n\t- [ ] part a\n", "part a"),
            // a done parent's open parts are not its slot (the first open item is)
            ("- [x] done\n  - [ ] stray\n- [ ] next\n", "stray"),
            // a sibling, not a sub-item
            ("- [ ] big\n- [ ] part a\n", "big"),
        ];
        for (plan, want) in table {
            let p = Plan::parse(plan);
            assert_eq!(p.current().unwrap().text, *want, "{plan:?}");
        }
        let p = Plan::parse("- [ ] big\n  - [x] part a\n- [ ] next\n");
        assert!(p.is_split("big"));
        assert!(!p.is_split("next"));
        assert_eq!(p.sub_items(0).len(), 1);
    }

    #[test]
    fn the_split_items_above_a_part() {
        // (plan, item, [(split item above, its parts)], nearest first)
        type Above = &'static [(&'static str, usize)];
        let table: &[(&str, &str, Above)] = &[
            (
                "- [ ] big\n  - [ ] a\n  - [ ] b\n- [ ] next\n",
                "b",
                &[("big", 2)],
            ),
            ("- [ ] big\n  - [ ] a\n  - [ ] b\n- [ ] next\n", "big", &[]),
            ("- [ ] big\n  - [ ] a\n  - [ ] b\n- [ ] next\n", "next", &[]),
            // parts of parts: the nested ones do not count as the parent's parts
            (
                "- [ ] big\n  - [ ] a\n    - [ ] a.1\n    - [ ] a.2\n    - [ ] a.3\n  - [ ] b\n",
                "a.2",
                &[("a", 3), ("big", 2)],
            ),
            // a done item is no part of the plan's work
            ("- [ ] big\n  - [x] a\n", "a", &[]),
            // siblings are not parts
            ("- [ ] big\n- [ ] a\n", "a", &[]),
        ];
        for (plan, item, want) in table {
            let p = Plan::parse(plan);
            let got: Vec<(&str, usize)> = (p.split_above(item).into_iter())
                .map(|(i, n)| (i.text.as_str(), n))
                .collect();
            assert_eq!(got, *want, "{plan:?} {item}");
        }
    }

    #[test]
    fn commented_out_items_are_not_items() {
        let p = Plan::parse(
            "- [ ] real <!-- a note -->\n<!-- - [ ] hidden -->\n<!--\n- [ ] hidden too\n-->\n- [x] done\n",
        );
        let texts: Vec<&str> = p.items.iter().map(|i| i.text.as_str()).collect();
        assert_eq!(texts, ["real", "done"]);
        assert_eq!(p.items[1].line, 6);
        // Every open item checked: the plan is complete.
        let done = Plan::parse("<!--\n- [ ] example\n-->\n- [x] a\n");
        assert_eq!(done.open_count(), 0);
    }

    #[test]
    fn in_progress_is_open_and_current_cancelled_is_neither() {
        let p = Plan::parse("- [ ] a\n- [~] b\n- [-] c\n- [x] d\n");
        assert_eq!((p.open_count(), p.done_count()), (2, 1));
        assert_eq!(p.current().unwrap().text, "b");
        let view = p.view();
        let marks: Vec<(&str, &str, &str)> = view
            .items
            .iter()
            .map(|i| (i.mark, i.text, i.status))
            .collect();
        assert_eq!(
            marks,
            [
                (" ", "a", "open"),
                ("~", "b", "in_progress"),
                ("-", "c", "cancelled"),
                ("x", "d", "done")
            ]
        );
        assert_eq!((view.in_progress_count, view.cancelled_count), (1, 1));
        // Only cancelled and done items left: nothing is open.
        assert_eq!(Plan::parse("- [-] c\n- [x] d\n").open_count(), 0);
    }

    #[test]
    fn indented_lines_are_the_notes_of_the_item_above() {
        let p = Plan::parse(
            "- [ ] parser\n  Decision: use nom\n\n  ```\n  - [ ] not an item\n  ```\n  - [ ] nested\n    its note\n- [x] done\nplain paragraph\n  not a note\n",
        );
        let texts: Vec<&str> = p.items.iter().map(|i| i.text.as_str()).collect();
        assert_eq!(texts, ["parser", "nested", "done"]);
        assert_eq!(
            p.notes_of(0),
            Some("  Decision: use nom\n\n  ```\n  - [ ] not an item\n  ```")
        );
        assert_eq!(p.notes_of(1), Some("    its note"));
        assert_eq!(p.notes_of(2), None);
    }

    #[test]
    fn code_fences_are_not_items() {
        let p = Plan::parse("```\n- [ ] example in code\n```\n- [ ] real\n");
        assert_eq!(p.items.len(), 1);
        assert_eq!(p.items[0].text, "real");
    }

    #[test]
    fn a_fence_closes_only_with_its_own_kind_and_a_stray_one_hides_nothing() {
        let open = |text: &str| -> Vec<String> {
            Plan::parse(text)
                .items
                .iter()
                .filter(|i| !i.done)
                .map(|i| i.text.clone())
                .collect()
        };
        for (name, text, want) in [
            (
                "a longer fence around a plan example with its own fence",
                "````md\n```\n- [ ] example\n```\n````\n- [ ] real\n",
                vec!["real"],
            ),
            (
                "tildes inside backticks",
                "```\n~~~\n- [ ] example\n```\n- [ ] real\n",
                vec!["real"],
            ),
            (
                "a closing line with more after it does not close",
                "```\n```not a close\n- [ ] example\n```\n- [ ] real\n",
                vec!["real"],
            ),
            (
                "a stray fence the agent left: the items after it stay",
                "- [x] one\n```\n- [ ] two\n- [ ] three\n",
                vec!["two", "three"],
            ),
            (
                "a stray fence after a closed block",
                "```\n- [ ] example\n```\n- [ ] real\n~~~~\n- [ ] last\n",
                vec!["real", "last"],
            ),
            (
                "backticks in a backtick fence's info string: not a fence",
                "``` a`b\n- [ ] real\n",
                vec!["real"],
            ),
        ] {
            assert_eq!(open(text), want, "{name}");
        }
    }

    /// Issue 22: a 1 MB item was copied whole into the prompt (226k
    /// estimated tokens), every "Left over" block and four times into
    /// state.json.
    #[test]
    fn a_huge_item_or_title_is_cut_with_a_pointer_to_its_line() {
        let long = "x".repeat(1 << 20);
        let plan = Plan::parse(&format!("# {long}\n\n- [ ] short\n- [ ] {long}\n"));
        let item = &plan.items[1].text;
        assert!(
            item.chars().count() < ITEM_MAX_CHARS + 100,
            "{}",
            item.len()
        );
        assert!(item.ends_with("(cut by ralph at 2000 characters: the whole text is in the plan)"));
        assert!(plan.title.as_ref().unwrap().len() < 400);
        assert_eq!(plan.items[0].text, "short");
        // Cut the same way wherever it is: the item is still found by its text.
        let again = Plan::parse(&format!("- [x] {long}\n"));
        assert_eq!(again.items[0].text, plan.items[1].text);
    }

    #[test]
    fn newly_done_compares_by_text() {
        let before = Plan::parse("- [ ] a\n- [ ] b\n- [x] c\n");
        let after = Plan::parse("- [x] a\n- [ ] b\n- [x] c\n");
        assert_eq!(after.newly_done(&before), vec!["a".to_string()]);
    }

    #[test]
    fn load_refuses_missing_binary_and_non_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let e = Plan::load(&dir.path().join("nope.md")).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("does not exist"));
        std::fs::write(dir.path().join("bin.md"), b"- [ ] a\0b").unwrap();
        assert!(
            Plan::load(&dir.path().join("bin.md"))
                .unwrap_err()
                .to_string()
                .contains("binary")
        );
        std::fs::write(dir.path().join("latin.md"), b"- [ ] caf\xe9").unwrap();
        assert!(
            Plan::load(&dir.path().join("latin.md"))
                .unwrap_err()
                .to_string()
                .contains("UTF-8")
        );
        std::fs::write(dir.path().join("empty.md"), b"").unwrap();
        assert_eq!(
            Plan::load(&dir.path().join("empty.md")).unwrap(),
            Plan::default()
        );
    }

    #[test]
    fn context_files_found_in_plan() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("CLAUDE.md"), "x").unwrap();
        std::fs::create_dir(dir.path().join("specs")).unwrap();
        std::fs::write(dir.path().join("specs/parser.md"), "x").unwrap();
        let files = context_files(
            dir.path(),
            "- [ ] see [spec](specs/parser.md) and `specs/parser.md` and `missing.md` [web](https://x.y/z.md)",
        );
        assert_eq!(
            files,
            vec!["CLAUDE.md".to_string(), "specs/parser.md".into()]
        );
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_without_panic(s in "\\PC*") {
            let p = Plan::parse(&s);
            proptest::prop_assert!(p.items.iter().all(|i| !i.text.is_empty()));
        }
    }

    // ---- fuzzing: plans built from known pieces, with the items they hold ----

    use proptest::prelude::*;
    use proptest::test_runner::{Config as RunnerConfig, TestRunner};

    /// One piece of a generated plan.
    #[derive(Debug, Clone)]
    enum Piece {
        /// A checkbox item: bullet, indent, done, mark style, text.
        Item(&'static str, usize, bool, bool, String),
        Heading(String),
        Prose(String),
        /// A fenced block: whatever is inside (items too) is not an item.
        Fence(&'static str, Vec<String>),
        /// Looks like an item but is not one.
        NearMiss(&'static str),
        Blank,
    }

    /// Text that is an item's text as written: non-empty, no line break,
    /// no surrounding white space; anything else goes (brackets, backticks,
    /// markup, other scripts).
    fn item_text() -> impl Strategy<Value = String> {
        "[^\\s\\p{C}][^\\n\\r\\p{C}]{0,30}[^\\s\\p{C}]|[^\\s\\p{C}]"
    }

    fn piece() -> impl Strategy<Value = Piece> {
        prop_oneof![
            4 => (
                prop_oneof![Just("-"), Just("*"), Just("+"), Just("1."), Just("12)")],
                0usize..6,
                any::<bool>(),
                any::<bool>(),
                item_text()
            )
                .prop_map(|(b, indent, done, upper, t)| Piece::Item(b, indent, done, upper, t)),
            1 => item_text().prop_map(Piece::Heading),
            1 => "[A-Za-z][A-Za-z ,.]{0,40}".prop_map(Piece::Prose),
            1 => (
                prop_oneof![Just("```"), Just("~~~"), Just("```rust")],
                prop::collection::vec(
                    prop_oneof![item_text().prop_map(|t| format!("- [ ] {t}")), "[a-z ]{0,20}"],
                    0..4
                )
            )
                .prop_map(|(f, body)| Piece::Fence(f, body)),
            1 => prop_oneof![
                Just("- [] not an item"),
                Just("-[ ] no space"),
                Just("- [y] odd mark"),
                Just("- [ ]"),
                Just("- [ ]    "),
                Just("a. [ ] letter"),
                Just("[ ] no bullet"),
            ]
            .prop_map(Piece::NearMiss),
            1 => Just(Piece::Blank),
        ]
    }

    /// The plan's text and what parsing it must give: (text, done, line) of
    /// each item, and the title.
    fn render(pieces: &[Piece]) -> (String, Vec<(String, bool, usize)>, Option<String>) {
        let mut lines: Vec<String> = Vec::new();
        let mut items = Vec::new();
        let mut title = None;
        for p in pieces {
            match p {
                Piece::Item(bullet, indent, done, upper, text) => {
                    let mark = match (done, upper) {
                        (false, _) => " ",
                        (true, false) => "x",
                        (true, true) => "X",
                    };
                    lines.push(format!("{}{bullet} [{mark}] {text}", " ".repeat(*indent)));
                    items.push((text.clone(), *done, lines.len()));
                }
                Piece::Heading(h) => {
                    lines.push(format!("# {h}"));
                    title.get_or_insert_with(|| h.clone());
                }
                Piece::Prose(t) => lines.push(t.clone()),
                Piece::Fence(f, body) => {
                    lines.push(f.to_string());
                    lines.extend(body.iter().cloned());
                    lines.push(f[..3].to_string());
                }
                Piece::NearMiss(t) => lines.push(t.to_string()),
                Piece::Blank => lines.push(String::new()),
            }
        }
        (lines.join("\n"), items, title)
    }

    fn check_generated_plans(cases: u32) {
        let mut runner = TestRunner::new(RunnerConfig {
            cases,
            failure_persistence: None,
            ..RunnerConfig::default()
        });
        let input = (prop::collection::vec(piece(), 0..20), any::<bool>());
        runner
            .run(&input, |(pieces, crlf)| {
                let (mut text, want, title) = render(&pieces);
                if crlf {
                    text = text.replace('\n', "\r\n");
                }
                let plan = Plan::parse(&text);
                let got: Vec<(String, bool, usize)> = plan
                    .items
                    .iter()
                    .map(|i| (i.text.clone(), i.done, i.line))
                    .collect();
                prop_assert_eq!(got, want);
                prop_assert_eq!(&plan.title, &title);
                prop_assert_eq!(plan.open_count() + plan.done_count(), plan.items.len());
                // Checking every open item makes them all newly done.
                let mut done = plan.clone();
                for i in &mut done.items {
                    i.done = true;
                }
                let mut open: Vec<String> = plan.open().map(|i| i.text.clone()).collect();
                let mut newly = done.newly_done(&plan);
                open.sort();
                open.dedup();
                newly.sort();
                newly.dedup();
                prop_assert_eq!(newly, open);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn generated_plans_parse_to_their_items() {
        check_generated_plans(1000);
    }

    #[test]
    #[ignore = "long mode"]
    fn generated_plans_parse_to_their_items_long() {
        check_generated_plans(20_000);
    }

    /// Whatever bytes the plan file holds, loading it gives a plan or a
    /// bad-input error (exit 2), never a panic.
    #[test]
    fn any_plan_file_loads_or_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plan.md");
        let mut runner = TestRunner::new(RunnerConfig {
            cases: 300,
            failure_persistence: None,
            ..RunnerConfig::default()
        });
        runner
            .run(&prop::collection::vec(any::<u8>(), 0..400), |bytes| {
                std::fs::write(&path, &bytes).unwrap();
                match Plan::load(&path) {
                    Ok(p) => prop_assert!(p.items.iter().all(|i| !i.text.is_empty())),
                    Err(e) => prop_assert_eq!(e.exit_code(), 2, "{}", e),
                }
                Ok(())
            })
            .unwrap();
    }
}
