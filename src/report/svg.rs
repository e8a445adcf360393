//! A minimal SVG writer for the report's charts: shapes with CSS classes
//! (the page's stylesheet colours them), `<title>` tooltips, linear scales.
//! Hand-rolled rather than a plotting crate: the charts need a dozen shapes,
//! and classes + tooltips keep every chart a few kilobytes.

use std::fmt::Write as _;

/// Text safe inside XML (element content and attribute values).
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters are not allowed in XML 1.0.
            c if c.is_control() && !matches!(c, '\n' | '\t') => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// `v` with at most one decimal, without a trailing `.0`: small output.
fn n(v: f64) -> String {
    let r = (v * 10.0).round() / 10.0;
    if r.fract() == 0.0 {
        format!("{}", r as i64)
    } else {
        format!("{r:.1}")
    }
}

/// Maps a domain `[d0, d1]` onto a range `[r0, r1]` (pixels).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scale {
    d0: f64,
    d1: f64,
    r0: f64,
    r1: f64,
}

impl Scale {
    pub(crate) fn new(domain: (f64, f64), range: (f64, f64)) -> Scale {
        let (d0, mut d1) = domain;
        if d1 <= d0 {
            d1 = d0 + 1.0;
        }
        Scale {
            d0,
            d1,
            r0: range.0,
            r1: range.1,
        }
    }
    pub(crate) fn at(&self, v: f64) -> f64 {
        let t = ((v - self.d0) / (self.d1 - self.d0)).clamp(0.0, 1.0);
        self.r0 + t * (self.r1 - self.r0)
    }
    pub(crate) fn max(&self) -> f64 {
        self.d1
    }
}

/// One `<svg>` element being written.
pub(crate) struct Svg {
    out: String,
}

