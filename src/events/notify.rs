//! Notifications (`[notify]`, docs/notifications.md): word to a person when
//! the night needs one — the run ended, the breaker opened, a usage-limit
//! wait, a spent budget, something only a human can settle.
//!
//! The supervisor calls nothing here: [`Notifier`] is a sink on its event
//! bus, added by the lock holder, so every notice is an event that is also
//! in `.ralph/events.jsonl` (already redacted). `message` decides (pure):
//! which events, what they say, each channel's payload. `deliver` sends:
//! a thread per channel, each attempt bounded by `notify.timeout`, retries
//! with back-off; a failure is a warning, never the run's. Pitfall: the
//! URLs of Slack and Telegram hold secrets; they are remembered as such and
//! never printed.
//!
//! ```text
//! notify.rs          this map
//! notify/
//!   message.rs       which events become a `Notice`, its text, each channel's payload (pure)
//!   deliver.rs       `Notifier`, the bus sink: a thread per channel, timeouts, retries
//! ```

mod deliver;
mod message;

pub(crate) use deliver::{Channel, Notifier, deliver};
pub(crate) use message::test_notice;
