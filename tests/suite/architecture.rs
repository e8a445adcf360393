//! The architecture's invariants (ARCHITECTURE.md, "Invariants"), checked
//! from the source text with std only: file sizes, no import circles between
//! the ralph crate's files, the leaf and pure modules' imports, the pure
//! supervisor files' synchronous core, and one writer of the run's
//! bookkeeping. Every check is a function over (path, text) pairs, so the
//! unit tests at the end prove each one fails on a small made-up input.
//!
//! What is read: the code before a file's first `#[cfg(test)]`, with
//! comments, strings and char literals blanked out. Imports are the paths
//! that start with `crate::`, `super::` or `self::` (groups included) and
//! `mod x;` declarations; a reference to a module's item resolves to the
//! file of the longest module prefix (a re-export counts for the
//! re-exporting file).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Words in a file's `//!` that say it exists to keep another file short:
/// such an "extension file" splits one thing by size, not by role.
const EXTENSION_MARKS: [&str; 4] = ["600 lines", "line limit", "for room", "to stay under"];
/// Decision modules: pure, synchronous, tested beside their code.
const PURE: [&str; 7] = [
    "rules",
    "context",
    "plan::estimate",
    "plan::items",
    "plan::checklist",
    "plan::units",
    "stream",
];
/// What the pure modules must not import: configuration, the project's
/// lock and files, the event bus, processes, the loop. (The formats, plain
/// records, they may.)
const RUNTIME: [&str; 5] = ["config", "project", "events", "agent", "supervisor"];
/// The supervisor's pure files (and the coordinator's core): time comes in
/// as a value, no IO, no tokio.
const PURE_SUPERVISOR: [&str; 8] = [
    "src/supervisor/iteration.rs",
    "src/supervisor/iteration/seams.rs",
    "src/supervisor/iteration/setup.rs",
    "src/supervisor/stop.rs",
    "src/supervisor/verdict.rs",
    "src/supervisor/budget.rs",
    "src/supervisor/limit_wait.rs",
    "src/workers/coordinator/machine.rs",
];
const IMPURE_TOKENS: [&str; 7] = [
    "tokio",
    "async fn",
    "::now(",
    "std::fs",
    "fs::",
    "crate::agent",
    "Bus",
];
/// The files that may change `RunState`'s bookkeeping during a run.
const BOOKKEEPERS: [&str; 2] = ["src/supervisor/run.rs", "src/supervisor/record.rs"];
/// `RunState`'s per-run bookkeeping fields.
const BOOKKEEPING: [&str; 4] = [
    "history",
    "context_history",
    "error_hashes",
    "context_checkpoint",
];

/// Linux-only interfaces: their one home is `src/platform/linux.rs`
/// (`src/platform.rs` chooses it once), so that ralph builds and runs on
/// macOS too (docs/platforms.md). Matched in code and strings, not comments.
const LINUX_ONLY: [&str; 13] = [
    "/proc",
    "prctl",
    "PDEATHSIG",
    "SUBREAPER",
    "waitid",
    "pipe2",
    "F_SETPIPE_SZ",
    "epoll",
    "inotify",
    "signalfd",
    "timerfd",
    "eventfd",
    "memfd",
];
/// Where they may appear, each with the reason.
const LINUX_ONLY_HOMES: [(&str, &str, &str); 4] = [
    ("src/platform/linux.rs", "", "the platform's Linux side"),
    (
        "src/agent/sandbox.rs",
        "/proc",
        "bubblewrap's arguments (the box's own /proc): bubblewrap is Linux-only and refused elsewhere",
    ),
    (
        "tests/suite/common.rs",
        "/proc",
        "the tests' own view of processes, each Linux reader beside its macOS twin (`ps`, `lsof`)",
    ),
    (
        "tests/suite/architecture.rs",
        "",
        "this file names the interfaces it looks for",
    ),
];

type Files = Vec<(String, String)>;

// ---- the checks on the real tree ----

/// Functions longer than this are listed for a person to judge (not a
/// rule: see ARCHITECTURE.md, "Long functions").
const LONG_FUNCTION: usize = 80;

/// `cargo test --test suite architecture::list_long_functions -- --ignored
/// --nocapture`: every function over [`LONG_FUNCTION`] lines, longest
/// first. A listing to read, never a failure: length alone says nothing
/// about where code belongs.
#[test]
#[ignore = "a listing for a person, run by hand"]
fn list_long_functions() {
    for line in long_functions(&workspace_files(), LONG_FUNCTION) {
        println!("{line}");
    }
}

#[test]
fn no_file_exists_only_to_keep_another_short() {
    assert_none("extension files", extension_files(&workspace_files()));
}

/// Issue 20: a newcomer reads `src/` as at most this many subsystems (a
/// new concern goes inside the one it serves).
const MAX_TOP_LEVEL_MODULES: usize = 22;

#[test]
fn src_has_at_most_22_top_level_modules() {
    let top: BTreeSet<String> = ralph_files()
        .iter()
        .filter_map(|(p, _)| module_of(p))
        .map(|m| m.split("::").next().unwrap().to_string())
        .collect();
    assert!(
        top.len() <= MAX_TOP_LEVEL_MODULES,
        "{} top-level modules: {top:?}",
        top.len()
    );
}

#[test]
fn no_import_circles() {
    assert_none("import circles", circles(&ralph_files()));
}

#[test]
fn top_level_modules_import_downward_only() {
    assert_none(
        "circles among the top-level modules",
        top_level_circles(&ralph_files()),
    );
}

#[test]
fn templates_imports_only_error() {
    assert_none(
        "templates is not a leaf",
        imports_outside(&ralph_files(), "config::templates", &["error"]),
    );
}

#[test]
fn cli_imports_no_commands() {
    assert_none(
        "cli imports commands",
        imports_of(&ralph_files(), &["cli"], &["commands"]),
    );
}

#[test]
fn pure_modules_import_no_runtime() {
    assert_none(
        "pure modules import the runtime",
        imports_of(&ralph_files(), &PURE, &RUNTIME),
    );
}

#[test]
fn pure_supervisor_files_are_synchronous() {
    assert_none("impure pure files", impure(&ralph_files()));
}

#[test]
fn only_the_supervisor_writes_run_bookkeeping() {
    assert_none("bookkeeping writers", bookkeeping_writers(&ralph_files()));
}

