//! `corrflow eval probe`: probes of frozen cell embeddings under seeded stratified k-fold
//! cross-validation (or one seeded split): a multinomial logistic regression and a cosine k-NN
//! vote (`classify`); accuracy, macro-F1, per-class F1 and one-vs-rest AUROC as mean ± sd over the
//! folds, and the macro-F1 of the rarest classes.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch};
use arrow_schema::DataType;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use corrflow_io::error::{Error, Result};

use super::classify::{Classifiers, SplitScores};
use crate::embeddings_file;

#[derive(Clone, Debug)]
pub struct ProbeRequest {
    pub embeddings: PathBuf,
    pub label: String,
    pub test_fraction: f64,
    /// Share of the classes, rarest first, whose macro-F1 is reported separately.
    pub rare_fraction: f64,
    /// L2 penalty of the logistic regression.
    pub alpha: f64,
    pub max_iterations: u64,
    pub seed: u64,
    /// Classes left out (e.g. CBMC's "Mouse" and "Unknown").
    pub exclude: Vec<String>,
    /// Stratified folds; 1 = one seeded split holding out `test_fraction` of each class.
    pub folds: usize,
    /// Neighbours of the k-NN vote.
    pub neighbours: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClassScore {
    pub class: String,
    pub cells: usize,
    /// Cells of the class scored over all folds.
    pub test_cells: usize,
    /// Mean over the folds that test the class (0 when none does), and its sd.
    pub f1: f64,
    #[serde(default)]
    pub f1_sd: f64,
    /// One-vs-rest AUROC of the logistic regression's probability, mean over folds.
    #[serde(default)]
    pub auroc: Option<f64>,
}

/// A class and its cells: one left out of the probes (see [`probe_classes`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassCount {
    pub class: String,
    pub cells: usize,
}

/// The fewest cells a class needs to be probed with `folds` folds: one in every fold's test part
/// (so each fold also trains on it), and at least one to train and one to test with one split.
pub fn min_class_cells(folds: usize) -> usize {
    folds.max(2)
}

/// Splits `(class, cells)` into the classes the probes score and those left out because they
/// cannot be split across the folds ([`min_class_cells`]). scikit-learn's `StratifiedKFold`
/// warns for such classes and then trains folds without them, or on nothing at all.
pub fn probe_classes(counts: &[(String, usize)], folds: usize) -> (Vec<String>, Vec<ClassCount>) {
    let min = min_class_cells(folds);
    let (kept, left): (Vec<_>, Vec<_>) = counts.iter().partition(|(_, n)| *n >= min);
    (
        kept.into_iter().map(|(c, _)| c.clone()).collect(),
        left.into_iter().map(|(c, n)| ClassCount { class: c.clone(), cells: *n }).collect(),
    )
}

/// `A (1 cell), B (2 cells)`.
pub fn describe_classes(classes: &[ClassCount]) -> String {
    let each = |c: &ClassCount| format!("{} ({} cell{})", c.class, c.cells, if c.cells == 1 { "" } else { "s" });
    classes.iter().map(each).collect::<Vec<_>>().join(", ")
}

/// The L2 penalties the logistic probes accept. A fit that fails at the requested penalty is
/// retried with it raised tenfold at a time (`classify::penalty_ladder`): on pbmc68k_reduced's
/// X_pca every penalty below 1 fails and 1 fits. From 1e-4 that takes at most seven raises;
/// 0 cannot be raised at all, so `--alpha 0` failed every retry (after 11 s). Large penalties
/// zero every weight (the loss sums over cells: from 1e5 the fit on 700 pbmc68k cells predicts
/// the majority class), and near 1e308 the raised penalty overflows f64.
pub const ALPHA_RANGE: (f64, f64) = (1e-4, 1e6);

