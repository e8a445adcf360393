//! The fleet worker: `ralph run --remote R --fleet NAME`. Join (or create)
//! the run, then until every item is merged: claim an item (or take over
//! one whose lease expired), run an ordinary loop on it in its own worktree
//! while renewing the claim and pushing its branch and a snapshot every
//! third of a lease, then merge it under the merge lease (`merge.rs`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use git2::{Oid, Repository};

use super::child;
use super::job::{Halt, ItemEnd, Job, Left};
use super::lease::{Names, valid_component};
use super::loops::LoopEnd;
use super::meter::Meter;
use super::remote::{Fleet, Held, Ledger, Spent, View, WorkerState};
use super::say::{FleetEvent, Say};
use super::units::{Unit, item_plan, units};
use super::wire::WireError;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::events::Bus;
use crate::repo::Repo;
use crate::supervisor::start::{Begun, Kind, Start};
use crate::workers::child::WORKER_PLAN;

/// What the command line gave.
pub(crate) struct Options {
    pub(crate) remote: String,
    pub(crate) fleet: String,
    pub(crate) worker: Option<String>,
    pub(crate) json: bool,
    /// Passed on to each item's loop (`--model`, `--agent`).
    pub(crate) loop_args: Vec<OsString>,
    /// `--trust-config`: files changed during the last run are the user's.
    pub(crate) trust_config: bool,
}

pub(crate) struct Worker {
    pub(super) fleet: Fleet,
    pub(super) say: Say,
    pub(super) config: Config,
    /// The project root inside the clone's work tree, and the plan, relative to the work tree.
    pub(super) root_rel: PathBuf,
    pub(super) plan_rel: PathBuf,
    pub(super) root: PathBuf,
    pub(super) loop_args: Vec<OsString>,
    pub(super) unreachable_since: Option<Instant>,
    pub(super) failures: u32,
    pub(super) spent: Spent,
    /// Its item loop's live reading, the one last published, and when
    /// the worker last published its status (`reach.rs`).
    pub(super) live: Option<super::live::Live>,
    pub(super) live_said: Option<super::live::Live>,
    pub(super) said_at: Option<Instant>,
    /// What its loops spent that a stopping worker did not put on the
    /// ledger yet (and a usage limit its agent hit): its exit's push pays it.
    pub(super) owed: (Spent, Option<super::remote::Limit>),
    /// The item it gives back as it exits (`leave_item`).
    pub(super) leaving: Option<Left>,
}

pub(crate) fn run(project_root: &Path, config: Config, opts: Options) -> Result<i32> {
    let names = Names::new(&opts.fleet)?;
    let repo = Repository::discover(project_root).map_err(|e| {
        Error::usage("a fleet worker needs a git clone of the fleet's remote").with_hint(format!(
            "clone the repository and run `ralph run --remote R --fleet NAME` in it ({})",
            e.message()
        ))
    })?;
    let workdir = repo
        .workdir()
        .ok_or_else(|| Error::usage("a fleet worker needs a clone with a work tree"))?
        .canonicalize()
        .map_err(|e| Error::io("cannot read", project_root, e))?;
    let root = project_root
        .canonicalize()
        .map_err(|e| Error::io("cannot read", project_root, e))?;
    let root_rel = root
        .strip_prefix(&workdir)
        .unwrap_or(Path::new(""))
        .to_path_buf();
    let plan_rel = root_rel.join(&config.plan);
    let worker = worker_id(opts.worker.as_deref())?;
    let f = &config.fleet;
    let fleet = Fleet::open(
        &workdir,
        &opts.remote,
        names.clone(),
        &worker,
        f.lease.0,
        f.clock_skew.0,
        f.network_timeout.0,
    )
    .map_err(|e| Error::wrap("cannot open the clone", e))?;
    // The one start of every run (`supervisor::start`): the checks before
    // anything is written, the clone's lock (one worker per clone), the
    // log, signals, notify. The lock and the claim are held to the end.
    let checked = Start::check(
        &root,
        &config,
        Kind::Fleet(names.fleet()),
        opts.trust_config,
    )?;
    let mut bus = Bus::new();
    bus.add(super::say::display(opts.json));
    let Begun {
        lock: _lock,
        claim: _claim,
        signals,
        ..
    } = checked.begin(Repo::open(&root).ok().flatten().as_ref(), None, &mut bus)?;
    let mut say = Say::new(&worker, bus);
    let on_actions = std::env::var_os("GITHUB_ACTIONS").is_some_and(|v| v == "true");
    if let Some(warning) = cancel_window(on_actions, config.fleet.grace.0) {
        say.warn(warning);
    }
    child::catch_stop_signals(signals);
    let mut w = Worker {
        fleet,
        say,
        config,
        root_rel,
        plan_rel,
        root,
        loop_args: opts.loop_args,
        unreachable_since: None,
        failures: 0,
        spent: Spent::default(),
        live: None,
        live_said: None,
        said_at: None,
        owed: (Spent::default(), None),
        leaving: None,
    };
    let code = w.work()?;
    // Stopped because the remote is gone: as when it cannot be reached at start.
    let code = if child::remote_gone() { 2 } else { code };
    w.end(code);
    Ok(code)
}

