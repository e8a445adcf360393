//! The machine's part at the seams of the work: it follows the plan item
//! by item while the agent runs (a Write/Edit of the plan → re-read it on
//! the next tool result), hands off at an item boundary when the next item
//! will not fit, and sends the one L1 nudge. Pure, like its parent.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{Effect, IterationMachine};
use crate::context::{Change, Level, round1};
use crate::formats::Event;
use crate::formats::Trigger;
use crate::plan::Plan;
use crate::plan::estimate::Estimate;
use crate::plan::items::{self, ItemTracker, ItemsOutcome};
use crate::stream::StreamEvent;

/// What the machine knows of the plan's items for one iteration.
#[derive(Debug, Clone)]
pub(in crate::supervisor) struct SeamWatch {
    pub(crate) plan_path: PathBuf,
    pub(crate) tracker: ItemTracker,
    /// The plan at the start: new checkbox items later mean a split.
    pub(crate) initial: Plan,
    /// Estimates of the items open at the start.
    pub(crate) estimates: BTreeMap<String, Estimate>,
    pub(crate) checkpoint_percent: f64,
    pub(crate) cap: Option<u64>,
    pub(crate) nudge: bool,
    pub(crate) nudged: bool,
    pub(crate) split: bool,
    /// Items the session may finish (`context.items_per_session`): once
    /// it has, work on the next one is stopped at a boundary checkpoint.
    pub(crate) items_per_session: u32,
}

/// The values the nudge template is rendered with.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::supervisor) struct NudgeRequest {
    pub(crate) percent: f64,
    pub(crate) tokens: u64,
    pub(crate) usable: u64,
    pub(crate) item: Option<String>,
}

impl IterationMachine {
    pub(in crate::supervisor) fn with_seams(mut self, seams: SeamWatch) -> IterationMachine {
        self.seams = Some(seams);
        self
    }

    pub(in crate::supervisor) fn plan_path(&self) -> Option<PathBuf> {
        self.seams.as_ref().map(|s| s.plan_path.clone())
    }

    /// After the line has been metered: the item's climb, plan writes, the
    /// re-read once their result is in, the nudge at L1.
    pub(super) fn seams_on_line(
        &mut self,
        event: &StreamEvent,
        change: Option<Change>,
        now: &super::Now,
        out: &mut Vec<Effect>,
    ) {
        let live = self.live() && self.facts.checkpoint.is_none();
        let tokens = self.meter.tokens();
        let Some(s) = self.seams.as_mut() else {
            return;
        };
        match event {
            StreamEvent::Assistant(m) if m.is_main_thread() && !m.is_synthetic() => {
                s.tracker.on_tokens(tokens);
                for call in &m.tool_calls {
                    s.tracker.on_tool_call(call);
                }
                let done = s.tracker.checked_count();
                if live && s.tracker.started_next() && done >= s.items_per_session as usize {
                    let why = format!(
                        "item boundary: {done} item(s) done in this session (context.items_per_session = {}); the next one gets a fresh session",
                        s.items_per_session
                    );
                    let handoff = self.limits.agent_handoff;
                    self.begin_checkpoint(Trigger::Boundary, why, handoff, now, out);
                    return;
                }
            }
            StreamEvent::User {
                parent_tool_use_id: None,
            } if s.tracker.take_reread() => out.push(Effect::ReadPlan(s.plan_path.clone())),
            _ => {}
        }
        let to_l1 = matches!(
            change,
            Some(Change::Level {
                from: Level::L0,
                to: Level::L1
            })
        );
        if to_l1 && live && s.nudge && !s.nudged {
            s.nudged = true;
            let item = s.tracker.current().map(str::to_string);
            let percent = round1(self.meter.percent());
            out.push(Effect::Nudge(NudgeRequest {
                percent,
                tokens,
                usable: self.meter.usable(),
                item: item.clone(),
            }));
            out.push(Effect::Emit(Event::Nudged {
                iteration: self.facts.number,
                percent,
                item,
            }));
        }
    }

    /// The plan as it is now: book checked items; at an item boundary,
    /// hand off if the next item will not fit in what is left.
    pub(super) fn on_plan(&mut self, plan: &Plan, now: &super::Now, out: &mut Vec<Effect>) {
        let tokens = self.meter.tokens();
        let usable = self.meter.usable();
        let Some(s) = self.seams.as_mut() else {
            return;
        };
        s.split |= items::split(&s.initial, plan);
        let Some(checked) = s.tracker.on_plan(plan) else {
            return;
        };
        let remaining = items::remaining(tokens, usable, s.checkpoint_percent, s.cap);
        let next = checked.next.as_ref().and_then(|n| s.estimates.get(n));
        let boundary = items::boundary(remaining, next);
        let next_estimate = next.map(|e| e.tokens);
        let needed = next.map_or(0, Estimate::needed);
        let percent = round1(self.meter.percent());
        out.push(Effect::Emit(Event::ItemChecked {
            iteration: self.facts.number,
            items: checked.items,
            next: checked.next,
            percent,
            next_estimate,
            remaining,
        }));
        if boundary && self.live() {
            let why = format!(
                "item boundary at {percent:.1}%: the next item needs about {needed} tokens, {remaining} are left before the checkpoint"
            );
            let handoff = self.limits.agent_handoff;
            self.begin_checkpoint(Trigger::Boundary, why, handoff, now, out);
        }
    }

    /// What the iteration did item by item (the estimates ride along for
    /// the accounting).
    pub(super) fn seams_finish(&mut self) -> Option<ItemsOutcome> {
        let s = self.seams.take()?;
        let start = s.initial.current().map(|i| i.text.clone());
        let mut outcome = s.tracker.finish(start);
        outcome.split = s.split;
        outcome.estimates = s
            .estimates
            .into_iter()
            .filter(|(k, _)| outcome.spent.iter().any(|(i, _)| i == k))
            .collect();
        Some(outcome)
    }
}
