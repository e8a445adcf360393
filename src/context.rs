//! The context meter: how full the agent's context window is, turn by turn,
//! as a percentage of the usable window, and which level (L0–L3) that is.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::stream::StreamEvent;

/// Window of every current Claude model unless it says otherwise.
pub(crate) const DEFAULT_WINDOW: u64 = 200_000;
/// Window of a model whose name carries the `[1m]` suffix, and of the fifth
/// model generation on (see [`window_for_model`]).
pub(crate) const LONG_WINDOW: u64 = 1_000_000;

/// How far the growth rate looks back.
const RATE_HORIZON_SECS: f64 = 300.0;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize, Hash,
)]
pub enum Level {
    #[default]
    L0,
    L1,
    L2,
    L3,
}

impl Level {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Level::L0 => "L0",
            Level::L1 => "L1",
            Level::L2 => "L2",
            Level::L3 => "L3",
        }
    }

    pub(crate) fn meaning(self) -> &'static str {
        match self {
            Level::L0 => "ok",
            Level::L1 => "warn",
            Level::L2 => "checkpoint",
            Level::L3 => "emergency",
        }
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Thresholds {
    pub(crate) warn: f64,
    pub(crate) checkpoint: f64,
    pub(crate) emergency: f64,
}

impl Thresholds {
    /// DESIGN.md's defaults: warn 70, checkpoint 85, emergency 95.
    pub const DEFAULT: Thresholds = Thresholds {
        warn: 70.0,
        checkpoint: 85.0,
        emergency: 95.0,
    };

    pub(crate) fn level(&self, percent: f64) -> Level {
        if percent >= self.emergency {
            Level::L3
        } else if percent >= self.checkpoint {
            Level::L2
        } else if percent >= self.warn {
            Level::L1
        } else {
            Level::L0
        }
    }
}

/// Where the window size came from, as readings and `ralph context` say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowSource {
    Config,
    Default,
    ModelName,
    Result,
    /// Reported with each model call's usage (Codex's `modelContextWindow`).
    Reported,
    /// What an earlier run learnt of the model (`.ralph/windows.json`).
    Remembered,
}

impl WindowSource {
    /// Why the meter uses its window, for people.
    pub(crate) fn says(self) -> &'static str {
        match self {
            WindowSource::Config => "agent.context_window",
            WindowSource::Default => "default",
            WindowSource::ModelName => "by the model's name",
            WindowSource::Result => "reported in a result",
            WindowSource::Reported => "reported live",
            WindowSource::Remembered => "remembered from an earlier run",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    pub(crate) pre_tokens: u64,
    pub(crate) post_tokens: u64,
}

/// What one observed line changed on the meter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Change {
    Level { from: Level, to: Level },
    Compacted(Compaction),
}

#[derive(Debug, Clone)]
pub struct ContextMeter {
    window: u64,
    window_source: WindowSource,
    reserve: u64,
    thresholds: Thresholds,
    model: Option<String>,
    /// Windows results reported, by model: carried from one iteration to
    /// the next, since a result only comes at the end of a turn.
    known: BTreeMap<String, u64>,
    /// Windows earlier runs learnt, by model (`.ralph/windows.json`): below
    /// what this run learns, above a guess.
    remembered: BTreeMap<String, u64>,
    /// What this meter learnt itself, by model, and from where.
    learned: BTreeMap<String, WindowSource>,
    tokens: u64,
    level: Level,
    peak_percent: f64,
    peak_level: Level,
    peak_tokens: u64,
    samples: VecDeque<(f64, u64)>,
    /// `context.checkpoint_tokens`: L2 at this occupancy at the latest.
    cap: Option<u64>,
    /// The agent reports no usage per model call (a kind metered per
    /// process): its readings say so rather than show a number.
    not_metered: bool,
    /// The window of a model no result has reported yet, when the agent's
    /// kind knows it (Codex's): instead of [`window_for_model`]'s guess.
    before_report: Option<u64>,
}

