//! `ralph doctor`: checks everything a run needs (config, plan, templates,
//! the agent binary and its stream-json support, root and sandbox, git and
//! its identity, write access) and explains each problem with its fix.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Serialize;

use super::Report;
use super::prompt::NextIteration;
use crate::agent::AgentKind;
use crate::config::Config;
use crate::error::Result;
use crate::formats::Layout;
use crate::project::Project;
use crate::prompt::{EMBEDDED, Templates};

/// How long `<agent> --version` and `--help` may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(15);
const SKIP_PERMISSIONS: &str = "--dangerously-skip-permissions";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
    Ok,
    /// Works, but not as well as it could.
    Warning,
    /// A run would fail or misbehave.
    Problem,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    pub(crate) name: &'static str,
    pub(crate) verdict: Verdict,
    pub(crate) detail: String,
    /// What to do about a warning or problem.
    pub(crate) fix: Option<String>,
}

/// Everything `ralph doctor` found (`--json`: this object).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DoctorReport {
    pub(crate) root: String,
    /// No problems (warnings allowed).
    pub(crate) ok: bool,
    pub(crate) problems: usize,
    pub(crate) warnings: usize,
    pub(crate) checks: Vec<Check>,
}

#[derive(Default)]
struct Checks(Vec<Check>);

impl Checks {
    fn ok(&mut self, name: &'static str, detail: impl Into<String>) {
        self.push(name, Verdict::Ok, detail, None::<String>);
    }
    fn warn(&mut self, name: &'static str, detail: impl Into<String>, fix: impl Into<String>) {
        self.push(name, Verdict::Warning, detail, Some(fix));
    }
    fn problem(&mut self, name: &'static str, detail: impl Into<String>, fix: impl Into<String>) {
        self.push(name, Verdict::Problem, detail, Some(fix));
    }
    fn push(
        &mut self,
        name: &'static str,
        verdict: Verdict,
        detail: impl Into<String>,
        fix: Option<impl Into<String>>,
    ) {
        self.0.push(Check {
            name,
            verdict,
            detail: detail.into(),
            fix: fix.map(Into::into),
        });
    }
    /// A ralph error as a problem: its message, its hint as the fix.
    fn error(&mut self, name: &'static str, e: &crate::Error, fallback_fix: &str) {
        let fix = e.hint().unwrap_or_else(|| fallback_fix.to_string());
        self.problem(name, e.to_string(), fix);
    }
}

impl DoctorReport {
    pub(crate) fn examine(root: &Path) -> DoctorReport {
        let mut c = Checks::default();
        let config = match Config::load(root) {
            Ok(config) => {
                if root.join(crate::config::FILE_NAME).exists() {
                    c.ok("config", "ralph.toml loads");
                } else {
                    c.ok("config", "no ralph.toml: the defaults apply");
                }
                config
            }
            Err(e) => {
                c.error("config", &e, "fix ralph.toml");
                Config::default()
            }
        };
        // Changed during the last run, unconfirmed: what they name (the
        // agent's program, the checks) is not run by doctor either.
        let trusted = check_trust(&mut c, root, &config);
        let plan_ok = check_plan(&mut c, root, &config);
        check_templates(&mut c, root, &config, plan_ok);
        if trusted {
            check_agent(&mut c, root, &config);
        }
        check_sandbox(&mut c, root, &config);
        check_box(&mut c, &config);
        check_git(&mut c, root);
        check_own_files(&mut c, root, &config);
        check_write_access(&mut c, root);
        check_notify(&mut c, &config);
        if trusted {
            check_verify(&mut c, root, &config);
        }
        if let Some((detail, fix)) = crate::commands::claude_code::settings::doctor(root) {
            match fix {
                Some(fix) => c.warn("claude code", detail, fix),
                None => c.ok("claude code", detail),
            }
        }
        let count = |v| c.0.iter().filter(|k| k.verdict == v).count();
        let (problems, warnings) = (count(Verdict::Problem), count(Verdict::Warning));
        DoctorReport {
            root: root.display().to_string(),
            ok: problems == 0,
            problems,
            warnings,
            checks: c.0,
        }
    }
}