/// `--alpha` within [`ALPHA_RANGE`].
pub fn check_alpha(alpha: f64) -> Result<()> {
    let (lo, hi) = ALPHA_RANGE;
    if alpha.is_finite() && (lo..=hi).contains(&alpha) {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "--alpha must be in [{lo:e}, {hi:e}] (got {alpha}): the L2 penalty of the logistic probe; \
         smaller ones cannot be raised far enough when a fit fails, larger ones zero every weight"
    )))
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProbeReport {
    pub command: String,
    pub embeddings: String,
    pub label: String,
    pub cells: usize,
    pub train_cells: usize,
    pub test_cells: usize,
    pub classes: usize,
    pub accuracy: f64,
    pub macro_f1: f64,
    pub rare_classes: Vec<String>,
    pub rare_macro_f1: f64,
    pub per_class: Vec<ClassScore>,
    #[serde(default)]
    pub folds: usize,
    #[serde(default)]
    pub accuracy_sd: f64,
    #[serde(default)]
    pub macro_f1_sd: f64,
    #[serde(default)]
    pub macro_auroc: f64,
    #[serde(default)]
    pub macro_auroc_sd: f64,
    #[serde(default)]
    pub knn_accuracy: f64,
    #[serde(default)]
    pub knn_accuracy_sd: f64,
    #[serde(default)]
    pub knn_macro_f1: f64,
    #[serde(default)]
    pub knn_macro_f1_sd: f64,
    /// The largest L2 penalty a fold's logistic regression needed (above `--alpha` only when the
    /// fit failed at it; see `classify`).
    #[serde(default)]
    pub alpha_used: f64,
    /// Classes left out of the probes: fewer cells than the folds need ([`min_class_cells`]).
    #[serde(default)]
    pub skipped_classes: Vec<ClassCount>,
}

/// Rows with a label and a finite embedding: (embeddings row-major, labels, dim).
fn read(path: &Path, label: &str) -> Result<(Vec<f64>, Vec<String>, usize)> {
    let hint = "write it with corrflow embed --obs-columns";
    let (reader, dim) = embeddings_file::open(path, None, hint)?;
    let (mut x, mut y) = (Vec::new(), Vec::new());
    let (mut rows, mut unlabelled) = (0usize, 0usize);
    for rb in reader {
        let rb: RecordBatch = rb.map_err(|e| Error::parquet_read(path, e))?;
        let emb = rb
            .column_by_name("embedding")
            .and_then(|c| c.as_any().downcast_ref::<FixedSizeListArray>())
            .ok_or_else(|| Error::format(path, format!("no fixed-size-list 'embedding' column ({hint})")))?;
        let col = rb.column_by_name(label).ok_or_else(|| {
            let names: Vec<String> = rb.schema().fields().iter().map(|f| f.name().clone()).collect();
            Error::format(
                path,
                format!(
                    "no label column '{label}' (columns: {}; pass it to embed with --obs-columns)",
                    names.join(", ")
                ),
            )
        })?;
        let labels = arrow_cast::cast(col, &DataType::Utf8).map_err(|_| {
            Error::format(
                path,
                format!("label column '{label}' is {}, which cannot be read as labels", col.data_type()),
            )
        })?;
        let labels = labels
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .ok_or_else(|| Error::format(path, format!("label column '{label}' cannot be read as text")))?;
        let values = emb
            .values()
            .as_any()
            .downcast_ref::<Float32Array>()
            .ok_or_else(|| Error::format(path, "embedding values are not f32"))?;
        rows += rb.num_rows();
        for i in 0..rb.num_rows() {
            let row = &values.values()[i * dim..(i + 1) * dim];
            if labels.is_null(i) {
                unlabelled += 1;
                continue;
            }
            if emb.is_null(i) || row.iter().any(|v| !v.is_finite()) {
                continue;
            }
            x.extend(row.iter().map(|&v| f64::from(v)));
            y.push(labels.value(i).to_string());
        }
    }
    if y.is_empty() {
        return Err(Error::format(
            path,
            format!(
                "no row has both a '{label}' value and a finite embedding ({rows} rows: {unlabelled} without a label, \
                 {} with an embedding that is null or holds NaN or inf)",
                rows - unlabelled
            ),
        ));
    }
    Ok((x, y, dim))
}

/// The most optimiser iterations a fit may take (200 by default; more only costs time).
pub const MAX_ITERATIONS: u64 = 100_000;

/// `--alpha` and `--max-iterations` within their bounds.
fn check_request(req: &ProbeRequest) -> Result<()> {
    check_alpha(req.alpha)?;
    if !(1..=MAX_ITERATIONS).contains(&req.max_iterations) {
        return Err(Error::Usage(format!(
            "--max-iterations must be in 1..={MAX_ITERATIONS} (got {}): with 0 no weight is fitted",
            req.max_iterations
        )));
    }
    Ok(())
}

