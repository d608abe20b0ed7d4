//! What an ingest says beyond its counts, from a second look at an h5ad input or an AnnData zarr
//! store: where the raw counts may be when the matrix read holds normalized values, and which
//! var column holds gene ids when the genes matched mostly by symbol (symbols match fewer genes:
//! several ids share one, and renamed genes are missed).

use std::path::Path;

use crate::error::Error;
use crate::formats::{h5, zarr_store, CountsSource};
use crate::tokenize::{MappingStats, NON_INTEGER};
use crate::vocab::{GeneMatch, Vocabulary};

/// The `--counts` choices of an h5ad file or zarr store other than `current` where raw counts
/// are kept (raw, each layer; X is where normalized values usually are); none for other formats.
pub(super) fn other_counts(path: &Path, current: &CountsSource) -> Vec<String> {
    if zarr_store::is_zarr(path) {
        return zarr_store::counts_choices(path)
            .into_iter()
            .filter(|c| c != current)
            .map(|c| match c {
                CountsSource::Layer(l) => format!("--counts layer:{l}"),
                other => format!("--counts {other}"),
            })
            .collect();
    }
    let Ok(file) = h5::open(path) else { return Vec::new() };
    if !(file.link_exists("obs") && file.link_exists("var")) {
        return Vec::new();
    }
    let mut out = Vec::new();
    let raw = (file.link_exists("raw") && file.link_exists("raw/X")) || file.link_exists("raw.X");
    if *current != CountsSource::Raw && raw {
        out.push("--counts raw".to_string());
    }
    let layers = file.group("layers").and_then(|g| g.member_names()).unwrap_or_default();
    out.extend(
        layers
            .into_iter()
            .filter(|l| *current != CountsSource::Layer(l.clone()))
            .map(|l| format!("--counts layer:{l}")),
    );
    out
}

/// A non-integer count error with the file's other matrices named: the user asked for one that
/// holds normalized values, and the raw counts may be in another.
pub(super) fn with_counts_hint(e: Error, current: &CountsSource) -> Error {
    match e {
        Error::InvalidData { path, msg } if msg.contains(NON_INTEGER) => {
            let others = other_counts(&path, current);
            let msg = if others.is_empty() {
                msg
            } else {
                format!("{msg}; raw counts may be in another of the file's matrices: {}", others.join(", "))
            };
            Error::InvalidData { path, msg }
        }
        e => e,
    }
}

/// Genes matched by symbol where a var column of Ensembl ids (h5ad or zarr) would match more:
/// the suggestion to pass `--gene-column`. `None` when ids matched most genes, when a column was
/// chosen, or when no column does better.
pub(super) fn gene_column_hint(
    path: &Path,
    gene_column: Option<&str>,
    stats: &MappingStats,
    vocab: &Vocabulary,
) -> Option<String> {
    let by_id = stats.matched_by_id + stats.matched_by_unversioned_id;
    if gene_column.is_some() || stats.matched_by_symbol <= by_id {
        return None;
    }
    let matched = by_id + stats.matched_by_symbol;
    let columns =
        if zarr_store::is_zarr(path) { zarr_store::var_string_columns(path) } else { h5ad_var_strings(path)? };
    let mut best: Option<(String, usize)> = None;
    for (name, ids) in columns {
        let n = ids
            .iter()
            .filter(|g| matches!(vocab.lookup(g), Some(GeneMatch::Exact(_) | GeneMatch::Unversioned(_))))
            .count();
        if n > matched && best.as_ref().is_none_or(|(_, b)| n > *b) {
            best = Some((name, n));
        }
    }
    let (column, n) = best?;
    Some(format!(
        "{}: {} of its genes matched the vocabulary, {} of them by symbol; var column '{column}' has Ensembl ids that \
         match {n}: pass --gene-column {column}",
        path.display(),
        matched,
        stats.matched_by_symbol
    ))
}

/// The plain string columns of an h5ad file's var other than its index, by name (gene ids are
/// unique, which anndata never stores as categories).
fn h5ad_var_strings(path: &Path) -> Option<Vec<(String, Vec<String>)>> {
    let file = h5::open(path).ok()?;
    let var = file.group("var").ok()?;
    let index = h5::attr_string(&var, "_index").unwrap_or_default();
    let names = var.member_names().ok()?;
    Some(
        names
            .into_iter()
            .filter(|n| *n != index && !n.starts_with("__"))
            .filter_map(|name| {
                let ds = var.dataset(&name).ok()?;
                let ids = h5::read_strings(path, &ds, &format!("var/{name}"), None).ok()?;
                Some((name, ids))
            })
            .collect(),
    )
}
