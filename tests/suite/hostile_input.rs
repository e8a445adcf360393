//! Hostile input and security (issue 6): every config key with a wrong
//! type or value, broken templates, unreadable plans and odd file names
//! end in exit 2 (or a logged skip) with a message that names what is
//! wrong; hooks see untrusted text only through their environment; no
//! secret from the environment reaches a file ralph writes or commits;
//! `.ralph/` is user-only whatever the umask; ignored files stay out of
//! the WIP commit.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::{BIN, Project, QUICK_L2, files_under, toml_string};

const PLAN: &str = "# Hostile\n\n- [ ] work\n";
const LIMIT: Duration = Duration::from_secs(60);

/// `ralph run` on a project whose ralph.toml is `toml`: exit code, stderr.
fn run_with_config(toml: &str) -> (Option<i32>, String, bool) {
    let p = Project::new(PLAN, QUICK_L2, "");
    p.write("ralph.toml", toml);
    let out = p.ralph().arg("run").output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        p.path(".ralph").exists(),
    )
}

#[test]
fn config_errors_name_the_key_and_the_line() {
    // (ralph.toml, key the message names, line)
    let table: &[(&str, &str, usize)] = &[
        ("plan = 3\n", "`plan`", 1),
        ("plan = \"\"\n", "`plan`", 1),
        ("prompt_file = []\n", "`prompt_file`", 1),
        ("prompt_file = \".ralph/prompt.md\"\n", "`prompt_file`", 1),
        (
            "plan = \"p.md\"\nprompt_file = \"p.md\"\n",
            "`prompt_file`",
            2,
        ),
        ("prompt_file = \"ralph.toml\"\n", "`prompt_file`", 1),
        ("[agent]\ncommand = 5\n", "`agent.command`", 2),
        ("[agent]\ncommand = \"\"\n", "`agent.command`", 2),
        ("[agent]\ncommand = \"sim 'open\"\n", "`agent.command`", 2),
        (
            "[agent]\ncommand = \"cla\\u0000ude\"\n",
            "`agent.command`",
            2,
        ),
        ("[agent]\nargs = \"--verbose\"\n", "`agent.args`", 2),
        ("[agent]\nargs = [1]\n", "`agent.args`", 2),
        ("[agent]\nargs = [\"a\\u0000\"]\n", "`agent.args`", 2),
        ("[agent]\nmodel = 4\n", "`agent.model`", 2),
        (
            "[agent]\ncontext_window = -1\n",
            "`agent.context_window`",
            2,
        ),
        (
            "[agent]\ncontext_window = 1000\n",
            "`agent.context_window`",
            2,
        ),
        (
            "[agent]\nreserve_tokens = \"lots\"\n",
            "`agent.reserve_tokens`",
            2,
        ),
        (
            "[agent]\nreserve_tokens = 1e3\n",
            "`agent.reserve_tokens`",
            2,
        ),
        ("[agent]\nenv = \"A=1\"\n", "`agent.env`", 2),
        ("[agent]\nenv = { A = 1 }\n", "`agent.env`", 2),
        ("[agent]\nenv = { \"A=B\" = \"1\" }\n", "`agent.env`", 2),
        ("[agent]\nenv = { A = \"x\\u0000\" }\n", "`agent.env`", 2),
        ("[agent.env]\nA = true\n", "`agent.env.A`", 2),
        ("[loop]\nmax_iterations = 0\n", "`loop.max_iterations`", 2),
        ("[loop]\nmax_iterations = -3\n", "`loop.max_iterations`", 2),
        ("[loop]\nmax_iterations = 1.5\n", "`loop.max_iterations`", 2),
        (
            "[loop]\nmax_iterations = 99999999999\n",
            "`loop.max_iterations`",
            2,
        ),
        (
            "[loop]\ncompletion_promise = \" \"\n",
            "`loop.completion_promise`",
            2,
        ),
        (
            "[loop]\ncompletion_promise = 1\n",
            "`loop.completion_promise`",
            2,
        ),
        (
            "[loop]\nrequire_plan_complete = \"yes\"\n",
            "`loop.require_plan_complete`",
            2,
        ),
        (
            "[loop]\niteration_timeout = \"0s\"\n",
            "`loop.iteration_timeout`",
            2,
        ),
        (
            "[loop]\niteration_timeout = 60\n",
            "`loop.iteration_timeout`",
            2,
        ),
        (
            "[loop]\nidle_timeout = \"soon\"\n",
            "`loop.idle_timeout`",
            2,
        ),
        ("[loop]\nmax_duration = \"-1h\"\n", "`loop.max_duration`", 2),
        ("[loop]\nmax_duration = \"0s\"\n", "`loop.max_duration`", 2),
        ("[loop]\nmax_cost_usd = -1.0\n", "`loop.max_cost_usd`", 2),
        ("[loop]\nmax_cost_usd = nan\n", "`loop.max_cost_usd`", 2),
        ("[loop]\nmax_cost_usd = inf\n", "`loop.max_cost_usd`", 2),
        ("[loop]\nmax_cost_usd = \"5\"\n", "`loop.max_cost_usd`", 2),
        ("[context]\nwarn_percent = 0\n", "`context.warn_percent`", 2),
        (
            "[context]\nwarn_percent = \"70%\"\n",
            "`context.warn_percent`",
            2,
        ),
        (
            "[context]\ncheckpoint_percent = 60\n",
            "`context.checkpoint_percent`",
            2,
        ),
        (
            "[context]\nemergency_percent = 80\n",
            "`context.emergency_percent`",
            2,
        ),
        (
            "[context]\nemergency_percent = 101\n",
            "`context.emergency_percent`",
            2,
        ),
        ("[context]\ngrace = \"1 fortnight\"\n", "`context.grace`", 2),
        (
            "[context]\nagent_handoff = 1\n",
            "`context.agent_handoff`",
            2,
        ),
        ("[breaker]\nno_progress = 0\n", "`breaker.no_progress`", 2),
        ("[breaker]\nsame_error = -1\n", "`breaker.same_error`", 2),
        (
            "[breaker]\nconsecutive_failures = 0\n",
            "`breaker.consecutive_failures`",
            2,
        ),
        (
            "[breaker]\ncooldown = \"forever\"\n",
            "`breaker.cooldown`",
            2,
        ),
        ("[git]\nwip_commit = \"true\"\n", "`git.wip_commit`", 2),
        ("[git]\ncommit_message = 3\n", "`git.commit_message`", 2),
        (
            "[git]\ncommit_message = \"{{ oops\"\n",
            "`git.commit_message`",
            2,
        ),
        (
            "[git]\ncommit_message = \"{{ nope }}\"\n",
            "`git.commit_message`",
            2,
        ),
        (
            "[git]\ncommit_message = \"{{ iteration | nofilter }}\"\n",
            "`git.commit_message`",
            2,
        ),
        ("[rate_limit]\nwait = 1\n", "`rate_limit.wait`", 2),
        (
            "[rate_limit]\nmax_wait = \"x\"\n",
            "`rate_limit.max_wait`",
            2,
        ),
        (
            "[hooks]\non_checkpoint = \"echo hi\"\n",
            "`hooks.on_checkpoint`",
            2,
        ),
        (
            "[hooks]\non_exit = [\n  \"echo ok\",\n  1,\n]\n",
            "`hooks.on_exit`",
            4,
        ),
        (
            "[hooks]\non_iteration_end = [\"a\\u0000\"]\n",
            "`hooks.on_iteration_end`",
            2,
        ),
        ("[hooks]\ntimeout = \"0s\"\n", "`hooks.timeout`", 2),
        // Unknown keys and tables.
        ("plans = \"x.md\"\n", "`plans`", 1),
        ("[loop]\nmax_iteration = 3\n", "`loop.max_iteration`", 2),
        ("[agnet]\ncommand = \"claude\"\n", "`agnet`", 1),
        ("[agent]\nenvironment = {}\n", "`agent.environment`", 2),
        // Not TOML.
        ("[loop\nmax_iterations = 3\n", "", 1),
        ("[loop]\nmax_iterations = \n", "", 2),
        (
            "\u{feff}[loop]\nmax_iterations = 3\nmax_iterations = 4\n",
            "`loop.max_iterations`",
            3,
        ),
    ];
    let mut failures = Vec::new();
    for &(toml, key, line) in table {
        let (code, err, wrote) = run_with_config(toml);
        let first = err.lines().next().unwrap_or("");
        let ok = code == Some(2)
            && err.starts_with("error: ")
            && first.contains(key)
            && (line == 0 || first.contains(&format!("ralph.toml:{line}")))
            && !wrote;
        if !ok {
            failures.push(format!(
                "{toml:?}: exit {code:?}, wrote .ralph: {wrote}\n  {err}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!(
            "figure: config table: {} bad ralph.toml files, all exit 2 naming key and line\n",
            table.len()
        )
        .as_bytes(),
    );
}

#[test]
fn broken_templates_are_bad_input_naming_file_line_and_expression() {
    // (template, content, what the message says)
    let table = [
        (
            "PROMPT.md.j2",
            "Hello\n{% if %}\n",
            "prompts/PROMPT.md.j2:2: syntax error",
        ),
        (
            "PROMPT.md.j2",
            "Hello {{ nope }}\n",
            "prompts/PROMPT.md.j2:1: undefined value in `nope`",
        ),
        (
            "PROMPT.md.j2",
            "{{ plan.nope.deeper }}\n",
            "prompts/PROMPT.md.j2:1: undefined value in `.nope.deeper`",
        ),
        (
            "PROMPT.md.j2",
            "{{ iteration | shout }}\n",
            "prompts/PROMPT.md.j2:1: unknown filter",
        ),
        (
            "PROMPT.md.j2",
            "{% for x in %}{% endfor %}\n",
            "prompts/PROMPT.md.j2:1: syntax error",
        ),
        (
            "handoff.md.j2",
            "{{ title\n",
            "prompts/handoff.md.j2:1: syntax error",
        ),
        (
            "checkpoint-request.md.j2",
            "{% endif %}\n",
            "prompts/checkpoint-request.md.j2:1: syntax error",
        ),
    ];
    for (name, content, says) in table {
        let p = Project::new(PLAN, QUICK_L2, "");
        p.write(&format!("prompts/{name}"), content);
        let out = p.ralph().arg("run").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name} {content:?}: {err}");
        assert!(
            err.starts_with(&format!("error: template {says}")),
            "{content:?}: {err}"
        );
        assert!(err.contains("hint: fix the template, or delete"), "{err}");
        assert!(
            !p.path(".ralph").exists(),
            "nothing written for {content:?}"
        );
    }
}

/// An undefined variable in the handoff template shows only at a
/// checkpoint: a logged skip, the WIP commit is still made.
#[test]
fn undefined_variable_in_the_handoff_is_a_logged_skip() {
    let p = Project::new(PLAN, QUICK_L2, "");
    p.write(
        "prompts/handoff.md.j2",
        "# {{ title }}\n{{ no_such_fact }}\n",
    );
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let warnings: Vec<String> = run
        .of("warning")
        .iter()
        .map(|w| w["message"].as_str().unwrap().to_string())
        .collect();
    assert!(
        warnings.iter().any(|w| w
            == "cannot render the handoff: template prompts/handoff.md.j2:2: undefined value in `no_such_fact`"),
        "{warnings:?}"
    );
    let cp = run.of("checkpoint")[0];
    assert_eq!(cp["handoff"], serde_json::Value::Null);
    assert_eq!(cp["commit"].as_str().map(str::len), Some(40));
    assert!(p.head_files().contains(&"work.txt".to_string()));
}

/// What a table row does to a fresh project before the run.
type Setup = Box<dyn Fn(&Project)>;

#[test]
fn plans_that_cannot_be_read_are_refused_by_name() {
    let huge = format!("- [ ] item\n{}", "x".repeat(5 << 20));
    let table: [(&str, Setup, &str); 5] = [
        (
            "missing",
            Box::new(|p: &Project| std::fs::remove_file(p.path("fix_plan.md")).unwrap()),
            "fix_plan.md does not exist",
        ),
        (
            "a directory",
            Box::new(|p: &Project| {
                std::fs::remove_file(p.path("fix_plan.md")).unwrap();
                std::fs::create_dir(p.path("fix_plan.md")).unwrap();
            }),
            "fix_plan.md is not a file",
        ),
        (
            "binary",
            Box::new(|p: &Project| {
                std::fs::write(p.path("fix_plan.md"), b"- [ ] a\0\x01\x02").unwrap()
            }),
            "looks binary",
        ),
        (
            "not UTF-8",
            Box::new(|p: &Project| {
                std::fs::write(p.path("fix_plan.md"), b"- [ ] caf\xe9\n").unwrap()
            }),
            "is not UTF-8 text (bad byte at offset 9)",
        ),
        (
            "huge",
            Box::new(move |p: &Project| p.write("fix_plan.md", &huge)),
            "plans over 4194304 bytes are refused",
        ),
    ];
    for (what, setup, says) in table {
        let p = Project::new(PLAN, QUICK_L2, "");
        setup(&p);
        let out = p.ralph().arg("run").output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(says),
            "{what}: {err}"
        );
        assert!(
            err.contains("fix_plan.md"),
            "{what}: the message names the plan: {err}"
        );
        assert!(!p.path(".ralph").exists(), "{what}: nothing written");
    }
}

