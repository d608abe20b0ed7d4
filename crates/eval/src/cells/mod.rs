//! `corrflow eval cells`: embeddings of cells judged beside baselines computed from the same
//! cells in the same run (PCA of the log-normalised HVGs, the HVG matrix, a random
//! projection), on the cell tasks of scib-metrics and cz-benchmarks.

mod baselines;
mod cohort;
mod input;
mod score;
mod table;
mod validate;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use corrflow_io::error::{Error, Result};
use corrflow_io::formats::ReadOptions;
use corrflow_io::tokenize::ValueTransform;

use crate::baselines::CsrMatrix;
use crate::metrics::Points;
use crate::probe::ClassCount;
use cohort::cohort;
pub use cohort::Cohort;
pub use input::append_counts;
pub use score::{LeidenScore, MethodScores};
pub use table::table;
use validate::validate;
pub use validate::validate_options;

/// Embeddings under test: a name (the key in the report) and an `embed` Parquet file.
#[derive(Clone, Debug)]
pub struct NamedEmbeddings {
    pub name: String,
    pub path: PathBuf,
}

/// The tasks' settings; the defaults are scanpy's, scib-metrics' and `eval probe`'s.
#[derive(Clone, Debug)]
pub struct CellEvalOptions {
    /// k-NN graph size, the cell itself included (scanpy's `n_neighbors`).
    pub neighbours: usize,
    /// Neighbours of iLISI/cLISI, the cell itself included (scib-metrics: 90).
    pub lisi_neighbours: usize,
    /// Leiden resolutions (scib-metrics: 0.2, 0.4, …, 2.0).
    pub resolutions: Vec<f64>,
    pub n_top_genes: usize,
    pub n_comps: usize,
    pub folds: usize,
    pub alpha: f64,
    pub max_iterations: u64,
    pub probe_neighbours: usize,
    pub rare_fraction: f64,
    pub seed: u64,
    /// Compute the PCA / HVG / random baselines.
    pub baselines: bool,
}

impl Default for CellEvalOptions {
    fn default() -> Self {
        Self {
            neighbours: 15,
            lisi_neighbours: 90,
            resolutions: (1..=10).map(|i| f64::from(i) * 0.2).collect(),
            n_top_genes: 2000,
            n_comps: 50,
            folds: 5,
            alpha: 1.0,
            max_iterations: 200,
            probe_neighbours: 10,
            rare_fraction: 0.25,
            seed: 0,
            baselines: true,
        }
    }
}

#[derive(Clone, Debug)]
pub struct CellEvalRequest {
    pub input: PathBuf,
    pub read: ReadOptions,
    pub transform: ValueTransform,
    /// Values are scaled counts (not whole numbers): the baselines normalise them as stored.
    pub allow_normalized: bool,
    pub embeddings: Vec<NamedEmbeddings>,
    pub label: String,
    pub batch: Option<String>,
    /// Labels whose cells are left out (e.g. "Unknown").
    pub exclude: Vec<String>,
    pub options: CellEvalOptions,
}

/// The input cells, read from a file ([`eval_cells`]) or handed over from memory (Python's
/// `corrflow.eval_cells`).
pub struct CellData {
    /// The file (or object) the cells come from, for messages and the report.
    pub source: String,
    pub ids: Vec<String>,
    pub labels: Vec<Option<String>>,
    pub batches: Option<Vec<Option<String>>>,
    /// Counts (after `expm1` of log-normalised values), or why there are none.
    pub counts: std::result::Result<CsrMatrix, String>,
    /// Where the counts came from (X, raw, layer:NAME), for messages.
    pub counts_name: String,
    /// Every stored value is a whole number.
    pub integer_counts: bool,
    pub transform: ValueTransform,
    /// The values are scaled counts (not whole numbers) and may be normalised as stored.
    pub allow_normalized: bool,
}

/// One embedding under test, lined up with [`CellData`]'s cells (`None`: no finite embedding).
pub struct MethodInput {
    pub name: String,
    pub source: String,
    pub rows: Vec<Option<Vec<f32>>>,
    pub dim: usize,
}

