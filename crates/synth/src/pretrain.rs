//! One run of the modularity sweep: MLM pre-training of the small encoder on the training
//! samples with one masking strategy, frozen [CLS] embeddings of train and test samples, and a
//! logistic-regression probe of the active module → test accuracy.
//!
//! The model, the MLM loss and the batch tensors are the trainer's ([`corrflow_train`]); the
//! optimiser is Adam with a constant learning rate (the paper's B.2), on the CPU backend.

use std::sync::Mutex;

use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use corrflow_algorithms::mask::cell_rng;
use linfa::prelude::*;
use linfa_logistic::MultiLogisticRegression;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use super::modularity::{cls_token, correlation_mask, masked_input, random_mask, replacement, ModularityData};
use super::{rng, ModularityParams};
use corrflow_algorithms::batches::TrainingBatch;
use corrflow_io::error::{Error, Result};
use corrflow_model::objective::{batch_tensors, Mlm, Objective, Targets};
use corrflow_model::{CellEncoder, CpuBackend, InitModel};

type Train = burn::backend::Autodiff<CpuBackend>;

/// The ndarray backend draws initial weights from one process-wide seeded RNG: seeding and
/// initialising under this lock makes a run's weights independent of runs in other threads.
static INIT: Mutex<()> = Mutex::new(());

/// Reads every parameter once, which runs burn's deferred initialisers.
struct Materialize;

impl<B: Backend> ModuleVisitor<B> for Materialize {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let _ = param.val();
    }
}

/// Which genes are masked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// 25% of the gene positions uniformly.
    Random,
    /// Seeds and their ground-truth module partners ([`correlation_mask`]).
    Correlation,
}

impl Strategy {
    pub const BOTH: [Strategy; 2] = [Strategy::Random, Strategy::Correlation];