/// A plan deleted or emptied during the run (a user's `> fix_plan.md`, an
/// editor's failed save, an agent's `rm`) ends the run before the next
/// session, naming the plan: no session is paid for an empty plan (before:
/// three more sessions, until the breaker found no progress).
#[test]
fn a_plan_deleted_or_emptied_mid_run_ends_it_before_another_session() {
    for (what, command, says) in [
        ("deleted", "rm fix_plan.md", "fix_plan.md does not exist"),
        ("emptied", ": > fix_plan.md", "fix_plan.md is empty"),
        (
            "replaced by blanks",
            "printf '\\n  \\n' > plan.tmp && mv plan.tmp fix_plan.md",
            "fix_plan.md is empty",
        ),
    ] {
        // Iteration 1 does some work, then the plan goes; later ones
        // would work and check nothing off.
        let scenario = format!(
            "[[iteration]]\n[[iteration.step]]\ncontext = 20000\npath = \"work.txt\"\ncontent = \"work\\n\"\n[[iteration.step]]\ncommand = {}\n\n[[iteration]]\n[[iteration.step]]\ncontext = 20000\ntext = \"Nothing to do.\"\n",
            toml_string(command)
        );
        let p = Project::new("# Plan\n\n- [ ] a\n- [ ] b\n", &scenario, "");
        let run = p.run(&[], LIMIT);
        assert_eq!(
            run.of("iteration_started").len(),
            1,
            "{what}: one session paid\n{}",
            run.describe()
        );
        assert_eq!(run.code, Some(2), "{what}: {}", run.describe());
        let reason = run.ended()["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(says) && reason.contains("since"),
            "{what}: {reason}"
        );
        assert!(
            run.stderr.contains("then `ralph run`"),
            "{what}: {}",
            run.stderr
        );
        assert_eq!(p.read("work.txt"), "work\n", "{what}: the work is kept");
    }
}

