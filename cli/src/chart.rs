//! `simulate --chart FILE.svg`: nodes and pending pods (left axis) and $/h (right axis)
//! over virtual time, drawn with plotters' SVG backend. Text goes into the SVG as
//! `<text>` elements, so no font files are read.

use std::path::Path;

use nodewright_engine::sim::Report;
use plotters::prelude::*;

const NODES: RGBColor = RGBColor(31, 119, 180);
const PENDING: RGBColor = RGBColor(214, 39, 40);
const PRICE: RGBColor = RGBColor(44, 160, 44);

pub fn write(path: &Path, report: &Report) -> Result<(), String> {
    let samples = &report.samples;
    let end = samples.last().map(|s| s.t).unwrap_or(0).max(60);
    // Minutes for runs up to three hours, hours beyond.
    let (unit, per) = if end > 3 * 3600 {
        ("hours", 3600.0)
    } else {
        ("minutes", 60.0)
    };
    let x = |t: i64| t as f64 / per;
    let max_count = samples
        .iter()
        .map(|s| s.nodes.max(s.pending_pods))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let max_price = samples
        .iter()
        .map(|s| s.price_per_hour)
        .fold(0.0, f64::max)
        .max(0.01);

    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("nodewright simulate: {}", report.scenario),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .right_y_label_area_size(60)
        .build_cartesian_2d(0.0..x(end), 0.0..max_count * 1.1)
        .map_err(|e| e.to_string())?
        .set_secondary_coord(0.0..x(end), 0.0..max_price * 1.1);
    chart
        .configure_mesh()
        .x_desc(format!("virtual time ({unit})"))
        .y_desc("nodes, pending pods")
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .configure_secondary_axes()
        .y_desc("$ per hour")
        .draw()
        .map_err(|e| e.to_string())?;

    // Steps, not slopes: a count holds until the next sample.
    let steps = |value: &dyn Fn(usize) -> f64| -> Vec<(f64, f64)> {
        let mut points = Vec::with_capacity(samples.len() * 2);
        for (i, s) in samples.iter().enumerate() {
            if i > 0 {
                points.push((x(s.t), value(i - 1)));
            }
            points.push((x(s.t), value(i)));
        }
        points
    };
    chart
        .draw_series(LineSeries::new(
            steps(&|i| samples[i].nodes as f64),
            NODES.stroke_width(2),
        ))
        .map_err(|e| e.to_string())?
        .label("nodes")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], NODES.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(
            steps(&|i| samples[i].pending_pods as f64),
            PENDING.stroke_width(2),
        ))
        .map_err(|e| e.to_string())?
        .label("pending pods")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], PENDING.stroke_width(2)));
    chart
        .draw_secondary_series(LineSeries::new(
            steps(&|i| samples[i].price_per_hour),
            PRICE.stroke_width(2),
        ))
        .map_err(|e| e.to_string())?
        .label("$/h (right axis)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], PRICE.stroke_width(2)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