/// Whether the files ralph acts on are as the last run left them or as
/// the user changed them since (docs/sandbox.md, "Trust at start").
fn check_trust(c: &mut Checks, root: &Path, config: &Config) -> bool {
    use crate::config::trust::{self, Decision};
    let boxed = config.agent.sandbox == crate::config::sandbox::Kind::Bwrap;
    let fix = "look at the changes (`git diff`); `ralph run --trust-config` accepts them";
    match trust::at_start(root, &Layout::new(root).dir, boxed, false) {
        Ok(Decision::Trusted | Decision::Confirmed(_)) => true,
        Ok(Decision::Warned(files) | Decision::Refused(files)) => {
            c.problem(
                "trust",
                format!(
                    "changed during the last run: {}; the agent program and the checks are not run",
                    files.join(", ")
                ),
                fix,
            );
            false
        }
        Err(e) => {
            c.problem(
                "trust",
                format!("{e}; the agent program and the checks are not run"),
                fix,
            );
            false
        }
    }
}

fn check_plan(c: &mut Checks, root: &Path, config: &Config) -> bool {
    let name = config.plan.display();
    match Project::at(root).plan(config) {
        Ok(plan) if plan.items.is_empty() => c.warn(
            "plan",
            format!("{name} has no checkbox items"),
            "list the work as `- [ ] item` lines: the agent checks them off and ralph counts them",
        ),
        Ok(plan) if plan.open_count() == 0 => c.warn(
            "plan",
            format!("every item of {name} is done: a run has nothing to do"),
            "add `- [ ] item` lines for the next piece of work",
        ),
        Ok(plan) => c.ok(
            "plan",
            format!(
                "{name}: {} open, {} done",
                plan.open_count(),
                plan.done_count()
            ),
        ),
        Err(e) => {
            c.error("plan", &e, "fix the plan file");
            return false;
        }
    }
    true
}

fn check_templates(c: &mut Checks, root: &Path, config: &Config, plan_ok: bool) {
    if let Err(e) = Templates::load(root).and_then(|t| t.check(&[crate::prompt::HANDOFF])) {
        return c.error("templates", &e, "fix the template");
    }
    let yours: Vec<String> = EMBEDDED
        .iter()
        .map(|(name, _)| format!("prompts/{name}"))
        .filter(|p| root.join(p).is_file())
        .collect();
    let origin = if yours.is_empty() {
        "the embedded templates load".to_string()
    } else {
        format!("templates load ({} from prompts/)", yours.len())
    };
    if !plan_ok {
        return c.ok("templates", origin);
    }
    match NextIteration::preview(root, config, false) {
        Ok(next) => c.ok(
            "templates",
            format!(
                "{origin}; the prompt of iteration {} renders ({} bytes, `ralph prompt` shows it)",
                next.iteration,
                next.prompt.len()
            ),
        ),
        Err(e) => c.error("templates", &e, "fix the template"),
    }
    check_budget(c, root, config);
}

/// The first prompt of a new run (no history, no resume block yet) must
/// fit `[prompt] max_tokens` once every list is cut to its floor: what is
/// left over is the template's own text and the plan's first items.
fn check_budget(c: &mut Checks, root: &Path, config: &Config) {
    let Ok(next) = NextIteration::preview(root, config, true) else {
        return;
    };
    let p = &next.stats.prompt;
    let tokens = crate::prompt::tiers::thousands(p.tokens);
    let budget = crate::prompt::tiers::thousands(p.budget);
    if p.fits {
        return c.ok(
            "prompt budget",
            format!("the first prompt is {tokens} of {budget} tokens (`ralph prompt --stats`)"),
        );
    }
    let mut sections = p.sections.clone();
    sections.sort_by_key(|s| std::cmp::Reverse(s.tokens));
    let largest: Vec<String> = sections
        .iter()
        .take(2)
        .map(|s| format!("{} {}", s.name, crate::prompt::tiers::thousands(s.tokens)))
        .collect();
    c.warn(
        "prompt budget",
        format!(
            "the first prompt needs {tokens} tokens even with every list cut short, over [prompt] max_tokens ({budget}); largest sections: {}",
            largest.join(", ")
        ),
        format!(
            "shorten the notes under the first open items of {} or the text of prompts/PROMPT.md.j2 (`ralph prompt --stats` shows each section), or raise [prompt] max_tokens",
            config.plan.display()
        ),
    );
}

