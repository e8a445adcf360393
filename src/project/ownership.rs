//! Which files are ralph's: the prompt file it may overwrite (only one it
//! wrote itself, proven by a record of what it wrote), the files its own
//! stdout/stderr go to (`nohup ralph run > ralph.log`), and the runtime
//! paths git must never see, kept out through `.git/info/exclude`, which
//! neither the agent's `git add -A` nor `git clean -fd` can undo.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::events::Bus;
use crate::formats::Event;
use crate::formats::Layout;
use crate::project::Lock;
use crate::repo::{self, OwnPaths, Repo};

/// Where ralph records what it last wrote to the prompt file.
const PROMPT_RECORD: &str = "prompt-file.json";

/// The heading of the embedded template's first line and a phrase of its
/// first paragraph: a prompt file written by a ralph older than the record.
const EMBEDDED_MARKS: (&str, &str) = ("# Iteration ", "supervised by ralph");

#[derive(Debug, Default, Serialize, Deserialize)]
struct PromptRecord {
    path: PathBuf,
    sha256: String,
    /// What the file held before this write, when ralph wrote that too:
    /// the record is written before the file is replaced, so a supervisor
    /// killed in between leaves a file that is still recorded as ralph's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous: Option<String>,
}

/// Who the prompt file at `prompt_file` belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PromptOwner {
    /// No such file: ralph may create it.
    Absent,
    /// ralph wrote it (it is what ralph last wrote there).
    Ralph,
    /// Someone else's (a hand-written PROMPT.md): ralph never overwrites it.
    Foreign,
}

/// Whether the prompt file is ralph's to overwrite.
pub(crate) fn prompt_owner(root: &Path, prompt_file: &Path) -> PromptOwner {
    let Ok(bytes) = std::fs::read(root.join(prompt_file)) else {
        return PromptOwner::Absent;
    };
    let record: Option<PromptRecord> = std::fs::read(Layout::new(root).dir.join(PROMPT_RECORD))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let recorded = record.is_some_and(|r| {
        let sha = sha256(&bytes);
        r.path == prompt_file && (r.sha256 == sha || r.previous.as_ref() == Some(&sha))
    });
    let text = String::from_utf8_lossy(&bytes);
    let embedded = text.starts_with(EMBEDDED_MARKS.0) && text.contains(EMBEDDED_MARKS.1);
    if recorded || embedded {
        PromptOwner::Ralph
    } else {
        PromptOwner::Foreign
    }
}

/// The error for a prompt file ralph did not write (exit 2).
pub(crate) fn foreign_prompt_error(prompt_file: &Path) -> Error {
    let name = prompt_file.display();
    Error::config(format!(
        "{name} exists and was not written by ralph; ralph rewrites prompt_file every iteration and never overwrites a file it did not write"
    ))
    .with_hint(format!(
        "keep it by moving it (e.g. `git mv {name} OBJECTIVE.md`, and name it in the plan so the agent reads it), or set `prompt_file = \".ralph-prompt.md\"` in ralph.toml"
    ))
}

/// Refuse to start when the prompt file is someone else's.
pub(crate) fn claim_prompt_file(root: &Path, prompt_file: &Path) -> Result<()> {
    match prompt_owner(root, prompt_file) {
        PromptOwner::Foreign => Err(foreign_prompt_error(prompt_file)),
        PromptOwner::Absent | PromptOwner::Ralph => Ok(()),
    }
}

/// What `ralph init` tells about ralph's files: a prompt file ralph did not
/// write (it would refuse to start), and runtime paths it could not keep
/// out of git.
pub(crate) fn setup_warnings(root: &Path, prompt_file: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if prompt_owner(root, prompt_file) == PromptOwner::Foreign {
        let e = foreign_prompt_error(prompt_file);
        out.push(format!("{e}; hint: {}", e.hint().unwrap_or_default()));
    }
    if let Err(e) = exclude_runtime_paths(root) {
        out.push(format!("cannot keep ralph's runtime files out of git: {e}"));
    }
    out
}

/// Write the prompt file (`path`, under the root of `layout`) and record
/// what was written, so that the next run knows the file is ralph's. A
/// supervisor killed at any point of this leaves a file the next run still
/// recognises: the record (naming the old and the new text) is in place
/// before the file changes, and the file is replaced whole by a rename,
/// never truncated and rewritten.
pub(crate) fn write_prompt(layout: &Layout, path: &Path, text: &str) -> std::io::Result<()> {
    let bytes = text.as_bytes();
    let relative = path.strip_prefix(&layout.root).unwrap_or(path);
    let previous = (prompt_owner(&layout.root, relative) == PromptOwner::Ralph)
        .then(|| std::fs::read(path).ok().map(|old| sha256(&old)))
        .flatten();
    let record = PromptRecord {
        path: relative.to_path_buf(),
        sha256: sha256(bytes),
        previous,
    };
    let json = serde_json::to_vec(&record).expect("the record serializes");
    // The record is a convenience: losing it (`git clean -fdx`) is covered
    // by the embedded template's marks, and by the next write.
    let _ = crate::formats::write_atomic(&layout.dir.join(PROMPT_RECORD), &json);
    replace_whole(layout, path, bytes)
}

