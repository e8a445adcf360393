//! The run's side of `[verify]` (docs/verify.md): when an iteration calls
//! for the checks (a promise past the plan gate, an item checked off, a
//! checkpoint: `verify.on`), running them, and what a failure changes —
//! the completion refused, the verdict a failure for the breaker, the
//! state's `verify` (the next prompt's "fix first" block), the items
//! verified. And once the run completes, the tree it leaves: a final
//! commit under the WIP rules, or the reason says what is uncommitted.

use super::Supervisor;
use super::facts::Facts;
use super::run::Outcome;
use super::verdict::{self, Checks, Gate, Verdict, refuse};
use crate::formats::Event;
use crate::formats::Verification;
use crate::formats::verification::When;
use crate::hooks::verify;
use crate::repo::{CommitOutcome, Repo};

/// Paths named in the reason of a completion over uncommitted changes.
const DIRTY_PATHS: usize = 5;

impl Supervisor {
    /// Run the checks if this iteration calls for them, at most once: a
    /// completion claim first, then an item checked off, then a checkpoint.
    /// A failure at a completion refuses it (`gate.refused`, `verdict`).
    pub(super) fn verify_iteration(
        &mut self,
        facts: &Facts,
        verdict: &mut Verdict,
        gate: &mut Gate,
        checked: Vec<String>,
    ) {
        let v = &self.config.verify;
        let when = if gate.claims_completion(facts.promise) && !self.flags.signals.any() {
            When::Completion
        } else if !checked.is_empty() && v.runs_on(When::Item) {
            When::Item
        } else if verdict.checkpoint.is_some() && v.runs_on(When::Checkpoint) {
            When::Checkpoint
        } else {
            return;
        };
        if !v.runs_on(when) {
            return;
        }
        let mut result = self.verify(facts.number, when);
        if when == When::Item {
            result.items = checked;
        }
        if when == When::Completion && !result.passed {
            let why = result.summary();
            refuse(verdict, why.clone());
            gate.refused = Some(why);
            gate.untrusted = self.never_passes(&result);
        }
        self.record_verification(facts.number, result);
    }

    /// A plan with nothing open (`verdict::nothing_open`): the run ends,
    /// without a session, once the checks pass. `after`: the iteration of
    /// this run that left the plan so. Failing checks are recorded as any
    /// (the next prompt opens with them) and the run goes on.
    /// `Completed` with why, or `Untrusted` when a check that is not
    /// trusted fails them: no session could make that pass.
    pub(super) fn finished_plan(&mut self, after: Option<u32>) -> Option<(Outcome, String)> {
        let plan = self.plan();
        let (open, done) = (plan.open_count(), plan.done_count());
        if !verdict::maybe_finished(open, done) {
            return None;
        }
        // The checks this run ran on the tree its last iteration left (a
        // refused promise, a check-off) are not run again for the same tree.
        let ran = (self.state.verify.clone())
            .filter(|v| after.is_some() && v.iteration == self.state.iteration);
        let checks = if self.config.verify.commands.is_empty() {
            Checks::None
        } else {
            let result = ran.unwrap_or_else(|| {
                let result = self.verify(self.state.iteration, When::Completion);
                self.record_verification(self.state.iteration, result.clone());
                result
            });
            if let Some(why) = self.never_passes(&result) {
                return Some((Outcome::Untrusted, why));
            }
            if result.passed {
                Checks::Passed
            } else {
                Checks::Failed
            }
        };
        let mut why = verdict::nothing_open(open, done, after, checks)?;
        self.leave_clean(self.state.iteration, &mut why);
        Some((Outcome::Completed, why))
    }

    /// Why `result` can never pass in this run, if it cannot: it failed at
    /// a check whose script changed during the run (not trusted, not run).
    /// The run ends there rather than pay for sessions that cannot
    /// complete; the files are named as changed (`note_untrusted`).
    fn never_passes(&mut self, result: &Verification) -> Option<String> {
        let check = result.untrusted()?;
        let files = self.trust.started.changed_for(&check.command, &self.root);
        self.note_untrusted();
        Some(format!(
            "the completion cannot pass in this run: `{}` is not run, {} changed since the run started and ralph does not run what the agent may have written; look at the change (`git diff`, `git log -p -- FILE`), then put it back, or confirm it with `ralph run --trust-config`",
            crate::text::printable(&check.command),
            files.join(", ")
        ))
    }

    /// A run of the checks: the state (the next prompt's "fix first"), the
    /// event, and a person asked for once a failing streak reaches
    /// `needs_human_after`.
    fn record_verification(&mut self, iteration: u32, result: Verification) {
        self.state.verify_failures = if result.passed {
            0
        } else {
            self.state.verify_failures + 1
        };
        let streak = self.state.verify_failures;
        let summary = result.summary();
        self.state.verify = Some(result.clone());
        self.publish(
            Event::Verify {
                verification: result,
            },
            None,
        );
        // Once per streak: the count reached, not every failure after it.
        let after = self.config.verify.needs_human_after;
        if after > 0 && streak == after {
            self.publish(
                Event::NeedsHuman {
                    iteration,
                    reason: "verify_failing".into(),
                    message: format!(
                        "the project's checks failed {streak} times in a row ({summary}); the run goes on, each new prompt asking the agent to fix them first"
                    ),
                },
                None,
            );
        }
    }

    /// Book this iteration's item verification to the items it verified
    /// (their accounts exist once the iteration is recorded).
    pub(super) fn mark_items_verified(&mut self, iteration: u32) {
        let Some(v) = self
            .state
            .verify
            .as_ref()
            .filter(|v| v.iteration == iteration && v.when == When::Item)
        else {
            return;
        };
        for account in self.state.items.iter_mut() {
            if v.items.contains(&account.item) {
                account.verified = Some(v.passed);
            }
        }
    }

