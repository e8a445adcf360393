//! Trust fixed at the start of a run (docs/sandbox.md, "Trust at start"):
//! the configuration (`ralph.toml`), the templates (`prompts/*.j2`), the
//! scripts its hooks and checks name and the git hooks are the ones the
//! user started the run with. A run keeps its start's config and templates
//! in memory (it never reads them again), refuses a hook or check whose
//! script changed, and records what it trusted in `.ralph/trust.json`
//! (read-only inside the box: `agent::sandbox::protect`), once at the
//! start and again at its end. The next start tells a change made during
//! a run (the agent's, or at least not confirmed) from the user's edit
//! between two runs by those two records: `judge` and `decide` are the
//! pure core, table-tested below.
//!
//! Pitfalls: a run that did not end (kill -9) has no end record, so every
//! change since its start counts as made during it; whether the box was on
//! is the record's word as much as the config's (an agent that turned it
//! off must not turn the refusal into a warning).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::config::Config;
use crate::error::{Error, Result};

/// The record's name in `.ralph/`.
pub(crate) const RECORD: &str = "trust.json";
const VERSION: u32 = 1;

/// A file's content as ralph saw it: its SHA-256, `None` when it did not exist.
pub(crate) type Digest = Option<String>;

/// What ralph acts on, as it was: files (relative to the project root when
/// inside it) and the directories whose every file counts (the git hooks).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Fingerprints {
    pub(crate) files: BTreeMap<String, Digest>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) dirs: Vec<String>,
}

/// `.ralph/trust.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) version: u32,
    pub(crate) run_id: String,
    /// The run it records ran its agent in a box.
    pub(crate) sandboxed: bool,
    pub(crate) started: Fingerprints,
    /// The same files at the run's end; `None` while it runs or when it died.
    pub(crate) ended: Option<BTreeMap<String, Digest>>,
    /// A parallel run's: the text of the `ralph.toml` it started with
    /// (`None`: there was none), the configuration its workers' loops act
    /// on whatever their worktrees' copies say by then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) config: Option<String>,
}

/// How a file changed since the start of the run a record describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// As trusted (or put back).
    Same,
    /// Changed after that run ended: a person's edit between two runs.
    BetweenRuns,
    /// Changed while it ran (or it never ended): not trusted until confirmed.
    DuringRun,
}

/// One file: its digest at the start, at the end (`None`: the run did not
/// end), and now.
pub(crate) fn judge(started: &Digest, ended: Option<&Digest>, now: &Digest) -> Change {
    if now == started {
        Change::Same
    } else if ended == Some(started) {
        Change::BetweenRuns
    } else {
        Change::DuringRun
    }
}

/// What the start of a run does about the files changed during the last one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Nothing changed during the last run.
    Trusted,
    /// Changed during it, confirmed by `ralph run --trust-config`.
    Confirmed(Vec<String>),
    /// Changed during a run without the box: the run starts, warned.
    Warned(Vec<String>),
    /// Changed during a boxed run (or one now boxed): refused (exit 2).
    Refused(Vec<String>),
}

/// `changed`: the files changed during the last run; `boxed`: that run or
/// this one runs the agent in a box; `confirmed`: `--trust-config`.
pub(crate) fn decide(changed: Vec<String>, boxed: bool, confirmed: bool) -> Decision {
    match (changed.is_empty(), confirmed, boxed) {
        (true, _, _) => Decision::Trusted,
        (false, true, _) => Decision::Confirmed(changed),
        (false, false, true) => Decision::Refused(changed),
        (false, false, false) => Decision::Warned(changed),
    }
}

/// The files of `record` changed during its run, given their digests `now`.
pub(crate) fn changed_during(record: &Record, now: &BTreeMap<String, Digest>) -> Vec<String> {
    let none = None;
    now.iter()
        .filter(|(path, digest)| {
            let started = record.started.files.get(*path).unwrap_or(&none);
            let ended = record.ended.as_ref().map(|e| e.get(*path).unwrap_or(&none));
            judge(started, ended, digest) == Change::DuringRun
        })
        .map(|(path, _)| path.clone())
        .collect()
}