/// Put `bytes` at `path` by renaming a finished temp file over it. The
/// temp file lives in `.ralph/` (kept out of git, its leftovers removed by
/// the next run), not beside the prompt in the work tree; where the rename
/// cannot cross (another file system), the file is written in place.
fn replace_whole(layout: &Layout, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = layout
        .dir
        .join(format!(".prompt-file.tmp-{}", std::process::id()));
    let renamed = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return std::fs::write(path, bytes);
    }
    Ok(())
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Keep ralph's runtime paths out of git in `.git/info/exclude` (the
/// repository's own, never committed, untouched by `git clean` without
/// `-x`): everything in `.ralph/` but the handoffs. Nothing when the root is
/// not in a git repository or the lines are already there.
pub(crate) fn exclude_runtime_paths(root: &Path) -> Result<()> {
    let Ok(git) = git2::Repository::discover(root) else {
        return Ok(());
    };
    let Some(workdir) = git.workdir() else {
        return Ok(());
    };
    let canonical = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let prefix = canonical(root)
        .strip_prefix(canonical(workdir))
        .map(|rel| {
            rel.components()
                .map(|c| format!("{}/", c.as_os_str().to_string_lossy()))
                .collect::<String>()
        })
        .unwrap_or_default();
    let lines = [
        "# ralph's runtime files (handoffs are committed)".to_string(),
        format!("/{prefix}.ralph/*"),
        format!("!/{prefix}.ralph/handoffs/"),
    ];
    let exclude = git.commondir().join("info").join("exclude");
    let current = std::fs::read_to_string(&exclude).unwrap_or_default();
    if lines[1..].iter().all(|l| current.lines().any(|c| c == l)) {
        return Ok(());
    }
    let mut block = String::new();
    if !current.is_empty() && !current.ends_with('\n') {
        block.push('\n');
    }
    block.push_str(&lines.join("\n"));
    block.push('\n');
    // Appended, never rewritten: runs of two projects of this repository
    // starting together each read the file while the other had truncated
    // it to write it back, and the user's own lines were lost.
    std::fs::create_dir_all(exclude.parent().expect("info/exclude has a parent"))
        .and_then(|()| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&exclude)
        })
        .and_then(|mut file| std::io::Write::write_all(&mut file, block.as_bytes()))
        .map_err(|e| Error::io("cannot write", &exclude, e))
}

/// Where a run's agents work, for what it says of the untracked files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Workplace {
    /// Here (one loop, or a worker in its worktree): the first WIP commit
    /// would sweep them in.
    Here,
    /// In worktrees made from the branch's last commit (the coordinator of
    /// `--workers N`): the agents never see them.
    Worktrees,
}

/// What a run does before its first iteration about ralph's files: note
/// where its own output goes, keep its runtime paths out of git, and warn
/// about the untracked files (what happens to them depends on `place`).
pub(crate) fn at_start(root: &Path, prompt_file: &Path, place: Workplace, bus: &mut Bus) {
    repo::remember_output_files();
    let mut warnings = Vec::new();
    if let Err(e) = exclude_runtime_paths(root) {
        warnings.push(format!("cannot keep ralph's runtime files out of git: {e}"));
    }
    if let Ok(Some(repo)) = Repo::open(root)
        && let Ok(groups) = repo.untracked_groups(&OwnPaths::new(prompt_file))
        && !groups.is_empty()
    {
        let total: usize = groups.iter().map(|g| g.files).sum();
        let named: Vec<String> = groups
            .iter()
            .take(5)
            .map(|g| match g.files {
                1 => g.path.clone(),
                n => format!("{} ({n} files)", g.path),
            })
            .collect();
        let more = groups.len().saturating_sub(named.len());
        let files = format!(
            "{}{}",
            named.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        );
        warnings.push(match place {
            Workplace::Here => format!(
                "{total} untracked files that git does not ignore would go into the next WIP commit: {files}; add build outputs to .gitignore (the [git] limits max_file_size, max_new_files and commit_binaries keep huge, binary and too many new files out)"
            ),
            Workplace::Worktrees => format!(
                "{total} untracked files are not in the workers' worktrees, which start from the branch's last commit: {files}; commit the ones the agents need (ralph commits only the plan's check-offs)"
            ),
        });
    }
    for message in warnings {
        bus.emit(Event::Warning { message });
    }
}

