//! Figures as plain SVG: grouped bar charts (one bar per system) and empirical CDFs. Written by
//! hand rather than with a plotting crate: a few dozen lines, no fonts to find, and files that
//! diff well.

use std::fmt::Write as _;

use crate::stats::{fmt_value, SYSTEMS};

/// One colour per system, in [`SYSTEMS`] order (colour-blind-safe Okabe–Ito).
const COLOURS: [&str; 3] = ["#0072B2", "#E69F00", "#009E73"];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn legend(svg: &mut String, x: f64, y: f64) {
    for (i, name) in SYSTEMS.iter().enumerate() {
        let x = x + i as f64 * 110.0;
        let _ = write!(
            svg,
            r#"<rect x="{x}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{}" font-size="13">{}</text>"#,
            y - 11.0,
            COLOURS[i],
            x + 17.0,
            y,
            escape(name)
        );
    }
}

/// A nice upper bound for an axis: 1, 2 or 5 times a power of ten, at least `max`.
pub fn nice_ceiling(max: f64) -> f64 {
    if max.is_nan() || max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(max.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= max {
            return m * p;
        }
    }
    10.0 * p
}

/// Horizontal grouped bars: one group per `(label, values)`, one bar per system, the value
/// printed at the end of each bar. Missing values are left out.
pub fn bars(title: &str, unit: &str, groups: &[(String, [Option<f64>; 3])]) -> String {
    let (left, right, top, bar, gap) = (300.0, 90.0, 60.0, 16.0, 18.0);
    let width = 820.0;
    let plot_w = width - left - right;
    let group_h = 3.0 * bar + gap;
    let height = top + groups.len() as f64 * group_h + 40.0;
    let max = groups
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().copied())
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let scale = nice_ceiling(max);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif"><rect width="100%" height="100%" fill="white"/><text x="{}" y="24" font-size="16" font-weight="bold">{}</text>"#,
        20.0,
        escape(title)
    );
    legend(&mut svg, left, 48.0);
    // Grid lines at fifths of the scale.
    for k in 0..=5 {
        let x = left + plot_w * k as f64 / 5.0;
        let v = scale * k as f64 / 5.0;
        let _ = write!(
            svg,
            r##"<line x1="{x}" y1="{top}" x2="{x}" y2="{}" stroke="#ddd"/><text x="{x}" y="{}" font-size="11" text-anchor="middle" fill="#555">{}</text>"##,
            height - 35.0,
            height - 20.0,
            escape(&fmt_value(Some(v), unit))
        );
    }
    for (g, (label, values)) in groups.iter().enumerate() {
        let y0 = top + g as f64 * group_h;
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" font-size="13" text-anchor="end">{}</text>"#,
            left - 8.0,
            y0 + 1.5 * bar + 4.0,
            escape(label)
        );
        for (i, v) in values.iter().enumerate() {
            let Some(v) = v.filter(|v| v.is_finite()) else {
                continue;
            };
            let w = (v / scale * plot_w).max(1.0);
            let y = y0 + i as f64 * bar;
            let _ = write!(
                svg,
                r#"<rect x="{left}" y="{y}" width="{w:.1}" height="{}" fill="{}"/><text x="{:.1}" y="{}" font-size="11">{}</text>"#,
                bar - 2.0,
                COLOURS[i],
                left + w + 4.0,
                y + bar - 5.0,
                escape(&fmt_value(Some(v), unit))
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}

/// Empirical CDFs of latency samples (milliseconds), one line per system, x on a log scale.
pub fn cdf(title: &str, samples: &[Vec<f64>; 3]) -> String {
    let (left, right, top, bottom) = (60.0, 30.0, 60.0, 50.0);
    let (width, height) = (820.0, 420.0);
    let (plot_w, plot_h) = (width - left - right, height - top - bottom);
    let all = samples.iter().flatten().copied().filter(|v| *v > 0.0);
    let (lo, hi) = all.fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = if lo > hi {
        (0.1, 10.0)
    } else {
        (10f64.powf(lo.log10().floor()), nice_ceiling(hi))
    };
    let x_of =
        |v: f64| left + (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10()) * plot_w;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif"><rect width="100%" height="100%" fill="white"/><text x="20" y="24" font-size="16" font-weight="bold">{}</text>"#,
        escape(title)
    );
    legend(&mut svg, left + 10.0, 48.0);
    // Decades and their 2× and 5× on the x axis; quarters on the y axis.
    let mut d = lo;
    while d <= hi * 1.001 {
        for m in [1.0, 2.0, 5.0] {
            let v = d * m;
            if v > hi * 1.001 {
                break;
            }
            let x = x_of(v);
            let _ = write!(
                svg,
                r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{}" stroke="#ddd"/><text x="{x:.1}" y="{}" font-size="11" text-anchor="middle" fill="#555">{}</text>"##,
                top + plot_h,
                top + plot_h + 15.0,
                escape(&fmt_value(Some(v), "ms"))
            );
        }
        d *= 10.0;
    }
    for k in 0..=4 {
        let y = top + plot_h * (1.0 - k as f64 / 4.0);
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" font-size="11" text-anchor="end" fill="#555">{}%</text>"##,
            left + plot_w,
            left - 6.0,
            y + 4.0,
            k * 25
        );
    }
    for (i, s) in samples.iter().enumerate() {
        if s.is_empty() {
            continue;
        }
        let mut s = s.clone();
        s.sort_by(f64::total_cmp);
        let n = s.len() as f64;
        let mut points = String::new();
        for (k, v) in s.iter().enumerate() {
            let y = top + plot_h * (1.0 - (k + 1) as f64 / n);
            let _ = write!(points, "{:.1},{:.1} ", x_of(*v), y);
        }
        let _ = write!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>"#,
            points.trim_end(),
            COLOURS[i]
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{}" y="{}" font-size="12" text-anchor="middle" fill="#333">milliseconds (log scale)</text>"##,
        left + plot_w / 2.0,
        height - 12.0
    );
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_ceilings_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(nice_ceiling(3.19), 5.0);
        assert_eq!(nice_ceiling(6370.0), 10_000.0);
        assert_eq!(nice_ceiling(0.91), 1.0);
        assert_eq!(nice_ceiling(150.0), 200.0);
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(f64::NAN), 1.0);
    }

    #[test]
    fn a_bar_chart_draws_one_bar_per_value_and_skips_missing_ones() {
        let svg = bars(
            "W1 <p50>",
            "ms",
            &[
                ("fresh".into(), [Some(6.0), Some(1.0), Some(3.0)]),
                ("reused".into(), [Some(3.0), None, Some(f64::NAN)]),
            ],
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("W1 &lt;p50&gt;"));
        // 3 legend squares, the background, 4 bars.
        assert_eq!(svg.matches("<rect").count(), 3 + 1 + 4);
    }

    #[test]
    fn a_cdf_draws_a_line_per_system_with_samples() {
        let svg = cdf("handoff", &[vec![1.0, 2.0, 3.0], vec![], vec![0.5, 80.0]]);
        assert_eq!(svg.matches("<polyline").count(), 2);
    }
}
