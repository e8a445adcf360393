//! Plan items as units of work: which item an iteration works on, what each
//! item cost across iterations and checkpoints (watching the plan change
//! live), and the rules at the seams of the work — hand off at an item
//! boundary when the next item will not fit, ask for a split when an item is
//! too big or keeps being checkpointed. Pure except the ledger of finished
//! items (`.ralph/items.jsonl`), which lets later runs learn from this one.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::plan::estimate::{self, Estimate, Sample};
use crate::plan::{Item, Plan};
use crate::stream::ToolCall;

use crate::formats::{ItemAccount, ShardReason, ShardRequest};

// The record is a format (`formats::items`); what the estimator learns from it is here.
impl ItemAccount {
    pub(crate) fn sample(&self) -> Sample {
        Sample {
            item: self.item.clone(),
            tokens: self.tokens,
            estimate: self.estimate,
        }
    }
}

/// What the prompt template sees of a shard request: the item and why.
pub(crate) fn shard_view(r: Option<&ShardRequest>, shard_percent: f64) -> Option<minijinja::Value> {
    let r = r?;
    let why = match r.reason {
        ShardReason::TooLarge => format!(
            "it is estimated at about {} tokens, {}% of the usable window, above the {shard_percent}% from which items are split",
            r.estimate.unwrap_or(0),
            r.percent
        ),
        ShardReason::Checkpointed => {
            "the last two iterations were both checkpointed in the middle of it".to_string()
        }
    };
    Some(minijinja::context! { item => &r.item, why => why, reason => r.reason.name() })
}

/// Tokens left before the checkpoint: the lower of `checkpoint_percent` of
/// the usable window and the absolute cap, minus what is in use.
pub(crate) fn remaining(
    occupancy: u64,
    usable: u64,
    checkpoint_percent: f64,
    cap: Option<u64>,
) -> u64 {
    checkpoint_at(usable, checkpoint_percent, cap).saturating_sub(occupancy)
}

/// Where the checkpoint fires, in tokens.
pub(crate) fn checkpoint_at(usable: u64, checkpoint_percent: f64, cap: Option<u64>) -> u64 {
    let at = (usable as f64 * checkpoint_percent / 100.0) as u64;
    cap.map_or(at, |c| at.min(c))
}

/// The boundary rule: once an item is checked off, hand off now if the
/// next open item's estimate (with its margin) exceeds what is left.
pub(crate) fn boundary(remaining: u64, next: Option<&Estimate>) -> bool {
    next.is_some_and(|e| e.needed() > remaining)
}

/// The shard rule: too big for `shard_at` tokens, or checkpointed twice in
/// a row (`streak`: the iterations just before, newest last, that worked on
/// this item and were checkpointed).
pub(crate) fn shard_reason(
    estimate: Option<&Estimate>,
    shard_at: u64,
    streak: u32,
) -> Option<ShardReason> {
    if streak >= 2 {
        Some(ShardReason::Checkpointed)
    } else if estimate.is_some_and(|e| e.tokens > shard_at) {
        Some(ShardReason::TooLarge)
    } else {
        None
    }
}

/// The split the next prompt asks for, if any: the shard rule applied to
/// the current item, its estimate and its account — never to an item that
/// was split already.
pub(crate) fn shard_request(
    item: &str,
    estimate: Option<&Estimate>,
    accounts: &[ItemAccount],
    usable: u64,
    shard_percent: f64,
) -> Option<ShardRequest> {
    let account = accounts.iter().find(|a| a.item == item && !a.done);
    // Split once: its parts are the work now, asked to split in their turn.
    if account.is_some_and(|a| a.split_in.is_some()) {
        return None;
    }
    let streak = account.map_or(0, |a| a.streak);
    let shard_at = (usable as f64 * shard_percent / 100.0) as u64;
    let reason = shard_reason(estimate, shard_at, streak)?;
    let tokens = estimate.map(|e| e.tokens);
    Some(ShardRequest {
        item: item.to_string(),
        reason,
        estimate: tokens,
        percent: crate::context::round1(tokens.unwrap_or(0) as f64 * 100.0 / usable.max(1) as f64),
    })
}

/// Whether the plan gained checkbox items: the agent split an item.
pub(crate) fn split(before: &Plan, after: &Plan) -> bool {
    after
        .items
        .iter()
        .any(|a| !before.items.iter().any(|b| b.text == a.text))
}

