//! The held-out evaluation batches, masked once so that every evaluation of a run sees the same
//! masks.

/// The held-out evaluation batches: `cells` masked once at the fixed evaluation epoch (so every
/// evaluation sees the same masks), longest first, padded in batches of `batch_size`. The
/// trainer's held-out loss and the Python package's `held_out_batches` are computed on these.
pub fn held_out_batches(
    ctx: &crate::MaskContext,
    cells: &[(u64, Vec<u32>)],
    batch_size: usize,
) -> Vec<corrflow_algorithms::batches::TrainingBatch> {
    use corrflow_algorithms::batches::TrainingBatch;
    use corrflow_algorithms::mask::{MaskScratch, MaskedSequence};
    let masker = ctx.masker();
    let mut scratch = MaskScratch::default();
    let mut masked: Vec<(u64, MaskedSequence)> = cells
        .iter()
        .map(|(key, tokens)| {
            let mut out = MaskedSequence::default();
            masker.mask(tokens, u64::MAX, *key, &mut scratch, &mut out);
            (*key, out)
        })
        .collect();
    masked.sort_by_key(|(_, c)| std::cmp::Reverse(c.input_ids.len()));
    masked
        .chunks(batch_size.max(1))
        .map(|chunk| {
            let seqs: Vec<MaskedSequence> = chunk.iter().map(|c| c.1.clone()).collect();
            TrainingBatch::pad(0, 0, chunk.iter().map(|c| c.0).collect(), &seqs, ctx.pad)
        })
        .collect()
}