#[test]
fn linux_only_interfaces_stay_in_the_platform_module() {
    assert_none(
        "Linux-only interfaces outside src/platform/linux.rs",
        linux_only(&workspace_files()),
    );
}

/// The suite runs on macOS too (`.github/workflows/macos.yml`): a test
/// asks `common` about processes, never `/proc` itself.
#[test]
fn tests_see_processes_through_common() {
    assert_none(
        "Linux-only interfaces in the tests outside tests/suite/common.rs",
        linux_only(&suite_files()),
    );
}

/// Where a plan file may be read directly (`Plan::load`, `Plan::read_text`)
/// rather than through `Project` (`plan`, `plan_text`, `plan_at`,
/// `plan_text_at`), and why.
const PLAN_READERS: &[(&str, &str)] = &[
    ("src/project.rs", "the one plan loader"),
    ("src/plan/", "the loader's own policy"),
    (
        "src/events/terminal.rs",
        "`events` sits below `project`, which says its warnings on a `Bus`",
    ),
    (
        "src/supervisor/publish.rs",
        "the hooks' facts read the path `Project::plan_path` gave the run's start",
    ),
    (
        "src/commands/demo.rs",
        "the rehearsal copies any file the user names: not a project's plan",
    ),
];

#[test]
fn plans_are_loaded_through_the_project() {
    assert_none(
        "a plan read directly outside its owner",
        plans_read_directly(&ralph_files()),
    );
}

#[test]
fn ralph_paths_come_from_the_layout() {
    assert_none(
        "`.ralph/` joined by hand outside src/formats/",
        ralph_paths_by_hand(&ralph_files()),
    );
}

#[test]
fn trees_are_diffed_through_their_owner() {
    assert_none(
        "a diff of two trees outside src/repo/trees.rs",
        tree_diffs_by_hand(&ralph_files()),
    );
}

fn assert_none(what: &str, violations: Vec<String>) {
    assert!(
        violations.is_empty(),
        "{what} (see ARCHITECTURE.md, \"Invariants\"):\n  {}",
        violations.join("\n  ")
    );
}

// ---- the checks, as functions of (path, text) ----

/// Files whose module documentation says they were split off for size.
fn extension_files(files: &Files) -> Vec<String> {
    files
        .iter()
        .filter_map(|(path, text)| {
            let doc: String = text
                .lines()
                .take_while(|l| l.starts_with("//!") || l.trim().is_empty())
                .collect::<Vec<_>>()
                .join(" ")
                .to_lowercase();
            let mark = EXTENSION_MARKS.iter().find(|m| doc.contains(*m))?;
            Some(format!(
                "{path}: its documentation says it exists for size (\"{mark}\"); \
                 name the file after the one thing it holds, or merge it back and list an exception"
            ))
        })
        .collect()
}

/// Functions (before a file's tests) longer than `over` lines, longest
/// first: `path:line name: N lines`.
fn long_functions(files: &Files, over: usize) -> Vec<String> {
    let mut found: Vec<(usize, String)> = Vec::new();
    for (path, text) in files {
        let code = strip(before_tests(text));
        let b = code.as_bytes();
        let mut from = 0;
        while let Some(at) = code[from..].find("fn ").map(|i| i + from) {
            from = at + 3;
            let starts_word = at == 0 || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_');
            let name_len = ident_len(&code[from..]);
            if !starts_word || name_len == 0 {
                continue;
            }
            let name = &code[from..from + name_len];
            // A body starts at the first `{` before any `;` (a declaration).
            let Some(open) = code[from..].find(['{', ';']).map(|i| i + from) else {
                continue;
            };
            if b[open] == b';' {
                continue;
            }
            let mut depth = 0usize;
            let Some(close) = (open..b.len()).find(|&i| {
                match b[i] {
                    b'{' => depth += 1,
                    b'}' => depth -= 1,
                    _ => {}
                }
                depth == 0
            }) else {
                continue;
            };
            let line = code[..at].matches('\n').count() + 1;
            let lines = code[at..=close].matches('\n').count() + 1;
            if lines > over {
                found.push((lines, format!("{path}:{line} {name}: {lines} lines")));
            }
        }
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    found.into_iter().map(|(_, s)| s).collect()
}

/// Circles in the file import graph, each as `a → b → … → a`.
fn circles(files: &Files) -> Vec<String> {
    let graph = import_graph(files);
    let edges: BTreeMap<&str, BTreeSet<&str>> = graph
        .iter()
        .map(|(m, to)| (m.as_str(), to.keys().map(String::as_str).collect()))
        .collect();
    find_cycles(&edges)
        .into_iter()
        .map(|cycle| {
            let why: Vec<String> = cycle
                .windows(2)
                .map(|w| format!("{} uses {}", w[0], graph[w[0]][w[1]]))
                .collect();
            format!(
                "{} ({}); break it by moving what the lower module needs into it or into a leaf \
                 (as BreakerConfig moved into breaker.rs and Templates into templates.rs)",
                cycle.join(" → "),
                why.join("; ")
            )
        })
        .collect()
}

/// Circles among the top-level modules of `src/` (a module stands for all
/// its files), each named with every edge and the files behind it: the
/// layers are a DAG, every import points down (`formats` and the leaves at
/// the bottom, `commands` and `app` at the top).
fn top_level_circles(files: &Files) -> Vec<String> {
    let graph = top_level_graph(files);
    let edges: BTreeMap<&str, BTreeSet<&str>> = graph
        .iter()
        .map(|(m, to)| (m.as_str(), to.keys().map(String::as_str).collect()))
        .collect();
    find_cycles(&edges)
        .into_iter()
        .map(|cycle| {
            let why: Vec<String> = cycle
                .windows(2)
                .map(|w| {
                    let by = &graph[w[0]][w[1]];
                    let more = match by.len() {
                        n if n > 3 => format!(" and {} more", n - 3),
                        _ => String::new(),
                    };
                    let shown: Vec<&str> = by.iter().take(3).map(String::as_str).collect();
                    format!("{} → {}: {}{more}", w[0], w[1], shown.join(", "))
                })
                .collect();
            format!(
                "{}\n    {}\n    move what the lower module needs down (a persisted or wire \
                 format into `formats`, a config section into `config`) so the import points down",
                cycle.join(" → "),
                why.join("\n    ")
            )
        })
        .collect()
}

/// top-level module → (top-level module it imports → `file (path)` for
/// every file that does).
fn top_level_graph(files: &Files) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let top = |m: &str| m.split("::").next().unwrap_or(m).to_string();
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (m, targets) in import_graph(files) {
        let from = top(&m);
        let entry = out.entry(from.clone()).or_default();
        for (t, how) in targets {
            let to = top(&t);
            if to != from {
                let by = format!("{} ({how})", file_of(&m));
                entry.entry(to).or_default().insert(by);
            }
        }
    }
    out
}

