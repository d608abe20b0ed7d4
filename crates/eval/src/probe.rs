//! `corrflow eval probe`: probes of frozen cell embeddings under seeded stratified k-fold
//! cross-validation (or one seeded split): a multinomial logistic regression and a cosine k-NN
//! vote (`classify`); accuracy, macro-F1, per-class F1 and one-vs-rest AUROC as mean ± sd over the
//! folds, and the macro-F1 of the rarest classes.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use corrflow_io::error::{Error, IoContext, Result};

use super::classify::{Classifiers, SplitScores};

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
}

/// Rows with a label and a finite embedding: (embeddings row-major, labels, dim).
fn read(path: &Path, label: &str) -> Result<(Vec<f64>, Vec<String>, usize)> {
    let file = File::open(path).at(path)?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.build())
        .map_err(|e| Error::parquet_read(path, e))?;
    let (mut x, mut y, mut dim) = (Vec::new(), Vec::new(), 0usize);
    for rb in reader {
        let rb: RecordBatch = rb.map_err(|e| Error::parquet_read(path, e))?;
        let emb =
            rb.column_by_name("embedding").and_then(|c| c.as_any().downcast_ref::<FixedSizeListArray>()).ok_or_else(
                || Error::format(path, "no fixed-size-list 'embedding' column (write it with corrflow embed)"),
            )?;
        dim = emb.value_length() as usize;
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
        let labels = arrow_cast::cast(col, &DataType::Utf8).map_err(|e| Error::parquet(path, e))?;
        let labels = labels.as_any().downcast_ref::<arrow_array::StringArray>().expect("cast to Utf8");
        let values = emb
            .values()
            .as_any()
            .downcast_ref::<Float32Array>()
            .ok_or_else(|| Error::format(path, "embedding values are not f32"))?;
        for i in 0..rb.num_rows() {
            let row = &values.values()[i * dim..(i + 1) * dim];
            if labels.is_null(i) || emb.is_null(i) || row.iter().any(|v| !v.is_finite()) {
                continue;
            }
            x.extend(row.iter().map(|&v| f64::from(v)));
            y.push(labels.value(i).to_string());
        }
    }
    Ok((x, y, dim))
}

pub fn probe(req: &ProbeRequest) -> Result<ProbeReport> {
    let (x, labels, dim) = read(&req.embeddings, &req.label)?;
    probe_matrix(req, x, labels, dim)
}

/// The probes of embeddings already in memory (`x`: one row of `dim` per label); `req.embeddings`
/// names them in messages and the report.
pub fn probe_matrix(req: &ProbeRequest, x: Vec<f64>, labels: Vec<String>, dim: usize) -> Result<ProbeReport> {
    let p = &req.embeddings;
    let (x, labels) = if req.exclude.is_empty() {
        (x, labels)
    } else {
        let keep: Vec<usize> = (0..labels.len()).filter(|&i| !req.exclude.contains(&labels[i])).collect();
        let x = keep.iter().flat_map(|&i| x[i * dim..(i + 1) * dim].iter().copied()).collect::<Vec<_>>();
        (x, keep.iter().map(|&i| labels[i].clone()).collect::<Vec<_>>())
    };
    let n = labels.len();
    let classes: Vec<String> = labels.iter().cloned().collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    if classes.len() < 2 {
        return Err(Error::format(
            p,
            format!("label '{}' has {} class(es) among labelled cells; a probe needs ≥ 2", req.label, classes.len()),
        ));
    }
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
    Ok(report(req, p, &classes, &counts, &scores, n, train_cells))
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
    }
}
