use std::path::PathBuf;

use super::*;
use crate::formats::ledger::{Assignment, Task};

const SECS: fn(u64) -> Duration = Duration::from_secs;

fn rules() -> Rules {
    Rules {
        workers: 2,
        conflict_attempts: 3,
        limits: grant::Limits {
            max_iterations: 10,
            max_cost: Some(5.0),
            max_duration: Some(SECS(3600)),
        },
        from: grant::Spent::default(),
        lease: LEASE,
    }
}

fn assignment(worker: &str, item: &str, status: Status) -> Assignment {
    Assignment {
        worker: worker.into(),
        item: item.into(),
        branch: format!("ralph/r/{worker}"),
        worktree: PathBuf::from(format!("/wt/{worker}")),
        worktree_name: worker.into(),
        project_dir: PathBuf::from(format!("/wt/{worker}")),
        task: Task::Item,
        attempts: 0,
        restarts: 0,
        status,
        conflict: Vec::new(),
        base: String::new(),
        prepared: true,
    }
}

/// The machine, a clock and the world it reads, for one table row.
struct Bench {
    m: Machine,
    t0: Instant,
    ledger: Ledger,
    running: BTreeSet<String>,
}

impl Bench {
    fn new(rules: Rules) -> Bench {
        let t0 = Instant::now();
        Bench {
            m: Machine::new(rules, &Now { mono: t0 }),
            t0,
            ledger: Ledger::default(),
            running: BTreeSet::new(),
        }
    }

    fn at(&mut self, secs: u64, input: Input) -> Vec<Effect> {
        let mut out = Vec::new();
        let world = World {
            ledger: &self.ledger,
            running: &self.running,
        };
        let now = Now {
            mono: self.t0 + SECS(secs),
        };
        self.m.handle(input, &world, &now, &mut out);
        out
    }

    fn fill(&mut self, secs: u64, free: &Free) -> Vec<Effect> {
        self.at(secs, Input::Fill(free))
    }

    /// `worker` runs `item`, started with its first grant.
    fn running(&mut self, worker: &str, item: &str) {
        self.ledger
            .assignments
            .push(assignment(worker, item, Status::Running));
        self.at(0, Input::Starting { worker });
        self.running.insert(worker.into());
    }
}

fn ready(items: &[&str]) -> Free {
    Free {
        ready: items.iter().map(|s| s.to_string()).collect(),
        room: true,
        busy: BTreeSet::new(),
    }
}

fn assign(item: &str) -> Effect {
    Effect::Assign { item: item.into() }
}

fn resume(worker: &str) -> Effect {
    Effect::Resume {
        worker: worker.into(),
    }
}

fn grant(worker: &str, sessions: u32) -> Effect {
    Effect::Grant {
        worker: worker.into(),
        sessions,
    }
}