impl ContextMeter {
    /// `configured_window` 0 means: detect it from the model.
    pub fn new(configured_window: u64, reserve: u64, thresholds: Thresholds) -> Self {
        let (window, window_source) = if configured_window > 0 {
            (configured_window, WindowSource::Config)
        } else {
            (DEFAULT_WINDOW, WindowSource::Default)
        };
        ContextMeter {
            window,
            window_source,
            reserve,
            thresholds,
            model: None,
            known: BTreeMap::new(),
            remembered: BTreeMap::new(),
            learned: BTreeMap::new(),
            tokens: 0,
            level: Level::L0,
            peak_percent: 0.0,
            peak_level: Level::L0,
            peak_tokens: 0,
            samples: VecDeque::new(),
            cap: None,
            not_metered: false,
            before_report: None,
        }
    }

    /// The window to use until the agent reports one (its kind's), unless
    /// `agent.context_window` is set or a result told the model's.
    pub(crate) fn with_window_before_report(mut self, window: Option<u64>) -> Self {
        self.before_report = window;
        if let Some(w) = window
            && self.window_source == WindowSource::Default
        {
            self.window = w;
        }
        self
    }

    /// For an agent that reports no usage per model call: no level acts,
    /// and every reading says "not metered live".
    pub(crate) fn not_metered_live(mut self, not_metered: bool) -> Self {
        self.not_metered = not_metered;
        self
    }

    /// Whether it was built [`Self::not_metered_live`].
    pub(crate) fn not_metered(&self) -> bool {
        self.not_metered
    }

    /// Start from windows earlier results reported (see [`Self::known_windows`]).
    pub(crate) fn with_known_windows(mut self, known: &BTreeMap<String, u64>) -> Self {
        self.known = known.clone();
        self
    }

    /// Windows results have reported so far, by model.
    pub(crate) fn known_windows(&self) -> &BTreeMap<String, u64> {
        &self.known
    }

    /// Start from windows earlier runs learnt (see [`WindowSource::Remembered`]),
    /// but one that would leave no usable window (a file edited by hand):
    /// every reading on it would be an emergency.
    pub(crate) fn with_remembered_windows(mut self, remembered: &BTreeMap<String, u64>) -> Self {
        let least = self.reserve.saturating_add(MIN_USABLE_WINDOW);
        self.remembered = remembered
            .iter()
            .filter(|&(_, &w)| w >= least)
            .map(|(m, &w)| (m.clone(), w))
            .collect();
        self
    }

    /// The windows this meter learnt from the agent, by model: the window
    /// and whether a result or a live report told it.
    pub(crate) fn learned_windows(&self) -> BTreeMap<String, (u64, WindowSource)> {
        self.learned
            .iter()
            .filter_map(|(m, &source)| Some((m.clone(), (*self.known.get(m)?, source))))
            .collect()
    }

    /// Learn the model before the first turn (from `--model` or `system/init`).
    pub(crate) fn set_model(&mut self, model: &str) {
        self.model = Some(model.to_string());
        if self.window_source == WindowSource::Config {
            return;
        }
        if let Some(&w) = self.known.get(model) {
            self.window = w;
            self.window_source = WindowSource::Result;
        } else if let Some(&w) = self.remembered.get(model) {
            self.window = w;
            self.window_source = WindowSource::Remembered;
        } else if let Some(w) = self.before_report {
            self.window = w;
            self.window_source = WindowSource::Default;
        } else {
            self.window = window_for_model(model);
            self.window_source = WindowSource::ModelName;
        }
    }

    /// Feed one decoded line; `now` is the time since the iteration began.
    pub fn observe(&mut self, event: &StreamEvent, now: Duration) -> Option<Change> {
        match event {
            StreamEvent::Init { model: Some(m), .. } => {
                self.set_model(m);
                self.relevel()
            }
            StreamEvent::Assistant(msg) if msg.is_main_thread() && !msg.is_synthetic() => {
                if let Some(w) = msg.context_window {
                    self.learn_window(w, WindowSource::Reported);
                }
                let tokens = msg.usage.occupancy();
                if tokens == 0 {
                    return None;
                }
                self.tokens = tokens;
                self.sample(now);
                self.relevel()
            }
            StreamEvent::Compacted {
                pre_tokens,
                post_tokens,
            } => {
                let c = Compaction {
                    pre_tokens: *pre_tokens,
                    post_tokens: *post_tokens,
                };
                self.tokens = *post_tokens;
                // The growth before the reset says nothing about after it.
                self.samples.clear();
                self.sample(now);
                self.relevel();
                Some(Change::Compacted(c))
            }
            StreamEvent::Result(r) if self.window_source != WindowSource::Config => {
                let learned = self
                    .model
                    .as_ref()
                    .and_then(|m| r.context_windows.get(m))
                    .or_else(|| r.context_windows.values().max())
                    .copied();
                if let Some(w) = learned {
                    self.learn_window(w, WindowSource::Result);
                }
                self.relevel()
            }
            _ => None,
        }
    }