/// Imports of `module` (its submodules excluded) other than `allowed`.
fn imports_outside(files: &Files, module: &str, allowed: &[&str]) -> Vec<String> {
    let graph = import_graph(files);
    let Some(to) = graph.get(module) else {
        return Vec::new();
    };
    to.iter()
        .filter(|(t, _)| !allowed.iter().any(|a| within(t, a)) && !within(t, module))
        .map(|(t, how)| {
            format!(
                "{} imports {t} ({how}); it may import only {}: pass what it needs in as a value",
                file_of(module),
                allowed.join(", ")
            )
        })
        .collect()
}

/// Imports from any of `from` (and their submodules) into any of `to`.
fn imports_of(files: &Files, from: &[&str], to: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for (m, targets) in import_graph(files) {
        if !from.iter().any(|f| within(&m, f)) {
            continue;
        }
        for (t, how) in targets {
            if to.iter().any(|x| within(&t, x)) {
                out.push(format!(
                    "{} imports {t} ({how}); {m} must not depend on {}: \
                     take the value as a parameter or move the type to the lower module",
                    file_of(&m),
                    to.join("/")
                ));
            }
        }
    }
    out
}

/// Tokens of IO, async or the clock in the pure supervisor files.
fn impure(files: &Files) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        if !PURE_SUPERVISOR.contains(&path.as_str()) {
            continue;
        }
        let code = squeeze(&strip(before_tests(text)));
        for token in IMPURE_TOKENS {
            let n = count_token(&code, token);
            if n > 0 {
                out.push(format!(
                    "{path}: `{token}` {n}×; the pure core takes time as `Now` and returns effects \
                     for the driver to apply: move the IO to supervisor/driver.rs or supervisor.rs"
                ));
            }
        }
    }
    out
}

/// Writes to `RunState`'s bookkeeping outside [`BOOKKEEPERS`]: assignment,
/// a mutating method call or `&mut` of `.history`, `.context_history`,
/// `.error_hashes` or `.context_checkpoint` (or a field of it).
fn bookkeeping_writers(files: &Files) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        if BOOKKEEPERS.contains(&path.as_str()) {
            continue;
        }
        let code = strip(before_tests(text));
        for (line, what) in bookkeeping_writes(&code) {
            out.push(format!(
                "{path}:{line}: writes `{what}`; only {} may change the run's bookkeeping: \
                 return the facts and let supervisor/record.rs record them",
                BOOKKEEPERS.join(" and ")
            ));
        }
    }
    out
}

/// `path:line: token` of each Linux-only interface outside its homes,
/// tests beside the code included (they run on macOS too).
fn linux_only(files: &Files) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        let code = strip_with(text, Keep::Strings);
        for (n, line) in code.lines().enumerate() {
            for token in LINUX_ONLY {
                let home = LINUX_ONLY_HOMES
                    .iter()
                    .any(|(p, t, _)| p == path && (t.is_empty() || *t == token));
                if !home && count_token(line, token) > 0 {
                    out.push(format!("{path}:{}: `{token}`", n + 1));
                }
            }
        }
    }
    out
}

/// `.join(".ralph…")` outside `src/formats/` (tests excluded): a path
/// under `.ralph/` is `Layout`'s to name.
fn ralph_paths_by_hand(files: &Files) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        if path.starts_with("src/formats/") {
            continue;
        }
        let code = strip_with(before_tests(text), Keep::Strings);
        for (n, line) in code.lines().enumerate() {
            if line.contains("join(\".ralph") {
                out.push(format!(
                    "{path}:{}: a `.ralph/` path joined by hand; take it from `formats::Layout` (add a method there)",
                    n + 1
                ));
            }
        }
    }
    out
}

/// `.diff_tree_to_tree(` outside `src/repo/trees.rs` (tests excluded):
/// libgit2's reads every tree of both sides; `repo::diff_trees` reads only
/// the subtrees that differ (2 against 2,000 trees on a large repository).
fn tree_diffs_by_hand(files: &Files) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        if path == "src/repo/trees.rs" {
            continue;
        }
        let code = strip(before_tests(text));
        for (n, line) in code.lines().enumerate() {
            if line.contains(".diff_tree_to_tree(") {
                out.push(format!(
                    "{path}:{}: a diff of two trees by hand; use `repo::diff_trees`",
                    n + 1
                ));
            }
        }
    }
    out
}

/// `Plan::load(` or `Plan::read_text(` outside [`PLAN_READERS`] (tests
/// excluded): a plan is read through `Project`, so a run's recorded plan
/// and `config`'s are found and refused alike.
fn plans_read_directly(files: &Files) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        if PLAN_READERS.iter().any(|(p, _)| path.starts_with(p)) {
            continue;
        }
        let code = strip(before_tests(text));
        for (n, line) in code.lines().enumerate() {
            if ["Plan::load(", "Plan::read_text("]
                .iter()
                .any(|call| line.contains(call))
            {
                out.push(format!(
                    "{path}:{}: a plan read directly; load it through `project::Project` \
                     (`plan`, `plan_text`, or `plan_at` for the path a run recorded)",
                    n + 1
                ));
            }
        }
    }
    out
}

// ---- reading the tree ----

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `src/` and `crates/*/src/`, by relative path.
fn workspace_files() -> Files {
    let root = manifest_dir();
    let mut dirs = vec![root.join("src")];
    if let Ok(crates) = std::fs::read_dir(root.join("crates")) {
        dirs.extend(crates.flatten().map(|e| e.path().join("src")));
    }
    let mut out = Vec::new();
    for dir in dirs {
        collect_rs(&root, &dir, &mut out);
    }
    out.sort();
    assert!(out.len() > 20, "found only {} source files", out.len());
    out
}

/// The integration suite's files (`tests/suite/`).
fn suite_files() -> Files {
    let root = manifest_dir();
    let mut out = Vec::new();
    collect_rs(&root, &root.join("tests/suite"), &mut out);
    out.sort();
    out
}

/// The ralph crate's files (`src/`).
fn ralph_files() -> Files {
    workspace_files()
        .into_iter()
        .filter(|(p, _)| p.starts_with("src/"))
        .collect()
}

