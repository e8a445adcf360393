//! `Span`: a duration as `ralph.toml` writes it ("90s", "10m", "1h30m"),
//! and the short way ralph prints durations.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

/// A duration written the human way in `ralph.toml` ("60s", "10m", "1h30m").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Span(pub Duration);

impl Span {
    pub(crate) const fn secs(s: u64) -> Self {
        Span(Duration::from_secs(s))
    }

    pub(crate) fn parse(text: &str) -> std::result::Result<Self, String> {
        let d: jiff::SignedDuration = text.trim().parse().map_err(|_| {
            format!("`{text}` is not a duration (write e.g. \"90s\", \"10m\", \"1h30m\")")
        })?;
        if d.is_negative() {
            return Err(format!("`{text}` is negative"));
        }
        Ok(Span(d.unsigned_abs()))
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Span::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Span {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(
            &jiff::SignedDuration::try_from(self.0)
                .map_or_else(|_| format!("{}s", self.0.as_secs()), |d| format!("{d:#}")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::format_duration;

    #[test]
    fn span_formats() {
        assert_eq!(format_duration(Duration::from_secs(5)), "5s");
        assert_eq!(format_duration(Duration::from_secs(245)), "4m05s");
        assert_eq!(format_duration(Duration::from_secs(3720)), "1h02m");
    }
}
