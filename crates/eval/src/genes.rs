//! `corrflow eval genes`: binary gene classification on gene embeddings (`embed --genes`), as
//! Geneformer's dosage-sensitivity task is run. Stratified k-fold cross-validation of a
//! standardised L2 logistic regression and of a cosine k-nearest-neighbour vote; AUROC per fold,
//! reported as mean ± sd. Labelled genes without an embedding are counted as excluded, not
//! imputed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use arrow_array::{Array, FixedSizeListArray, Float32Array, StringArray};
use corrflow_algorithms::auroc::auroc;
use linfa::prelude::*;
use linfa_logistic::LogisticRegression;
use ndarray15::{Array1, Array2};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use corrflow_io::error::{Error, Result};

#[derive(Clone, Debug)]
pub struct GeneEvalRequest {
    pub embeddings: PathBuf,
    pub labels: PathBuf,
    /// Column of gene ids in the labels file (matched to the embeddings' `gene_id`).
    pub id_column: String,
    /// Columns marking positives and negatives (`Yes`, `1` or `true`).
    pub positive: String,
    pub negative: String,
    pub folds: usize,
    pub seed: u64,
    /// L2 penalty of the logistic regression.
    pub alpha: f64,
    pub neighbours: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Score {
    pub mean: f64,
    pub sd: f64,
    pub folds: Vec<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GeneEvalReport {
    pub command: String,
    pub embeddings: String,
    pub labelled: usize,
    pub positives: usize,
    pub negatives: usize,
    /// Labelled genes without an embedding (not expressed in the embedded cells).
    pub excluded: usize,
    pub folds: usize,
    pub logistic_auroc: Score,
    pub knn_auroc: Score,
}

/// Gene id → label (true = positive) from a CSV with a header.
fn read_labels(req: &GeneEvalRequest) -> Result<Vec<(String, bool)>> {
    let columns = [req.negative.clone(), req.positive.clone()];
    Ok(read_gene_classes(&req.labels, &req.id_column, &columns)?.into_iter().map(|(g, c)| (g, c == 1)).collect())
}

/// Gene id → class from a CSV with a header (RFC 4180: quotes, a BOM): the class is the index
/// of the one column of `class_columns` marked `Yes`, `1` or `true`; rows with none are skipped;
/// a row with two, or a gene listed with two different classes, is refused. The one CSV reader
/// of gene labels, `corrflow_io::util::csv`, shared with `finetune --gene-labels`.
pub use corrflow_io::util::csv::read_gene_classes;

/// gene_id → embedding from `embed --genes`' Parquet.
fn read_embeddings(path: &Path) -> Result<(HashMap<String, Vec<f64>>, usize)> {
    let hint = "write it with corrflow embed --genes";
    let (reader, dim) = crate::embeddings_file::open(path, Some("gene_id"), hint)?;
    let mut out = HashMap::new();
    for rb in reader {
        let rb = rb.map_err(|e| Error::parquet_read(path, e))?;
        let bad = || Error::format(path, format!("needs gene_id and embedding columns ({hint})"));
        let ids =
            rb.column_by_name("gene_id").and_then(|c| c.as_any().downcast_ref::<StringArray>()).ok_or_else(bad)?;
        let emb = rb
            .column_by_name("embedding")
            .and_then(|c| c.as_any().downcast_ref::<FixedSizeListArray>())
            .ok_or_else(bad)?;
        let values = emb.values().as_any().downcast_ref::<Float32Array>().ok_or_else(bad)?;
        for i in 0..rb.num_rows() {
            let row = &values.values()[i * dim..(i + 1) * dim];
            if !emb.is_null(i) && row.iter().all(|v| v.is_finite()) {
                let id = ids.value(i);
                if out.insert(id.to_string(), row.iter().map(|&v| f64::from(v)).collect()).is_some() {
                    return Err(Error::invalid(path, format!("gene '{id}' appears twice")));
                }
            }
        }
    }
    Ok((out, dim))
}

pub fn eval_genes(req: &GeneEvalRequest) -> Result<GeneEvalReport> {
    if req.folds < 2 {
        return Err(Error::Usage(format!("--folds must be at least 2 (got {})", req.folds)));
    }
    crate::check_alpha(req.alpha)?;
    let labels = read_labels(req)?;
    let (emb, dim) = read_embeddings(&req.embeddings)?;
    let rows: Vec<(&Vec<f64>, bool)> = labels.iter().filter_map(|(g, y)| Some((emb.get(g)?, *y))).collect();
    let positives = rows.iter().filter(|r| r.1).count();
    let negatives = rows.len() - positives;
    if rows.is_empty() {
        return Err(Error::format(
            &req.embeddings,
            format!(
                "none of the {} labelled genes of {} has a finite embedding here (the ids of its '{}' column are \
                 matched exactly to gene_id)",
                labels.len(),
                req.labels.display(),
                req.id_column
            ),
        ));
    }
    if positives < req.folds || negatives < req.folds {
        return Err(Error::format(
            &req.embeddings,
            format!("{positives} positive and {negatives} negative labelled genes have embeddings; {}-fold needs {} of each", req.folds, req.folds),
        ));
    }
    let fold = stratified_folds(&rows.iter().map(|r| r.1).collect::<Vec<_>>(), req.folds, req.seed);
    let (mut logistic, mut knn) = (Vec::new(), Vec::new());
    for k in 0..req.folds {
        let (train, test): (Vec<usize>, Vec<usize>) = (0..rows.len()).partition(|&i| fold[i] != k);
        let x = |idx: &[usize]| idx.iter().map(|&i| rows[i].0.as_slice()).collect::<Vec<_>>();
        let y = |idx: &[usize]| idx.iter().map(|&i| rows[i].1).collect::<Vec<_>>();
        let (xtr, ytr, xte, yte) = (x(&train), y(&train), x(&test), y(&test));
        logistic.push(auroc(&logistic_scores(&xtr, &ytr, &xte, dim, req.alpha)?, &yte).unwrap_or(0.5));
        knn.push(auroc(&knn_scores(&xtr, &ytr, &xte, req.neighbours), &yte).unwrap_or(0.5));
    }
    Ok(GeneEvalReport {
        command: "eval genes".into(),
        embeddings: req.embeddings.display().to_string(),
        labelled: labels.len(),
        positives,
        negatives,
        excluded: labels.len() - rows.len(),
        folds: req.folds,
        logistic_auroc: score(logistic),
        knn_auroc: score(knn),
    })
}

fn score(folds: Vec<f64>) -> Score {
    let n = folds.len() as f64;
    let mean = folds.iter().sum::<f64>() / n;
    let sd = (folds.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0)).sqrt();
    Score { mean, sd, folds }
}

/// Fold of each item: per class, a seeded shuffle dealt round-robin over the folds.
pub fn stratified_folds(y: &[bool], folds: usize, seed: u64) -> Vec<usize> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut fold = vec![0; y.len()];
    for class in [false, true] {
        let mut idx: Vec<usize> = (0..y.len()).filter(|&i| y[i] == class).collect();
        idx.shuffle(&mut rng);
        for (j, &i) in idx.iter().enumerate() {
            fold[i] = j % folds;
        }
    }
    fold
}

