//! A fleet worker's events (docs/fleet.md, docs/events.md): `Event::Fleet`,
//! one typed record per happening, on the one bus like every other event
//! (redacted, written 0600, `--json`, notifications), each record carrying
//! its worker (`Record::worker`). Their names all begin with `fleet_`.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

/// A fleet worker's event (`event` in the JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event")]
pub enum FleetEvent {
    /// This worker created the run from its plan, or joined it.
    #[serde(rename = "fleet_joined")]
    Joined {
        created: bool,
        run_branch: String,
        open_items: usize,
    },
    #[serde(rename = "fleet_claimed")]
    Claimed {
        item: String,
        text: String,
        generation: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        took_over_from: Option<String>,
    },
    /// Work of a takeover restored from the previous holder's pushed snapshot.
    #[serde(rename = "fleet_restored")]
    Restored { item: String, commit: String },
    /// No open item is free (held by a live lease, or waiting for one that
    /// is): waiting for one to free up.
    #[serde(rename = "fleet_waiting")]
    Waiting { open: usize },
    /// A fetch or push failed: the work stays in the clone; retried later.
    #[serde(rename = "fleet_unreachable")]
    Unreachable { error: String, retry_in_secs: u64 },
    /// The remote stayed unreachable for `[fleet] max_unreachable`
    /// (`after_secs`): the worker stops as on SIGTERM and exits 2.
    #[serde(rename = "fleet_remote_gone")]
    RemoteGone { error: String, after_secs: u64 },
    /// The remote answers again after `after_secs`.
    #[serde(rename = "fleet_reconnected")]
    Reconnected { after_secs: u64 },
    /// The item's lease was taken over by another worker (ours had expired).
    #[serde(rename = "fleet_lost")]
    Lost { item: String, holder: String },
    #[serde(rename = "fleet_merged")]
    Merged {
        item: String,
        text: String,
        commit: String,
    },
    /// The merge conflicted: the item goes back to this worker to bring its
    /// branch up to date.
    #[serde(rename = "fleet_conflict")]
    Conflict { item: String, files: Vec<String> },
    /// The claim was given up with the work pushed (stop, or the loop ended without completing).
    #[serde(rename = "fleet_released")]
    Released {
        item: String,
        why: String,
        exit_code: i32,
    },
    /// The item is given up for the whole fleet, its work pushed: no other
    /// worker takes it (a conflict that stays, a push the remote refused).
    #[serde(rename = "fleet_given_up")]
    GivenUp {
        item: String,
        text: String,
        why: String,
    },
    /// The remote's rules refused a push (a hook, a protected ref): the
    /// server's message, as it said it.
    #[serde(rename = "fleet_refused")]
    Refused { item: String, message: String },
    /// The remote's rules refused another worker's push of `item` (`why`,
    /// as that worker gave it up): every item would meet them, so this
    /// worker starts none and exits 1 without a session.
    #[serde(rename = "fleet_rules_refuse")]
    RulesRefuse { item: String, why: String },
    /// Nothing left this worker may take: the open items are given up.
    #[serde(rename = "fleet_left_to_a_person")]
    LeftToAPerson { items: Vec<String> },
    /// The shared budget is spent.
    #[serde(rename = "fleet_budget_spent")]
    BudgetSpent { what: String },
    /// This worker's agent hit a usage limit: recorded on the ledger, so
    /// that every worker pauses until it resets.
    #[serde(rename = "fleet_limit_shared")]
    LimitShared { until: Timestamp },
    /// A usage limit another worker hit: no new item (and, with `item`, this
    /// item's loop checkpointed and stopped) until it resets.
    #[serde(rename = "fleet_paused")]
    Paused {
        by: String,
        until: Timestamp,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        item: Option<String>,
    },
    /// The worker's last push (everything it leaves on the remote as it
    /// exits, all or nothing) did not go through: what the remote lacks,
    /// and the item's branch whose commits are only in this clone.
    #[serde(rename = "fleet_unrecorded")]
    Unrecorded {
        error: String,
        missing: Vec<Unrecorded>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        item: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        only_local: Option<String>,
    },
    #[serde(rename = "fleet_finished")]
    Finished { exit_code: i32 },
}

/// One thing a worker's last push would have left on the remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unrecorded {
    /// Its status (`workers/<id>`).
    Status,
    /// Its end record (`ends/…`).
    EndRecord,
    /// What its loops spent since the ledger last counted.
    Spending,
    /// The delete of its item's claim.
    Release,
    /// Its item's branch as committed in the clone.
    Branch,
    /// A snapshot of its item's work tree.
    Snapshot,
    /// Its item loop's record for the morning report.
    LoopRecord,
}