fn collect_rs(root: &Path, dir: &Path, out: &mut Files) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_rs(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap().to_string_lossy();
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((rel.replace('\\', "/"), text));
        }
    }
}

fn before_tests(text: &str) -> &str {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with("#[cfg(test)]") {
            return &text[..at];
        }
        at += line.len();
    }
    text
}

/// `text` with comments, strings and char literals blanked to spaces;
/// newlines are kept, so line numbers stay right.
fn strip(text: &str) -> String {
    strip_with(text, Keep::Nothing)
}

/// What [`strip_with`] keeps besides code.
#[derive(Clone, Copy, PartialEq)]
enum Keep {
    Nothing,
    /// String and char literals (a path is written in one).
    Strings,
}

fn strip_with(text: &str, keep: Keep) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank_literal = keep == Keep::Nothing;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (1, i + 2);
            while j < b.len() && depth > 0 {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if (rest.starts_with(b"r\"") || rest.starts_with(b"r#") || rest.starts_with(b"br"))
            && (i == 0 || !ident(b[i - 1]))
            && raw_string_end(b, i).is_some()
        {
            let end = raw_string_end(b, i).unwrap();
            if blank_literal {
                blank(&mut out, i, end);
            }
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            if blank_literal {
                blank(&mut out, i, j + 1);
            }
            i = j + 1;
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{..}'); otherwise a lifetime.
            let end = if rest.get(1) == Some(&b'\\') {
                rest.iter()
                    .skip(2)
                    .position(|&c| c == b'\'')
                    .map(|p| i + p + 3)
            } else {
                let len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + len) == Some(&b'\'')).then_some(i + len + 2)
            };
            match end {
                Some(end) => {
                    if blank_literal {
                        blank(&mut out, i, end);
                    }
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The end of a raw string (`r"…"`, `r#"…"#`, `br"…"`) starting at `i`.
fn raw_string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + if b[i] == b'b' { 2 } else { 1 };
    let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
    j += hashes;
    if b.get(j) != Some(&b'"') {
        return None;
    }
    let close: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    (j + 1..b.len())
        .find(|&k| b[k..].starts_with(&close))
        .map(|k| k + close.len())
}

/// Runs of whitespace as one space, so `async  fn` is `async fn`.
fn squeeze(code: &str) -> String {
    code.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Occurrences of `token` not inside a longer identifier.
fn count_token(code: &str, token: &str) -> usize {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    code.match_indices(token)
        .filter(|(at, _)| {
            let before = code[..*at].chars().next_back();
            let after = code[at + token.len()..].chars().next();
            let glued_before = token.starts_with(ident) && before.is_some_and(ident);
            let glued_after = token.ends_with(ident) && after.is_some_and(ident);
            !(glued_before || glued_after)
        })
        .count()
}

/// (line, text) of each write to a bookkeeping field in stripped `code`.
fn bookkeeping_writes(code: &str) -> Vec<(usize, String)> {
    const MUTATORS: [&str; 12] = [
        "push(",
        "drain(",
        "clear(",
        "retain(",
        "truncate(",
        "extend(",
        "insert(",
        "remove(",
        "pop(",
        "sort",
        "dedup(",
        "append(",
    ];
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        for field in BOOKKEEPING {
            let needle = format!(".{field}");
            for (at, _) in line.match_indices(&needle) {
                let mut rest = &line[at + needle.len()..];
                if rest.starts_with(ident) {
                    continue; // a longer name: `.history_len`
                }
                // `.context_checkpoint.active = …` writes the field too.
                while let Some(sub) = rest.strip_prefix('.') {
                    let len = sub.find(|c: char| !ident(c)).unwrap_or(sub.len());
                    if len == 0 || MUTATORS.iter().any(|m| sub.starts_with(m)) {
                        break;
                    }
                    rest = &sub[len..];
                }
                let rest = rest.trim_start();
                let assigned = (rest.starts_with('=') && !rest.starts_with("=="))
                    || ["+=", "-=", "|="].iter().any(|op| rest.starts_with(op));
                let mutated = rest
                    .strip_prefix('.')
                    .is_some_and(|r| MUTATORS.iter().any(|m| r.starts_with(m)));
                let head = line[..at].trim_end_matches(|c: char| ident(c) || c == '.');
                let borrowed = head.trim_end().ends_with("&mut");
                if assigned || mutated || borrowed {
                    out.push((n + 1, line.trim().to_string()));
                }
            }
        }
    }
    out
}

// ---- the import graph ----

/// `src/repo/commit.rs` → `repo::commit`, `src/commands/mod.rs` →
/// `commands`; None for the crate root and the binary.
fn module_of(path: &str) -> Option<String> {
    let rel = path.strip_prefix("src/")?.strip_suffix(".rs")?;
    if rel == "lib" || rel == "main" {
        return None;
    }
    let rel = rel.strip_suffix("/mod").unwrap_or(rel);
    Some(rel.replace('/', "::"))
}

fn file_of(module: &str) -> String {
    format!("src/{}.rs", module.replace("::", "/"))
}

/// `m` is `module` or one of its submodules.
fn within(m: &str, module: &str) -> bool {
    m == module || m.starts_with(&format!("{module}::"))
}

/// module → (imported module → the first path that imports it). Edges from
/// a module to itself or to one of its ancestors are left out: a module's
/// own submodules are not a circle with it.
fn import_graph(files: &Files) -> BTreeMap<String, BTreeMap<String, String>> {
    let modules: BTreeSet<String> = files.iter().filter_map(|(p, _)| module_of(p)).collect();
    let reexports = files
        .iter()
        .find(|(p, _)| p == "src/lib.rs")
        .map(|(_, t)| root_reexports(&strip(t)))
        .unwrap_or_default();
    let homes = item_homes(files, &modules);
    let mut graph = BTreeMap::new();
    for (path, text) in files {
        let Some(module) = module_of(path) else {
            continue;
        };
        let code = strip(before_tests(text));
        let mut to: BTreeMap<String, String> = BTreeMap::new();
        for segments in paths(&code) {
            let shown = segments.join("::");
            let Some(target) = resolve(&module, &segments, &modules, &reexports, &homes) else {
                continue;
            };
            if target != module && !within(&module, &target) {
                to.entry(target).or_insert(shown);
            }
        }
        for child in mod_declarations(&code) {
            let target = format!("{module}::{child}");
            if modules.contains(&target) {
                to.entry(target).or_insert(format!("mod {child}"));
            }
        }
        graph.insert(module, to);
    }
    graph
}

/// The file module a path (`crate::a::b::Item`, `super::x`, `self::y`)
/// written in `module` points into: the longest known module prefix.
fn resolve(
    module: &str,
    segments: &[String],
    modules: &BTreeSet<String>,
    reexports: &BTreeMap<String, String>,
    homes: &Homes,
) -> Option<String> {
    let mut base: Vec<&str> = match segments.first()?.as_str() {
        "crate" => Vec::new(),
        "self" => module.split("::").collect(),
        "super" => {
            let mut b: Vec<&str> = module.split("::").collect();
            b.pop();
            b
        }
        _ => return None,
    };
    let mut rest = &segments[1..];
    while rest.first().is_some_and(|s| s == "super") {
        base.pop();
        rest = &rest[1..];
    }
    let mut best = (!base.is_empty()).then(|| base.join("::"));
    for s in rest {
        base.push(s);
        let m = base.join("::");
        if modules.contains(&m) {
            best = Some(m);
        } else {
            // An item a folder's root re-exports lives in the child that
            // defines it: `crate::state::Trigger` is `state::run_state`.
            // Inside the folder, the root's glob-re-exported core is the
            // parent itself (a child may use its parent's items, as before
            // the content moved out of the root).
            if let Some(b) = best.clone()
                && let Some((home, glob)) = homes.get(&b).and_then(|h| h.get(s.as_str()))
                && !(*glob && within(module, &b))
            {
                best = Some(home.clone());
            }
            break;
        }
    }
    match best {
        Some(m) => Some(m),
        // `crate::Error`: an item the crate root re-exports.
        None => rest.first().and_then(|name| reexports.get(name).cloned()),
    }
}

/// module → (item name → (the child module it is defined in, whether it
/// came through a glob)), for the items a folder's root re-exports
/// (`pub use run_state::*;`, `pub use lock::{Lock, read_lock};`).
type Homes = BTreeMap<String, BTreeMap<String, (String, bool)>>;

fn item_homes(files: &Files, modules: &BTreeSet<String>) -> Homes {
    let code: BTreeMap<String, String> = files
        .iter()
        .filter_map(|(p, t)| Some((module_of(p)?, strip(before_tests(t)))))
        .collect();
    let mut homes = Homes::new();
    for (module, text) in &code {
        for at in reexport_trees(text) {
            for path in parse_tree(&text[at..]) {
                let Some(first) = path.first() else { continue };
                let child = format!("{module}::{first}");
                if !modules.contains(&child) {
                    continue;
                }
                let glob = path.len() == 1;
                let names: Vec<String> = if glob {
                    // `pub use child::*;`: every item the child defines.
                    code.get(&child)
                        .map(|c| defined_names(c))
                        .unwrap_or_default()
                } else {
                    path.last().into_iter().cloned().collect()
                };
                let entry = homes.entry(module.clone()).or_default();
                for name in names {
                    entry.entry(name).or_insert_with(|| (child.clone(), glob));
                }
            }
        }
    }
    homes
}

/// Where the tree of each re-export (`pub use …`, `pub(crate) use …`,
/// `pub(super) use …`) starts in `code`.
fn reexport_trees(code: &str) -> Vec<usize> {
    ["pub use ", "pub(crate) use ", "pub(super) use "]
        .iter()
        .flat_map(|p| code.match_indices(p).map(move |(at, _)| at + p.len()))
        .collect()
}

/// The names of the items a file defines (`struct X`, `fn y`, …).
fn defined_names(code: &str) -> Vec<String> {
    const KINDS: [&str; 9] = [
        "struct", "enum", "fn", "const", "static", "type", "trait", "union", "mod",
    ];
    let words: Vec<&str> = code
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|w| KINDS.contains(&w[0]))
        .map(|w| w[1].to_string())
        .collect()
}