/// Re-create what a `git clean -fdx` or `rm -rf .ralph` took from under a
/// live run (`.ralph/`, its `.gitignore`, the exclude lines, the lock), with
/// a warning; Err(Locked) when another supervisor holds the lock now. Run
/// before each iteration and on the driver's one-second beat.
pub(crate) fn keep_runtime(layout: &Layout, lock: &mut Lock, bus: &mut Bus) -> Result<()> {
    let had_dir = layout.dir.is_dir();
    if lock.revalidate(layout)? {
        exclude_runtime_paths(&layout.root)?;
        bus.emit(Event::Warning {
            message: format!(
                "{} was deleted or replaced under the running supervisor (git clean -x? rm -rf?); ralph re-created {} and holds the lock again",
                if had_dir { ".ralph/lock" } else { ".ralph/" },
                if had_dir { "it" } else { "its runtime files" },
            ),
        });
        return Ok(());
    }
    layout.ensure()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_file_owner_follows_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let prompt = Path::new("PROMPT.md");
        assert_eq!(prompt_owner(root, prompt), PromptOwner::Absent);
        std::fs::write(root.join(prompt), "my own prompt\n").unwrap();
        assert_eq!(prompt_owner(root, prompt), PromptOwner::Foreign);
        assert!(claim_prompt_file(root, prompt).is_err());
        Layout::new(root).ensure().unwrap();
        write_prompt(&Layout::new(root), &root.join(prompt), "ralph's prompt\n").unwrap();
        assert_eq!(prompt_owner(root, prompt), PromptOwner::Ralph);
        std::fs::write(root.join(prompt), "edited by hand\n").unwrap();
        assert_eq!(prompt_owner(root, prompt), PromptOwner::Foreign);
        std::fs::write(
            root.join(prompt),
            "# Iteration 3: x\n\nYou are one iteration of an unattended loop supervised by ralph.\n",
        )
        .unwrap();
        assert_eq!(prompt_owner(root, prompt), PromptOwner::Ralph);
    }

    /// A supervisor killed between the record and the file's replacement
    /// (the restart used to refuse with exit 2: "PROMPT.md exists and was
    /// not written by ralph").
    #[test]
    fn a_prompt_file_mid_replacement_is_still_ralphs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let layout = Layout::new(root);
        layout.ensure().unwrap();
        let prompt = Path::new("PROMPT.md");
        write_prompt(&layout, &root.join(prompt), "iteration 1's prompt\n").unwrap();
        // The record of iteration 2's prompt is written; the kill comes
        // before the file is replaced.
        let record = PromptRecord {
            path: prompt.into(),
            sha256: sha256(b"iteration 2's prompt\n"),
            previous: Some(sha256(b"iteration 1's prompt\n")),
        };
        std::fs::write(
            layout.dir.join(PROMPT_RECORD),
            serde_json::to_vec(&record).unwrap(),
        )
        .unwrap();
        assert_eq!(prompt_owner(root, prompt), PromptOwner::Ralph);
        write_prompt(&layout, &root.join(prompt), "iteration 2's prompt\n").unwrap();
        write_prompt(&layout, &root.join(prompt), "iteration 3's prompt\n").unwrap();
        assert_eq!(prompt_owner(root, prompt), PromptOwner::Ralph);
        // Two writes back is not ralph's any more, and no temp file is left.
        std::fs::write(root.join(prompt), "iteration 1's prompt\n").unwrap();
        assert_eq!(prompt_owner(root, prompt), PromptOwner::Foreign);
        let names: Vec<_> = std::fs::read_dir(&layout.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(!names.iter().any(|n| n.contains(".tmp-")), "{names:?}");
    }

    #[test]
    fn runtime_paths_are_excluded_once_with_the_root_prefix() {
        let dir = tempfile::tempdir().unwrap();
        git2::Repository::init(dir.path()).unwrap();
        let root = dir.path().join("sub");
        std::fs::create_dir(&root).unwrap();
        exclude_runtime_paths(&root).unwrap();
        exclude_runtime_paths(&root).unwrap();
        let text = std::fs::read_to_string(dir.path().join(".git/info/exclude")).unwrap();
        assert_eq!(text.matches("/sub/.ralph/*").count(), 1, "{text}");
        assert!(text.contains("!/sub/.ralph/handoffs/"), "{text}");
    }

    /// Runs of several projects of one repository start at once: the
    /// user's lines and every project's stay (before: the file was
    /// rewritten whole, and a run reading it while another had truncated
    /// it wrote back its own lines only).
    #[test]
    fn runs_starting_together_keep_the_users_lines_and_each_others() {
        let dir = tempfile::tempdir().unwrap();
        git2::Repository::init(dir.path()).unwrap();
        let exclude = dir.path().join(".git/info/exclude");
        let user = "# the user's\n/secret-notes/\n";
        std::fs::write(&exclude, user).unwrap();
        let projects: Vec<String> = (0..64).map(|i| format!("svc-{i}")).collect();
        for round in projects.chunks(8) {
            let start = std::sync::Barrier::new(round.len());
            std::thread::scope(|s| {
                for project in round {
                    let root = dir.path().join(project);
                    std::fs::create_dir(&root).unwrap();
                    let start = &start;
                    s.spawn(move || {
                        start.wait();
                        exclude_runtime_paths(&root).unwrap();
                    });
                }
            });
        }
        let text = std::fs::read_to_string(&exclude).unwrap();
        assert!(text.starts_with(user), "{text}");
        for project in &projects {
            assert!(
                text.contains(&format!("\n/{project}/.ralph/*\n")),
                "{project}: {text}"
            );
        }
    }
}