/// Run `program args…` in `root` and return its output (stdout, then
/// stderr): in the agent's box when `[agent] sandbox` makes one, as a run
/// starts it (`agent.command` may be a script the agent wrote).
fn probe(
    program: &Path,
    args: &[String],
    config: &Config,
    root: &Path,
) -> std::result::Result<String, String> {
    let words: Vec<String> = std::iter::once(program.display().to_string())
        .chain(args.iter().cloned())
        .collect();
    let mut cmd = match crate::agent::AgentCommand::in_box(config, root, &words) {
        Some(boxed) => {
            crate::agent::sandbox::protect::prepare(root);
            let mut cmd = Command::new(&boxed.program);
            cmd.env_clear().args(&boxed.args).envs(&boxed.env);
            cmd
        }
        None => {
            let mut cmd = Command::new(program);
            cmd.args(args).envs(&config.agent.env);
            cmd
        }
    };
    let child = cmd
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start it: {e}"))?;
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let output = match rx.recv_timeout(PROBE_TIMEOUT) {
        Ok(result) => result.map_err(|e| format!("cannot run it: {e}"))?,
        Err(_) => {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            return Err(format!("no answer within {}s", PROBE_TIMEOUT.as_secs()));
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() {
        Ok(text)
    } else {
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        Err(format!("it failed ({}): {first}", output.status))
    }
}

fn check_agent(c: &mut Checks, root: &Path, config: &Config) {
    let kind = config.agent.kind;
    c.ok(
        "agent kind",
        format!(
            "{kind} ({}): {}",
            kind.product(),
            kind.capabilities().describe()
        ),
    );
    let (program, lead) = config.agent_program();
    let Some(path) = crate::agent::resolve_program(&program, root) else {
        return c.problem(
            "agent",
            crate::agent::not_found(&program),
            kind.install_hint(),
        );
    };
    let itself = program == "ralph";
    if itself {
        let detail = format!(
            "`{}` is ralph itself: {}",
            config
                .agent
                .command
                .as_deref()
                .unwrap_or(kind.default_command()),
            path.display()
        );
        c.ok("agent", detail);
    } else {
        c.ok("agent", format!("`{program}` is {}", path.display()));
    }
    // `ralph sim SCENARIO --version` would be a flag for the scenario: ask ralph.
    let lead: &[String] = if itself { &[] } else { &lead };
    let shown = |flag: &str| {
        std::iter::once(program.as_str())
            .chain(lead.iter().map(String::as_str))
            .chain([flag])
            .collect::<Vec<_>>()
            .join(" ")
    };
    let with = |flag: &str| {
        let mut args = lead.to_vec();
        args.push(flag.into());
        args
    };
    let by_hand = format!(
        "check that agent.command runs {}: try the command by hand",
        kind.product()
    );
    match probe(&path, &with("--version"), config, root) {
        Ok(v) => c.ok(
            "agent version",
            v.lines().next().unwrap_or("(empty)").trim().to_string(),
        ),
        Err(e) => c.problem(
            "agent version",
            format!("`{}`: {e}", shown("--version")),
            &by_hand,
        ),
    }
    if itself {
        return c.ok(
            "stream-json",
            "`ralph sim` speaks the stream-json protocol of `claude -p`",
        );
    }
    let protocol = Protocol::of(kind);
    let mut args = lead.to_vec();
    args.extend(protocol.help.iter().map(|a| a.to_string()));
    let asked = shown(&protocol.help.join(" "));
    match probe(&path, &args, config, root) {
        Ok(help) if protocol.needs.iter().all(|w| help.contains(w)) => {
            c.ok(protocol.name, protocol.ok)
        }
        Ok(_) => c.problem(
            protocol.name,
            format!(
                "`{asked}` does not mention {}: {}",
                protocol.needs.join(" "),
                protocol.why
            ),
            protocol.fix,
        ),
        Err(e) => c.problem(protocol.name, format!("`{asked}`: {e}"), protocol.fix),
    }
    if kind == AgentKind::Codex {
        check_codex_policy(c, root, config);
    }
}

/// How ralph runs each agent kind's CLI, and what its help must mention
/// for that to work: each kind is judged by its own CLI.
struct Protocol {
    name: &'static str,
    /// The arguments (after agent.command) that print the help.
    help: &'static [&'static str],
    /// Words the help must mention (all of them).
    needs: &'static [&'static str],
    ok: &'static str,
    why: &'static str,
    fix: &'static str,
}

