//! The tasks of `eval cells` on one set of cell coordinates: Leiden clustering of the k-NN
//! graph (ARI, NMI), the label silhouette, the probes, and with batches the batch silhouette,
//! graph connectivity, iLISI and cLISI.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use corrflow_io::error::{Error, Result};

use super::{CellEvalOptions, Cohort};
use crate::metrics::{self, Groups, Points};
use crate::{probe_matrix, ClassScore, ProbeRequest};

/// Leiden at one resolution.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LeidenScore {
    pub resolution: f64,
    pub clusters: usize,
    pub ari: f64,
    pub nmi: f64,
}

/// Every score of one method. `ari`/`nmi` follow scib-metrics' `nmi_ari_cluster_labels_leiden`:
/// the resolution of the best NMI, and the ARI at that resolution.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MethodScores {
    /// `embedding` (a model's) or `baseline`.
    pub kind: String,
    /// Where the coordinates come from (a file, or the baseline's recipe).
    pub source: String,
    pub dim: usize,
    pub ari: f64,
    pub nmi: f64,
    pub leiden_resolution: f64,
    pub ari_best: f64,
    pub ari_mean: f64,
    pub nmi_mean: f64,
    pub leiden: Vec<LeidenScore>,
    pub silhouette_label: f64,
    /// Logistic-regression probe (k-fold): mean and sd over folds.
    pub accuracy: f64,
    pub accuracy_sd: f64,
    pub macro_f1: f64,
    pub macro_f1_sd: f64,
    pub rare_macro_f1: f64,
    pub macro_auroc: f64,
    /// k-NN vote probe.
    pub knn_accuracy: f64,
    pub knn_macro_f1: f64,
    pub knn_macro_f1_sd: f64,
    pub per_class: Vec<ClassScore>,
    /// The logistic probe's L2 penalty (above the requested one only where a fit needed it).
    pub probe_alpha: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silhouette_batch: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_connectivity: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ilisi: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clisi: Option<f64>,
    pub seconds: f64,
}

