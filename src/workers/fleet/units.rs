//! The plan's units (`plan::units`: an item with its sub-items, its
//! `(after: …)` and `(serial)` waits) as the fleet sees them: each with a
//! key that names its refs on every machine (pure).
//!
//! The key is `i-` + 12 hex digits of a hash of the unit's name (its
//! top item's text), with the number of earlier units of the same name
//! mixed in, so two identical lines are two units; a key does not move when
//! lines are added above the item.

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::plan::units::{self, UnitState};

/// One unit of work on the run branch's plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unit {
    pub(crate) key: String,
    /// The unit's name (`units::Unit::key`): its top item's text.
    pub(crate) text: String,
    pub(crate) state: UnitState,
    /// The keys of the units it waits for.
    pub(crate) after: Vec<String>,
    /// The plan its loop gets: the title and the unit's own lines.
    pub(crate) own_plan: String,
}

impl Unit {
    pub(crate) fn open(&self) -> bool {
        self.state == UnitState::Open
    }
}

/// The units of `text` (a plan), in plan order.
pub(crate) fn units(text: &str) -> Result<Vec<Unit>> {
    let parsed = units::units(text).map_err(|e| {
        Error::usage(format!("the plan cannot be shared out: {e}"))
            .with_hint("fix the item's `(after: …)` marking (docs/workers.md)")
    })?;
    let mut seen: std::collections::HashMap<&str, u32> = Default::default();
    let keys: Vec<String> = parsed
        .iter()
        .map(|u| {
            let n = seen.entry(u.key.as_str()).or_default();
            let key = ref_key(&u.key, *n);
            *n += 1;
            key
        })
        .collect();
    Ok(parsed
        .iter()
        .zip(&keys)
        .map(|(u, key)| Unit {
            key: key.clone(),
            text: u.key.clone(),
            state: u.state,
            after: u.after.iter().map(|&i| keys[i].clone()).collect(),
            own_plan: units::worker_plan(text, u),
        })
        .collect())
}

fn ref_key(name: &str, nth: u32) -> String {
    let mut hash = Sha256::new();
    hash.update(name.as_bytes());
    if nth > 0 {
        hash.update(format!("\0{nth}").as_bytes());
    }
    let hex: String = hash.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("i-{hex}")
}

/// The open units whose waits are over (every unit they wait for done or
/// cancelled on the run branch).
pub(crate) fn ready(units: &[Unit]) -> Vec<&Unit> {
    let met = |key: &String| units.iter().any(|u| &u.key == key && !u.open());
    units
        .iter()
        .filter(|u| u.open() && u.after.iter().all(met))
        .collect()
}

/// `text` with the unit checked off; `None` when it is not open there.
pub(crate) fn check_off(text: &str, unit: &Unit) -> Option<String> {
    units::check_off(text, &unit.text)
}

/// The one-item plan a worker's loop runs on, with what the worker wants
/// the agent to know first (a takeover, a conflict) under the title.
pub(crate) fn item_plan(unit: &Unit, note: Option<&str>) -> String {
    let Some(note) = note else {
        return unit.own_plan.clone();
    };
    let note = format!("{}\n\n", note.trim_end());
    match unit.own_plan.split_once("\n\n") {
        Some((title, rest)) if title.starts_with("# ") => format!("{title}\n\n{note}{rest}"),
        _ => format!("{note}{}", unit.own_plan),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = "# Night\n\n- [ ] one\n- [x] two\n- [ ] parent\n  - [ ] child a\n  - [x] child b\n  a note\n- [ ] one\n- [ ] last (after: parent)\n";

    #[test]
    fn units_get_keys_that_twins_do_not_share_and_lines_above_do_not_move() {
        let u = units(PLAN).unwrap();
        let texts: Vec<&str> = u.iter().map(|u| u.text.as_str()).collect();
        assert_eq!(texts, ["one", "two", "parent", "one", "last"]);
        assert_ne!(u[0].key, u[3].key);
        assert!(
            u.iter()
                .all(|u| u.key.len() == 14 && u.key.starts_with("i-"))
        );
        let moved = units(&PLAN.replace("# Night\n\n", "# Night\n\nintro\n\n")).unwrap();
        assert_eq!(moved[2].key, u[2].key);
        assert_eq!(u[4].after, [u[2].key.clone()]);
    }

    #[test]
    fn a_unit_waits_until_what_it_is_after_is_done() {
        let u = units(PLAN).unwrap();
        let now: Vec<&str> = ready(&u).iter().map(|u| u.text.as_str()).collect();
        assert_eq!(now, ["one", "parent", "one"]);
        let after = check_off(PLAN, &u[2]).unwrap();
        let u2 = units(&after).unwrap();
        let later: Vec<&str> = ready(&u2).iter().map(|u| u.text.as_str()).collect();
        assert_eq!(later, ["one", "one", "last"]);
        assert!(check_off(&after, &u[2]).is_none(), "not open any more");
    }

    #[test]
    fn the_item_plan_carries_the_unit_and_a_note_under_the_title() {
        let u = units(PLAN).unwrap();
        let p = item_plan(&u[2], Some("Taken over from w1."));
        assert_eq!(
            p,
            "# Night\n\nTaken over from w1.\n\n- [ ] parent\n  - [ ] child a\n  - [x] child b\n  a note\n"
        );
        assert_eq!(item_plan(&u[2], None), u[2].own_plan);
    }
}
