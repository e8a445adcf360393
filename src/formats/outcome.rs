//! An iteration's outcome as a type on the wire: `events.jsonl`'s
//! `iteration_ended.outcome`, `state.json`'s history and `RALPH_OUTCOME`
//! carry it as the same strings as always ("done", "checkpoint (context,
//! L2)", "agent did not start: …"); readers (the morning report) match on
//! the variant, never on the text. The string is parsed in one place, here,
//! at the serde edge; a string no version of ralph wrote is kept as it came.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Trigger;
use crate::context::Level;

/// One iteration's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IterationOutcome {
    NotStarted(String),
    UsageLimit,
    Checkpoint(Trigger, Level),
    Failed,
    Promise,
    /// It kept its promise, but the `[verify]` commands failed.
    Refused,
    Done,
    /// The supervisor died during it; the next run took it over.
    Crash,
    /// Text that names none of the above (a record from elsewhere), kept
    /// as it was.
    Other(String),
}

/// No outcome yet: the empty text, as records without one always read.
impl Default for IterationOutcome {
    fn default() -> Self {
        IterationOutcome::Other(String::new())
    }
}

impl IterationOutcome {
    /// No outcome recorded.
    pub(crate) fn is_empty(&self) -> bool {
        matches!(self, IterationOutcome::Other(t) if t.is_empty())
    }

    /// The kind without its details: "checkpoint", "agent did not start",
    /// "usage limit", "failed" …, for counting outcomes.
    pub(crate) fn kind(&self) -> String {
        match self {
            IterationOutcome::NotStarted(_) => "agent did not start".into(),
            IterationOutcome::Checkpoint(..) => "checkpoint".into(),
            IterationOutcome::Other(text) => text
                .split([':', '('])
                .next()
                .unwrap_or_default()
                .trim()
                .into(),
            other => other.to_string(),
        }
    }

    /// Whether the agent failed (it did not start, failed, claimed
    /// completion over failing checks, or its supervisor crashed).
    pub(crate) fn is_failure(&self) -> bool {
        matches!(
            self,
            IterationOutcome::NotStarted(_)
                | IterationOutcome::Failed
                | IterationOutcome::Refused
                | IterationOutcome::Crash
        )
    }

    /// The outcome its text names.
    pub(crate) fn parse(text: &str) -> IterationOutcome {
        match text {
            "usage limit" => IterationOutcome::UsageLimit,
            "failed" => IterationOutcome::Failed,
            "promise" => IterationOutcome::Promise,
            "refused" => IterationOutcome::Refused,
            "done" => IterationOutcome::Done,
            "crash" => IterationOutcome::Crash,
            _ => {
                if let Some(e) = text.strip_prefix("agent did not start: ") {
                    return IterationOutcome::NotStarted(e.to_string());
                }
                let checkpoint = text
                    .strip_prefix("checkpoint (")
                    .and_then(|r| r.strip_suffix(')'))
                    .and_then(|r| r.split_once(", "))
                    .and_then(|(t, l)| Some(IterationOutcome::Checkpoint(word(t)?, word(l)?)));
                checkpoint.unwrap_or_else(|| IterationOutcome::Other(text.to_string()))
            }
        }
    }
}

impl From<&str> for IterationOutcome {
    fn from(text: &str) -> Self {
        IterationOutcome::parse(text)
    }
}

/// A snake_case word as serde names it (`rate_limit`, `L2`).
fn word<T: serde::de::DeserializeOwned>(s: &str) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(s.trim().into())).ok()
}

impl std::fmt::Display for IterationOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IterationOutcome::NotStarted(e) => write!(f, "agent did not start: {e}"),
            IterationOutcome::UsageLimit => f.write_str("usage limit"),
            IterationOutcome::Checkpoint(t, l) => write!(f, "checkpoint ({t}, {l})"),
            IterationOutcome::Failed => f.write_str("failed"),
            IterationOutcome::Promise => f.write_str("promise"),
            IterationOutcome::Refused => f.write_str("refused"),
            IterationOutcome::Done => f.write_str("done"),
            IterationOutcome::Crash => f.write_str("crash"),
            IterationOutcome::Other(text) => f.write_str(text),
        }
    }
}

impl Serialize for IterationOutcome {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for IterationOutcome {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(IterationOutcome::parse(&String::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_reads_back_from_its_text() {
        for (outcome, text) in [
            (
                IterationOutcome::NotStarted("no such file".into()),
                "agent did not start: no such file",
            ),
            (IterationOutcome::UsageLimit, "usage limit"),
            (
                IterationOutcome::Checkpoint(Trigger::Context, Level::L2),
                "checkpoint (context, L2)",
            ),
            (
                IterationOutcome::Checkpoint(Trigger::RateLimit, Level::L0),
                "checkpoint (rate_limit, L0)",
            ),
            (IterationOutcome::Failed, "failed"),
            (IterationOutcome::Promise, "promise"),
            (IterationOutcome::Refused, "refused"),
            (IterationOutcome::Done, "done"),
            (IterationOutcome::Crash, "crash"),
            (
                IterationOutcome::Other("checkpoint (nonsense, L9)".into()),
                "checkpoint (nonsense, L9)",
            ),
        ] {
            assert_eq!(outcome.to_string(), text);
            let json = serde_json::to_string(&outcome).unwrap();
            assert_eq!(json, serde_json::to_string(text).unwrap());
            assert_eq!(
                serde_json::from_str::<IterationOutcome>(&json).unwrap(),
                outcome
            );
        }
        assert!(IterationOutcome::default().is_empty());
        assert_eq!(IterationOutcome::default().to_string(), "");
    }

    #[test]
    fn kinds_leave_the_details_out() {
        for (text, kind) in [
            ("checkpoint (context, L2)", "checkpoint"),
            ("agent did not start: gone", "agent did not start"),
            ("usage limit", "usage limit"),
            ("done", "done"),
            ("odd (thing)", "odd"),
        ] {
            assert_eq!(IterationOutcome::parse(text).kind(), kind);
        }
    }
}