/// Scores `points` (one row per cohort cell).
pub fn score(
    name: &str,
    kind: &str,
    source: String,
    points: Points<'_>,
    cohort: &Cohort,
    opts: &CellEvalOptions,
) -> Result<MethodScores> {
    let start = std::time::Instant::now();
    let labels = Groups { codes: &cohort.labels, count: cohort.label_names.len() };
    let batches = cohort.batches.as_ref().map(|(codes, names)| Groups { codes, count: names.len() });
    // Neighbour counts include the cell itself (scanpy, scib-metrics); the pass excludes it.
    let graph_k = opts.neighbours.saturating_sub(1).max(1);
    let k = if batches.is_some() { graph_k.max(opts.lisi_neighbours.saturating_sub(1)) } else { graph_k };
    let pass = metrics::distance_pass(points, k, labels, batches);
    tracing::debug!(method = name, seconds = start.elapsed().as_secs_f64(), "distance pass done");
    let graph_nb = pass.neighbours.truncate(graph_k);
    let graph = metrics::umap_connectivities(&graph_nb);
    let leiden = leiden_scores(&graph, cohort, opts)?;
    let best = leiden.iter().fold(None::<&LeidenScore>, |b, s| match b {
        Some(b) if b.nmi >= s.nmi => Some(b),
        _ => Some(s),
    });
    let mean = |f: fn(&LeidenScore) -> f64| leiden.iter().map(f).sum::<f64>() / leiden.len().max(1) as f64;
    tracing::debug!(method = name, seconds = start.elapsed().as_secs_f64(), "Leiden done");
    let probe = probe_of(name, points, cohort, opts)?;
    tracing::debug!(method = name, seconds = start.elapsed().as_secs_f64(), "probes done");
    let (silhouette_batch, graph_connectivity, ilisi, clisi) = match (batches, pass.batch_sums.as_ref()) {
        (Some(b), Some(sums)) => batch_scores(sums, &pass.neighbours, &graph_nb, labels, b, opts),
        _ => (None, None, None, None),
    };
    Ok(MethodScores {
        kind: kind.into(),
        source,
        dim: points.dim,
        ari: best.map_or(f64::NAN, |b| b.ari),
        nmi: best.map_or(f64::NAN, |b| b.nmi),
        leiden_resolution: best.map_or(f64::NAN, |b| b.resolution),
        ari_best: leiden.iter().map(|s| s.ari).fold(f64::NAN, f64::max),
        ari_mean: mean(|s| s.ari),
        nmi_mean: mean(|s| s.nmi),
        silhouette_label: metrics::silhouette_label(&pass.label_sums, labels),
        accuracy: probe.accuracy,
        accuracy_sd: probe.accuracy_sd,
        macro_f1: probe.macro_f1,
        macro_f1_sd: probe.macro_f1_sd,
        rare_macro_f1: probe.rare_macro_f1,
        macro_auroc: probe.macro_auroc,
        knn_accuracy: probe.knn_accuracy,
        knn_macro_f1: probe.knn_macro_f1,
        knn_macro_f1_sd: probe.knn_macro_f1_sd,
        per_class: probe.per_class,
        probe_alpha: probe.alpha_used,
        leiden,
        silhouette_batch,
        graph_connectivity,
        ilisi,
        clisi,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Leiden at each resolution of `opts`, scored against the cohort's labels.
fn leiden_scores(graph: &metrics::WeightedGraph, cohort: &Cohort, opts: &CellEvalOptions) -> Result<Vec<LeidenScore>> {
    opts.resolutions
        .par_iter()
        .map(|&r| {
            let clusters = metrics::leiden(graph, r, opts.seed)
                .map_err(|e| Error::internal("eval cells", format!("Leiden: {e}")))?;
            Ok(LeidenScore {
                resolution: r,
                clusters: clusters.iter().max().map_or(0, |m| m + 1),
                ari: metrics::adjusted_rand_index(&cohort.labels, &clusters),
                nmi: metrics::normalized_mutual_info(&cohort.labels, &clusters),
            })
        })
        .collect()
}

/// The batch silhouette, graph connectivity, iLISI and cLISI.
fn batch_scores(
    batch_sums: &[f64],
    neighbours: &metrics::Neighbours,
    graph_nb: &metrics::Neighbours,
    labels: Groups<'_>,
    batches: Groups<'_>,
    opts: &CellEvalOptions,
) -> (Option<f64>, Option<f64>, Option<f64>, Option<f64>) {
    let lisi_nb = neighbours.truncate(opts.lisi_neighbours.saturating_sub(1));
    (
        metrics::silhouette_batch(batch_sums, labels, batches),
        Some(metrics::graph_connectivity(graph_nb, labels)),
        Some(metrics::ilisi(&lisi_nb, batches)),
        Some(metrics::clisi(&lisi_nb, labels)),
    )
}

/// The probes of one method; every score NaN (null in JSON, "—" in the table) when the cohort
/// has fewer than two classes the folds can split (`Cohort::probes_not_computed` says so).
fn probe_of(name: &str, points: Points<'_>, cohort: &Cohort, opts: &CellEvalOptions) -> Result<crate::ProbeReport> {
    if cohort.probes_not_computed.is_some() {
        return Ok(no_probe(name, cohort, opts));
    }
    let req = ProbeRequest {
        embeddings: name.into(),
        label: cohort.label_column.clone(),
        test_fraction: 0.2,
        rare_fraction: opts.rare_fraction,
        alpha: opts.alpha,
        max_iterations: opts.max_iterations,
        seed: opts.seed,
        exclude: Vec::new(),
        folds: opts.folds,
        neighbours: opts.probe_neighbours,
    };
    let labels = cohort.labels.iter().map(|&c| cohort.label_names[c].clone()).collect();
    probe_matrix(&req, std::borrow::Cow::Borrowed(points.data), labels, points.dim)
}

fn no_probe(name: &str, cohort: &Cohort, opts: &CellEvalOptions) -> crate::ProbeReport {
    crate::ProbeReport {
        command: "eval probe".into(),
        embeddings: name.into(),
        label: cohort.label_column.clone(),
        cells: 0,
        train_cells: 0,
        test_cells: 0,
        classes: 0,
        accuracy: f64::NAN,
        macro_f1: f64::NAN,
        rare_classes: Vec::new(),
        rare_macro_f1: f64::NAN,
        per_class: Vec::new(),
        folds: opts.folds,
        accuracy_sd: f64::NAN,
        macro_f1_sd: f64::NAN,
        macro_auroc: f64::NAN,
        macro_auroc_sd: f64::NAN,
        knn_accuracy: f64::NAN,
        knn_accuracy_sd: f64::NAN,
        knn_macro_f1: f64::NAN,
        knn_macro_f1_sd: f64::NAN,
        alpha_used: opts.alpha,
        skipped_classes: cohort.probe_skipped.clone(),
    }
}