/// `--worker`, else `RALPH_WORKER`, else the host name and pid.
fn worker_id(given: Option<&str>) -> Result<String> {
    let id = match given
        .map(String::from)
        .or_else(|| std::env::var("RALPH_WORKER").ok())
    {
        Some(id) => id,
        None => {
            let host = crate::platform::hostname().unwrap_or_else(|| "host".into());
            let host: String = host
                .trim()
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '-'
                    }
                })
                .collect();
            format!("{host}-{}", std::process::id())
        }
    };
    if valid_component(&id) {
        Ok(id)
    } else {
        Err(
            Error::usage(format!("the worker name `{id}` cannot name a ref"))
                .with_hint("use letters, digits, `.`, `_` and `-`"),
        )
    }
}

impl Worker {
    pub(super) fn work(&mut self) -> Result<i32> {
        let view = self.join()?;
        let mut view = Some(view);
        loop {
            if child::stop_requested() {
                return Ok(130);
            }
            let v = match view.take() {
                Some(v) => v,
                None => match self.sync() {
                    Some(v) => v,
                    None => continue,
                },
            };
            let all = self.plan_units(&v)?;
            let open = all.iter().filter(|u| u.open()).count();
            if open == 0 {
                return Ok(0);
            }
            if let Some((_, ledger)) = &v.ledger {
                if let Some(what) = self.budget_spent(ledger) {
                    self.say.say(FleetEvent::BudgetSpent { what });
                    return Ok(5);
                }
                // One usage limit pauses the fleet: no new item until it resets.
                if let Some(limit) = ledger.limited(jiff::Timestamp::now()).cloned() {
                    self.say.say(FleetEvent::Paused {
                        by: limit.by.clone(),
                        until: limit.until,
                        item: None,
                    });
                    let note = format!("usage limit hit by {} until {}", limit.by, limit.until);
                    self.status(WorkerState::Waiting, None, &note);
                    let left = limit.until.duration_since(jiff::Timestamp::now());
                    self.pause(left.unsigned_abs());
                    continue;
                }
            }
            let given_up = |u: &Unit| {
                v.claims
                    .get(&u.key)
                    .is_some_and(|(_, l)| l.given_up.is_some())
            };
            let ready: Vec<Unit> = super::units::ready(&all)
                .into_iter()
                .filter(|u| !given_up(u))
                .cloned()
                .collect();
            let left: Vec<String> = all
                .iter()
                .filter(|u| u.open() && given_up(u))
                .map(|u| u.key.clone())
                .collect();
            let live = all
                .iter()
                .any(|u| u.open() && !given_up(u) && v.claims.contains_key(&u.key));
            // Nothing to take and nothing anyone works on: only a person
            // can go on from here (a given-up item, or items after one).
            if ready.is_empty() && !live && !left.is_empty() {
                self.say.say(FleetEvent::LeftToAPerson { items: left });
                return Ok(4);
            }
            // Another worker's push met the remote's rules: so would this
            // one's, after a session paid for nothing.
            let refused = all.iter().filter(|u| u.open()).find_map(|u| {
                let (_, lease) = v.claims.get(&u.key)?;
                let why = lease.given_up.as_ref().filter(|_| lease.refused)?;
                Some((u.key.clone(), why.clone()))
            });
            if let (Some((item, why)), false) = (refused, ready.is_empty()) {
                self.say.say(FleetEvent::RulesRefuse { item, why });
                return Ok(1);
            }
            let Some(held) = self.claim_one(&v, &ready)? else {
                self.say_waiting(&v, open);
                self.pause(self.poll());
                continue;
            };
            let unit = ready
                .iter()
                .find(|u| u.key == held.lease.what)
                .cloned()
                .expect("claimed from open");
            match self.work_on(&v, &unit, held)? {
                ItemEnd::Merged | ItemEnd::Gone => {}
                ItemEnd::Stopped => return Ok(130),
                ItemEnd::Failed(code) => return Ok(code),
                ItemEnd::Refused(_) => unreachable!("work_on gives a refused item up"),
            }
        }
    }