pub fn probe(req: &ProbeRequest) -> Result<ProbeReport> {
    check_request(req)?;
    let (x, labels, dim) = read(&req.embeddings, &req.label)?;
    probe_matrix(req, Cow::Owned(x), labels, dim)
}

/// The probes of embeddings already in memory (`x`: one row of `dim` per label; borrowed, it is
/// copied only when some labels are left out); `req.embeddings` names them in messages and the
/// report.
pub fn probe_matrix(req: &ProbeRequest, x: Cow<'_, [f64]>, labels: Vec<String>, dim: usize) -> Result<ProbeReport> {
    let p = &req.embeddings;
    check_request(req)?;
    if dim == 0 {
        return Err(Error::format(p, "the embeddings are 0 wide (no values per cell)"));
    }
    let (x, labels) = select(x, labels, dim, |l| !req.exclude.iter().any(|e| e == l));
    let (classes, skipped) = scored_classes(req, &labels)?;
    let (x, labels) = if skipped.is_empty() {
        (x, labels)
    } else {
        select(x, labels, dim, |l| classes.binary_search_by(|c| c.as_str().cmp(l)).is_ok())
    };
    let n = labels.len();
    let class_of: BTreeMap<&str, usize> = classes.iter().enumerate().map(|(i, c)| (c.as_str(), i)).collect();
    let y: Vec<usize> = labels.iter().map(|l| class_of[l.as_str()]).collect();
    let k = classes.len();
    let counts: Vec<usize> = (0..k).map(|c| y.iter().filter(|&&t| t == c).count()).collect();
    let test_fold = assign_folds(&y, k, req)?;
    let fit = Classifiers {
        x: &x,
        y: &y,
        dim,
        classes: k,
        alpha: req.alpha,
        max_iterations: req.max_iterations,
        neighbours: req.neighbours,
    };
    // The folds are independent fits: run on rayon's threads, collected in fold order, so the
    // report does not depend on the thread count.
    let folds = req.folds.max(1);
    let splits: Vec<(Vec<usize>, Vec<usize>)> =
        (0..folds).map(|f| (0..n).partition(|&i| test_fold[i] == Some(f))).collect();
    let train_cells = splits.last().map_or(0, |(_, train)| train.len());
    let scores = splits.par_iter().map(|(test, train)| fit.score(train, test)).collect::<Result<Vec<_>>>()?;
    let mut r = report(req, p, &classes, &counts, &scores, n, train_cells);
    r.skipped_classes = skipped;
    Ok(r)
}

/// The rows whose label passes `keep`.
fn select<'a>(
    x: Cow<'a, [f64]>,
    labels: Vec<String>,
    dim: usize,
    keep: impl Fn(&str) -> bool,
) -> (Cow<'a, [f64]>, Vec<String>) {
    if labels.iter().all(|l| keep(l)) {
        return (x, labels);
    }
    let rows: Vec<usize> = (0..labels.len()).filter(|&i| keep(&labels[i])).collect();
    let x: Vec<f64> = rows.iter().flat_map(|&i| x[i * dim..(i + 1) * dim].iter().copied()).collect();
    (Cow::Owned(x), rows.into_iter().map(|i| labels[i].clone()).collect())
}

/// The classes the probes score (sorted) and those left out ([`probe_classes`]); an error when
/// fewer than two remain.
fn scored_classes(req: &ProbeRequest, labels: &[String]) -> Result<(Vec<String>, Vec<ClassCount>)> {
    let mut sizes: BTreeMap<&str, usize> = BTreeMap::new();
    labels.iter().for_each(|l| *sizes.entry(l.as_str()).or_default() += 1);
    let sizes: Vec<(String, usize)> = sizes.into_iter().map(|(c, n)| (c.to_string(), n)).collect();
    let (classes, skipped) = probe_classes(&sizes, req.folds);
    if classes.len() >= 2 {
        return Ok((classes, skipped));
    }
    let min = min_class_cells(req.folds);
    let left = if skipped.is_empty() {
        String::new()
    } else {
        format!(" ({} left out with fewer than {min} cells: {})", skipped.len(), describe_classes(&skipped))
    };
    Err(Error::format(
        &req.embeddings,
        format!(
            "label '{}' has {} class(es) the probes can score among {} labelled cells{left}; a probe needs \
             ≥ 2 classes of ≥ {min} cells each (fewer --folds, or more cells)",
            req.label,
            classes.len(),
            labels.len(),
        ),
    ))
}

