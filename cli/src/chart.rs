//! `simulate --chart FILE.svg`: nodes, pending pods and $/h over virtual time, each in
//! its own panel with its own axis (on one shared axis the counts hid each other, and
//! $/h followed the node count so closely its line lay on top of it), one time axis
//! under them all, and what happened marked across the three: the scenario's
//! disturbances and Deployments scaled as labelled lines, capacity shortages as shaded
//! spans. Drawn with plotters' SVG backend: text goes into the SVG as `<text>`
//! elements, so no font files are read.
//!
//! With `--compare`, [`write_compare`] draws both runs' nodes and $/h, one line each
//! per panel, over the same time axis.

use std::path::Path;

use nodewright_sim::Report;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

const NODES: RGBColor = RGBColor(31, 119, 180);
const PENDING: RGBColor = RGBColor(214, 39, 40);
const PRICE: RGBColor = RGBColor(44, 160, 44);
const MARK: RGBColor = RGBColor(110, 110, 110);
const SHORTAGE: RGBColor = RGBColor(255, 170, 0);
/// The second run of a comparison (the first is drawn in [`NODES`]' blue).
const OTHER: RGBColor = RGBColor(255, 127, 14);

const WIDTH: u32 = 960;
/// Room left of each panel for its axis, so the three time axes line up.
const Y_LABELS: u32 = 70;
const MARGIN_LEFT: i32 = 12;
const MARGIN_RIGHT: i32 = 24;

/// One panel: a step line of `value` over the samples.
struct Panel<'a> {
    title: &'a str,
    color: RGBColor,
    value: &'a dyn Fn(usize) -> f64,
    /// Axis labels: whole numbers for counts, cents for $/h.
    money: bool,
}

pub fn write(path: &Path, report: &Report) -> Result<(), String> {
    let samples = &report.samples;
    let end = samples.last().map(|s| s.t).unwrap_or(0).max(60);
    // Minutes for runs up to three hours, hours beyond.
    let (unit, per) = if end > 3 * 3600 {
        ("hours", 3600.0)
    } else {
        ("minutes", 60.0)
    };

    let root = SVGBackend::new(path, (WIDTH, 680)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(
            &format!("nodewright simulate: {}", report.scenario),
            ("sans-serif", 20),
        )
        .map_err(|e| e.to_string())?;
    // The labels of the markers, then three panels; the last holds the time axis.
    let (labels, rest) = root.split_vertically(160);
    let (nodes, rest) = rest.split_vertically(165);
    let (pending, price) = rest.split_vertically(140);

    let panels = [
        (
            &nodes,
            Panel {
                title: "nodes",
                color: NODES,
                value: &|i| samples[i].nodes as f64,
                money: false,
            },
        ),
        (
            &pending,
            Panel {
                title: "pending pods",
                color: PENDING,
                value: &|i| samples[i].pending_pods as f64,
                money: false,
            },
        ),
        (
            &price,
            Panel {
                title: "$ per hour",
                color: PRICE,
                value: &|i| samples[i].price_per_hour,
                money: true,
            },
        ),
    ];
    let last = panels.len() - 1;
    for (i, (area, panel)) in panels.iter().enumerate() {
        let time_axis = (i == last).then_some(unit);
        draw_panel(area, panel, report, end, per, time_axis)?;
    }
    draw_labels(&labels, report, end)?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// One series on its own axis, with the markers and shortages drawn behind it.
fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    panel: &Panel<'_>,
    report: &Report,
    end: i64,
    per: f64,
    time_axis: Option<&str>,
) -> Result<(), String> {
    let samples = &report.samples;
    let x = |t: i64| t as f64 / per;
    let max = (0..samples.len())
        .map(|i| (panel.value)(i))
        .fold(0.0, f64::max);
    let (mut chart, top) = axes(area, panel.title, max, panel.money, x(end), time_axis)?;

    for s in &report.shortages {
        let (from, to) = (x(s.from - started(report)), x(s.to - started(report)));
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(from, 0.0), (to.min(x(end)), top)],
                SHORTAGE.mix(0.15).filled(),
            )))
            .map_err(|e| e.to_string())?;
    }
    for m in &report.markers {
        let at = x(m.t);
        chart
            .draw_series(std::iter::once(DashedPathElement::new(
                vec![(at, 0.0), (at, top)],
                4,
                3,
                MARK.stroke_width(1),
            )))
            .map_err(|e| e.to_string())?;
    }
    let points = steps(samples.iter().map(|s| x(s.t)), panel.value);
    chart
        .draw_series(LineSeries::new(points, panel.color.stroke_width(2)))
        .map_err(|e| e.to_string())?;
    Ok(())
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A panel's axes, from 0 to `x_end` and from 0 to a little above `max`, drawn: its
/// title and labels up the side (whole numbers for counts, cents for $/h), the time
/// axis under it when `time_axis` names the unit. Returns the chart and its top.
fn axes<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    title: &str,
    max: f64,
    money: bool,
    x_end: f64,
    time_axis: Option<&str>,
) -> Result<(Chart<'a, 'b>, f64), String> {
    let top = if money {
        (max * 1.15).max(0.01)
    } else {
        // Room above the highest count, and at least a few steps of axis.
        (max * 1.15).max(4.0).ceil()
    };
    let mut chart = ChartBuilder::on(area)
        .margin_left(MARGIN_LEFT)
        .margin_right(MARGIN_RIGHT)
        .margin_top(10)
        .margin_bottom(if time_axis.is_some() { 4 } else { 8 })
        .x_label_area_size(if time_axis.is_some() { 40 } else { 0 })
        .y_label_area_size(Y_LABELS)
        .build_cartesian_2d(0.0..x_end, 0.0..top)
        .map_err(|e| e.to_string())?;
    let whole = |v: &f64| format!("{v:.0}");
    let cents = |v: &f64| format!("{v:.2}");
    let labels: &dyn Fn(&f64) -> String = if money { &cents } else { &whole };
    let mut mesh = chart.configure_mesh();
    mesh.y_desc(title)
        .y_labels(5)
        .y_label_formatter(labels)
        .light_line_style(WHITE);
    if let Some(unit) = time_axis {
        mesh.x_desc(format!("virtual time ({unit})"));
    }
    mesh.draw().map_err(|e| e.to_string())?;
    Ok((chart, top))
}

