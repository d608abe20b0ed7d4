//! `corrflow eval probe`: a logistic-regression probe on frozen cell embeddings, with a seeded
//! stratified split; accuracy, macro-F1, per-class F1 and the macro-F1 of the rarest classes.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch};
use arrow_schema::DataType;
use linfa::prelude::*;
use linfa_logistic::MultiLogisticRegression;
use ndarray15::{Array1, Array2};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use corrflow_io::error::{Error, IoContext, Result};

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
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClassScore {
    pub class: String,
    pub cells: usize,
    pub test_cells: usize,
    pub f1: f64,
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
}

/// Rows with a label and a finite embedding: (embeddings row-major, labels, dim).
fn read(path: &Path, label: &str) -> Result<(Vec<f64>, Vec<String>, usize)> {
    let file = File::open(path).at(path)?;
    let reader =
        ParquetRecordBatchReaderBuilder::try_new(file).and_then(|b| b.build()).map_err(|e| Error::parquet(path, e))?;
    let (mut x, mut y, mut dim) = (Vec::new(), Vec::new(), 0usize);
    for rb in reader {
        let rb: RecordBatch = rb.map_err(|e| Error::parquet(path, e))?;
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
    let p = &req.embeddings;
    let (x, labels, dim) = read(p, &req.label)?;
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
    // Seeded stratified split: per class, a shuffled ⌈f·n_c⌉ to test (none for singleton classes).
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(req.seed);
    let mut test = vec![false; n];
    let mut counts = vec![0usize; classes.len()];
    for (c, count) in counts.iter_mut().enumerate() {
        let mut rows: Vec<usize> = (0..n).filter(|&i| y[i] == c).collect();
        *count = rows.len();
        rows.shuffle(&mut rng);
        let k = if rows.len() < 2 {
            0
        } else {
            ((rows.len() as f64 * req.test_fraction).ceil() as usize).clamp(1, rows.len() - 1)
        };
        rows.iter().take(k).for_each(|&i| test[i] = true);
    }
    let split = |want: bool| -> (Array2<f64>, Array1<usize>) {
        let rows: Vec<usize> = (0..n).filter(|&i| test[i] == want).collect();
        let mut m = Array2::<f64>::zeros((rows.len(), dim));
        for (r, &i) in rows.iter().enumerate() {
            m.row_mut(r).assign(&ndarray15::ArrayView1::from(&x[i * dim..(i + 1) * dim]));
        }
        (m, rows.iter().map(|&i| y[i]).collect())
    };
    let (mut xtr, ytr) = split(false);
    let (mut xte, yte) = split(true);
    // Standardise with the training statistics.
    let mean = xtr.mean_axis(ndarray15::Axis(0)).expect("non-empty training set");
    let sd = xtr.std_axis(ndarray15::Axis(0), 0.0).mapv(|s| if s > 1e-12 { s } else { 1.0 });
    xtr = (xtr - &mean) / &sd;
    xte = (xte - &mean) / &sd;
    let model = MultiLogisticRegression::default()
        .alpha(req.alpha)
        .max_iterations(req.max_iterations)
        .fit(&Dataset::new(xtr, ytr.clone()))
        .map_err(|e| Error::format(p, format!("logistic regression failed: {e}")))?;
    let pred = model.predict(&xte);
    let k = classes.len();
    let (mut tp, mut fp, mut fne, mut support) = (vec![0usize; k], vec![0usize; k], vec![0usize; k], vec![0usize; k]);
    for (&t, &pr) in yte.iter().zip(pred.iter()) {
        support[t] += 1;
        if t == pr {
            tp[t] += 1;
        } else {
            fp[pr] += 1;
            fne[t] += 1;
        }
    }
    let f1 = |c: usize| {
        let d = 2 * tp[c] + fp[c] + fne[c];
        if d == 0 {
            0.0
        } else {
            2.0 * tp[c] as f64 / d as f64
        }
    };
    // Macro-F1 over the classes present in the test split (as scikit-learn with their labels).
    let tested: Vec<usize> = (0..k).filter(|&c| support[c] > 0).collect();
    let macro_f1 = tested.iter().map(|&c| f1(c)).sum::<f64>() / tested.len().max(1) as f64;
    let mut by_size = tested.clone();
    by_size.sort_by_key(|&c| (counts[c], c));
    let n_rare = ((tested.len() as f64 * req.rare_fraction).ceil() as usize).clamp(1, tested.len().max(1));
    let rare: Vec<usize> = by_size.into_iter().take(n_rare).collect();
    let rare_macro_f1 = rare.iter().map(|&c| f1(c)).sum::<f64>() / rare.len().max(1) as f64;
    let correct = yte.iter().zip(pred.iter()).filter(|(a, b)| a == b).count();
    Ok(ProbeReport {
        command: "eval probe".into(),
        embeddings: p.display().to_string(),
        label: req.label.clone(),
        cells: n,
        train_cells: ytr.len(),
        test_cells: yte.len(),
        classes: k,
        accuracy: correct as f64 / yte.len().max(1) as f64,
        macro_f1,
        rare_classes: rare.iter().map(|&c| classes[c].clone()).collect(),
        rare_macro_f1,
        per_class: (0..k)
            .map(|c| ClassScore { class: classes[c].clone(), cells: counts[c], test_cells: support[c], f1: f1(c) })
            .collect(),
    })
}
