//! A reconstruction objective and a cell-label objective trained together (BMFM-RNA's
//! multitask pre-training): `loss = base + weight · labels`, where the label term starts after
//! `warmup` reconstruction-only steps. Both read the same forward pass.

use burn::tensor::Tensor;

use super::{BatchTensors, Heads, LossOutput, Objective};
use crate::encoder::CellEncoder;
use crate::fused::FusedOps;

pub struct Multitask<B: FusedOps> {
    base: Box<dyn Objective<B>>,
    labels: Box<dyn Objective<B>>,
    weight: f64,
    warmup: u64,
}

impl<B: FusedOps> Multitask<B> {
    pub fn new(base: Box<dyn Objective<B>>, labels: impl Objective<B> + 'static, weight: f64, warmup: u64) -> Self {
        Self { base, labels: Box::new(labels), weight, warmup }
    }
}

impl<B: FusedOps> Objective<B> for Multitask<B> {
    /// The reconstruction objective's name: `model.objective` stays what it was.
    fn name(&self) -> &'static str {
        self.base.name()
    }

    fn heads(&self, vocab_size: usize) -> Heads {
        let (a, b) = (self.base.heads(vocab_size), self.labels.heads(vocab_size));
        Heads { cell: a.cell.or(b.cell), label: a.label.or(b.label), decoder: a.decoder.or(b.decoder) }
    }

    fn whole_cell_targets(&self) -> bool {
        self.base.whole_cell_targets() || self.labels.whole_cell_targets()
    }

    fn label_column(&self) -> Option<&str> {
        self.labels.label_column()
    }

    fn label_names(&self) -> Option<Vec<String>> {
        self.labels.label_names()
    }

    fn per_masked_token(&self) -> bool {
        self.base.per_masked_token()
    }

    fn sees_values(&self) -> bool {
        self.base.sees_values()
    }

    fn loss(&self, model: &CellEncoder<B>, states: &Tensor<B, 3>, t: &BatchTensors<B>, max: usize) -> LossOutput<B> {
        let base = self.base.loss(model, states, t, max);
        // A batch without labelled cells teaches the label objective nothing: no part for it.
        let labelled = t.label_codes.as_ref().is_some_and(|c| c.iter().any(|&c| c >= 0));
        if t.step < self.warmup || self.weight == 0.0 || !labelled {
            let mut out = LossOutput::new(base.loss.clone(), base.correct);
            out.parts.push(("reconstruction", base.loss));
            return out;
        }
        let labels = self.labels.loss(model, states, t, max);
        let mut out = LossOutput::new(base.loss.clone() + labels.loss.clone() * self.weight, base.correct);
        out.parts = vec![("reconstruction", base.loss), (self.labels.name(), labels.loss)];
        out
    }
}
