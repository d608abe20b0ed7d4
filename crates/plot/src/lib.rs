//! SVG line and heat-map panels (plotters' SVG backend: no system fonts needed), written atomically.

mod scatter;

use std::path::Path;

use plotters::prelude::*;

use corrflow_fs::{Error, Result};

pub use scatter::scatter_and_bars;

/// One named line of a chart.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart with one panel per `(y label, series)` side by side, written atomically.
pub fn line_panels(path: &Path, title: &str, x_label: &str, panels: &[(&str, Vec<Series>)]) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| Error::format(path, format!("plot: {e}"));
    let mut svg = String::new();
    {
        let width = 460 * panels.len().max(1) as u32;
        let root = SVGBackend::with_string(&mut svg, (width, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let root = root.titled(title, ("sans-serif", 20)).map_err(|e| err(&e))?;
        for (area, (y_label, series)) in root.split_evenly((1, panels.len().max(1))).iter().zip(panels) {
            let pts = series.iter().flat_map(|s| s.points.iter());
            let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
            for &(x, y) in pts {
                (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
            }
            if x0 > x1 {
                (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
            }
            let pad = ((y1 - y0) * 0.08).max(1e-9);
            let mut chart = ChartBuilder::on(area)
                .margin(12)
                .x_label_area_size(38)
                .y_label_area_size(56)
                .build_cartesian_2d(x0..x1.max(x0 + 1e-9), (y0 - pad).min(0.0)..y1 + pad)
                .map_err(|e| err(&e))?;
            chart.configure_mesh().x_desc(x_label).y_desc(*y_label).draw().map_err(|e| err(&e))?;
            for (i, s) in series.iter().enumerate() {
                let color = Palette99::pick(i).to_rgba();
                chart
                    .draw_series(LineSeries::new(s.points.clone(), color.stroke_width(2)))
                    .map_err(|e| err(&e))?
                    .label(s.name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
                chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(|e| err(&e))?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|e| err(&e))?;
        }
        root.present().map_err(|e| err(&e))?;
    }
    corrflow_fs::atomic::write_atomic(path, svg.as_bytes())
}

/// Square heatmaps side by side, `(title, side, values)` with values in [0, 1] row-major (row 0
/// at the top), white (0) to dark blue (1); written atomically.
pub fn heatmap_panels(path: &Path, title: &str, panels: &[(&str, usize, &[f64])]) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| Error::format(path, format!("plot: {e}"));
    let mut svg = String::new();
    {
        let width = 400 * panels.len().max(1) as u32;
        let root = SVGBackend::with_string(&mut svg, (width, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let root = root.titled(title, ("sans-serif", 20)).map_err(|e| err(&e))?;
        for (area, &(name, n, values)) in root.split_evenly((1, panels.len().max(1))).iter().zip(panels) {
            let n = n.max(1);
            let mut chart = ChartBuilder::on(area)
                .margin(16)
                .caption(name, ("sans-serif", 15))
                .build_cartesian_2d(0..n, 0..n)
                .map_err(|e| err(&e))?;
            chart.configure_mesh().disable_mesh().disable_axes().draw().map_err(|e| err(&e))?;
            let shade = |v: f64| {
                let t = v.clamp(0.0, 1.0);
                let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
                RGBColor(mix(255.0, 8.0), mix(255.0, 48.0), mix(255.0, 107.0))
            };
            chart
                .draw_series((0..n * n).map(|i| {
                    let (r, c) = (i / n, i % n);
                    let y = n - 1 - r;
                    Rectangle::new([(c, y), (c + 1, y + 1)], shade(values[i]).filled())
                }))
                .map_err(|e| err(&e))?;
        }
        root.present().map_err(|e| err(&e))?;
    }
    corrflow_fs::atomic::write_atomic(path, svg.as_bytes())
}
