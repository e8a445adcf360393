//! Plan items → units a worker can be given (pure).
//!
//! A **unit** is a top-level checkbox item with every checkbox item
//! indented below it (its sub-items stay with it, in one worker). A unit
//! waits for others when the user marks it:
//!
//! - `- [ ] Build the API (after: Set up the database)`: an `(after: …)`
//!   suffix names other units by the start of their text (case-insensitive;
//!   several with `;`). An unknown, ambiguous or circular reference is an
//!   error at start, naming the item.
//! - `## Release (serial)`: the units under a heading ending in `(serial)`,
//!   up to the next heading of the same or a higher level, run one after
//!   another in plan order.
//!
//! A dependency is met when its unit is done in the plan (or cancelled,
//! `[-]`: not work) or merged in this run.

use std::collections::BTreeSet;

use crate::plan::Plan;

/// One assignable unit of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unit {
    /// The top-level item's text without its `(after: …)` suffix: the
    /// unit's name in state, events, branches' records and `RALPH_ITEM`.
    pub(crate) key: String,
    /// 1-based plan lines of the unit's checkbox items, the top one first.
    pub(crate) lines: Vec<usize>,
    /// The plan lines the unit spans (its items and their notes), 1-based,
    /// inclusive: what a worker's own plan holds.
    pub(crate) span: (usize, usize),
    /// Indices (in the unit list) of the units it waits for.
    pub(crate) after: Vec<usize>,
    pub(crate) state: UnitState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnitState {
    /// Some item of the unit is open.
    Open,
    /// Every item is checked.
    Done,
    /// The top item is cancelled (`[-]`).
    Cancelled,
}

/// Why a plan's units cannot be assigned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AssignError {
    /// The item whose marking is wrong.
    pub(crate) item: String,
    pub(crate) why: String,
}

impl std::fmt::Display for AssignError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "plan item \"{}\": {}", self.item, self.why)
    }
}

/// The `(after: …)` suffix of an item's text: (text without it, the names).
pub(crate) fn split_after(text: &str) -> (&str, Vec<&str>) {
    let t = text.trim_end();
    if let Some(body) = t.strip_suffix(')')
        && let Some(open) = body.rfind('(')
        && let Some(names) = body[open + 1..]
            .strip_prefix("after:")
            .or_else(|| body[open + 1..].strip_prefix("After:"))
    {
        let names = names
            .split(';')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect();
        return (body[..open].trim_end(), names);
    }
    (t, Vec::new())
}