#[test]
fn assignment_takes_assignments_up_first_then_ready_units_in_plan_order() {
    // (assignments in the ledger, running workers, free, what starts)
    type Case = (Vec<Assignment>, Vec<&'static str>, Free, Vec<Effect>);
    let cases: Vec<Case> = vec![
        // A fresh run: the first ready unit.
        (vec![], vec![], ready(&["a", "b"]), vec![assign("a")]),
        // A previous coordinator's assignment, paused or running, first.
        (
            vec![assignment("w1", "x", Status::Paused)],
            vec![],
            ready(&["a"]),
            vec![resume("w1")],
        ),
        (
            vec![assignment("w3", "x", Status::Running)],
            vec![],
            ready(&["a"]),
            vec![resume("w3")],
        ),
        // One left to a person is not taken up.
        (
            vec![assignment("w1", "x", Status::Left("conflict".into()))],
            vec![],
            ready(&["a"]),
            vec![assign("a")],
        ),
        // Every worker busy: nothing starts (their grants are held).
        (
            vec![
                assignment("w1", "x", Status::Running),
                assignment("w2", "y", Status::Running),
            ],
            vec!["w1", "w2"],
            ready(&["a"]),
            vec![],
        ),
        // No room for a worktree: said, nothing starts.
        (
            vec![],
            vec![],
            Free {
                room: false,
                ..ready(&["a"])
            },
            vec![Effect::WorktreesFull],
        ),
        // Nothing ready.
        (vec![], vec![], ready(&[]), vec![]),
    ];
    for (i, (assignments, running, free, want)) in cases.into_iter().enumerate() {
        let mut b = Bench::new(rules());
        b.ledger.assignments = assignments;
        b.running = running.iter().map(|w| w.to_string()).collect();
        // The running ones hold a session each: no grant to give.
        for w in running {
            b.at(0, Input::Starting { worker: w });
        }
        assert_eq!(b.fill(0, &free), want, "case {i}");
    }
}

#[test]
fn nothing_starts_once_halted_paused_or_out_of_budget() {
    let mut b = Bench::new(rules());
    b.at(0, Input::Signal(Sig::Stop));
    assert_eq!(b.fill(0, &ready(&["a"])), vec![]);
    assert!(b.m.nothing_to_start(
        &World {
            ledger: &b.ledger,
            running: &b.running
        },
        &ready(&["a"])
    ));

    let mut b = Bench::new(rules());
    b.ledger.iterations = 10;
    assert_eq!(b.fill(0, &ready(&["a"])), vec![]);
}

#[test]
fn the_merge_queue_takes_finished_workers_in_the_order_they_ended() {
    let mut b = Bench::new(rules());
    b.running("w1", "a");
    b.running("w2", "b");
    let mut queue = Vec::new();
    for (worker, code) in [("w2", 0), ("w1", 1)] {
        b.running.remove(worker);
        queue.extend(b.at(
            1,
            Input::Exited {
                worker,
                code,
                busy: false,
            },
        ));
    }
    assert_eq!(
        queue,
        vec![
            Effect::Merge { item: "b".into() },
            // A worker that failed is not merged: left to a person.
            Effect::Set {
                item: "a".into(),
                status: Status::Left("its loop ended: failed (exit 1)".into()),
                restarted: false,
            },
        ]
    );
}

#[test]
fn a_conflict_is_handed_back_until_the_last_attempt_then_left_to_a_person() {
    let conflict = Merged::Conflict {
        files: vec!["src/x.rs".into()],
    };
    let back = |start| Effect::HandBack {
        item: "a".into(),
        files: vec!["src/x.rs".into()],
        start,
    };
    let left = |attempt: u32| Effect::Leave {
        item: "a".into(),
        reason: "conflict",
        why: format!("merge conflict in src/x.rs still unresolved after {attempt} attempt(s)"),
    };
    let ff = Merged::FastForward {
        from: "1".into(),
        to: "2".into(),
    };
    let blocked = Merged::Blocked {
        reason: "your edits to x".into(),
    };
    // (halted before, attempt, merged, effect)
    let table = [
        (false, 1, &conflict, back(true)),
        (false, 2, &conflict, back(true)),
        (false, 3, &conflict, left(3)),
        (false, 4, &conflict, left(4)),
        // Halted (`ralph stop`, a budget): the update waits for the next
        // run instead of starting a session after the stop.
        (true, 1, &conflict, back(false)),
        (true, 3, &conflict, left(3)),
        (
            false,
            1,
            &Merged::AlreadyMerged,
            Effect::CheckOff { item: "a".into() },
        ),
        (false, 2, &ff, Effect::CheckOff { item: "a".into() }),
        (
            false,
            1,
            &blocked,
            Effect::Leave {
                item: "a".into(),
                reason: "merge_blocked",
                why: "your edits to x".into(),
            },
        ),
    ];
    for (halted, attempt, merged, want) in table {
        let mut b = Bench::new(rules());
        if halted {
            b.at(0, Input::Signal(Sig::Stop));
        }
        let out = b.at(
            1,
            Input::MergeDone {
                item: "a",
                attempt,
                merged,
            },
        );
        assert_eq!(out, vec![want], "halted {halted}, attempt {attempt}");
    }
    // The iteration that ended in this conflict spent the last of the
    // budget, before any tick saw it: the run halts, the update waits.
    let mut b = Bench::new(rules());
    b.ledger.iterations = 10;
    let out = b.at(
        1,
        Input::MergeDone {
            item: "a",
            attempt: 1,
            merged: &conflict,
        },
    );
    assert_eq!(out, vec![Effect::Tell(To::All, Order::Stop), back(false)]);
    assert_eq!(b.m.stop(), Some(Stop::Iterations));
}

#[test]
fn a_dead_coordinators_worker_holds_its_lease_until_it_expires_then_is_taken_over() {
    let mut b = Bench::new(rules());
    b.ledger
        .assignments
        .push(assignment("w1", "x", Status::Running));
    let busy = Free {
        busy: ["w1".to_string()].into(),
        ..ready(&["a"])
    };
    // (seconds, free, starts): it is the next; nothing starts before it.
    let table = [
        (0, &busy, vec![]),
        (119, &busy, vec![]),
        (120, &busy, vec![resume("w1")]),
    ];
    for (secs, free, want) in table {
        assert_eq!(b.fill(secs, free), want, "at {secs}s");
    }
    // Its project free again: taken over at once, whatever the lease.
    let mut b = Bench::new(rules());
    b.ledger
        .assignments
        .push(assignment("w1", "x", Status::Paused));
    assert_eq!(b.fill(0, &busy), vec![]);
    assert_eq!(b.fill(5, &ready(&["a"])), vec![resume("w1")]);
}

#[test]
fn a_workers_exit_decides_resume_restart_or_left() {
    let set = |status, restarted| {
        vec![Effect::Set {
            item: "a".into(),
            status,
            restarted,
        }]
    };
    let left = |why: &str| Status::Left(why.into());
    // (exit code, restarts so far, project busy, effects)
    let table = [
        (6, 0, false, set(Status::Paused, false)),
        // Interrupted: resumed, none of its restarts used (five nights
        // of Ctrl-C do not leave the next kill -9 to a person).
        (130, 0, false, set(Status::Paused, false)),
        (143, MAX_RESTARTS, false, set(Status::Paused, false)),
        (137, MAX_RESTARTS - 1, false, set(Status::Paused, true)),
        // Killed (-9): started again in its worktree, a few times.
        (137, 0, false, set(Status::Paused, true)),
        (
            137,
            MAX_RESTARTS,
            false,
            set(left("its loop ended: failed (exit 137)"), true),
        ),
        // Refused because a dead coordinator's loop still holds its project.
        (2, 0, true, set(Status::Paused, false)),
        (
            2,
            0,
            false,
            set(left("its loop ended: failed (exit 2)"), false),
        ),
        (
            3,
            0,
            false,
            set(left("its loop ended: breaker_open (exit 3)"), false),
        ),
        (
            4,
            0,
            false,
            set(left("its loop ended: iteration_limit (exit 4)"), false),
        ),
    ];
    for (code, restarts, busy, want) in table {
        let mut b = Bench::new(rules());
        b.running("w1", "a");
        b.ledger.assignments[0].restarts = restarts;
        b.running.clear();
        let out = b.at(
            1,
            Input::Exited {
                worker: "w1",
                code,
                busy,
            },
        );
        assert_eq!(out, want, "exit {code}");
    }
    // Its own budget spent (exit 5) is everyone's: the others stop too.
    let mut b = Bench::new(rules());
    b.running("w1", "a");
    b.running("w2", "b");
    b.running.remove("w1");
    let out = b.at(
        1,
        Input::Exited {
            worker: "w1",
            code: 5,
            busy: false,
        },
    );
    assert_eq!(out[0], Effect::Tell(To::All, Order::Stop));
    assert_eq!(b.m.stop(), Some(Stop::Budget));
    // A worker with no running assignment (ended before): nothing.
    assert_eq!(
        b.at(
            2,
            Input::Exited {
                worker: "w9",
                code: 0,
                busy: false
            }
        ),
        vec![]
    );
}

#[test]
fn sessions_are_granted_before_they_start_while_the_shared_budget_covers_them() {
    let mut b = Bench::new(Rules {
        limits: grant::Limits {
            max_iterations: 3,
            max_cost: None,
            max_duration: None,
        },
        ..rules()
    });
    b.ledger.assignments = vec![
        assignment("w1", "a", Status::Running),
        assignment("w2", "b", Status::Running),
    ];
    assert_eq!(
        b.at(0, Input::Starting { worker: "w1" }),
        vec![grant("w1", 1)]
    );
    assert_eq!(
        b.at(0, Input::Starting { worker: "w2" }),
        vec![grant("w2", 1)]
    );
    b.running = ["w1".to_string(), "w2".to_string()].into();
    // Both running: no second session yet.
    assert_eq!(b.fill(1, &ready(&[])), vec![]);
    // w1's session ends: it is granted its second (1 ended + 1 running + 1 < 3).
    b.at(
        2,
        Input::Heard {
            worker: "w1",
            heard: Heard::SessionStarted,
        },
    );
    b.at(
        3,
        Input::Heard {
            worker: "w1",
            heard: Heard::SessionEnded,
        },
    );
    b.ledger.iterations = 1;
    assert_eq!(b.fill(3, &ready(&[])), vec![grant("w1", 2)]);
    // w2's ends too: 2 ended + 1 running = 3, the budget is granted out.
    b.at(
        4,
        Input::Heard {
            worker: "w2",
            heard: Heard::SessionStarted,
        },
    );
    b.at(
        5,
        Input::Heard {
            worker: "w2",
            heard: Heard::SessionEnded,
        },
    );
    b.ledger.iterations = 2;
    assert_eq!(b.fill(5, &ready(&[])), vec![]);
    // A session end heard twice (a record read back) is not a free session.
    b.at(
        6,
        Input::Heard {
            worker: "w2",
            heard: Heard::SessionEnded,
        },
    );
    assert_eq!(b.fill(6, &ready(&[])), vec![]);
    // No room at a worker's start: it waits for a grant, none given.
    let mut b = Bench::new(rules());
    b.ledger.iterations = 10;
    assert_eq!(
        b.at(0, Input::Starting { worker: "w1" }),
        vec![grant("w1", 0)]
    );
}

#[test]
fn the_shared_budgets_as_spent_halt_the_run() {
    // (iterations, cost, seconds since the start, from before, stop)
    let from = grant::Spent {
        iterations: 4,
        cost: 1.0,
        elapsed: SECS(600),
        running: 0,
    };
    let none = grant::Spent::default();
    let table = [
        (9, 4.9, 3599, none, None),
        (10, 0.0, 0, none, Some(Stop::Iterations)),
        (1, 5.0, 0, none, Some(Stop::Budget)),
        (1, 0.0, 3600, none, Some(Stop::Budget)),
        // Counted from where the budgets count (`--budget-per-invocation`,
        // a resumed run): spent before counts, not twice.
        (13, 5.9, 2999, from, None),
        (14, 0.0, 0, from, Some(Stop::Iterations)),
        (4, 0.0, 3000, from, Some(Stop::Budget)),
    ];
    for (iterations, cost, secs, from, want) in table {
        let mut b = Bench::new(Rules { from, ..rules() });
        b.ledger.iterations = iterations;
        b.ledger.cost_usd = cost;
        let out = b.at(secs, Input::Tick);
        assert_eq!(b.m.stop(), want, "{iterations} {cost} {secs}s");
        let told = want.map(|_| Effect::Tell(To::All, Order::Stop));
        assert_eq!(out, told.into_iter().collect::<Vec<_>>());
    }
}

#[test]
fn one_usage_limit_pauses_every_worker_until_it_resets() {
    let mut b = Bench::new(rules());
    b.running("w1", "a");
    let out = b.at(
        10,
        Input::Heard {
            worker: "w1",
            heard: Heard::LimitWait { seconds: 60 },
        },
    );
    assert_eq!(out[0], Effect::Tell(To::AllBut("w1".into()), Order::Stop));
    let world_done = |b: &Bench| {
        b.m.nothing_to_start(
            &World {
                ledger: &b.ledger,
                running: &b.running,
            },
            &ready(&[]),
        )
    };
    // Paused: nothing starts, and the run does not end.
    assert_eq!(b.fill(11, &ready(&["b"])), vec![]);
    assert!(!world_done(&b));
    b.at(69, Input::Tick);
    assert_eq!(b.fill(69, &ready(&["b"])), vec![]);
    b.at(70, Input::Tick);
    assert_eq!(b.fill(70, &ready(&["b"])), vec![assign("b")]);
}

#[test]
fn signals_halt_checkpoint_or_detach() {
    let table = [
        (
            Sig::Interrupt,
            Effect::Tell(To::All, Order::Interrupt),
            Some(Stop::Interrupted),
        ),
        (
            Sig::Stop,
            Effect::Tell(To::All, Order::Stop),
            Some(Stop::Stopped),
        ),
        (
            Sig::Checkpoint,
            Effect::Tell(To::All, Order::Checkpoint),
            None,
        ),
        (Sig::Hangup, Effect::Detach, None),
    ];
    for (sig, effect, stop) in table {
        let mut b = Bench::new(rules());
        assert_eq!(b.at(0, Input::Signal(sig)), vec![effect], "{sig:?}");
        assert_eq!(b.m.stop(), stop);
    }
    // The first reason stays; a second interrupt is passed on.
    let mut b = Bench::new(rules());
    b.at(0, Input::Signal(Sig::Stop));
    let out = b.at(1, Input::Signal(Sig::Interrupt));
    assert_eq!(out, vec![Effect::Tell(To::All, Order::Interrupt)]);
    assert_eq!(b.m.stop(), Some(Stop::Stopped));
}