/// A baseline that could not be computed, and why.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Skipped {
    pub method: String,
    pub reason: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CellEvalReport {
    pub command: String,
    pub input: String,
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
    /// Cells scored (the same for every method).
    pub cells: usize,
    /// Cells of the input left out: no label, excluded, or not embedded by every model.
    pub dropped_cells: usize,
    pub classes: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batches: Option<usize>,
    pub seed: u64,
    /// The logistic probe's requested L2 penalty.
    pub probe_alpha: f64,
    /// Folds of the probes.
    #[serde(default)]
    pub folds: usize,
    /// Classes left out of the probes: fewer cells than `folds` (each fold must test and train
    /// on every class). Leiden and the silhouettes still score their cells.
    #[serde(default)]
    pub probe_skipped_classes: Vec<ClassCount>,
    /// Why the probes were not run (their metrics are then null): fewer than two classes have
    /// enough cells for the folds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes_not_computed: Option<String>,
    /// Method names in the order they were scored (embeddings first).
    pub order: Vec<String>,
    pub methods: BTreeMap<String, MethodScores>,
    /// For each metric, the method with the highest score.
    pub best: BTreeMap<String, String>,
    pub skipped: Vec<Skipped>,
    /// How the baselines were made, stated where they deviate from scanpy's recipe.
    pub baseline_notes: Vec<String>,
    pub seconds: f64,
    /// Two leading principal components of each method's coordinates, for plots.
    #[serde(skip)]
    pub layouts: Vec<(String, Vec<[f64; 2]>)>,
    /// Each scored cell's label code (into `label_names`), for plots.
    #[serde(skip)]
    pub label_codes: Vec<usize>,
    #[serde(skip)]
    pub label_names: Vec<String>,
}

/// The metrics the table shows and `best` ranks, all higher-is-better.
pub const METRICS: [&str; 13] = [
    "ari",
    "nmi",
    "ari_mean",
    "nmi_mean",
    "silhouette_label",
    "accuracy",
    "macro_f1",
    "knn_accuracy",
    "knn_macro_f1",
    "silhouette_batch",
    "graph_connectivity",
    "ilisi",
    "clisi",
];

pub fn metric(m: &MethodScores, name: &str) -> Option<f64> {
    Some(match name {
        "ari" => m.ari,
        "nmi" => m.nmi,
        "ari_mean" => m.ari_mean,
        "nmi_mean" => m.nmi_mean,
        "silhouette_label" => m.silhouette_label,
        "accuracy" => m.accuracy,
        "macro_f1" => m.macro_f1,
        "knn_accuracy" => m.knn_accuracy,
        "knn_macro_f1" => m.knn_macro_f1,
        "silhouette_batch" => m.silhouette_batch?,
        "graph_connectivity" => m.graph_connectivity?,
        "ilisi" => m.ilisi?,
        "clisi" => m.clisi?,
        _ => return None,
    })
    .filter(|v| v.is_finite())
}

/// `eval cells` on a file: reads its cells and the embeddings, then [`evaluate`]s them.
pub fn eval_cells(req: &CellEvalRequest) -> Result<CellEvalReport> {
    let start = std::time::Instant::now();
    validate(req)?;
    let cells = input::read_cells(&req.input, &req.read, req.transform, &req.label, req.batch.as_deref())?;
    tracing::debug!(seconds = start.elapsed().as_secs_f64(), "eval cells: input read");
    let data = CellData {
        source: req.input.display().to_string(),
        ids: cells.ids,
        labels: cells.labels,
        batches: cells.batches,
        counts: if cells.counts_problem.is_none() {
            Ok(cells.counts)
        } else {
            Err(cells.counts_problem.unwrap_or_default())
        },
        counts_name: req.read.counts.to_string(),
        integer_counts: cells.integer_counts,
        transform: req.transform,
        allow_normalized: req.allow_normalized,
    };
    let mut seen = std::collections::HashSet::with_capacity(data.ids.len());
    if let Some(dup) = data.ids.iter().find(|id| !seen.insert(id.as_str())) {
        return Err(Error::invalid(
            &req.input,
            format!("cell id '{dup}' appears twice; eval cells lines embeddings up by cell id"),
        ));
    }
    let mut methods = Vec::with_capacity(req.embeddings.len());
    for e in &req.embeddings {
        let (rows, dim) = input::read_embeddings(&e.path, &data.ids)?;
        methods.push(MethodInput { name: e.name.clone(), source: e.path.display().to_string(), rows, dim });
    }
    let mut report = evaluate(&data, &methods, &req.label, req.batch.as_deref(), &req.exclude, &req.options)?;
    report.seconds = start.elapsed().as_secs_f64();
    Ok(report)
}

