//! `hce`: hierarchical cross-entropy over an ontology (BMFM-RNA §4.2.1). The label head maps the
//! pooled embedding to logits over the slice's leaves; a cell labelled with term `y` (at any
//! depth) adds `logsumexp(z) − logsumexp(z over the leaves under y)`, i.e. `−log P(y)` with
//! `P(y)` the mass of `y`'s leaves. Cells without a label add nothing; the loss is the mean
//! over labelled cells (0 for a batch without any).

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor, TensorData};
use corrflow_algorithms::ontology::hce::LeafHead;
use corrflow_infer::model_meta::{OntologyHead, Pooling};

use super::{BatchTensors, Heads, LossOutput, Objective};
use crate::encoder::CellEncoder;
use crate::fused::FusedOps;

pub struct Hce {
    head: LeafHead,
    pooling: Pooling,
    column: String,
}

impl Hce {
    pub fn new(config: &OntologyHead) -> Result<Self, String> {
        Ok(Self { head: config.leaf_head()?, pooling: config.pooling, column: config.column.clone() })
    }

    /// `[rows, leaves]`: true where a leaf lies under the row's label term.
    fn masks<B: Backend>(&self, terms: &[u32], device: &B::Device) -> Tensor<B, 2, Bool> {
        let width = self.head.width();
        let mut m = vec![false; terms.len() * width];
        for (r, &t) in terms.iter().enumerate() {
            for &k in self.head.under(t) {
                m[r * width + k as usize] = true;
            }
        }
        Tensor::from_data(TensorData::new(m, [terms.len(), width]), device)
    }
}

/// The pooled cell vectors `[rows, hidden]` a cell-level head reads: the mean over gene
/// positions, or the `<cls>` position.
pub(crate) fn pooled<B: Backend>(states: &Tensor<B, 3>, t: &BatchTensors<B>, pooling: Pooling) -> Tensor<B, 2> {
    match pooling {
        Pooling::Mean => CellEncoder::mean_pool(states.clone(), t.gene_weights.clone()),
        Pooling::Cls => {
            let [rows, _, hidden] = states.dims();
            states.clone().narrow(1, 0, 1).reshape([rows, hidden])
        }
    }
}

/// Row-wise `log Σ exp`, stable.
fn logsumexp<B: Backend>(x: Tensor<B, 2>) -> Tensor<B, 1> {
    let rows = x.dims()[0];
    let max = x.clone().max_dim(1).detach();
    ((x - max.clone()).exp().sum_dim(1).log() + max).reshape([rows])
}

impl<B: FusedOps> Objective<B> for Hce {
    fn name(&self) -> &'static str {
        "hce"
    }

    fn heads(&self, _vocab_size: usize) -> Heads {
        Heads { label: Some(self.head.width()), ..Heads::default() }
    }

    fn label_column(&self) -> Option<&str> {
        Some(&self.column)
    }

    fn label_names(&self) -> Option<Vec<String>> {
        Some(self.head.ontology().terms().iter().map(|t| t.id.clone()).collect())
    }

    fn loss(&self, model: &CellEncoder<B>, states: &Tensor<B, 3>, t: &BatchTensors<B>, _max: usize) -> LossOutput<B> {
        let device = states.device();
        let codes = t.label_codes.as_deref().map(Vec::as_slice).unwrap_or(&[]);
        let (rows, terms): (Vec<i64>, Vec<u32>) =
            codes.iter().enumerate().filter(|(_, &c)| c >= 0).map(|(r, &c)| (r as i64, c as u32)).unzip();
        if rows.is_empty() {
            return LossOutput::new(Tensor::zeros([1], &device), None);
        }
        let head = model.label_head.as_ref().expect("the model was built with the hierarchical head (model.hce)");
        let n = rows.len();
        let index = Tensor::<B, 1, Int>::from_data(TensorData::new(rows, [n]), &device);
        let logits = head.forward(pooled(states, t, self.pooling).select(0, index));
        let outside = self.masks::<B>(&terms, &device).bool_not();
        // Leaves outside the label's subtree drop out of the second log-sum-exp.
        let under = logsumexp(logits.clone().mask_fill(outside, -1e30));
        LossOutput::new((logsumexp(logits) - under).mean(), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::module::Module;
    use corrflow_algorithms::ontology::Term;
    use corrflow_infer::model_meta::ModelConfig;

    use crate::objective::{batch_tensors, Targets};
    use crate::InitModel;

    type B = crate::CpuBackend;

    fn slice() -> Vec<Term> {
        let t = |id: &str, parents: &[&str]| Term {
            id: id.into(),
            label: id.into(),
            synonyms: vec![],
            parents: parents.iter().map(|p| p.to_string()).collect(),
        };
        vec![t("A", &[]), t("B", &["A"]), t("C", &["A"]), t("D", &["B"]), t("E", &["B"]), t("F", &["C"])]
    }

    #[test]
    fn the_loss_equals_the_direct_computation_and_skips_unlabelled_cells() {
        let device = Default::default();
        let head = OntologyHead {
            ontology_version: "test".into(),
            column: "cl".into(),
            weight: 1.0,
            warmup_steps: 0,
            pooling: Pooling::Mean,
            leaves: OntologyHead::leaf_ids(&slice()),
            terms: slice(),
        };
        let m = ModelConfig {
            hidden: 8,
            ffn: 16,
            heads: 2,
            layers: 1,
            max_positions: 16,
            hce: Some(head.clone()),
            dropout: 0.0,
            ..Default::default()
        };
        let model: CellEncoder<B> = m.init(10, &device);
        let hce = Hce::new(&head).unwrap();
        assert_eq!(hce.head.width(), 3);
        // 3 cells: labelled B (internal), unlabelled, labelled F (leaf).
        let ids: Vec<String> = slice().iter().map(|t| t.id.clone()).collect();
        let mut labels = corrflow_io::corpus::CellLabels::default();
        labels = labels.with_codes("cl", ids.clone(), vec![1, -100, 5]);
        let b = corrflow_algorithms::batches::TrainingBatch {
            seq: 0,
            epoch: 0,
            rows: 3,
            len: 4,
            input_ids: vec![3, 4, 5, 0, 6, 7, 0, 0, 3, 8, 9, 4],
            attention_mask: vec![1, 1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1],
            labels: vec![-100; 12],
            cell_keys: vec![0, 1, 2],
            graph_time: 0,
            graph_edges: 0,
        };
        let special = vec![false; 10];
        let t =
            batch_tensors::<B>(&b, &special, 10, Targets { labels: Some(&labels), ..Default::default() }, 16, &device);
        let states = model.hidden(t.input_ids.clone(), t.pad.clone());
        let got: f64 = hce.loss(&model, &states, &t, 16).loss.into_scalar().into();
        // Direct: the head's logits per labelled row, then −log of the label's leaf mass.
        let logits = model.label_head.as_ref().unwrap().forward(CellEncoder::mean_pool(states, t.gene_weights.clone()));
        let z: Vec<f32> = logits.into_data().to_vec().unwrap();
        let row = |r: usize| z[r * 3..r * 3 + 3].to_vec();
        let o = hce.head.ontology();
        let direct = (hce.head.nll(&row(0), o.find("B").unwrap()) + hce.head.nll(&row(2), o.find("F").unwrap())) / 2.0;
        assert!((got - direct).abs() < 1e-5, "{got} vs {direct}");
        assert!(model.num_params() > 0);
    }
}
