//! Hand-written SVG plots: the latency distribution (fio completion-latency percentiles,
//! disk vs Basalt), throughput by profile and the scaling curve over OSD counts. No plotting
//! crate: a few rects, polylines and texts.

use crate::report::{comparisons, format_value};
use crate::results::{Layout, Results, Row};
use crate::sections::scaling::{self, Curve};
use std::fmt::Write;

/// File name of the latency plot.
pub const LATENCY_FILE: &str = "latency.svg";
/// File name of the throughput plot.
pub const THROUGHPUT_FILE: &str = "throughput.svg";
/// File name of the scaling-curve plot.
pub const SCALING_FILE: &str = "scaling.svg";

const WIDTH: f64 = 760.0;
const BASELINE_COLOR: &str = "#6c757d";
const BASALT_COLOR: &str = "#d9480f";
/// One colour per workload of the scaling plot (more curves reuse them in turn).
const CURVE_COLORS: [&str; 3] = ["#d9480f", "#1971c2", "#2f9e44"];
/// Profiles whose latency distribution is plotted, `section/row`, in order.
const LATENCY_ROWS: &[&str] = &[
    "disk/randread_4k_qd1_iops",
    "disk/randread_4k_qd32_iops",
    "vitastor/t1q1_randwrite_4k_write_lat_us",
    "vitastor/randwrite_4k_deep_iops",
];
/// Panels drawn when none of [`LATENCY_ROWS`] was measured.
const MAX_FALLBACK_PANELS: usize = 3;

/// Escape text for SVG.
pub fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The opening tag, a white background and the title.
fn start(s: &mut String, height: f64, title: &str) {
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(
        s,
        "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"20\" \
         font-size=\"15\" font-weight=\"bold\">{}</text>",
        escape(title)
    );
}

/// [`start`] plus the baseline/Basalt legend of the comparison plots.
fn header(s: &mut String, height: f64, title: &str) {
    start(s, height, title);
    let _ = writeln!(
        s,
        "<rect x=\"{}\" y=\"9\" width=\"12\" height=\"12\" fill=\"{BASELINE_COLOR}\"/><text x=\"{}\" y=\"20\">baseline</text>\
         <rect x=\"{}\" y=\"9\" width=\"12\" height=\"12\" fill=\"{BASALT_COLOR}\"/><text x=\"{}\" y=\"20\">Basalt</text>",
        WIDTH - 170.0,
        WIDTH - 154.0,
        WIDTH - 85.0,
        WIDTH - 69.0
    );
}

fn percentiles(row: &Row, basalt: bool) -> Option<&[(f64, f64)]> {
    let f = if basalt { &row.basalt } else { &row.baseline };
    let p = &f.as_ref()?.fio.as_ref()?.clat_percentiles_us;
    (!p.is_empty()).then_some(p.as_slice())
}

/// The latency plot: one panel per profile, percentile on x, latency (log scale) on y.
pub fn latency(r: &Results) -> String {
    let all: Vec<(String, &Row)> = r
        .sections
        .iter()
        .flat_map(|s| {
            s.rows
                .iter()
                .map(move |row| (format!("{}/{}", s.id, row.key), row))
        })
        .filter(|(_, row)| percentiles(row, false).is_some() && percentiles(row, true).is_some())
        .collect();
    let mut panels: Vec<&Row> = LATENCY_ROWS
        .iter()
        .filter_map(|k| all.iter().find(|(key, _)| key == k).map(|(_, row)| *row))
        .collect();
    if panels.is_empty() {
        panels = all
            .iter()
            .map(|(_, row)| *row)
            .take(MAX_FALLBACK_PANELS)
            .collect();
    }
    let panel_h = 230.0;
    let height = 40.0 + panel_h * panels.len().max(1) as f64;
    let mut s = String::new();
    header(&mut s, height, "Completion latency percentiles (fio clat)");
    if panels.is_empty() {
        let _ = writeln!(
            s,
            "<text x=\"10\" y=\"60\">No latency distribution was measured.</text>"
        );
    }
    for (i, row) in panels.iter().enumerate() {
        let top = 40.0 + panel_h * i as f64;
        latency_panel(&mut s, row, top, panel_h);
    }
    s.push_str("</svg>\n");
    s
}

