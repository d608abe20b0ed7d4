//! What a value model's data is, read from a corpus: each atlas' measured genes (an atlas
//! ingested before corrflow kept expression is refused, with what to do) and the decoding set
//! (`measured`, `graph` or `hvg:N`). Shared by the trainer and the Python package.

use std::collections::BTreeSet;
use std::path::Path;

use corrflow_io::corpus::{atlas_dir, AtlasManifest, CorpusIndex};
use corrflow_io::error::{Error, Result};
use corrflow_io::graph_files::Graph;

use super::hvg::top_variable_genes;
use crate::plan::DataPlan;

/// Cells the `hvg:N` decoding set is chosen on (an evenly spaced sample of the training cells).
pub const HVG_CELLS: usize = 100_000;

/// Each indexed atlas' measured genes (its manifest's expression record, ascending tokens).
pub fn atlas_measured(corpus: &Path, index: &CorpusIndex) -> Result<Vec<(String, Vec<u32>)>> {
    index
        .atlases
        .iter()
        .map(|name| {
            let dir = atlas_dir(corpus, name);
            let manifest = AtlasManifest::load(&dir)?;
            let e = manifest.expression.ok_or_else(|| {
                Error::format(
                    &dir,
                    format!(
                        "atlas '{name}' was ingested before corrflow kept expression values, which a value model \
                         (model.input = 'value' or 'bins') trains on: ingest its files again (`corrflow ingest`, into \
                         a new corpus or under a new atlas name); rank models still train on it"
                    ),
                )
            })?;
            Ok((name.clone(), e.measured))
        })
        .collect()
}

/// The decoding set `spec` names (`measured`, `graph`, `hvg:N`; ascending tokens).
pub fn decoding_set(
    spec: &str,
    plan: &DataPlan,
    measured: &[(String, Vec<u32>)],
    graph: Option<&Graph>,
    is_gene: &[bool],
) -> Result<Vec<u32>> {
    let all = || measured.iter().flat_map(|(_, m)| m.iter().copied()).collect::<BTreeSet<u32>>().into_iter().collect();
    let bad =
        || Error::Usage(format!("model.values.decode must be 'measured', 'graph' or 'hvg:N' (N ≥ 1), got '{spec}'"));
    match spec {
        "measured" => Ok(all()),
        "graph" => {
            let g = graph.ok_or_else(|| {
                Error::Usage(
                    "model.values.decode = 'graph' needs a dependency graph: set train.graph (or --graph)".into(),
                )
            })?;
            Ok(g.genes.iter().map(|g| g.0).collect::<BTreeSet<u32>>().into_iter().collect())
        }
        _ => match spec.strip_prefix("hvg:").map(str::parse::<usize>) {
            Some(Ok(n)) if n >= 1 => top_variable_genes(plan, measured, is_gene, n, HVG_CELLS),
            _ => Err(bad()),
        },
    }
}
