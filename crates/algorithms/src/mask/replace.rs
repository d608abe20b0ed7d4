//! BERT's 80/10/10 replacement of the masked positions, and the labels.

use rand::{Rng, RngCore};

use super::{MaskPlan, MaskRng};

/// Label of positions that are not predicted (PyTorch's `ignore_index`).
pub const IGNORE_INDEX: i64 = -100;

/// What masked positions become.
#[derive(Clone, Debug)]
pub struct Replacement {
    pub mask_token: u32,
    /// The gene tokens a random replacement is drawn from (never special tokens).
    pub gene_tokens: Vec<u32>,
    pub mask_token_rate: f64,
    pub random_token_rate: f64,
}

/// Writes the model input and labels of one cell's genes: `inputs` and `labels` have the length
/// of `genes`; masked positions get `<mask>` / a random gene / themselves with the configured
/// rates and their original token as label, the rest keep their token and `IGNORE_INDEX`.
pub fn apply_replacement(
    genes: &[u32],
    plan: &MaskPlan,
    rep: &Replacement,
    rng: &mut MaskRng,
    inputs: &mut [u32],
    labels: &mut [i64],
) {
    inputs.copy_from_slice(genes);
    labels.fill(IGNORE_INDEX);
    replace_in_place(plan, rep, rng, inputs, labels);
}

/// [`apply_replacement`] on buffers that already hold the genes and `IGNORE_INDEX`.
pub(crate) fn replace_in_place(
    plan: &MaskPlan,
    rep: &Replacement,
    rng: &mut MaskRng,
    inputs: &mut [u32],
    labels: &mut [i64],
) {
    // Integer thresholds on one 32-bit draw per position (rates resolved to 2^-32).
    let scale = 4_294_967_296.0;
    let mask_below = (rep.mask_token_rate * scale) as u64;
    let random_below = ((rep.mask_token_rate + rep.random_token_rate) * scale) as u64;
    for &p in &plan.positions {
        let p = p as usize;
        labels[p] = i64::from(inputs[p]);
        let u = u64::from(rng.next_u32());
        if u < mask_below {
            inputs[p] = rep.mask_token;
        } else if u < random_below && !rep.gene_tokens.is_empty() {
            inputs[p] = rep.gene_tokens[rng.random_range(0..rep.gene_tokens.len())];
        }
    }
}