fn latency_panel(s: &mut String, row: &Row, top: f64, h: f64) {
    let (Some(base), Some(bas)) = (percentiles(row, false), percentiles(row, true)) else {
        return;
    };
    let (left, right) = (70.0, WIDTH - 20.0);
    let (plot_top, plot_bottom) = (top + 25.0, top + h - 40.0);
    let lo = base
        .iter()
        .chain(bas)
        .map(|p| p.1)
        .fold(f64::INFINITY, f64::min)
        .max(0.1);
    let hi = base
        .iter()
        .chain(bas)
        .map(|p| p.1)
        .fold(0.0, f64::max)
        .max(lo * 10.0);
    let (log_lo, log_hi) = (lo.log10().floor(), hi.log10().ceil());
    let y = |v: f64| {
        let f = (v.max(0.1).log10() - log_lo) / (log_hi - log_lo);
        plot_bottom - f * (plot_bottom - plot_top)
    };
    let n = base.len().max(bas.len()).max(2);
    let x = |i: usize| left + (right - left) * i as f64 / (n - 1) as f64;
    let _ = writeln!(
        s,
        "<text x=\"{left}\" y=\"{}\" font-weight=\"bold\">{}</text>",
        top + 15.0,
        escape(&row.label)
    );
    let _ = writeln!(
        s,
        "<rect x=\"{left}\" y=\"{plot_top}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#ccc\"/>",
        right - left,
        plot_bottom - plot_top
    );
    let mut d = log_lo;
    while d <= log_hi {
        let yy = y(10f64.powf(d));
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" x2=\"{right}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#eee\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{} us</text>",
            left - 5.0,
            yy + 4.0,
            10f64.powf(d)
        );
        d += 1.0;
    }
    for (i, (p, _)) in base.iter().enumerate() {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">p{p}</text>",
            x(i),
            plot_bottom + 14.0
        );
    }
    for (series, color) in [(base, BASELINE_COLOR), (bas, BASALT_COLOR)] {
        let points: Vec<String> = series
            .iter()
            .enumerate()
            .map(|(i, (_, v))| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            points.join(" ")
        );
    }
}

