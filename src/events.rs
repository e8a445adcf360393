//! What the supervisor reports: the [`Event`] stream (the schema of
//! `.ralph/events.jsonl` and of `ralph run --json`, documented in
//! docs/events.md), the [`Bus`] that carries it, and its sinks.
//!
//! ```text
//! events.rs          this map
//! events/
//!   schema.rs        Event, Record, the Sink trait, EventLog, JsonLines, Bus, read_log
//!   fleet.rs         FleetEvent: a fleet worker's events (`Event::Fleet`, all `fleet_…`), their human line
//!   tail.rs          the log followed as it grows (whole records only)
//!   view.rs          the run as the events tell it (per loop, totals): pure, for the live line and `ralph watch`
//!   live.rs          the live lines: per loop, progress, the checkpoint spelled out, fitted to a width (pure)
//!   terminal.rs      the human view: a status line (indicatif) on a TTY, plain lines elsewhere
//!   notify.rs        `[notify]`: a sink that turns some events into word to a person
//!   notify/          config (the keys), message (pure: which events, their text), deliver
//! ```
//!
//! Pitfalls: the event names and fields are an on-disk format read by
//! users' tools and `ralph report`; every event is redacted before a sink
//! sees it.

mod fleet;
mod live;
pub(crate) mod notify;
mod schema;
mod tail;
pub mod terminal;
pub(crate) mod view;

pub use fleet::FleetEvent;
pub(crate) use live::checkpoint_phrase;
pub use schema::*;
pub(crate) use tail::LogTail;