/// The fold each cell is tested in (`None`: only trained on). k-fold: per class a seeded shuffle
/// dealt round-robin; one split: per class a shuffled ⌈f·n_c⌉ (none for singleton classes).
fn assign_folds(y: &[usize], k: usize, req: &ProbeRequest) -> Result<Vec<Option<usize>>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(req.seed);
    let mut fold = vec![None; y.len()];
    for c in 0..k {
        let mut rows: Vec<usize> = (0..y.len()).filter(|&i| y[i] == c).collect();
        rows.shuffle(&mut rng);
        if req.folds <= 1 {
            let take = if rows.len() < 2 {
                0
            } else {
                ((rows.len() as f64 * req.test_fraction).ceil() as usize).clamp(1, rows.len() - 1)
            };
            rows.iter().take(take).for_each(|&i| fold[i] = Some(0));
        } else {
            rows.iter().enumerate().for_each(|(j, &i)| fold[i] = Some(j % req.folds));
        }
    }
    if req.folds > 1 && y.len() < 2 * req.folds {
        return Err(Error::format(&req.embeddings, format!("{} cells are too few for {} folds", y.len(), req.folds)));
    }
    Ok(fold)
}

fn mean_sd(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    let v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let sd =
        if v.len() > 1 { (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() - 1) as f64).sqrt() } else { 0.0 };
    (m, sd)
}

/// Folds' scores into the report: each metric as mean ± sd over the folds.
fn report(
    req: &ProbeRequest,
    p: &Path,
    classes: &[String],
    counts: &[usize],
    scores: &[SplitScores],
    n: usize,
    train_cells: usize,
) -> ProbeReport {
    let k = classes.len();
    let macro_of = |v: &[f64]| mean_sd(v.iter().copied()).0;
    let (accuracy, accuracy_sd) = mean_sd(scores.iter().map(|s| s.accuracy));
    let (macro_f1, macro_f1_sd) = mean_sd(scores.iter().map(|s| macro_of(&s.f1)));
    let (macro_auroc, macro_auroc_sd) = mean_sd(scores.iter().map(|s| macro_of(&s.auroc)));
    let (knn_accuracy, knn_accuracy_sd) = mean_sd(scores.iter().map(|s| s.knn_accuracy));
    let (knn_macro_f1, knn_macro_f1_sd) = mean_sd(scores.iter().map(|s| macro_of(&s.knn_f1)));
    let per_class: Vec<ClassScore> = (0..k)
        .map(|c| {
            let (f1, f1_sd) = mean_sd(scores.iter().map(|s| s.f1[c]));
            let tested: Vec<f64> = scores.iter().map(|s| s.auroc[c]).filter(|a| !a.is_nan()).collect();
            ClassScore {
                class: classes[c].clone(),
                cells: counts[c],
                test_cells: scores.iter().map(|s| s.support[c]).sum(),
                f1,
                f1_sd,
                auroc: (!tested.is_empty()).then(|| mean_sd(tested).0),
            }
        })
        .collect();
    let mut tested: Vec<usize> = (0..k).filter(|&c| per_class[c].test_cells > 0).collect();
    tested.sort_by_key(|&c| (counts[c], c));
    let n_rare = ((tested.len() as f64 * req.rare_fraction).ceil() as usize).clamp(1, tested.len().max(1));
    let rare: Vec<usize> = tested.into_iter().take(n_rare).collect();
    let rare_macro_f1 = rare.iter().map(|&c| per_class[c].f1).sum::<f64>() / rare.len().max(1) as f64;
    ProbeReport {
        command: "eval probe".into(),
        embeddings: p.display().to_string(),
        label: req.label.clone(),
        cells: n,
        train_cells,
        test_cells: scores.iter().map(|s| s.support.iter().sum::<usize>()).sum(),
        classes: k,
        accuracy,
        macro_f1,
        rare_classes: rare.iter().map(|&c| classes[c].clone()).collect(),
        rare_macro_f1,
        per_class,
        folds: scores.len(),
        accuracy_sd,
        macro_f1_sd,
        macro_auroc,
        macro_auroc_sd,
        knn_accuracy,
        knn_accuracy_sd,
        knn_macro_f1,
        knn_macro_f1_sd,
        alpha_used: scores.iter().map(|s| s.alpha).fold(req.alpha, f64::max),
        skipped_classes: Vec::new(),
    }
}