/// Steps, not slopes: the i-th value holds from the i-th time until the next one.
fn steps(times: impl Iterator<Item = f64>, value: impl Fn(usize) -> f64) -> Vec<(f64, f64)> {
    let mut points = Vec::new();
    for (i, t) in times.enumerate() {
        if i > 0 {
            points.push((t, value(i - 1)));
        }
        points.push((t, value(i)));
    }
    points
}

/// The markers' labels above the panels, each written up its own line so that events
/// a minute apart do not overwrite each other; a shortage's label sits at its start.
fn draw_labels(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    report: &Report,
    end: i64,
) -> Result<(), String> {
    // The panels' horizontal layout: margin, axis labels, then the plot.
    let (width, height) = area.dim_in_pixel();
    let left = MARGIN_LEFT + Y_LABELS as i32;
    let plot = width as i32 - left - MARGIN_RIGHT;
    let at = |t: i64| left + (t as f64 / end as f64 * plot as f64).round() as i32;
    let bottom = height as i32;
    let style = TextStyle::from(("sans-serif", 12).into_font())
        .color(&BLACK)
        .transform(FontTransform::Rotate270);
    let start = started(report);
    let mut labels: Vec<(i64, String, RGBColor)> = report
        .markers
        .iter()
        .map(|m| (m.t, m.label.clone(), MARK))
        .collect();
    for s in &report.shortages {
        labels.push((s.from - start, shortage_label(s), SHORTAGE));
    }
    for (t, label, color) in labels {
        let x = at(t);
        area.draw(&PathElement::new(
            vec![(x, bottom - 6), (x, bottom)],
            color.stroke_width(2),
        ))
        .map_err(|e| e.to_string())?;
        // A quarter turn back: the text runs up from just above the tick, centred on it.
        area.draw_text(&label, &style, (x - 6, bottom - 9))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The run's first second: shortages are recorded in Unix seconds, markers relative.
fn started(report: &Report) -> i64 {
    report.world.started_at()
}

/// "short: c6i.2xlarge spot".
fn shortage_label(s: &nodewright_sim::report::Shortage) -> String {
    let mut types: Vec<String> = Vec::new();
    for (t, _, c) in &s.offerings {
        let what = format!("{t} {}", c.as_str());
        if !types.contains(&what) {
            types.push(what);
        }
    }
    format!("short: {}", types.join(", "))
}

/// `simulate --compare --chart FILE.svg`: each run's nodes and $/h over the same
/// virtual time, a line per run (the first blue, the second orange, named in the
/// legend), steps as in [`write`].
pub fn write_compare(path: &Path, runs: &[(&str, &Report)]) -> Result<(), String> {
    let end = runs
        .iter()
        .filter_map(|(_, r)| r.samples.last().map(|s| s.t))
        .max()
        .unwrap_or(0)
        .max(60);
    let (unit, per) = if end > 3 * 3600 {
        ("hours", 3600.0)
    } else {
        ("minutes", 60.0)
    };
    let root = SVGBackend::new(path, (WIDTH, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root
        .titled(
            &format!("nodewright simulate: {}", runs[0].1.scenario),
            ("sans-serif", 20),
        )
        .map_err(|e| e.to_string())?;
    let (nodes, price) = root.split_vertically(250);
    let node_count = |s: &nodewright_sim::report::Sample| s.nodes as f64;
    let per_hour = |s: &nodewright_sim::report::Sample| s.price_per_hour;
    compare_panel(&nodes, "nodes", &node_count, false, runs, end, per, None)?;
    compare_panel(
        &price,
        "$ per hour",
        &per_hour,
        true,
        runs,
        end,
        per,
        Some(unit),
    )?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// One quantity of every run on one axis, with a legend naming the runs.
#[allow(clippy::too_many_arguments)]
fn compare_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    title: &str,
    value: &dyn Fn(&nodewright_sim::report::Sample) -> f64,
    money: bool,
    runs: &[(&str, &Report)],
    end: i64,
    per: f64,
    time_axis: Option<&str>,
) -> Result<(), String> {
    let x = |t: i64| t as f64 / per;
    let max = runs
        .iter()
        .flat_map(|(_, r)| r.samples.iter().map(value))
        .fold(0.0, f64::max);
    let (mut chart, _) = axes(area, title, max, money, x(end), time_axis)?;
    for (i, (name, report)) in runs.iter().enumerate() {
        let color = if i == 0 { NODES } else { OTHER };
        let samples = &report.samples;
        let points = steps(samples.iter().map(|s| x(s.t)), |j| value(&samples[j]));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(*name)
            .legend(move |(lx, ly)| {
                PathElement::new(vec![(lx, ly), (lx + 18, ly)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(MARK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}
