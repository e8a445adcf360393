//! Notifications (`[notify]`, docs/notifications.md) end to end: `ralph run`
//! with `ralph sim` as the agent, every channel pointed at a local HTTP
//! server on 127.0.0.1 (the e-mail command writes to a file).

use crate::common;

use std::time::{Duration, Instant};

use common::http::{Answer, Server};
use common::{IDLE, Project, toml_string};

const PLAN: &str = "# Ship the parser\n\n- [ ] parser\n- [ ] tests\n";
const LIMIT: Duration = Duration::from_secs(90);

fn always(status: u16) -> Answer {
    Box::new(move |_| Some(status))
}

/// Every channel of `[notify]`, on `server` (paths tell them apart).
fn channels(server: &Server, mail: &std::path::Path) -> String {
    let u = &server.url;
    format!(
        "[notify]\nwebhook = \"{u}/hook\"\nntfy = \"{u}/ntfy-topic\"\nslack = \"{u}/slack\"\ntelegram_token = \"$RALPH_TEST_TELEGRAM\"\ntelegram_chat = \"42\"\ntelegram_api = \"{u}/tg\"\nemail_command = {}\nbackoff = \"50ms\"\n",
        toml_string(&format!(
            "{{ echo \"$RALPH_NOTIFY_EVENT|$RALPH_NOTIFY_SUBJECT\"; cat; echo; }} >> '{}'",
            mail.display()
        ))
    )
}

#[test]
fn each_event_goes_once_to_every_channel_with_its_payload() {
    let server = Server::start(always(200));
    let mail = tempfile::tempdir().unwrap();
    let mail = mail.path().join("mail.txt");
    // The breaker opens after one idle iteration: breaker_open, then run_ended.
    let p = Project::new(
        PLAN,
        IDLE,
        &format!("[breaker]\nno_progress = 1\n{}", channels(&server, &mail)),
    );
    let run = {
        let mut c = p.ralph();
        c.env("RALPH_TEST_TELEGRAM", "123456:telegram-bot-secret");
        c.args(["run", "--json"]);
        let started = Instant::now();
        common::Run::from_output(c.output().unwrap(), started.elapsed())
    };
    assert_eq!(run.code, Some(3), "{}", run.describe());
    let requests = server.requests();
    let on = |path: &str| -> Vec<_> { requests.iter().filter(|r| r.path == path).collect() };

    let hooks = on("/hook");
    assert_eq!(hooks.len(), 2, "{requests:#?}");
    let (open, ended) = (hooks[0].json(), hooks[1].json());
    assert_eq!(hooks[0].method, "POST");
    assert_eq!(hooks[0].headers["content-type"], "application/json");
    assert_eq!(open["source"], "ralph");
    assert_eq!(open["event"], "breaker_open");
    assert_eq!(open["details"]["rule"], "no_progress");
    assert_eq!(open["details"]["status"], "open");
    let project = p.root().file_name().unwrap().to_str().unwrap();
    assert_eq!(open["project"], project);
    assert_eq!(
        open["title"],
        format!("ralph · {project}: circuit breaker open")
    );
    assert_eq!(ended["event"], "run_ended");
    let logged = run.ended();
    for key in [
        "outcome",
        "exit_code",
        "reason",
        "iterations",
        "cost_usd",
        "report",
    ] {
        assert_eq!(ended["details"][key], logged[key], "{key}");
    }
    assert_eq!(ended["details"]["outcome"], "breaker_open");
    assert!(ended["details"]["report"].is_string(), "{ended}");
    assert_eq!(ended["details"]["items_done"], serde_json::json!([]));
    assert!(
        ended["text"].as_str().unwrap().contains("Report: "),
        "{ended}"
    );

    let slack = on("/slack");
    assert_eq!(slack.len(), 2, "{requests:#?}");
    assert!(
        slack[0].json()["text"]
            .as_str()
            .unwrap()
            .starts_with("*ralph · ")
    );

    let ntfy = on("/ntfy-topic");
    assert_eq!(ntfy.len(), 2, "{requests:#?}");
    assert_eq!(
        ntfy[0].headers["title"],
        format!("ralph - {project}: circuit breaker open")
    );
    assert_eq!(ntfy[0].headers["priority"], "high");
    assert!(ntfy[1].body.contains("Report: "), "{}", ntfy[1].body);

    let telegram = on("/tg/bot123456:telegram-bot-secret/sendMessage");
    assert_eq!(telegram.len(), 2, "{requests:#?}");
    assert_eq!(telegram[0].json()["chat_id"], "42");

    let mail = std::fs::read_to_string(&mail).unwrap();
    assert_eq!(mail.matches("breaker_open|ralph · ").count(), 1, "{mail}");
    assert_eq!(mail.matches("run_ended|ralph · ").count(), 1, "{mail}");

    // The bot token is a secret: in no file ralph wrote.
    let mut files = Vec::new();
    common::files_under(&p.path(".ralph"), &mut files);
    for f in files {
        let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned();
        assert!(!text.contains("telegram-bot-secret"), "{}", f.display());
    }
}