/// P(positive) of `test` from a logistic regression fitted on standardised `train`.
fn logistic_scores(train: &[&[f64]], y: &[bool], test: &[&[f64]], dim: usize, alpha: f64) -> Result<Vec<f64>> {
    let (mean, sd) = moments(train, dim);
    let matrix = |rows: &[&[f64]]| Array2::from_shape_fn((rows.len(), dim), |(r, c)| (rows[r][c] - mean[c]) / sd[c]);
    let ds = Dataset::new(matrix(train), Array1::from_iter(y.iter().map(|&p| usize::from(p))));
    let model = LogisticRegression::default()
        .alpha(alpha)
        .max_iterations(200)
        .fit(&ds)
        .map_err(|e| Error::internal("eval genes", format!("logistic regression: {e}")))?;
    let p = model.predict_probabilities(&matrix(test));
    // The probabilities are of the class linfa encoded as +1, which is not always the larger
    // label (its docs say so, but it depends on the order the classes were seen): ask it.
    let of_positive = model.labels().pos.class == 1;
    Ok(p.iter().map(|&q| if of_positive { q } else { 1.0 - q }).collect())
}

fn moments(rows: &[&[f64]], dim: usize) -> (Vec<f64>, Vec<f64>) {
    let n = rows.len().max(1) as f64;
    let mean: Vec<f64> = (0..dim).map(|c| rows.iter().map(|r| r[c]).sum::<f64>() / n).collect();
    let sd =
        (0..dim).map(|c| (rows.iter().map(|r| (r[c] - mean[c]).powi(2)).sum::<f64>() / n).sqrt().max(1e-12)).collect();
    (mean, sd)
}

/// Share of positives among the `k` training genes most cosine-similar to each test gene.
fn knn_scores(train: &[&[f64]], y: &[bool], test: &[&[f64]], k: usize) -> Vec<f64> {
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
    let k = k.clamp(1, train.len());
    test.iter()
        .map(|t| {
            let nt = norm(t);
            let mut sims: Vec<(f64, bool)> = train
                .iter()
                .zip(y)
                .map(|(r, &l)| (r.iter().zip(*t).map(|(a, b)| a * b).sum::<f64>() / (norm(r) * nt), l))
                .collect();
            sims.sort_by(|a, b| b.0.total_cmp(&a.0));
            sims[..k].iter().filter(|s| s.1).count() as f64 / k as f64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_are_stratified_and_cover_every_item_once() {
        let y: Vec<bool> = (0..50).map(|i| i % 5 == 0).collect();
        let f = stratified_folds(&y, 5, 3);
        for k in 0..5 {
            let pos = (0..50).filter(|&i| f[i] == k && y[i]).count();
            let neg = (0..50).filter(|&i| f[i] == k && !y[i]).count();
            assert_eq!((pos, neg), (2, 8));
        }
        assert_eq!(f, stratified_folds(&y, 5, 3), "seeded");
    }

    #[test]
    fn separable_embeddings_score_near_one_with_both_classifiers() {
        let y: Vec<bool> = (0..80).map(|i| i % 2 == 0).collect();
        let sep: Vec<Vec<f64>> = (0..80)
            .map(|i| vec![if y[i] { 1.0 } else { -1.0 } + (i as f64 * 0.37).sin() * 0.3, (i as f64).cos()])
            .collect();
        let refs: Vec<&[f64]> = sep.iter().map(Vec::as_slice).collect();
        let (tr, te): (Vec<usize>, Vec<usize>) = (0..80).partition(|i| i % 5 != 0);
        let pick = |idx: &[usize]| idx.iter().map(|&i| refs[i]).collect::<Vec<_>>();
        let yl = |idx: &[usize]| idx.iter().map(|&i| y[i]).collect::<Vec<_>>();
        let s = logistic_scores(&pick(&tr), &yl(&tr), &pick(&te), 2, 1.0).unwrap();
        let a = auroc(&s, &yl(&te)).unwrap();
        assert!(a > 0.95, "logistic AUROC {a}");
        let k = knn_scores(&pick(&tr), &yl(&tr), &pick(&te), 5);
        assert!(auroc(&k, &yl(&te)).unwrap() > 0.95);
    }
}