/// Names the crate root re-exports (`pub(crate) use error::{Error, Result};`) and
/// the module each comes from.
fn root_reexports(code: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for at in reexport_trees(code) {
        let tree = parse_tree(&code[at..]);
        for path in tree {
            if let (Some(first), Some(last)) = (path.first(), path.last()) {
                out.insert(last.clone(), first.clone());
            }
        }
    }
    out
}

/// Every path starting with `crate::`, `super::` or `self::`, with groups
/// expanded: `crate::{a::B, c}` → `crate::a::B`, `crate::c`.
fn paths(code: &str) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    for start in ["crate", "super", "self"] {
        for (at, _) in code.match_indices(start) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| ident(c) || c == ':')
                || !code[at + start.len()..].trim_start().starts_with("::")
            {
                continue;
            }
            out.extend(parse_tree(&code[at..]));
        }
    }
    out
}

/// A use tree at the start of `s`: `a::b::{c, d::e as f, self}` → its
/// paths (`self` in a group stands for the group's prefix).
fn parse_tree(s: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    tree_at(s, &mut Vec::new(), &mut paths);
    paths
}

/// Parse one tree at the start of `s` into `out`; returns the bytes used.
fn tree_at(s: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let depth = prefix.len();
    let mut i = skip_space(s, 0);
    loop {
        let rest = &s[i..];
        if rest.starts_with('{') {
            i += 1;
            loop {
                i = skip_space(s, i + tree_at(&s[i..], prefix, out));
                match s[i..].chars().next() {
                    Some(',') => i += 1,
                    Some('}') => {
                        i += 1;
                        break;
                    }
                    _ => break,
                }
            }
            prefix.truncate(depth);
            return i;
        }
        let len = ident_len(rest);
        if len == 0 {
            // `*`, or nothing more (`}` after a trailing comma).
            if rest.starts_with('*') {
                out.push(prefix.clone());
                i += 1;
            }
            prefix.truncate(depth);
            return i;
        }
        let name = &rest[..len];
        if name != "self" || prefix.is_empty() {
            prefix.push(name.to_string());
        }
        i += len;
        let j = skip_space(s, i);
        if s[j..].starts_with("::") {
            i = skip_space(s, j + 2);
            continue;
        }
        out.push(prefix.clone());
        prefix.truncate(depth);
        if s[j..].starts_with("as") && s[j + 2..].starts_with(char::is_whitespace) {
            let k = skip_space(s, j + 2);
            return k + ident_len(&s[k..]);
        }
        return i;
    }
}