#[test]
fn empty_plan_runs_and_the_promise_completes_it() {
    let scenario = "[[step]]\ncontext = 20000\ntext = \"Nothing planned.\"\n[[step]]\nresult = \"<promise>COMPLETE</promise>\"\n";
    let p = Project::new("", scenario, "");
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(
        p.read("PROMPT.md")
            .contains("(The plan has no checkbox items yet.)")
    );
}

#[test]
fn odd_file_names_are_committed_and_reported_intact() {
    // Spaces, a newline, a tab, quotes, unicode, a leading dash, a glob.
    let names = [
        "with space.txt",
        "new\nline.txt",
        "tab\there.txt",
        "quote\"d.txt",
        "ünïcödé ✓.txt",
        "-dash.txt",
        "star*.txt",
        "dir with space/inner file.txt",
    ];
    let mut command = String::from("mkdir -p 'dir with space'");
    for n in names {
        // A real newline inside the quotes: the TOML string escapes it.
        command.push_str(&format!("; printf x > '{n}'"));
    }
    let scenario = format!(
        "[[step]]\ncontext = 60000\ntext = \"Odd names.\"\ncommand = {}\n[[step]]\ncontext = 146000\ntext = \"Full.\"\n",
        toml_string(&command)
    );
    let p = Project::new(PLAN, &scenario, "");
    let run = p.run(&["--max-iterations", "1"], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    for n in names {
        assert!(p.path(n).exists(), "the tool made {n:?}");
    }
    let cp = run.of("checkpoint")[0];
    assert_eq!(
        cp["commit"].as_str().map(str::len),
        Some(40),
        "{}",
        run.describe()
    );
    let files = p.head_files();
    for n in names {
        assert!(files.contains(&n.to_string()), "{n:?} not in {files:?}");
    }
    // The handoff lists each on one line (a newline in a name is escaped).
    let doc = std::fs::read_to_string(p.handoffs().pop().unwrap()).unwrap();
    assert!(
        doc.contains("with space.txt") && doc.contains("ünïcödé ✓.txt"),
        "{doc}"
    );
    assert!(doc.contains("new\\nline.txt"), "{doc}");
    assert!(!doc.contains("new\nline.txt"), "{doc}");
    // State and log still parse.
    p.state();
    for line in p.read(".ralph/events.jsonl").lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap();
    }
}

