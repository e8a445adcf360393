//! Text ralph shows or writes that came from elsewhere: the agent's text
//! made safe for a terminal, and secrets kept out of everything ralph
//! writes or commits.
//!
//! ```text
//! text.rs            this map
//! text/
//!   span.rs          Span: a duration as ralph.toml writes it ("90s", "1h30m")
//!   cut.rs           cut, cut_middle, fit_width, cut_bytes: text cut short, one way each
//!   printable.rs     escape sequences and control characters stripped
//!   secrets.rs       credential values redacted, token shapes scrubbed, key files kept out
//! ```

mod cut;
mod printable;
pub(crate) mod secrets;
mod span;

pub(crate) use cut::{cut, cut_bytes, cut_middle, fit_width, format_duration};
pub(crate) use printable::*;
pub(crate) use span::Span;