impl Protocol {
    fn of(kind: AgentKind) -> Protocol {
        match kind {
            AgentKind::Claude => Protocol {
                name: "stream-json",
                help: &["--help"],
                needs: &["--input-format", "stream-json"],
                ok: "supported; ralph runs the agent with -p --output-format stream-json --verbose --input-format stream-json (stream-json output needs --verbose)",
                why: "ralph sends the prompt and its checkpoint requests that way",
                fix: "update Claude Code (`claude update`), or point agent.command at a Claude Code CLI",
            },
            AgentKind::Codex => Protocol {
                name: "app-server",
                help: &["app-server", "--help"],
                needs: &[],
                ok: "`codex app-server` runs; ralph speaks its JSON-RPC protocol on stdio (docs/agents.md)",
                why: "ralph drives Codex through it",
                fix: "update Codex (`npm install -g @openai/codex`), or point agent.command at a Codex CLI",
            },
            AgentKind::Opencode => Protocol {
                name: "json output",
                help: &["run", "--help"],
                needs: &["--format", "json"],
                ok: "supported; ralph runs the agent with run --format json, the prompt on stdin (docs/agents.md)",
                why: "ralph reads opencode's JSON events that way",
                fix: "update opencode (`npm install -g opencode-ai`), or point agent.command at an opencode CLI",
            },
            AgentKind::Gemini => Protocol {
                name: "stream-json",
                help: &["--help"],
                needs: &["--output-format", "stream-json"],
                ok: "supported; ralph runs the agent with -o stream-json, the prompt on stdin (docs/agents.md)",
                why: "ralph reads Gemini CLI's events that way",
                fix: "update Gemini CLI (`npm install -g @google/gemini-cli`), or point agent.command at a Gemini CLI",
            },
        }
    }
}

/// What Codex will allow the agent (`agent::codex::policy`): a read-only
/// sandbox fails every command the agent runs, and a policy that asks for
/// approval is answered "no" by a headless loop.
fn check_codex_policy(c: &mut Checks, root: &Path, config: &Config) {
    let home = config
        .agent
        .env
        .get("CODEX_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("CODEX_HOME").map(Into::into))
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".codex")));
    let file = home
        .map(|h| h.join("config.toml"))
        .and_then(|f| std::fs::read_to_string(f).ok())
        .unwrap_or_default();
    let policy = crate::agent::codex::policy(&config.agent.args, &file, root);
    let init_args = crate::agent::codex::INIT_ARGS
        .iter()
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(", ");
    match policy.sandbox.as_str() {
        "workspace-write" => c.ok(
            "codex sandbox",
            format!(
                "workspace-write ({}): the agent writes the project; Codex keeps .git read-only, so the agent's own `git commit` fails while ralph's WIP commits save the work",
                policy.sandbox_from
            ),
        ),
        "danger-full-access" => c.ok(
            "codex sandbox",
            format!(
                "danger-full-access ({}): no sandbox, the agent can write whatever ralph can",
                policy.sandbox_from
            ),
        ),
        other => c.problem(
            "codex sandbox",
            format!(
                "`{other}` ({}): Codex lets the agent write nothing, so every command it runs and every edit fails",
                policy.sandbox_from
            ),
            format!("add `args = [{init_args}]` under [agent] in ralph.toml (what `ralph init --agent codex` writes)"),
        ),
    }
    match policy.approval.as_deref() {
        Some("never") => c.ok(
            "codex approvals",
            "approval_policy = \"never\": Codex does not ask",
        ),
        other => c.warn(
            "codex approvals",
            format!(
                "approval_policy {}: Codex may ask for approval, and a headless loop declines every request (counted as denials by the breaker)",
                other.map_or("unset".to_string(), |p| format!("= \"{p}\""))
            ),
            "add `\"-c\", 'approval_policy=\"never\"'` to agent.args",
        ),
    }
}

