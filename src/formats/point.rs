//! The moments a hook can be attached to: the keys of `[hooks]`, which are
//! also the `hook` field of the `hook` event. Which event fires which point
//! is `Point::of`, beside the hooks' runner.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Point {
    #[serde(rename = "on_checkpoint")]
    Checkpoint,
    #[serde(rename = "on_iteration_end")]
    IterationEnd,
    #[serde(rename = "on_exit")]
    Exit,
    #[serde(rename = "on_level")]
    Level,
    #[serde(rename = "on_breaker")]
    Breaker,
    #[serde(rename = "on_limit_wait")]
    LimitWait,
    #[serde(rename = "on_verify")]
    Verify,
}

impl Point {
    #[cfg(test)]
    pub(crate) const ALL: [Point; 7] = [
        Point::Checkpoint,
        Point::IterationEnd,
        Point::Exit,
        Point::Level,
        Point::Breaker,
        Point::LimitWait,
        Point::Verify,
    ];

    /// Its key in `[hooks]`.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Point::Checkpoint => "on_checkpoint",
            Point::IterationEnd => "on_iteration_end",
            Point::Exit => "on_exit",
            Point::Level => "on_level",
            Point::Breaker => "on_breaker",
            Point::LimitWait => "on_limit_wait",
            Point::Verify => "on_verify",
        }
    }
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_is_written_as_its_key() {
        for point in Point::ALL {
            let json = serde_json::to_string(&point).unwrap();
            assert_eq!(json, format!("\"{}\"", point.key()));
            assert_eq!(serde_json::from_str::<Point>(&json).unwrap(), point);
        }
    }
}
