//! Scoring a classifier on one part of the split: predictions, loss, accuracy, macro-F1,
//! per-class F1 and one-vs-rest AUROC, and for genes the same per gene (probabilities averaged
//! over the gene's occurrences).

use std::collections::BTreeMap;

use burn::tensor::activation::softmax;
use corrflow_algorithms::auroc::auroc;
use corrflow_algorithms::classes::{argmax, f1_scores, macro_mean};
use corrflow_io::error::Result;
use corrflow_mask::plan::DataPlan;
use corrflow_model::burn_encoder::burn_error;
use corrflow_model::{CellEncoder, FusedOps};
use serde::{Deserialize, Serialize};

use super::batches::{for_each_eval_batch, BatchSpec};

/// One class's scores.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassMetrics {
    pub class: String,
    pub support: usize,
    /// None where the part has no item of the class.
    pub f1: Option<f64>,
    pub auroc: Option<f64>,
}

/// Scores over items (cells, or gene occurrences).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    pub items: usize,
    pub loss: f64,
    pub accuracy: f64,
    pub macro_f1: f64,
    pub macro_auroc: Option<f64>,
    pub classes: Vec<ClassMetrics>,
    /// Set when the classifier predicts about one class only, or scores near always predicting
    /// the largest class (`finetune` prints it as a warning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collapse: Option<String>,
}

/// A part's scores; for gene classification also per gene.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SplitMetrics {
    #[serde(flatten)]
    pub items: Scores,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub genes: Option<Scores>,
}

/// Each target's item (cell key or gene token), true class and class probabilities.
#[derive(Default)]
pub(crate) struct Predictions {
    pub items: Vec<u64>,
    /// The cell id of each target's cell.
    pub cells: Vec<String>,
    pub truth: Vec<usize>,
    /// Row-major `[targets, classes]`.
    pub probabilities: Vec<f32>,
}

/// The model's predictions on a part.
pub(crate) fn predict<B: FusedOps>(
    model: &CellEncoder<B>,
    plan: &DataPlan,
    spec: &BatchSpec<'_>,
    gene_eval_cells: usize,
    device: &B::Device,
) -> Result<Predictions> {
    let mut out = Predictions::default();
    for_each_eval_batch(plan, spec, gene_eval_cells, |b, names| {
        let t = b.tensors::<B>(device);
        let logits = if spec.supervision.genes {
            model.token_logits(t.input_ids, t.pad, t.index)
        } else {
            model.cell_logits(t.input_ids, t.values, t.pad, t.weights).select(0, t.index)
        };
        let probs = softmax(logits, 1).into_data().to_vec::<f32>().map_err(|e| burn_error("class probabilities", e))?;
        out.probabilities.extend(probs);
        out.truth.extend(b.targets.iter().map(|&c| c as usize));
        // A target's row: the index itself for cells, the flattened position's row for genes.
        let row = |i: i64| if spec.supervision.genes { i as usize / b.len.max(1) } else { i as usize };
        out.cells.extend(b.index.iter().map(|&i| names[row(i)].clone()));
        out.items.extend(b.items);
        Ok(())
    })?;
    Ok(out)
}

impl Predictions {
    pub fn predicted(&self, k: usize) -> Vec<usize> {
        self.probabilities.chunks(k).map(argmax).collect()
    }

    /// Scores over the items, and for genes over genes.
    pub fn metrics(&self, classes: &[String], genes: bool) -> SplitMetrics {
        let k = classes.len();
        let items = scores(&self.truth, &self.probabilities, classes);
        let genes = genes.then(|| {
            let mut per_gene: BTreeMap<u64, (usize, Vec<f64>, usize)> = BTreeMap::new();
            for (i, (&g, &t)) in self.items.iter().zip(&self.truth).enumerate() {
                let e = per_gene.entry(g).or_insert_with(|| (t, vec![0.0; k], 0));
                e.1.iter_mut().zip(&self.probabilities[i * k..(i + 1) * k]).for_each(|(s, &p)| *s += f64::from(p));
                e.2 += 1;
            }
            let truth: Vec<usize> = per_gene.values().map(|e| e.0).collect();
            let probs: Vec<f32> =
                per_gene.values().flat_map(|e| e.1.iter().map(move |&s| (s / e.2 as f64) as f32)).collect();
            scores(&truth, &probs, classes)
        });
        SplitMetrics { items, genes }
    }
}

/// Loss (mean −log p of the true class), accuracy, F1 and AUROC of probabilities `[n, k]`.
fn scores(truth: &[usize], probs: &[f32], classes: &[String]) -> Scores {
    let k = classes.len();
    let n = truth.len();
    let pred: Vec<usize> = probs.chunks(k).map(argmax).collect();
    let (f1, support) = f1_scores(truth, &pred, k);
    let loss = truth.iter().enumerate().map(|(i, &t)| -f64::from(probs[i * k + t].max(1e-30)).ln()).sum::<f64>()
        / n.max(1) as f64;
    let aurocs: Vec<Option<f64>> = (0..k)
        .map(|c| {
            let s: Vec<f64> = (0..n).map(|i| f64::from(probs[i * k + c])).collect();
            let positive: Vec<bool> = truth.iter().map(|&t| t == c).collect();
            auroc(&s, &positive)
        })
        .collect();
    let defined: Vec<f64> = aurocs.iter().flatten().copied().collect();
    let macro_f1 = macro_mean(&f1);
    Scores {
        collapse: super::collapse::collapse_warning(truth, &pred, k, classes, macro_f1),
        items: n,
        loss,
        accuracy: truth.iter().zip(&pred).filter(|(a, b)| a == b).count() as f64 / n.max(1) as f64,
        macro_f1,
        macro_auroc: (!defined.is_empty()).then(|| defined.iter().sum::<f64>() / defined.len() as f64),
        classes: (0..k)
            .map(|c| ClassMetrics {
                class: classes[c].clone(),
                support: support[c],
                f1: (!f1[c].is_nan()).then_some(f1[c]),
                auroc: aurocs[c],
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gene_scores_average_each_genes_occurrences() {
        let classes = vec!["a".to_string(), "b".to_string()];
        // Gene 7 (class 0) is right twice and wrong once: right on average. Gene 9 (class 1) right.
        let p = Predictions {
            items: vec![7, 7, 7, 9],
            cells: vec!["c1".into(), "c2".into(), "c3".into(), "c1".into()],
            truth: vec![0, 0, 0, 1],
            probabilities: vec![0.9, 0.1, 0.8, 0.2, 0.4, 0.6, 0.3, 0.7],
        };
        let m = p.metrics(&classes, true);
        assert_eq!(m.items.items, 4);
        assert!((m.items.accuracy - 0.75).abs() < 1e-12);
        let g = m.genes.unwrap();
        assert_eq!(g.items, 2);
        assert!((g.accuracy - 1.0).abs() < 1e-12 && (g.macro_f1 - 1.0).abs() < 1e-12);
        let loss = -(0.9f64.ln() + 0.8f64.ln() + 0.4f64.ln() + 0.7f64.ln()) / 4.0;
        assert!((m.items.loss - loss).abs() < 1e-6);
        assert_eq!(m.items.classes[0].support, 3);
    }
}
