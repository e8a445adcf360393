//! ralph's integration tests, one binary (one link instead of one per file):
//! a module per subject. Each runs the built `ralph` (and `ralph sim`, or
//! the real Claude Code CLI against a mock API) in its own temp directory,
//! so the tests of every module run side by side in this one process.
//!
//! Run one subject with a filter: `cargo test --test suite e2e_safety::`.
//! The real-CLI suites are `cargo test --test suite real_claude` (both
//! `real_claude::`, `real_claude_hooks::` and `real_claude_verify::`; skipped without the CLI, see
//! `real_claude.rs`), `cargo test --test suite real_codex` (the real
//! Codex CLI against a mock Responses API; `real_codex.rs`), and
//! `real_opencode::` and `real_gemini::` (those CLIs against the mocks in
//! `agent_mock/`). Snapshots live in `snapshots/`, named
//! `suite__<module>__<name>.snap`.
//!
//! Not here: `tests/bench_smoke.rs`, a `harness = false` binary that runs
//! the benchmark suite and is also that suite's helper process.

mod agent_mock;
mod common;

mod architecture;
mod cli_claude_code;
mod cli_report;
mod cli_setup;
mod e2e_checkpoint;
mod e2e_economy;
mod e2e_escape;
mod e2e_fleet;
mod e2e_git;
mod e2e_hooks;
mod e2e_items;
mod e2e_kinds;
mod e2e_loop;
mod e2e_notify;
mod e2e_quota;
mod e2e_resume;
mod e2e_safety;
mod e2e_safety_net;
mod e2e_sandbox;
mod e2e_scope;
mod e2e_seams;
mod e2e_secrets;
mod e2e_shared_budget;
mod e2e_spend;
mod e2e_start;
mod e2e_story;
mod e2e_strays;
mod e2e_verify;
mod e2e_workers;
mod hostile_input;
mod leak;
mod morning_report;
mod project;
mod prompt_budget;
mod real_claude;
mod real_claude_escape;
mod real_claude_hooks;
mod real_claude_verify;
mod real_codex;
mod real_gemini;
mod real_opencode;
mod rehearsal;
mod reliability;
mod sim_protocol;
mod token_estimate;
mod watch;