/// Scores every method and the baselines on the cells that have a label (not excluded), a
/// batch when batches are given, and an embedding from every method.
pub fn evaluate(
    data: &CellData,
    embedded: &[MethodInput],
    label: &str,
    batch: Option<&str>,
    exclude: &[String],
    opts: &CellEvalOptions,
) -> Result<CellEvalReport> {
    let start = std::time::Instant::now();
    let n = data.ids.len();
    let (keep, cohort) = cohort(data, embedded, label, batch, exclude, opts)?;
    let mut methods: Vec<(String, String, String, Vec<f64>, usize)> = Vec::new();
    for m in embedded {
        let rows = keep.iter().flat_map(|&i| m.rows[i].as_deref().unwrap_or_default().iter().map(|&v| f64::from(v)));
        methods.push((m.name.clone(), "embedding".into(), m.source.clone(), rows.collect(), m.dim));
    }
    let mut skipped = Vec::new();
    let mut notes = Vec::new();
    if opts.baselines {
        let dim = embedded.first().map_or(opts.n_comps, |m| m.dim);
        match baselines::build(data, &keep, opts, dim) {
            Ok((built, n)) => {
                methods.extend(built);
                notes.extend(n);
            }
            Err(reason) => {
                for m in ["pca", "hvg", "random"] {
                    skipped.push(Skipped { method: m.into(), reason: reason.clone() });
                }
            }
        }
    }
    tracing::debug!(seconds = start.elapsed().as_secs_f64(), "eval cells: baselines built");
    // The PCA and HVG panels are the PCA baseline's two leading components (the PCA of the same
    // centred HVG matrix), which saves a second eigendecomposition of the HVG covariance.
    let baseline_layout = methods
        .iter()
        .find(|m| m.1 == "baseline" && m.0 == "pca" && m.4 >= 2)
        .map(|m| m.3.chunks(m.4).map(|r| [r[0], r[1]]).collect::<Vec<_>>());
    let mut report = CellEvalReport {
        command: "eval cells".into(),
        input: data.source.clone(),
        label: label.to_string(),
        batch: batch.map(str::to_string),
        cells: keep.len(),
        dropped_cells: n - keep.len(),
        classes: cohort.label_names.len(),
        batches: cohort.batches.as_ref().map(|(_, n)| n.len()),
        seed: opts.seed,
        probe_alpha: opts.alpha,
        folds: opts.folds,
        probe_skipped_classes: cohort.probe_skipped.clone(),
        probes_not_computed: cohort.probes_not_computed.clone(),
        order: Vec::new(),
        methods: BTreeMap::new(),
        best: BTreeMap::new(),
        skipped,
        baseline_notes: notes,
        seconds: 0.0,
        layouts: Vec::new(),
        label_codes: cohort.labels.clone(),
        label_names: cohort.label_names.clone(),
    };
    for (name, kind, source, data, dim) in methods {
        tracing::info!(method = %name, dim, cells = keep.len(), "eval cells: scoring");
        let points = Points { data: &data, dim };
        let scores = score::score(&name, &kind, source, points, &cohort, opts)?;
        let panel = match &baseline_layout {
            Some(l) if kind == "baseline" && (name == "pca" || name == "hvg") => l.clone(),
            _ => layout(&data, keep.len(), dim),
        };
        report.layouts.push((name.clone(), panel));
        report.order.push(name.clone());
        report.methods.insert(name, scores);
    }
    report.best = best(&report);
    report.seconds = start.elapsed().as_secs_f64();
    Ok(report)
}

/// Two leading principal components, for the panel of each method.
fn layout(data: &[f64], rows: usize, dim: usize) -> Vec<[f64; 2]> {
    match crate::baselines::pca(data, rows, dim, 2) {
        Ok((s, 2)) => s.chunks(2).map(|c| [c[0], c[1]]).collect(),
        Ok((s, 1)) => s.iter().map(|&v| [v, 0.0]).collect(),
        _ => vec![[0.0, 0.0]; rows],
    }
}

fn best(report: &CellEvalReport) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for m in METRICS {
        let top = report.order.iter().filter_map(|name| metric(&report.methods[name], m).map(|v| (name, v))).fold(
            None::<(&String, f64)>,
            |b, (n, v)| match b {
                Some((_, bv)) if bv >= v => b,
                _ => Some((n, v)),
            },
        );
        if let Some((name, _)) = top {
            out.insert(m.to_string(), name.clone());
        }
    }
    out
}

#[cfg(test)]
mod degenerate_tests;
#[cfg(test)]
mod tests;
