//! The one way a run publishes an event: [`Publisher::emit`] puts it on
//! the bus and, when it has a `[hooks]` point, runs those hooks with the
//! facts of [`facts`] — the same facts whichever part of the run published
//! it (between iterations, the driver during one, a takeover). The plan
//! item a hook is told is read when the hook fires: the item being worked
//! on then, not the one an iteration started with.
//!
//! Lower modules (`project::ownership`, `report`, `record`'s start) still
//! write their warnings straight to the [`Bus`] this holds; a warning has no
//! hook point.

use std::path::PathBuf;

use crate::events::Bus;

use crate::formats::Event;
use crate::formats::RunState;
use crate::hooks::{self, Hooks};
use crate::plan::Plan;

pub(super) struct Publisher {
    bus: Bus,
    hooks: Hooks,
    /// The plan file, read when a hook fires.
    plan: PathBuf,
}

impl Publisher {
    pub(super) fn new(bus: Bus, hooks: Hooks, plan: PathBuf) -> Publisher {
        Publisher { bus, hooks, plan }
    }

    /// Publish `event`; run the hooks of its point, if it has one, told
    /// the run's facts in `state` and `reason` (`RALPH_REASON`). Returns
    /// whether a hook ran or was started (it may have changed the tree).
    pub(super) fn emit(&mut self, event: Event, state: &RunState, reason: Option<String>) -> bool {
        let plan = &self.plan;
        self.hooks
            .emit(&mut self.bus, event, || facts(state, plan, reason))
    }

    /// A warning (no hook point takes it, so no facts are needed).
    pub(super) fn warn(&mut self, message: String) {
        let warning = Event::Warning { message };
        self.hooks
            .emit(&mut self.bus, warning, hooks::Facts::default);
    }

    /// The bus, for the lower modules' warnings.
    pub(super) fn bus(&mut self) -> &mut Bus {
        &mut self.bus
    }

    /// Publish the reports of hooks that finished in the background.
    pub(super) fn report(&mut self) {
        self.hooks.report(&mut self.bus);
    }

    /// Wait for the hooks still running in the background.
    pub(super) fn settle(&mut self) {
        self.hooks.settle(&mut self.bus);
    }
}

/// What a hook is told beside its event (`RALPH_ITERATION`, `RALPH_RUN_ID`,
/// `RALPH_ITEM`, `RALPH_HANDOFF`, `RALPH_REASON`): the state's, and the
/// plan's current item as the file says now. `Plan::load` of the path the
/// run's start took from `Project::plan_path` (the publisher holds that
/// path, not the project: `run.rs` gives it).
fn facts(state: &RunState, plan: &std::path::Path, reason: Option<String>) -> hooks::Facts {
    hooks::Facts {
        iteration: state.iteration,
        run_id: state.run_id.clone(),
        item: Plan::load(plan)
            .ok()
            .and_then(|p| p.current().map(|i| i.text.clone())),
        handoff: state.last_handoff.clone(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hooks_item_is_the_plans_current_one_when_it_fires() {
        let dir = tempfile::tempdir().unwrap();
        let plan = dir.path().join("fix_plan.md");
        std::fs::write(&plan, "- [ ] first\n- [ ] second\n").unwrap();
        let state = RunState {
            iteration: 3,
            run_id: "r".into(),
            last_handoff: Some(".ralph/handoffs/h.md".into()),
            ..RunState::default()
        };
        let before = facts(&state, &plan, None);
        assert_eq!(before.item.as_deref(), Some("first"));
        std::fs::write(&plan, "- [x] first\n- [ ] second\n").unwrap();
        let after = facts(&state, &plan, Some("why".into()));
        assert_eq!(after.item.as_deref(), Some("second"));
        assert_eq!(
            (
                after.iteration,
                after.run_id.as_str(),
                after.handoff.as_deref()
            ),
            (3, "r", Some(".ralph/handoffs/h.md"))
        );
        assert_eq!(after.reason.as_deref(), Some("why"));
        std::fs::remove_file(&plan).unwrap();
        assert_eq!(facts(&state, &plan, None).item, None);
    }
}
