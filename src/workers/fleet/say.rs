//! What a fleet worker tells its user: one typed record per happening,
//! printed as a line on stderr (`--json`: the record as JSON on stdout)
//! and appended to `.ralph/fleet/<name>/events.jsonl` in its clone.

use std::io::Write as _;
use std::path::PathBuf;

use jiff::Timestamp;
use serde::Serialize;

/// A fleet worker's event (`event` in the JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum FleetEvent {
    /// This worker created the run from its plan, or joined it.
    Joined {
        created: bool,
        run_branch: String,
        open_items: usize,
    },
    Claimed {
        item: String,
        text: String,
        generation: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        took_over_from: Option<String>,
    },
    /// Work of a takeover restored from the previous holder's pushed snapshot.
    Restored {
        item: String,
        commit: String,
    },
    /// No open item is free (held by a live lease, or waiting for one that
    /// is): waiting for one to free up.
    Waiting {
        open: usize,
    },
    /// A fetch or push failed: the work stays in the clone; retried later.
    Unreachable {
        error: String,
        retry_in_secs: u64,
    },
    /// The remote stayed unreachable for `[fleet] max_unreachable`
    /// (`after_secs`): the worker stops as on SIGTERM and exits 2.
    RemoteGone {
        error: String,
        after_secs: u64,
    },
    /// The remote answers again after `after_secs`.
    Reconnected {
        after_secs: u64,
    },
    /// The item's lease was taken over by another worker (ours had expired).
    Lost {
        item: String,
        holder: String,
    },
    Merged {
        item: String,
        text: String,
        commit: String,
    },
    /// The merge conflicted: the item goes back to this worker to bring its
    /// branch up to date.
    Conflict {
        item: String,
        files: Vec<String>,
    },
    /// The claim was given up with the work pushed (stop, or the loop ended without completing).
    Released {
        item: String,
        why: String,
        exit_code: i32,
    },
    /// The item is given up for the whole fleet, its work pushed: no other
    /// worker takes it (a conflict that stays, a push the remote refused).
    GivenUp {
        item: String,
        text: String,
        why: String,
    },
    /// The remote's rules refused a push (a hook, a protected ref): the
    /// server's message, as it said it.
    Refused {
        item: String,
        message: String,
    },
    /// Nothing left this worker may take: the open items are given up.
    LeftToAPerson {
        items: Vec<String>,
    },
    /// The shared budget is spent.
    BudgetSpent {
        what: String,
    },
    /// This worker's agent hit a usage limit: recorded on the ledger, so
    /// that every worker pauses until it resets.
    LimitShared {
        until: Timestamp,
    },
    /// A usage limit another worker hit: no new item (and, with `item`, this
    /// item's loop checkpointed and stopped) until it resets.
    Paused {
        by: String,
        until: Timestamp,
        #[serde(skip_serializing_if = "Option::is_none")]
        item: Option<String>,
    },
    Finished {
        exit_code: i32,
    },
}

impl FleetEvent {
    fn human(&self) -> String {
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
            FleetEvent::Finished { exit_code } => format!("finished (exit {exit_code})"),
        }
    }
}

#[derive(Serialize)]
struct Line<'a> {
    at: Timestamp,
    worker: &'a str,
    #[serde(flatten)]
    event: &'a FleetEvent,
}

/// Where a worker's events go.
pub(crate) struct Say {
    worker: String,
    json: bool,
    log: PathBuf,
}

impl Say {
    pub(crate) fn new(worker: &str, json: bool, log: PathBuf) -> Say {
        if let Some(dir) = log.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        Say {
            worker: worker.to_string(),
            json,
            log,
        }
    }

    pub(crate) fn say(&self, event: FleetEvent) {
        let line = serde_json::to_string(&Line {
            at: Timestamp::now(),
            worker: &self.worker,
            event: &event,
        })
        .expect("an event serialises");
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
        {
            let _ = writeln!(f, "{line}");
        }
        if self.json {
            println!("{line}");
        } else {
            let human = event.human();
            let text = crate::text::printable(&human);
            eprintln!("ralph fleet [{}]: {text}", self.worker);
        }
    }
}