    /// Fetch; create the run from this clone's HEAD if there is none yet.
    pub(super) fn join(&mut self) -> Result<View> {
        let first = self
            .fleet
            .sync()
            .map_err(|e| start_error(&e, self.fleet.wire().remote()))?;
        let head = self
            .fleet
            .repo()
            .head()
            .ok()
            .and_then(|h| h.target())
            .ok_or_else(|| Error::usage("the clone has no commit to start the run from"))?;
        if first.run.is_some() {
            self.refuse_a_finished_run(&first, head)?;
        }
        let created = if first.run.is_none() {
            self.fleet
                .create_run(head, &self.plan_rel.to_string_lossy())
                .map_err(|e| start_error(&e, self.fleet.wire().remote()))?
        } else {
            false
        };
        let view = self
            .fleet
            .sync()
            .map_err(|e| start_error(&e, self.fleet.wire().remote()))?;
        let open = self.plan_units(&view)?.iter().filter(|u| u.open()).count();
        self.say.say(FleetEvent::Joined {
            created,
            run_branch: self.fleet.names().run_branch(),
            open_items: open,
        });
        Ok(view)
    }

    /// A fleet's name is bound to the plan it started from: a run that
    /// finished its plan is not joined by a worker whose plan has open
    /// items the run never had (they would be ignored and the worker exit
    /// 0 at once); it is told to start a new fleet for them.
    fn refuse_a_finished_run(&self, view: &View, head: Oid) -> Result<()> {
        let run = self.plan_units(view)?;
        let Ok(ours) = self.plan_text(head).and_then(|t| units(&t)) else {
            return Ok(());
        };
        let new = new_items(&run, &ours);
        if new.is_empty() {
            return Ok(());
        }
        let fleet = self.fleet.names().fleet();
        let done = run.iter().filter(|u| !u.open()).count();
        Err(Error::usage(format!(
            "fleet `{fleet}` on `{}` already finished its plan ({done} item(s) in {}); \
             this clone's plan has {} open item(s) it never had, first: \"{}\"",
            self.fleet.wire().remote(),
            self.fleet.names().run_branch(),
            new.len(),
            crate::text::cut(&new[0].text, 80),
        ))
        .with_hint(format!(
            "a fleet's name stays bound to the plan it ran: start a new fleet for the new items, e.g. `--fleet {fleet}-2`"
        )))
    }

    /// The run branch's plan, as units.
    pub(super) fn plan_units(&self, view: &View) -> Result<Vec<Unit>> {
        let run = view
            .run
            .ok_or_else(|| Error::internal("the fleet's run branch is gone from the remote"))?;
        units(&self.plan_text(run)?)
    }

    pub(super) fn plan_text(&self, commit: Oid) -> Result<String> {
        let repo = self.fleet.repo();
        let read = || -> std::result::Result<String, git2::Error> {
            let tree = repo.find_commit(commit)?.tree()?;
            let entry = tree.get_path(&self.plan_rel)?;
            let blob = repo.find_blob(entry.id())?;
            Ok(String::from_utf8_lossy(blob.content()).into_owned())
        };
        read().map_err(|e| {
            Error::usage(format!(
                "the run branch has no plan at {}",
                self.plan_rel.display()
            ))
            .with_hint(format!(
                "commit the plan before starting the fleet ({})",
                e.message()
            ))
        })
    }

    /// The first open item nobody holds, else the first whose lease expired.
    pub(super) fn claim_one(&mut self, view: &View, open: &[Unit]) -> Result<Option<Held>> {
        let names = self.fleet.names().clone();
        let free = open.iter().filter(|u| !view.claims.contains_key(&u.key));
        let expired = open.iter().filter(|u| {
            view.claims
                .get(&u.key)
                .is_some_and(|(oid, l)| self.fleet.expired(&names.claim(&u.key), *oid, l))
        });
        let candidates: Vec<Unit> = free.chain(expired).cloned().collect();
        for unit in candidates {
            match self.fleet.acquire(
                &names.claim(&unit.key),
                &unit.key,
                &unit.text,
                view.claims.get(&unit.key),
            ) {
                Ok(Some(held)) => {
                    self.say.say(FleetEvent::Claimed {
                        item: unit.key.clone(),
                        text: unit.text.clone(),
                        generation: held.lease.generation,
                        took_over_from: held.lease.took_over_from.clone(),
                    });
                    return Ok(Some(held));
                }
                Ok(None) => continue,
                Err(e) => {
                    self.unreachable(&e);
                    return Ok(None);
                }
            }
        }
        Ok(None)
    }