    /// Run the `[verify]` commands now, in the agent's box when it has one,
    /// a command whose script changed since the start not at all. Whatever
    /// they started and left behind (re-parented to ralph, a subreaper) is
    /// ended with them.
    fn verify(&mut self, iteration: u32, when: When) -> Verification {
        let env = [
            ("RALPH_ITERATION".to_string(), iteration.to_string()),
            ("RALPH_VERIFY_WHEN".to_string(), when.name().to_string()),
            ("RALPH_RUN_ID".to_string(), self.state.run_id.clone()),
        ];
        // What the completion's checks write (a log, `coverage/`) is not the
        // agent's work: the trees before and after tell the final commit.
        let before = (when == When::Completion)
            .then(|| self.work_tree())
            .flatten();
        let shell = crate::agent::shell::Shell::for_agent(&self.config, &self.root);
        let trusted = &self.trust.started;
        let untrusted = |command: &str| trusted.changed_for(command, &self.root);
        let result = verify::run(
            &self.config.verify,
            &shell,
            &untrusted,
            &self.root,
            &env,
            iteration,
            when,
        );
        crate::agent::procs::reap_orphans();
        // A build or a test may write files: the next iteration's "before"
        // is taken again, and the tree after them is walked anew.
        self.tree_touched();
        self.written_by_checks = match (before, self.work_tree()) {
            (Some(before), Some(after)) if before != after => Repo::open(&self.root)
                .ok()
                .flatten()
                .and_then(|r| r.paths_changed_between(&before, &after, &self.own()))
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        result
    }

    /// The run completes: commit what the agent left uncommitted (the WIP
    /// commit's rules: `git.wip_commit`, ralph's files, the size and key-file
    /// guards), and say in `reason` what is still uncommitted, if anything.
    pub(super) fn leave_clean(&mut self, iteration: u32, reason: &mut String) {
        let own = self.own();
        let Ok(Some(repo)) = Repo::open(&self.root) else {
            return;
        };
        // Outside a project below the work tree's top (`../shared/`): no
        // commit of this run takes them, and the reason must not say the
        // changes were committed while these are not.
        let outside = repo.changes_outside().unwrap_or_default();
        if !outside.is_empty() {
            let mut paths = outside
                .iter()
                .take(DIRTY_PATHS)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ");
            if outside.len() > DIRTY_PATHS {
                paths.push_str(&format!(" and {} more", outside.len() - DIRTY_PATHS));
            }
            let said = format!(
                "{} file(s) outside this project ({}) left uncommitted: {paths}",
                outside.len(),
                repo.project_label()
            );
            self.events.warn(format!("completed with {said}"));
            *reason = format!("{reason}; NOT committed: {said}");
        }
        if repo.changes(&own).map_or(true, |c| c.is_empty()) {
            return;
        }
        let mut note = None;
        let mut left_out = Vec::new();
        if self.config.git.wip_commit {
            left_out = repo
                .left_out(&own, &self.config.git.guard())
                .unwrap_or_default();
            for path in &self.written_by_checks {
                if !left_out.iter().any(|l| &l.path == path) {
                    left_out.push(crate::repo::LeftOut {
                        path: path.clone(),
                        why: "written by the checks ([verify]), not the agent".into(),
                        secret: false,
                    });
                }
            }
            let named: Vec<String> = (left_out.iter())
                .filter(|l| l.secret || self.written_by_checks.contains(&l.path))
                .map(crate::repo::LeftOut::named)
                .collect();
            if !named.is_empty() {
                self.events.warn(format!(
                    "left out of the final commit, still in the work tree: {}",
                    named.join(", ")
                ));
            }
            let message = format!(
                "ralph: final commit at completion (iteration {iteration})\n\nThe agent kept its promise with these changes uncommitted.\nTrigger: completion\n"
            );
            match repo.wip_commit_leaving_out(&message, &own, &left_out, &self.config.git.guard()) {
                CommitOutcome::Committed { id, .. } => {
                    self.state.last_commit = Some(id.clone());
                    let whose = if outside.is_empty() {
                        "its uncommitted changes"
                    } else {
                        "its uncommitted changes in this project"
                    };
                    *reason = format!(
                        "{reason}; {whose} were committed ({})",
                        &id[..id.len().min(10)]
                    );
                }
                CommitOutcome::NothingToCommit => {}
                CommitOutcome::Skipped { reason } => note = Some(reason),
            }
        } else {
            note = Some("git.wip_commit is off".into());
        }
        // Each named with why it was left out, when it was: those first.
        let mut left: Vec<(String, Option<&str>)> = repo
            .changes(&own)
            .unwrap_or_default()
            .iter()
            .map(|c| {
                let why = left_out.iter().find(|l| l.path == c.path);
                let path = crate::repo::display_path(c.path.as_bytes());
                (path, why.map(|l| l.why.as_str()))
            })
            .collect();
        left.sort_by_key(|(_, why)| why.is_none());
        let left: Vec<String> = left
            .into_iter()
            .map(|(path, why)| match why {
                Some(why) => format!("{path} ({why})"),
                None => path,
            })
            .collect();
        if left.is_empty() {
            return;
        }
        let mut paths = left
            .iter()
            .take(DIRTY_PATHS)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        if left.len() > DIRTY_PATHS {
            paths.push_str(&format!(" and {} more", left.len() - DIRTY_PATHS));
        }
        let why = note.map(|n| format!(" ({n})")).unwrap_or_default();
        *reason = format!(
            "{reason}; NOT committed: {} file(s) left uncommitted{why}: {paths}",
            left.len()
        );
        self.events.warn(format!(
            "completed with {} uncommitted file(s){why}: {paths}",
            left.len()
        ));
    }
}