/// `[agent] sandbox`: the box can be made here; without one, say what the
/// agent can reach (`ralph init` says whether bubblewrap would work).
fn check_box(c: &mut Checks, config: &Config) {
    use crate::config::sandbox::Kind;
    if config.agent.sandbox == Kind::None {
        return c.ok(
            "sandbox",
            "none: the agent can read and write whatever ralph can (docs/sandbox.md)",
        );
    }
    match crate::agent::sandbox::probe() {
        Ok(bwrap) => c.ok(
            "sandbox",
            format!(
                "bwrap ({}): the agent writes only the project; $HOME is private",
                bwrap.display()
            ),
        ),
        Err((why, fix)) => c.problem("sandbox", why, fix),
    }
}

fn check_sandbox(c: &mut Checks, root: &Path, config: &Config) {
    // Claude Code's permission flags and settings; the other kinds' own.
    match config.agent.kind {
        AgentKind::Claude => {}
        _ if config.agent_program().0 == "ralph" => {}
        AgentKind::Gemini => return check_gemini_approvals(c, config),
        // Codex: `check_codex_policy`; opencode asks nothing headless.
        AgentKind::Codex | AgentKind::Opencode => return,
    }
    let root_user = crate::agent::sandbox::running_as_root();
    let skips = config.agent.args.iter().any(|a| a == SKIP_PERMISSIONS);
    let sandbox = config.agent.env.get("IS_SANDBOX").map(String::as_str) == Some("1")
        || std::env::var("IS_SANDBOX").as_deref() == Ok("1");
    match (root_user, skips, sandbox) {
        (true, true, false) => c.problem(
            "permissions",
            format!(
                "running as root with {SKIP_PERMISSIONS} in agent.args: Claude Code refuses that unless IS_SANDBOX=1"
            ),
            "in a throwaway container or VM, add `env = { IS_SANDBOX = \"1\" }` under [agent] in ralph.toml; otherwise run ralph as a normal user",
        ),
        (true, true, true) => c.ok(
            "permissions",
            format!("running as root with {SKIP_PERMISSIONS}, IS_SANDBOX=1 is set"),
        ),
        (_, true, _) => c.ok(
            "permissions",
            format!("{SKIP_PERMISSIONS}: the agent runs every tool unasked"),
        ),
        // Headless (`-p`), the agent cannot ask: a tool its settings do not
        // allow is refused, and it works around that or stalls.
        _ if config.agent_program().0 == "ralph" => c.ok(
            "permissions",
            "`ralph sim` asks for none: it plays its scenario",
        ),
        (_, false, _) => match crate::commands::claude_code::settings::allowed_tools(root, &config.agent.args) {
            Some(by) => c.ok(
                "permissions",
                format!("{by} allows tools; any other is refused unasked (the agent runs with -p and cannot ask)"),
            ),
            None => c.warn(
                "permissions",
                "the agent runs with -p and cannot ask: every tool call its settings do not allow (edits, shell commands) is refused",
                format!("allow what it needs: `permissions.allow` in .claude/settings.json, or `--allowedTools …` / `--permission-mode acceptEdits` in agent.args; in a throwaway sandbox, {SKIP_PERMISSIONS}"),
            ),
        },
    }
}