/// Watches one iteration's items live: the current item, the context it
/// climbs while current, and the items checked off as the plan changes.
#[derive(Debug, Clone)]
pub struct ItemTracker {
    plan_path: PathBuf,
    root: PathBuf,
    current: Option<String>,
    /// Occupancy when the current item became current (first reading for
    /// the iteration's first item: a fresh session's fixed cost is not the
    /// item's).
    since: Option<u64>,
    tokens: u64,
    plan_written: bool,
    /// Items done at the start or checked off since.
    seen_done: Vec<String>,
    checked: Vec<String>,
    /// Tokens each item consumed in this iteration, in the order worked on.
    spent: Vec<(String, u64)>,
    /// The agent did something for the current item (a tool call other
    /// than on the plan or ralph's files) since it became current; the
    /// iteration's first item counts as touched.
    touched: bool,
}

/// Items checked off since the last look, and the item now current.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Checked {
    pub(crate) items: Vec<String>,
    pub(crate) next: Option<String>,
}

/// What the iteration did, item by item.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ItemsOutcome {
    /// The item it started on.
    pub(crate) item: Option<String>,
    pub(crate) checked: Vec<String>,
    /// Tokens consumed per item worked on.
    pub(crate) spent: Vec<(String, u64)>,
    /// New checkbox items appeared: an item was split.
    pub(crate) split: bool,
    /// Estimates of the items worked on, as made at the start.
    pub(crate) estimates: std::collections::BTreeMap<String, Estimate>,
    /// The item the end of the iteration belongs to: the current one, or,
    /// when the agent had not touched it yet, the item it checked off
    /// last (`end_done`): a checkpoint right after a check-off is the
    /// finished item's, not the next one's.
    pub(crate) end: Option<String>,
    pub(crate) end_done: bool,
}

impl ItemTracker {
    pub fn new(root: &Path, plan_path: &Path, plan: &Plan) -> ItemTracker {
        ItemTracker {
            plan_path: absolute(root, plan_path),
            root: root.to_path_buf(),
            current: plan.current().map(|i| i.text.clone()),
            since: None,
            tokens: 0,
            plan_written: false,
            seen_done: plan.done().map(|i| i.text.clone()).collect(),
            checked: Vec::new(),
            spent: Vec::new(),
            touched: true,
        }
    }

    pub fn current(&self) -> Option<&str> {
        self.current.as_deref()
    }

    /// A new main-thread occupancy reading.
    pub fn on_tokens(&mut self, tokens: u64) {
        self.tokens = tokens;
        self.since.get_or_insert(tokens);
    }

    /// A tool call: a Write/Edit of the plan means a re-read is due once
    /// its result is in; any call but on the plan or ralph's own files
    /// (the notes) is work on the current item.
    pub fn on_tool_call(&mut self, call: &ToolCall) {
        let writes = matches!(call.name.as_str(), "Write" | "Edit" | "MultiEdit");
        let Some(path) = call.path.as_deref() else {
            self.touched = true;
            return;
        };
        let path = absolute(&self.root, Path::new(path));
        if path == self.plan_path {
            self.plan_written |= writes;
        } else if !path.starts_with(crate::formats::Layout::new(&self.root).dir) {
            self.touched = true;
        }
    }

    /// Items checked off so far in this iteration.
    pub(crate) fn checked_count(&self) -> usize {
        self.checked.len()
    }

    /// The agent has begun on an item that became current by a check-off.
    pub(crate) fn started_next(&self) -> bool {
        !self.checked.is_empty() && self.touched && self.current.is_some()
    }

    /// True once per plan write: read the plan and call `on_plan`.
    pub fn take_reread(&mut self) -> bool {
        std::mem::take(&mut self.plan_written)
    }

    /// The plan as it is now: books the climb of the current item once it
    /// is no longer open (checked off, or rewritten) and moves on to the
    /// first open item. `Some` when items were checked off.
    pub(crate) fn on_plan(&mut self, plan: &Plan) -> Option<Checked> {
        let newly: Vec<String> = plan
            .done()
            .filter(|i| !self.seen_done.contains(&i.text))
            .map(|i| i.text.clone())
            .collect();
        self.seen_done.extend(newly.iter().cloned());
        self.checked.extend(newly.iter().cloned());
        // Checked off, rewritten, or split (its first part is current now);
        // a plan read mid-write (no items) is mended by the next read.
        let now = plan.current().map(|i| i.text.clone());
        if now != self.current {
            self.book();
            self.current = now;
            self.since = Some(self.tokens);
            self.touched = false;
        }
        (!newly.is_empty()).then(|| Checked {
            items: newly,
            next: self.current.clone(),
        })
    }

