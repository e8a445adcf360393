//! End-to-end tests of fleets (issue 26): `ralph run --remote origin
//! --fleet NAME` workers, each in its own clone of a bare repository, with
//! `ralph sim` as the agent. Each test fails without the feature it names.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(180);

/// A scenario's first command that logs each paid session (its worker and
/// item) in `sessions.log` beside the clones (`Fleet::sessions`).
pub(crate) const LOG_SESSION: &str = r#"echo "$RALPH_WORKER $RALPH_FLEET_ITEM" >> "$(git rev-parse --path-format=absolute --git-common-dir)/../../sessions.log""#;

/// One iteration for any item: records who did it (appending when the work
/// tree already has it: a takeover), pauses `pause_ms`, checks the item off
/// in its one-item plan, completes.
fn scenario(pause_ms: u64) -> String {
    let cmd = r#"mkdir -p done && f=done/$RALPH_FLEET_ITEM.txt && if [ -f "$f" ]; then echo "resumed by $RALPH_WORKER" >> "$f"; else echo "started by $RALPH_WORKER" > "$f"; fi; mkdir -p items && echo "$RALPH_ITEM" >> "items/$RALPH_FLEET_ITEM.txt""#;
    format!(
        "[[step]]\ncontext = 20000\ncommand = {}\n[[step]]\nsleep_ms = {pause_ms}\n[[step]]\ncommand = {}\n[[step]]\nresult = \"Done. <promise>COMPLETE</promise>\"\n",
        common::toml_string(cmd),
        common::toml_string(r"sed -i 's/- \[ \]/- [x]/' .ralph/worker-plan.md"),
    )
}