#[test]
fn a_usage_limit_wait_and_a_spent_budget_are_notified() {
    let server = Server::start(always(200));
    let hook = format!("[notify]\nwebhook = \"{}/hook\"\n", server.url);
    let limit = "[[iteration]]\nexit_code = 1\n[[iteration.step]]\nrate_limit = \"rejected\"\nresets_in_secs = 1\n[[iteration.step]]\nerror = \"rate_limit\"\nresets_in_secs = 1\n[[iteration]]\n[[iteration.step]]\npath = \"fix_plan.md\"\nold = \"- [ ] parser\"\nnew = \"- [x] parser\"\n[[iteration.step]]\npath = \"fix_plan.md\"\nold = \"- [ ] tests\"\nnew = \"- [x] tests\"\n[[iteration.step]]\nresult = \"Done.\\n\\n<promise>COMPLETE</promise>\"\n";
    let p = Project::new(
        PLAN,
        limit,
        &format!("[breaker]\nno_progress = 1\nconsecutive_failures = 1\n{hook}"),
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let bodies: Vec<_> = server.requests().iter().map(|r| r.json()).collect();
    let kinds: Vec<_> = bodies
        .iter()
        .map(|b| b["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["limit_wait", "run_ended"], "{bodies:#?}");
    assert_eq!(
        bodies[0]["details"]["until"],
        run.of("limit_wait")[0]["until"]
    );
    assert_eq!(
        bodies[1]["details"]["items_done"],
        serde_json::json!(["parser", "tests"])
    );

    let server = Server::start(always(200));
    let hook = format!("[notify]\nwebhook = \"{}/hook\"\n", server.url);
    let spend = "cost_usd = 0.6\n[[step]]\npath = \"work.txt\"\ncontent = \"x\"\n[[step]]\nresult = \"Some work done.\"\n";
    let p = Project::new(
        PLAN,
        spend,
        &format!("[loop]\nmax_cost_usd = 1.0\n[breaker]\nno_progress = 9\n{hook}"),
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(5), "{}", run.describe());
    let bodies: Vec<_> = server.requests().iter().map(|r| r.json()).collect();
    assert_eq!(bodies.len(), 1, "{bodies:#?}");
    assert_eq!(bodies[0]["event"], "budget_stop");
    assert_eq!(bodies[0]["details"]["outcome"], "budget_spent");
    assert!(
        bodies[0]["details"]["reason"]
            .as_str()
            .unwrap()
            .contains("max_cost_usd")
    );
}

#[test]
fn a_server_failing_three_times_gets_the_message_once() {
    let server = Server::start(Box::new(|n| Some(if n < 3 { 500 } else { 200 })));
    let p = Project::new(
        PLAN,
        IDLE,
        &format!(
            "[loop]\nmax_iterations = 1\n[notify]\nwebhook = \"{}/hook\"\nbackoff = \"50ms\"\nretries = 3\n",
            server.url
        ),
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "{requests:#?}");
    assert!(requests.iter().all(|r| r.json()["event"] == "run_ended"));
    assert!(
        requests.iter().all(|r| r.body == requests[0].body),
        "the same message each time"
    );
}

#[test]
fn a_hanging_channel_delays_neither_the_loop_nor_the_end_beyond_its_timeout() {
    // A usage-limit wait mid-run, then the end: two notices for a channel
    // that never answers. Were the loop to wait for it, the run would take
    // two timeouts longer than without it.
    let limit = "[[iteration]]\nexit_code = 1\n[[iteration.step]]\nrate_limit = \"rejected\"\nresets_in_secs = 1\n[[iteration.step]]\nerror = \"rate_limit\"\nresets_in_secs = 1\n[[iteration]]\n[[iteration.step]]\npath = \"fix_plan.md\"\nold = \"- [ ] parser\"\nnew = \"- [x] parser\"\n[[iteration.step]]\npath = \"fix_plan.md\"\nold = \"- [ ] tests\"\nnew = \"- [x] tests\"\n[[iteration.step]]\nresult = \"Done.\\n\\n<promise>COMPLETE</promise>\"\n";
    let base = "[breaker]\nno_progress = 1\nconsecutive_failures = 1\n";
    let plain = Project::new(PLAN, limit, base);
    let plain = plain.run(&[], LIMIT);
    assert_eq!(plain.code, Some(0), "{}", plain.describe());

    let hang = Server::start(Box::new(|_| None));
    let timeout = Duration::from_secs(5);
    let p = Project::new(
        PLAN,
        limit,
        &format!(
            "{base}[notify]\nwebhook = \"{}/hook\"\ntimeout = \"5s\"\nretries = 0\n",
            hang.url
        ),
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert!(!hang.requests().is_empty(), "the notices were being sent");
    // The notice still pending at the end is said, naming its channel.
    let log = std::fs::read_to_string(p.path(".ralph/events.jsonl")).unwrap();
    assert!(
        log.lines().any(|l| l.contains("\"warning\"")
            && l.contains("channel(s) webhook still sending after notify.timeout")),
        "{log}"
    );
    let extra = run.elapsed.saturating_sub(plain.elapsed);
    assert!(
        extra < timeout + timeout / 2,
        "the run took {extra:?} longer with a hanging channel (timeout {timeout:?})"
    );
    eprintln!(
        "plain run {:?}, with a hanging channel {:?}",
        plain.elapsed, run.elapsed
    );
}

#[test]
fn notify_test_sends_on_each_channel_and_says_which_failed() {
    let ok = Server::start(always(204));
    let bad = Server::start(always(500));
    let p = Project::new(
        PLAN,
        IDLE,
        &format!(
            "[notify]\nwebhook = \"{}/hook\"\nslack = \"{}/slack/T000/SECRETPART\"\nretries = 1\nbackoff = \"10ms\"\n",
            ok.url, bad.url
        ),
    );
    let out = p.ralph().args(["notify", "--test"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("webhook: test notification delivered (1 attempt(s))"),
        "{stdout}"
    );
    assert!(
        stdout.contains("slack: NOT delivered after 2 attempt(s): HTTP 500"),
        "{stdout}"
    );
    assert!(!stdout.contains("SECRETPART"), "{stdout}");
    assert_eq!(ok.requests()[0].json()["event"], "test");
    assert_eq!(bad.requests().len(), 2);

    let none = Project::new(PLAN, IDLE, "");
    let out = none.ralph().args(["notify", "--test"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no notification channel"));
}

#[test]
fn checks_failing_again_and_again_ask_for_a_human_once() {
    // Issue 27's `needs_human` for issue 23's gate: the agent claims
    // completion over the same failing check each iteration; after
    // `needs_human_after` failures in a row, one notice, whatever follows.
    let server = Server::start(always(200));
    let scenario = "[[step]]\ncontext = 30000\npath = \"fix_plan.md\"\nold = \"- [ ] parser\"\nnew = \"- [x] parser\"\n[[step]]\npath = \"fix_plan.md\"\nold = \"- [ ] tests\"\nnew = \"- [x] tests\"\n[[step]]\nresult = \"<promise>COMPLETE</promise>\"\n";
    let p = Project::new(
        PLAN,
        scenario,
        &format!(
            "[loop]\nmax_iterations = 5\n[breaker]\nno_progress = 9\nsame_error = 9\nconsecutive_failures = 9\n[verify]\ncommands = [\"echo 'test_parse FAILED'; exit 1\"]\nneeds_human_after = 2\n[notify]\nwebhook = \"{}/hook\"\nbackoff = \"50ms\"\n",
            server.url
        ),
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert_eq!(run.of("completion_refused").len(), 5);
    let logged = run.of("needs_human");
    assert_eq!(logged.len(), 1, "{}", run.describe());
    assert_eq!(logged[0]["iteration"], 2);
    assert_eq!(logged[0]["reason"], "verify_failing");
    let bodies: Vec<_> = server.requests().iter().map(|r| r.json()).collect();
    let kinds: Vec<_> = bodies
        .iter()
        .map(|b| b["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["needs_human", "run_ended"], "{bodies:#?}");
    let human = &bodies[0];
    let project = p.root().file_name().unwrap().to_str().unwrap();
    assert_eq!(
        human["title"],
        format!("ralph · {project}: needs a human (verify failing)")
    );
    for key in ["iteration", "reason", "message"] {
        assert_eq!(human["details"][key], logged[0][key], "{key}");
    }
    let message = human["text"].as_str().unwrap();
    assert!(
        message.contains("failed 2 times in a row")
            && message.contains("`echo 'test_parse FAILED'; exit 1` exited with 1"),
        "{message}"
    );

    // Off (0): the same night asks for no one.
    let server = Server::start(always(200));
    let p = Project::new(
        PLAN,
        scenario,
        &format!(
            "[loop]\nmax_iterations = 3\n[breaker]\nno_progress = 9\nsame_error = 9\nconsecutive_failures = 9\n[verify]\ncommands = [\"exit 1\"]\nneeds_human_after = 0\n[notify]\nwebhook = \"{}/hook\"\n",
            server.url
        ),
    );
    let run = p.run(&[], LIMIT);
    assert_eq!(run.code, Some(4), "{}", run.describe());
    assert!(run.of("needs_human").is_empty());
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_channel_failing_all_night_leaves_a_warning_a_terminal_line_and_a_report_line() {
    let server = Server::start(always(500));
    let p = Project::new(
        PLAN,
        IDLE,
        &format!(
            "[breaker]\nno_progress = 1\n[notify]\nwebhook = \"{}/hook\"\nretries = 1\nbackoff = \"10ms\"\n",
            server.url
        ),
    );
    // On a terminal's view (no --json): the warnings are lines there.
    let out = p.ralph().arg("run").output().unwrap();
    let shown = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(3), "{shown}");
    assert_eq!(server.requests().len(), 4, "two notices, two attempts each");
    for notice in ["breaker_open", "run_ended"] {
        let said = format!(
            "notification `{notice}` not delivered by webhook after 2 attempt(s): HTTP 500"
        );
        assert!(shown.contains(&format!("warning: {said}")), "{shown}");
        let logged = std::fs::read_to_string(p.path(".ralph/events.jsonl")).unwrap();
        assert!(
            logged
                .lines()
                .any(|l| l.contains("\"event\":\"warning\"") && l.contains(&said)),
            "{logged}"
        );
        let report = p.ralph().args(["report", "--json"]).output().unwrap();
        let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
        let warnings = report["warnings"].as_array().unwrap();
        assert!(warnings.iter().any(|w| w["message"] == said), "{report}");
    }
    let text = p.ralph().arg("report").output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("warning        notification `run_ended` not delivered"),
        "{text}"
    );
    // The page written as the run ended has the one it knew of by then.
    let page = p.read(".ralph/report.html");
    assert!(
        page.contains("notification `breaker_open` not delivered"),
        "the page"
    );
}

#[test]
fn an_empty_variable_in_a_channel_is_refused_at_start_like_an_unset_one() {
    let p = Project::new(
        PLAN,
        IDLE,
        "[notify]\nslack = \"$RALPH_TEST_EMPTY_SLACK\"\n",
    );
    for value in [Some(""), None] {
        let mut c = p.ralph();
        c.args(["run", "--max-iterations", "1"]);
        match value {
            Some(v) => c.env("RALPH_TEST_EMPTY_SLACK", v),
            None => c.env_remove("RALPH_TEST_EMPTY_SLACK"),
        };
        let out = c.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value:?}: {err}");
        let why = if value.is_some() {
            "which is empty"
        } else {
            "which is not set"
        };
        assert!(err.contains(why), "{value:?}: {err}");
        assert!(
            !p.path(".ralph/runs").exists()
                || std::fs::read_dir(p.path(".ralph/runs")).unwrap().count() == 0,
            "no session started"
        );
        // Doctor says it before the run does (before: "ready to run").
        let mut c = p.ralph();
        c.arg("doctor");
        match value {
            Some(v) => c.env("RALPH_TEST_EMPTY_SLACK", v),
            None => c.env_remove("RALPH_TEST_EMPTY_SLACK"),
        };
        let out = c.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("PROBLEM  notify") && text.contains(why),
            "{value:?}: {text}"
        );
        assert_eq!(out.status.code(), Some(1), "{value:?}: {text}");
    }
    let out = (p.ralph().arg("doctor"))
        .env(
            "RALPH_TEST_EMPTY_SLACK",
            "https://hooks.example/secret-path",
        )
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ok       notify         slack"), "{text}");
    assert!(!text.contains("secret-path"), "{text}");
}