    fn book(&mut self) {
        if let Some(item) = &self.current {
            let used = self
                .tokens
                .saturating_sub(self.since.unwrap_or(self.tokens));
            self.spent.push((item.clone(), used));
        }
    }

    pub(crate) fn finish(mut self, start_item: Option<String>) -> ItemsOutcome {
        let untouched = !self.touched && !self.checked.is_empty();
        let (end, end_done) = if untouched {
            (self.checked.last().cloned(), true)
        } else {
            self.book();
            (self.current.clone(), false)
        };
        ItemsOutcome {
            item: start_item,
            checked: self.checked,
            spent: self.spent,
            end,
            end_done,
            ..ItemsOutcome::default()
        }
    }
}

fn absolute(root: &Path, p: &Path) -> PathBuf {
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        root.join(p)
    };
    joined.components().collect()
}

/// Books an iteration into the run's item accounts: tokens spent, who was
/// cut off by a context checkpoint, what got done or split, the first
/// estimate of each item.
pub(crate) fn account(
    accounts: &mut Vec<ItemAccount>,
    outcome: &ItemsOutcome,
    checkpointed: bool,
    split_in: Option<u32>,
) {
    for (item, used) in &outcome.spent {
        let i = match accounts.iter().position(|a| a.item == *item) {
            Some(i) => i,
            None => {
                let e = outcome.estimates.get(item);
                accounts.push(ItemAccount {
                    item: item.clone(),
                    estimate: e.map(|e| e.tokens),
                    confidence: e.map(|e| e.confidence),
                    ..ItemAccount::default()
                });
                accounts.len() - 1
            }
        };
        let a = &mut accounts[i];
        a.tokens += used;
        a.iterations += 1;
        a.done |= outcome.checked.contains(item);
        // Only the item still current at the end was cut off by the checkpoint.
        let last = outcome.spent.last().map(|(s, _)| s) == Some(item);
        if checkpointed && last && !a.done {
            a.checkpoints += 1;
            a.streak += 1;
        } else {
            a.streak = 0;
        }
        if split_in.is_some() && outcome.item.as_deref() == Some(item) {
            a.split_in = split_in;
        }
    }
}