// ---------------------------------------------------------------- security

const SECRET: &str = "sk-ant-secret-0123456789abcdef";
const AGENT_SECRET: &str = "ghp_agentenvsecret987654321";

#[test]
fn secrets_from_the_environment_are_never_written_or_committed() {
    // An agent that repeats the secrets (as a careless one might) in its
    // text, in a tool's output and in its notes, and a failing hook that
    // prints its environment.
    let scenario = format!(
        r###"
handoff_notes = "## Done\n- used key {SECRET}\n"
[[iteration]]
[[iteration.step]]
context = 60000
text = "The key is {SECRET} and the token {AGENT_SECRET}."
command = "echo $ANTHROPIC_API_KEY $GITHUB_TOKEN; echo work >> work.txt"
[[iteration.step]]
context = 146000
text = "Still using {SECRET}."
[[iteration]]
[[iteration.step]]
context = 30000
text = "Resumed with {SECRET}."
[[iteration.step]]
result = "Failed: {SECRET}"
exit_code = 1
"###
    );
    let p = Project::new(
        PLAN,
        &scenario,
        &format!(
            "env = {{ GITHUB_TOKEN = \"{AGENT_SECRET}\" }}\n[hooks]\non_checkpoint = [\"env | grep -i secret >&2; exit 1\"]\non_exit = [\"echo $ANTHROPIC_API_KEY >&2; exit 1\"]\n[loop]\nmax_iterations = 2\n"
        ),
    );
    // `env` above continues the [agent] table of the harness's config.
    let config = p.read("ralph.toml");
    assert!(config.starts_with("[agent]\ncommand"), "{config}");
    let out = p
        .ralph()
        .args(["run", "--json"])
        .env("ANTHROPIC_API_KEY", SECRET)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains(SECRET) && !stdout.contains(AGENT_SECRET),
        "{stdout}"
    );
    assert!(stdout.contains("[redacted ANTHROPIC_API_KEY]"), "{stdout}");

    // No file under .ralph/ holds a secret: not what ralph wrote, and not
    // the agent's own transcript and notes either (issue 13: redacted as
    // they stream, user-only, never committed).
    let mut files = Vec::new();
    files_under(&p.path(".ralph"), &mut files);
    files.push(p.path("PROMPT.md"));
    let mut transcripts = 0;
    for f in &files {
        let text = String::from_utf8_lossy(&std::fs::read(f).unwrap()).into_owned();
        let name = f.strip_prefix(p.root()).unwrap().display().to_string();
        if name.starts_with(".ralph/runs/") && name.ends_with(".jsonl") {
            transcripts += usize::from(text.contains("[redacted ANTHROPIC_API_KEY]"));
        }
        assert!(!text.contains(SECRET), "{name} holds the secret");
        assert!(
            !text.contains(AGENT_SECRET),
            "{name} holds agent.env's secret"
        );
    }
    assert!(
        transcripts > 0,
        "the secret the agent printed is redacted in its transcript"
    );

    // Nor does any WIP commit: messages and every blob it added.
    let repo = p.repo();
    let mut walk = repo.revwalk().unwrap();
    walk.push_head().unwrap();
    let mut wip = 0;
    for id in walk {
        let commit = repo.find_commit(id.unwrap()).unwrap();
        if commit.parent_count() == 0 {
            continue; // the user's own commit (ralph.toml names agent.env)
        }
        wip += 1;
        assert!(!commit.message().unwrap().contains(SECRET));
        let parent = commit.parent(0).unwrap().tree().unwrap();
        let diff = repo
            .diff_tree_to_tree(Some(&parent), Some(&commit.tree().unwrap()), None)
            .unwrap();
        for d in diff.deltas() {
            let blob = repo.find_blob(d.new_file().id()).unwrap();
            let text = String::from_utf8_lossy(blob.content());
            let path = d.new_file().path().unwrap().display().to_string();
            assert!(
                !text.contains(SECRET),
                "{path} in a WIP commit holds the secret"
            );
            assert!(
                !text.contains(AGENT_SECRET),
                "{path} in a WIP commit holds a secret"
            );
        }
    }
    assert!(wip >= 1, "a WIP commit was made");
}

