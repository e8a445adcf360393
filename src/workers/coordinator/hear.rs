//! What the coordinator hears from its workers: each record of their loops
//! goes into the run's log tagged with its worker, and is counted once
//! toward the shared budgets, whether heard live on the child's stdout or
//! read back from the worker's own log (what its loop did while no
//! coordinator listened: after kill -9 of the coordinator, a worker still
//! stops as `ralph stop` stops it, with a checkpoint). One usage limit pauses everyone.
//!
//! Pitfall: a record is known by its time and itself, per worker (`Heard`);
//! a worker's records are written by one loop at a time, in order.

use std::path::PathBuf;
use std::sync::mpsc;

use super::Coordinator;
use super::machine::{Heard, Input};
use crate::error::Result;
use crate::formats::Event;
use crate::workers::child::Msg;

impl Coordinator {
    /// A child's line: its events go out tagged with the worker; the shared
    /// budgets and the usage limit are counted here.
    pub(super) fn heard(&mut self, msg: Msg, tx: &mpsc::Sender<Msg>) -> Result<()> {
        match msg {
            Msg::Said(worker, line) => {
                self.bus
                    .emit_from(&worker, Event::Warning { message: line });
                Ok(())
            }
            Msg::Record(worker, record) => {
                // Heard live: the machine counts its loop's sessions, and
                // its usage limit pauses everyone (read back later, the
                // limit was its loop's to wait out).
                let heard = match &record.event {
                    Event::IterationStarted { .. } => Some(Heard::SessionStarted),
                    Event::IterationEnded { .. } => Some(Heard::SessionEnded),
                    Event::LimitWait { seconds, .. } => {
                        Some(Heard::LimitWait { seconds: *seconds })
                    }
                    _ => None,
                };
                if self.take_in(&worker, *record)
                    && let Some(heard) = heard
                {
                    self.handle(
                        Input::Heard {
                            worker: &worker,
                            heard,
                        },
                        tx,
                    )?;
                }
                Ok(())
            }
        }
    }

    /// One record of `worker`'s loop, heard live or read back from its own
    /// log: counted and written to the run's log once (whether it was new).
    /// Counted in memory, published, then saved with the time it was heard:
    /// a coordinator killed in between counts it again from the worker's
    /// log and at worst writes that one record twice to the run's log.
    fn take_in(&mut self, worker: &str, mut record: crate::formats::Record) -> bool {
        if !self.ledger.last_heard.take(worker, &record) {
            return false;
        }
        match &record.event {
            Event::IterationEnded { cost_usd, .. } => {
                self.ledger.iterations += 1;
                self.ledger.cost_usd += cost_usd;
            }
            Event::RunEnded { outcome, .. } => {
                self.ended.insert(worker.to_string(), outcome.clone());
            }
            _ => {}
        }
        record.worker = Some(worker.to_string());
        self.bus.publish(&record);
        let _ = self.save();
        true
    }

    /// Every worker whose loop is not running now (its coordinator died,
    /// or this one is ending): caught up, so that the shared counts are
    /// whole before anything starts or the run's end is said.
    pub(super) fn catch_up_idle(&mut self) {
        let idle: Vec<String> = (self.ledger.assignments.iter())
            .filter(|a| !crate::workers::child::project_busy(&a.project_dir))
            .map(|a| a.worker.clone())
            .collect();
        for worker in idle {
            self.catch_up(&worker);
        }
    }

    /// What `worker`'s loops wrote to their own log and no coordinator took
    /// in: records still in the pipe when its loop exited, and everything
    /// its loop did while no coordinator listened (its coordinator killed
    /// with -9: the worker checkpoints, ends its iteration and its run).
    pub(super) fn catch_up(&mut self, worker: &str) {
        if !self.ledger.last_heard.knows(worker) {
            return;
        }
        for record in self.ledger.unheard_of(worker) {
            self.take_in(worker, record);
        }
        // And its loops' commits: WIP commits, the final commit at completion.
        let dirs: Vec<PathBuf> = (self.ledger.assignments.iter())
            .filter(|a| a.worker == worker)
            .map(|a| a.project_dir.clone())
            .collect();
        for dir in dirs {
            let layout = crate::formats::Layout::new(&dir);
            if let Ok(Some(state)) = crate::formats::RunState::load(&layout.state()) {
                let ids = state.history.into_iter().filter_map(|h| h.commit);
                for id in ids.chain(state.last_commit) {
                    self.ledger.made(id);
                }
            }
        }
        let _ = self.save();
    }
}