    pub(super) fn work_on(&mut self, view: &View, unit: &Unit, held: Held) -> Result<ItemEnd> {
        let names = self.fleet.names().clone();
        let key = unit.key.clone();
        let pushed_item = view.items.get(&key).copied();
        let pushed_snapshot = view.snapshots.get(&key).copied();
        let base = pushed_item.unwrap_or(view.run.expect("joined"));
        let (wt_root, mut note) = self.prepare(unit, &held, base, pushed_snapshot)?;
        let log = crate::formats::Layout::new(&wt_root).events();
        let mut job = Job {
            unit: unit.clone(),
            held,
            wt_root,
            pushed_item,
            pushed_snapshot,
            meter: Meter::new(log),
            round: 0,
            round_started: jiff::Timestamp::now(),
            halt: None,
        };
        let mut conflicts = 0;
        loop {
            let plan_file = job.wt_root.join(WORKER_PLAN);
            std::fs::create_dir_all(crate::formats::Layout::new(&job.wt_root).dir)
                .map_err(|e| Error::io("cannot create", &job.wt_root, e))?;
            std::fs::write(&plan_file, item_plan(unit, note.as_deref()))
                .map_err(|e| Error::io("cannot write", &plan_file, e))?;
            job.round += 1;
            job.round_started = jiff::Timestamp::now();
            job.halt = None;
            job.meter.begin_round();
            self.live = None;
            self.status(WorkerState::Working, Some(unit), "");
            let Some(code) = self.supervise(&mut job)? else {
                self.account(&mut job);
                self.publish_loop(&mut job, None, LoopEnd::Lost, "its lease was taken over");
                return Ok(ItemEnd::Gone);
            };
            self.account(&mut job);
            self.commit_leftovers(&job, code);
            match job.halt.clone() {
                Some(Halt::Limit(limit)) if code != 0 => {
                    let why = format!("usage limit hit by {} until {}", limit.by, limit.until);
                    self.publish_loop(&mut job, Some(code), LoopEnd::Paused, &why);
                    if let Some(end) = self.wait_out(&mut job, limit)? {
                        return Ok(end);
                    }
                    note = Some(
                        "This item's work was paused while a usage limit reset; the last commits on this branch \
                         (a WIP commit and its handoff) say where it stands. Carry on from there."
                            .to_string(),
                    );
                    continue;
                }
                Some(Halt::Refused(message)) => {
                    let why = format!("the remote refused a push of its work: {message}");
                    let end = self.give_up(&mut job, &why, 1, true)?;
                    self.publish_loop(&mut job, Some(code), LoopEnd::GivenUp, &why);
                    return Ok(end);
                }
                Some(Halt::Budget(what)) if code != 0 => {
                    let why = format!("the fleet's budget is spent: {what}");
                    let end = self.leave_item(&mut job, &why, code, Some(LoopEnd::Released));
                    return Ok(match end {
                        ItemEnd::Failed(_) => ItemEnd::Failed(5),
                        other => other,
                    });
                }
                _ => {}
            }
            if code != 0 {
                let why = if child::stop_requested() {
                    "stopped by a signal"
                } else {
                    "the loop ended without completing the item"
                };
                return Ok(self.leave_item(&mut job, why, code, Some(LoopEnd::Released)));
            }
            let (end, how) = self.merge(&mut job)?;
            match end {
                Some(ItemEnd::Refused(message)) => {
                    self.say.say(FleetEvent::Refused {
                        item: key.clone(),
                        message: message.clone(),
                    });
                    let why = format!("the remote refused the merge: {message}");
                    let end = self.give_up(&mut job, &why, 1, true)?;
                    self.publish_loop(&mut job, Some(code), how, &why);
                    return Ok(end);
                }
                // Stopped before the merge was pushed: given back as the worker exits.
                Some(ItemEnd::Stopped) => {
                    return Ok(self.leave_item(&mut job, "stopped by a signal", code, Some(how)));
                }
                Some(end) => {
                    if how != LoopEnd::Merged {
                        self.publish_loop(&mut job, Some(code), how, "");
                    }
                    if matches!(end, ItemEnd::Merged) {
                        self.remove_worktree(&key);
                    }
                    return Ok(end);
                }
                None if conflicts >= MAX_CONFLICTS => {
                    let why = "its branch still conflicts with the run branch after the loop was asked to merge it";
                    // Given up for the fleet, this worker goes on with the next item.
                    let end = match self.give_up(&mut job, why, 1, false)? {
                        ItemEnd::Failed(_) => ItemEnd::Gone,
                        end => end,
                    };
                    self.publish_loop(&mut job, Some(code), LoopEnd::GivenUp, why);
                    return Ok(end);
                }
                // A conflict: once more, with the task of merging the run branch.
                None => {
                    self.publish_loop(&mut job, Some(code), how, "");
                    conflicts += 1;
                    note = Some(format!(
                        "Before anything else: the run branch moved and this item's branch no longer merges cleanly. \
                         Merge `{}` (run `git merge {}`) into this branch, resolve the conflicts, keep both sides' work, commit.",
                        names.seen(&names.run_branch()),
                        names.seen(&names.run_branch()),
                    ));
                }
            }
        }
    }