/// Headless, Gemini CLI offers the agent only the tools that need no
/// approval: without `--yolo` (or an approval mode that edits) it cannot
/// write a file.
fn check_gemini_approvals(c: &mut Checks, config: &Config) {
    let args = &config.agent.args;
    let mode = args
        .iter()
        .position(|a| a == "--approval-mode")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
        .or_else(|| args.iter().find_map(|a| a.strip_prefix("--approval-mode=")));
    let yolo = args.iter().any(|a| a == "--yolo" || a == "-y");
    match mode {
        _ if yolo => c.ok("permissions", "--yolo: Gemini CLI runs every tool unasked"),
        Some(m @ ("yolo" | "auto_edit")) => c.ok(
            "permissions",
            format!("--approval-mode {m}: Gemini CLI edits files unasked"),
        ),
        _ => c.warn(
            "permissions",
            "Gemini CLI runs headless without --yolo or --approval-mode auto_edit: it offers the agent only tools that need no approval, so it cannot write files",
            "add \"--yolo\" (or \"--approval-mode\", \"auto_edit\") to agent.args in ralph.toml",
        ),
    }
}

fn check_git(c: &mut Checks, root: &Path) {
    let repo = match git2::Repository::discover(root) {
        Ok(r) if r.workdir().is_some() => r,
        Ok(_) | Err(_) => {
            return c.warn(
                "git",
                "not in a git work tree: checkpoints cannot commit the work in progress",
                "`git init && git add -A && git commit -m start` in the project root",
            );
        }
    };
    c.ok(
        "git",
        format!(
            "repository at {}",
            repo.workdir().map_or(root, |w| w).display()
        ),
    );
    // Who commits, as ralph's WIP commits look it up (environment first).
    let config = repo.config().ok();
    let lookup = |field: &str| {
        std::env::var(format!("GIT_AUTHOR_{}", field.to_uppercase()))
            .ok()
            .or_else(|| {
                let config = config.as_ref()?;
                config
                    .get_string(&format!("author.{field}"))
                    .or_else(|_| config.get_string(&format!("user.{field}")))
                    .ok()
            })
            .filter(|v| !v.trim().is_empty())
    };
    match (lookup("name"), lookup("email")) {
        (Some(name), Some(email)) => c.ok("git identity", format!("{name} <{email}>")),
        _ => c.warn(
            "git identity",
            "no git user.name/user.email: ralph's WIP commits fall back to `ralph <ralph@localhost>`",
            "`git config user.name \"Your Name\"` and `git config user.email you@example.com` (in CI: GIT_AUTHOR_NAME/GIT_AUTHOR_EMAIL)",
        ),
    }
}

/// The prompt file ralph may not overwrite, and each condition that would
/// skip every WIP commit of the night.
fn check_own_files(c: &mut Checks, root: &Path, config: &Config) {
    if crate::project::ownership::prompt_owner(root, &config.prompt_file)
        == crate::project::ownership::PromptOwner::Foreign
    {
        let e = crate::project::ownership::foreign_prompt_error(&config.prompt_file);
        c.error("prompt file", &e, "");
    }
    let Ok(Some(repo)) = crate::repo::Repo::open(root) else {
        return;
    };
    for b in repo.commit_blockers() {
        // The run checks these only for its WIP commits (doomed_commits):
        // with them off it starts, and doctor must not say otherwise.
        if !config.git.wip_commit {
            c.warn(
                "WIP commits",
                format!(
                    "off (git.wip_commit = false), so `ralph run` starts; still, {}: work tree snapshots (`ralph recover`) may fail too",
                    b.what
                ),
                b.fix,
            );
            continue;
        }
        let run = if b.lasting {
            " (`ralph run` refuses to start: set git.wip_commit = false to run without WIP commits)"
        } else {
            ""
        };
        c.problem(
            "WIP commits",
            format!("every WIP commit will be skipped: {}{run}", b.what),
            b.fix,
        );
    }
}

/// The channels `ralph run` will resolve at its start: a `$VAR` that is
/// unset or empty there refuses the run (exit 2), so doctor says so first.
fn check_notify(c: &mut Checks, config: &Config) {
    match crate::events::notify::Channel::all(&config.notify) {
        Ok(channels) if channels.is_empty() => {}
        Ok(channels) => {
            let names: Vec<&str> = channels.iter().map(|ch| ch.name()).collect();
            c.ok(
                "notify",
                format!(
                    "{} (`ralph notify --test` sends a test notice)",
                    names.join(", ")
                ),
            );
        }
        Err(e) => c.error(
            "notify",
            &e,
            "export the variable in the shell that starts `ralph run`, or remove the channel from [notify]",
        ),
    }
}

