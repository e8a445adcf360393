//! Tiered views of what can grow without bound, for prompts and handoffs:
//! the plan (the current item and the next few in full with their notes,
//! other open items one line each, done items collapsed to a count and the
//! last few), earlier iterations (recent ones detailed, older ones
//! aggregated) and file lists (capped, the rest counted by directory). How
//! much of each is shown is a [`Detail`], which the budget steps down until
//! the text fits (`prompt_budget`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::context::Level;
use crate::formats::RunState;
use crate::plan::Plan;
use crate::prompt::tokens;
use crate::text::cut;

/// Open items after the current one that are always shown in full.
pub const NEXT_IN_FULL: usize = 3;
/// Open items shown one line each after those in full, at most: the agent
/// reads the rest in the plan itself. The budget is a ceiling, not a
/// target: a 3,000-item plan costs what a 30-item one does (`prompt_budget`).
pub(crate) const OPEN_LINES: usize = 10;
/// A one-line item longer than this is cut (the plan has the rest).
const ITEM_CHARS: usize = 240;
/// Notes of the current item, and of each next item, beyond this many
/// tokens are cut with a pointer to the plan's line.
const CURRENT_NOTE_TOKENS: usize = 800;
const NEXT_NOTE_TOKENS: usize = 250;

/// How much of each list a prompt or handoff shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Detail {
    /// Open items shown one line each, after those in full.
    pub(crate) open_lines: usize,
    /// Done items shown (the last ones); the rest are a count.
    pub(crate) done_recent: usize,
    /// Earlier iterations shown in detail (the latest); the rest are one line.
    pub(crate) iterations: usize,
    /// Files listed (in progress, touched); the rest are counted by directory.
    pub(crate) files: usize,
    /// Changed files listed in a handoff and lines of its diff stat.
    pub(crate) changes: usize,
    /// Latest decisions shown inline.
    pub(crate) decisions: usize,
    /// Last lines of a failed `[verify]` command's output.
    pub(crate) verify_lines: usize,
}

impl Detail {
    /// The most a prompt or handoff ever shows.
    pub(crate) const MOST: Detail = Detail {
        open_lines: OPEN_LINES,
        done_recent: 3,
        iterations: 10,
        files: 10,
        changes: 40,
        decisions: 5,
        verify_lines: 40,
    };

    /// The next smaller detail for a text `over` tokens too long, given the
    /// cost of each open one-liner now shown; false when nothing is left to
    /// take away. One-liners go first (they only fill what is left), then
    /// each other list in turn, down to a floor that keeps each section.
    pub(crate) fn shrink(&mut self, over: usize, open_line_costs: &[usize]) -> bool {
        let shown = self.open_lines.min(open_line_costs.len());
        if shown > 0 {
            let mut saved = 0;
            let mut keep = shown;
            while keep > 0 && saved < over {
                keep -= 1;
                saved += open_line_costs[keep];
            }
            self.open_lines = keep;
            return true;
        }
        for (field, floor) in STEPS {
            let value = field(self);
            if *value > floor {
                *value = floor;
                return true;
            }
        }
        false
    }
}

/// The order in which lists give way once the one-liners are gone: each to
/// a floor that keeps its section useful, then to the last floor.
type Field = fn(&mut Detail) -> &mut usize;
const STEPS: [(Field, usize); 11] = [
    (|d| &mut d.changes, 10),
    (|d| &mut d.verify_lines, 15),
    (|d| &mut d.iterations, 3),
    (|d| &mut d.files, 3),
    (|d| &mut d.done_recent, 1),
    (|d| &mut d.decisions, 2),
    (|d| &mut d.iterations, 0),
    (|d| &mut d.changes, 1),
    (|d| &mut d.files, 1),
    (|d| &mut d.decisions, 1),
    (|d| &mut d.verify_lines, 5),
];

/// An item shown in full.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FullItem {
    pub(crate) text: String,
    /// 1-based line in the plan file.
    pub(crate) line: usize,
    /// Its notes, indented as in the plan (cut when long).
    pub(crate) notes: Option<String>,
    pub(crate) current: bool,
}

