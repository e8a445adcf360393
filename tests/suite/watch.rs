//! `ralph watch` and the live line under a real pseudo-terminal (tmux, on
//! a socket of the test's own), on runs of `ralph sim` agents slow enough
//! to watch (issue 39); and `ralph status` during a parallel run.
//!
//! tmux is installed with apt when missing (`.ci/run` does it too); when
//! it truly cannot be, the tmux tests print "skipped: …" (and fail with
//! RALPH_REQUIRE_TMUX=1, as CI sets when it has it).

use crate::common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{BIN, Project, Run};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(120);

/// A plan of three items.
const PLAN: &str = "# Watch me\n\n- [ ] alpha: parse quoted fields\n- [ ] bravo: write the CSV writer\n- [ ] charlie: docs for the CLI\n";

/// One iteration of about 12 s that climbs in context, calls tools, then
/// does its item and keeps its promise. `w2` and `w3` take 2 and 4 s
/// longer (the merges then come in a fixed order).
const SLOW: &str = r#"
[[step]]
context = 30000
text = "Reading the plan."
tool = "Read"
input = { file_path = "fix_plan.md" }

[[step]]
sleep_ms = 4000

[[step]]
context = 60000
tool = "Grep"
input = { pattern = "fn parse" }

[[step]]
sleep_ms = 4000

[[step]]
context = 90000
command = '''
case "$RALPH_WORKER" in w2) sleep 2;; w3) sleep 4;; esac
if [ -n "$RALPH_WORKER" ]; then plan=.ralph/worker-plan.md; item="$RALPH_ITEM"; else plan=fix_plan.md; item=$(grep -m1 -F -e '- [ ]' fix_plan.md | sed 's/^- \[ \] //'); fi
mkdir -p out && printf '%s\n' "$item" > "out/${item%%:*}.txt"
sed -i '0,/- \[ \]/s//- [x]/' "$plan"
'''

[[step]]
sleep_ms = 4000