fn check_write_access(c: &mut Checks, root: &Path) {
    use nix::unistd::{AccessFlags, access};
    let dir = Layout::new(root).dir;
    let writable = |p: &Path| access(p, AccessFlags::W_OK | AccessFlags::X_OK).is_ok();
    if dir.exists() && !dir.is_dir() {
        return c.problem(
            "write access",
            ".ralph exists and is not a directory",
            "move it away: ralph keeps its state in .ralph/",
        );
    }
    // ralph writes PROMPT.md in the root, everything else in .ralph/.
    let denied: Vec<&Path> = [root, dir.as_path()]
        .into_iter()
        .filter(|p| p.exists() && !writable(p))
        .collect();
    match denied.as_slice() {
        [] if dir.exists() => c.ok("write access", ".ralph/ and the project root are writable"),
        [] => c.ok(
            "write access",
            "the project root is writable (ralph creates .ralph/ at the first run)",
        ),
        paths => c.problem(
            "write access",
            format!(
                "not writable: {} (ralph writes PROMPT.md and .ralph/)",
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "fix the permissions, or run ralph as the user who owns the project",
        ),
    }
}

/// `[verify] commands`, run once as a run would before a completion.
fn check_verify(c: &mut Checks, root: &Path, config: &Config) {
    use crate::formats::verification::{self, When};
    use crate::hooks::verify;
    if config.verify.commands.is_empty() {
        let proposed = super::init::verify_commands(root);
        let example = proposed.first().map_or("make test", String::as_str);
        return c.warn(
            "verify",
            "no [verify] commands: a completion rests on the agent's word alone",
            format!("add the project's checks to ralph.toml, e.g. `[verify] commands = [\"{example}\"]` (docs/verify.md)"),
        );
    }
    // In the agent's box, as a run would: the checks run code it wrote.
    let shell = crate::agent::shell::Shell::for_agent(config, root);
    if shell.is_boxed() {
        crate::agent::sandbox::protect::prepare(root);
    }
    let v = verify::run(
        &config.verify,
        &shell,
        &|_| Vec::new(),
        root,
        &[],
        0,
        When::Doctor,
    );
    for check in &v.checks {
        let summary = check.summary(Some(config.verify.timeout.0));
        if check.status == verification::Status::Passed {
            c.ok("verify", format!("{summary} ({:.1}s)", check.seconds));
        } else {
            let last = check.output.lines().last().unwrap_or("").trim();
            let detail = if last.is_empty() {
                summary
            } else {
                format!("{summary}: {}", crate::text::cut(last, 200))
            };
            c.problem(
                "verify",
                detail,
                "a run cannot complete while it fails: fix the project, or the command in [verify] commands",
            );
        }
    }
    for skipped in &v.skipped {
        c.warn(
            "verify",
            format!("`{skipped}` not run after the failure"),
            "it runs once the commands before it pass",
        );
    }
}

impl Report for DoctorReport {
    fn human(&self) -> String {
        let mut out = format!("ralph doctor in {}\n", self.root);
        for check in &self.checks {
            let verdict = match check.verdict {
                Verdict::Ok => "ok",
                Verdict::Warning => "warning",
                Verdict::Problem => "PROBLEM",
            };
            let _ = writeln!(out, "{verdict:<8} {:<14} {}", check.name, check.detail);
            if let Some(fix) = &check.fix {
                let _ = writeln!(out, "{:<23} fix: {fix}", "");
            }
        }
        let _ = writeln!(
            out,
            "{} problem(s), {} warning(s){}",
            self.problems,
            self.warnings,
            if self.ok {
                ": ready to run"
            } else {
                ": fix the problems before `ralph run`"
            }
        );
        out
    }
}

/// `ralph doctor [--json]`: exit 0 when there is no problem, 1 otherwise.
pub(crate) fn doctor(project: &Project, json: bool) -> Result<i32> {
    let root = project.root();
    let report = DoctorReport::examine(root);
    super::print(&report.render(json))?;
    Ok(if report.ok { 0 } else { 1 })
}