#[test]
fn everything_ralph_creates_is_user_only_whatever_the_umask() {
    let scenario = r#"
[[step]]
context = 146000
text = "Writing."
path = "work.txt"
content = "x\n"
[[step]]
stderr = "a line on stderr"
"#;
    let p = Project::new(PLAN, scenario, "[loop]\nmax_iterations = 1\n");
    let out = std::process::Command::new("sh")
        .args(["-c", "umask 000; exec \"$0\" run --json"])
        .arg(BIN)
        .current_dir(p.root())
        .env("RALPH_LOG", "off")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let control = p
        .ralph()
        .args(["checkpoint", "--reason", "perms"])
        .output()
        .unwrap();
    assert_eq!(control.status.code(), Some(0));
    let mut seen = Vec::new();
    let mut stack = vec![p.path(".ralph")];
    while let Some(dir) = stack.pop() {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{} is {mode:o}", dir.display());
        seen.push(dir.clone());
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(p.root()).unwrap().display().to_string();
            // The notes are the agent's file (in ralph's 0700 directory).
            if rel.starts_with(".ralph/notes/") {
                continue;
            }
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{rel} is {mode:o}");
            seen.push(path);
        }
    }
    let names: Vec<String> = seen
        .iter()
        .map(|s| s.strip_prefix(p.root()).unwrap().display().to_string())
        .collect();
    for expected in [
        ".ralph/state.json",
        ".ralph/events.jsonl",
        ".ralph/lock",
        ".ralph/.gitignore",
        ".ralph/notes",
        ".ralph/handoffs",
        ".ralph/runs",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not in {names:?}"
        );
    }
    for suffix in [".jsonl", ".stderr"] {
        assert!(
            names
                .iter()
                .any(|n| n.starts_with(".ralph/runs/") && n.ends_with(suffix)),
            "no transcript {suffix}: {names:?}"
        );
    }
}

