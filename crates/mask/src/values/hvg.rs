//! The `hvg:N` decoding set: the N most variable genes of the training cells (Seurat flavour,
//! as `eval cells` chooses the HVGs of its PCA baseline: the same function), on an evenly spaced
//! sample of at most `max_cells` cells, so its memory does not grow with the corpus.

use std::collections::BTreeSet;

use crate::plan::DataPlan;
use corrflow_eval::baselines::{highly_variable_genes, log_normalize, CsrMatrix};
use corrflow_io::error::Result;

/// The `n` most variable of the genes the atlases measured (ascending tokens).
pub fn top_variable_genes(
    plan: &DataPlan,
    measured: &[(String, Vec<u32>)],
    is_gene: &[bool],
    n: usize,
    max_cells: usize,
) -> Result<Vec<u32>> {
    let genes: Vec<u32> =
        measured.iter().flat_map(|(_, m)| m.iter().copied()).collect::<BTreeSet<u32>>().into_iter().collect();
    let column = |t: u32| genes.binary_search(&t).ok();
    let train_cells = plan.train_cells().max(1);
    let every = train_cells.div_ceil(max_cells.max(1) as u64).max(1);
    let mut x = CsrMatrix { genes: genes.len(), indptr: vec![0], ..Default::default() };
    let mut seen = 0u64;
    for s in 0..plan.index.shards.len() {
        plan.index.for_each_expression_block(s, plan.vocab_size, is_gene, |b| {
            for i in 0..b.len() {
                if plan.is_eval(b.cells.first_key + i as u64) {
                    continue;
                }
                seen += 1;
                if (seen - 1) % every != 0 {
                    continue;
                }
                let mut row: Vec<(u32, f64)> = b
                    .genes(i)
                    .iter()
                    .zip(b.counts(i))
                    .filter_map(|(&t, &c)| column(t).map(|j| (j as u32, f64::from(c))))
                    .collect();
                row.sort_unstable_by_key(|r| r.0);
                x.indices.extend(row.iter().map(|r| r.0));
                x.values.extend(row.iter().map(|r| r.1));
                x.indptr.push(x.indices.len());
            }
            Ok(())
        })?;
    }
    log_normalize(&mut x);
    let mut top: Vec<u32> = highly_variable_genes(&x, n.min(genes.len())).into_iter().map(|j| genes[j]).collect();
    top.sort_unstable();
    Ok(top)
}