pub(crate) struct Fleet {
    pub(crate) tmp: tempfile::TempDir,
    pub(crate) bare: PathBuf,
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Fleet {
    /// A bare remote whose `main` holds the plan, ralph.toml and the scenario.
    fn new(items: usize, pause_ms: u64, config: &str) -> Fleet {
        Fleet::with(items, &scenario(pause_ms), config)
    }

    /// The same with a scenario of the test's own.
    pub(crate) fn with(items: usize, scenario: &str, config: &str) -> Fleet {
        let tmp = tempfile::tempdir().unwrap();
        let bare = tmp.path().join("remote.git");
        git(
            tmp.path(),
            &["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()],
        );
        let seed = tmp.path().join("seed");
        git(
            tmp.path(),
            &["init", "-q", "-b", "main", seed.to_str().unwrap()],
        );
        let plan: String = (1..=items)
            .map(|i| format!("- [ ] item number {i}\n"))
            .collect();
        std::fs::write(seed.join("fix_plan.md"), format!("# Night\n\n{plan}")).unwrap();
        std::fs::write(seed.join("scenario.toml"), scenario).unwrap();
        std::fs::write(seed.join("ralph.toml"), common::config(config)).unwrap();
        git(&seed, &["add", "-A"]);
        git(&seed, &["commit", "-q", "-m", "seed"]);
        git(&seed, &["push", "-q", bare.to_str().unwrap(), "main"]);
        Fleet { tmp, bare }
    }

    /// `--no-local`: a local clone hardlinks the remote's objects and fails
    /// ("hardlink different from source") when a worker pushes meanwhile;
    /// the pack protocol reads a consistent view, as a real remote would.
    pub(crate) fn clone(&self, name: &str) -> PathBuf {
        let dir = self.tmp.path().join(name);
        git(
            self.tmp.path(),
            &[
                "clone",
                "-q",
                "--no-local",
                self.bare.to_str().unwrap(),
                dir.to_str().unwrap(),
            ],
        );
        dir
    }

    /// Workers `wa` and `wb` run to the end, each exiting 0.
    fn two_workers_succeed(&self) -> (Ended, Ended) {
        both_succeed(self.worker("wa"), self.worker("wb"))
    }

    /// `ralph run --remote origin --fleet night --worker NAME --json` in a new clone.
    fn worker(&self, name: &str) -> Child {
        worker_in(&self.clone(name), name)
    }

    /// Every agent session started (`LOG_SESSION`), as `worker item`.
    pub(crate) fn sessions(&self) -> Vec<String> {
        std::fs::read_to_string(self.tmp.path().join("sessions.log"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    /// The remote's `pre-receive` hook: `script` (its rules).
    fn pre_receive(&self, script: &str) {
        let hook = self.bare.join("hooks/pre-receive");
        std::fs::write(&hook, script).unwrap();
        let mut perms = std::fs::metadata(&hook).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&hook, perms).unwrap();
    }

    pub(crate) fn refs(&self, prefix: &str) -> Vec<String> {
        let out = git(&self.bare, &["for-each-ref", "--format=%(refname)", prefix]);
        out.lines().map(String::from).collect()
    }

    fn run_file(&self, path: &str) -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(&self.bare)
            .args(["show", &format!("ralph/fleet/night/run:{path}")])
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn run_files(&self, dir: &str) -> Vec<String> {
        let out = git(
            &self.bare,
            &[
                "ls-tree",
                "--name-only",
                "ralph/fleet/night/run",
                &format!("{dir}/"),
            ],
        );
        out.lines().map(String::from).collect()
    }

    fn merges(&self) -> Vec<String> {
        let out = git(
            &self.bare,
            &[
                "log",
                "--format=%s",
                "--first-parent",
                "ralph/fleet/night/run",
            ],
        );
        out.lines()
            .filter(|l| l.starts_with("ralph fleet: merge"))
            .map(String::from)
            .collect()
    }

    /// What nothing should be left of once every item is merged.
    fn assert_nothing_left(&self) {
        assert_eq!(
            self.refs("refs/ralph/fleet/night/claims/"),
            Vec::<String>::new(),
            "no claim left"
        );
        assert_eq!(
            self.refs("refs/heads/ralph/fleet/night/items/"),
            Vec::<String>::new(),
            "no item branch unmerged"
        );
        assert_eq!(
            self.refs("refs/ralph/fleet/night/merge"),
            Vec::<String>::new(),
            "no merge lease left"
        );
    }
}

/// `ralph run --remote origin --fleet night --worker NAME --json` in `dir`.
fn worker_in(dir: &Path, name: &str) -> Child {
    worker_with(dir, name, &[])
}

/// The same with more arguments (`--agent …`).
fn worker_with(dir: &Path, name: &str, more: &[&str]) -> Child {
    Command::new(common::BIN)
        .current_dir(dir)
        .env("RALPH_LOG", "off")
        .args([
            "run", "--remote", "origin", "--fleet", "night", "--worker", name, "--json",
        ])
        .args(more)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `ralph status --fleet night --json` in a fresh clone.
fn fleet_status(fleet: &Fleet) -> Value {
    let dir = fleet.clone("observer");
    let out = Command::new(common::BIN)
        .current_dir(&dir)
        .env("RALPH_LOG", "off")
        .args(["status", "--fleet", "night", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `ralph report --fleet night ARGS` in a fresh clone: stdout, and the clone.
fn fleet_report(fleet: &Fleet, clone: &str, args: &[&str]) -> (String, PathBuf) {
    let dir = fleet.clone(clone);
    let out = Command::new(common::BIN)
        .current_dir(&dir)
        .env("RALPH_LOG", "off")
        .env("TZ", "UTC")
        .args(["report", "--fleet", "night"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (String::from_utf8(out.stdout).unwrap(), dir)
}

/// The fleet's morning report as JSON, from a fresh clone.
fn fleet_report_json(fleet: &Fleet, clone: &str) -> Value {
    serde_json::from_str(&fleet_report(fleet, clone, &["--json"]).0).unwrap()
}

struct Ended {
    code: Option<i32>,
    events: Vec<Value>,
    stderr: String,
}

impl Ended {
    fn of(&self, kind: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e["event"] == format!("fleet_{kind}").as_str() && e.get("worker").is_some())
            .collect()
    }
}

/// Two workers run to the end, each exiting 0.
fn both_succeed(a: Child, b: Child) -> (Ended, Ended) {
    let (a, b) = (wait(a), wait(b));
    assert_eq!(
        (a.code, b.code),
        (Some(0), Some(0)),
        "{}\n{}",
        a.stderr,
        b.stderr
    );
    (a, b)
}

fn wait(child: Child) -> Ended {
    let run = common::Run::wait(child, LIMIT);
    Ended {
        code: run.code,
        events: run.events,
        stderr: run.stderr,
    }
}

#[test]
fn three_workers_do_nine_items_each_exactly_once() {
    let fleet = Fleet::new(9, 300, "");
    let workers: Vec<Child> = ["w1", "w2", "w3"].iter().map(|w| fleet.worker(w)).collect();
    let ended: Vec<Ended> = workers.into_iter().map(wait).collect();
    for e in &ended {
        assert_eq!(e.code, Some(0), "{}", e.stderr);
    }
    // Every item merged once, by the worker that claimed it.
    let merges = fleet.merges();
    assert_eq!(merges.len(), 9, "{merges:#?}");
    let done = fleet.run_files("done");
    assert_eq!(done.len(), 9, "{done:?}");
    for f in &done {
        let text = fleet.run_file(f).unwrap();
        assert_eq!(text.lines().count(), 1, "{f} done once: {text}");
        assert!(text.starts_with("started by w"), "{text}");
        // The agent is told its item by name, as a worker on one machine is.
        let item = fleet.run_file(&f.replace("done/", "items/")).unwrap();
        assert!(item.starts_with("item number "), "{f}: {item:?}");
    }
    let plan = fleet.run_file("fix_plan.md").unwrap();
    assert_eq!(plan.matches("- [x]").count(), 9, "{plan}");
    let claimed: usize = ended.iter().map(|e| e.of("claimed").len()).sum();
    let merged: usize = ended.iter().map(|e| e.of("merged").len()).sum();
    assert_eq!((claimed, merged), (9, 9));
    // The run was created once; everyone else joined.
    let created: usize = ended
        .iter()
        .map(|e| {
            e.of("joined")
                .iter()
                .filter(|j| j["created"] == true)
                .count()
        })
        .sum();
    assert_eq!(created, 1);
    fleet.assert_nothing_left();
    // `ralph status --fleet` from a fresh clone sees it all.
    let status = fleet_status(&fleet);
    let items = status["items"].as_array().unwrap();
    assert_eq!(items.len(), 9);
    assert!(items.iter().all(|i| i["state"] == "done"), "{status}");
    let workers = status["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 3);
    assert!(workers.iter().all(|w| w["state"] == "finished"), "{status}");
    assert_eq!(status["ledger"]["items_done"], 9);
    // The night's story: every merge, by whom.
    let merged = status["merged"].as_array().unwrap();
    assert_eq!(merged.len(), 9);
    for (e, w) in ended.iter().zip(["w1", "w2", "w3"]) {
        let by_w = merged.iter().filter(|m| m["worker"] == w).count();
        assert_eq!(by_w, e.of("merged").len(), "{w}");
        // Each item's loop records are kept in the worker's clone.
        let loops = fleet.tmp.path().join(w).join(".ralph/fleet/night/loops");
        let kept = std::fs::read_dir(&loops).map(|d| d.count()).unwrap_or(0);
        assert_eq!(kept, by_w, "{}", loops.display());
    }
}

#[test]
fn two_workers_racing_for_the_last_item_one_gets_it() {
    let fleet = Fleet::new(1, 300, "");
    let (a, b) = fleet.two_workers_succeed();
    assert_eq!(a.of("claimed").len() + b.of("claimed").len(), 1);
    assert_eq!(fleet.merges().len(), 1);
    fleet.assert_nothing_left();
}

/// The newest commit of `refname` on the remote, if any.
fn remote_ref(fleet: &Fleet, refname: &str) -> Option<String> {
    fleet
        .refs(refname)
        .first()
        .map(|r| git(&fleet.bare, &["rev-parse", r]))
}

/// Until the item's snapshot on the remote holds the agent's first file:
/// its work half done, pushed.
fn wait_for_pushed_work(fleet: &Fleet) {
    common::wait_until("a pushed snapshot of the item started", LIMIT, || {
        remote_ref(fleet, "refs/ralph/fleet/night/snapshots/").is_some_and(|snap| {
            git(&fleet.bare, &["ls-tree", "-r", "--name-only", &snap]).contains("done/")
        })
    });
}

#[test]
fn a_worker_killed_mid_item_is_taken_over_from_what_it_pushed() {
    let fleet = Fleet::new(1, 8000, "[fleet]\nlease = \"3s\"\nclock_skew = \"0s\"\n");
    let mut a = fleet.worker("wa");
    // Its snapshot of the half-done item reaches the remote.
    wait_for_pushed_work(&fleet);
    let b = fleet.worker("wb");
    a.kill().unwrap();
    a.wait().unwrap();
    let b = wait(b);
    assert_eq!(b.code, Some(0), "{}", b.stderr);
    let taken = b.of("claimed");
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0]["took_over_from"], "wa", "{taken:?}");
    assert_eq!(b.of("restored").len(), 1);
    // Nothing lost (a's start is there), nothing done twice (b resumed it).
    let done = fleet.run_files("done");
    assert_eq!(done.len(), 1);
    let text = fleet.run_file(&done[0]).unwrap();
    assert_eq!(text, "started by wa\nresumed by wb\n");
    let status = fleet_status(&fleet);
    let merged = status["merged"].as_array().unwrap();
    assert_eq!(merged.len(), 1);
    assert_eq!(
        (
            merged[0]["worker"].as_str(),
            merged[0]["generation"].as_u64()
        ),
        (Some("wb"), Some(2))
    );
    assert_eq!(merged[0]["took_over_from"], "wa");
    // wa's last word was "working", a lease ago and more: it shows dead.
    let workers = status["workers"].as_array().unwrap();
    let state = |w: &str| workers.iter().find(|s| s["worker"] == w).unwrap()["state"].clone();
    assert_eq!(
        (state("wa"), state("wb")),
        ("dead".into(), "finished".into()),
        "{status}"
    );
    assert_eq!(fleet.merges().len(), 1);
    fleet.assert_nothing_left();
    // The morning report tells it: wa lost it, wb took it over and merged it.
    let report = fleet_report_json(&fleet, "morning");
    let workers = report["story"]["lanes"]["workers"]
        .as_array()
        .unwrap()
        .clone();
    let lane = |w: &str| workers.iter().find(|l| l["worker"] == w).unwrap().clone();
    let wa = lane("wa");
    assert!(wa["ended"][0].as_str().unwrap().starts_with("lost"), "{wa}");
    let wb = lane("wb");
    assert!(
        wb["items"][0]
            .as_str()
            .unwrap()
            .contains("(taken over from wa)"),
        "{wb}"
    );
    assert!(
        wb["ended"][0].as_str().unwrap().starts_with("merged"),
        "{wb}"
    );
}

#[test]
fn sigterm_checkpoints_pushes_and_releases_the_claim_within_the_grace() {
    let fleet = Fleet::new(1, 60_000, "[fleet]\nlease = \"3s\"\ngrace = \"15s\"\n");
    let a = fleet.worker("wa");
    wait_for_pushed_work(&fleet);
    assert_eq!(fleet.refs("refs/ralph/fleet/night/claims/").len(), 1);
    let sent = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(a.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let a = wait(a);
    assert!(
        sent.elapsed() < Duration::from_secs(15),
        "within the grace: {:?}",
        sent.elapsed()
    );
    assert_eq!(a.code, Some(130), "{}", a.stderr);
    assert_eq!(a.of("released").len(), 1, "{}", a.stderr);
    assert!(
        fleet.refs("refs/ralph/fleet/night/claims/").is_empty(),
        "claim released"
    );
    // The work is on the item's branch on the remote, in a commit.
    let branch = fleet.refs("refs/heads/ralph/fleet/night/items/");
    assert_eq!(branch.len(), 1);
    let files = git(&fleet.bare, &["ls-tree", "-r", "--name-only", &branch[0]]);
    assert!(files.contains("done/"), "{files}");
    assert_eq!(fleet.merges().len(), 0);
    // Its end (exit 130) is on the remote too, within the same grace.
    let end = records_under(&fleet, "refs/ralph/fleet/night/ends/");
    assert_eq!(
        end.last().map(|r| &r["event"]),
        Some(&"fleet_finished".into())
    );
    assert_eq!(end.last().unwrap()["exit_code"], 130, "{end:?}");
}

/// A fleet worker started from a terminal that closes (an ssh session
/// dropped) gets SIGHUP: like a loop and a coordinator, it goes on
/// (before: the signal's default action ended it, its item's loop killed
/// by the parent-death signal with no checkpoint).
#[test]
fn sighup_leaves_the_fleet_worker_working_to_the_end() {
    let fleet = Fleet::new(1, 3000, "[fleet]\nlease = \"3s\"\n");
    let a = fleet.worker("wa");
    common::wait_until("the claim", LIMIT, || {
        !fleet.refs("refs/ralph/fleet/night/claims/").is_empty()
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(a.id() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let a = wait(a);
    assert_eq!(a.code, Some(0), "{}", a.stderr);
    assert_eq!(fleet.merges().len(), 1);
    fleet.assert_nothing_left();
}

/// A fleet worker takes the one start of every run: its clone's lock. A
/// second worker started in the same clone is refused, naming the first
/// (before: both worked in one clone, on one set of worktrees), and
/// `ralph stop` there, as the refusal's hint says, stops the first as
/// SIGTERM does (before: "no ralph run is in progress here").
#[test]
fn a_clone_holds_one_worker_and_ralph_stop_stops_it() {
    let fleet = Fleet::new(1, 60_000, "[fleet]\nlease = \"3s\"\ngrace = \"15s\"\n");
    let dir = fleet.clone("wa");
    let a = worker_in(&dir, "wa");
    wait_for_pushed_work(&fleet);
    let b = wait(worker_in(&dir, "wb"));
    assert_eq!(b.code, Some(2), "{}", b.stderr);
    assert!(
        b.stderr.contains(&format!(
            "another ralph run is already supervising this project (pid {})",
            a.id()
        )),
        "{}",
        b.stderr
    );
    let stop = Command::new(common::BIN)
        .current_dir(&dir)
        .env("RALPH_LOG", "off")
        .arg("stop")
        .output()
        .unwrap();
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    let a = wait(a);
    assert_eq!(a.code, Some(130), "{}", a.stderr);
    assert_eq!(a.of("released").len(), 1, "{}", a.stderr);
    assert!(fleet.refs("refs/ralph/fleet/night/claims/").is_empty());
}

#[test]
fn an_unreachable_remote_is_retried_and_said_and_the_work_kept() {
    let fleet = Fleet::new(
        1,
        7000,
        "[fleet]\nlease = \"3s\"\nmax_retry_wait = \"1s\"\n",
    );
    let a = fleet.worker("wa");
    common::wait_until("the claim", LIMIT, || {
        !fleet.refs("refs/ralph/fleet/night/claims/").is_empty()
    });
    let away = fleet.tmp.path().join("away.git");
    std::fs::rename(&fleet.bare, &away).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    std::fs::rename(&away, &fleet.bare).unwrap();
    let a = wait(a);
    assert_eq!(a.code, Some(0), "{}", a.stderr);
    assert!(!a.of("unreachable").is_empty(), "said: {}", a.stderr);
    assert!(!a.of("reconnected").is_empty());
    assert_eq!(fleet.merges().len(), 1);
    assert_eq!(fleet.run_files("done").len(), 1);
    fleet.assert_nothing_left();
}

#[test]
fn workers_reach_an_http_remote_through_the_users_credential_helper() {
    use common::git_http::{GitHttp, PASSWORD, USER};
    let fleet = Fleet::new(2, 100, "[fleet]\nnetwork_timeout = \"20s\"\n");
    let server = GitHttp::start(fleet.tmp.path());
    let url = format!("{}remote.git", server.url);
    let clone_over_http = |name: &str, helper: bool| {
        let dir = fleet.clone(name);
        git(&dir, &["remote", "set-url", "origin", &url]);
        if helper {
            let answer = format!("!f() {{ echo username={USER}; echo password={PASSWORD}; }}; f");
            git(&dir, &["config", "credential.helper", &answer]);
        }
        dir
    };
    // Without a credential: refused at once, no prompt waited for.
    let started = Instant::now();
    let refused = wait(worker_in(&clone_over_http("nohelper", false), "w0"));
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("cannot start the fleet worker"),
        "{}",
        refused.stderr
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(fleet.refs("refs/heads/ralph/fleet/").is_empty());
    // With the user's credential helper: the whole run over HTTP.
    let a = worker_in(&clone_over_http("h1", true), "w1");
    let b = worker_in(&clone_over_http("h2", true), "w2");
    both_succeed(a, b);
    assert_eq!(fleet.merges().len(), 2);
    fleet.assert_nothing_left();
    let log = server.log();
    assert!(
        log.iter().any(|(_, _, s)| *s == 401),
        "asked for credentials"
    );
    assert!(
        log.iter()
            .any(|(m, p, s)| m == "POST" && p.ends_with("git-receive-pack") && *s == 200),
        "pushed over HTTP: {log:?}"
    );
}

#[test]
fn a_conflicting_item_goes_back_to_its_loop_which_merges_the_run_branch() {
    // Every item writes the same file: the second merge conflicts. Asked to
    // bring its branch up to date, the agent merges the run branch and keeps
    // both sides.
    let work = r#"if grep -q 'Before anything else' .ralph/worker-plan.md; then
  run=refs/ralph/seen/night/heads/run
  git merge --no-edit "$run" || { (git show :2:shared.txt; git show :3:shared.txt) > shared.txt; git add shared.txt; git -c user.name=a -c user.email=a@a commit -q --no-edit; }
else
  echo "$RALPH_FLEET_ITEM" > shared.txt
fi"#;
    let scenario = format!(
        "[[step]]\ncontext = 20000\ncommand = {}\n[[step]]\nsleep_ms = 1500\n[[step]]\ncommand = {}\n[[step]]\nresult = \"Done. <promise>COMPLETE</promise>\"\n",
        common::toml_string(work),
        common::toml_string(r"sed -i 's/- \[ \]/- [x]/' .ralph/worker-plan.md"),
    );
    let fleet = Fleet::with(2, &scenario, "");
    let (a, b) = fleet.two_workers_succeed();
    let conflicts: Vec<&Value> = a
        .of("conflict")
        .into_iter()
        .chain(b.of("conflict"))
        .collect();
    assert_eq!(conflicts.len(), 1, "{conflicts:?}");
    assert_eq!(conflicts[0]["files"], serde_json::json!(["shared.txt"]));
    assert_eq!(fleet.merges().len(), 2);
    let shared = fleet.run_file("shared.txt").unwrap();
    assert_eq!(shared.lines().count(), 2, "both sides kept: {shared}");
    assert!(
        fleet
            .run_file("fix_plan.md")
            .unwrap()
            .matches("- [x]")
            .count()
            == 2
    );
    fleet.assert_nothing_left();
}

#[test]
fn the_morning_report_covers_the_fleet_from_any_clone() {
    let fleet = Fleet::new(4, 200, "[loop]\nmax_iterations = 20\nmax_cost_usd = 5.0\n");
    let (a, b) = fleet.two_workers_succeed();
    let merged_by = |e: &Ended| e.of("merged").len();
    let report = fleet_report_json(&fleet, "morning");
    assert_eq!(report["outcome"], "completed", "{report}");
    assert_eq!(
        (report["items_done"].as_u64(), report["items_open"].as_u64()),
        (Some(4), Some(0))
    );
    // Each item's loop and its iteration, numbered across the fleet, labelled.
    let iterations = report["iterations"].as_array().unwrap();
    assert_eq!(iterations.len(), 4, "{report}");
    for (n, it) in iterations.iter().enumerate() {
        assert_eq!(it["iteration"].as_u64(), Some(n as u64 + 1));
        let item = it["item"].as_str().unwrap();
        assert!(item.starts_with("item number "), "{it}");
        assert!(matches!(it["worker"].as_str(), Some("wa" | "wb")), "{it}");
        assert!(it["cost_usd"].as_f64().unwrap() > 0.0, "{it}");
        assert!(
            !it["readings"].as_array().unwrap().is_empty(),
            "context readings kept: {it}"
        );
    }
    // A lane per worker: what it claimed, how each of its loops ended.
    let lanes = &report["story"]["lanes"];
    let workers = lanes["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "{lanes}");
    for (w, e) in [("wa", &a), ("wb", &b)] {
        let lane = workers.iter().find(|l| l["worker"] == w).unwrap();
        assert_eq!(
            lane["items"].as_array().unwrap().len(),
            merged_by(e),
            "{lane}"
        );
        assert_eq!(
            lane["iterations"].as_u64(),
            Some(merged_by(e) as u64),
            "{lane}"
        );
        let ended = lane["ended"].as_array().unwrap();
        assert!(
            ended
                .iter()
                .all(|x| x.as_str().unwrap().starts_with("merged")),
            "{lane}"
        );
    }
    // The merge history, and the totals against the budgets.
    assert_eq!(lanes["merges"].as_array().unwrap().len(), 4);
    let totals = &lanes["fleet"];
    assert_eq!(
        (totals["items_done"].as_u64(), totals["iterations"].as_u64()),
        (Some(4), Some(4)),
        "{totals}"
    );
    assert_eq!(
        (
            totals["max_iterations"].as_u64(),
            totals["max_cost_usd"].as_f64()
        ),
        (Some(20), Some(5.0))
    );
    let summed: f64 = iterations
        .iter()
        .map(|i| i["cost_usd"].as_f64().unwrap())
        .sum();
    assert!(
        (totals["cost_usd"].as_f64().unwrap() - summed).abs() < 1e-9,
        "{totals}"
    );
    assert!(lanes.get("left").is_none(), "nothing left: {lanes}");
    assert_eq!(report["metrics"]["items_checked"], 4);
    assert_eq!(report["metrics"]["items_per_iteration"], 1.0);
    // The text and the page, by the report's own renderers.
    let (text, dir) = fleet_report(&fleet, "morning2", &[]);
    assert!(text.contains("ralph report · run fleet-night"), "{text}");
    assert!(
        text.contains("fleet          night on origin: 4 of 4 items merged"),
        "{text}"
    );
    assert!(
        text.contains("fleet spent    4 iteration(s) of 20, $"),
        "{text}"
    );
    assert!(text.contains("worker         wa: "), "{text}");
    let page = dir.join(".ralph/fleet/night/report.html");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(crate::morning_report::well_formed(&html) > 100);
    assert!(
        html.contains("<h2>Fleet</h2>") && html.contains("<h2>Workers</h2>"),
        "fleet lanes"
    );
    assert!(html.contains("wa: item number "), "iterations labelled");
    if let Some(bin) = crate::morning_report::chromium() {
        assert_eq!(
            crate::morning_report::console_errors(&bin, &page),
            Vec::<String>::new()
        );
    }
}

#[test]
fn the_fleet_report_is_read_from_the_machines_own_records_on_the_remote() {
    let fleet = Fleet::new(4, 200, "");
    let (a, b) = fleet.two_workers_succeed();
    // Each loop's record on the remote carries its machine's own records:
    // its claim and, for a merged round, the merge's own `fleet_merged`.
    let loops = fleet.refs("refs/ralph/fleet/night/loops/");
    assert_eq!(loops.len(), 4, "{loops:?}");
    let mut on_remote = Vec::new();
    for r in &loops {
        let lines = git(&fleet.bare, &["show", &format!("{r}:fleet.jsonl")]);
        let records: Vec<Value> = lines
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let worker = r.rsplit('-').next().unwrap();
        assert!(records.iter().all(|x| x["worker"] == worker), "{lines}");
        let kinds: Vec<&str> = records.iter().filter_map(|x| x["event"].as_str()).collect();
        assert!(kinds.contains(&"fleet_claimed"), "{kinds:?}");
        assert_eq!(kinds.last(), Some(&"fleet_merged"), "{kinds:?}");
        on_remote.extend(records);
    }
    // What the machines said (`--json`) is what their records on the remote say.
    let said: Vec<&Value> = a.of("merged").into_iter().chain(b.of("merged")).collect();
    assert_eq!(said.len(), 4);
    for m in &said {
        assert!(on_remote.contains(m), "{m} not on the remote");
    }
    // The report's rows are those records: a lane per machine, each merge
    // at the time its machine said it (to the millisecond: a merge
    // commit's time has only seconds), with the commit it named.
    let report = fleet_report_json(&fleet, "morning");
    let lanes = &report["story"]["lanes"];
    let names: Vec<&str> = (lanes["workers"].as_array().unwrap().iter())
        .map(|l| l["worker"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{lanes}");
    assert!(names.contains(&"wa") && names.contains(&"wb"), "{names:?}");
    let rows: Vec<(String, String, String)> = (lanes["merges"].as_array().unwrap().iter())
        .map(|m| {
            (
                m["worker"].to_string(),
                m["at"].to_string(),
                m["id"].to_string(),
            )
        })
        .collect();
    let mut want: Vec<(String, String, String)> = said
        .iter()
        .map(|m| {
            (
                m["worker"].to_string(),
                m["ts"].to_string(),
                m["commit"].to_string(),
            )
        })
        .collect();
    want.sort_by(|x, y| x.1.cmp(&y.1));
    assert_eq!(rows, want, "{lanes}");
    for it in report["iterations"].as_array().unwrap() {
        let (w, item) = (it["worker"].as_str().unwrap(), it["item"].as_str().unwrap());
        let claimed = (on_remote.iter())
            .any(|x| x["event"] == "fleet_claimed" && x["worker"] == w && x["text"] == item);
        assert!(claimed, "row {it} from no claim of its machine");
    }
}

#[test]
fn a_fleets_sessions_are_granted_before_they_start_however_fast_its_loops_go() {
    // Iterations shorter than a push: loops that start their next session
    // before their worker has put the last on the ledger (each given the
    // remaining 6 as its --max-iterations) spent up to 18 of a budget of 6.
    let (fleet, ended) = three_endless_workers_on_six_iterations(0);
    let sessions: usize = (ended.iter())
        .map(|e| {
            (e.events.iter())
                .filter(|v| v["event"] == "iteration_ended")
                .count()
        })
        .sum();
    let l = ledger(&fleet);
    assert_eq!(l["iterations"].as_u64().unwrap() as usize, sessions, "{l}");
    // The two other machines' sessions at most, whatever the load.
    assert!((6..=6 + 2).contains(&sessions), "{sessions} sessions: {l}");
    for e in &ended {
        assert_eq!(e.code, Some(5), "{}", e.stderr);
    }
}

/// Three workers on items that never finish (each iteration `pause_ms`
/// long), a fleet budget of 6 iterations; each worker run to its end.
fn three_endless_workers_on_six_iterations(pause_ms: u64) -> (Fleet, Vec<Ended>) {
    let fleet = Fleet::with(
        3,
        &endless(pause_ms),
        "[loop]\nmax_iterations = 6\n\n[breaker]\nno_progress = 50\n\n[fleet]\nlease = \"3s\"\n",
    );
    let workers: Vec<Child> = ["w1", "w2", "w3"].iter().map(|w| fleet.worker(w)).collect();
    let ended = workers.into_iter().map(wait).collect();
    (fleet, ended)
}

/// An item that is never done: every iteration adds a line to the item's
/// file (progress), pauses `pause_ms` and ends without the promise.
fn endless(pause_ms: u64) -> String {
    let cmd = r#"echo "$RALPH_WORKER" >> "work-$RALPH_FLEET_ITEM.txt""#;
    format!(
        "cost_usd = 0.1\n[[step]]\ncontext = 20000\ncommand = {}\n[[step]]\nsleep_ms = {pause_ms}\n[[step]]\nresult = \"Still on it.\"\n",
        common::toml_string(cmd),
    )
}

/// What the fleet's ledger on the remote says.
fn ledger(fleet: &Fleet) -> Value {
    let msg = git(
        &fleet.bare,
        &["log", "-1", "--format=%B", "refs/ralph/fleet/night/ledger"],
    );
    serde_json::from_str(msg.split_once("\n\n").unwrap().1.trim()).unwrap()
}

#[test]
fn the_fleets_budget_is_counted_as_iterations_end_and_stops_every_worker() {
    // Three workers on items that never finish, a budget of 6 iterations
    // for the fleet. Counted only when an item's loop ends, each worker's
    // loop would be given the 6 and spend them: 18 in all.
    let (fleet, ended) = three_endless_workers_on_six_iterations(1200);
    for e in &ended {
        assert_eq!(e.code, Some(5), "{}", e.stderr);
        assert!(!e.of("budget_spent").is_empty(), "{}", e.stderr);
    }
    let l = ledger(&fleet);
    let spent = l["iterations"].as_u64().unwrap();
    // Each session is granted once the ledger has the last: over by at
    // most the sessions the two other machines were in.
    assert!((6..=6 + 2).contains(&spent), "{l}");
    // Every iteration that ran is on the ledger, no more.
    let ran: usize = ended
        .iter()
        .map(|e| {
            e.events
                .iter()
                .filter(|v| v["event"] == "iteration_ended")
                .count()
        })
        .sum();
    assert_eq!(spent as usize, ran, "{l}");
    assert!(
        (l["cost_usd"].as_f64().unwrap() - 0.1 * ran as f64).abs() < 1e-6,
        "{l}"
    );
    // Each item was released with its work pushed; the report says why.
    assert!(fleet.refs("refs/ralph/fleet/night/claims/").is_empty());
    assert_eq!(fleet.refs("refs/heads/ralph/fleet/night/items/").len(), 3);
    let report = fleet_report_json(&fleet, "morning");
    assert_eq!(report["outcome"], "budget_spent", "{report}");
    let left = report["story"]["lanes"]["left"].as_array().unwrap();
    assert_eq!(left.len(), 3);
    assert!(
        left.iter().all(|l| l["why"]
            .as_str()
            .unwrap()
            .contains("the fleet's budget is spent")),
        "{left:?}"
    );
}

/// The loop records on the remote (`loops/`), as JSON.
fn loop_records(fleet: &Fleet) -> Vec<Value> {
    fleet
        .refs("refs/ralph/fleet/night/loops/")
        .iter()
        .map(|r| {
            let msg = git(&fleet.bare, &["log", "-1", "--format=%B", r]);
            serde_json::from_str(msg.split_once("\n\n").unwrap().1.trim()).unwrap()
        })
        .collect()
}

#[test]
fn one_usage_limit_pauses_the_fleet_until_it_resets() {
    // wa's agent runs into a usage limit at once; wb is mid-item then, and
    // wc starts after it.
    let limited = format!(
        "[[iteration]]\n[[iteration.step]]\ncontext = 20000\n[[iteration.step]]\nrate_limit = \"rejected\"\nresets_in_secs = 8\nrate_limit_type = \"five_hour\"\n[[iteration.step]]\nerror = \"rate_limit\"\nresets_in_secs = 8\n\n[[iteration]]\n{}",
        scenario(100).replace("[[step]]", "[[iteration.step]]")
    );
    let fleet = Fleet::new(
        3,
        6000,
        "[rate_limit]\nmax_wait = \"1m\"\n\n[fleet]\nlease = \"3s\"\n",
    );
    let b = fleet.worker("wb");
    common::wait_until("wb's claim", LIMIT, || {
        !fleet.refs("refs/ralph/fleet/night/claims/").is_empty()
    });
    let dir = fleet.clone("wa");
    let scenario = fleet.tmp.path().join("limited.toml");
    std::fs::write(&scenario, &limited).unwrap();
    let agent = format!("ralph sim {}", scenario.display());
    let a = worker_with(&dir, "wa", &["--agent", &agent]);
    common::wait_until("the limit on the ledger", Duration::from_secs(60), || {
        ledger(&fleet).get("limit").is_some()
    });
    let limit = ledger(&fleet)["limit"].clone();
    assert_eq!(limit["by"], "wa", "{limit}");
    let until: jiff::Timestamp = limit["until"].as_str().unwrap().parse().unwrap();
    let c = fleet.worker("wc");
    let (a, b, c) = (wait(a), wait(b), wait(c));
    for e in [&a, &b, &c] {
        assert_eq!(e.code, Some(0), "{}", e.stderr);
    }
    assert_eq!(a.of("limit_shared").len(), 1, "{}", a.stderr);
    // wb's loop was checkpointed and went on after the reset.
    let paused = b.of("paused");
    assert_eq!(paused.len(), 1, "{}", b.stderr);
    assert_eq!(paused[0]["by"], "wa");
    assert!(paused[0]["item"].is_string());
    let records = loop_records(&fleet);
    let rounds: Vec<&Value> = records.iter().filter(|r| r["worker"] == "wb").collect();
    assert_eq!(rounds.len(), 2, "{records:#?}");
    let (first, second) = if rounds[0]["round"] == 1 {
        (rounds[0], rounds[1])
    } else {
        (rounds[1], rounds[0])
    };
    assert_eq!(
        (first["end"].as_str(), second["end"].as_str()),
        (Some("paused"), Some("merged"))
    );
    let resumed: jiff::Timestamp = second["started_at"].as_str().unwrap().parse().unwrap();
    assert!(
        resumed >= until,
        "wb went on at {resumed}, before the reset at {until}"
    );
    // wc started no item before the reset, and said why.
    let waited = c.of("paused");
    assert!(
        !waited.is_empty() && waited[0].get("item").is_none(),
        "{}",
        c.stderr
    );
    let claimed: jiff::Timestamp = c.of("claimed")[0]["ts"].as_str().unwrap().parse().unwrap();
    assert!(
        claimed >= until,
        "wc claimed at {claimed}, before the reset at {until}"
    );
    assert_eq!(fleet.merges().len(), 3);
    fleet.assert_nothing_left();
    // Every iteration, the paused one and the limited one included, on the ledger once.
    let ran: usize = [&a, &b, &c]
        .iter()
        .map(|e| {
            e.events
                .iter()
                .filter(|v| v["event"] == "iteration_ended")
                .count()
        })
        .sum();
    assert_eq!(ledger(&fleet)["iterations"].as_u64(), Some(ran as u64));
}

#[test]
fn iterations_that_end_while_the_remote_is_away_reach_the_ledger_once_it_answers() {
    // One item that is never done, eight iterations of about half a second;
    // the remote goes away for three of them.
    let fleet = Fleet::with(
        1,
        &endless(400),
        "[loop]\nmax_iterations = 8\n\n[breaker]\nno_progress = 50\n\n[fleet]\nlease = \"30s\"\nmax_retry_wait = \"1s\"\n",
    );
    let a = fleet.worker("wa");
    common::wait_until("the first iteration on the ledger", LIMIT, || {
        !fleet.refs("refs/ralph/fleet/night/ledger").is_empty()
            && ledger(&fleet)["iterations"].as_u64() >= Some(1)
    });
    let away = fleet.tmp.path().join("away.git");
    std::fs::rename(&fleet.bare, &away).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    std::fs::rename(&away, &fleet.bare).unwrap();
    let a = wait(a);
    assert!(!a.of("unreachable").is_empty(), "{}", a.stderr);
    let ran = a
        .events
        .iter()
        .filter(|v| v["event"] == "iteration_ended")
        .count();
    assert_eq!(ran, 8, "{}", a.stderr);
    let l = ledger(&fleet);
    assert_eq!(
        l["iterations"].as_u64(),
        Some(8),
        "every iteration once: {l}"
    );
    assert!((l["cost_usd"].as_f64().unwrap() - 0.8).abs() < 1e-6, "{l}");
    assert_eq!(l["by_worker"]["wa"]["iterations"].as_u64(), Some(8));
}

/// A one-iteration scenario: `work` (after `LOG_SESSION`), a pause, the
/// item checked off, the promise.
fn scenario_doing(work: &str, pause_ms: u64) -> String {
    format!(
        "[[step]]\ncontext = 20000\ncommand = {}\n[[step]]\ncommand = {}\n[[step]]\nsleep_ms = {pause_ms}\n[[step]]\ncommand = {}\n[[step]]\nresult = \"Done. <promise>COMPLETE</promise>\"\n",
        common::toml_string(LOG_SESSION),
        common::toml_string(work),
        common::toml_string(r"sed -i 's/- \[ \]/- [x]/' .ralph/worker-plan.md"),
    )
}

#[test]
fn an_item_that_still_conflicts_is_given_up_once_for_the_whole_fleet() {
    // Both items write the same file and the agent never merges the run
    // branch: the second item conflicts three times (its round, then two
    // rounds asked to bring its branch up to date), then it is given up —
    // by one worker, for all three.
    let scenario = scenario_doing(r#"echo "$RALPH_FLEET_ITEM" > shared.txt"#, 800);
    let fleet = Fleet::with(2, &scenario, "[fleet]\nlease = \"3s\"\n");
    let workers: Vec<Child> = ["wa", "wb", "wc"].iter().map(|w| fleet.worker(w)).collect();
    let ended: Vec<Ended> = workers.into_iter().map(wait).collect();
    let story: Vec<String> = ended
        .iter()
        .flat_map(|e| e.events.iter().filter(|v| v.get("worker").is_some()))
        .map(|v| v.to_string())
        .collect();
    assert_eq!(fleet.merges().len(), 1);
    let conflicts: usize = ended.iter().map(|e| e.of("conflict").len()).sum();
    assert_eq!(conflicts, 3, "{story:#?}");
    let given: Vec<&Value> = ended.iter().flat_map(|e| e.of("given_up")).collect();
    assert_eq!(given.len(), 1, "{story:#?}");
    assert!(
        given[0]["why"]
            .as_str()
            .unwrap()
            .contains("still conflicts")
    );
    // Paid: one session for the merged item, three for the other; never
    // another worker's try at the same end.
    let sessions = fleet.sessions();
    assert_eq!(sessions.len(), 4, "{sessions:#?}");
    // Every worker ends with the item left to a person (exit 4).
    for e in &ended {
        assert_eq!(e.code, Some(4), "{}", e.stderr);
        assert_eq!(e.of("left_to_a_person").len(), 1, "{}", e.stderr);
    }
    // Its work is pushed; its claim stays, marked; status and report say why.
    assert_eq!(fleet.refs("refs/ralph/fleet/night/claims/").len(), 1);
    assert_eq!(fleet.refs("refs/heads/ralph/fleet/night/items/").len(), 1);
    let status = fleet_status(&fleet);
    let left: Vec<&Value> = status["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["state"] != "done")
        .collect();
    assert_eq!(left.len(), 1, "{status}");
    assert_eq!(left[0]["state"], "given_up", "{status}");
    let report = fleet_report_json(&fleet, "morning");
    let left = report["story"]["lanes"]["left"].as_array().unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(
        left[0]["why"]
            .as_str()
            .unwrap()
            .contains("given up for the fleet by")
            && left[0]["why"].as_str().unwrap().contains("still conflicts"),
        "{left:?}"
    );
}

#[test]
fn a_push_the_remotes_rules_refuse_is_shown_with_the_servers_message_and_not_redone() {
    let fleet = Fleet::with(
        1,
        &scenario_doing("mkdir -p done && date > done/it", 300),
        "[fleet]\nlease = \"3s\"\n",
    );
    // The server takes the run branch's creation, never an update of it.
    fleet.pre_receive(
        "#!/bin/sh\nwhile read old new ref; do\n  case \"$ref\" in refs/heads/ralph/fleet/*/run)\n    if [ \"$old\" != 0000000000000000000000000000000000000000 ]; then\n      echo \"policy: merges into $ref need a review\" >&2; exit 1\n    fi;;\n  esac\ndone\n",
    );
    let (a, b) = (fleet.worker("wa"), fleet.worker("wb"));
    let ended = [wait(a), wait(b)];
    let refused: Vec<&Value> = ended.iter().flat_map(|e| e.of("refused")).collect();
    assert_eq!(refused.len(), 1, "{}\n{}", ended[0].stderr, ended[1].stderr);
    assert!(
        refused[0]["message"]
            .as_str()
            .unwrap()
            .contains("policy: merges into refs/heads/ralph/fleet/night/run need a review"),
        "{refused:?}"
    );
    assert!(
        ended.iter().all(|e| e.of("lost").is_empty()),
        "not a lost claim"
    );
    // Done once, paid once; the one who met the refusal exits 1, the other 4.
    assert_eq!(fleet.sessions().len(), 1, "{:?}", fleet.sessions());
    let mut codes: Vec<Option<i32>> = ended.iter().map(|e| e.code).collect();
    codes.sort();
    assert_eq!(
        codes,
        [Some(1), Some(4)],
        "{}\n{}",
        ended[0].stderr,
        ended[1].stderr
    );
    let status = fleet_status(&fleet);
    let item = &status["items"][0];
    assert_eq!(item["state"], "given_up", "{status}");
    assert!(
        item["given_up"].as_str().unwrap().contains("need a review"),
        "{status}"
    );
    assert_eq!(item["pushed"], true, "the work is on its branch: {status}");
}

/// The remote refuses every merge. The first worker pays for one item
/// and gives it up (exit 1, as above); a worker started after it, with
/// items still open, starts no session: its work would meet the same rule
/// (before: each worker of the fleet paid for one item, then met it).
#[test]
fn after_the_remotes_rules_refused_a_push_no_other_worker_pays_for_an_item() {
    let fleet = Fleet::with(
        3,
        &scenario_doing("mkdir -p done && date > done/$RALPH_FLEET_ITEM", 300),
        "[fleet]\nlease = \"3s\"\n",
    );
    fleet.pre_receive(
        "#!/bin/sh\nwhile read old new ref; do\n  case \"$ref\" in refs/heads/ralph/fleet/*/run)\n    if [ \"$old\" != 0000000000000000000000000000000000000000 ]; then\n      echo \"policy: merges need a review\" >&2; exit 1\n    fi;;\n  esac\ndone\n",
    );
    let a = wait(fleet.worker("wa"));
    assert_eq!(a.code, Some(1), "{}", a.stderr);
    assert_eq!(fleet.sessions().len(), 1, "{:?}", fleet.sessions());
    let b = wait(fleet.worker("wb"));
    assert_eq!(b.code, Some(1), "{}", b.stderr);
    assert_eq!(fleet.sessions().len(), 1, "wb paid: {:?}", fleet.sessions());
    let said = b.of("rules_refuse");
    assert_eq!(said.len(), 1, "{}", b.stderr);
    assert!(
        said[0]["why"]
            .as_str()
            .unwrap()
            .contains("policy: merges need a review"),
        "{said:?}"
    );
    let status = fleet_status(&fleet);
    let states: Vec<&str> = (status["items"].as_array().unwrap().iter())
        .map(|i| i["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states.iter().filter(|s| **s == "open").count(),
        2,
        "{status}"
    );
}

#[test]
fn a_remote_gone_for_good_ends_the_worker_after_the_bound() {
    let fleet = Fleet::with(
        1,
        &scenario_doing("mkdir -p done && date > done/it", 120_000),
        "[fleet]\nlease = \"3s\"\nmax_retry_wait = \"1s\"\nmax_unreachable = \"4s\"\n",
    );
    let a = fleet.worker("wa");
    common::wait_until("the claim", LIMIT, || {
        !fleet.refs("refs/ralph/fleet/night/claims/").is_empty()
    });
    let gone = Instant::now();
    std::fs::rename(&fleet.bare, fleet.tmp.path().join("gone.git")).unwrap();
    let a = wait(a);
    assert_eq!(a.code, Some(2), "{}", a.stderr);
    let said = a.of("remote_gone");
    assert_eq!(said.len(), 1, "{}", a.stderr);
    assert!(said[0]["after_secs"].as_u64().unwrap() >= 4);
    // The bound, the grace for the loop's checkpoint, a few tries: not the night.
    assert!(
        gone.elapsed() < Duration::from_secs(60),
        "{:?}",
        gone.elapsed()
    );
    assert_eq!(fleet.sessions().len(), 1);
    // The loop was checkpointed: its work is committed in the clone.
    let clone = fleet.tmp.path().join("wa");
    let log = git(&clone, &["log", "--all", "--format=%s"]);
    assert!(
        log.lines().any(|l| l.starts_with("ralph: checkpoint")),
        "{log}"
    );
}

#[test]
fn a_fleet_name_used_again_on_a_finished_run_with_new_items_says_so_and_exits_2() {
    let fleet = Fleet::with(
        1,
        &scenario_doing("mkdir -p done && date > done/it", 100),
        "",
    );
    let a = wait(fleet.worker("wa"));
    assert_eq!(a.code, Some(0), "{}", a.stderr);
    // The worker's own log is the one stream's: 0600, records with its name.
    let log = fleet.tmp.path().join("wa/.ralph/fleet/night/events.jsonl");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&log).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "{}", log.display());
    let records: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        records
            .iter()
            .all(|r| r["worker"] == "wa" && r["ts"].is_string()),
        "{records:?}"
    );
    assert_eq!(
        records.first().unwrap()["event"],
        "fleet_joined",
        "{records:?}"
    );
    assert_eq!(
        records.last().unwrap()["event"],
        "fleet_finished",
        "{records:?}"
    );
    // The next night's plan, pushed to main; the same command again.
    let seed = fleet.tmp.path().join("seed");
    std::fs::write(
        seed.join("fix_plan.md"),
        "# Night\n\n- [ ] item number 1\n- [ ] a new item for tonight\n",
    )
    .unwrap();
    git(&seed, &["commit", "-q", "-am", "next night"]);
    git(&seed, &["push", "-q", fleet.bare.to_str().unwrap(), "main"]);
    let b = wait(fleet.worker("wb"));
    assert_eq!(b.code, Some(2), "{}", b.stderr);
    assert!(
        b.stderr.contains("already finished its plan"),
        "{}",
        b.stderr
    );
    assert!(b.stderr.contains("a new item for tonight"), "{}", b.stderr);
    assert!(b.stderr.contains("--fleet night-2"), "{}", b.stderr);
    assert_eq!(fleet.sessions().len(), 1, "nothing paid for the refusal");
    // Under a new name, the new plan runs.
    let c = fleet.clone("wc");
    let c = wait(
        Command::new(common::BIN)
            .current_dir(&c)
            .env("RALPH_LOG", "off")
            .args([
                "run", "--remote", "origin", "--fleet", "night-2", "--worker", "wc", "--json",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    assert_eq!(c.code, Some(0), "{}", c.stderr);
    assert_eq!(fleet.sessions().len(), 3);
}

/// The records on the remote under `prefix`, each a `fleet.jsonl` line.
fn records_under(fleet: &Fleet, prefix: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for r in fleet.refs(prefix) {
        let lines = git(&fleet.bare, &["show", &format!("{r}:fleet.jsonl")]);
        out.extend(
            lines
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
    }
    out
}

/// What a worker says after its last loop record (`fleet_finished`) is
/// pushed once as it exits (its end record), so the morning report, read
/// from the remote in any clone, knows how each machine ended.
#[test]
fn a_workers_last_records_reach_the_remote_and_the_morning_report() {
    let fleet = Fleet::with(2, &scenario_doing("date > done.txt", 100), "");
    let a = wait(fleet.worker("wa"));
    assert_eq!(a.code, Some(0), "{}", a.stderr);
    // Paid once per item.
    assert_eq!(fleet.sessions().len(), 2, "{:?}", fleet.sessions());
    let ends = fleet.refs("refs/ralph/fleet/night/ends/");
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert!(ends[0].contains("/ends/wa-"), "{ends:?}");
    let on_remote = records_under(&fleet, "refs/ralph/fleet/night/ends/");
    let finished = a.of("finished");
    assert_eq!(finished.len(), 1, "{}", a.stderr);
    assert_eq!(on_remote.last(), Some(finished[0]), "{on_remote:?}");
    assert_eq!(finished[0]["exit_code"], 0);
    // Nothing carried twice: the end record holds only what no loop record did.
    let in_loops = records_under(&fleet, "refs/ralph/fleet/night/loops/");
    assert!(
        on_remote.iter().all(|r| !in_loops.contains(r)),
        "{on_remote:?}"
    );
    let report = fleet_report_json(&fleet, "morning");
    let lanes = report["story"]["lanes"]["workers"].as_array().unwrap();
    assert_eq!(lanes.len(), 1, "{report}");
    assert_eq!(lanes[0]["exit_code"], 0, "{report}");
    let (_, clone) = fleet_report(&fleet, "morning-page", &[]);
    let page = std::fs::read_to_string(clone.join(".ralph/fleet/night/report.html")).unwrap();
    assert!(page.contains("merged, the worker exited 0"), "{page}");
}

/// A remote that does not answer the worker's last push (its final
/// status, its end record: one atomic push) cannot hold its exit: the
/// push is bounded by a third of `[fleet] grace` (2 s here), not
/// `network_timeout` (30 s here), and tried once; what the remote lacks
/// is said.
#[test]
fn a_remote_that_hangs_on_the_end_record_does_not_hold_the_exit() {
    let fleet = Fleet::with(
        1,
        &scenario_doing("date > done.txt", 100),
        "[fleet]\ngrace = \"6s\"\nnetwork_timeout = \"30s\"\n",
    );
    fleet.pre_receive(
        "#!/bin/sh\nwhile read old new ref; do\n  case \"$ref\" in\n    refs/ralph/fleet/*/ends/*) sleep 120;;\n    refs/ralph/fleet/*/workers/*) git log -1 --format=%s \"$new\" | grep -q ' finished$' && sleep 120;;\n  esac\ndone\nexit 0\n",
    );
    let started = Instant::now();
    let a = wait(fleet.worker("wa"));
    assert_eq!(a.code, Some(0), "{}", a.stderr);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let (missing, said) = unrecorded(&a);
    assert_eq!(missing, ["status", "end_record"], "{said}");
    assert!(said.get("item").is_none(), "nothing held: {said}");
    assert!(fleet.refs("refs/ralph/fleet/night/ends/").is_empty());
    assert_eq!(fleet.sessions().len(), 1);
}

/// A remote that takes the connection and then never answers, for one
/// clone: its `git push`/`git fetch` run these scripts as the remote's
/// `receive-pack`/`upload-pack`, which, while `hang` (a file beside the
/// clones) exists, note the call (when, which, the pid of the sleep it
/// becomes) and sleep for an hour; and otherwise, when `slow` holds a
/// number, note the call and answer after that many seconds.
struct Hang {
    flag: PathBuf,
    slow: PathBuf,
    calls: PathBuf,
}

/// One call to a hanging remote.
struct Call {
    at: jiff::Timestamp,
    what: String,
    pid: i32,
}

impl Hang {
    fn install(fleet: &Fleet, clone: &Path) -> Hang {
        let dir = fleet.tmp.path();
        let hang = Hang {
            flag: dir.join("hang"),
            slow: dir.join("slow"),
            calls: dir.join("calls"),
        };
        for (name, program) in [("receive", "receive-pack"), ("upload", "upload-pack")] {
            let script = dir.join(format!("{name}.sh"));
            std::fs::write(
                &script,
                format!(
                    "#!/bin/sh\nif [ -e '{flag}' ]; then echo \"$(date +%s.%N) {name} $$\" >> '{calls}'; exec sleep 3600; fi\nif [ -s '{slow}' ]; then echo \"$(date +%s.%N) {name} $$\" >> '{calls}'; sleep \"$(cat '{slow}')\"; fi\nexec git {program} \"$@\"\n",
                    flag = hang.flag.display(),
                    calls = hang.calls.display(),
                    slow = hang.slow.display(),
                ),
            )
            .unwrap();
            let mut perms = std::fs::metadata(&script).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
            std::fs::set_permissions(&script, perms).unwrap();
            git(
                clone,
                &[
                    "config",
                    &format!("remote.origin.{}", program.replace('-', "")),
                    script.to_str().unwrap(),
                ],
            );
        }
        hang
    }

    fn hang(&self) {
        std::fs::write(&self.flag, "").unwrap();
    }

    fn answer(&self) {
        let _ = std::fs::remove_file(&self.flag);
    }

    /// The calls made while the remote hung, since `since`.
    fn calls(&self, since: jiff::Timestamp) -> Vec<Call> {
        std::fs::read_to_string(&self.calls)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut parts = l.split(' ');
                let at: f64 = parts.next()?.parse().ok()?;
                let at = jiff::Timestamp::from_nanosecond((at * 1e9) as i128).ok()?;
                let what = parts.next()?.to_string();
                let pid = parts.next()?.parse().ok()?;
                Some(Call { at, what, pid })
            })
            .filter(|c| c.at >= since)
            .collect()
    }

    /// End the sleeps this test's remote started that are still there
    /// (each by its pid): what a worker killed -9 leaves behind. Their pids.
    fn leftovers(&self) -> Vec<i32> {
        let alive: Vec<i32> = self
            .calls(jiff::Timestamp::UNIX_EPOCH)
            .into_iter()
            .map(|c| c.pid)
            .filter(|pid| common::command_line(*pid).is_some_and(|c| c.starts_with("sleep 3600")))
            .collect();
        for pid in &alive {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        alive
    }
}

/// The bound of a worker's last push in the tests below: `network_timeout`
/// (a third of the grace is longer).
const END_BOUND: Duration = Duration::from_secs(6);
const HUNG_CONFIG: &str =
    "[fleet]\nlease = \"3s\"\nclock_skew = \"1s\"\ngrace = \"30s\"\nnetwork_timeout = \"6s\"\n";

/// One item whose loop, in worker `wa` only, works half and then waits
/// (stopped by the tests); in any other worker it completes at once.
fn half_done_in_wa() -> Fleet {
    Fleet::with(
        1,
        &scenario_doing(
            r#"mkdir -p done && echo "$RALPH_WORKER" >> done/it && if [ "$RALPH_WORKER" = wa ]; then sleep 120; fi"#,
            0,
        ),
        HUNG_CONFIG,
    )
}

/// When the item's loop in clone `wa` ended (its `run_ended`), once it has.
fn loop_ended_in_wa(fleet: &Fleet) -> Option<jiff::Timestamp> {
    let items = fleet.tmp.path().join("wa/.ralph/fleet/night");
    for entry in std::fs::read_dir(items).ok()?.flatten() {
        let log = entry.path().join(".ralph/events.jsonl");
        let text = std::fs::read_to_string(log).unwrap_or_default();
        for line in text.lines() {
            let Ok(e) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if e["event"] == "run_ended" {
                return e["ts"].as_str()?.parse().ok();
            }
        }
    }
    None
}

/// Worker `wa` with its clone's remote behind a `Hang`, once its item's
/// work is pushed half done.
fn wa_half_done(fleet: &Fleet) -> (Child, Hang) {
    let dir = fleet.clone("wa");
    let hang = Hang::install(fleet, &dir);
    let a = worker_in(&dir, "wa");
    wait_for_pushed_work(fleet);
    (a, hang)
}

fn sigterm(child: &Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

/// Stopped (SIGTERM): the worker, how long its exit took once its item's
/// loop had ended (what comes before is the loop's checkpoint and the
/// calls in flight when the signal came), and when that loop ended.
fn stop_wa(a: Child, fleet: &Fleet) -> (Ended, Duration, jiff::Timestamp) {
    sigterm(&a);
    let a = wait(a);
    let exited = jiff::Timestamp::now();
    let loop_ended = loop_ended_in_wa(fleet).expect("the item's loop ended");
    let took = exited.duration_since(loop_ended).unsigned_abs();
    (a, took, loop_ended)
}

/// What a worker said its last push did not leave on the remote.
fn unrecorded(a: &Ended) -> (Vec<String>, Value) {
    let said = a.of("unrecorded");
    assert_eq!(said.len(), 1, "{:?}", a.events);
    let missing = said[0]["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .collect();
    (missing, said[0].clone())
}

/// Once the remote answers again: `ralph status --fleet` shows the item
/// still held by `wa` (its release never reached the remote); worker `wb`
/// takes it over when the lease expires, from what `wa` pushed, and merges it.
fn taken_over_by_wb(fleet: &Fleet, item: &str) {
    let status = fleet_status(fleet);
    assert_eq!(status["items"][0]["key"], item, "{status}");
    assert_eq!(status["items"][0]["holder"], "wa", "{status}");
    let b = wait(fleet.worker("wb"));
    assert_eq!(b.code, Some(0), "{:?}", b.events);
    let claimed = b.of("claimed");
    assert_eq!(claimed[0]["took_over_from"], "wa", "{:?}", b.events);
    assert_eq!(fleet.merges().len(), 1);
    fleet.assert_nothing_left();
    let it = fleet.run_file("done/it").unwrap();
    assert_eq!(it, "wa\nwb\n", "wa's pushed work carried on");
}

/// A worker's exit pushes everything it leaves on the remote (its status,
/// its end record, the release of its item with its work, its loop's
/// record, what it owes the ledger) in one atomic push with one bound: a
/// remote that hangs on everything delays the exit by that one bound
/// (before: a call each, ~6 bounds), and the worker says what the remote
/// does not have and how the fleet recovers. Once the remote answers again
/// the item's claim expires and another worker takes it over from what was
/// pushed.
#[test]
fn a_remote_that_hangs_at_the_workers_end_costs_one_bound_and_the_item_is_taken_over() {
    let fleet = half_done_in_wa();
    let (a, hang) = wa_half_done(&fleet);
    hang.hang();
    let (a, took, loop_ended) = stop_wa(a, &fleet);
    let calls: Vec<String> = hang.calls(loop_ended).into_iter().map(|c| c.what).collect();
    assert!(
        took < END_BOUND * 2,
        "the exit took {took:?}, {:.1} bounds, calls to the remote {calls:?}: {:?}",
        took.as_secs_f64() / END_BOUND.as_secs_f64(),
        a.events
    );
    assert_eq!(calls, ["receive"], "one call to the remote");
    assert_eq!(
        hang.leftovers(),
        Vec::<i32>::new(),
        "the hung call ended whole"
    );
    assert_eq!(a.code, Some(130), "{:?}", a.events);
    let (missing, said) = unrecorded(&a);
    for part in ["status", "end_record", "release", "snapshot", "loop_record"] {
        assert!(missing.iter().any(|m| m == part), "{part}: {missing:?}");
    }
    assert!(
        said["error"]
            .as_str()
            .unwrap()
            .contains("took longer than 6s"),
        "{said}"
    );
    assert!(
        a.of("released").is_empty(),
        "not said released: {:?}",
        a.events
    );
    // Its last word is still `fleet_finished`.
    assert_eq!(a.events.last().unwrap()["event"], "fleet_finished");
    // The loop's WIP commit is only in the clone: said, by its branch.
    let item = said["item"].as_str().unwrap();
    let local = said["only_local"].as_str().unwrap();
    assert_eq!(local, format!("refs/heads/ralph/fleet/night/items/{item}"));
    assert!(missing.iter().any(|m| m == "branch"), "{missing:?}");
    let tip = git(&fleet.tmp.path().join("wa"), &["rev-parse", local]);
    assert_ne!(Some(tip), remote_ref(&fleet, local), "not on the remote");
    assert!(fleet.refs("refs/ralph/fleet/night/ends/").is_empty());
    hang.answer();
    taken_over_by_wb(&fleet, item);
}

/// Killed -9 while its last push hangs: the remote has all of it or none
/// (here none: its claim and its branch stay as pushed before), and the
/// item is taken over once the remote answers.
#[test]
fn a_worker_killed_during_its_last_push_leaves_the_remote_whole_and_the_item_is_taken_over() {
    let fleet = half_done_in_wa();
    let (mut a, hang) = wa_half_done(&fleet);
    let before = git(
        &fleet.bare,
        &[
            "for-each-ref",
            "refs/ralph/fleet/night/claims/",
            "refs/heads/",
        ],
    );
    hang.hang();
    sigterm(&a);
    common::wait_until("the worker's last push, hanging", LIMIT, || {
        loop_ended_in_wa(&fleet).is_some_and(|ended| !hang.calls(ended).is_empty())
    });
    a.kill().unwrap();
    let _ = a.wait();
    let after = git(
        &fleet.bare,
        &[
            "for-each-ref",
            "refs/ralph/fleet/night/claims/",
            "refs/heads/",
        ],
    );
    assert_eq!(after, before, "nothing of the last push");
    assert!(fleet.refs("refs/ralph/fleet/night/ends/").is_empty());
    let item = fleet.refs("refs/ralph/fleet/night/claims/")[0]
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    hang.leftovers();
    hang.answer();
    taken_over_by_wb(&fleet, &item);
}

/// A remote whose rules refuse the worker's last push (a pre-receive hook
/// that exits 1) is said with the server's words, at once, with what the
/// remote lacks; the worker keeps its exit code; the item is taken over
/// once the remote takes pushes again.
#[test]
fn a_last_push_the_remote_refuses_is_said_and_the_item_is_taken_over() {
    let fleet = half_done_in_wa();
    let (a, hang) = wa_half_done(&fleet);
    fleet.pre_receive("#!/bin/sh\necho 'policy: frozen for the night' >&2\nexit 1\n");
    let (a, took, _) = stop_wa(a, &fleet);
    assert!(took < END_BOUND, "{took:?}");
    assert_eq!(a.code, Some(130), "{:?}", a.events);
    let (missing, said) = unrecorded(&a);
    assert!(missing.iter().any(|m| m == "release"), "{missing:?}");
    assert!(
        said["error"]
            .as_str()
            .unwrap()
            .contains("policy: frozen for the night"),
        "{said}"
    );
    std::fs::remove_file(fleet.bare.join("hooks/pre-receive")).unwrap();
    assert!(hang.leftovers().is_empty());
    taken_over_by_wb(&fleet, said["item"].as_str().unwrap());
}

/// A remote that answers slowly but within the bound takes the last push
/// whole: the claim released with the work, the end record there, said
/// `fleet_released`; the next worker takes the item at once (no takeover)
/// from the work `wa` pushed, and `ralph status --fleet` shows wa stopped.
#[test]
fn a_slow_remote_within_the_bound_takes_the_last_push_whole() {
    let fleet = half_done_in_wa();
    let (a, hang) = wa_half_done(&fleet);
    std::fs::write(&hang.slow, "3").unwrap();
    let (a, took, loop_ended) = stop_wa(a, &fleet);
    let calls: Vec<String> = hang.calls(loop_ended).into_iter().map(|c| c.what).collect();
    // One call: the mirror of its status and of the ledger is what it
    // pushed last, so no compare-and-swap is lost to its own earlier push.
    assert_eq!(calls, ["receive"], "{took:?}");
    assert!(took < END_BOUND * 2, "{took:?}");
    assert_eq!(a.code, Some(130), "{:?}", a.events);
    assert!(a.of("unrecorded").is_empty(), "{:?}", a.events);
    assert_eq!(a.of("released").len(), 1, "{:?}", a.events);
    assert!(fleet.refs("refs/ralph/fleet/night/claims/").is_empty());
    // The end record holds `fleet_released` and `fleet_finished`, last.
    let end = records_under(&fleet, "refs/ralph/fleet/night/ends/");
    let kinds: Vec<&str> = end.iter().map(|r| r["event"].as_str().unwrap()).collect();
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["fleet_released", "fleet_finished"],
        "{kinds:?}"
    );
    // The loop's WIP commit reached the item's branch.
    let clone = fleet.tmp.path().join("wa");
    let branch = fleet.refs("refs/heads/ralph/fleet/night/items/");
    assert_eq!(
        git(&clone, &["rev-parse", &branch[0]]),
        git(&fleet.bare, &["rev-parse", &branch[0]])
    );
    let status = fleet_status(&fleet);
    let wa = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["worker"] == "wa")
        .unwrap();
    assert_eq!(wa["state"], "stopped", "{status}");
    assert_eq!(status["items"][0]["state"], "open", "released: {status}");
    assert_eq!(status["items"][0]["pushed"], true, "{status}");
    std::fs::remove_file(&hang.slow).unwrap();
    let b = wait(fleet.worker("wb"));
    assert_eq!(b.code, Some(0), "{:?}", b.events);
    assert!(
        b.of("claimed")[0].get("took_over_from").is_none(),
        "{:?}",
        b.events
    );
    fleet.assert_nothing_left();
    assert_eq!(fleet.run_file("done/it").unwrap(), "wa\nwb\n");
}

/// Taken over during its exit: `wa`'s remote hangs, its lease expires and
/// `wb` takes the item over (and merges it); `wa`, stopped, finds the
/// remote answering its last push with its claim gone. It fetches once and
/// pushes again what is still its own (its status, end record and loop
/// record, not the claim or the branch: they are `wb`'s), and says the
/// item lost, its last commits staying in its clone.
#[test]
fn a_worker_whose_item_was_taken_over_during_its_exit_pushes_only_what_is_its_own() {
    let fleet = Fleet::with(
        1,
        &scenario_doing(
            r#"mkdir -p done && echo "$RALPH_WORKER" >> done/it && if [ "$RALPH_WORKER" = wa ]; then sleep 120; fi"#,
            0,
        ),
        "[fleet]\nlease = \"3s\"\nclock_skew = \"1s\"\ngrace = \"60s\"\nnetwork_timeout = \"12s\"\n",
    );
    let (a, hang) = wa_half_done(&fleet);
    hang.hang();
    let b = fleet.worker("wb");
    common::wait_until("wb takes the item over", LIMIT, || {
        remote_ref(&fleet, "refs/ralph/fleet/night/claims/")
            .is_some_and(|c| git(&fleet.bare, &["log", "-1", "--format=%s", &c]).contains("by wb"))
    });
    sigterm(&a);
    hang.answer();
    let (a, b) = (wait(a), wait(b));
    assert_eq!(
        (a.code, b.code),
        (Some(130), Some(0)),
        "{:?}\n{:?}",
        a.events,
        b.events
    );
    assert!(a.of("unrecorded").is_empty(), "{:?}", a.events);
    assert!(a.of("released").is_empty(), "{:?}", a.events);
    let lost = a.of("lost");
    assert_eq!(lost.len(), 1, "{:?}", a.events);
    assert!(["wb", "nobody"].contains(&lost[0]["holder"].as_str().unwrap()));
    let end = records_under(&fleet, "refs/ralph/fleet/night/ends/");
    assert_eq!(end.last().unwrap()["event"], "fleet_finished", "{end:?}");
    assert!(
        end.iter().all(|r| r["event"] != "fleet_released"),
        "{end:?}"
    );
    assert_eq!(fleet.merges().len(), 1);
    fleet.assert_nothing_left();
    assert!(hang.leftovers().is_empty());
}

/// A fleet worker's item loops (each a `--fresh` run in a worktree of its
/// own) start their meters on what the worker's project remembers of the
/// models' windows: a model whose name says nothing of its 1M window, at
/// 150k tokens (L2 on a 200k guess), is not checkpointed.
#[test]
fn a_fleet_workers_item_loops_use_its_projects_memory_of_windows() {
    let scenario = scenario(0).replace(
        "[[step]]\ncontext = 20000",
        "model = \"claude-opus-4-6\"\ncontext_window = 1000000\n[[step]]\ncontext = 150000",
    );
    let fleet = Fleet::with(2, &scenario, "[context]\nnudge_at_l1 = false\n");
    let clone = fleet.clone("wa");
    std::fs::create_dir_all(clone.join(".ralph")).unwrap();
    std::fs::write(
        clone.join(".ralph/windows.json"),
        r#"{"version":1,"models":{"claude-opus-4-6":{"window":1000000,"source":"result","at":"2026-11-26T22:00:00Z","run_id":"r0"}}}"#,
    )
    .unwrap();
    let ended = wait(worker_in(&clone, "wa"));
    assert_eq!(ended.code, Some(0), "{}", ended.stderr);
    assert_eq!(fleet.merges().len(), 2);
    let loops = clone.join(".ralph/fleet/night/loops");
    let mut readings = 0;
    for dir in std::fs::read_dir(&loops).unwrap() {
        let log = std::fs::read_to_string(dir.unwrap().path().join("events.jsonl")).unwrap();
        for e in log
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
        {
            assert_ne!(e["event"], "checkpoint", "on a 200k guess: {log}");
            if e["event"] == "context" {
                assert_eq!(e["reading"]["window_source"], "remembered", "{e}");
                readings += 1;
            }
        }
    }
    assert!(readings >= 2, "{readings} readings in {}", loops.display());
}
