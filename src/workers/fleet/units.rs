//! The plan's items as the fleet's units of work (pure): each has a key
//! that names its refs on every machine, and the merger checks it off.
//!
//! A unit is an item together with the checkbox items indented under it
//! (its sub-items stay with it, on one worker). The key is a hash of the
//! item's text (`i-` + 12 hex digits), with the number of earlier items of
//! the same text mixed in, so two identical lines are two units; a key
//! does not move when lines are added above the item.

use sha2::{Digest, Sha256};

use crate::plan::Plan;

/// One unit of work on the run branch's plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unit {
    pub key: String,
    /// The item's text.
    pub text: String,
    /// The indented lines under it (its notes and sub-items), as written.
    pub body: String,
    /// Its line and its sub-items' lines (1-based).
    pub lines: Vec<usize>,
    pub done: bool,
}

/// The units of `text` (a plan), in plan order.
pub(crate) fn units(text: &str) -> Vec<Unit> {
    let plan = Plan::parse(text);
    let lines: Vec<&str> = text.lines().collect();
    let indent = |line: usize| {
        let l = lines.get(line - 1).copied().unwrap_or_default();
        l.len() - l.trim_start().len()
    };
    let mut out: Vec<Unit> = Vec::new();
    let mut seen: std::collections::HashMap<&str, u32> = Default::default();
    let mut parent_indent: Option<usize> = None;
    for item in &plan.items {
        let at = indent(item.line);
        if let (Some(p), Some(unit)) = (parent_indent, out.last_mut())
            && at > p
        {
            unit.lines.push(item.line);
            unit.done &= item.done;
            continue;
        }
        parent_indent = Some(at);
        let n = seen.entry(item.text.as_str()).or_default();
        let mut hash = Sha256::new();
        hash.update(item.text.as_bytes());
        if *n > 0 {
            hash.update(format!("\0{n}").as_bytes());
        }
        *n += 1;
        let hex: String = hash.finalize()[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        out.push(Unit {
            key: format!("i-{hex}"),
            text: item.text.clone(),
            body: body_under(&lines, item.line, at),
            lines: vec![item.line],
            done: item.done,
        });
    }
    out
}

/// The lines under the item at `line` indented deeper than `at` (blank
/// lines between them kept, trailing ones dropped).
fn body_under(lines: &[&str], line: usize, at: usize) -> String {
    let mut body: Vec<&str> = Vec::new();
    for l in lines.iter().skip(line) {
        let t = l.trim_start();
        if !t.is_empty() && l.len() - t.len() <= at {
            break;
        }
        body.push(l.trim_end());
    }
    while body.last().is_some_and(|l| l.is_empty()) {
        body.pop();
    }
    body.join("\n")
}

/// `text` with the unit's item and sub-items marked done (`[x]`); the rest
/// of the file byte for byte as it was.
pub(crate) fn check_off(text: &str, unit: &Unit) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if unit.lines.contains(&(i + 1)) {
            out.push_str(&mark_done(line));
        } else {
            out.push_str(line);
        }
    }
    out
}

fn mark_done(line: &str) -> String {
    for open in ["[ ]", "[~]"] {
        if let Some(at) = line.find(open) {
            return format!("{}[x]{}", &line[..at], &line[at + open.len()..]);
        }
    }
    line.to_string()
}

/// The one-item plan a worker's loop runs on: the item, its sub-items and
/// notes, and what the worker wants the agent to know (a takeover).
pub(crate) fn item_plan(title: Option<&str>, unit: &Unit, note: Option<&str>) -> String {
    let mut out = format!("# {}\n\n", title.unwrap_or("Fleet item"));
    if let Some(note) = note {
        out.push_str(note.trim_end());
        out.push_str("\n\n");
    }
    out.push_str(&format!("- [ ] {}\n", unit.text));
    if !unit.body.is_empty() {
        out.push_str(&unit.body);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = "# Night\n\n- [ ] one\n- [x] two\n- [ ] parent\n  - [ ] child a\n  - [x] child b\n  a note\n- [ ] one\n";

    #[test]
    fn sub_items_ride_with_their_parent_and_twins_get_their_own_key() {
        let u = units(PLAN);
        let texts: Vec<&str> = u.iter().map(|u| u.text.as_str()).collect();
        assert_eq!(texts, ["one", "two", "parent", "one"]);
        assert_eq!(u[2].lines, [5, 6, 7]);
        assert!(!u[2].done);
        assert!(u[1].done);
        assert_ne!(u[0].key, u[3].key);
        assert!(
            u.iter()
                .all(|u| u.key.len() == 14 && u.key.starts_with("i-"))
        );
        // Keys do not move when lines are added above.
        let moved = units(&format!("# Night\n\nintro\n\n{}", &PLAN[9..]));
        assert_eq!(moved[2].key, u[2].key);
    }

    #[test]
    fn checking_off_marks_the_unit_and_nothing_else() {
        let u = units(PLAN);
        let after = check_off(PLAN, &u[2]);
        assert_eq!(
            after,
            "# Night\n\n- [ ] one\n- [x] two\n- [x] parent\n  - [x] child a\n  - [x] child b\n  a note\n- [ ] one\n"
        );
        assert!(units(&after)[2].done);
        assert!(!units(&after)[3].done);
    }

    #[test]
    fn the_item_plan_carries_the_item_its_sub_items_and_a_note() {
        let u = units(PLAN);
        let p = item_plan(Some("Night"), &u[2], Some("Taken over from w1."));
        assert_eq!(
            p,
            "# Night\n\nTaken over from w1.\n\n- [ ] parent\n  - [ ] child a\n  - [x] child b\n  a note\n"
        );
    }
}