impl Fingerprints {
    /// The files ralph acts on under `config`, as they are now.
    pub(crate) fn take(root: &Path, config: &Config) -> Fingerprints {
        let mut paths = vec![crate::config::FILE_NAME.to_string()];
        paths.extend(
            crate::config::templates::EMBEDDED
                .iter()
                .map(|(name, _)| format!("prompts/{name}")),
        );
        let commands = config
            .hooks
            .points()
            .into_iter()
            .flat_map(|(_, c)| c.iter())
            .chain(&config.verify.commands);
        for command in commands {
            paths.extend(named_scripts(command, root));
        }
        let dirs: Vec<String> = git_hooks_dir(root)
            .map(|d| shown(root, &d))
            .into_iter()
            .collect();
        let mut f = Fingerprints {
            files: BTreeMap::new(),
            dirs,
        };
        f.files = f.now(root, paths);
        f
    }

    /// Digests now of `extra`, the recorded files and every file now in
    /// the recorded directories.
    fn now(&self, root: &Path, extra: Vec<String>) -> BTreeMap<String, Digest> {
        let mut paths: Vec<String> = self.files.keys().cloned().chain(extra).collect();
        for dir in &self.dirs {
            if let Ok(entries) = std::fs::read_dir(resolve(root, dir)) {
                paths.extend(
                    entries
                        .flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
                        .map(|e| format!("{dir}/{}", e.file_name().to_string_lossy())),
                );
            }
        }
        paths
            .into_iter()
            .map(|p| {
                let d = digest(&resolve(root, &p));
                (p, d)
            })
            .collect()
    }

    /// The files changed since these fingerprints were taken.
    pub(crate) fn changed(&self, root: &Path) -> Vec<String> {
        let none = None;
        self.now(root, Vec::new())
            .into_iter()
            .filter(|(p, d)| d != self.files.get(p).unwrap_or(&none))
            .map(|(p, _)| p)
            .collect()
    }

    /// These fingerprints of a worker's worktree as its coordinator
    /// trusts them: a file of the project (a relative name: `ralph.toml`,
    /// a template, a script) counts as it was in the coordinator's
    /// project at the parallel run's start (`trusted`), not as the
    /// worktree has it now — which is the run branch, with every unit's
    /// work merged into it by then. The git hooks are the same files for
    /// every worktree.
    pub(crate) fn trusted_by(mut self, trusted: &Fingerprints) -> Fingerprints {
        for (path, digest) in self.files.iter_mut() {
            if Path::new(path).is_relative() && !self.dirs.iter().any(|d| path.starts_with(d)) {
                *digest = trusted.files.get(path).cloned().flatten();
            }
        }
        self
    }

    /// What `command` (a hook or check) would run that changed since the
    /// start: the scripts it names, and the git hooks when it runs git.
    pub(crate) fn changed_for(&self, command: &str, root: &Path) -> Vec<String> {
        let none = None;
        let named = named_scripts(command, root);
        let runs_git = shlex::split(command)
            .unwrap_or_default()
            .iter()
            .any(|w| w == "git");
        let mut changed: Vec<String> = named
            .into_iter()
            .filter(|p| digest(&resolve(root, p)) != *self.files.get(p).unwrap_or(&none))
            .collect();
        if runs_git {
            changed.extend(
                self.changed(root)
                    .into_iter()
                    .filter(|p| self.dirs.iter().any(|d| p.starts_with(&format!("{d}/")))),
            );
        }
        changed
    }
}

impl Record {
    /// The record of a run starting now.
    pub(crate) fn start(run_id: &str, sandboxed: bool, started: Fingerprints) -> Record {
        Record {
            version: VERSION,
            run_id: run_id.to_string(),
            sandboxed,
            started,
            ended: None,
            config: None,
        }
    }