    pub fn name(self) -> &'static str {
        match self {
            Self::Random => "random",
            Self::Correlation => "correlation",
        }
    }

    /// Masked gene positions (ascending, exactly `p.mask_budget()` of them) drawn from `rng`.
    pub fn mask(self, p: &ModularityParams, rng: &mut impl rand::Rng) -> Vec<u32> {
        match self {
            Self::Random => random_mask(p.genes, p.mask_budget(), rng),
            Self::Correlation => {
                correlation_mask(p.genes, p.modules, p.mask_budget(), p.max_partners, p.seed_keep, rng)
            }
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunOutcome {
    /// Probe accuracy on the test samples.
    pub accuracy: f64,
    /// Probe accuracy on the training samples it was fitted on.
    pub train_accuracy: f64,
    /// Mean MLM loss of the first and the last epoch.
    pub first_loss: f64,
    pub last_loss: f64,
    pub seconds: f64,
}

/// Pre-trains on `data`'s first `train_samples` samples with `strategy`, then probes. Model
/// weights, batch order and masks are seeded by `seed` (masks by `(seed, epoch, sample)`).
pub fn run(p: &ModularityParams, data: &ModularityData, strategy: Strategy, seed: u64) -> Result<RunOutcome> {
    let start = std::time::Instant::now();
    let device = Default::default();
    let vocab = p.genes + 2;
    let len = p.genes + 1;
    let mut model: CellEncoder<Train> = {
        let _guard = INIT.lock().unwrap_or_else(|e| e.into_inner());
        <Train as Backend>::seed(&device, seed);
        let model = p.model.init(vocab, &device);
        // Parameters initialise lazily, on first use: draw them now, under the lock.
        model.visit(&mut Materialize);
        model
    };
    // PyTorch's Adam defaults (burn's ε is 1e-5).
    let mut optim = AdamConfig::new().with_epsilon(1e-8).init::<Train, CellEncoder<Train>>();
    let is_special: Vec<bool> = (0..vocab).map(|t| t >= p.genes).collect();
    let rep = replacement(p);
    let mut order: Vec<usize> = (0..p.train_samples).collect();
    let (mut ids, mut labels) = (Vec::new(), Vec::new());
    let (mut first_loss, mut last_loss) = (f64::NAN, f64::NAN);
    for epoch in 0..p.epochs {
        order.shuffle(&mut rng(seed, (1 << 40) + epoch as u64));
        let (mut loss_sum, mut batches) = (0.0, 0usize);
        for chunk in order.chunks(p.batch_size) {
            let mut batch = TrainingBatch {
                seq: 0,
                epoch: epoch as u64,
                rows: chunk.len(),
                len,
                input_ids: Vec::with_capacity(chunk.len() * len),
                attention_mask: vec![1; chunk.len() * len],
                labels: Vec::with_capacity(chunk.len() * len),
                cell_keys: chunk.iter().map(|&i| i as u64).collect(),
                graph_time: 0,
                graph_edges: 0,
            };
            for &i in chunk {
                let mut r = cell_rng(seed, epoch as u64, i as u64);
                let positions = strategy.mask(p, &mut r);
                masked_input(&data.tokens[i], &positions, &rep, &mut r, &mut ids, &mut labels);
                batch.input_ids.extend_from_slice(&ids);
                batch.labels.extend_from_slice(&labels);
            }
            let t =
                batch_tensors::<Train>(&batch, &is_special, vocab, Targets::default(), p.model.max_positions, &device);
            let states = model.hidden(t.input_ids.clone(), t.pad.clone());
            let out = Objective::<Train>::loss(&Mlm, &model, &states, &t, p.model.max_positions);
            let value = out.loss.clone().into_scalar().elem::<f64>();
            if !value.is_finite() {
                return Err(Error::Usage(format!(
                    "synth modularity: training diverged (loss {value}) at epoch {epoch}"
                )));
            }
            loss_sum += value;
            batches += 1;
            let grads = GradientsParams::from_grads(out.loss.backward(), &model);
            model = optim.step(p.lr, model, grads);
        }
        let mean = loss_sum / batches.max(1) as f64;
        if epoch == 0 {
            first_loss = mean;
        }
        last_loss = mean;
    }
    let n = p.train_samples + p.test_samples;
    let emb = cls_embeddings(&model.valid(), &data.tokens[..n], p.batch_size.max(256));
    let (accuracy, train_accuracy) = probe(p, &emb, &data.labels[..n])?;
    Ok(RunOutcome { accuracy, train_accuracy, first_loss, last_loss, seconds: start.elapsed().as_secs_f64() })
}

/// Final-layer state at [CLS] (position 0) of unmasked samples, row-major `samples × hidden`.
pub fn cls_embeddings(model: &CellEncoder<CpuBackend>, tokens: &[Vec<u32>], batch: usize) -> Vec<f32> {
    let device = Default::default();
    let mut out = Vec::new();
    for chunk in tokens.chunks(batch) {
        let len = chunk[0].len() + 1;
        let mut ids = Vec::with_capacity(chunk.len() * len);
        for t in chunk {
            ids.push(i64::from(cls_token(t.len())));
            ids.extend(t.iter().map(|&x| i64::from(x)));
        }
        let ids = Tensor::<CpuBackend, 2, Int>::from_data(TensorData::new(ids, [chunk.len(), len]), &device);
        let pad = Tensor::from_data(TensorData::new(vec![false; chunk.len() * len], [chunk.len(), len]), &device);
        let states = model.hidden(ids, pad);
        let hidden = states.dims()[2];
        let cls = states.narrow(1, 0, 1).reshape([chunk.len(), hidden]);
        out.extend(cls.into_data().to_vec::<f32>().expect("f32 states"));
    }
    out
}

/// Multinomial logistic regression (L2, as scikit-learn's `LogisticRegression`) fitted on the
/// first `train_samples` rows, scored on the next `test_samples`: (test, train) accuracy.
pub fn probe(p: &ModularityParams, emb: &[f32], labels: &[u32]) -> Result<(f64, f64)> {
    let n = labels.len();
    let dim = emb.len() / n.max(1);
    let rows = |r: std::ops::Range<usize>| {
        let x: Vec<f64> = emb[r.start * dim..r.end * dim].iter().map(|&v| f64::from(v)).collect();
        let y: Vec<usize> = labels[r.clone()].iter().map(|&l| l as usize).collect();
        (ndarray15::Array2::from_shape_vec((r.len(), dim), x).expect("shape"), ndarray15::Array1::from(y))
    };
    let (xtr, ytr) = rows(0..p.train_samples);
    let (xte, yte) = rows(p.train_samples..n);
    let model = MultiLogisticRegression::default()
        .alpha(p.probe_alpha)
        .max_iterations(p.probe_iterations)
        .fit(&Dataset::new(xtr.clone(), ytr.clone()))
        .map_err(|e| Error::Usage(format!("synth modularity: logistic regression failed: {e}")))?;
    let acc = |x: &ndarray15::Array2<f64>, y: &ndarray15::Array1<usize>| {
        let pred = model.predict(x);
        pred.iter().zip(y.iter()).filter(|(a, b)| a == b).count() as f64 / y.len().max(1) as f64
    };
    Ok((acc(&xte, &yte), acc(&xtr, &ytr)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_reads_separable_embeddings() {
        let p = ModularityParams { train_samples: 60, test_samples: 30, ..Default::default() };
        let labels: Vec<u32> = (0..90).map(|i| i % 3).collect();
        let emb: Vec<f32> = labels.iter().flat_map(|&l| [l as f32, 1.0 - l as f32, 0.5]).collect();
        assert_eq!(probe(&p, &emb, &labels).unwrap(), (1.0, 1.0));
    }
}