impl Svg {
    /// A chart `w`×`h` pixels wide that scales with the page; `label` is
    /// its accessible name.
    pub(crate) fn new(w: u32, h: u32, class: &str, label: &str) -> Svg {
        let mut out = String::with_capacity(2048);
        let _ = write!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="{class}" viewBox="0 0 {w} {h}" role="img" aria-label="{}">"#,
            esc(label)
        );
        Svg { out }
    }

    pub(crate) fn line(&mut self, (x1, y1): (f64, f64), (x2, y2): (f64, f64), class: &str) {
        let _ = write!(
            self.out,
            r#"<line class="{class}" x1="{}" y1="{}" x2="{}" y2="{}"/>"#,
            n(x1),
            n(y1),
            n(x2),
            n(y2)
        );
    }

    pub(crate) fn rect(&mut self, (x, y): (f64, f64), (w, h): (f64, f64), class: &str, tip: &str) {
        let _ = write!(
            self.out,
            r#"<rect class="{class}" x="{}" y="{}" width="{}" height="{}">"#,
            n(x),
            n(y),
            n(w.max(0.5)),
            n(h.max(0.0))
        );
        self.tip_and_close(tip, "rect");
    }

    pub(crate) fn text(&mut self, (x, y): (f64, f64), anchor: &str, class: &str, text: &str) {
        let _ = write!(
            self.out,
            r#"<text class="{class}" x="{}" y="{}" text-anchor="{anchor}">{}</text>"#,
            n(x),
            n(y),
            esc(text)
        );
    }

    /// An open line through `points`.
    pub(crate) fn polyline(&mut self, points: &[(f64, f64)], class: &str) {
        self.out
            .push_str(&format!(r#"<polyline class="{class}" points=""#));
        self.points(points);
        self.out.push_str(r#""/>"#);
    }

    /// A closed shape through `points` (an area under a line).
    pub(crate) fn polygon(&mut self, points: &[(f64, f64)], class: &str) {
        self.out
            .push_str(&format!(r#"<polygon class="{class}" points=""#));
        self.points(points);
        self.out.push_str(r#""/>"#);
    }

    fn points(&mut self, points: &[(f64, f64)]) {
        for (i, (x, y)) in points.iter().enumerate() {
            if i > 0 {
                self.out.push(' ');
            }
            let _ = write!(self.out, "{},{}", n(*x), n(*y));
        }
    }

    /// A marker glyph centred on a point: a diamond, triangle, square or
    /// circle by `shape`, with a tooltip.
    pub(crate) fn marker(&mut self, (x, y): (f64, f64), shape: Shape, class: &str, tip: &str) {
        let r = 5.0;
        let d = match shape {
            Shape::Diamond => format!(
                "M{} {}L{} {}L{} {}L{} {}Z",
                n(x),
                n(y - r),
                n(x + r),
                n(y),
                n(x),
                n(y + r),
                n(x - r),
                n(y)
            ),
            Shape::Triangle => format!(
                "M{} {}L{} {}L{} {}Z",
                n(x),
                n(y - r),
                n(x + r),
                n(y + r * 0.8),
                n(x - r),
                n(y + r * 0.8)
            ),
            Shape::Square => format!(
                "M{} {}h{}v{}h-{}Z",
                n(x - r * 0.8),
                n(y - r * 0.8),
                n(r * 1.6),
                n(r * 1.6),
                n(r * 1.6)
            ),
            Shape::Circle => format!(
                "M{} {}a{r} {r} 0 1 0 {} 0a{r} {r} 0 1 0 -{} 0Z",
                n(x - r),
                n(y),
                n(2.0 * r),
                n(2.0 * r)
            ),
        };
        let _ = write!(self.out, r#"<path class="{class}" d="{d}">"#);
        self.tip_and_close(tip, "path");
    }

    /// A small point (a reading) with a tooltip.
    pub(crate) fn dot(&mut self, (x, y): (f64, f64), class: &str, tip: &str) {
        let _ = write!(
            self.out,
            r#"<circle class="{class}" cx="{}" cy="{}" r="2.5">"#,
            n(x),
            n(y)
        );
        self.tip_and_close(tip, "circle");
    }

    fn tip_and_close(&mut self, tip: &str, element: &str) {
        if !tip.is_empty() {
            let _ = write!(self.out, "<title>{}</title>", esc(tip));
        }
        let _ = write!(self.out, "</{element}>");
    }

    pub(crate) fn finish(mut self) -> String {
        self.out.push_str("</svg>");
        self.out
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Diamond,
    Triangle,
    Square,
    Circle,
}

/// About `max` round steps that cover `[0, span]`: 1, 2, 5 × 10ⁿ.
pub(crate) fn ticks(span: f64, max: usize) -> Vec<f64> {
    if span <= 0.0 {
        return vec![0.0];
    }
    let raw = span / max.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    (0..)
        .map(|i| i as f64 * step)
        .take_while(|v| *v <= span + step * 1e-9)
        .collect()
}

/// Round time steps (seconds) for an axis `span` seconds long.
pub(crate) fn time_ticks(span: f64, max: usize) -> Vec<f64> {
    const STEPS: [f64; 14] = [
        1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0,
    ];
    let step = STEPS
        .iter()
        .copied()
        .find(|s| span / s <= max as f64)
        .unwrap_or_else(|| (span / max as f64 / 3600.0).ceil() * 3600.0);
    (0..)
        .map(|i| i as f64 * step)
        .take_while(|v| *v <= span)
        .collect()
}

/// At most `max` points: the highest of each run of neighbours, so peaks
/// survive (a night's turns into a chart a few hundred pixels wide).
pub(crate) fn thin<T: Copy>(points: &[T], max: usize, key: impl Fn(&T) -> f64) -> Vec<T> {
    if points.len() <= max || max == 0 {
        return points.to_vec();
    }
    let per = points.len().div_ceil(max);
    points
        .chunks(per)
        .filter_map(|c| c.iter().copied().max_by(|a, b| key(a).total_cmp(&key(b))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_control_characters() {
        assert_eq!(esc("a<b & \"c\"\u{1}"), "a&lt;b &amp; &quot;c&quot; ");
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(n(3.0), "3");
        assert_eq!(n(3.04), "3");
        assert_eq!(n(3.25), "3.3");
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(ticks(100.0, 5), vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        assert_eq!(
            time_ticks(3600.0, 4),
            vec![0.0, 900.0, 1800.0, 2700.0, 3600.0]
        );
        assert_eq!(time_ticks(30_000.0, 6).len(), 5);
    }

    #[test]
    fn thinning_keeps_peaks() {
        let v: Vec<f64> = (0..1000)
            .map(|i| if i == 537 { 99.0 } else { 1.0 })
            .collect();
        let t = thin(&v, 100, |x| *x);
        assert_eq!(t.len(), 100);
        assert!(t.contains(&99.0));
    }

    #[test]
    fn scale_clamps_and_survives_an_empty_domain() {
        let s = Scale::new((0.0, 0.0), (10.0, 110.0));
        assert_eq!(s.at(0.0), 10.0);
        assert_eq!(s.at(5.0), 110.0);
    }
}