[[step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#;

/// Each worker: an iteration that ends without doing its item, then one
/// that takes 20 s before it does it.
const TWO_ITERATIONS: &str = r#"
[[iteration]]
[[iteration.step]]
context = 20000
text = "A first look."
[[iteration.step]]
result = "Not yet."

[[iteration]]
[[iteration.step]]
context = 30000
text = "Now the item."
[[iteration.step]]
sleep_ms = 20000
[[iteration.step]]
command = '''
sed -i '0,/- \[ \]/s//- [x]/' .ralph/worker-plan.md
'''
[[iteration.step]]
result = "Done.\n\n<promise>COMPLETE</promise>"
"#;

static SOCKETS: AtomicUsize = AtomicUsize::new(0);

/// A tmux server of the test's own, with one session.
struct Tmux {
    socket: String,
}

/// tmux, installed with apt if missing; None (and a "skipped:" line) when
/// it cannot be.
fn tmux_or_skip(what: &str) -> Option<()> {
    let works = || {
        Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !works()
        && Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout == b"0\n")
    {
        let _ = Command::new("sh")
            .args([
                "-c",
                "(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y tmux) >/dev/null 2>&1",
            ])
            .status();
    }
    if works() {
        return Some(());
    }
    assert!(
        std::env::var_os("RALPH_REQUIRE_TMUX").is_none(),
        "RALPH_REQUIRE_TMUX is set but tmux cannot run"
    );
    println!("skipped: {what}: tmux is not installed and apt could not install it");
    None
}

impl Tmux {
    /// `command` in a detached session of `w`×`h` in `dir`.
    fn start(dir: &Path, w: u16, h: u16, command: &str) -> Tmux {
        let socket = format!(
            "ralph-test-{}-{}",
            std::process::id(),
            SOCKETS.fetch_add(1, Ordering::SeqCst)
        );
        let t = Tmux { socket };
        t.cmd(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            &w.to_string(),
            "-y",
            &h.to_string(),
            "-c",
            &dir.display().to_string(),
            "-e",
            "TERM=xterm-256color",
            command,
        ]);
        t.cmd(&["set-option", "-g", "remain-on-exit", "on"]);
        t
    }

    fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen as it is, one string per row.
    fn screen(&self) -> Vec<String> {
        self.cmd(&["capture-pane", "-p", "-t", "t"])
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The screen with wrapped lines joined: a line that wrapped is one long line.
    fn joined(&self) -> Vec<String> {
        self.cmd(&["capture-pane", "-p", "-J", "-t", "t"])
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn keys(&self, keys: &str) {
        self.cmd(&["send-keys", "-t", "t", keys]);
    }

    fn resize(&self, w: u16, h: u16) {
        self.cmd(&[
            "resize-window",
            "-t",
            "t",
            "-x",
            &w.to_string(),
            "-y",
            &h.to_string(),
        ]);
    }

    /// Wait until the screen satisfies `cond`; the screen.
    fn wait_for(&self, what: &str, within: Duration, cond: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen().join("\n");
            if cond(&s) {
                return s;
            }
            assert!(
                start.elapsed() < within,
                "no {what} within {within:?}; screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.cmd(&["kill-server"]);
    }
}

fn events(p: &Project) -> Vec<Value> {
    std::fs::read_to_string(p.path(".ralph/events.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn watch_command() -> String {
    // After it quits: its exit code and whether the terminal is cooked again.
    format!("{BIN} watch; echo WATCH-EXIT=$?; stty -a | grep -o -- '-\\?icanon'; sleep 60")
}

/// The latest `context` event's percent, formatted as the screen shows it.
fn latest_percent(p: &Project, worker: Option<&str>) -> Option<String> {
    events(p)
        .iter()
        .rev()
        .find(|e| e["event"] == "context" && e["worker"].as_str() == worker)
        .map(|e| format!("{:.1}%", e["reading"]["percent"].as_f64().unwrap()))
}

#[test]
fn watch_follows_a_single_loop_resizes_acts_on_keys_and_restores_the_terminal() {
    let Some(()) = tmux_or_skip("ralph watch on a single loop") else {
        return;
    };
    let p = Project::new(PLAN, SLOW, "");
    let run = p.spawn_run(&[]);
    let t = Tmux::start(p.root(), 80, 24, &watch_command());
    let screen = t.wait_for("the loop's item and context", LIMIT, |s| {
        s.contains("loop") && s.contains("alpha: parse quoted fields") && s.contains("% L0")
    });
    assert!(screen.contains("ralph watch · run "), "{screen}");
    // Within a second of the next reading in the log, the screen shows it.
    let before = latest_percent(&p, None);
    let start = Instant::now();
    let next = loop {
        let now = latest_percent(&p, None);
        if now != before {
            break now.unwrap();
        }
        assert!(start.elapsed() < LIMIT, "no new context event");
        std::thread::sleep(Duration::from_millis(20));
    };
    let seen = Instant::now();
    t.wait_for("the new reading", Duration::from_secs(1), |s| {
        s.contains(&next)
    });
    eprintln!(
        "the screen showed {next} {:?} after the event",
        seen.elapsed()
    );
    // Resized: every row fits, the loop is still there.
    for (w, h) in [(200u16, 60u16), (80, 24)] {
        t.resize(w, h);
        let screen = t.wait_for("a redraw at the new size", Duration::from_secs(3), |s| {
            s.contains("alpha: parse quoted fields")
        });
        let rows = t.screen();
        assert_eq!(rows.len(), h as usize, "{screen}");
        assert!(
            rows.iter().all(|r| r.chars().count() <= w as usize),
            "{screen}"
        );
        assert!(
            screen.contains("alpha: parse quoted fields"),
            "{w}x{h}: {screen}"
        );
    }
    // c: a checkpoint of the loop, as `ralph checkpoint` asks it.
    t.keys("c");
    common::wait_until("a manual checkpoint request", LIMIT, || {
        events(&p)
            .iter()
            .any(|e| e["event"] == "checkpoint_requested" && e["trigger"] == "manual")
    });
    // s, then y: the run stops (exit 6).
    t.wait_for("the loop working again", LIMIT, |s| s.contains("working"));
    t.keys("s");
    t.wait_for("the question", Duration::from_secs(2), |s| {
        s.contains("stop the whole run")
    });
    t.keys("y");
    let run = Run::wait_or(run, LIMIT, || p.diagnose());
    assert_eq!(run.code, Some(6), "{}", run.describe());
    t.wait_for("the end on the screen", Duration::from_secs(3), |s| {
        s.contains("ended: stopped (exit 6)")
    });
    t.keys("q");
    // Its exit code, then what `stty` says of the terminal after it.
    let after = t.wait_for("watch's exit", Duration::from_secs(5), |s| {
        s.contains("WATCH-EXIT=") && s.lines().any(|l| l.trim().ends_with("icanon"))
    });
    assert!(after.contains("WATCH-EXIT=0"), "{after}");
    assert!(
        after.lines().any(|l| l.trim() == "icanon"),
        "the terminal is cooked again: {after}"
    );
    assert_eq!(
        t.cmd(&["display", "-p", "-t", "t", "#{alternate_on}"])
            .trim(),
        "0"
    );
}

#[test]
fn watch_shows_three_workers_and_replays_the_finished_run() {
    let Some(()) = tmux_or_skip("ralph watch on three workers") else {
        return;
    };
    let p = Project::new(PLAN, SLOW, "[loop]\nmax_cost_usd = 5.0\n");
    let run = p.spawn_run(&["--workers", "3"]);
    let t = Tmux::start(p.root(), 80, 24, &watch_command());
    let screen = t.wait_for("three workers with their items and context", LIMIT, |s| {
        ["w1", "w2", "w3"].iter().all(|w| s.contains(w))
            && s.contains("alpha")
            && s.contains("bravo")
            && s.contains("charlie")
            && s.matches("% L0").count() == 3
    });
    for (w, item) in [("w1", "alpha"), ("w2", "bravo"), ("w3", "charlie")] {
        assert!(
            screen.lines().any(|l| l.contains(w) && l.contains(item)),
            "{w}: {screen}"
        );
    }
    // A worker's next reading shows within a second.
    let before = latest_percent(&p, Some("w1"));
    let start = Instant::now();
    let next = loop {
        let now = latest_percent(&p, Some("w1"));
        if now != before {
            break now.unwrap();
        }
        assert!(start.elapsed() < LIMIT, "no new context event of w1");
        std::thread::sleep(Duration::from_millis(20));
    };
    t.wait_for("w1's new reading", Duration::from_secs(1), |s| {
        s.contains(&next)
    });
    t.resize(200, 60);
    t.wait_for("a redraw at 200x60", Duration::from_secs(3), |s| {
        s.lines().any(|l| l.chars().count() > 100)
    });
    t.resize(80, 24);
    // The README's picture: `RALPH_UPDATE_SCREENSHOT=1 cargo test --test
    // suite watch::watch_shows_three_workers`, this screen in its colours.
    if std::env::var_os("RALPH_UPDATE_SCREENSHOT").is_some() {
        t.wait_for("a merge while two work", LIMIT, |s| {
            s.contains("fast-forward") && s.matches("checkpoint in").count() >= 1
        });
        let ansi = t.cmd(&["capture-pane", "-e", "-p", "-t", "t"]);
        screenshot(
            &ansi,
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/watch.png"),
        );
    }
    let run = Run::wait_or(run, LIMIT, || p.diagnose());
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let screen = t.wait_for("the end", Duration::from_secs(5), |s| {
        s.contains("ended: completed (exit 0)") && s.matches("merged").count() >= 3
    });
    t.keys("q");
    t.wait_for("watch's exit", Duration::from_secs(5), |s| {
        s.contains("WATCH-EXIT=0")
    });
    // The finished run, replayed from its log by a new watch.
    let replay = Tmux::start(p.root(), 80, 24, &watch_command());
    let shown = replay.wait_for("the replay", Duration::from_secs(10), |s| {
        s.contains("ended: completed (exit 0)") && s.contains("fast-forward")
    });
    assert_eq!(
        shown.lines().take(2).collect::<Vec<_>>(),
        screen.lines().take(2).collect::<Vec<_>>()
    );
    insta::with_settings!({filters => vec![
        (r"\d{8}-\d{6}-[0-9a-f]{4}", "[run]"),
        (r"\b\d\d:\d\d\b", "[hh:mm]"),
    ]}, {
        insta::assert_snapshot!("watch_three_workers_80x24", shown);
    });
    std::fs::write(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("target/watch-80x24.txt"),
        &shown,
    )
    .unwrap();
}

#[test]
fn the_live_line_never_wraps_at_80_columns() {
    let Some(()) = tmux_or_skip("the live line at 80 columns") else {
        return;
    };
    for workers in ["1", "3"] {
        let p = Project::new(PLAN, SLOW, "[loop]\nmax_cost_usd = 5.0\n");
        let t = Tmux::start(
            p.root(),
            80,
            24,
            &format!("{BIN} run --workers {workers}; echo RUN-EXIT=$?; sleep 60"),
        );
        let start = Instant::now();
        let mut seen_live = false;
        loop {
            let joined = t.joined();
            let text = joined.join("\n");
            seen_live |= joined
                .iter()
                .any(|l| l.contains(" iter ") && l.contains("checkpoint in"));
            // The live lines (the log's lines above them are the record
            // of the night: a long one wraps as any log line does).
            // indicatif fills each line of a multi-line message to the
            // terminal's width, so tmux joins them: each 80-column piece
            // must be a live line's start, never the rest of one.
            let starts_live = |l: &str| {
                let l = l.trim_start_matches(|c: char| {
                    ('\u{2800}'..='\u{28ff}').contains(&c) || c == ' '
                });
                l.starts_with("iter ")
                    || l.contains(" worker(s) working")
                    || (l.starts_with('w') && l.contains(" iter "))
            };
            for line in joined.iter().filter(|l| starts_live(l)) {
                let cells: Vec<char> = line.trim_end().chars().collect();
                // A record line above that filled its rows exactly is joined
                // to the live line by tmux: the live line starts at the
                // first piece that is one.
                let pieces: Vec<&[char]> = cells.chunks(80).collect();
                let first = pieces
                    .iter()
                    .position(|p| starts_live(&p.iter().collect::<String>()))
                    .unwrap_or(0);
                for piece in &pieces[first..] {
                    let piece: String = piece.iter().collect();
                    assert!(
                        starts_live(&piece),
                        "--workers {workers}: a live line wrapped: {piece:?} continues {line:?}\n{text}"
                    );
                }
            }
            if text.contains("RUN-EXIT=") {
                assert!(text.contains("RUN-EXIT=0"), "{text}");
                break;
            }
            assert!(start.elapsed() < LIMIT, "the run did not end: {text}");
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(
            seen_live,
            "--workers {workers}: the live line was never seen"
        );
    }
}

#[test]
fn status_during_a_parallel_run_shows_the_workers_sums() {
    let p = Project::new(PLAN, TWO_ITERATIONS, "");
    let run = p.spawn_run(&["--workers", "3"]);
    // The workers' own logs: every iteration they ended and its cost.
    let sums = || {
        let mut n = 0;
        let mut cost = 0.0;
        let mut logs = Vec::new();
        if p.path(".ralph/worktrees").is_dir() {
            common::files_under(&p.path(".ralph/worktrees"), &mut logs);
        }
        for log in logs.iter().filter(|l| l.ends_with(".ralph/events.jsonl")) {
            for e in std::fs::read_to_string(log).unwrap_or_default().lines() {
                let e: Value = serde_json::from_str(e).unwrap_or_default();
                if e["event"] == "iteration_ended" {
                    n += 1;
                    cost += e["cost_usd"].as_f64().unwrap();
                }
            }
        }
        (n, cost)
    };
    common::wait_until("each worker's first iteration ended", LIMIT, || {
        sums().0 == 3
    });
    let status = || {
        let out = p.ralph().args(["status", "--json"]).output().unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    common::wait_until(
        "status to equal the workers' sums",
        Duration::from_secs(10),
        || {
            let s = status();
            let (n, cost) = sums();
            s["iteration"] == n && (s["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-9
        },
    );
    let (n, cost) = sums();
    assert!(n == 3 && cost > 0.0, "{n} {cost}");
    let text = p.ralph().arg("status").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("cost       ${cost:.2}")), "{text}");
    assert!(
        text.contains("iterations 3 ended, over every worker (at most 50)"),
        "{text}"
    );
    assert!(
        !text.contains("iteration  0") && !text.contains("$0.00\n"),
        "{text}"
    );
    // `ralph context`: no block of the coordinator's own.
    let context = p.ralph().arg("context").output().unwrap();
    let context = String::from_utf8_lossy(&context.stdout);
    assert!(
        context.starts_with("run       parallel run · running"),
        "{context}"
    );
    // The coordinator's own block would be a run at iteration 0.
    assert!(!context.contains("· iteration 0"), "{context}");
    assert_eq!(context.matches("\nworker    w").count(), 3, "{context}");
    let _ = p.ralph().arg("stop").output();
    let run = Run::wait_or(run, LIMIT, || p.diagnose());
    assert_eq!(run.code, Some(6), "{}", run.describe());
}

#[test]
fn watch_without_a_terminal_says_so_and_exits_2() {
    let p = Project::new(PLAN, SLOW, "");
    let out = p.ralph().arg("watch").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`ralph watch` needs a terminal"), "{err}");
    assert!(err.contains("ralph status"), "{err}");
}

/// A terminal screen captured with its colours (`capture-pane -e`) as a
/// PNG: an HTML page of it, drawn by headless Chromium.
fn screenshot(ansi: &str, png: &Path) {
    const PALETTE: [&str; 16] = [
        "#1e1e1e", "#e06c75", "#98c379", "#e5c07b", "#61afef", "#c678dd", "#56b6c2", "#d0d0d0",
        "#808080", "#ff7b86", "#b5e890", "#ffd68a", "#7cc5ff", "#e29cf0", "#7fd8e4", "#ffffff",
    ];
    let mut html = String::from(
        "<!doctype html><meta charset=utf-8><style>body{margin:0;background:#1e1e1e}pre{margin:12px;font:15px/1.2 'DejaVu Sans Mono',monospace;color:#d0d0d0}</style><pre>",
    );
    let (mut fg, mut bold, mut reverse) = (None::<String>, false, false);
    let mut open = false;
    let mut chars = ansi.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            let mut seq = String::new();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
                seq.push(c);
            }
            let codes: Vec<u32> = seq.split(';').filter_map(|c| c.parse().ok()).collect();
            let mut i = 0;
            if codes.is_empty() {
                (fg, bold, reverse) = (None, false, false);
            }
            while i < codes.len() {
                match codes[i] {
                    0 => (fg, bold, reverse) = (None, false, false),
                    1 => bold = true,
                    7 => reverse = true,
                    22 => bold = false,
                    27 => reverse = false,
                    39 => fg = None,
                    n @ 30..=37 => fg = Some(PALETTE[(n - 30) as usize].into()),
                    n @ 90..=97 => fg = Some(PALETTE[(n - 82) as usize].into()),
                    38 if codes.get(i + 1) == Some(&5) => {
                        fg = codes
                            .get(i + 2)
                            .map(|n| PALETTE[(*n as usize).min(15)].into());
                        i += 2;
                    }
                    _ => {}
                }
                i += 1;
            }
            if open {
                html.push_str("</span>");
            }
            let colour = fg.clone().unwrap_or_else(|| "#d0d0d0".into());
            let (text, back) = if reverse {
                ("#1e1e1e".to_string(), colour)
            } else {
                (colour, "transparent".into())
            };
            html.push_str(&format!(
                "<span style=\"color:{text};background:{back};font-weight:{}\">",
                if bold { "bold" } else { "normal" }
            ));
            open = true;
            continue;
        }
        match c {
            '<' => html.push_str("&lt;"),
            '>' => html.push_str("&gt;"),
            '&' => html.push_str("&amp;"),
            c => html.push(c),
        }
    }
    if open {
        html.push_str("</span>");
    }
    html.push_str("</pre>");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("watch.html");
    std::fs::write(&page, html).unwrap();
    let profile = dir.path().join("profile");
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=760,500")
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fleet item of about 12 s: its session logged (`LOG_SESSION`), context
/// climbing in four readings, tool calls between, then checked off.
fn fleet_scenario() -> String {
    format!(
        r#"[[step]]
context = 20000
command = {}
[[step]]
sleep_ms = 3000
[[step]]
context = 50000
tool = "Read"
input = {{ file_path = "fix_plan.md" }}
[[step]]
sleep_ms = 3000
[[step]]
context = 80000
tool = "Grep"
input = {{ pattern = "item" }}
[[step]]
sleep_ms = 3000
[[step]]
context = 95000
[[step]]
sleep_ms = 3000
[[step]]
command = {}
[[step]]
result = "Done. <promise>COMPLETE</promise>"
"#,
        common::toml_string(crate::e2e_fleet::LOG_SESSION),
        common::toml_string(r"sed -i 's/- \[ \]/- [x]/' .ralph/worker-plan.md"),
    )
}

/// Every ref of the bare remote and its commit.
fn remote_refs(bare: &Path) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(bare)
        .args(["for-each-ref", "--format=%(objectname) %(refname)"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Row `n` of `machine`'s lane on the screen (0: its state and item,
/// 1: its context gauge, 2: its last tool call).
fn lane(screen: &str, machine: &str, n: usize) -> Option<String> {
    let head = format!("{machine} ");
    screen
        .lines()
        .skip_while(|l| !l.trim_start_matches(['▸', ' ']).starts_with(&head))
        .nth(n)
        .map(str::to_string)
}

#[test]
fn watch_follows_a_fleet_shows_a_killed_machine_dead_and_never_pushes() {
    let Some(()) = tmux_or_skip("ralph watch on a fleet") else {
        return;
    };
    let fleet = crate::e2e_fleet::Fleet::with(
        2,
        &fleet_scenario(),
        "[fleet]\nlease = \"6s\"\nclock_skew = \"1s\"\nlive = \"1s\"\n",
    );
    let observer = fleet.clone("observer");
    let start = |name: &str| {
        let dir = fleet.clone(name);
        let out = std::fs::File::create(fleet.tmp.path().join(format!("{name}.out"))).unwrap();
        let err = std::fs::File::create(fleet.tmp.path().join(format!("{name}.err"))).unwrap();
        Command::new(BIN)
            .current_dir(&dir)
            .env("RALPH_LOG", "off")
            .args([
                "run", "--remote", "origin", "--fleet", "night", "--worker", name,
            ])
            .args(["--json"])
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap()
    };
    let diagnose = |name: &str| {
        std::fs::read_to_string(fleet.tmp.path().join(format!("{name}.err"))).unwrap_or_default()
    };
    let mut wa = start("wa");
    let mut wb = start("wb");
    let t = Tmux::start(
        &observer,
        80,
        24,
        &format!("{BIN} watch --fleet night --every 1s; echo WATCH-EXIT=$?; sleep 60"),
    );
    // Each machine's item and its item loop's context.
    let screen = t.wait_for("each machine's item and context", LIMIT, |s| {
        ["wa", "wb"].iter().all(|m| {
            lane(s, m, 0).is_some_and(|l| l.contains("item number"))
                && lane(s, m, 1).is_some_and(|g| g.contains("% L0"))
        })
    });
    assert!(
        screen.starts_with("ralph watch · fleet night on origin · running"),
        "{screen}"
    );
    // It follows: a machine's reading changes on the screen.
    let first: Vec<String> = ["wa", "wb"]
        .iter()
        .map(|m| lane(&screen, m, 1).unwrap())
        .collect();
    let screen = t.wait_for("a machine's next reading", LIMIT, |s| {
        ["wa", "wb"]
            .iter()
            .zip(&first)
            .any(|(m, was)| lane(s, m, 1).is_some_and(|g| g.contains("% L") && &g != was))
    });
    assert!(screen.contains("last tool: "), "{screen}");
    // A machine killed -9 (its item loop dies with it) shows dead after
    // its lease and the clock skew of silence, with its last reading.
    t.wait_for("wb's first tool call", LIMIT, |s| {
        lane(s, "wb", 2)
            .is_some_and(|l| l.contains("last tool: Read") || l.contains("last tool: Grep"))
    });
    wb.kill().unwrap();
    wb.wait().unwrap();
    let killed = Instant::now();
    let screen = t.wait_for("wb shown dead", LIMIT, |s| {
        lane(s, "wb", 0).is_some_and(|l| l.contains("dead: silent"))
    });
    eprintln!("wb shown dead {:?} after the kill", killed.elapsed());
    // Silent for the lease and the skew (7 s) since its last word, which
    // was at most a renewal (2 s) before the kill.
    assert!(
        killed.elapsed() >= Duration::from_secs(4),
        "not before its lease ran out: {screen}"
    );
    // wa takes wb's item over and the fleet completes.
    let code = {
        let start = Instant::now();
        loop {
            if let Some(s) = wa.try_wait().unwrap() {
                break s.code();
            }
            assert!(
                start.elapsed() < LIMIT,
                "wa did not end: {}",
                diagnose("wa")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    assert_eq!(code, Some(0), "{}", diagnose("wa"));
    let screen = t.wait_for("the fleet completed", Duration::from_secs(20), |s| {
        s.contains("ended: completed") && s.contains("items 2/2")
    });
    // wb's last word carries its loop's live reading, small.
    let status = Command::new("git")
        .arg("-C")
        .arg(&fleet.bare)
        .args(["cat-file", "commit", "refs/ralph/fleet/night/workers/wb"])
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(status.contains(r#""live":{"iteration":1"#), "{status}");
    assert!(status.len() < 2048, "{} bytes: {status}", status.len());
    // Watching never pushes and never starts a session: the remote stays
    // as the workers left it through several more fetches.
    let refs = remote_refs(&fleet.bare);
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(remote_refs(&fleet.bare), refs, "watch pushed something");
    let sessions = fleet.sessions();
    assert!(
        sessions.len() == 3
            && sessions
                .iter()
                .all(|s| s.starts_with("wa ") || s.starts_with("wb ")),
        "one session per item and wb's taken over, all by the workers: {sessions:?}"
    );
    let rows = t.screen();
    assert!(rows.iter().all(|r| r.chars().count() <= 80), "{screen}");
    let shown = rows.join("\n");
    insta::with_settings!({filters => vec![
        (r"\b\d\d:\d\d\b", "[hh:mm]"),
        (r"\d+m\d\ds|\d+h\d\dm|\b\d+s\b", "[time]"),
        (r"\$\d+\.\d\d", "$[cost]"),
        (r"item number \d", "item number [n]"),
        (r"iteration \d+", "iteration [n]"),
        (r"iter \d+", "iter [n]"),
        // wb's last reading: where it was when it was killed.
        (r"▕[█░┃]+▏ +\d+\.\d% L\d \d+k/167k", "[gauge] [percent] [level] [tokens]/167k"),
        (r"last tool: (Read fix_plan.md|Grep item)", "last tool: [Read or Grep]"),
    ]}, {
        insta::assert_snapshot!("watch_fleet_80x24", shown);
    });
    // Read-only: `s` stops nothing, says why.
    t.keys("s");
    t.wait_for("the read-only answer", Duration::from_secs(3), |s| {
        s.contains("a fleet is watched read-only")
    });
    t.keys("q");
    let after = t.wait_for("watch's exit", Duration::from_secs(5), |s| {
        s.contains("WATCH-EXIT=")
    });
    assert!(after.contains("WATCH-EXIT=0"), "{after}");
}

#[test]
fn watch_of_a_fleet_not_there_or_a_remote_gone_says_so_and_quits_at_once() {
    let Some(()) = tmux_or_skip("ralph watch on a missing fleet") else {
        return;
    };
    let fleet = crate::e2e_fleet::Fleet::with(1, &fleet_scenario(), "");
    let observer = fleet.clone("observer");
    // A remote that is not there: said before any screen, exit 2.
    let t = Tmux::start(
        &observer,
        80,
        24,
        &format!("{BIN} watch --fleet night --remote nowhere; echo WATCH-EXIT=$?; sleep 60"),
    );
    let said = t.wait_for("the error", Duration::from_secs(30), |s| {
        s.contains("WATCH-EXIT=")
    });
    assert!(said.contains("WATCH-EXIT=2"), "{said}");
    assert!(
        said.contains("cannot fetch the fleet `night` from `nowhere`"),
        "{said}"
    );
    // A fleet nobody started (a typo): the screen says there is no run.
    let t = Tmux::start(
        &observer,
        80,
        24,
        &format!("{BIN} watch --fleet nigth --every 1s; echo WATCH-EXIT=$?; sleep 60"),
    );
    t.wait_for("no run", Duration::from_secs(30), |s| {
        s.contains("fleet nigth on origin · no run on the remote yet")
    });
    // The remote goes away: the footer says so, the screen stays, q quits.
    std::fs::rename(&fleet.bare, fleet.tmp.path().join("gone.git")).unwrap();
    let screen = t.wait_for("the failed fetch", Duration::from_secs(30), |s| {
        s.contains("cannot fetch from `origin`")
    });
    assert!(screen.contains("no run on the remote yet"), "{screen}");
    let asked = Instant::now();
    t.keys("q");
    let after = t.wait_for("watch's exit", Duration::from_secs(5), |s| {
        s.contains("WATCH-EXIT=")
    });
    assert!(after.contains("WATCH-EXIT=0"), "{after}");
    eprintln!("quit {:?} after q with the remote gone", asked.elapsed());
}