    pub(super) fn iterations_left(&self) -> Option<u64> {
        let view = self.fleet.view().ok()?;
        let (_, ledger) = view.ledger?;
        Some(u64::from(self.config.loop_.max_iterations).saturating_sub(ledger.iterations))
    }

    /// The fleet's shared budget (`[loop] max_iterations`, `max_cost_usd`,
    /// counted over every worker on the ledger), if spent.
    pub(super) fn budget_spent(&self, ledger: &Ledger) -> Option<String> {
        if ledger.iterations >= u64::from(self.config.loop_.max_iterations) {
            return Some(format!(
                "{} of {} iterations",
                ledger.iterations, self.config.loop_.max_iterations
            ));
        }
        match self.config.loop_.max_cost_usd {
            Some(max) if ledger.cost_usd >= max => {
                Some(format!("${:.2} of ${max:.2}", ledger.cost_usd))
            }
            _ => None,
        }
    }
}

/// GitHub Actions kills a cancelled step 10 s after its SIGINT (SIGTERM at
/// 7.5 s): a longer `[fleet] grace` would be cut short there, the claim
/// left to expire instead of released (pure).
fn cancel_window(on_actions: bool, grace: Duration) -> Option<String> {
    const ACTIONS_WINDOW: Duration = Duration::from_secs(9);
    (on_actions && grace > ACTIONS_WINDOW).then(|| {
        format!(
            "[fleet] grace is {}s but GitHub Actions kills a cancelled step 10s after its SIGINT: \
             set grace = \"8s\" in ralph.toml, or a cancel leaves the claim to expire instead of released",
            grace.as_secs()
        )
    })
}

/// The open items of `ours` that a finished run (`run`: none open) never
/// had, or none when the run still has open items (pure).
fn new_items<'a>(run: &[Unit], ours: &'a [Unit]) -> Vec<&'a Unit> {
    if run.iter().any(Unit::open) {
        return Vec::new();
    }
    ours.iter()
        .filter(|u| u.open() && !run.iter().any(|r| r.key == u.key))
        .collect()
}

/// How often an item's loop is asked to bring its branch up to date before
/// the worker gives the item up (pushed, released) and stops.
pub(super) const MAX_CONFLICTS: u32 = 2;

fn start_error(e: &WireError, remote: &str) -> Error {
    Error::usage(format!("cannot start the fleet worker on remote `{remote}`: {e}"))
        .with_hint("check that `git fetch REMOTE` and `git push REMOTE` work from this clone with the same user and environment")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> Vec<Unit> {
        units(text).unwrap()
    }

    #[test]
    fn a_grace_longer_than_the_actions_cancel_window_is_warned_of_there_only() {
        let secs = Duration::from_secs;
        assert!(
            cancel_window(true, secs(25))
                .unwrap()
                .contains("grace is 25s")
        );
        assert_eq!(cancel_window(true, secs(8)), None);
        assert_eq!(cancel_window(false, secs(25)), None);
    }

    #[test]
    fn a_finished_run_has_new_items_only_when_all_of_its_own_are_done() {
        let finished = plan("- [x] one\n- [x] two\n");
        let running = plan("- [x] one\n- [ ] two\n");
        let same = plan("- [ ] one\n- [ ] two\n");
        let more = plan("- [ ] one\n- [ ] two\n- [ ] three\n");
        // The same plan again (a restarted worker): nothing new.
        assert!(new_items(&finished, &same).is_empty());
        let new: Vec<&str> = new_items(&finished, &more)
            .iter()
            .map(|u| u.text.as_str())
            .collect();
        assert_eq!(new, ["three"]);
        // A run still going is joined whatever the clone's plan says.
        assert!(new_items(&running, &more).is_empty());
    }
}
