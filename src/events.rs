//! What the supervisor reports: the event stream — the [`Bus`] that
//! carries it and its sinks, and the views drawn from it. The records
//! themselves (`Event`, `Record`: the schema of `.ralph/events.jsonl` and
//! of `ralph run --json`, docs/events.md) are a format: `formats::event`.
//!
//! ```text
//! events.rs          this map
//! events/
//!   bus.rs           the Sink trait, EventLog, JsonLines, Bus
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

mod bus;
mod live;
pub(crate) mod notify;
mod tail;
pub mod terminal;
pub(crate) mod view;

pub(crate) use bus::*;
pub(crate) use live::checkpoint_phrase;
pub(crate) use tail::LogTail;
