//! `ralph init`, `prompt`, `doctor`, `run --dry-run`, `completions` and
//! `man` on the built binary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use ralph::config::Config;
use ralph::formats::{Layout, RunState};
use sha2::{Digest, Sha256};

fn ralph(root: &Path) -> Command {
    let mut cmd = Command::cargo_bin("ralph").unwrap();
    cmd.arg("-C")
        .arg(root)
        .env("TZ", "UTC")
        .env("GIT_AUTHOR_NAME", "Test Author")
        .env("GIT_AUTHOR_EMAIL", "author@example.com")
        .env_remove("RALPH_LOG")
        .env_remove("IS_SANDBOX");
    cmd
}

struct Output {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text.trim()).unwrap()
}

/// A git repository with a plan and a ralph.toml, committed.
fn project(toml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("ralph.toml"), toml).unwrap();
    std::fs::write(
        root.join("fix_plan.md"),
        "# Demo: a tiny CSV toolkit\n\n- [x] parser\n- [ ] writer: join fields\n- [ ] tests\n",
    )
    .unwrap();
    let repo = git2::Repository::init(root).unwrap();
    let sig = git2::Signature::now("t", "t@example.com").unwrap();
    let mut index = repo.index().unwrap();
    index
        .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
        .unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    repo.commit(Some("HEAD"), &sig, &sig, "start", &tree, &[])
        .unwrap();
    dir
}

const SIM: &str = "[agent]\ncommand = \"ralph sim x.toml\"\n";