/// Finished items of earlier runs; unreadable lines are skipped (the ledger
/// only informs estimates).
pub(crate) fn read_ledger(path: &Path) -> Vec<Sample> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub(crate) fn append_ledger(path: &Path, samples: &[Sample]) -> std::io::Result<()> {
    if samples.is_empty() {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let mut buf = Vec::new();
    for s in samples {
        serde_json::to_writer(&mut buf, s)?;
        buf.push(b'\n');
    }
    f.write_all(&buf)
}

/// Everything the estimator may learn from: earlier runs' ledger, then this
/// run's finished items not yet in it.
pub(crate) fn history(ledger: Vec<Sample>, accounts: &[ItemAccount]) -> Vec<Sample> {
    let mut all = ledger;
    for a in accounts.iter().filter(|a| a.done) {
        if !all.iter().any(|s| s.item == a.item) {
            all.push(a.sample());
        }
    }
    all
}

/// Bytes of the files an item names (markdown links, backticked paths).
/// The bytes of the files `item` names. A part of a split item (`above`:
/// the split items above it, nearest first, with their parts) has its
/// share of a file they name too, not the whole: agents name the big file
/// in every part, and each part taking the whole file's cost would be as
/// big as the item it splits.
pub(crate) fn named_bytes(root: &Path, item: &str, above: &[(&Item, usize)]) -> u64 {
    crate::plan::context_files(root, item)
        .into_iter()
        .filter(|f| item.contains(f.as_str()))
        .filter_map(|f| {
            let bytes = std::fs::metadata(root.join(&f)).ok()?.len();
            let shares: usize = (above.iter())
                .filter(|(parent, _)| parent.text.contains(f.as_str()))
                .map(|(_, parts)| *parts)
                .product();
            Some(bytes / shares.max(1) as u64)
        })
        .sum()
}

/// The estimate of `item` (of `plan`, when it is known: a part's share of
/// its split item's files) against everything learned so far.
pub(crate) fn estimate_item(
    root: &Path,
    plan: Option<&Plan>,
    item: &str,
    history: &[Sample],
    prior_tokens: u64,
    usable: u64,
) -> Estimate {
    let above = plan.map(|p| p.split_above(item)).unwrap_or_default();
    estimate::estimate(&estimate::Inputs {
        item,
        history,
        named_bytes: named_bytes(root, item, &above),
        prior_tokens,
        usable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::Confidence;

    fn est(tokens: u64, confidence: Confidence) -> Estimate {
        Estimate::known(tokens, confidence)
    }

    #[test]
    fn boundary_rule() {
        // usable 167k, checkpoint at 85% → 141,950 tokens.
        let usable = 167_000;
        // (occupancy, cap, next estimate, boundary?)
        let table: &[(u64, Option<u64>, Option<Estimate>, bool)] = &[
            // item 1 done at ~62% (103.5k): 38.4k left; next item 50k → hand off
            (103_540, None, Some(est(50_000, Confidence::Low)), true),
            // the next item is small and fits: let it finish, even past L1
            (120_000, None, Some(est(10_000, Confidence::High)), false),
            // fits raw (36k < 38.4k) but not with a low-confidence margin
            (103_540, None, Some(est(36_000, Confidence::Low)), true),
            (103_540, None, Some(est(36_000, Confidence::High)), false),
            // no next item: nothing to protect
            (140_000, None, None, false),
            // unknown item, prior of 20% of the usable window, at 40%
            (66_800, None, Some(est(33_400, Confidence::Low)), false),
            // the absolute cap shortens what is left
            (
                60_000,
                Some(80_000),
                Some(est(30_000, Confidence::High)),
                true,
            ),
            // already past the checkpoint: nothing fits
            (150_000, None, Some(est(1, Confidence::High)), true),
        ];
        for (occupancy, cap, next, want) in table {
            let left = remaining(*occupancy, usable, 85.0, *cap);
            assert_eq!(
                boundary(left, next.as_ref()),
                *want,
                "{occupancy} {cap:?} {next:?}"
            );
        }
    }

    #[test]
    fn shard_rule_and_streak() {
        let shard_at = 100_000;
        let table = [
            (
                Some(est(120_000, Confidence::Low)),
                0,
                Some(ShardReason::TooLarge),
            ),
            (Some(est(90_000, Confidence::Low)), 1, None),
            (None, 2, Some(ShardReason::Checkpointed)),
            (
                Some(est(120_000, Confidence::Low)),
                2,
                Some(ShardReason::Checkpointed),
            ),
            (None, 0, None),
        ];
        for (e, streak, want) in table {
            assert_eq!(shard_reason(e.as_ref(), shard_at, streak), want);
        }
    }

    #[test]
    fn shard_request_of_an_item() {
        let big = est(120_000, Confidence::Low);
        let cut = ItemAccount {
            item: "a".into(),
            streak: 2,
            ..ItemAccount::default()
        };
        let r = shard_request("a", Some(&big), &[], 167_000, 60.0).unwrap();
        assert_eq!(
            (r.reason, r.estimate, r.percent),
            (ShardReason::TooLarge, Some(120_000), 71.9)
        );
        let r = shard_request("a", None, std::slice::from_ref(&cut), 167_000, 60.0).unwrap();
        assert_eq!((r.reason, r.estimate), (ShardReason::Checkpointed, None));
        let done = ItemAccount {
            done: true,
            ..cut.clone()
        };
        assert_eq!(shard_request("a", None, &[done], 167_000, 60.0), None);
        let split = ItemAccount {
            split_in: Some(3),
            ..cut.clone()
        };
        assert_eq!(
            shard_request("a", Some(&big), &[split], 167_000, 60.0),
            None
        );
        assert_eq!(shard_request("a", Some(&big), &[], 167_000, 80.0), None);
    }

    fn call(name: &str, path: &str) -> ToolCall {
        ToolCall {
            id: "t".into(),
            name: name.into(),
            path: Some(path.into()),
            summary: None,
        }
    }

    #[test]
    fn tracker_books_each_items_climb_as_the_plan_changes() {
        let root = Path::new("/p");
        let before = Plan::parse("- [x] zero\n- [ ] one\n- [ ] two\n- [ ] three\n");
        let mut t = ItemTracker::new(root, Path::new("fix_plan.md"), &before);
        assert_eq!(t.current(), Some("one"));
        t.on_tokens(20_000);
        t.on_tokens(60_000);
        t.on_tool_call(&call("Read", "/p/fix_plan.md"));
        assert!(!t.take_reread(), "a read is not a change");
        t.on_tool_call(&call("Edit", "/p/src/x.rs"));
        assert!(!t.take_reread(), "another file");
        t.on_tool_call(&call("Edit", "/p/./fix_plan.md"));
        assert!(t.take_reread());
        assert!(!t.take_reread(), "once per write");
        let mid = Plan::parse("- [x] zero\n- [x] one\n- [ ] two\n- [ ] three\n");
        assert_eq!(
            t.on_plan(&mid),
            Some(Checked {
                items: vec!["one".into()],
                next: Some("two".into())
            })
        );
        assert_eq!(t.on_plan(&mid), None, "nothing new");
        t.on_tool_call(&call("Read", "/p/src/two.rs"));
        t.on_tokens(90_000);
        let out = t.finish(Some("one".into()));
        assert_eq!(out.checked, ["one"]);
        assert_eq!(
            out.spent,
            [("one".to_string(), 40_000), ("two".to_string(), 30_000)]
        );
        assert_eq!((out.end.as_deref(), out.end_done), (Some("two"), false));
    }

    #[test]
    fn an_end_right_after_a_check_off_belongs_to_the_finished_item() {
        // Issue 23 case 4: checked off, then only the notes written before
        // the checkpoint: the next item was never touched.
        let root = Path::new("/p");
        let before = Plan::parse("- [ ] one\n- [ ] two\n");
        let mut t = ItemTracker::new(root, Path::new("fix_plan.md"), &before);
        t.on_tokens(20_000);
        t.on_tokens(120_000);
        t.on_plan(&Plan::parse("- [x] one\n- [ ] two\n"));
        t.on_tokens(142_000);
        t.on_tool_call(&call("Write", "/p/.ralph/notes/iter-001.md"));
        let out = t.finish(Some("one".into()));
        assert_eq!(out.spent, [("one".to_string(), 100_000)]);
        assert_eq!((out.end.as_deref(), out.end_done), (Some("one"), true));
        let mut acc = Vec::new();
        account(&mut acc, &out, true, None);
        assert_eq!(acc.len(), 1, "two is not booked a checkpoint: {acc:?}");
        assert_eq!(acc[0].checkpoints, 0);
    }

    #[test]
    fn a_split_hands_the_slot_to_the_first_part() {
        let root = Path::new("/p");
        let before = Plan::parse("- [ ] big\n- [ ] next\n");
        let mut t = ItemTracker::new(root, Path::new("fix_plan.md"), &before);
        t.on_tokens(20_000);
        t.on_tokens(30_000);
        let split = Plan::parse("- [ ] big\n  - [ ] part a\n  - [ ] part b\n- [ ] next\n");
        assert_eq!(t.on_plan(&split), None, "nothing checked");
        assert_eq!(t.current(), Some("part a"));
        let c = t.on_plan(&Plan::parse(
            "- [ ] big\n  - [x] part a\n  - [ ] part b\n- [ ] next\n",
        ));
        assert_eq!(c.unwrap().next.as_deref(), Some("part b"));
    }

    #[test]
    fn a_split_and_a_check_off_seen_at_once_name_the_next_part() {
        let root = Path::new("/p");
        let before = Plan::parse("- [ ] big `x.md`\n- [ ] next\n");
        let mut t = ItemTracker::new(root, Path::new("fix_plan.md"), &before);
        t.on_tokens(30_000);
        let c = t.on_plan(&Plan::parse(
            "- [ ] big `x.md`\n  - [x] part a\n  - [ ] part b\n- [ ] next\n",
        ));
        assert_eq!(c.unwrap().next.as_deref(), Some("part b"));
    }

    #[test]
    fn accounts_sum_across_iterations_and_checkpoints() {
        let mut acc = Vec::new();
        let estimates: std::collections::BTreeMap<_, _> = ["big", "next"]
            .map(|i| (i.to_string(), est(30_000, Confidence::Low)))
            .into();
        let cut = ItemsOutcome {
            item: Some("big".into()),
            spent: vec![("big".into(), 120_000)],
            estimates: estimates.clone(),
            ..ItemsOutcome::default()
        };
        account(&mut acc, &cut, true, None);
        assert_eq!(acc[0].streak, 1);
        account(&mut acc, &cut, true, None);
        assert_eq!(acc[0].streak, 2);
        let done = ItemsOutcome {
            item: Some("big".into()),
            checked: vec!["big".into()],
            spent: vec![("big".into(), 20_000), ("next".into(), 5_000)],
            estimates,
            ..ItemsOutcome::default()
        };
        account(&mut acc, &done, true, Some(3));
        assert_eq!(acc.len(), 2);
        let big = &acc[0];
        assert_eq!(
            (
                big.tokens,
                big.iterations,
                big.checkpoints,
                big.streak,
                big.done,
                big.estimate,
                big.split_in
            ),
            (260_000, 3, 2, 0, true, Some(30_000), Some(3))
        );
        assert_eq!(
            (acc[1].tokens, acc[1].checkpoints, acc[1].done),
            (5_000, 1, false)
        );
        assert_eq!(
            history(vec![], &acc),
            [Sample {
                item: "big".into(),
                tokens: 260_000,
                estimate: Some(30_000)
            }]
        );
    }

    #[test]
    fn split_is_new_checkbox_items() {
        let before = Plan::parse("- [ ] big\n- [ ] next\n");
        let after =
            Plan::parse("- [ ] big\n  - [ ] big: part 1\n  - [ ] big: part 2\n- [ ] next\n");
        assert!(split(&before, &after));
        assert!(!split(&before, &before));
        assert!(!split(&before, &Plan::parse("- [x] big\n- [ ] next\n")));
    }

    #[test]
    fn a_part_has_its_share_of_the_files_its_split_item_names() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("specs")).unwrap();
        std::fs::write(dir.path().join("specs/big.md"), "x".repeat(600_000)).unwrap();
        std::fs::write(dir.path().join("specs/own.md"), "x".repeat(1_000)).unwrap();
        let plan = Plan::parse(concat!(
            "- [ ] port `specs/big.md`\n",
            "  - [ ] port `specs/big.md`, part 1\n",
            "    - [ ] port `specs/big.md`, part 1a\n",
            "    - [ ] port `specs/big.md`, part 1b with `specs/own.md`\n",
            "  - [ ] port `specs/big.md`, part 2\n",
            "  - [ ] port `specs/big.md`, part 3\n",
            "- [ ] read `specs/big.md` again\n",
        ));
        // (item, named bytes counted for it)
        let table: &[(&str, u64)] = &[
            ("port `specs/big.md`", 600_000),
            ("port `specs/big.md`, part 1", 200_000),
            ("port `specs/big.md`, part 2", 200_000),
            ("port `specs/big.md`, part 1a", 100_000),
            // its own file is its own
            ("port `specs/big.md`, part 1b with `specs/own.md`", 101_000),
            // no part of the split: the whole file
            ("read `specs/big.md` again", 600_000),
        ];
        for (item, want) in table {
            let above = plan.split_above(item);
            assert_eq!(named_bytes(dir.path(), item, &above), *want, "{item}");
        }
        let part = "port `specs/big.md`, part 2";
        let whole = estimate_item(dir.path(), None, part, &[], 0, 1_000_000);
        let share = estimate_item(dir.path(), Some(&plan), part, &[], 0, 1_000_000);
        assert_eq!((whole.named_tokens, share.named_tokens), (150_000, 50_000));
    }

    #[test]
    fn ledger_round_trip_skips_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let layout = crate::formats::Layout::new(dir.path());
        std::fs::create_dir(&layout.dir).unwrap();
        let path = layout.items();
        assert!(read_ledger(&path).is_empty());
        let a = Sample {
            item: "a".into(),
            tokens: 1,
            estimate: Some(2),
        };
        append_ledger(&path, std::slice::from_ref(&a)).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"garbage\n")
            .unwrap();
        append_ledger(&path, std::slice::from_ref(&a)).unwrap();
        assert_eq!(read_ledger(&path), [a.clone(), a]);
    }
}
