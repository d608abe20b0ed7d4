//! The baselines of one run, from the scored cells' counts.

use corrflow_io::tokenize::ValueTransform;

use super::{CellData, CellEvalOptions};
use crate::baselines::{highly_variable_genes, log_normalize, pca, random_projection, CsrMatrix};

/// `(name, kind, source, row-major data, dim)` of each baseline, and notes on deviations; or
/// why no baseline could be computed.
pub(super) fn build(
    cells: &CellData,
    keep: &[usize],
    opts: &CellEvalOptions,
    random_dim: usize,
) -> Result<(Vec<(String, String, String, Vec<f64>, usize)>, Vec<String>), String> {
    let mut notes = Vec::new();
    let counts =
        cells.counts.as_ref().map_err(|why| format!("the {} values of {}: {why}", cells.counts_name, cells.source))?;
    if !cells.integer_counts && cells.transform == ValueTransform::None && !cells.allow_normalized {
        return Err(format!(
            "the {} values of {} are not whole counts: pass --log1p if they are log1p-normalised, \
             --allow-normalized if they are scaled counts, or --counts raw / layer:NAME for counts",
            cells.counts_name, cells.source
        ));
    }
    if cells.transform == ValueTransform::Expm1 {
        notes.push("values were log1p-normalised: the recipe ran on their expm1 (per-cell scaled counts)".into());
    } else if !cells.integer_counts {
        notes.push("values are scaled counts, not whole counts: normalize_total ran on them as stored".into());
    }
    let mut x = CsrMatrix { genes: counts.genes, indptr: vec![0], ..Default::default() };
    for &i in keep {
        let (g, v) = counts.row(i);
        x.indices.extend_from_slice(g);
        x.values.extend_from_slice(v);
        x.indptr.push(x.indices.len());
    }
    if x.values.iter().all(|&v| v == 0.0) {
        return Err(format!(
            "the {} matrix of {} holds no counts for the scored cells",
            cells.counts_name, cells.source
        ));
    }
    log_normalize(&mut x);
    let hvg = highly_variable_genes(&x, opts.n_top_genes);
    if hvg.len() < 2 {
        return Err(format!("{} highly variable genes (of {}); the baselines need ≥ 2", hvg.len(), x.genes));
    }
    if hvg.len() != opts.n_top_genes {
        notes.push(format!(
            "{} highly variable genes (of {} genes; asked for {})",
            hvg.len(),
            x.genes,
            opts.n_top_genes
        ));
    }
    let column: std::collections::HashMap<u32, usize> = hvg.iter().enumerate().map(|(c, &g)| (g as u32, c)).collect();
    let (rows, cols) = (keep.len(), hvg.len());
    let mut dense = vec![0.0; rows * cols];
    for r in 0..rows {
        let (g, v) = x.row(r);
        for (gi, &vi) in g.iter().zip(v) {
            if let Some(&c) = column.get(gi) {
                dense[r * cols + c] += vi;
            }
        }
    }
    let (scores, comps) = pca(&dense, rows, cols, opts.n_comps)?;
    let random = random_projection(&dense, rows, cols, random_dim, opts.seed);
    let recipe = format!("normalize_total → log1p → {cols} HVGs (seurat)");
    Ok((
        vec![
            ("pca".into(), "baseline".into(), format!("{recipe} → PCA ({comps} components)"), scores, comps),
            (
                "random".into(),
                "baseline".into(),
                format!("{recipe} → Gaussian random projection to {random_dim}"),
                random,
                random_dim,
            ),
            ("hvg".into(), "baseline".into(), recipe, dense, cols),
        ],
        notes,
    ))
}