/// Throughput by profile: baseline and Basalt bars per profile, each pair on its own scale
/// (units differ), with the values written beside the bars.
pub fn throughput(r: &Results) -> String {
    let rows: Vec<&Row> = comparisons(r)
        .flat_map(|s| s.rows.iter())
        .filter(|row| row.higher_is_better && row.percent_of_baseline().is_some())
        .collect();
    let row_h = 44.0;
    let height = 45.0 + row_h * rows.len().max(1) as f64;
    let mut s = String::new();
    header(
        &mut s,
        height,
        "Throughput by profile (each pair on its own scale)",
    );
    if rows.is_empty() {
        let _ = writeln!(
            s,
            "<text x=\"10\" y=\"60\">No profile was measured on both sides.</text>"
        );
    }
    let (label_w, bar_max) = (280.0, 300.0);
    for (i, row) in rows.iter().enumerate() {
        let top = 40.0 + row_h * i as f64;
        let b = row.baseline.as_ref().and_then(|f| f.value).unwrap_or(0.0);
        let v = row.basalt.as_ref().and_then(|f| f.value).unwrap_or(0.0);
        let max = b.max(v).max(f64::MIN_POSITIVE);
        let _ = writeln!(
            s,
            "<text x=\"10\" y=\"{:.1}\">{}</text>",
            top + 22.0,
            escape(&row.label)
        );
        for (j, (value, color)) in [(b, BASELINE_COLOR), (v, BASALT_COLOR)].iter().enumerate() {
            let yy = top + 5.0 + 18.0 * j as f64;
            let w = (value / max * bar_max).max(1.0);
            let _ = writeln!(
                s,
                "<rect x=\"{label_w}\" y=\"{yy:.1}\" width=\"{w:.1}\" height=\"15\" fill=\"{color}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                label_w + w + 5.0,
                yy + 12.0,
                escape(&format_value(*value, &row.unit))
            );
        }
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" font-weight=\"bold\">{:.0}%</text>",
            WIDTH - 10.0,
            top + 22.0,
            row.percent_of_baseline().unwrap_or(0.0)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The scaling curve: each workload's speed-up over 1 OSD against the OSD count, the linear
/// ideal as a dashed diagonal, and each point's scaling efficiency written beside it (but at
/// 1 OSD, where it is 100% by definition).
pub fn scaling(r: &Results) -> String {
    let curves: Vec<Curve> = r
        .sections
        .iter()
        .filter(|sec| sec.layout == Layout::Scaling)
        .flat_map(scaling::curves)
        .filter(|c| c.points.iter().any(|p| p.0 == 1 && p.1 > 0.0))
        .collect();
    let height = 380.0;
    let mut s = String::new();
    start(
        &mut s,
        height,
        "Scaling over OSD counts (1 replica): speed-up over 1 OSD",
    );
    if curves.is_empty() {
        let _ = writeln!(
            s,
            "<text x=\"10\" y=\"60\">No scaling step was measured at 1 OSD.</text>"
        );
        s.push_str("</svg>\n");
        return s;
    }
    // Speed-up of a point: its figure over the curve's figure at 1 OSD.
    let speedups: Vec<Vec<(u32, f64)>> = curves
        .iter()
        .map(|c| {
            let one = c.points.iter().find(|p| p.0 == 1).map_or(1.0, |p| p.1);
            c.points.iter().map(|&(n, v)| (n, v / one)).collect()
        })
        .collect();
    let max_osds = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.0))
        .max()
        .unwrap_or(1)
        .max(2);
    let top_speedup = speedups
        .iter()
        .flatten()
        .map(|p| p.1)
        .fold(f64::from(max_osds), f64::max)
        .ceil();
    // The plot ends well left of the legend (x 575) so the right-most labels fit.
    let (left, right, top, bottom) = (60.0, 520.0, 45.0, height - 45.0);
    let x = |n: u32| left + (right - left) * f64::from(n - 1) / f64::from(max_osds - 1);
    let y = |v: f64| bottom - (bottom - top) * v / top_speedup;
    let _ = writeln!(
        s,
        "<rect x=\"{left}\" y=\"{top}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#ccc\"/>",
        right - left,
        bottom - top
    );
    // One grid line per whole speed-up, at most about ten.
    let step = (top_speedup / 10.0).ceil().max(1.0);
    let mut v = 0.0;
    while v <= top_speedup {
        let yy = y(v);
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" x2=\"{right}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#eee\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v}x</text>",
            left - 5.0,
            yy + 4.0
        );
        v += step;
    }
    for n in 1..=max_osds {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{n}</text>",
            x(n),
            bottom + 16.0
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">OSDs</text>\
         <line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#999\" stroke-dasharray=\"6 4\"/>",
        (left + right) / 2.0,
        bottom + 34.0,
        x(1),
        y(1.0),
        x(max_osds),
        y(f64::from(max_osds))
    );
    for (i, (curve, points)) in curves.iter().zip(&speedups).enumerate() {
        let color = CURVE_COLORS[i % CURVE_COLORS.len()];
        let line: Vec<String> = points
            .iter()
            .map(|&(n, v)| format!("{:.1},{:.1}", x(n), y(v)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            line.join(" ")
        );
        for &(n, v) in points {
            let _ = writeln!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>",
                x(n),
                y(v)
            );
            if n > 1 {
                // Labels of close points are staggered by curve so they do not overprint.
                let _ = writeln!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" fill=\"{color}\" \
                     stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\">{:.0}%</text>",
                    x(n) + 5.0,
                    y(v) - 5.0 - 11.0 * i as f64,
                    v / f64::from(n) * 100.0
                );
            }
        }
        let ly = top + 10.0 + 20.0 * i as f64;
        let _ = writeln!(
            s,
            "<rect x=\"575\" y=\"{ly}\" width=\"12\" height=\"12\" fill=\"{color}\"/>\
             <text x=\"592\" y=\"{:.1}\">{}</text>",
            ly + 11.0,
            escape(&curve.label)
        );
    }
    let ly = top + 10.0 + 20.0 * curves.len() as f64;
    let _ = writeln!(
        s,
        "<line x1=\"575\" x2=\"587\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#999\" stroke-dasharray=\"4 2\"/>\
         <text x=\"592\" y=\"{:.1}\">linear (100%)</text>",
        ly + 6.0,
        ly + 6.0,
        ly + 11.0
    );
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample;

    #[test]
    fn latency_plot_draws_both_series() {
        // Goal: the latency SVG is well-formed and has a baseline and a Basalt line per panel.
        let svg = latency(&sample());
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2, "one panel, two lines");
        assert!(svg.contains("4k random read (QD1)"));
        assert!(svg.contains("p99.99"));
        assert_eq!(svg.matches("<svg").count(), 1);
    }

    #[test]
    fn throughput_plot_has_a_bar_pair_per_compared_row() {
        // Goal: every row measured on both sides gets two bars and its percentage; failed
        // and latency rows are left out.
        let svg = throughput(&sample());
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("Sequential read (1M, QD1)"));
        assert!(svg.contains(">50%<") && svg.contains(">120%<"));
        assert!(!svg.contains("4k random write<"));
        assert!(!svg.contains("latency<"));
        assert!(!svg.contains("OSD"), "the scaling rows are not profiles");
    }

    #[test]
    fn scaling_plot_draws_a_curve_per_workload() {
        // Goal: the scaling SVG has one line per workload plus the linear ideal, x ticks up
        // to the largest OSD count, and each point's efficiency.
        let svg = scaling(&sample());
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert_eq!(
            svg.matches("<circle").count(),
            8,
            "3 + 2 + 3 measured points"
        );
        assert!(svg.contains("stroke-dasharray=\"6 4\""), "linear ideal");
        assert!(svg.contains(">4k random read</text>"));
        assert!(svg.contains(">128k sequential 70/30</text>"));
        assert!(svg.contains(">90%</text>") && svg.contains(">80%</text>"));
        assert!(svg.contains(">50%</text>") && svg.contains(">75%</text>"));
        assert!(svg.contains(">3</text>") && !svg.contains(">4</text>"));
    }

    #[test]
    fn empty_results_still_give_valid_plots() {
        // Goal: a run where everything failed still writes readable SVGs.
        let mut r = sample();
        r.sections.clear();
        for svg in [latency(&r), throughput(&r), scaling(&r)] {
            assert!(svg.starts_with("<svg") && svg.contains("No "));
        }
        assert_eq!(escape("a<b&\"c\""), "a&lt;b&amp;&quot;c&quot;");
    }
}
