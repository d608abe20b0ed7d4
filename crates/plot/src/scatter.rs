//! Scatter panels of cells coloured by label beside a grouped bar chart of scores: the panel of
//! `eval cells`.

use std::path::Path;

use plotters::prelude::*;

use corrflow_fs::{Error, Result};

/// One scatter per `(name, points)` (each point coloured by `codes` into `names`), then one bar
/// group per `(metric, [(method, value)])`; written atomically.
pub fn scatter_and_bars(
    path: &Path,
    title: &str,
    scatters: &[(&str, &[[f64; 2]])],
    codes: &[usize],
    names: &[String],
    bars: &[(&str, Vec<(String, f64)>)],
) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| Error::format(path, format!("plot: {e}"));
    let mut svg = String::new();
    {
        let cols = scatters.len().max(1);
        let root = SVGBackend::with_string(&mut svg, (340 * cols as u32, 720)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let root = root.titled(title, ("sans-serif", 20)).map_err(|e| err(&e))?;
        let (top, bottom) = root.split_vertically(340);
        draw_scatters(&top, scatters, codes).map_err(|e| err(&e))?;
        draw_bars(&bottom, names, bars).map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    corrflow_fs::atomic::write_atomic(path, svg.as_bytes())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawResult<'a> = std::result::Result<(), DrawingAreaErrorKind<<SVGBackend<'a> as DrawingBackend>::ErrorType>>;

/// One scatter per method, points coloured by label.
fn draw_scatters<'a>(top: &Area<'a>, scatters: &[(&str, &[[f64; 2]])], codes: &[usize]) -> DrawResult<'a> {
    let cols = scatters.len().max(1);
    for (area, (name, points)) in top.split_evenly((1, cols)).iter().zip(scatters) {
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for p in points.iter() {
            (x0, x1, y0, y1) = (x0.min(p[0]), x1.max(p[0]), y0.min(p[1]), y1.max(p[1]));
        }
        if x0 > x1 {
            (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
        }
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{name} (PC1, PC2)"), ("sans-serif", 14))
            .margin(8)
            .build_cartesian_2d(x0..x1.max(x0 + 1e-9), y0..y1.max(y0 + 1e-9))?;
        chart.configure_mesh().disable_mesh().x_labels(0).y_labels(0).draw()?;
        chart.draw_series(
            points.iter().zip(codes).map(|(p, &c)| Circle::new((p[0], p[1]), 2, Palette99::pick(c).to_rgba().filled())),
        )?;
    }
    Ok(())
}

/// The label legend and one bar group per metric, a bar per method.
fn draw_bars<'a>(bottom: &Area<'a>, names: &[String], bars: &[(&str, Vec<(String, f64)>)]) -> DrawResult<'a> {
    let (legend, chart_area) = bottom.split_horizontally(180);
    for (i, n) in names.iter().enumerate().take(24) {
        let y = 20 + 14 * i as i32;
        legend.draw(&Circle::new((14, y), 4, Palette99::pick(i).to_rgba().filled()))?;
        legend.draw(&Text::new(n.clone(), (24, y - 6), ("sans-serif", 11)))?;
    }
    let methods: Vec<String> = {
        let mut m: Vec<String> = Vec::new();
        for (_, values) in bars {
            for (name, _) in values {
                if !m.contains(name) {
                    m.push(name.clone());
                }
            }
        }
        m
    };
    let slots = (bars.len() * (methods.len() + 1)).max(1);
    let mut chart = ChartBuilder::on(&chart_area)
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(40)
        .build_cartesian_2d(0f64..slots as f64, 0f64..1.35)?;
    chart.configure_mesh().disable_x_mesh().y_max_light_lines(0).x_labels(0).y_desc("score").draw()?;
    for (g, (metric, values)) in bars.iter().enumerate() {
        let base = (g * (methods.len() + 1)) as f64;
        for (name, v) in values {
            let m = methods.iter().position(|x| x == name).unwrap_or(0);
            let color = Palette99::pick(m + 10).to_rgba();
            let x = base + m as f64;
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x, 0.0), (x + 0.9, v.clamp(0.0, 1.05))],
                color.filled(),
            )))?;
        }
        chart.draw_series(std::iter::once(Text::new(metric.to_string(), (base, 1.03), ("sans-serif", 11))))?;
    }
    for (m, name) in methods.iter().enumerate() {
        let color = Palette99::pick(m + 10).to_rgba();
        chart
            .draw_series(std::iter::once(Rectangle::new([(0.0, 0.0), (0.0, 0.0)], color.filled())))?
            .label(name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
