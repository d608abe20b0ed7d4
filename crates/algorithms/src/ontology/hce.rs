//! Hierarchical cross-entropy (BMFM-RNA §4.2.1): a model predicts a softmax over the leaves of an
//! ontology slice; an internal term's probability is the mass of the leaves under it, so a label
//! at any depth has a likelihood, `P(y) = Σ_{l ∈ leaves(y)} p_l`, and the loss is
//! `−log P(y) = logsumexp(z) − logsumexp(z over leaves(y))`.
//!
//! [`LeafHead`] fixes which leaf each model output is and which outputs lie under each term;
//! the reference loss here is what the burn objective is tested against.

use super::Ontology;

/// The outputs of a hierarchical head over an ontology slice: output `k` is leaf `outputs[k]`.
#[derive(Clone, Debug)]
pub struct LeafHead {
    ontology: Ontology,
    outputs: Vec<u32>,
    /// Per term, the outputs of the leaves under it (sorted).
    under: Vec<Vec<u32>>,
}

impl LeafHead {
    /// The head over `ontology`'s leaves, in term order (for a slice: the order of leaf ids).
    pub fn new(ontology: Ontology) -> Self {
        let outputs = ontology.leaves().to_vec();
        let mut output_of = vec![u32::MAX; ontology.len()];
        for (k, &leaf) in outputs.iter().enumerate() {
            output_of[leaf as usize] = k as u32;
        }
        let under = (0..ontology.len() as u32)
            .map(|t| ontology.descendant_leaves(t).into_iter().map(|l| output_of[l as usize]).collect())
            .collect();
        Self { ontology, outputs, under }
    }

    pub fn ontology(&self) -> &Ontology {
        &self.ontology
    }

    /// The number of outputs (leaves).
    pub fn width(&self) -> usize {
        self.outputs.len()
    }

    /// The leaf term of each output.
    pub fn outputs(&self) -> &[u32] {
        &self.outputs
    }

    /// The outputs whose leaves lie under term `t` (`t`'s own output when it is a leaf).
    pub fn under(&self, t: u32) -> &[u32] {
        &self.under[t as usize]
    }

    /// `[width]` booleans: which outputs lie under `t` (the HCE loss' mask for a label `t`).
    pub fn mask(&self, t: u32) -> Vec<bool> {
        let mut m = vec![false; self.width()];
        for &k in self.under(t) {
            m[k as usize] = true;
        }
        m
    }

    /// Every term's probability from the leaf probabilities: the sum over the leaves under it.
    /// The roots of a single-rooted slice get 1 (up to rounding).
    pub fn roll_up(&self, leaf_probabilities: &[f32]) -> Vec<f64> {
        self.under.iter().map(|ks| ks.iter().map(|&k| f64::from(leaf_probabilities[k as usize])).sum()).collect()
    }

    /// The reference HCE loss of one row of logits for label term `label`, in f64:
    /// `logsumexp(z) − logsumexp(z_k : k under label)`.
    pub fn nll(&self, logits: &[f32], label: u32) -> f64 {
        let all: Vec<f64> = logits.iter().map(|&z| f64::from(z)).collect();
        let under: Vec<f64> = self.under(label).iter().map(|&k| all[k as usize]).collect();
        logsumexp(&all) - logsumexp(&under)
    }
}

/// The softmax of a row of logits (f64 inside, for the probabilities the decoders compare).
pub fn softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &z| m.max(z));
    let e: Vec<f64> = logits.iter().map(|&z| f64::from(z - max).exp()).collect();
    let total: f64 = e.iter().sum();
    e.iter().map(|v| (v / total) as f32).collect()
}

fn logsumexp(values: &[f64]) -> f64 {
    let max = values.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v));
    if max == f64::NEG_INFINITY {
        return max;
    }
    max + values.iter().map(|v| (v - max).exp()).sum::<f64>().ln()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ontology::toy;

    fn head() -> LeafHead {
        LeafHead::new(toy())
    }

    #[test]
    fn an_internal_term_gets_the_sum_of_its_leaves_and_the_root_gets_one() {
        let h = head();
        let o = h.ontology();
        // Leaves in term order: n8, m8, dbl, mono, DC.
        let p = softmax(&[1.0, 0.5, -0.3, 2.0, 0.0]);
        let up = h.roll_up(&p);
        let f = |id| up[o.find(id).unwrap() as usize];
        assert!((f("cell") - 1.0).abs() < 1e-6);
        assert!((f("CD8") - (p[0] + p[1] + p[2]) as f64).abs() < 1e-6);
        assert!((f("CD4") - p[2] as f64).abs() < 1e-7);
        assert!((f("T") - (p[0] + p[1] + p[2]) as f64).abs() < 1e-6);
        assert!((f("my") - (p[3] + p[4]) as f64).abs() < 1e-6);
        // A term shared by two parents counts once in their common ancestor.
        assert!((f("T") + f("my") - 1.0).abs() < 1e-6);
        for &leaf in o.leaves() {
            assert_eq!(h.under(leaf).len(), 1);
        }
    }

    #[test]
    fn the_loss_is_minus_the_log_of_the_label_subtree_mass() {
        let h = head();
        let o = h.ontology();
        let z = [0.3f32, -1.2, 0.8, 1.5, -0.4];
        let p = softmax(&z);
        for id in ["cell", "T", "CD4", "CD8", "n8", "my", "DC"] {
            let t = o.find(id).unwrap();
            let direct = -(h.under(t).iter().map(|&k| f64::from(p[k as usize])).sum::<f64>()).ln();
            assert!((h.nll(&z, t) - direct).abs() < 1e-6, "{id}");
        }
        // The root's likelihood is 1: no loss whatever the logits.
        assert!(h.nll(&z, o.find("cell").unwrap()).abs() < 1e-12);
        assert_eq!(h.mask(o.find("CD8").unwrap()), [true, true, true, false, false]);
    }
}