/// What a prompt or handoff shows of the plan.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PlanTiers {
    pub(crate) done_count: usize,
    pub(crate) open_count: usize,
    /// Done items not listed (before `done_recent`).
    pub(crate) done_hidden: usize,
    pub(crate) done_recent: Vec<String>,
    /// The current item and the next [`NEXT_IN_FULL`] open ones.
    pub(crate) full: Vec<FullItem>,
    /// Further open items, one line each.
    pub(crate) others: Vec<String>,
    /// Open items not shown at all.
    pub(crate) more_open: usize,
}

impl PlanTiers {
    pub(crate) fn new(plan: &Plan, detail: &Detail) -> PlanTiers {
        let done: Vec<&str> = plan.done().map(|i| i.text.as_str()).collect();
        let recent = detail.done_recent.min(done.len());
        let open: Vec<(usize, &crate::plan::Item)> = plan
            .items
            .iter()
            .enumerate()
            .filter(|(_, i)| !i.done)
            .collect();
        let full: Vec<FullItem> = open
            .iter()
            .take(1 + NEXT_IN_FULL)
            .enumerate()
            .map(|(n, (index, item))| {
                let budget = if n == 0 {
                    CURRENT_NOTE_TOKENS
                } else {
                    NEXT_NOTE_TOKENS
                };
                FullItem {
                    text: cut(&item.text, ITEM_CHARS * 4),
                    line: item.line,
                    notes: plan.notes_of(*index).map(|n| {
                        cut_tokens(
                            n,
                            budget,
                            &format!("  … (the rest is at line {} of the plan)", item.line),
                        )
                    }),
                    // `[~]` makes an item current (plan.rs).
                    current: plan.current().is_some_and(|c| c.line == item.line),
                }
            })
            .collect();
        let rest = &open[full.len()..];
        let others: Vec<String> = rest
            .iter()
            .take(detail.open_lines)
            .map(|(_, i)| cut(&i.text, ITEM_CHARS))
            .collect();
        PlanTiers {
            done_count: done.len(),
            open_count: open.len(),
            done_hidden: done.len() - recent,
            done_recent: done[done.len() - recent..]
                .iter()
                .map(|t| cut(t, ITEM_CHARS))
                .collect(),
            more_open: rest.len() - others.len(),
            full,
            others,
        }
    }

    /// The token cost of each open item that could be a one-liner, in order.
    pub(crate) fn open_line_costs(plan: &Plan) -> Vec<usize> {
        plan.open()
            .skip(1 + NEXT_IN_FULL)
            .map(|i| tokens::estimate(&format!("- [ ] {}\n", cut(&i.text, ITEM_CHARS))))
            .collect()
    }
}

/// One earlier iteration as the prompt shows it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HistoryLine {
    pub(crate) iteration: u32,
    pub(crate) outcome: String,
    pub(crate) checkpoint: bool,
    pub(crate) level: Option<&'static str>,
    pub(crate) peak_percent: f64,
}

/// Earlier iterations: the latest in detail, the others in one line.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct HistoryTiers {
    /// "iterations 1–990: 700 done, 200 checkpoint, 90 failed; context peak up to 96%".
    pub(crate) older: Option<String>,
    pub(crate) recent: Vec<HistoryLine>,
}

