//! Time as a value: the pure parts of the supervisor get the time only
//! through a [`Now`] read once per input by the driver.

use std::time::Instant;

/// The moment an input is handled: the pure parts get time only this way.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Now {
    pub(super) mono: Instant,
    /// Wall time, for reset times and the deadline. A timestamp, not a
    /// zoned time: reading the time zone for every line would cost more
    /// than the line (the zone is read once per iteration).
    pub(super) wall: jiff::Timestamp,
}

impl Now {
    pub(super) fn read() -> Now {
        Now {
            mono: Instant::now(),
            wall: jiff::Timestamp::now(),
        }
    }
}
