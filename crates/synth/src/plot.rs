//! The figures of the synthetic experiments, via [`corrflow_plot`].

use std::path::Path;

use super::structure::{Heatmaps, StructureReport};
use super::sweep::SweepReport;
use corrflow_io::error::Result;
use corrflow_plot::{heatmap_panels, line_panels, Series};

/// Fig. 2: ground truth, adjacency and co-occurrence matrices, each scaled to [0, 1]: all genes
/// in blocks (`path`), and 60 genes one by one (`zoom`).
pub fn structure_plot(path: &Path, zoom: &Path, r: &StructureReport, maps: &Heatmaps, bins: usize) -> Result<()> {
    let titles: Vec<String> = maps
        .binned
        .iter()
        .enumerate()
        .map(|(i, (name, _))| match i {
            1 => format!("{name}, AUROC {:.3}", r.adjacency.auroc),
            2 => format!("{name}, AUROC {:.3}", r.cooccurrence.auroc),
            _ => name.clone(),
        })
        .collect();
    let what = format!("{} genes, {} modules, {} cells, top {} tokens", r.genes, r.modules, r.cells, r.top_k);
    let panels: Vec<(&str, usize, &[f64])> =
        titles.iter().zip(&maps.binned).map(|(t, (_, m))| (t.as_str(), bins, m.as_slice())).collect();
    let per = r.genes / bins;
    heatmap_panels(path, &format!("Structure recovery: {what} (mean over {per} × {per} gene blocks)"), &panels)?;
    let side = (maps.zoom[0].1.len() as f64).sqrt().round() as usize;
    let panels: Vec<(&str, usize, &[f64])> =
        titles.iter().zip(&maps.zoom).map(|(t, (_, m))| (t.as_str(), side, m.as_slice())).collect();
    let (from, to) = r.zoom_genes;
    Ok(heatmap_panels(
        zoom,
        &format!("Structure recovery: genes {from}–{} one by one (module boundary inside)", to - 1),
        &panels,
    )?)
}

/// Fig. 3: test accuracy against γ per strategy, one panel per background reading, and the
/// paired gain of correlation over random masking.
pub fn modularity_plot(path: &Path, r: &SweepReport) -> Result<()> {
    let mut backgrounds: Vec<_> = r.rows.iter().map(|row| row.background).collect();
    backgrounds.dedup();
    let mut panels: Vec<(String, Vec<Series>)> = Vec::new();
    let mut gains = Vec::new();
    for b in &backgrounds {
        let rows: Vec<_> = r.rows.iter().filter(|row| row.background == *b).collect();
        let line = |name: &str, f: &dyn Fn(&super::sweep::SweepRow) -> f64| Series {
            name: name.to_string(),
            points: rows.iter().map(|row| (row.gamma, f(row))).collect(),
        };
        panels.push((
            format!("test accuracy, Exp(0.1) as {}", b.name()),
            vec![line("random", &|row| row.random.mean), line("correlation", &|row| row.correlation.mean)],
        ));
        gains.push(line(&format!("{} background", b.name()), &|row| row.gain.mean));
    }
    panels.push(("gain: correlation − random".to_string(), gains));
    let panels: Vec<(&str, Vec<Series>)> = panels.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
    let title = format!("Modularity sweep: mean of {} trials, {} epochs", r.seeds, r.epochs);
    Ok(line_panels(path, &title, "modularity γ", &panels)?)
}
