//! The report's SVG plots, drawn with `plotters` (SVG backend only): the latency
//! distribution (fio completion-latency percentiles, disk vs Basalt), throughput by profile
//! and the scaling curve over OSD counts.

use crate::report::{comparisons, format_value};
use crate::results::{Results, Row, SectionLayout};
use crate::sections::scaling::{self, Curve};
use anyhow::Context;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// File name of the latency plot.
pub const LATENCY_FILE: &str = "latency.svg";
/// File name of the throughput plot.
pub const THROUGHPUT_FILE: &str = "throughput.svg";
/// File name of the scaling-curve plot.
pub const SCALING_FILE: &str = "scaling.svg";

const WIDTH: u32 = 760;
const BASELINE_COLOR: RGBColor = RGBColor(0x6c, 0x75, 0x7d);
const BASALT_COLOR: RGBColor = RGBColor(0xd9, 0x48, 0x0f);
const GRID_COLOR: RGBColor = RGBColor(0xee, 0xee, 0xee);
const IDEAL_COLOR: RGBColor = RGBColor(0x99, 0x99, 0x99);
/// One colour per workload of the scaling plot (more curves reuse them in turn).
const CURVE_COLORS: [RGBColor; 3] = [
    RGBColor(0xd9, 0x48, 0x0f),
    RGBColor(0x19, 0x71, 0xc2),
    RGBColor(0x2f, 0x9e, 0x44),
];
/// Stroke width of a data series (thinner lines are grid, axes and the ideal).
const SERIES_STROKE: u32 = 2;
/// Profiles whose latency distribution is plotted, `section/row`, in order.
const LATENCY_ROWS: &[&str] = &[
    "disk/randread_4k_qd1_iops",
    "disk/randread_4k_qd32_iops",
    "vitastor/t1q1_randwrite_4k_write_lat_us",
    "vitastor/randwrite_4k_deep_iops",
];
/// Panels drawn when none of [`LATENCY_ROWS`] was measured.
const MAX_FALLBACK_PANELS: usize = 3;

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type DrawResult = Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// Text in `size` px sans-serif, anchored at its left end, vertically centred.
fn font(size: u32) -> TextStyle<'static> {
    styled(size, FontStyle::Normal)
}

/// [`font`], bold.
fn bold(size: u32) -> TextStyle<'static> {
    styled(size, FontStyle::Bold)
}

fn styled(size: u32, style: FontStyle) -> TextStyle<'static> {
    // The SVG backend writes font-size as the size over 1.24.
    ("sans-serif", f64::from(size) * 1.24, style)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center))
}

/// A `width` x `height` SVG on a white background, drawn by `draw`.
fn render(height: u32, draw: impl FnOnce(&Area) -> DrawResult) -> anyhow::Result<String> {
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present())
            .map_err(|e| anyhow::anyhow!("{e}"))
            .context("draw an SVG plot")?;
    }
    Ok(s)
}

/// The title, top left.
fn title(area: &Area, text: &str) -> DrawResult {
    area.draw(&Text::new(text.to_string(), (10, 14), bold(15)))
}

/// A filled square and its label: one legend entry at `(x, y)` (the square's top left).
fn legend_entry(area: &Area, x: i32, y: i32, color: RGBColor, label: &str) -> DrawResult {
    area.draw(&Rectangle::new([(x, y), (x + 12, y + 12)], color.filled()))?;
    area.draw(&Text::new(label.to_string(), (x + 16, y + 6), font(12)))
}

/// [`title`] plus the baseline/Basalt legend of the comparison plots.
fn header(area: &Area, text: &str) -> DrawResult {
    title(area, text)?;
    let w = WIDTH as i32;
    legend_entry(area, w - 170, 9, BASELINE_COLOR, "baseline")?;
    legend_entry(area, w - 85, 9, BASALT_COLOR, "Basalt")
}