    /// A window the agent reported (unless `agent.context_window` is set,
    /// or it would leave no usable window), remembered for its model.
    fn learn_window(&mut self, w: u64, source: WindowSource) {
        if self.window_source == WindowSource::Config || w <= self.reserve {
            return;
        }
        self.window = w;
        self.window_source = source;
        if let Some(m) = &self.model {
            self.known.insert(m.clone(), w);
            self.learned.insert(m.clone(), source);
        }
    }

    fn sample(&mut self, now: Duration) {
        let t = now.as_secs_f64();
        self.samples.push_back((t, self.tokens));
        while self
            .samples
            .front()
            .is_some_and(|&(t0, _)| t - t0 > RATE_HORIZON_SECS && self.samples.len() > 2)
        {
            self.samples.pop_front();
        }
    }

    /// Reach L2 at `cap` tokens even below the checkpoint percentage.
    pub(crate) fn with_checkpoint_cap(mut self, cap: Option<u64>) -> Self {
        self.cap = cap;
        self
    }

    fn relevel(&mut self) -> Option<Change> {
        let percent = self.percent();
        let mut level = self.thresholds.level(percent);
        if let Some(cap) = self.cap {
            // The cap stands in for the checkpoint percentage, and L1 comes
            // before it as before that: at warn/checkpoint of it (70/85 of
            // 200k: 165k), so the L1 nudge still precedes a capped L2.
            let warn_at = cap as f64 * self.thresholds.warn / self.thresholds.checkpoint;
            if self.tokens >= cap {
                level = level.max(Level::L2);
            } else if self.tokens as f64 >= warn_at {
                level = level.max(Level::L1);
            }
        }
        self.peak_percent = self.peak_percent.max(percent);
        self.peak_tokens = self.peak_tokens.max(self.tokens);
        self.peak_level = self.peak_level.max(level);
        if level != self.level {
            let from = std::mem::replace(&mut self.level, level);
            return Some(Change::Level { from, to: level });
        }
        None
    }

    pub fn tokens(&self) -> u64 {
        self.tokens
    }
    pub(crate) fn window(&self) -> u64 {
        self.window
    }
    #[cfg(test)]
    fn window_source(&self) -> WindowSource {
        self.window_source
    }
    pub(crate) fn usable(&self) -> u64 {
        usable_window(self.window, self.reserve)
    }
    pub(crate) fn percent(&self) -> f64 {
        self.tokens as f64 * 100.0 / self.usable() as f64
    }
    pub(crate) fn level(&self) -> Level {
        self.level
    }
    pub(crate) fn peak_percent(&self) -> f64 {
        self.peak_percent
    }
    pub(crate) fn peak_level(&self) -> Level {
        self.peak_level
    }
    pub(crate) fn peak_tokens(&self) -> u64 {
        self.peak_tokens
    }

    /// Growth in tokens per minute over the last few minutes.
    pub(crate) fn rate_per_min(&self) -> Option<f64> {
        let (&(t0, k0), &(t1, k1)) = (self.samples.front()?, self.samples.back()?);
        let dt = t1 - t0;
        (dt >= 1.0).then(|| (k1 as f64 - k0 as f64) * 60.0 / dt)
    }

    /// Time until the checkpoint level at the current growth rate.
    pub(crate) fn eta_to_checkpoint(&self) -> Option<Duration> {
        let percent_at = self.thresholds.checkpoint / 100.0 * self.usable() as f64;
        let target = self.cap.map_or(percent_at, |c| percent_at.min(c as f64));
        let remaining = target - self.tokens as f64;
        if remaining <= 0.0 {
            return Some(Duration::ZERO);
        }
        let rate = self.rate_per_min().filter(|r| *r > 0.0)?;
        Some(Duration::from_secs_f64(remaining / rate * 60.0))
    }

