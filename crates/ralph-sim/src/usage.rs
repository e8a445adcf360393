//! Token accounting: the usage of one API message and the totals of a turn or session,
//! with the list prices that reproduce the real CLI's cost.

/// Occupancy of the first turn when a scenario does not say (about what Claude Code's
/// system prompt and tools take).
pub(crate) const DEFAULT_CONTEXT: u64 = 20_000;
/// Output tokens counted per message in `result.usage` (the lines carry a placeholder 1).
pub(crate) const DEFAULT_OUTPUT_TOKENS: u64 = 20;

/// The input side of one API message: what the context holds after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Usage {
    pub(crate) input: u64,
    pub(crate) cache_creation: u64,
    pub(crate) cache_read: u64,
}

impl Usage {
    /// `context = N`: a small uncached part, the rest read from cache, like the fixtures.
    pub(crate) fn from_context(context: u64) -> Usage {
        let input = context.min(2_000);
        Usage {
            input,
            cache_creation: 0,
            cache_read: context - input,
        }
    }

    pub(crate) fn total(&self) -> u64 {
        self.input + self.cache_creation + self.cache_read
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Totals {
    pub(crate) input: u64,
    pub(crate) output: u64,
    pub(crate) cache_creation: u64,
    pub(crate) cache_read: u64,
    pub(crate) messages: u64,
}

impl Totals {
    pub(crate) fn add(&mut self, usage: &Usage, output: u64) {
        self.input += usage.input;
        self.cache_creation += usage.cache_creation;
        self.cache_read += usage.cache_read;
        self.output += output;
        self.messages += 1;
    }

    /// Sonnet list prices; they reproduce the fixtures' `total_cost_usd` exactly.
    pub(crate) fn cost(&self) -> f64 {
        (self.input as f64 * 3.0
            + self.cache_creation as f64 * 3.75
            + self.cache_read as f64 * 0.30
            + self.output as f64 * 15.0)
            / 1_000_000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_shorthand_splits_into_input_and_cache_read() {
        for n in [0, 500, 2_000, 120_000] {
            let u = Usage::from_context(n);
            assert_eq!(u.total(), n);
            assert_eq!(u.cache_creation, 0);
        }
        assert_eq!(Usage::from_context(120_000).input, 2_000);
    }

    #[test]
    fn cost_matches_the_fixture() {
        let totals = Totals {
            input: 5700,
            output: 100,
            cache_creation: 26300,
            cache_read: 459500,
            messages: 5,
        };
        assert!((totals.cost() - 0.255075).abs() < 1e-9);
    }
}
