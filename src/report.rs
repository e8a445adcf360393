//! The morning report (`ralph report`, and the page `ralph run` writes as it
//! ends): what happened in a run, as one self-contained HTML page with
//! charts, a short text summary and JSON, all built from what the run
//! recorded (`.ralph/events.jsonl`, `.ralph/state.json`). The live terminal
//! view is `events::terminal`.
//!
//! ```text
//! report.rs          this map
//! report/
//!   runs.rs          which runs, reading their logs and states, writing the page
//!   model.rs         a run's figures as the report shows them (data)
//!   gather.rs        those figures from the run's event log and state (pure)
//!   lanes.rs         a parallel run: a lane per worker, the merge queue's history
//!   workers.rs       WorkersView: a parallel run as its ledger, its workers' own states and git tell it (`ralph status`, the items left)
//!   story.rs         what the night changed and how it was checked (data): Story, the verify lane
//!   changes.rs       the story read from git: commits, diffstats, sessions to reopen; their text and page
//!   charts.rs        the charts' geometry and clock; svg.rs draws them as inline SVG
//!   night.rs         the charts against the clock: the timeline (a lane per loop, the
//!                    merge queue, what was left to a person) and plan progress
//!   html.rs          the one page (report.css inlined, no script, a CSP that forbids loads)
//!   text.rs          the 80-column summary
//! ```

mod changes;
pub(crate) mod charts;
pub mod gather;
pub mod html;
pub(crate) mod lanes;
pub mod model;
mod night;
mod runs;
pub(crate) mod story;
pub(crate) mod svg;
pub mod text;
mod workers;

pub use model::Budgets;
pub(crate) use model::RunReport;
pub(crate) use runs::*;
pub(crate) use workers::WorkersView;