    pub(crate) fn snapshot(&self) -> MeterReading {
        MeterReading {
            tokens: self.tokens,
            usable: self.usable(),
            window: self.window,
            percent: round1(self.percent()),
            level: self.level,
            peak_percent: round1(self.peak_percent),
            rate_per_min: self.rate_per_min().map(|r| r.round()),
            eta_to_checkpoint_secs: self.eta_to_checkpoint().map(|d| d.as_secs()),
            not_metered: self.not_metered,
            window_source: Some(self.window_source),
        }
    }
}

/// A point-in-time reading of the meter, as events and state carry it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeterReading {
    pub tokens: u64,
    pub usable: u64,
    pub window: u64,
    pub percent: f64,
    pub level: Level,
    pub peak_percent: f64,
    pub rate_per_min: Option<f64>,
    pub eta_to_checkpoint_secs: Option<u64>,
    /// The agent's kind is not metered live: the numbers are not its
    /// context (absent: metered).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_metered: bool,
    /// Where `window` came from (absent in logs of older ralph).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_source: Option<WindowSource>,
}

pub(crate) fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The one rule for what of a `window` ralph works in: less `reserve`
/// (`agent.reserve_tokens`), never 0 (percentages divide by it). The
/// meter, a checkpoint's handoff and `ralph context --estimate` all use it.
pub(crate) fn usable_window(window: u64, reserve: u64) -> u64 {
    window.saturating_sub(reserve).max(1)
}

/// The smallest usable window ralph works in: a prompt (8,000 tokens by
/// default) and a turn must fit, or every first reading is an emergency.
pub(crate) const MIN_USABLE_WINDOW: u64 = 10_000;

/// Why `reserve` leaves no usable window of `configured_window` (0: detected
/// from the model, then at least [`DEFAULT_WINDOW`]) to work in: without
/// one every reading would be thousands of percent.
pub(crate) fn no_usable_window(configured_window: u64, reserve: u64) -> Option<String> {
    let (window, what) = match configured_window {
        0 => (
            DEFAULT_WINDOW,
            format!("not set: at least {DEFAULT_WINDOW}, detected from the model"),
        ),
        w => (w, w.to_string()),
    };
    (window < reserve.saturating_add(MIN_USABLE_WINDOW)).then(|| {
        format!(
            "agent.reserve_tokens ({reserve}) leaves {} of agent.context_window ({what}) to work in; at least {MIN_USABLE_WINDOW} tokens must be left (a prompt and a turn)",
            window.saturating_sub(reserve)
        )
    })
}

