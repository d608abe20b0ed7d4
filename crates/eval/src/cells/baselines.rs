//! The baselines of one run, from the scored cells' counts.

use corrflow_io::tokenize::ValueTransform;

use super::{CellData, CellEvalOptions};
use crate::baselines::{highly_variable_genes, log_normalize, pca_centring, random_projection, CsrMatrix};

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
    let mut x = scored_counts(cells, counts, keep)?;
    log_normalize(&mut x);
    // More HVGs than genes keeps every gene, as scanpy does (it logs "`n_top_genes` > number
    // of genes, returning all genes"); the note says so. Every step after this one is bounded
    // by the cells × genes of the input, whatever was asked (`pca` works on the smaller side).
    let top = opts.n_top_genes.min(x.genes);
    let hvg = highly_variable_genes(&x, top);
    if hvg.len() < 2 {
        return Err(format!("{} highly variable genes (of {}); the baselines need ≥ 2", hvg.len(), x.genes));
    }
    notes.extend(hvg_note(opts.n_top_genes, x.genes, hvg.len()));
    let mut dense = dense_columns(&x, &hvg);
    drop(x);
    let (rows, cols) = (keep.len(), hvg.len());
    let start = std::time::Instant::now();
    // Centred in place (no copy): the HVG and random-projection methods then score the centred
    // matrix, which changes none of their scores (each is translation invariant).
    let (scores, comps) = pca_centring(&mut dense, rows, cols, opts.n_comps)?;
    tracing::debug!(rows, cols, seconds = start.elapsed().as_secs_f64(), "eval cells: PCA baseline");
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

/// The scored cells' rows of `counts`, refused when they hold no counts at all.
fn scored_counts(cells: &CellData, counts: &CsrMatrix, keep: &[usize]) -> Result<CsrMatrix, String> {
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
    Ok(x)
}

/// A note when the HVGs kept are not the `asked` number.
fn hvg_note(asked: usize, genes: usize, kept: usize) -> Option<String> {
    if asked > genes {
        Some(format!(
            "--n-top-genes {asked} is more than the {genes} genes: every gene that varies was kept ({kept} HVGs)"
        ))
    } else if kept != asked {
        Some(format!(
            "{kept} highly variable genes (of {genes} genes; asked for {asked}: ties at the cut-off are kept, genes \
             that do not vary are not)"
        ))
    } else {
        None
    }
}

/// The cells' values of the `genes` columns (sorted gene indices), dense, row-major.
fn dense_columns(x: &CsrMatrix, genes: &[usize]) -> Vec<f64> {
    let mut column = vec![u32::MAX; x.genes];
    genes.iter().enumerate().for_each(|(c, &g)| column[g] = c as u32);
    let cols = genes.len();
    let mut dense = vec![0.0; x.cells() * cols];
    for r in 0..x.cells() {
        let (g, v) = x.row(r);
        for (&gi, &vi) in g.iter().zip(v) {
            if let Some(&c) = column.get(gi as usize).filter(|&&c| c != u32::MAX) {
                dense[r * cols + c as usize] += vi;
            }
        }
    }
    dense
}