#[test]
fn hooks_get_untrusted_text_only_through_their_environment() {
    let plan = "# $(touch pwned-title)\n\n- [ ] `touch pwned-item`; $(touch pwned-item2) \"'\n";
    let scenario = r#"
[[step]]
context = 146000
text = "$(touch pwned-text) `touch pwned-text2` ; touch pwned-text3"
command = "echo '$(touch pwned-tool)' > work.txt"
"#;
    let hooks = r#"[git]
commit_message = "ralph: {{ item }} {{ title }}"
[hooks]
on_checkpoint = ["printf '%s|%s|%s|%s|%s|%s|%s\n' \"$RALPH_ITERATION\" \"$RALPH_RUN_ID\" \"$RALPH_LEVEL\" \"$RALPH_PERCENT\" \"$RALPH_TRIGGER\" \"$RALPH_HANDOFF\" \"${#RALPH_COMMIT}\" > hook-checkpoint.out"]
on_iteration_end = ["printf '%s|%s\n' \"$RALPH_ITERATION\" \"$RALPH_PROGRESS\" > hook-iteration.out"]
on_exit = ["printf '%s|%s\n' \"$RALPH_OUTCOME\" \"$RALPH_EXIT_CODE\" > hook-exit.out"]
[loop]
max_iterations = 1
"#;
    let p = Project::new(plan, scenario, hooks);
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(
        run.of("hook").iter().all(|h| h["ok"] == true),
        "{}",
        run.describe()
    );
    let cp = p.read("hook-checkpoint.out");
    let fields: Vec<&str> = cp.trim_end().split('|').collect();
    assert_eq!(fields[0], "1");
    assert_eq!(fields[2..5], ["L2", "87", "context"], "{cp}");
    assert!(fields[5].starts_with(".ralph/handoffs/"), "{cp}");
    assert_eq!(fields[6], "40", "{cp}");
    assert_eq!(p.read("hook-iteration.out"), "1|true\n");
    assert_eq!(p.read("hook-exit.out"), "iteration_limit|4\n");
    // The hostile item reached the commit message as text, nothing ran.
    assert!(p.log()[0].contains("$(touch pwned-item2)"), "{:?}", p.log());
    let out = p
        .ralph()
        .args([
            "checkpoint",
            "--reason",
            "$(touch pwned-reason) `touch pwned-reason2`",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let pwned: Vec<String> = std::fs::read_dir(p.root())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pwned"))
        .collect();
    assert!(pwned.is_empty(), "untrusted text ran: {pwned:?}");
}

#[test]
fn wip_commit_never_adds_ignored_files() {
    let scenario = r#"
[[step]]
context = 60000
text = "Building."
command = "mkdir -p build node_modules/x && echo bin > build/app && echo dep > node_modules/x/i.js && echo SECRET=1 > .env && echo log > debug.log && echo kept > src.txt && echo also > build.txt"
[[step]]
context = 146000
text = "Full."
"#;
    let p = Project::new(PLAN, scenario, "[loop]\nmax_iterations = 1\n");
    p.write(".gitignore", "build/\nnode_modules/\n.env\n*.log\n");
    let repo = p.repo();
    let mut index = repo.index().unwrap();
    index.add_path(Path::new(".gitignore")).unwrap();
    index.write().unwrap();
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let files = p.head_files();
    for kept in ["src.txt", "build.txt"] {
        assert!(
            files.contains(&kept.to_string()),
            "{kept} missing: {files:?}"
        );
    }
    // The user's staged .gitignore was committed on its own before the run.
    assert_eq!(p.log()[1], "ralph: changes present before the run");
    let repo = p.repo();
    let head = repo.head().unwrap().peel_to_tree().unwrap();
    assert!(head.get_path(Path::new(".gitignore")).is_ok());
    for ignored in ["build/app", "node_modules/x/i.js", ".env", "debug.log"] {
        assert!(
            !files.iter().any(|f| f == ignored),
            "{ignored} committed: {files:?}"
        );
        assert!(p.path(ignored).exists(), "{ignored} left in place");
    }
}

// ------------------------------------------------- printed text (issue 22)

/// The first ESC or C1 control in a command's stdout, and what surrounds it.
fn escape_in(out: &[u8]) -> Option<String> {
    if let Some(i) = out.iter().position(|&b| b == 0x1b) {
        return Some(
            String::from_utf8_lossy(&out[i.saturating_sub(40)..(i + 40).min(out.len())])
                .into_owned(),
        );
    }
    let text = String::from_utf8_lossy(out);
    let i = text.find(|c: char| ('\u{80}'..='\u{9f}').contains(&c))?;
    Some(text[i.saturating_sub(40)..].chars().take(80).collect())
}

/// Every subcommand `ralph help` lists, and how this test prints with it
/// (an empty list: it prints nothing of the plan's or the agent's).
fn printing_commands() -> Vec<(&'static str, Vec<Vec<&'static str>>)> {
    vec![
        ("run", vec![vec!["run", "--dry-run"]]),
        ("checkpoint", vec![]), // a WIP commit; prints ids and paths (e2e_checkpoint)
        ("stop", vec![]),       // a request to a running supervisor
        (
            "context",
            vec![
                vec!["context"],
                vec!["context", "--json"],
                vec!["context", "--estimate"],
                vec!["context", "--estimate", "--json"],
            ],
        ),
        ("status", vec![vec!["status"], vec!["status", "--json"]]),
        // Needs a terminal (exit 2 without one); every text it draws goes
        // through `text::printable` (`commands/watch/render.rs`, `fit`).
        ("watch", vec![]),
        ("init", vec![]), // writes starter files; prints their paths
        (
            "prompt",
            vec![
                vec!["prompt"],
                vec!["prompt", "--stats"],
                vec!["prompt", "--json"],
            ],
        ),
        ("report", vec![vec!["report"], vec!["report", "--json"]]),
        ("doctor", vec![vec!["doctor"], vec!["doctor", "--json"]]),
        ("completions", vec![]), // generated from the CLI definition
        ("man", vec![]),         // generated from the CLI definition
        ("notify", vec![vec!["notify"], vec!["notify", "--json"]]),
        ("recover", vec![vec!["recover"], vec!["recover", "--json"]]),
        ("demo", vec![]), // its own bundled plan in a fresh directory
        ("sim", vec![]),  // the simulated agent itself
        ("statusline", vec![vec!["statusline"]]),
        ("hook", vec![vec!["hook", "session-start"]]),
        ("help", vec![]),
    ]
}

/// What each printing command writes to stdout on the project `p`.
fn printed(p: &Project) -> Vec<(String, Vec<u8>)> {
    let input = serde_json::json!({
        "session_id": "s", "cwd": p.root(), "transcript_path": p.path("none.jsonl"),
        "source": "compact", "hook_event_name": "SessionStart",
        "workspace": {"current_dir": p.root(), "project_dir": p.root()},
    })
    .to_string();
    let mut out = Vec::new();
    for (_, invocations) in printing_commands() {
        for args in invocations {
            let mut child = p
                .ralph()
                .args(&args)
                .env("NO_COLOR", "1")
                .env("COLUMNS", "100000")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            let mut stdin = child.stdin.take().unwrap();
            let _ = std::io::Write::write_all(&mut stdin, input.as_bytes());
            drop(stdin);
            out.push((args.join(" "), child.wait_with_output().unwrap().stdout));
        }
    }
    out
}

/// A plan whose title and items hold what an agent that edits the plan
/// could write: terminal escapes (clear screen, window title, OSC 52 to the
/// clipboard), C0/C1 controls and a 1 MB line.
fn hostile_plan(title: &str, item: &str, long: bool) -> String {
    let long = if long {
        "x".repeat(1 << 20)
    } else {
        "y".into()
    };
    format!(
        "# {title}\n\n- [x] done {item}\n- [ ] {item}\n  note {item}\n- [ ] {long}\n\nDecision: {item}\n"
    )
}

/// Issue 22 acceptance: for any plan text, no command's stdout holds an
/// ESC or a C1 control that ralph did not put there itself (colours are
/// off: `NO_COLOR`). `ralph help` is enumerated, so a new command must be
/// added here.
#[test]
fn no_command_prints_an_escape_sequence_from_the_plan() {
    let help = p_help();
    let listed: Vec<&str> = printing_commands().iter().map(|(c, _)| *c).collect();
    assert_eq!(
        help, listed,
        "`ralph help` lists other commands than this test"
    );

    let title = "Title \u{1b}]0;TITLE\u{7} \u{1b}[2J";
    let item =
        "fix \u{1b}]52;c;ZXZpbA==\u{7} it \u{9b}31m \u{9d}0;x\u{9c} \u{90}q\u{9c} \r\u{8}\u{7f}";
    let p = Project::new(
        &hostile_plan(title, item, true),
        QUICK_L2,
        "[loop]\nmax_iterations = 1\n",
    );
    let run = p.ralph().arg("run").output().unwrap();
    let json_run = p
        .ralph()
        .args(["run", "--json", "--fresh"])
        .output()
        .unwrap();
    let mut all = printed(&p);
    all.push(("run".into(), run.stdout));
    all.push(("run --json".into(), json_run.stdout));
    for (cmd, out) in &all {
        assert!(
            escape_in(out).is_none(),
            "`ralph {cmd}` printed {:?}",
            escape_in(out)
        );
    }
    assert!(
        all.iter()
            .any(|(c, o)| c == "context --estimate"
                && String::from_utf8_lossy(o).contains("fix  it")),
        "the plan's text was there to print"
    );

    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases: 6,
        failure_persistence: None,
        ..Config::default()
    });
    let text = "[a-z \u{1b}\u{7}\u{0}-\u{1f}\u{7f}-\u{9f}\\[\\];0-9]{0,40}";
    runner
        .run(&(text, text), |(title, item)| {
            p.write("fix_plan.md", &hostile_plan(&title, &item, false));
            for (cmd, out) in printed(&p) {
                proptest::prop_assert!(
                    escape_in(&out).is_none(),
                    "`ralph {}` printed {:?}",
                    cmd,
                    escape_in(&out)
                );
            }
            Ok(())
        })
        .unwrap();
}

/// The subcommands `ralph help` lists.
fn p_help() -> Vec<String> {
    let out = std::process::Command::new(BIN)
        .arg("help")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Issue 22: `ralph report --html fix_plan.md` wrote the page over the
/// plan. Only a file that does not exist or a page ralph wrote is written.
#[test]
fn report_html_never_overwrites_a_file_ralph_did_not_write() {
    let p = Project::new(PLAN, QUICK_L2, "[loop]\nmax_iterations = 1\n");
    p.run(&[], LIMIT);
    let out = p
        .ralph()
        .args(["report", "--html", "fix_plan.md"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("hint:"));
    assert_eq!(p.read("fix_plan.md"), PLAN);
    for _ in 0..2 {
        let out = p
            .ralph()
            .args(["report", "--html", "night.html"])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(p.read("night.html").contains("<!DOCTYPE html>"));
}