/// A line's heading level and text, if it is a `#` heading.
fn heading(line: &str) -> Option<(usize, &str)> {
    let t = line.trim_start();
    let level = t.bytes().take_while(|b| *b == b'#').count();
    if level == 0 {
        return None;
    }
    let rest = &t[level..];
    rest.starts_with(' ')
        .then(|| (level, rest.trim()))
        .filter(|(_, h)| !h.is_empty())
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The plan's units, in plan order, with their dependencies resolved.
pub(crate) fn units(text: &str) -> Result<Vec<Unit>, AssignError> {
    let (mut units, names) = parse(text);
    resolve(&mut units, &names)?;
    Ok(units)
}

/// The units and the `(after: …)` names of each, unresolved.
fn parse(text: &str) -> (Vec<Unit>, Vec<Vec<String>>) {
    let plan = Plan::parse(text);
    let lines: Vec<&str> = text.lines().collect();
    let item_at = |line: usize| -> Option<(bool, bool)> {
        if let Some(i) = plan.items.iter().find(|i| i.line == line) {
            return Some((i.done, false));
        }
        plan.cancelled
            .iter()
            .find(|i| i.line == line)
            .map(|_| (false, true))
    };
    let mut units: Vec<Unit> = Vec::new();
    let mut names: Vec<Vec<String>> = Vec::new();
    // (heading level, index of the previous unit in the section) of the
    // serial section the walk is in.
    let mut serial: Option<(usize, Option<usize>)> = None;
    // The indentation of the current unit's top item, while lines below it
    // can still belong to it.
    let mut open_unit: Option<usize> = None;
    let code = crate::plan::code_lines(text);
    for (i, raw) in lines.iter().enumerate() {
        let n = i + 1;
        let (t, in_fence) = (raw.trim_start(), code[i]);
        if let Some((level, h)) = heading(raw).filter(|_| !in_fence) {
            open_unit = None;
            if serial.is_some_and(|(at, _)| level <= at) {
                serial = None;
            }
            if h.to_ascii_lowercase().ends_with("(serial)") {
                serial = Some((level, None));
            }
            continue;
        }
        match item_at(n) {
            Some((done, cancelled)) => {
                let depth = indent(raw);
                if let (Some(top), Some(unit)) = (open_unit, units.last_mut())
                    && depth > top
                {
                    unit.lines.push(n);
                    unit.span.1 = n;
                    if !cancelled && !done && unit.state == UnitState::Done {
                        unit.state = UnitState::Open;
                    }
                    continue;
                }
                let text = checkbox_text(raw);
                let (key, after) = split_after(text);
                let mut deps = Vec::new();
                if let Some((_, Some(prev))) = serial {
                    deps.push(prev);
                }
                let index = units.len();
                if let Some((_, prev)) = serial.as_mut() {
                    *prev = Some(index);
                }
                units.push(Unit {
                    // Bounded as the plan loader bounds items: the key goes
                    // into the worker's environment, events and status.
                    key: crate::plan::bounded_item(key),
                    lines: vec![n],
                    span: (n, n),
                    after: deps,
                    state: if cancelled {
                        UnitState::Cancelled
                    } else if done {
                        UnitState::Done
                    } else {
                        UnitState::Open
                    },
                });
                names.push(after.into_iter().map(str::to_string).collect());
                open_unit = Some(depth);
            }
            None => {
                // Notes (indented lines, blank lines) stay with the unit; a
                // line back at the unit's level ends it.
                if let (Some(top), Some(unit)) = (open_unit, units.last_mut()) {
                    if t.is_empty() || in_fence || indent(raw) > top {
                        if !t.is_empty() {
                            unit.span.1 = n;
                        }
                    } else {
                        open_unit = None;
                    }
                }
            }
        }
    }
    (units, names)
}

/// The text after an item line's checkbox.
fn checkbox_text(line: &str) -> &str {
    line.find(']').map_or(line, |at| line[at + 1..].trim())
}

/// Turn `(after: …)` names into unit indices; refuse unknown, ambiguous,
/// self and circular references.
fn resolve(units: &mut [Unit], names: &[Vec<String>]) -> Result<(), AssignError> {
    let keys: Vec<String> = units.iter().map(|u| u.key.to_lowercase()).collect();
    for (i, wanted) in names.iter().enumerate() {
        for name in wanted {
            let lower = name.to_lowercase();
            let exact: Vec<usize> = (0..keys.len()).filter(|&k| keys[k] == lower).collect();
            let found = if exact.len() == 1 {
                exact
            } else {
                (0..keys.len())
                    .filter(|&k| keys[k].starts_with(&lower))
                    .collect()
            };
            let err = |why: String| AssignError {
                item: units[i].key.clone(),
                why,
            };
            match found.as_slice() {
                [] => return Err(err(format!("(after: {name}) names no item of the plan"))),
                [k] if *k == i => return Err(err("it names itself in (after: …)".into())),
                [k] => {
                    if !units[i].after.contains(k) {
                        units[i].after.push(*k);
                    }
                }
                many => {
                    return Err(err(format!(
                        "(after: {name}) matches {} items; write more of its text",
                        many.len()
                    )));
                }
            }
        }
    }
    // A cycle would make its units wait forever.
    for start in 0..units.len() {
        let mut seen = BTreeSet::new();
        let mut todo = units[start].after.clone();
        while let Some(k) = todo.pop() {
            if k == start {
                return Err(AssignError {
                    item: units[start].key.clone(),
                    why: "its (after: …) items wait for it in turn (a cycle)".into(),
                });
            }
            if seen.insert(k) {
                todo.extend(units[k].after.iter().copied());
            }
        }
    }
    Ok(())
}

/// The units that can be given to a worker now, in plan order: open, not
/// `busy` (with a worker or in the merge queue) nor `merged`, every
/// dependency done in the plan, cancelled, or merged.
pub(crate) fn ready(
    units: &[Unit],
    busy: &BTreeSet<String>,
    merged: &BTreeSet<String>,
) -> Vec<usize> {
    let met = |k: usize| {
        let u = &units[k];
        u.state != UnitState::Open || merged.contains(&u.key)
    };
    (0..units.len())
        .filter(|&i| {
            let u = &units[i];
            u.state == UnitState::Open
                && !busy.contains(&u.key)
                && !merged.contains(&u.key)
                && u.after.iter().all(|&k| met(k))
        })
        .collect()
}

/// The plan a worker is given: the title and the unit's own lines.
pub(crate) fn worker_plan(text: &str, unit: &Unit) -> String {
    let plan = Plan::parse(text);
    let mut out = String::new();
    if let Some(title) = &plan.title {
        out.push_str(&format!("# {title}\n\n"));
    }
    let (from, to) = unit.span;
    for line in text.lines().skip(from - 1).take(to + 1 - from) {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// `text` with every open item of the unit named `key` checked (`[x]`);
/// None when no such unit is open (already checked, or gone from the plan).
pub(crate) fn check_off(text: &str, key: &str) -> Option<String> {
    let units = units_lenient(text);
    let unit = units
        .iter()
        .find(|u| u.key == key && u.state == UnitState::Open)?;
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if unit.lines.contains(&(i + 1)) {
            out.push_str(&mark_done(line));
        } else {
            out.push_str(line);
        }
    }
    Some(out)
}

/// Whether the unit named `key` is done in `text`: each of its items
/// checked (a worker's agent may check it off in the project's plan).
pub(crate) fn unit_done(text: &str, key: &str) -> bool {
    units_lenient(text)
        .iter()
        .any(|u| u.key == key && u.state == UnitState::Done)
}

/// The units even when a marking is wrong (the plan may have been edited
/// since the run started): dependencies are not needed to check items off.
fn units_lenient(text: &str) -> Vec<Unit> {
    parse(text).0
}

/// An item line with `[ ]` or `[~]` turned into `[x]`.
fn mark_done(line: &str) -> String {
    for open in ["[ ]", "[~]"] {
        if let Some(at) = line.find(open) {
            return format!("{}[x]{}", &line[..at], &line[at + 3..]);
        }
    }
    line.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(units: &[Unit]) -> Vec<&str> {
        units.iter().map(|u| u.key.as_str()).collect()
    }

    #[test]
    fn top_level_items_are_units_and_sub_items_stay_with_their_parent() {
        let plan = "# Work\n\n- [ ] parser\n  - [ ] lexer\n    notes on the lexer\n  - [x] tokens\n- [x] cli\n- [ ] docs\n  a note\n\nProse.\n- [-] dropped\n";
        let u = units(plan).unwrap();
        assert_eq!(keys(&u), ["parser", "cli", "docs", "dropped"]);
        assert_eq!(u[0].lines, [3, 4, 6]);
        assert_eq!(u[0].span, (3, 6));
        assert_eq!(u[0].state, UnitState::Open);
        assert_eq!(u[1].state, UnitState::Done);
        assert_eq!(u[2].span, (8, 9));
        assert_eq!(u[3].state, UnitState::Cancelled);
    }

    #[test]
    fn a_unit_with_an_open_sub_item_is_open() {
        let u = units("- [x] a\n  - [ ] a1\n- [x] b\n  - [x] b1\n").unwrap();
        assert_eq!(u[0].state, UnitState::Open);
        assert_eq!(u[1].state, UnitState::Done);
    }

    #[test]
    fn after_names_units_by_the_start_of_their_text() {
        let plan = "- [ ] Set up the database\n- [ ] Build the API (after: set up)\n- [ ] Docs (after: Build the API; Set up the database)\n- [ ] Alone\n";
        let u = units(plan).unwrap();
        assert_eq!(
            keys(&u),
            ["Set up the database", "Build the API", "Docs", "Alone"]
        );
        assert_eq!(u[1].after, [0]);
        assert_eq!(u[2].after, [1, 0]);
        let none = BTreeSet::new();
        assert_eq!(ready(&u, &none, &none), [0, 3]);
        let merged: BTreeSet<String> = ["Set up the database".to_string()].into();
        assert_eq!(ready(&u, &none, &merged), [1, 3]);
        let busy: BTreeSet<String> = ["Alone".to_string()].into();
        assert_eq!(ready(&u, &busy, &merged), [1]);
    }

    #[test]
    fn a_dependency_done_or_cancelled_in_the_plan_is_met() {
        let u = units("- [x] a\n- [-] b\n- [ ] c (after: a; b)\n").unwrap();
        assert_eq!(ready(&u, &BTreeSet::new(), &BTreeSet::new()), [2]);
    }

    #[test]
    fn a_serial_section_runs_one_unit_after_another() {
        let plan = "# P\n- [ ] free\n## Release (serial)\n- [ ] tag\n- [ ] build\n### notes\n- [ ] publish\n## Other\n- [ ] x\n- [ ] y\n";
        let u = units(plan).unwrap();
        assert_eq!(keys(&u), ["free", "tag", "build", "publish", "x", "y"]);
        assert_eq!(u[2].after, [1]);
        assert_eq!(u[3].after, [2]);
        assert!(u[4].after.is_empty() && u[5].after.is_empty());
        assert_eq!(ready(&u, &BTreeSet::new(), &BTreeSet::new()), [0, 1, 4, 5]);
    }

    #[test]
    fn wrong_markings_are_refused_naming_the_item() {
        for (plan, item, why) in [
            ("- [ ] a (after: zzz)\n", "a", "names no item"),
            ("- [ ] a (after: a)\n", "a", "names itself"),
            (
                "- [ ] ab\n- [ ] ac\n- [ ] d (after: a)\n",
                "d",
                "matches 2 items",
            ),
            ("- [ ] a (after: b)\n- [ ] b (after: a)\n", "a", "cycle"),
        ] {
            let err = units(plan).unwrap_err();
            assert_eq!(err.item, item, "{plan}");
            assert!(err.why.contains(why), "{plan}: {err}");
        }
        // An exact name wins over the longer items it starts.
        let u = units("- [ ] a\n- [ ] ab\n- [ ] c (after: a)\n").unwrap();
        assert_eq!(u[2].after, [0]);
    }

    #[test]
    fn checkboxes_in_fences_and_parentheses_that_are_not_after_are_text() {
        let plan = "- [ ] call f(x)\n```\n## not (serial)\n- [ ] not an item\n```\n- [ ] g\n";
        let u = units(plan).unwrap();
        assert_eq!(keys(&u), ["call f(x)", "g"]);
        assert!(u[1].after.is_empty());
    }

    #[test]
    fn a_worker_plan_holds_the_title_and_the_unit() {
        let plan = "# Ship\n\nIntro\n- [ ] a\n  - [ ] a1\n  note\n- [ ] b\n";
        let u = units(plan).unwrap();
        assert_eq!(
            worker_plan(plan, &u[0]),
            "# Ship\n\n- [ ] a\n  - [ ] a1\n  note\n"
        );
    }

    #[test]
    fn check_off_marks_the_units_open_items_only() {
        let plan = "- [ ] a (after: b)\n  - [~] a1\n  - [x] a2\n- [ ] b\n";
        assert_eq!(
            check_off(plan, "a").unwrap(),
            "- [x] a (after: b)\n  - [x] a1\n  - [x] a2\n- [ ] b\n"
        );
        assert_eq!(check_off(plan, "zzz"), None);
        assert_eq!(check_off("- [x] a\n", "a"), None);
        // A marking broken by an edit during the run does not stop it.
        assert_eq!(
            check_off("- [ ] a (after: gone)\n", "a").unwrap(),
            "- [x] a (after: gone)\n"
        );
    }
}