impl HistoryTiers {
    pub(crate) fn new(state: &RunState, detail: &Detail) -> HistoryTiers {
        let all = &state.history;
        let split = all.len() - detail.iterations.min(all.len());
        let peaks: BTreeMap<u32, (f64, bool, Option<Level>)> = state
            .context_history
            .iter()
            .map(|c| (c.iteration, (c.peak_percent, c.checkpoint, c.level)))
            .collect();
        let recent = all[split..]
            .iter()
            .map(|h| {
                let c = peaks.get(&h.iteration);
                HistoryLine {
                    iteration: h.iteration,
                    outcome: cut(&h.outcome.to_string(), ITEM_CHARS),
                    checkpoint: c.is_some_and(|c| c.1),
                    level: c.and_then(|c| c.2).map(Level::name),
                    peak_percent: c.map_or(0.0, |c| c.0),
                }
            })
            .collect();
        let older = (split > 0).then(|| {
            let old = &all[..split];
            let mut kinds: Vec<(String, usize)> = Vec::new();
            for h in old {
                let kind = h.outcome.kind();
                match kinds.iter_mut().find(|(k, _)| *k == kind) {
                    Some((_, n)) => *n += 1,
                    None => kinds.push((kind, 1)),
                }
            }
            kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
            let peak = old
                .iter()
                .filter_map(|h| peaks.get(&h.iteration).map(|c| c.0))
                .fold(0.0, f64::max);
            let counts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
            format!(
                "iterations {}–{} ({} in all): {}; context peak up to {}%",
                old[0].iteration,
                old[old.len() - 1].iteration,
                old.len(),
                counts.join(", "),
                crate::context::round1(peak)
            )
        });
        HistoryTiers { older, recent }
    }
}

/// A list capped at some length, the rest counted by directory.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Capped<T> {
    pub(crate) shown: Vec<T>,
    /// How many were left out.
    pub(crate) more: usize,
    /// "9,992 more (`build/out/` 9,990, `src/` 2)", or empty.
    pub(crate) summary: String,
}

/// The first `n` of `items`; `path` names each for the directory summary.
pub(crate) fn cap<T: Clone>(items: &[T], n: usize, path: impl Fn(&T) -> &str) -> Capped<T> {
    let shown = items[..n.min(items.len())].to_vec();
    let rest = &items[shown.len()..];
    Capped {
        more: rest.len(),
        summary: summary(rest.iter().map(path), rest.len()),
        shown,
    }
}

/// At most `n` of `items`: whole directories, those with the fewest
/// changes first (in the items' order), so ten thousand build outputs do
/// not hide the three sources the agent wrote; they are counted by
/// directory instead. When even the smallest directory does not fit, its
/// first `n`.
pub(crate) fn cap_spread<T: Clone>(items: &[T], n: usize, path: impl Fn(&T) -> &str) -> Capped<T> {
    if items.len() <= n {
        return cap(items, n, path);
    }
    let mut per_dir: BTreeMap<String, usize> = BTreeMap::new();
    for item in items {
        *per_dir.entry(directory(path(item))).or_default() += 1;
    }
    let mut sizes: Vec<(usize, String)> = per_dir.into_iter().map(|(d, c)| (c, d)).collect();
    sizes.sort();
    let mut listed: Vec<&str> = Vec::new();
    let mut total = 0;
    for (count, dir) in &sizes {
        if total + count > n {
            break;
        }
        total += count;
        listed.push(dir);
    }
    if listed.is_empty() {
        return cap(items, n, path);
    }
    let (shown, rest): (Vec<&T>, Vec<&T>) = items
        .iter()
        .partition(|i| listed.contains(&directory(path(i)).as_str()));
    Capped {
        shown: shown.into_iter().cloned().collect(),
        more: rest.len(),
        summary: summary(rest.iter().map(|i| path(i)), rest.len()),
    }
}

fn summary<'a>(paths: impl Iterator<Item = &'a str>, n: usize) -> String {
    if n == 0 {
        return String::new();
    }
    format!("{} more ({})", thousands(n), by_directory(paths))
}

/// The directory a path is counted in: two levels deep at most.
fn directory(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').collect();
    match parts.len() {
        0 | 1 => "./".to_string(),
        2 => format!("{}/", parts[0]),
        _ => format!("{}/{}/", parts[0], parts[1]),
    }
}

/// Directories (two levels deep) with their counts, largest first, at most eight.
fn by_directory<'a>(paths: impl Iterator<Item = &'a str>) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for p in paths {
        *counts.entry(directory(p)).or_default() += 1;
    }
    let mut sorted: Vec<(String, usize)> = counts.into_iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut parts: Vec<String> = sorted
        .iter()
        .take(8)
        .map(|(d, n)| format!("`{d}` {}", thousands(*n)))
        .collect();
    let elsewhere: usize = sorted.iter().skip(8).map(|(_, n)| n).sum();
    if elsewhere > 0 {
        parts.push(format!("{} elsewhere", thousands(elsewhere)));
    }
    parts.join(", ")
}

