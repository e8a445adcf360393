//! Taking over from a supervisor that died (`kill -9`, a crash, the
//! machine going down) in the middle of an iteration. The dead iteration's
//! transcript (`.ralph/runs/<run>/iter-NNN.jsonl`) is replayed through the
//! [`IterationMachine`] — decoded and metered as if it were live, after its
//! exit, so that nothing is acted on — and the facts it gives (last words,
//! tool calls, files touched, peak context) go into a `crash` handoff and
//! WIP commit; the iteration is recorded, and the next one resumes from the
//! handoff as after any checkpoint.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use super::facts::Facts;
use super::iteration::Input;
use super::{Now, Supervisor, record, snapshots, verdict};
use crate::checkpoint;
use crate::formats::RunStatus;
use crate::repo::{CommitOutcome, Repo};

impl Supervisor {
    /// What a run does as it starts, before its first iteration: prune old
    /// runs' snapshots, and take over `dead`, the iteration a dead
    /// supervisor left unfinished (see [`record::start`]).
    pub(super) fn take_over(&mut self, dead: Option<u32>) {
        let keep = self.config.git.snapshot_keep_runs;
        snapshots::prune(&self.root, keep, &self.state.run_id);
        if let Some(number) = dead {
            self.take_over_iteration(number);
        }
        if self.state.iteration == 0 {
            self.commit_changes_before_run();
        }
    }

    /// A new run found tracked files modified in its project (the user's
    /// own edits): they are committed on their own, before any agent runs,
    /// so that the agent's first WIP commit holds only the agent's work
    /// (with `git.wip_commit = false`, only said). New untracked files are
    /// left as they are (`ownership::at_start` warns about them).
    fn commit_changes_before_run(&mut self) {
        let Some(repo) = Repo::open(&self.root).ok().flatten() else {
            return;
        };
        let message = "ralph: changes present before the run\n\nTracked files modified before `ralph run` started, committed on their own\nso that the agent's first WIP commit holds only its work.\n";
        let (outcome, files) = if self.config.git.wip_commit {
            repo.commit_tracked_changes(message, &self.own())
        } else {
            let files = repo.changes(&self.own()).unwrap_or_default();
            let files = files.into_iter().filter(|c| c.kind != "??").map(|c| c.path);
            (CommitOutcome::NothingToCommit, files.collect())
        };
        if files.is_empty() {
            return;
        }
        let shown = files.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
        let more = match files.len() {
            n if n > 5 => format!(" and {} more", n - 5),
            _ => String::new(),
        };
        let what = match &outcome {
            CommitOutcome::Committed { id, .. } => format!(
                "committed on their own as {} (\"ralph: changes present before the run\"), before the agent's work",
                &id[..id.len().min(10)]
            ),
            CommitOutcome::Skipped { reason } => {
                format!("not committed ({reason}): the first WIP commit will hold them")
            }
            CommitOutcome::NothingToCommit => {
                "git.wip_commit is off: they stay uncommitted".to_string()
            }
        };
        self.events.warn(format!(
            "{} tracked file(s) were modified before the run: {shown}{more}; {what}",
            files.len()
        ));
        self.tree_touched();
    }

    /// A new run (`--fresh`, another plan) replaces the unfinished run of a
    /// dead supervisor: that run's last iteration is taken over first, under
    /// that run's id (its transcript, its snapshots), and the run is closed
    /// as interrupted, its final state kept beside its transcripts for the
    /// report. The new run starts after, from a tree whose work is saved.
    pub(super) fn close_replaced(&mut self) {
        let Some(old) = self.replaced.take() else {
            return;
        };
        let new = std::mem::replace(&mut self.state, old);
        if let Some(number) = record::dead_iteration(&self.state) {
            self.take_over_iteration(number);
        }
        self.state.status = RunStatus::Interrupted;
        self.state.exit_reason = Some(
            "its supervisor died; a new run took over its last iteration and replaced it".into(),
        );
        self.state.supervisor_pid = None;
        let dir = self.layout.run_dir(&self.state.run_id);
        let kept = crate::formats::create_dir_private(&dir)
            .and_then(|()| self.state.save(&dir.join("state.json")));
        if let Err(e) = kept {
            self.events
                .warn(format!("cannot keep the replaced run's state: {e}"));
        }
        self.state = new;
        self.save();
    }