#[test]
fn init_creates_the_scaffold_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let out = run(ralph(root).arg("init"));
    assert_eq!(out.code, 0, "{}", out.stderr);
    // Whether bubblewrap works depends on the machine (docs/sandbox.md).
    insta::with_settings!({filters => vec![(r"sandbox: .*", "sandbox: [THIS MACHINE]")]}, {
        insta::assert_snapshot!("init", out.stdout);
    });
    assert_eq!(Config::load(root).unwrap(), Config::default());
    for (name, text) in ralph::prompt::EMBEDDED {
        assert_eq!(
            std::fs::read_to_string(root.join("prompts").join(name)).unwrap(),
            text
        );
    }
    assert_eq!(
        std::fs::read_to_string(root.join(".ralph/.gitignore")).unwrap(),
        ralph::formats::GITIGNORE
    );
    assert!(
        ralph::plan::Plan::load(&root.join("fix_plan.md"))
            .unwrap()
            .open_count()
            > 0
    );

    // Edited files are not overwritten, and then nothing is written at all.
    std::fs::write(root.join("ralph.toml"), "[loop]\nmax_iterations = 3\n").unwrap();
    std::fs::write(root.join("fix_plan.md"), "- [ ] mine\n").unwrap();
    std::fs::remove_file(root.join("prompts/handoff.md.j2")).unwrap();
    let out = run(ralph(root).args(["init", "--json"]));
    assert_eq!(out.code, 2);
    assert_eq!(out.stdout, "");
    assert!(
        out.stderr
            .starts_with("error: ralph init would overwrite ralph.toml; nothing was written\n"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("hint: `ralph init --force`"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read_to_string(root.join("fix_plan.md")).unwrap(),
        "- [ ] mine\n"
    );
    assert!(!root.join("prompts/handoff.md.j2").exists());

    let out = run(ralph(root).args(["init", "--force", "--json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["created"], serde_json::json!(["prompts/handoff.md.j2"]));
    assert_eq!(v["overwritten"], serde_json::json!(["ralph.toml"]));
    // --force never writes over the project's plan.
    assert_eq!(v["kept"][0]["path"], "fix_plan.md");
    assert_eq!(
        std::fs::read_to_string(root.join("fix_plan.md")).unwrap(),
        "- [ ] mine\n"
    );
    assert_eq!(v["unchanged"].as_array().unwrap().len(), 4);
    assert_eq!(Config::load(root).unwrap(), Config::default());
}

/// A team replacing another Ralph loop: its `fix_plan.md` and hand-written
/// `PROMPT.md` are adopted, with or without `--agent`, and `--force` keeps
/// them too.
#[test]
fn init_adopts_a_project_that_has_a_plan_and_a_prompt() {
    let plan = "# Our backlog\n\n- [x] auth\n- [ ] billing\n- [ ] export\n";
    let prompt = "Study fix_plan.md and do the most important item.\n";
    for agent in [None, Some("codex")] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("fix_plan.md"), plan).unwrap();
        std::fs::write(root.join("PROMPT.md"), prompt).unwrap();
        let mut args = vec!["init"];
        args.extend(agent.map(|a| ["--agent", a]).into_iter().flatten());
        let out = run(ralph(root).args(&args));
        assert_eq!(out.code, 0, "{agent:?}: {}", out.stderr);
        assert!(
            out.stdout
                .contains("kept      fix_plan.md: your plan (2 open, 1 done)"),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.contains("kept      PROMPT.md: your prompt"),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.contains("created   ralph.toml"),
            "{}",
            out.stdout
        );
        assert!(!out.stdout.contains("write the plan"), "{}", out.stdout);
        assert!(!out.stdout.contains("warning:"), "{}", out.stdout);
        let config = Config::load(root).unwrap();
        assert_eq!(config.prompt_file, Path::new(".ralph-prompt.md"));
        if agent.is_some() {
            assert_eq!(config.agent.kind, ralph::agent::AgentKind::Codex);
        }
        for force in [false, true] {
            let mut again = args.clone();
            again.push("--json");
            if force {
                again.push("--force");
            }
            let out = run(ralph(root).args(&again));
            assert_eq!(out.code, 0, "{}", out.stderr);
            let v = json(&out.stdout);
            let kept: Vec<_> = v["kept"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| &k["path"])
                .collect();
            assert_eq!(kept, ["PROMPT.md", "fix_plan.md"], "{v}");
            assert_eq!(v["overwritten"], serde_json::json!([]), "{v}");
        }
        assert_eq!(
            std::fs::read_to_string(root.join("fix_plan.md")).unwrap(),
            plan
        );
        assert_eq!(
            std::fs::read_to_string(root.join("PROMPT.md")).unwrap(),
            prompt
        );
    }
}

#[test]
fn init_agent_names_the_kinds_it_knows() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let out = run(ralph(root).args(["init", "--agent", "no-such-kind"]));
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("possible values: claude"),
        "{}",
        out.stderr
    );
    assert!(!root.join("ralph.toml").exists());
    let out = run(ralph(root).args(["init", "--agent", "claude"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        Config::load(root).unwrap().agent.kind,
        ralph::agent::AgentKind::Claude
    );
}

#[test]
fn prompt_prints_the_next_iterations_prompt() {
    let dir = project("");
    let out = run(ralph(dir.path()).arg("prompt"));
    assert_eq!(out.code, 0, "{}", out.stderr);
    insta::assert_snapshot!("prompt", out.stdout);
    // With a run in progress, the next iteration of that run.
    let layout = Layout::new(dir.path());
    layout.ensure().unwrap();
    let mut state = RunState {
        run_id: "r".into(),
        iteration: 4,
        status: "interrupted".into(),
        ..RunState::default()
    };
    state.save(&layout.state()).unwrap();
    let out = run(ralph(dir.path()).arg("prompt"));
    assert!(out.stdout.starts_with("# Iteration 5: "), "{}", out.stdout);
    let out = run(ralph(dir.path()).args(["prompt", "--fresh"]));
    assert!(out.stdout.starts_with("# Iteration 1: "), "{}", out.stdout);
}

#[test]
fn prompt_explains_a_missing_plan() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(ralph(dir.path()).arg("prompt"));
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("fix_plan.md does not exist"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("hint: create it with `ralph init`"),
        "{}",
        out.stderr
    );
}

/// Every path under `root` (directories too) with a hash of its content.
fn tree(root: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                out.insert(rel, "dir".into());
                walk(root, &path, out);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.insert(rel, format!("{:x}", Sha256::digest(&bytes)));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

#[test]
fn dry_run_changes_nothing_and_shows_prompt_and_command() {
    let dir = project(
        "[agent]\ncommand = \"ralph sim 'my scenario.toml'\"\nmodel = \"claude-sonnet-4-5\"\n",
    );
    let root = dir.path();
    let layout = Layout::new(root);
    layout.ensure().unwrap();
    let mut state = RunState {
        run_id: "r".into(),
        iteration: 2,
        status: "interrupted".into(),
        ..RunState::default()
    };
    state.save(&layout.state()).unwrap();
    std::fs::write(
        layout.events(),
        "{\"ts\":\"x\",\"event\":\"warning\",\"message\":\"m\"}\n",
    )
    .unwrap();
    let before = tree(root);
    assert!(before.contains_key(Path::new(".git/HEAD")));
    let out = run(ralph(root).args(["run", "--dry-run"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(tree(root), before, "the dry run changed the tree");
    let bin = assert_cmd::cargo::cargo_bin("ralph");
    let expected = format!(
        "# agent command: {} sim 'my scenario.toml' -p --output-format stream-json --verbose --input-format stream-json --model claude-sonnet-4-5\n",
        bin.display()
    );
    assert!(out.stdout.contains(&expected), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("# agent kind: claude (Claude Code): metered live, "),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("# iteration: 3\n"), "{}", out.stdout);
    assert!(
        out.stdout.contains("# agent env: RALPH_ITERATION=3\n"),
        "{}",
        out.stdout
    );
    // --agent replaces agent.command (for CI: the project's setup with `ralph sim`).
    let other = run(ralph(root).args(["run", "--dry-run", "--agent", "ralph sim ci.toml"]));
    assert_eq!(other.code, 0, "{}", other.stderr);
    assert!(
        other.stdout.contains(&format!(
            "# agent command: {} sim ci.toml -p ",
            bin.display()
        )),
        "{}",
        other.stdout
    );
    let other = run(ralph(root).args(["run", "--dry-run", "--agent", "'unbalanced"]));
    assert_eq!(other.code, 2);
    assert!(other.stderr.contains("--agent"), "{}", other.stderr);
    assert_eq!(tree(root), before, "the dry run changed the tree");
    // The prompt follows the header, as `ralph prompt` prints it.
    let prompt = run(ralph(root).arg("prompt")).stdout;
    assert!(out.stdout.ends_with(&prompt), "{}", out.stdout);
    assert!(prompt.starts_with("# Iteration 3: Demo: a tiny CSV toolkit\n"));
}

fn check<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report}"))
}

#[test]
fn doctor_passes_with_ralph_sim_as_the_agent() {
    let dir = project(SIM);
    let root = dir.path();
    let out = run(ralph(root).arg("doctor"));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let bin = assert_cmd::cargo::cargo_bin("ralph");
    let (bin_re, root_re) = (
        regex_escape(&bin.display().to_string()),
        regex_escape(&root.display().to_string()),
    );
    insta::with_settings!({filters => vec![
        (bin_re.as_str(), "[RALPH]"),
        (root_re.as_str(), "[ROOT]"),
        // `ralph --version`: version (commit, target), from build.rs.
        (r"ralph \d+\.\d+\.\d+(?: \([^)]*\))?", "ralph [VERSION]"),
    ]}, {
        insta::assert_snapshot!("doctor_sim", out.stdout);
    });
    let report = json(&run(ralph(root).args(["doctor", "--json"])).stdout);
    assert_eq!(report["ok"], true);
    assert_eq!(report["problems"], 0);
    assert_eq!(check(&report, "agent")["verdict"], "ok");
    assert!(
        check(&report, "agent")["detail"]
            .as_str()
            .unwrap()
            .contains(&bin.display().to_string())
    );
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$".contains(c);
            special.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

#[test]
fn doctor_reports_a_missing_agent_and_exits_1() {
    let dir = project("[agent]\ncommand = \"no-such-agent-4f6c2a9e --flag\"\n");
    let out = run(ralph(dir.path()).arg("doctor"));
    assert_eq!(out.code, 1, "{}", out.stdout);
    assert!(
        out.stdout.contains(
            "PROBLEM  agent          `no-such-agent-4f6c2a9e` (agent.command) is not on PATH\n"
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("fix: install Claude Code"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .ends_with(": fix the problems before `ralph run`\n")
    );
    let out = run(ralph(dir.path()).args(["doctor", "--json"]));
    assert_eq!(out.code, 1);
    let report = json(&out.stdout);
    assert_eq!(report["ok"], false);
    let agent = check(&report, "agent");
    assert_eq!(agent["verdict"], "problem");
    assert!(agent["fix"].as_str().unwrap().contains("agent.command"));
}

#[test]
fn doctor_reports_config_plan_and_sandbox_problems() {
    let dir = project(
        "[agent]\ncommand = \"ralph sim x.toml\"\nargs = [\"--dangerously-skip-permissions\"]\n[loop]\nmax_iteration = 3\n",
    );
    std::fs::remove_file(dir.path().join("fix_plan.md")).unwrap();
    let out = run(ralph(dir.path()).args(["doctor", "--json"]));
    assert_eq!(out.code, 1);
    let report = json(&out.stdout);
    let config = check(&report, "config");
    assert_eq!(config["verdict"], "problem");
    assert!(
        config["detail"].as_str().unwrap().contains("max_iteration"),
        "{config}"
    );
    assert_eq!(check(&report, "plan")["verdict"], "problem");
    // The config did not load, so the defaults are checked: the flag is not
    // in them. With a good config, as root, it is a problem.
    let dir = project(
        "[agent]\ncommand = \"ralph sim x.toml\"\nargs = [\"--dangerously-skip-permissions\"]\n",
    );
    let report = json(&run(ralph(dir.path()).args(["doctor", "--json"])).stdout);
    let root_user = crate::common::is_root();
    let permissions = check(&report, "permissions");
    if root_user {
        assert_eq!(permissions["verdict"], "problem");
        assert!(permissions["fix"].as_str().unwrap().contains("IS_SANDBOX"));
    } else {
        assert_eq!(permissions["verdict"], "ok");
    }
}

#[test]
fn completions_and_man_page() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(ralph(dir.path()).args(["completions", "bash"]));
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains("_ralph()"), "{}", out.stdout);
    assert!(out.stdout.contains("doctor"));
    for shell in ["zsh", "fish"] {
        let out = run(ralph(dir.path()).args(["completions", shell]));
        assert_eq!(out.code, 0);
        assert!(out.stdout.contains("context"), "{shell}");
    }
    let out = run(ralph(dir.path()).args(["completions", "tcsh"]));
    assert_eq!(out.code, 2);
    let out = run(ralph(dir.path()).arg("man"));
    assert_eq!(out.code, 0);
    assert!(out.stdout.contains(".TH ralph"), "{}", out.stdout);
    assert!(out.stdout.contains("doctor"));
}

/// A fake `claude` on PATH whose `--help` says `help`.
fn fake_claude(help: &str) -> (tempfile::TempDir, String) {
    use std::os::unix::fs::PermissionsExt;
    let bin = tempfile::tempdir().unwrap();
    let script = bin.path().join("claude");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$1\" in\n  --version) echo '2.1.197 (Claude Code)' ;;\n  --help) echo '{help}' ;;\n  *) exit 1 ;;\nesac\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (bin, path)
}

/// A `codex` on PATH whose `app-server --help` exits with `status`.
fn fake_codex(status: u8) -> (tempfile::TempDir, String) {
    use std::os::unix::fs::PermissionsExt;
    let bin = tempfile::tempdir().unwrap();
    let script = bin.path().join("codex");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$1 $2\" in\n  '--version ') echo 'codex-cli 0.169.0' ;;\n  'app-server --help') echo 'Usage: codex app-server'; exit {status} ;;\n  *) exit 1 ;;\nesac\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (bin, path)
}

/// For Codex, doctor checks `codex app-server`, not Claude Code's flags,
/// and what Codex will allow: its default read-only sandbox fails every
/// command, so only a setup that lets it write is ready.
#[test]
fn doctor_checks_codex_app_server_and_its_sandbox() {
    let codex_home = tempfile::tempdir().unwrap();
    let dir = project("[agent]\nkind = \"codex\"\n");
    let (_bin, path) = fake_codex(0);
    let doctor = |dir: &Path| {
        json(
            &run(ralph(dir)
                .env("PATH", &path)
                .env("CODEX_HOME", codex_home.path())
                .args(["doctor", "--json"]))
            .stdout,
        )
    };
    let report = doctor(dir.path());
    let kind = check(&report, "agent kind")["detail"].as_str().unwrap();
    assert!(kind.starts_with("codex (Codex): metered live"), "{kind}");
    assert_eq!(
        check(&report, "agent version")["detail"],
        "codex-cli 0.169.0"
    );
    assert_eq!(check(&report, "app-server")["verdict"], "ok");
    // No sandbox_mode anywhere: Codex's own default, read-only.
    let sandbox = check(&report, "codex sandbox");
    assert_eq!(sandbox["verdict"], "problem", "{report}");
    assert!(sandbox["detail"].as_str().unwrap().contains("read-only"));
    assert!(sandbox["fix"].as_str().unwrap().contains("workspace-write"));
    assert_eq!(check(&report, "codex approvals")["verdict"], "warning");
    assert_eq!(report["ok"], false, "{report}");
    // Codex's own config.toml says read-only: the same.
    std::fs::write(
        codex_home.path().join("config.toml"),
        "sandbox_mode = \"read-only\"\napproval_policy = \"never\"\n",
    )
    .unwrap();
    let report = doctor(dir.path());
    assert_eq!(check(&report, "codex sandbox")["verdict"], "problem");
    assert!(
        check(&report, "codex sandbox")["detail"]
            .as_str()
            .unwrap()
            .contains("config.toml"),
        "{report}"
    );

    // What `ralph init --agent codex` writes is ready (its -c wins over the file).
    let fresh = tempfile::tempdir().unwrap();
    let out = run(ralph(fresh.path()).args(["init", "--agent", "codex"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let report = doctor(fresh.path());
    let sandbox = check(&report, "codex sandbox");
    assert_eq!(sandbox["verdict"], "ok", "{report}");
    assert!(
        sandbox["detail"]
            .as_str()
            .unwrap()
            .contains("the agent's own `git commit` fails"),
        "{report}"
    );
    assert_eq!(check(&report, "codex approvals")["verdict"], "ok");
    assert!(
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["name"] != "git")
            .all(|c| c["verdict"] != "problem"),
        "{report}"
    );

    let (_bin, path) = fake_codex(2);
    let out = run(ralph(dir.path()).env("PATH", &path).arg("doctor"));
    assert_eq!(out.code, 1);
    assert!(
        out.stdout
            .contains("PROBLEM  app-server     `codex app-server --help`"),
        "{}",
        out.stdout
    );
}

/// A program `name` on PATH that runs the shell `body` with its arguments.
fn fake_cli(name: &str, body: &str) -> (tempfile::TempDir, String) {
    use std::os::unix::fs::PermissionsExt;
    let bin = tempfile::tempdir().unwrap();
    let script = bin.path().join(name);
    std::fs::write(&script, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (bin, path)
}

/// Gemini CLI and opencode are judged by their own CLIs' flags (Gemini
/// CLI 0.61.0's `--help`, opencode 1.18's `run --help`), not Claude Code's.
#[test]
fn doctor_judges_gemini_and_opencode_by_their_own_cli() {
    let gemini = fake_cli(
        "gemini",
        r#"case "$1" in
  --version) echo '0.61.0' ;;
  --help) echo '  -o, --output-format  The format of the CLI output. [string] [choices: "text", "json", "stream-json"]'
          echo '  -y, --yolo  Automatically accept all actions' ;;
  *) exit 1 ;;
esac"#,
    );
    let opencode = fake_cli(
        "opencode",
        r#"case "$1 $2" in
  '--version ') echo '1.18.33' ;;
  'run --help') echo '      --format   format: default (formatted) or json (raw JSON events)  [string] [choices: "default", "json"]' ;;
  *) exit 1 ;;
esac"#,
    );
    for (kind, fake, args, name) in [
        ("gemini", &gemini, "[\"--yolo\"]", "stream-json"),
        ("opencode", &opencode, "[]", "json output"),
    ] {
        let dir = project(&format!("[agent]\nkind = \"{kind}\"\nargs = {args}\n"));
        let out = run(ralph(dir.path())
            .env("PATH", &fake.1)
            .args(["doctor", "--json"]));
        let report = json(&out.stdout);
        assert_eq!(report["ok"], true, "{kind}: {report}");
        assert_eq!(out.code, 0, "{kind}");
        assert_eq!(check(&report, name)["verdict"], "ok", "{kind}");
        let text = report.to_string();
        assert!(!text.contains("Claude Code CLI"), "{kind}: {text}");
    }
    // Gemini CLI without --yolo cannot write: said, not a failure.
    let dir = project("[agent]\nkind = \"gemini\"\n");
    let report = json(
        &run(ralph(dir.path())
            .env("PATH", &gemini.1)
            .args(["doctor", "--json"]))
        .stdout,
    );
    assert_eq!(check(&report, "permissions")["verdict"], "warning");
    assert!(
        check(&report, "permissions")["fix"]
            .as_str()
            .unwrap()
            .contains("--yolo")
    );
    // A CLI without the flag is still refused, naming its own fix.
    let old = fake_cli(
        "gemini",
        "case \"$1\" in --version) echo 0.1 ;; --help) echo '-o text|json' ;; esac",
    );
    let out = run(ralph(dir.path()).env("PATH", &old.1).arg("doctor"));
    assert_eq!(out.code, 1);
    assert!(
        out.stdout
            .contains("`gemini --help` does not mention --output-format stream-json"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("update Gemini CLI"), "{}", out.stdout);
}

#[test]
fn doctor_checks_the_real_agents_version_and_stream_json() {
    let dir = project("");
    let (_bin, path) =
        fake_claude("--output-format <format> text, json, stream-json; --input-format <format>");
    let report = json(
        &run(ralph(dir.path())
            .env("PATH", &path)
            .args(["doctor", "--json"]))
        .stdout,
    );
    assert_eq!(
        check(&report, "agent version")["detail"],
        "2.1.197 (Claude Code)"
    );
    assert_eq!(check(&report, "stream-json")["verdict"], "ok");
    assert_eq!(report["ok"], true, "{report}");

    let (_bin, path) = fake_claude("--output-format <format> text, json");
    let out = run(ralph(dir.path()).env("PATH", &path).arg("doctor"));
    assert_eq!(out.code, 1);
    assert!(
        out.stdout.contains(
            "PROBLEM  stream-json    `claude --help` does not mention --input-format stream-json"
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("fix: update Claude Code"),
        "{}",
        out.stdout
    );
}

/// examples/ci: the loop of the CI workflow, with the project's own config
/// and hooks, `ralph sim` as the agent, completes through a checkpoint.
#[test]
fn ci_example_loop_completes_through_a_checkpoint() {
    let dir = project(
        "[hooks]\non_checkpoint = [\"test \\\"$RALPH_LEVEL\\\" = L2\"]\non_exit = [\"test \\\"$RALPH_OUTCOME\\\" = completed\"]\n",
    );
    let root = dir.path();
    let ci = root.join(".github/ralph");
    std::fs::create_dir_all(&ci).unwrap();
    for name in ["plan.md", "scenario.toml"] {
        let example = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/ci")
            .join(name);
        std::fs::copy(example, ci.join(name)).unwrap();
    }
    // The plan on the command line is relative to the current directory.
    let out = run(ralph(root).current_dir(root).args([
        "run",
        ".github/ralph/plan.md",
        "--fresh",
        "--json",
        "--max-iterations",
        "4",
        "--agent",
        "ralph sim .github/ralph/scenario.toml",
    ]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let events: Vec<serde_json::Value> = out.stdout.lines().map(json).collect();
    let any = |f: &dyn Fn(&serde_json::Value) -> bool| events.iter().any(f);
    assert!(any(
        &|e| e["event"] == "checkpoint" && !e["handoff"].is_null()
    ));
    assert!(events.iter().filter(|e| e["event"] == "hook").count() >= 2);
    assert!(
        !any(&|e| e["event"] == "hook" && e["ok"] != true),
        "{}",
        out.stdout
    );
    assert!(any(&|e| e["event"] == "iteration_started"
        && e["iteration"] == 2
        && !e["resume_from"].is_null()));
    let status = json(&run(ralph(root).args(["status", "--json"])).stdout);
    assert_eq!(status["status"], "completed");
}

/// Issue 22: headless (`-p`) the agent cannot ask, so "permissions ok"
/// without anything that allows a tool was wrong: a warning with a fix,
/// until `agent.args` or the project's Claude Code settings allow tools.
#[test]
fn doctor_warns_that_a_headless_agent_cannot_ask_for_permissions() {
    let dir = project("[agent]\ncommand = \"claude-like-agent\"\n");
    let permissions = |dir: &Path| {
        check(
            &json(&run(ralph(dir).args(["doctor", "--json"])).stdout),
            "permissions",
        )
        .clone()
    };
    let p = permissions(dir.path());
    assert_eq!(p["verdict"], "warning", "{p}");
    assert!(p["detail"].as_str().unwrap().contains("cannot ask"), "{p}");
    assert!(
        p["fix"].as_str().unwrap().contains("permissions.allow"),
        "{p}"
    );

    std::fs::create_dir(dir.path().join(".claude")).unwrap();
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        r#"{"permissions": {"allow": ["Edit", "Bash(cargo test:*)"]}}"#,
    )
    .unwrap();
    let p = permissions(dir.path());
    assert_eq!(p["verdict"], "ok", "{p}");
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains(".claude/settings.json"),
        "{p}"
    );

    let dir = project(
        "[agent]\ncommand = \"claude-like-agent\"\nargs = [\"--permission-mode\", \"acceptEdits\"]\n",
    );
    assert_eq!(permissions(dir.path())["verdict"], "ok");
}