impl Unrecorded {
    /// What the remote lacks, and how the fleet does without it.
    fn human(self) -> &'static str {
        match self {
            Unrecorded::Status => {
                "its status (`ralph status --fleet` shows its last word, and the worker dead once a lease passes)"
            }
            Unrecorded::EndRecord => {
                "its end record (its records stay in this clone's .ralph/fleet/ log; the morning report lacks how it ended)"
            }
            Unrecorded::Spending => {
                "what its loop spent since the ledger last counted (the fleet's budget does not count it)"
            }
            Unrecorded::Release => {
                "the release of its item (the claim expires a lease after its last renewal, then another worker takes the item over from its branch as last pushed)"
            }
            Unrecorded::Branch => "its item's last commits",
            Unrecorded::Snapshot => {
                "its item's last snapshot (a takeover starts from the one pushed before)"
            }
            Unrecorded::LoopRecord => "its item loop's record (the morning report lacks the round)",
        }
    }
}

impl FleetEvent {
    /// The line a person reads (`ralph fleet [worker]: …`).
    pub(crate) fn human(&self) -> String {
        match self {
            FleetEvent::Joined {
                created: true,
                run_branch,
                open_items,
            } => {
                format!("created the run ({run_branch}, {open_items} open items)")
            }
            FleetEvent::Joined {
                run_branch,
                open_items,
                ..
            } => {
                format!("joined the run ({run_branch}, {open_items} open items)")
            }
            FleetEvent::Claimed {
                item,
                text,
                generation,
                took_over_from,
            } => match took_over_from {
                Some(from) => format!(
                    "took over {item} \"{text}\" from {from} (its lease expired; generation {generation})"
                ),
                None => format!("claimed {item} \"{text}\""),
            },
            FleetEvent::Restored { item, commit } => {
                format!(
                    "{item}: resumed from the previous worker's pushed snapshot ({})",
                    &commit[..commit.len().min(10)]
                )
            }
            FleetEvent::Waiting { open } => {
                format!(
                    "waiting: none of the {open} open items is free (held by other workers, or waiting for items they hold)"
                )
            }
            FleetEvent::Unreachable {
                error,
                retry_in_secs,
            } => {
                format!(
                    "the remote cannot be reached, work kept in this clone; retrying in {retry_in_secs}s ({error})"
                )
            }
            FleetEvent::RemoteGone { error, after_secs } => format!(
                "the remote has not answered for {after_secs}s ([fleet] max_unreachable): stopping, the work kept in this clone ({error})"
            ),
            FleetEvent::Reconnected { after_secs } => {
                format!("the remote answers again after {after_secs}s")
            }
            FleetEvent::Lost { item, holder } => {
                format!(
                    "{item}: lost to {holder} (our lease expired); our branch stays in this clone"
                )
            }
            FleetEvent::Merged { item, text, commit } => {
                format!(
                    "merged {item} \"{text}\" into the run branch ({})",
                    &commit[..commit.len().min(10)]
                )
            }
            FleetEvent::Conflict { item, files } => {
                format!(
                    "{item}: merge conflict in {}; back to the agent to bring the branch up to date",
                    files.join(", ")
                )
            }
            FleetEvent::Released {
                item,
                why,
                exit_code,
            } => {
                format!("released {item} with its work pushed ({why}, loop exit {exit_code})")
            }
            FleetEvent::GivenUp { item, text, why } => {
                format!("gave {item} \"{text}\" up for the whole fleet, its work pushed: {why}")
            }
            FleetEvent::Refused { item, message } => {
                format!("{item}: the remote refused the push: {message}")
            }
            FleetEvent::RulesRefuse { item, why } => format!(
                "no item started: {item} was given up because {why}; every item's work would meet the same rule (fix it, then free the item: `ralph status --fleet` names its claim)"
            ),
            FleetEvent::LeftToAPerson { items } => format!(
                "nothing left to take: {} open item(s) given up, left to a person (`ralph status --fleet`)",
                items.len()
            ),
            FleetEvent::BudgetSpent { what } => format!("the fleet's budget is spent: {what}"),
            FleetEvent::LimitShared { until } => format!(
                "usage limit hit: recorded on the remote, every worker pauses until {until}"
            ),
            FleetEvent::Paused { by, until, item } => match item {
                Some(item) => format!(
                    "{item}: usage limit hit by {by}: checkpointed and paused until {until}, then going on"
                ),
                None => format!("usage limit hit by {by}: no new item until {until}"),
            },
            FleetEvent::Unrecorded {
                error,
                missing,
                item,
                only_local,
            } => {
                let missing: Vec<&str> = missing.iter().map(|m| m.human()).collect();
                let mut line = format!(
                    "the remote did not take this worker's last push ({error}); it lacks: {}",
                    missing.join("; ")
                );
                if let (Some(item), Some(branch)) = (item, only_local) {
                    line.push_str(&format!(
                        ". {item}'s commits not on the remote are only in this clone, on {branch}: push them with `git push origin {branch}` or merge them by hand"
                    ));
                }
                line
            }
            FleetEvent::Finished { exit_code } => format!("finished (exit {exit_code})"),
        }
    }
}
