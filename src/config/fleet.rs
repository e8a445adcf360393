//! `[fleet]` in ralph.toml (docs/fleet.md).

use serde::{Deserialize, Serialize};

use crate::text::Span;

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct FleetConfig {
    /// How long a claim (and the merge lease) lives without a renewal; a
    /// worker renews every third of it. A worker that stops renewing (dead,
    /// preempted, cut off) loses its item to another after this long.
    pub(crate) lease: Span,
    /// How far two machines' clocks may disagree without a live lease being
    /// judged expired (lease.rs: the second, clock-free rule bounds it).
    pub(crate) clock_skew: Span,
    /// From SIGTERM to the claim released: the loop's checkpoint, the WIP
    /// commit and the push must fit (Kubernetes: keep it below the pod's
    /// `terminationGracePeriodSeconds`, default 30s).
    pub(crate) grace: Span,
    /// The longest one fetch or push may take before it counts as failed.
    pub(crate) network_timeout: Span,
    /// The longest wait between retries while the remote cannot be reached.
    pub(crate) max_retry_wait: Span,
    /// The longest the remote may stay unreachable before the worker stops
    /// (its loop checkpointed, the work kept in the clone, exit 2): a remote
    /// gone for good is not retried all night while the loop pays for work
    /// it cannot deliver.
    pub(crate) max_unreachable: Span,
    /// How often, at most, a worker publishes its item loop's live reading
    /// (context, last tool, state) on its status ref when it changed, for
    /// `ralph watch --fleet`; `"0s"`: only with each renewal.
    pub(crate) live: Span,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            lease: Span::secs(5 * 60),
            clock_skew: Span::secs(60),
            grace: Span::secs(25),
            network_timeout: Span::secs(60),
            max_retry_wait: Span::secs(5 * 60),
            max_unreachable: Span::secs(60 * 60),
            live: Span::secs(15),
        }
    }
}

impl FleetConfig {
    /// The key that is wrong and why, if one is.
    pub(crate) fn problem(&self) -> Option<(&'static str, String)> {
        if self.lease.0.as_secs() < 3 {
            return Some((
                "lease",
                "must be at least 3s (it is renewed every third)".into(),
            ));
        }
        for (key, span) in [
            ("grace", self.grace),
            ("network_timeout", self.network_timeout),
            ("max_retry_wait", self.max_retry_wait),
            ("max_unreachable", self.max_unreachable),
        ] {
            if span.0.is_zero() {
                return Some((key, "must be longer than 0s".into()));
            }
        }
        None
    }
}
