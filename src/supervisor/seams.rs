//! The run's side of the seams of the work, around each agent: before it,
//! the estimates of the open items and the shard rule (a split the prompt
//! asks for, `shard_suggested`); after it, the ledger of finished items
//! and the carry-over of uncommitted work on an unfinished item. The IO
//! (ledger, file sizes, git status) is here; the rules are in `items` and
//! `estimate`, the machine's part in `iteration/seams.rs`.

use std::collections::BTreeMap;
use std::path::Path;

use super::Supervisor;
use super::facts::Facts;
use super::iteration::{self, SeamWatch};
use crate::config::Config;
use crate::formats::Event;
use crate::formats::{CarryOver, ShardRequest};
use crate::formats::{Layout, RunState};
use crate::plan::Plan;
use crate::plan::estimate::Estimate;
use crate::plan::items::{self, ItemTracker};
use crate::repo::Repo;

/// The estimates of the plan's open items and the split the next prompt
/// asks for: the one shard decision, the loop's, which `ralph prompt` and
/// `ralph run --dry-run` show too.
pub(crate) fn shard_decision(
    root: &Path,
    config: &Config,
    state: &RunState,
    plan: &Plan,
) -> (BTreeMap<String, Estimate>, Option<ShardRequest>) {
    let c = &config.context;
    let usable = iteration::meter(config, state).usable();
    let ledger = items::read_ledger(&Layout::new(root).items());
    let history = items::history(ledger, &state.items);
    let prior = (usable as f64 * c.estimate_prior_percent / 100.0) as u64;
    let estimates: BTreeMap<_, _> = plan
        .open()
        .map(|i| {
            let e = items::estimate_item(root, Some(plan), &i.text, &history, prior, usable);
            (i.text.clone(), e)
        })
        .collect();
    // One split level per item: an item with sub-items was split, never
    // asked again (its parts are current while open; once they are done it
    // only needs checking off), and its parts are not asked either — a
    // part that still looks big (as the agent worded it) is worked on, and
    // the breaker judges it if nothing comes of that.
    let current = (plan.current())
        .filter(|i| !plan.is_split(&i.text) && plan.split_above(&i.text).is_empty());
    let request = current.and_then(|item| {
        items::shard_request(
            &item.text,
            estimates.get(&item.text),
            &state.items,
            usable,
            c.shard_percent,
        )
    });
    (estimates, request)
}

/// The split the next iteration's prompt asks for, as the loop decides it.
pub(crate) fn next_shard(
    root: &Path,
    config: &Config,
    state: &RunState,
    plan: &Plan,
) -> Option<ShardRequest> {
    shard_decision(root, config, state, plan).1
}

/// Changed files listed in a carry-over block.
const CARRY_OVER_FILES: usize = 10;
/// Characters of the agent's words kept in a carry-over block.
const CARRY_OVER_WORDS: usize = 1_200;

/// The agent's words as a carry-over quotes them: printable, without
/// secrets, cut.
fn carried_words(text: &str) -> String {
    let text = crate::text::secrets::redact(text);
    let text = crate::text::printable_lines(&text);
    crate::text::cut(text.trim(), CARRY_OVER_WORDS)
}

impl Supervisor {
    /// Estimate the open items, decide on a split, and give the machine
    /// what it needs to follow the items live.
    pub(super) fn prepare_seams(&mut self, number: u32, plan: &Plan) -> SeamWatch {
        let c = self.config.context.clone();
        let (estimates, request) = shard_decision(&self.root, &self.config, &self.state, plan);
        if let Some(r) = &request {
            let event = Event::ShardSuggested {
                iteration: number,
                item: r.item.clone(),
                reason: r.reason,
                estimate: r.estimate,
                percent: r.percent,
            };
            self.publish(event, None);
        }
        self.state.shard_request = request;
        let plan_path = crate::project::Project::at(&self.root).plan_path(&self.config);
        SeamWatch {
            tracker: ItemTracker::new(&self.root, &plan_path, plan),
            plan_path,
            initial: plan.clone(),
            estimates,
            checkpoint_percent: c.checkpoint_percent,
            cap: c.checkpoint_tokens,
            nudge: c.nudge_at_l1 && self.config.agent.kind.capabilities().message,
            nudged: false,
            split: false,
            items_per_session: self.config.context.items_per_session,
        }
    }

    /// After the iteration is recorded: finished items go to the ledger,
    /// and work left uncommitted on an unfinished item is carried over.
    pub(super) fn after_seams(&mut self, facts: &Facts) {
        // Handed over with the prompt; the next iteration decides anew.
        self.state.shard_request = None;
        self.mark_items_verified(facts.number);
        let Some(outcome) = &facts.items else {
            return;
        };
        let finished: Vec<_> = self
            .state
            .items
            .iter()
            .filter(|a| a.done && outcome.checked.contains(&a.item))
            .map(|a| a.sample())
            .collect();
        let ledger = self.layout.items();
        if let Err(e) = items::append_ledger(&ledger, &finished) {
            self.events.warn(format!(
                "cannot record finished items in {}: {e}",
                ledger.display()
            ));
        }
        let unfinished = outcome
            .item
            .as_ref()
            .filter(|i| !outcome.checked.contains(i));
        // A checkpoint's handoff and resume name the stash themselves.
        let stashed = match facts.checkpoint {
            None => self.stashed_during(facts),
            Some(_) => Vec::new(),
        };
        self.state.carry_over = match (facts.checkpoint, unfinished) {
            (None, Some(item)) => {
                let words = |t: &Option<String>| t.as_deref().map(carried_words);
                let last_words = words(&facts.last_text);
                let answer = words(&facts.nudge_answer).filter(|a| Some(a) != last_words.as_ref());
                let changes = self.uncommitted().unwrap_or_default();
                (!changes.is_empty()
                    || last_words.is_some()
                    || answer.is_some()
                    || !stashed.is_empty())
                .then(|| CarryOver {
                    iteration: facts.number,
                    item: Some(item.clone()),
                    changes,
                    answer,
                    last_words,
                    stashed,
                })
            }
            (None, None) if !stashed.is_empty() => Some(CarryOver {
                iteration: facts.number,
                item: None,
                changes: Vec::new(),
                answer: None,
                last_words: None,
                stashed,
            }),
            _ => None,
        };
    }

    /// The stash entries the agent made during the iteration, named as the
    /// prompt shows them; said at once, since the work in them is in no
    /// commit and (its check-offs with it) in no plan.
    fn stashed_during(&mut self, facts: &Facts) -> Vec<String> {
        let Some(before) = &facts.stash_before else {
            return Vec::new();
        };
        let Some(repo) = Repo::open(&self.root).ok().flatten() else {
            return Vec::new();
        };
        let names = crate::checkpoint::stash_names(&repo.stashed_since(before));
        if !names.is_empty() {
            self.events.warn(format!(
                "iteration {} put work in the stash, in no commit: {}; the next prompt asks the agent to `git stash pop` it rather than do it again",
                facts.number,
                names.join(", ")
            ));
        }
        names
    }

    /// The agent's uncommitted changes (`M src/x.rs`), if there are any.
    fn uncommitted(&self) -> Option<Vec<String>> {
        let repo = Repo::open(&self.root).ok().flatten()?;
        let changes = repo.changes(&self.own()).ok()?;
        let plan = self.config.plan.to_string_lossy();
        let lines: Vec<String> = changes
            .iter()
            .filter(|c| c.path != plan)
            .take(CARRY_OVER_FILES)
            .map(|c| format!("{} {}", c.kind, c.path))
            .collect();
        (!lines.is_empty()).then_some(lines)
    }
}