    /// …holding the text of `root`'s `ralph.toml` as it is now (a
    /// parallel run's coordinator: its workers act on it).
    pub(crate) fn holding_config(mut self, root: &Path) -> Result<Record> {
        let path = root.join(crate::config::FILE_NAME);
        self.config = match std::fs::read_to_string(&path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io("cannot read", &path, e)),
        };
        Ok(self)
    }

    /// The configuration this record's run started with, for a worker's
    /// loop in the project at `root` (its worktree).
    pub(crate) fn trusted_config(&self, root: &Path) -> Result<Config> {
        match &self.config {
            Some(text) => Config::parse(text, &root.join(crate::config::FILE_NAME)),
            None => Ok(Config::default()),
        }
    }

    /// `.ralph/trust.json` of `ralph_dir`; none before the first run (or
    /// unreadable: then nothing can be told, as before any run).
    pub(crate) fn load(ralph_dir: &Path) -> Option<Record> {
        let bytes = std::fs::read(ralph_dir.join(RECORD)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub(crate) fn save(&self, ralph_dir: &Path) -> Result<()> {
        let json = serde_json::to_vec_pretty(self).expect("the trust record serialises");
        crate::formats::write_atomic(&ralph_dir.join(RECORD), &json)
    }

    /// The files of this record's run changed during it, as they are now.
    pub(crate) fn changed_now(&self, root: &Path) -> Vec<String> {
        changed_during(self, &self.started.now(root, Vec::new()))
    }

    /// The run ends: its files as they are now.
    pub(crate) fn end(&mut self, root: &Path) {
        self.ended = Some(self.started.now(root, Vec::new()));
    }
}

/// The start of a run (its agent boxed or not: `boxed_now`): what the
/// last run's record says of the files changed during it, as a
/// [`Decision`], and the error that refuses this one when it must.
pub(crate) fn at_start(
    root: &Path,
    ralph_dir: &Path,
    boxed_now: bool,
    confirmed: bool,
) -> Result<Decision> {
    let Some(record) = Record::load(ralph_dir) else {
        return Ok(Decision::Trusted);
    };
    // The record's word too: an agent that turned the box off must not
    // turn the refusal into a warning.
    let boxed = record.sandboxed || boxed_now;
    match decide(record.changed_now(root), boxed, confirmed) {
        Decision::Refused(files) => Err(Error::config(format!(
            "changed during the last run (run {}, its agent in the sandbox) and not confirmed: {}; ralph does not act on files the agent may have written",
            record.run_id,
            files.join(", ")
        ))
        .with_hint("look at the changes (`git diff`, `git log -p -- FILE`); if they are yours or you accept them, run `ralph run --trust-config` once")),
        d => Ok(d),
    }
}

/// The event the start of a run emits for `decision`, if any.
pub(crate) fn start_event(decision: Decision) -> Option<crate::formats::Event> {
    use crate::formats::{Event, TrustAction};
    let (action, paths, message) = match decision {
        Decision::Trusted | Decision::Refused(_) => return None,
        Decision::Confirmed(paths) => {
            let m = format!(
                "changed during the last run, confirmed by --trust-config: {}",
                paths.join(", ")
            );
            (TrustAction::Confirmed, paths, m)
        }
        Decision::Warned(paths) => {
            let m = format!(
                "changed during the last run (by the agent, or while it ran): {}; this run obeys them. Check them (`git diff`); with `sandbox = \"bwrap\"` ralph would refuse to start until confirmed (`ralph run --trust-config`)",
                paths.join(", ")
            );
            (TrustAction::Warned, paths, m)
        }
    };
    Some(Event::Trust {
        action,
        paths,
        message,
    })
}

/// Programs whose first argument that is not an option is a script they run.
const INTERPRETERS: [&str; 14] = [
    "sh", "bash", "dash", "zsh", "ksh", "python", "python3", "node", "deno", "bun", "ruby", "perl",
    "source", ".",
];
/// Words that end one command and begin the next.
const SEPARATORS: [&str; 6] = ["&&", "||", "|", ";", "&", "!"];

/// The files inside `root` (relative to it, or absolute) that a shell
/// command runs: a command word (`./check.sh`, the first after `&&`, `;`,
/// `|`), or the script an interpreter is given (`sh scripts/check.sh`,
/// `python3 t.py`). `cargo test` names none; files it only reads or writes
/// (`cat x`, `>> out`) are not scripts, nor is anything in ralph's own
/// `.ralph/`.
pub(crate) fn named_scripts(command: &str, root: &Path) -> Vec<String> {
    let words = shlex::split(command)
        .unwrap_or_else(|| command.split_whitespace().map(str::to_string).collect());
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let mut candidates: Vec<String> = Vec::new();
    let (mut command_word, mut script_word, mut redirect) = (true, false, false);
    for word in words {
        let ends = word.len() > 1 && word.ends_with(';');
        let word = word.trim_end_matches(';').trim_start_matches('!');
        if redirect {
            redirect = false;
        } else if SEPARATORS.contains(&word) || word.is_empty() {
            command_word = true;
        } else if word.starts_with(['>', '<']) || word.ends_with(['>', '<']) {
            // `>> out`, `2> err`, `<in`: a file read or written, not run.
            redirect = word.ends_with(['>', '<']);
        } else if command_word {
            candidates.push(word.to_string());
            command_word = false;
            let name = word.rsplit('/').next().unwrap_or(word);
            script_word = INTERPRETERS.contains(&name);
        } else if script_word && !word.starts_with('-') {
            candidates.push(word.to_string());
            script_word = false;
        }
        if ends {
            command_word = true;
        }
    }
    let own = crate::formats::Layout::new(&root).dir;
    let mut out: Vec<String> = Vec::new();
    for word in candidates {
        let Ok(path) = root.join(&word).canonicalize() else {
            continue;
        };
        if path.is_file() && path.starts_with(&root) && !path.starts_with(&own) {
            let rel = shown(&root, &path);
            if !out.contains(&rel) {
                out.push(rel);
            }
        }
    }
    out
}

/// Where git looks for hooks: `core.hooksPath` (relative to the work
/// tree) or the common dir's `hooks`.
pub(crate) fn git_hooks_dir(root: &Path) -> Option<PathBuf> {
    let repo = git2::Repository::discover(root).ok()?;
    let configured = repo
        .config()
        .ok()
        .and_then(|c| c.get_path("core.hooksPath").ok());
    Some(match configured {
        Some(p) if p.is_absolute() => p,
        Some(p) => repo.workdir().unwrap_or(root).join(p),
        None => repo.commondir().join("hooks"),
    })
}

/// `path` relative to `root` when inside it, else whole.
fn shown(root: &Path, path: &Path) -> String {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    path.strip_prefix(&root)
        .unwrap_or(&path)
        .display()
        .to_string()
}

fn resolve(root: &Path, shown: &str) -> PathBuf {
    root.join(shown)
}

fn digest(path: &Path) -> Digest {
    let bytes = std::fs::read(path).ok()?;
    Some(format!("{:x}", Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Digest {
        (!s.is_empty()).then(|| s.to_string())
    }

    /// started, ended (None: the run died; "" inside: absent), now.
    #[test]
    fn a_file_changed_during_a_run_is_told_from_an_edit_between_runs() {
        let cases: [(&str, Option<&str>, &str, Change); 9] = [
            ("a", Some("a"), "a", Change::Same),
            ("a", Some("b"), "a", Change::Same), // put back since
            ("a", Some("a"), "b", Change::BetweenRuns),
            ("a", Some("b"), "b", Change::DuringRun),
            ("a", Some("b"), "c", Change::DuringRun), // edited on top: still unconfirmed
            ("a", None, "b", Change::DuringRun),      // the run died: no telling
            ("", Some(""), "b", Change::BetweenRuns), // created after the run
            ("", Some("b"), "b", Change::DuringRun),  // a hook the agent wrote
            ("a", Some(""), "", Change::DuringRun),   // deleted during the run
        ];
        for (started, ended, now, want) in cases {
            let ended = ended.map(d);
            assert_eq!(
                judge(&d(started), ended.as_ref(), &d(now)),
                want,
                "{started:?} {ended:?} {now:?}"
            );
        }
    }

    #[test]
    fn the_box_refuses_without_it_warns_and_the_flag_confirms() {
        let f = || vec!["ralph.toml".to_string()];
        let cases: [(Vec<String>, bool, bool, Decision); 6] = [
            (vec![], true, false, Decision::Trusted),
            (vec![], false, true, Decision::Trusted),
            (f(), true, false, Decision::Refused(f())),
            (f(), false, false, Decision::Warned(f())),
            (f(), true, true, Decision::Confirmed(f())),
            (f(), false, true, Decision::Confirmed(f())),
        ];
        for (changed, boxed, confirmed, want) in cases {
            assert_eq!(
                decide(changed.clone(), boxed, confirmed),
                want,
                "{changed:?} {boxed} {confirmed}"
            );
        }
    }

    #[test]
    fn the_files_changed_during_a_run_are_named_from_its_record() {
        let started = Fingerprints {
            files: [
                ("ralph.toml".to_string(), d("t")),
                ("check.sh".to_string(), d("c")),
                ("prompts/PROMPT.md.j2".to_string(), None),
            ]
            .into(),
            dirs: vec![".git/hooks".into()],
        };
        let mut record = Record::start("r1", true, started);
        let now: BTreeMap<String, Digest> = [
            ("ralph.toml".to_string(), d("t2")),
            ("check.sh".to_string(), d("c")),
            ("prompts/PROMPT.md.j2".to_string(), d("p")),
            (".git/hooks/pre-push".to_string(), d("evil")),
        ]
        .into();
        // Died during the run: everything changed counts.
        assert_eq!(
            changed_during(&record, &now),
            [".git/hooks/pre-push", "prompts/PROMPT.md.j2", "ralph.toml"]
        );
        // Ended with the hook and the config as now: the template is the
        // user's, written after.
        record.ended = Some(
            [
                ("ralph.toml".to_string(), d("t2")),
                ("check.sh".to_string(), d("c")),
                (".git/hooks/pre-push".to_string(), d("evil")),
            ]
            .into(),
        );
        assert_eq!(
            changed_during(&record, &now),
            [".git/hooks/pre-push", "ralph.toml"]
        );
    }

    #[test]
    fn scripts_are_the_words_that_are_files_in_the_project() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("scripts")).unwrap();
        std::fs::write(dir.path().join("check.sh"), "").unwrap();
        std::fs::write(dir.path().join("scripts/t.py"), "").unwrap();
        let outside = tempfile::NamedTempFile::new().unwrap();
        std::fs::create_dir(dir.path().join(".ralph")).unwrap();
        std::fs::write(dir.path().join(".ralph/items"), "").unwrap();
        let cases: [(&str, &[&str]); 11] = [
            ("cargo test", &[]),
            ("./check.sh --fast", &["check.sh"]),
            (
                "sh check.sh && python3 scripts/t.py",
                &["check.sh", "scripts/t.py"],
            ),
            ("!./check.sh", &["check.sh"]),
            ("bash -e 'scripts/t.py'", &["scripts/t.py"]),
            ("echo a; ./check.sh", &["check.sh"]),
            ("cat check.sh scripts/t.py", &[]),
            ("echo x >> check.sh 2> scripts/t.py", &[]),
            ("printf x >>.ralph/items", &[]),
            ("./.ralph/items", &[]),
            ("ls scripts", &[]),
        ];
        for (command, want) in cases {
            assert_eq!(named_scripts(command, dir.path()), want, "{command}");
        }
        let abs = format!("sh {}", outside.path().display());
        assert!(
            named_scripts(&abs, dir.path()).is_empty(),
            "outside the project"
        );
    }

    /// Issue 34: a worker's loop trusted what its worktree held when it
    /// started (the run branch, with the agents' merged edits). Now every
    /// project file counts as the coordinator had it at the start.
    #[test]
    fn a_workers_files_count_as_its_coordinator_trusted_them() {
        let coordinator = Fingerprints {
            files: [
                ("ralph.toml".to_string(), d("t")),
                ("check.sh".to_string(), d("c")),
                ("/repo/.git/hooks/pre-push".to_string(), d("h")),
            ]
            .into(),
            dirs: vec!["/repo/.git/hooks".into()],
        };
        let worktree = Fingerprints {
            files: [
                ("ralph.toml".to_string(), d("t-by-the-agent")),
                ("check.sh".to_string(), d("c-by-the-agent")),
                ("evil.sh".to_string(), d("e")),
                ("prompts/PROMPT.md.j2".to_string(), None),
                ("/repo/.git/hooks/pre-push".to_string(), d("h-now")),
            ]
            .into(),
            dirs: vec!["/repo/.git/hooks".into()],
        };
        let trusted = worktree.trusted_by(&coordinator);
        let want: BTreeMap<String, Digest> = [
            ("ralph.toml".to_string(), d("t")),
            ("check.sh".to_string(), d("c")),
            ("evil.sh".to_string(), None),
            ("prompts/PROMPT.md.j2".to_string(), None),
            ("/repo/.git/hooks/pre-push".to_string(), d("h-now")),
        ]
        .into();
        assert_eq!(trusted.files, want);
    }

    #[test]
    fn a_changed_script_and_a_new_git_hook_are_seen() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git2::Repository::init(root).unwrap();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join("check.sh"), "exit 0\n").unwrap();
        let mut config = Config::default();
        config.verify.commands = vec!["./check.sh".into()];
        config.hooks.on_exit = vec!["git push".into()];
        let f = Fingerprints::take(root, &config);
        assert!(f.files.contains_key("check.sh"), "{f:?}");
        assert!(f.changed(root).is_empty());
        assert!(f.changed_for("git push", root).is_empty());
        std::fs::write(root.join(".git/hooks/pre-push"), "evil\n").unwrap();
        std::fs::write(root.join("check.sh"), "cat ~/.ssh/id_ed25519\n").unwrap();
        assert_eq!(f.changed(root), [".git/hooks/pre-push", "check.sh"]);
        assert_eq!(f.changed_for("./check.sh", root), ["check.sh"]);
        assert_eq!(f.changed_for("git push", root), [".git/hooks/pre-push"]);
        assert!(f.changed_for("echo done", root).is_empty());
    }
}