/// A `git diff --stat` text cut to the lines of the files `keep` accepts
/// (at most `n`) and its summary line.
pub(crate) fn cap_stat(stat: &str, n: usize, keep: impl Fn(&str) -> bool) -> String {
    let lines: Vec<&str> = stat.lines().collect();
    let Some((summary, files)) = lines.split_last() else {
        return String::new();
    };
    let already = files
        .last()
        .and_then(|l| l.trim().strip_prefix("... and "))
        .and_then(|l| l.strip_suffix(" more files"))
        .and_then(|n| n.parse::<usize>().ok());
    let files = if already.is_some() {
        &files[..files.len() - 1]
    } else {
        files
    };
    let mut out: Vec<String> = files
        .iter()
        .filter(|l| keep(l.split(" | ").next().unwrap_or_default().trim()))
        .take(n)
        .map(|l| l.to_string())
        .collect();
    let hidden = files.len() - out.len() + already.unwrap_or(0);
    if hidden > 0 {
        out.push(format!(" ... and {hidden} more files"));
    }
    out.push(summary.to_string());
    out.join("\n")
}

/// "10,000".
pub(crate) fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `text` cut at a line end so that it costs at most about `max` tokens,
/// with `tail` appended when cut.
pub(crate) fn cut_tokens(text: &str, max: usize, tail: &str) -> String {
    if tokens::estimate(text) <= max {
        return text.to_string();
    }
    let mut out = String::new();
    let mut used = tokens::estimate(tail);
    for line in text.lines() {
        let cost = tokens::estimate(line) + 1;
        if used + cost > max {
            // A single huge line: keep what fits of it.
            if out.is_empty() {
                out.push_str(&cut(line, max.saturating_sub(used) * 3));
                out.push('\n');
            }
            break;
        }
        used += cost;
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(tail);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{HistoryEntry, IterationRecord};

    fn plan(open: usize, done: usize) -> Plan {
        let mut text = String::new();
        for i in 0..done {
            text.push_str(&format!("- [x] done {i}\n"));
        }
        for i in 0..open {
            text.push_str(&format!("- [ ] open {i}\n  note of {i}\n"));
        }
        Plan::parse(&text)
    }

    #[test]
    fn plan_tiers_show_current_and_next_in_full_and_count_the_rest() {
        let p = plan(10, 5);
        let d = Detail {
            open_lines: 2,
            ..Detail::MOST
        };
        let t = PlanTiers::new(&p, &d);
        assert_eq!((t.done_count, t.open_count), (5, 10));
        assert_eq!(t.done_hidden, 2);
        assert_eq!(t.done_recent, ["done 2", "done 3", "done 4"]);
        let full: Vec<&str> = t.full.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(full, ["open 0", "open 1", "open 2", "open 3"]);
        assert!(t.full[0].current && !t.full[1].current);
        assert_eq!(t.full[1].notes.as_deref(), Some("  note of 1"));
        assert_eq!(t.others, ["open 4", "open 5"]);
        assert_eq!(t.more_open, 4);
        assert_eq!(PlanTiers::open_line_costs(&p).len(), 6);
    }

    #[test]
    fn long_notes_are_cut_with_a_pointer_to_the_plan() {
        let mut text = "- [ ] big\n".to_string();
        for i in 0..2000 {
            text.push_str(&format!("  line {i} of a very long note about the item\n"));
        }
        let t = PlanTiers::new(&Plan::parse(&text), &Detail::MOST);
        let notes = t.full[0].notes.as_deref().unwrap();
        assert!(
            tokens::estimate(notes) <= CURRENT_NOTE_TOKENS + 5,
            "{}",
            tokens::estimate(notes)
        );
        assert!(
            notes.ends_with("(the rest is at line 1 of the plan)"),
            "{notes}"
        );
    }

    #[test]
    fn shrink_drops_one_liners_first_then_each_list_to_a_floor() {
        let mut d = Detail::MOST;
        assert!(d.shrink(25, &[10, 10, 10, 10]));
        assert_eq!(d.open_lines, 1);
        assert!(d.shrink(5, &[10]));
        assert_eq!(d.open_lines, 0);
        let mut steps = 0;
        while d.shrink(100, &[]) {
            steps += 1;
            assert!(steps < 100);
        }
        assert_eq!(
            d,
            Detail {
                open_lines: 0,
                done_recent: 1,
                iterations: 0,
                files: 1,
                changes: 1,
                decisions: 1,
                verify_lines: 5,
            }
        );
    }

    #[test]
    fn history_tiers_aggregate_older_iterations() {
        let mut s = RunState::default();
        for i in 1..=30u32 {
            let outcome = match i % 3 {
                0 => "checkpoint (context, L2)",
                1 => "done",
                _ => "failed",
            };
            s.history.push(IterationRecord {
                iteration: i,
                outcome: outcome.into(),
                ..IterationRecord::default()
            });
            s.context_history.push(HistoryEntry {
                iteration: i,
                peak_percent: f64::from(i),
                checkpoint: i % 3 == 0,
                level: (i % 3 == 0).then_some(Level::L2),
                ..HistoryEntry::default()
            });
        }
        let h = HistoryTiers::new(
            &s,
            &Detail {
                iterations: 2,
                ..Detail::MOST
            },
        );
        assert_eq!(h.recent.len(), 2);
        assert_eq!(h.recent[1].iteration, 30);
        assert_eq!(h.recent[1].level, Some("L2"));
        assert_eq!(
            h.older.as_deref(),
            Some(
                "iterations 1–28 (28 in all): 10 done, 9 failed, 9 checkpoint; context peak up to 28%"
            )
        );
        assert!(
            HistoryTiers::new(&RunState::default(), &Detail::MOST)
                .older
                .is_none()
        );
    }

    #[test]
    fn caps_count_the_rest_by_directory() {
        let paths: Vec<String> = (0..10_000)
            .map(|i| format!("build/out/f{i}.o"))
            .chain(["src/main.rs".to_string(), "README.md".to_string()])
            .collect();
        let c = cap(&paths, 3, |p| p.as_str());
        assert_eq!(c.shown.len(), 3);
        assert_eq!(c.more, 9_999);
        assert_eq!(
            c.summary,
            "9,999 more (`build/out/` 9,997, `./` 1, `src/` 1)"
        );
        let spread = cap_spread(&paths, 3, |p| p.as_str());
        assert_eq!(spread.shown, ["src/main.rs", "README.md"]);
        assert_eq!(spread.summary, "10,000 more (`build/out/` 10,000)");
        let one_dir = cap_spread(&paths[..10], 3, |p| p.as_str());
        assert_eq!(
            one_dir.shown,
            ["build/out/f0.o", "build/out/f1.o", "build/out/f2.o"]
        );
        assert_eq!(cap(&paths[..2], 3, |p| p.as_str()).summary, "");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }

    #[test]
    fn cap_stat_keeps_the_summary_and_counts_hidden_lines() {
        let stat = " a | 1 +\n b | 1 +\n c | 1 +\n ... and 7 more files\n 10 files changed, 10 insertions(+)";
        let all = |_: &str| true;
        assert_eq!(
            cap_stat(stat, 1, all),
            " a | 1 +\n ... and 9 more files\n 10 files changed, 10 insertions(+)"
        );
        assert_eq!(
            cap_stat(stat, 5, |p| p == "c"),
            " c | 1 +\n ... and 9 more files\n 10 files changed, 10 insertions(+)"
        );
        assert_eq!(
            cap_stat(" a | 1 +\n 1 file changed", 5, all),
            " a | 1 +\n 1 file changed"
        );
        assert_eq!(cap_stat("", 5, all), "");
    }
}