fn skip_space(s: &str, i: usize) -> usize {
    s.len() - s[i..].trim_start().len()
}

fn ident_len(s: &str) -> usize {
    s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len())
}

/// `mod x;` declarations (file submodules, not inline ones).
fn mod_declarations(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            let l = if l.starts_with("pub(") {
                l.split_once(") ")?.1
            } else {
                l
            };
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?.trim();
            Some(name.to_string())
        })
        .collect()
}

/// Every cycle's strongly connected component, as one concrete circle
/// `a → … → a` (Tarjan's algorithm, then a shortest way back to `a`).
fn find_cycles<'a>(edges: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> Vec<Vec<&'a str>> {
    struct Tarjan<'a, 'e> {
        edges: &'e BTreeMap<&'a str, BTreeSet<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        components: Vec<Vec<&'a str>>,
    }
    impl<'a> Tarjan<'a, '_> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            let edges = self.edges;
            for &w in edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                self.components.push(component);
            }
        }
    }
    let mut t = Tarjan {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for &v in edges.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    let mut out = Vec::new();
    for component in t.components {
        let members: BTreeSet<&str> = component.iter().copied().collect();
        let start = *members.iter().next().unwrap();
        let self_loop = edges.get(start).is_some_and(|e| e.contains(start));
        if members.len() < 2 && !self_loop {
            continue;
        }
        // Breadth-first from `start` back to it, inside the component.
        let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        'search: while let Some(v) = queue.pop_front() {
            for &w in edges.get(v).into_iter().flatten() {
                if !members.contains(w) {
                    continue;
                }
                if w == start {
                    previous.insert(start, v);
                    break 'search;
                }
                if !previous.contains_key(w) {
                    previous.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        let mut cycle = vec![start];
        let mut at = previous[start];
        while at != start {
            cycle.push(at);
            at = previous[at];
        }
        cycle.push(start);
        cycle.reverse();
        out.push(cycle);
    }
    out
}

// ---- each check can fail ----

mod proofs {
    use super::*;

    fn files(list: &[(&str, &str)]) -> Files {
        list.iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect()
    }

    #[test]
    fn a_file_split_off_for_size_is_named() {
        let v = extension_files(&files(&[
            (
                "src/supervisor/more.rs",
                "//! More of `impl Supervisor`, to stay under the limit.\n",
            ),
            ("src/supervisor/stop.rs", "//! How one agent is stopped.\n"),
        ]));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("src/supervisor/more.rs"), "{v:?}");
    }

    #[test]
    fn long_functions_are_listed_longest_first_declarations_and_strings_skipped() {
        let body = |n: usize| "    x();\n".repeat(n);
        let text = format!(
            "trait T {{ fn declared(&self); }}\n\
             fn short() {{\n{}}}\n\
             pub(crate) fn long_one() {{\n    let s = \"}} fn fake() {{\";\n{}}}\n\
             fn longer() {{\n    if a {{\n{}    }}\n}}\n",
            body(2),
            body(5),
            body(8)
        );
        let v = long_functions(&files(&[("src/a.rs", &text)]), 5);
        assert_eq!(
            v,
            vec![
                "src/a.rs:14 longer: 12 lines".to_string(),
                "src/a.rs:6 long_one: 8 lines".to_string(),
            ]
        );
        assert!(long_functions(&files(&[("src/a.rs", &text)]), 12).is_empty());
    }

    #[test]
    fn cycle_finder_on_a_hand_made_graph() {
        let edges: BTreeMap<&str, BTreeSet<&str>> = [
            ("a", vec!["b"]),
            ("b", vec!["c"]),
            ("c", vec!["a", "d"]),
            ("d", vec![]),
            ("e", vec!["e"]),
            ("f", vec!["d"]),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.into_iter().collect()))
        .collect();
        let mut cycles = find_cycles(&edges);
        cycles.sort();
        assert_eq!(cycles, vec![vec!["a", "b", "c", "a"], vec!["e", "e"]]);
        let acyclic: BTreeMap<&str, BTreeSet<&str>> = [
            ("a", ["b"].into()),
            ("b", ["c"].into()),
            ("c", BTreeSet::new()),
        ]
        .into();
        assert!(find_cycles(&acyclic).is_empty());
    }

    #[test]
    fn the_issue_circle_is_found_and_named() {
        let v = circles(&files(&[
            ("src/breaker.rs", "use crate::config::BreakerConfig;\n"),
            ("src/config.rs", "fn v() { crate::prompt::render_str(); }\n"),
            ("src/prompt.rs", "use crate::state::RunState;\n"),
            ("src/state.rs", "use crate::breaker::{self, Breaker};\n"),
            ("src/error.rs", ""),
        ]));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].starts_with("breaker → config → prompt → state → breaker"),
            "{v:?}"
        );
        assert!(
            v[0].contains("breaker uses crate::config::BreakerConfig"),
            "{v:?}"
        );
    }

    #[test]
    fn a_circle_between_top_level_modules_is_named_with_its_files() {
        let v = top_level_circles(&files(&[
            ("src/formats.rs", "mod event;\n"),
            ("src/formats/event.rs", "use crate::report::Lane;\n"),
            ("src/report.rs", "mod lanes;\n"),
            ("src/report/lanes.rs", "use crate::formats::Event;\n"),
            ("src/text.rs", ""),
        ]));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("formats → report → formats"), "{v:?}");
        assert!(
            v[0].contains("formats → report: src/formats/event.rs (crate::report::Lane)"),
            "{v:?}"
        );
        assert!(
            v[0].contains("report → formats: src/report/lanes.rs (crate::formats::Event)"),
            "{v:?}"
        );
        // Files of one module importing each other are not a circle here.
        let inside = top_level_circles(&files(&[
            ("src/report.rs", "mod lanes;\nmod html;\n"),
            ("src/report/lanes.rs", "use super::html::page;\n"),
            ("src/report/html.rs", "use crate::text::cut;\n"),
            ("src/text.rs", ""),
        ]));
        assert!(inside.is_empty(), "{inside:?}");
    }

    #[test]
    fn an_upward_import_in_the_real_tree_is_a_circle() {
        let mut tree = ralph_files();
        assert!(top_level_circles(&tree).is_empty());
        // The events.jsonl record naming a type of the morning report: the
        // formats would import a subsystem that imports them.
        tree.push((
            "src/formats/upward.rs".into(),
            "use crate::report::RunReport;\n".into(),
        ));
        let v = top_level_circles(&tree);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].contains("formats → report: src/formats/upward.rs (crate::report::RunReport)"),
            "{v:?}"
        );
    }

    #[test]
    fn submodules_are_not_a_circle_with_their_parent_but_siblings_are() {
        let parent_child = files(&[
            (
                "src/repo.rs",
                "mod commit;\npub use commit::CommitOutcome;\n",
            ),
            ("src/repo/commit.rs", "use super::{Repo, bytes_to_path};\n"),
        ]);
        assert!(circles(&parent_child).is_empty());
        let siblings = files(&[
            ("src/stream.rs", "mod event;\nmod raw;\n"),
            ("src/stream/event.rs", "use super::raw::RawLine;\n"),
            ("src/stream/raw.rs", "use super::event::*;\n"),
        ]);
        let v = circles(&siblings);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("stream::event → stream::raw → stream::event"));
        // Through a parent's re-export: x → b → a → a::x.
        let through = files(&[
            ("src/a.rs", "mod x;\npub use x::X;\n"),
            ("src/a/x.rs", "use crate::b::B;\n"),
            ("src/b.rs", "use crate::a::X;\n"),
        ]);
        assert_eq!(circles(&through).len(), 1);
    }

    #[test]
    fn paths_expand_groups_and_skip_comments_and_strings() {
        let code = strip(
            "use crate::{error::{Error, Result}, state::{self, RunState}};\n\
             // use crate::config::Config;\n\
             let s = \"crate::agent::Agent\";\n\
             let c = '\"'; let l: &'static str = x;\n\
             pub(super) fn f() -> super::super::events::Bus { crate::repo::snapshot(r) }\n\
             use crate::breaker as b;\n",
        );
        let got: Vec<String> = paths(&code).iter().map(|p| p.join("::")).collect();
        assert_eq!(
            got,
            [
                "crate::error::Error",
                "crate::error::Result",
                "crate::state",
                "crate::state::RunState",
                "crate::repo::snapshot",
                "crate::breaker",
                "super::super::events::Bus",
            ]
        );
    }

    #[test]
    fn an_item_a_folder_root_re_exports_resolves_to_its_child() {
        let tree = files(&[
            (
                "src/state.rs",
                "mod lock;\nmod run_state;\npub use lock::Lock;\npub(crate) use run_state::*;\n",
            ),
            ("src/state/run_state.rs", "pub enum Trigger {}\n"),
            ("src/state/lock.rs", "pub struct Lock;\n"),
        ]);
        let modules: BTreeSet<String> = tree.iter().filter_map(|(p, _)| module_of(p)).collect();
        let homes = item_homes(&tree, &modules);
        let r = |p: &str| {
            let segments: Vec<String> = p.split("::").map(String::from).collect();
            resolve("events", &segments, &modules, &BTreeMap::new(), &homes)
        };
        assert_eq!(
            r("crate::state::Trigger").as_deref(),
            Some("state::run_state")
        );
        assert_eq!(r("crate::state::Lock").as_deref(), Some("state::lock"));
        assert_eq!(r("crate::state::Other").as_deref(), Some("state"));
        // A child of the folder reaches the glob-re-exported core as its parent.
        let segments: Vec<String> = ["super", "Trigger"].map(String::from).into();
        let inside = resolve("state::lock", &segments, &modules, &BTreeMap::new(), &homes);
        assert_eq!(inside.as_deref(), Some("state"));
    }

    #[test]
    fn resolving_paths_to_files() {
        let modules: BTreeSet<String> = ["repo", "repo::commit", "error", "events"]
            .map(String::from)
            .into();
        let reexports = root_reexports("pub(crate) use error::{Error, Result};");
        let r = |m: &str, p: &str| {
            let segments: Vec<String> = p.split("::").map(String::from).collect();
            resolve(m, &segments, &modules, &reexports, &Homes::new())
        };
        assert_eq!(r("x", "crate::repo::Repo").as_deref(), Some("repo"));
        assert_eq!(
            r("x", "crate::repo::commit::wip").as_deref(),
            Some("repo::commit")
        );
        assert_eq!(r("repo::commit", "super::Repo").as_deref(), Some("repo"));
        assert_eq!(
            r("repo::commit", "super::super::events::Bus").as_deref(),
            Some("events")
        );
        assert_eq!(r("x", "crate::Error").as_deref(), Some("error"));
        assert_eq!(r("x", "crate::nowhere::Y"), None);
    }

    #[test]
    fn templates_may_import_only_error() {
        let ok = files(&[
            ("src/templates.rs", "use crate::error::{Error, Result};\n"),
            ("src/error.rs", ""),
        ]);
        assert!(imports_outside(&ok, "templates", &["error"]).is_empty());
        let bad = files(&[
            (
                "src/templates.rs",
                "use crate::error::Error;\nuse crate::config::Config;\n",
            ),
            ("src/config.rs", ""),
            ("src/error.rs", ""),
        ]);
        let v = imports_outside(&bad, "templates", &["error"]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("src/templates.rs imports config"), "{v:?}");
    }

    #[test]
    fn cli_may_not_import_commands() {
        let bad = files(&[
            ("src/cli.rs", "fn d() { crate::commands::run::go() }\n"),
            ("src/commands/mod.rs", "mod run;\n"),
            ("src/commands/run.rs", "use crate::cli::RunArgs;\n"),
        ]);
        let v = imports_of(&bad, &["cli"], &["commands"]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("imports commands::run"), "{v:?}");
        assert_eq!(circles(&bad).len(), 1);
    }

    #[test]
    fn pure_modules_may_not_import_the_runtime() {
        let bad = files(&[
            ("src/stream.rs", "mod raw;\n"),
            ("src/stream/raw.rs", "use crate::config::Config;\n"),
            ("src/context.rs", "use crate::stream::StreamEvent;\n"),
            ("src/plan.rs", "mod checklist;\n"),
            (
                "src/plan/checklist.rs",
                "use crate::supervisor::stop::Trigger;\n",
            ),
            ("src/config.rs", ""),
            ("src/supervisor.rs", "mod stop;\n"),
            ("src/supervisor/stop.rs", ""),
        ]);
        let v = imports_of(&bad, &PURE, &RUNTIME);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(
            v[0].starts_with("src/plan/checklist.rs imports supervisor::stop"),
            "{v:?}"
        );
        assert!(
            v[1].starts_with("src/stream/raw.rs imports config"),
            "{v:?}"
        );
    }

    #[test]
    fn pure_supervisor_files_may_not_do_io_or_read_the_clock() {
        let bad = files(&[
            (
                "src/supervisor/stop.rs",
                "use tokio::time::sleep;\npub async  fn f() { let t = Instant::now(); }\n\
                 fn g(b: &Bus) { std::fs::read(\"x\"); }\n\
                 #[cfg(test)]\nmod tests { fn t() { Instant::now(); } }\n",
            ),
            (
                "src/supervisor/driver.rs",
                "async fn run() { tokio::select! {} }\n",
            ),
            (
                "src/supervisor/verdict.rs",
                "// no tokio here, no Bus either\nfn busy(bus_name: &str) -> Busy {}\n",
            ),
        ]);
        let v = impure(&bad);
        let tokens: Vec<&str> = v.iter().map(|m| m.split('`').nth(1).unwrap()).collect();
        assert_eq!(
            tokens,
            ["tokio", "async fn", "::now(", "std::fs", "fs::", "Bus"],
            "{v:?}"
        );
        assert!(
            v.iter().all(|m| m.starts_with("src/supervisor/stop.rs")),
            "{v:?}"
        );
        assert!(v[2].contains("`::now(` 1×"), "{v:?}");
    }

    #[test]
    fn only_the_bookkeepers_write_the_run_bookkeeping() {
        let writes = "fn f(state: &mut RunState) {\n\
                      state.history.push(r);\n\
                      self.state.context_checkpoint.active = false;\n\
                      take(&mut state.error_hashes);\n\
                      let n = state.history.len();\n\
                      if state.context_history == x {}\n\
                      state.history_len = 3;\n\
                      }\n";
        let got: Vec<usize> = bookkeeping_writes(&strip(writes))
            .iter()
            .map(|(l, _)| *l)
            .collect();
        assert_eq!(got, [2, 3, 4]);
        let v = bookkeeping_writers(&files(&[
            ("src/supervisor/run.rs", writes),
            ("src/supervisor/record.rs", writes),
            ("src/commands/control.rs", writes),
        ]));
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(
            v[0].starts_with("src/commands/control.rs:2: writes"),
            "{v:?}"
        );
    }

    #[test]
    fn a_ralph_path_joined_by_hand_is_found_outside_the_layout() {
        let v = ralph_paths_by_hand(&files(&[
            (
                "src/a.rs",
                "fn f(r: &Path) -> PathBuf {\n    r.join(\".ralph/lock\")\n}\n",
            ),
            (
                "src/b.rs",
                "// r.join(\".ralph\") in a comment\nfn g() {}\n",
            ),
            (
                "src/formats/run_state.rs",
                "fn d(r: &Path) -> PathBuf { r.join(\".ralph\") }\n",
            ),
            (
                "src/c.rs",
                "fn h() {}\n#[cfg(test)]\nmod tests {\n    fn t() { r.join(\".ralph\"); }\n}\n",
            ),
        ]));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("src/a.rs:2: "), "{v:?}");
    }

    #[test]
    fn a_tree_diff_by_hand_is_found_outside_its_owner() {
        let v = tree_diffs_by_hand(&files(&[
            (
                "src/report/a.rs",
                "fn f(g: &Repository) {\n    g.diff_tree_to_tree(Some(&a), Some(&b), None);\n}\n",
            ),
            (
                "src/b.rs",
                "/// `.diff_tree_to_tree(` in a comment\nfn h() {}\n",
            ),
            (
                "src/repo/trees.rs",
                "fn diff_trees() { git.diff_tree_to_tree(old, new, Some(opts)) }\n",
            ),
            (
                "src/c.rs",
                "fn j() {}\n#[cfg(test)]\nmod tests {\n    fn t() { g.diff_tree_to_tree(a, b, None); }\n}\n",
            ),
        ]));
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].starts_with("src/report/a.rs:2: "), "{v:?}");
    }

    #[test]
    fn a_plan_read_directly_is_found_outside_its_owner() {
        let v = plans_read_directly(&files(&[
            (
                "src/commands/a.rs",
                "fn f(r: &Path) {\n    let p = Plan::load(&r.join(plan)).ok();\n}\n",
            ),
            (
                "src/report/b.rs",
                "fn g(r: &Path) {\n    crate::plan::Plan::read_text(r);\n}\n",
            ),
            ("src/c.rs", "/// `Plan::load(` in a comment\nfn h() {}\n"),
            (
                "src/project.rs",
                "fn plan_at(&self, p: &Path) { Plan::load(&self.root().join(p)) }\n",
            ),
            ("src/plan/checklist.rs", "fn i() { Plan::load(p) }\n"),
            (
                "src/d.rs",
                "fn j() {}\n#[cfg(test)]\nmod tests {\n    fn t() { Plan::load(p); }\n}\n",
            ),
        ]));
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].starts_with("src/commands/a.rs:2: "), "{v:?}");
        assert!(v[1].starts_with("src/report/b.rs:2: "), "{v:?}");
    }

    #[test]
    fn linux_only_interfaces_are_found_outside_their_home() {
        let bad = "use nix::sys::prctl;\n\
                   // a comment may say /proc and prctl\n\
                   let s = std::fs::read(\"/proc/self/stat\");\n\
                   let p = \"/process\"; nix::unistd::pipe2(f);\n\
                   #[cfg(test)]\nmod tests { fn t() { waitid(); } }\n";
        let v = linux_only(&files(&[
            ("src/agent/procs.rs", bad),
            ("crates/ralph-sim/src/input.rs", "let x = pipe2();\n"),
            ("src/platform/linux.rs", bad),
            (
                "src/agent/sandbox.rs",
                "args([\"--proc\", \"/proc\"]); prctl();\n",
            ),
        ]));
        assert_eq!(
            v,
            [
                "src/agent/procs.rs:1: `prctl`",
                "src/agent/procs.rs:3: `/proc`",
                "src/agent/procs.rs:4: `pipe2`",
                "src/agent/procs.rs:6: `waitid`",
                "crates/ralph-sim/src/input.rs:1: `pipe2`",
                "src/agent/sandbox.rs:1: `prctl`",
            ]
        );
    }

    #[test]
    fn stripping_keeps_lines_and_code() {
        let s = strip("a /* x\n y */ b // c\nr#\"q\"# 'z' &'a T \"\\\"\"\n");
        assert_eq!(s.lines().count(), 3);
        assert_eq!(squeeze(&s), "a b &'a T");
    }
}