/// A line of text saying why the plot is empty.
fn nothing(area: &Area, text: &str) -> DrawResult {
    area.draw(&Text::new(text.to_string(), (10, 60), font(12)))
}

fn percentiles(row: &Row, basalt: bool) -> Option<&[(f64, f64)]> {
    let f = if basalt { &row.basalt } else { &row.baseline };
    let p = &f.as_ref()?.fio.as_ref()?.clat_percentiles_us;
    (!p.is_empty()).then_some(p.as_slice())
}

/// The latency plot: one panel per profile, percentile on x, latency (log scale) on y.
pub fn latency(r: &Results) -> anyhow::Result<String> {
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
    let panel_h = 230;
    let height = 40 + panel_h * panels.len().max(1) as u32;
    render(height, |root| {
        header(root, "Completion latency percentiles (fio clat)")?;
        if panels.is_empty() {
            return nothing(root, "No latency distribution was measured.");
        }
        let (_, body) = root.split_vertically(40);
        for (row, area) in panels.iter().zip(body.split_evenly((panels.len(), 1))) {
            latency_panel(&area, row)?;
        }
        Ok(())
    })
}

fn latency_panel(area: &Area, row: &Row) -> DrawResult {
    let (Some(base), Some(bas)) = (percentiles(row, false), percentiles(row, true)) else {
        return Ok(());
    };
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
    // Whole decades bound the axis, so every grid line is a power of ten.
    let (lo, hi) = (
        10f64.powf(lo.log10().floor()),
        10f64.powf(hi.log10().ceil()),
    );
    let n = base.len().max(bas.len()).max(2);
    let mut chart = ChartBuilder::on(area)
        .caption(&row.label, bold(12))
        .margin_top(8)
        .margin_right(20)
        .x_label_area_size(20)
        // Room for `1000000 us` (a second at the top decade).
        .y_label_area_size(90)
        .build_cartesian_2d(0..(n - 1) as i32, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(GRID_COLOR)
        .x_labels(n)
        .x_label_formatter(&|i| {
            base.get(*i as usize)
                .map(|(p, _)| format!("p{p}"))
                .unwrap_or_default()
        })
        .x_label_style(font(10).pos(Pos::new(HPos::Center, VPos::Top)))
        .y_label_formatter(&|v| format!("{v} us"))
        .y_label_style(font(12).pos(Pos::new(HPos::Right, VPos::Center)))
        .draw()?;
    for (series, color) in [(base, BASELINE_COLOR), (bas, BASALT_COLOR)] {
        chart.draw_series(LineSeries::new(
            series.iter().enumerate().map(|(i, (_, v))| (i as i32, *v)),
            color.stroke_width(SERIES_STROKE),
        ))?;
    }
    Ok(())
}

/// Throughput by profile: baseline and Basalt bars per profile, each pair on its own scale
/// (units differ), with the values written beside the bars.
pub fn throughput(r: &Results) -> anyhow::Result<String> {
    let rows: Vec<&Row> = comparisons(r)
        .flat_map(|s| s.rows.iter())
        .filter(|row| row.higher_is_better && row.percent_of_baseline().is_some())
        .collect();
    let row_h = 44;
    let height = 45 + row_h * rows.len().max(1) as u32;
    render(height, |root| {
        header(root, "Throughput by profile (each pair on its own scale)")?;
        if rows.is_empty() {
            return nothing(root, "No profile was measured on both sides.");
        }
        let (label_w, bar_max) = (280, 300.0);
        for (i, row) in rows.iter().enumerate() {
            let top = 40 + row_h as i32 * i as i32;
            let b = row.baseline.as_ref().and_then(|f| f.value).unwrap_or(0.0);
            let v = row.basalt.as_ref().and_then(|f| f.value).unwrap_or(0.0);
            let max = b.max(v).max(f64::MIN_POSITIVE);
            root.draw(&Text::new(row.label.clone(), (10, top + 18), font(12)))?;
            for (j, (value, color)) in [(b, BASELINE_COLOR), (v, BASALT_COLOR)].iter().enumerate() {
                let y = top + 5 + 18 * j as i32;
                let w = (value / max * bar_max).max(1.0).round() as i32;
                root.draw(&Rectangle::new(
                    [(label_w, y), (label_w + w, y + 15)],
                    color.filled(),
                ))?;
                root.draw(&Text::new(
                    format_value(*value, &row.unit),
                    (label_w + w + 5, y + 8),
                    font(12),
                ))?;
            }
            root.draw(&Text::new(
                format!("{:.0}%", row.percent_of_baseline().unwrap_or(0.0)),
                (WIDTH as i32 - 10, top + 18),
                bold(12).pos(Pos::new(HPos::Right, VPos::Center)),
            ))?;
        }
        Ok(())
    })
}

/// The scaling curve: each workload's speed-up over 1 OSD against the OSD count, the linear
/// ideal as a dashed diagonal, and each point's scaling efficiency written beside it (but at
/// 1 OSD, where it is 100% by definition).
pub fn scaling(r: &Results) -> anyhow::Result<String> {
    let curves: Vec<Curve> = r
        .sections
        .iter()
        .filter(|sec| sec.layout == SectionLayout::Scaling)
        .flat_map(scaling::curves)
        .filter(|c| c.points.iter().any(|p| p.0 == 1 && p.1 > 0.0))
        .collect();
    render(380, |root| {
        title(
            root,
            "Scaling over OSD counts (1 replica): speed-up over 1 OSD",
        )?;
        if curves.is_empty() {
            return nothing(root, "No scaling step was measured at 1 OSD.");
        }
        scaling_chart(root, &curves)
    })
}

fn scaling_chart(root: &Area, curves: &[Curve]) -> DrawResult {
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
    let (plot, legend) = root.split_horizontally(545);
    let mut chart = ChartBuilder::on(&plot)
        .margin_top(45)
        .margin_right(25)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(1..max_osds, 0.0..top_speedup)?;
    // One grid line per whole speed-up, at most about ten.
    let step = (top_speedup / 10.0).ceil().max(1.0);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .bold_line_style(GRID_COLOR)
        .x_labels(max_osds as usize)
        .x_desc("OSDs")
        .x_label_style(font(12).pos(Pos::new(HPos::Center, VPos::Top)))
        .y_labels((top_speedup / step) as usize + 1)
        .y_label_formatter(&|v| format!("{v}x"))
        .y_label_style(font(12).pos(Pos::new(HPos::Right, VPos::Center)))
        .draw()?;
    chart.draw_series(DashedLineSeries::new(
        [(1, 1.0), (max_osds, f64::from(max_osds))],
        6,
        4,
        IDEAL_COLOR.stroke_width(1),
    ))?;
    for (i, points) in speedups.iter().enumerate() {
        let color = CURVE_COLORS[i % CURVE_COLORS.len()];
        chart.draw_series(LineSeries::new(
            points.iter().copied(),
            color.stroke_width(SERIES_STROKE),
        ))?;
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        // Labels of close points are staggered by curve so they do not overprint.
        let dy = -5 - 11 * i as i32;
        chart.draw_series(points.iter().filter(|p| p.0 > 1).map(|&(n, v)| {
            EmptyElement::at((n, v))
                + Text::new(
                    format!("{:.0}%", v / f64::from(n) * 100.0),
                    (5, dy),
                    font(10).color(&color),
                )
        }))?;
    }
    for (i, curve) in curves.iter().enumerate() {
        let color = CURVE_COLORS[i % CURVE_COLORS.len()];
        legend_entry(&legend, 30, 55 + 20 * i as i32, color, &curve.label)?;
    }
    let y = 55 + 20 * curves.len() as i32 + 6;
    legend.draw(&PathElement::new(
        [(30, y), (42, y)],
        IDEAL_COLOR.stroke_width(1),
    ))?;
    legend.draw(&Text::new("linear (100%)", (46, y), font(12)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample;

    /// The contents of every `<text>` element, trimmed.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let body = &t[t.find('>')? + 1..];
                Some(body[..body.find("</text>")?].trim().to_string())
            })
            .collect()
    }

    /// Polylines drawn as data series (wider than grid, axes and the ideal).
    fn series(svg: &str) -> usize {
        svg.lines()
            .filter(|l| l.starts_with("<polyline") && l.contains("stroke-width=\"2\""))
            .count()
    }

    fn well_formed(svg: &str) {
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"), "{svg}");
        assert_eq!(svg.matches("<svg").count(), 1);
        assert_eq!(svg.matches("<text").count(), svg.matches("</text>").count());
    }

    #[test]
    fn latency_plot_draws_both_series() {
        // Goal: the latency SVG is well-formed and has a baseline and a Basalt line per panel.
        let svg = latency(&sample()).unwrap();
        well_formed(&svg);
        assert_eq!(series(&svg), 2, "one panel, two lines");
        let texts = texts(&svg);
        assert!(
            texts.iter().any(|t| t == "4k random read (QD1)"),
            "{texts:?}"
        );
        assert!(texts.iter().any(|t| t == "p99.99"), "{texts:?}");
        assert!(texts.iter().any(|t| t.ends_with(" us")), "{texts:?}");
        assert!(svg.contains("fill=\"#6C757D\"") && svg.contains("fill=\"#D9480F\""));
    }

    #[test]
    fn throughput_plot_has_a_bar_pair_per_compared_row() {
        // Goal: every row measured on both sides gets two bars and its percentage; failed
        // and latency rows are left out.
        let svg = throughput(&sample()).unwrap();
        well_formed(&svg);
        let texts = texts(&svg);
        let has = |t: &str| texts.iter().any(|x| x == t);
        assert!(has("Sequential read (1M, QD1)"), "{texts:?}");
        assert!(has("50%") && has("120%"), "{texts:?}");
        assert!(!has("4k random write"));
        assert!(!texts.iter().any(|t| t.ends_with("latency")));
        assert!(!svg.contains("OSD"), "the scaling rows are not profiles");
    }

    #[test]
    fn scaling_plot_draws_a_curve_per_workload() {
        // Goal: the scaling SVG has one line per workload plus the linear ideal, x ticks up
        // to the largest OSD count, and each point's efficiency.
        let svg = scaling(&sample()).unwrap();
        well_formed(&svg);
        assert_eq!(series(&svg), 3);
        assert_eq!(
            svg.matches("<circle").count(),
            8,
            "3 + 2 + 3 measured points"
        );
        assert!(
            svg.matches("stroke=\"#999999\"").count() > 2,
            "linear ideal, dashed"
        );
        let texts = texts(&svg);
        let has = |t: &str| texts.iter().any(|x| x == t);
        assert!(
            has("4k random read") && has("128k sequential 70/30"),
            "{texts:?}"
        );
        assert!(
            has("90%") && has("80%") && has("50%") && has("75%"),
            "{texts:?}"
        );
        assert!(has("3") && !has("4"), "{texts:?}");
        assert!(has("OSDs") && has("linear (100%)"), "{texts:?}");
    }

    #[test]
    fn empty_results_still_give_valid_plots() {
        // Goal: a run where everything failed still writes readable SVGs; labels are
        // escaped.
        let mut r = sample();
        r.sections.clear();
        for svg in [latency(&r), throughput(&r), scaling(&r)] {
            let svg = svg.unwrap();
            well_formed(&svg);
            assert!(texts(&svg).iter().any(|t| t.starts_with("No ")), "{svg}");
        }
        let mut r = sample();
        for row in r.sections.iter_mut().flat_map(|s| s.rows.iter_mut()) {
            row.label = format!("a<b&\"c\" {}", row.label);
        }
        let svg = throughput(&r).unwrap();
        assert!(svg.contains("a&lt;b&amp;&quot;c&quot; "), "{svg}");
    }
}