    /// Old runs' transcripts deleted or gzipped (`[runs]`): after the
    /// replaced run's takeover, which reads its transcript.
    pub(super) fn tidy_runs(&mut self) {
        let runs = self.layout.runs();
        for message in crate::agent::transcript::tidy(&runs, &self.state.run_id, &self.config.runs)
        {
            self.events.warn(message);
        }
    }

    /// Take over iteration `number`, which a dead supervisor left unfinished.
    fn take_over_iteration(&mut self, number: u32) {
        let transcript = self.layout.transcript(&self.state.run_id, number);
        let mut facts = self.replay(number, &transcript).unwrap_or(Facts {
            number,
            ..Facts::default()
        });
        let notes = checkpoint::notes_path(number);
        if self.root.join(&notes).is_file() {
            facts.notes_path = Some(notes);
        }
        let resuming = self
            .state
            .last_handoff
            .as_deref()
            .map(|h| format!(" (the handoff before it: {h})"))
            .unwrap_or_default();
        let why = format!(
            "the supervisor died during iteration {number}; the next run took it over{resuming}"
        );
        self.events.warn(format!(
            "{why}: saving its work from its transcript and the work tree"
        ));
        facts.stop_reason = Some(why);
        let changed = Repo::open(&self.root)
            .ok()
            .flatten()
            .and_then(|r| r.changes(&self.own()).ok())
            .is_some_and(|c| !c.is_empty());
        let verdict = verdict::crashed(&facts, changed || !facts.files_touched.is_empty());
        record::meter(&mut self.state, &facts);
        self.remember_windows(&facts);
        if let Some(mark) = verdict.checkpoint {
            self.save_checkpoint(&facts, mark);
        }
        let mut events = Vec::new();
        let plan = self.plan();
        record::iteration(
            &mut self.state,
            &facts,
            &verdict,
            &plan,
            None,
            &self.config.breaker,
            &Now::read(),
            &mut events,
        );
        self.record_boundary(false);
        self.emit_all(events);
        self.save();
    }

    /// The dead iteration's facts, from its transcript; `None` when its
    /// agent never started (no transcript).
    fn replay(&self, number: u32, transcript: &Path) -> Option<Facts> {
        let file = File::open(transcript).ok()?;
        // How long it ran, as far as the file tells: created at the spawn,
        // written at its last line.
        let seconds = file.metadata().ok().and_then(|m| {
            let ran = m.modified().ok()?.duration_since(m.created().ok()?).ok()?;
            Some(ran.as_secs_f64())
        });
        // It started when its transcript was created (for the history).
        let created = file.metadata().and_then(|m| m.created()).ok();
        let now = Now::read();
        let mut machine = self.machine(number, &now);
        // Exited first: from then on lines are counted, nothing is acted on
        // (no checkpoint request, no signal); the effects are not wanted.
        let mut effects = Vec::new();
        let exited = Input::Exited {
            code: None,
            signal: None,
        };
        machine.handle(exited, &now, &mut effects);
        let mut reader = BufReader::with_capacity(128 << 10, file);
        // Decoded as the configured kind's output, as it was live.
        let mut decoder = self.config.agent.kind.decoder();
        while let Some(event) = decoder.next_from(&mut reader, &mut |_| {}) {
            effects.clear();
            machine.handle(Input::Line(event, now.mono), &now, &mut effects);
        }
        let mut facts = machine.finish();
        facts.seconds = seconds.unwrap_or_default();
        if let Some(t) = created.and_then(|t| jiff::Timestamp::try_from(t).ok()) {
            facts.started_at = t.to_string();
        }
        Some(facts)
    }
}