/// The window of a model before any result has said: 1M for a name with the
/// `[1m]` suffix and for generation 5 on (`claude-sonnet-5`, `claude-opus-5-5`,
/// `claude-haiku-5-5`: Claude Code 2.1.328 and 2.1.330 report a
/// `contextWindow` of 1,000,000 for them without the suffix, and run them
/// with it), else 200k. The generation is the first number after `claude-`
/// (`claude-sonnet-4-5-20250929`: 4, `claude-3-5-sonnet`: 3). A result's
/// `modelUsage` corrects either guess.
pub(crate) fn window_for_model(model: &str) -> u64 {
    let model = model.to_ascii_lowercase();
    let generation = model.split_once("claude-").and_then(|(_, rest)| {
        rest.split(['-', '[', '@', ':'])
            .find_map(|word| word.parse::<u32>().ok())
    });
    if model.contains("[1m]") || generation.is_some_and(|g| g >= 5) {
        LONG_WINDOW
    } else {
        DEFAULT_WINDOW
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{AssistantMessage, ResultMessage, Usage, decode_line};

    const T: Thresholds = Thresholds::DEFAULT;

    fn msg(id: &str, tokens: u64, parent: Option<&str>, model: &str) -> StreamEvent {
        StreamEvent::Assistant(AssistantMessage {
            id: id.into(),
            model: model.into(),
            parent_tool_use_id: parent.map(str::to_string),
            usage: Usage {
                input_tokens: 100,
                cache_read_input_tokens: tokens - 100,
                ..Usage::default()
            },
            ..AssistantMessage::default()
        })
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn the_usable_window_is_the_window_less_the_reserve_never_zero() {
        assert_eq!(usable_window(200_000, 33_000), 167_000);
        assert_eq!(usable_window(0, 33_000), 1);
        let m = ContextMeter::new(200_000, 33_000, T);
        assert_eq!(m.usable(), usable_window(m.window(), 33_000));
    }

    #[test]
    fn percent_is_of_the_usable_window() {
        let mut m = ContextMeter::new(0, 33_000, T);
        m.observe(&msg("a", 83_500, None, "claude-sonnet-4-5"), secs(1));
        assert_eq!(m.usable(), 167_000);
        assert_eq!(m.percent(), 50.0);
        assert_eq!(m.level(), Level::L0);
    }

    #[test]
    fn levels_rise_and_report_changes() {
        let mut m = ContextMeter::new(0, 33_000, T);
        assert_eq!(m.observe(&msg("a", 100_000, None, "m"), secs(1)), None);
        assert_eq!(
            m.observe(&msg("b", 120_000, None, "m"), secs(2)),
            Some(Change::Level {
                from: Level::L0,
                to: Level::L1
            })
        );
        assert_eq!(
            m.observe(&msg("c", 145_000, None, "m"), secs(3)),
            Some(Change::Level {
                from: Level::L1,
                to: Level::L2
            })
        );
        m.observe(&msg("d", 160_000, None, "m"), secs(4));
        assert_eq!(m.level(), Level::L3);
        assert_eq!(m.peak_level(), Level::L3);
    }

    #[test]
    fn checkpoint_tokens_caps_a_long_window() {
        // 1M window: 85% of the usable 967k would be ~822k tokens.
        let mut m = ContextMeter::new(1_000_000, 33_000, T).with_checkpoint_cap(Some(200_000));
        m.observe(&msg("a", 164_000, None, "m"), secs(1));
        assert_eq!(m.level(), Level::L0);
        // L1 at 70/85 of the cap, so that the nudge comes before it.
        m.observe(&msg("w", 165_000, None, "m"), secs(2));
        assert_eq!(m.level(), Level::L1);
        // 35k to go at 1k a second: the checkpoint is the cap's.
        assert_eq!(m.eta_to_checkpoint(), Some(Duration::from_secs(35)));
        m.observe(&msg("b", 200_000, None, "m"), secs(3));
        assert_eq!(m.level(), Level::L2);
        // the percentages still rule above the cap
        m.observe(&msg("c", 930_000, None, "m"), secs(4));
        assert_eq!(m.level(), Level::L3);
    }

    #[test]
    fn repeated_message_lines_the_newest_wins() {
        let mut m = ContextMeter::new(0, 33_000, T);
        m.observe(&msg("a", 10_000, None, "m"), secs(1));
        m.observe(&msg("a", 10_000, None, "m"), secs(1));
        m.observe(&msg("a", 12_000, None, "m"), secs(2));
        assert_eq!(m.tokens(), 12_000);
    }

    #[test]
    fn subagent_and_synthetic_lines_do_not_move_the_meter() {
        let mut m = ContextMeter::new(0, 33_000, T);
        m.observe(&msg("a", 40_000, None, "m"), secs(1));
        m.observe(&msg("s", 160_000, Some("toolu_1"), "m"), secs(2));
        m.observe(&msg("x", 199_000, None, "<synthetic>"), secs(3));
        assert_eq!(m.tokens(), 40_000);
        assert_eq!(m.level(), Level::L0);
    }

    #[test]
    fn window_detection_order() {
        // [1m] suffix on the init model.
        let mut m = ContextMeter::new(0, 33_000, T);
        m.observe(
            &decode_line(br#"{"type":"system","subtype":"init","model":"claude-sonnet-4-5[1m]"}"#),
            secs(0),
        );
        assert_eq!(m.window(), LONG_WINDOW);
        // A result teaches the real window.
        let mut m = ContextMeter::new(0, 33_000, T);
        m.set_model("claude-x");
        let mut r = ResultMessage::default();
        r.context_windows.insert("claude-x".into(), 500_000);
        m.observe(&StreamEvent::Result(r.clone()), secs(1));
        assert_eq!(m.window(), 500_000);
        assert_eq!(m.window_source(), WindowSource::Result);
        // The config wins over everything.
        let mut m = ContextMeter::new(300_000, 33_000, T);
        m.set_model("claude-sonnet-4-5[1m]");
        m.observe(&StreamEvent::Result(r), secs(1));
        assert_eq!(m.window(), 300_000);
    }

    #[test]
    fn a_kind_that_reports_its_window_is_metered_on_its_own_before_the_report() {
        // Codex's window before its first usage: not Claude's 200k for an
        // unknown name, whether the model comes from the config or `Init`.
        let codex = || ContextMeter::new(0, 33_000, T).with_window_before_report(Some(258_400));
        assert_eq!(codex().window(), 258_400);
        let mut m = codex();
        m.set_model("gpt-5.1-codex");
        assert_eq!(m.window(), 258_400);
        // What Codex reported for the model in an earlier iteration wins...
        let known = BTreeMap::from([("gpt-5.1-codex".to_string(), 950_000)]);
        let mut m = codex().with_known_windows(&known);
        m.set_model("gpt-5.1-codex");
        assert_eq!(m.window(), 950_000);
        // ...and `agent.context_window` over everything.
        let mut m = ContextMeter::new(300_000, 33_000, T).with_window_before_report(Some(258_400));
        m.set_model("gpt-5.1-codex");
        assert_eq!(m.window(), 300_000);
        // Without it: the guess from Claude's table, as before.
        let mut m = ContextMeter::new(0, 33_000, T).with_window_before_report(None);
        m.set_model("gpt-5.1-codex");
        assert_eq!(m.window(), DEFAULT_WINDOW);
    }

    #[test]
    fn generation_five_on_has_a_long_window_by_name() {
        for (model, window) in [
            ("claude-sonnet-5", LONG_WINDOW),
            ("claude-opus-5", LONG_WINDOW),
            ("claude-opus-5-5", LONG_WINDOW),
            ("claude-haiku-5-5", LONG_WINDOW),
            ("claude-sonnet-4-5[1m]", LONG_WINDOW),
            ("us.anthropic.claude-sonnet-5-v1:0", LONG_WINDOW),
            ("claude-sonnet-4-5", DEFAULT_WINDOW),
            ("claude-sonnet-4-5-20250929", DEFAULT_WINDOW),
            ("claude-opus-4-6", DEFAULT_WINDOW),
            ("claude-3-5-sonnet-20241022", DEFAULT_WINDOW),
            ("sonnet", DEFAULT_WINDOW),
            ("m", DEFAULT_WINDOW),
        ] {
            assert_eq!(window_for_model(model), window, "{model}");
        }
    }

    #[test]
    fn a_window_learned_from_a_result_carries_to_the_next_iteration() {
        let mut first = ContextMeter::new(0, 33_000, T);
        first.set_model("claude-opus-5-5");
        let mut r = ResultMessage::default();
        r.context_windows
            .insert("claude-opus-5-5".into(), LONG_WINDOW);
        first.observe(&StreamEvent::Result(r), secs(1));
        let mut next = ContextMeter::new(0, 33_000, T).with_known_windows(first.known_windows());
        next.set_model("claude-opus-5-5");
        assert_eq!(next.window(), LONG_WINDOW);
        next.set_model("claude-sonnet-4-5");
        assert_eq!(next.window(), DEFAULT_WINDOW);
    }

    #[test]
    fn a_remembered_window_is_below_the_config_and_this_run_above_a_guess() {
        let opus = "claude-opus-4-6";
        let map = |w: u64| BTreeMap::from([(opus.to_string(), w)]);
        let none = BTreeMap::new();
        // (case, configured, kind's own, this run's, remembered, window, source)
        for (case, configured, kind, known, remembered, window, source) in [
            (
                "a guess by name",
                0,
                None,
                &none,
                &none,
                DEFAULT_WINDOW,
                WindowSource::ModelName,
            ),
            (
                "remembered",
                0,
                None,
                &none,
                &map(LONG_WINDOW),
                LONG_WINDOW,
                WindowSource::Remembered,
            ),
            (
                "remembered, leaving no usable window: ignored",
                0,
                None,
                &none,
                &map(40_000),
                DEFAULT_WINDOW,
                WindowSource::ModelName,
            ),
            (
                "remembered over the kind's own",
                0,
                Some(258_400),
                &none,
                &map(LONG_WINDOW),
                LONG_WINDOW,
                WindowSource::Remembered,
            ),
            (
                "this run's over remembered",
                0,
                None,
                &map(500_000),
                &map(LONG_WINDOW),
                500_000,
                WindowSource::Result,
            ),
            (
                "the config over everything",
                300_000,
                None,
                &map(500_000),
                &map(LONG_WINDOW),
                300_000,
                WindowSource::Config,
            ),
        ] {
            let mut m = ContextMeter::new(configured, 33_000, T)
                .with_window_before_report(kind)
                .with_known_windows(known)
                .with_remembered_windows(remembered);
            m.set_model(opus);
            assert_eq!((m.window(), m.window_source()), (window, source), "{case}");
            assert_eq!(m.snapshot().window_source, Some(source), "{case}");
        }
        // Another model's memory is not this one's.
        let mut m = ContextMeter::new(0, 33_000, T).with_remembered_windows(&map(LONG_WINDOW));
        m.set_model("claude-sonnet-4-5");
        assert_eq!(m.window(), DEFAULT_WINDOW);
        // A report during the session wins over the memory, and is what
        // this meter learnt (with where from), to be remembered in turn.
        let mut m = ContextMeter::new(0, 33_000, T).with_remembered_windows(&map(LONG_WINDOW));
        m.set_model(opus);
        assert!(m.learned_windows().is_empty(), "remembered is not learnt");
        let mut r = ResultMessage::default();
        r.context_windows.insert(opus.into(), 400_000);
        m.observe(&StreamEvent::Result(r), secs(1));
        assert_eq!(
            (m.window(), m.window_source()),
            (400_000, WindowSource::Result)
        );
        assert_eq!(
            m.learned_windows(),
            BTreeMap::from([(opus.to_string(), (400_000, WindowSource::Result))])
        );
    }

    #[test]
    fn compaction_resets_to_post_tokens_and_is_recorded() {
        let mut m = ContextMeter::new(0, 33_000, T);
        m.observe(&msg("a", 160_000, None, "m"), secs(1));
        assert_eq!(m.level(), Level::L3);
        let change = m.observe(
            &StreamEvent::Compacted {
                pre_tokens: 160_000,
                post_tokens: 20_000,
            },
            secs(2),
        );
        assert!(matches!(change, Some(Change::Compacted(_))));
        assert_eq!(m.tokens(), 20_000);
        assert_eq!(m.level(), Level::L0);
        assert_eq!(m.peak_level(), Level::L3);
    }

    #[test]
    fn rate_and_eta() {
        let mut m = ContextMeter::new(0, 33_000, T);
        assert_eq!(m.rate_per_min(), None);
        m.observe(&msg("a", 20_000, None, "m"), secs(0));
        m.observe(&msg("b", 30_000, None, "m"), secs(60));
        assert_eq!(m.rate_per_min(), Some(10_000.0));
        // 85% of 167k = 141_950; (141_950 - 30_000) / 10_000 per min = 11.195 min
        let eta = m.eta_to_checkpoint().unwrap().as_secs();
        assert_eq!(eta, 671);
    }

    #[test]
    fn fixture_subagent_never_moves_main_meter() {
        let text = include_str!("../tests/fixtures/claude-2.1.197/subagent-task.jsonl");
        let mut m = ContextMeter::new(0, 33_000, T);
        let mut peak = 0;
        for line in text.lines() {
            m.observe(&decode_line(line.as_bytes()), secs(1));
            peak = peak.max(m.tokens());
        }
        assert_eq!(peak, 42_800);
    }

    #[test]
    fn fixture_mid_session_reaches_checkpoint() {
        let text = include_str!("../tests/fixtures/claude-2.1.197/mid-session-message.jsonl");
        let mut m = ContextMeter::new(0, 33_000, T);
        for line in text.lines() {
            m.observe(&decode_line(line.as_bytes()), secs(1));
        }
        assert_eq!(m.tokens(), 173_300);
        assert_eq!(m.level(), Level::L3);
    }
}
