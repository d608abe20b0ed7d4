//! The cells every method is scored on, their label and batch codes, and the classes the probes
//! can score; with a message that says which filter emptied the set when too few remain.

use std::collections::HashMap;

use corrflow_io::error::{Error, Result};

use super::{CellData, CellEvalOptions, MethodInput};
use crate::probe::{describe_classes, min_class_cells, probe_classes, ClassCount};

/// The cells every method is scored on: labelled, not excluded, embedded by every model.
pub struct Cohort {
    pub label_column: String,
    pub labels: Vec<usize>,
    pub label_names: Vec<String>,
    pub batches: Option<(Vec<usize>, Vec<String>)>,
    /// Classes too small for the folds, left out of the probes (Leiden and the silhouettes
    /// still score their cells).
    pub probe_skipped: Vec<ClassCount>,
    /// Why the probes are not run at all: fewer than two classes can be split across the folds.
    pub probes_not_computed: Option<String>,
}

/// Groups strings into codes numbered in sorted order.
fn codes(values: &[&str]) -> (Vec<usize>, Vec<String>) {
    let names: Vec<String> =
        values.iter().map(|s| s.to_string()).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    let index: HashMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
    (values.iter().map(|v| index[v]).collect(), names)
}

/// Every method has one row per cell, at least one dimension and at least one finite row.
fn check_methods(data: &CellData, embedded: &[MethodInput]) -> Result<()> {
    let n = data.ids.len();
    if data.labels.len() != n || data.batches.as_ref().is_some_and(|b| b.len() != n) {
        return Err(Error::Usage(format!("{}: labels and batches must have one entry per cell ({n})", data.source)));
    }
    let mut seen: HashMap<&str, &str> = HashMap::new();
    for m in embedded {
        if m.rows.len() != n {
            return Err(Error::Usage(format!("{}: {} rows of embeddings for {n} cells", m.source, m.rows.len())));
        }
        if m.dim == 0 {
            return Err(Error::Usage(format!("{}: the embeddings are 0 wide (no values per cell)", m.source)));
        }
        if m.rows.iter().all(Option::is_none) {
            return Err(Error::Usage(format!(
                "{}: no cell of {} has a finite embedding (every row holds NaN, inf or null)",
                m.source, data.source
            )));
        }
        if let Some(other) = seen.insert(m.name.as_str(), m.source.as_str()) {
            let msg = if other == m.source {
                format!("{} is given twice (as '{}' both times); give each method once", m.source, m.name)
            } else {
                format!("two methods are named '{}' ({other} and {}); names must differ", m.name, m.source)
            };
            return Err(Error::Usage(msg));
        }
    }
    Ok(())
}

/// The cells every method is scored on (their indices into `data`) and their label and batch
/// codes.
pub(super) fn cohort(
    data: &CellData,
    embedded: &[MethodInput],
    label: &str,
    batch: Option<&str>,
    exclude: &[String],
    opts: &CellEvalOptions,
) -> Result<(Vec<usize>, Cohort)> {
    check_methods(data, embedded)?;
    let n = data.ids.len();
    let labelled = |i: usize| data.labels[i].is_some();
    let included = |i: usize| data.labels[i].as_ref().is_some_and(|l| !exclude.contains(l));
    let batched = |i: usize| data.batches.as_ref().is_none_or(|b| b[i].is_some());
    let embedded_all = |i: usize| embedded.iter().all(|m| m.rows[i].is_some());
    let keep: Vec<usize> = (0..n).filter(|&i| included(i) && batched(i) && embedded_all(i)).collect();
    let label_values: Vec<&str> = keep.iter().map(|&i| data.labels[i].as_deref().unwrap_or_default()).collect();
    let (labels, label_names) = codes(&label_values);
    let min_cells = 2 * opts.folds.max(2);
    if label_names.len() < 2 || keep.len() < min_cells {
        let count = |f: &dyn Fn(usize) -> bool| (0..n).filter(|&i| !f(i)).count();
        let mut why = vec![format!("{} without a '{label}' value", count(&labelled))];
        if !exclude.is_empty() {
            why.push(format!("{} excluded", (0..n).filter(|&i| labelled(i) && !included(i)).count()));
        }
        if let Some(b) = batch {
            why.push(format!("{} without a '{b}' value", count(&batched)));
        }
        if !embedded.is_empty() {
            why.push(format!("{} without a finite embedding from every method", count(&embedded_all)));
        }
        return Err(Error::Usage(format!(
            "{}: {} cells in {} classes of '{label}' remain to score (of {n}: {}); eval cells needs ≥ 2 \
             classes and ≥ {min_cells} cells (2 × --folds)",
            data.source,
            keep.len(),
            label_names.len(),
            why.join(", ")
        )));
    }
    let batches = data
        .batches
        .as_ref()
        .map(|b| codes(&keep.iter().map(|&i| b[i].as_deref().unwrap_or_default()).collect::<Vec<_>>()));
    if let Some((_, names)) = &batches {
        if names.len() < 2 {
            return Err(Error::Usage(format!(
                "{}: batch column '{}' has one value ('{}') among the {} scored cells; batch metrics need ≥ 2 \
                 (leave out --batch)",
                data.source,
                batch.unwrap_or_default(),
                names[0],
                keep.len()
            )));
        }
    }
    let mut sizes = vec![0usize; label_names.len()];
    labels.iter().for_each(|&c| sizes[c] += 1);
    let sizes: Vec<(String, usize)> = label_names.iter().cloned().zip(sizes).collect();
    let (probed, probe_skipped) = probe_classes(&sizes, opts.folds);
    let probes_not_computed = (probed.len() < 2).then(|| {
        format!(
            "{} of the {} classes of '{label}' have ≥ {} cells (--folds {}); the probes need ≥ 2 such classes",
            probed.len(),
            label_names.len(),
            min_class_cells(opts.folds),
            opts.folds
        )
    });
    if !probe_skipped.is_empty() {
        tracing::info!(classes = %describe_classes(&probe_skipped), "eval cells: classes left out of the probes");
    }
    let cohort =
        Cohort { label_column: label.to_string(), labels, label_names, batches, probe_skipped, probes_not_computed };
    Ok((keep, cohort))
}
