//! Cells as a model takes them, in one place for every adapter (the CLI's files, the server's
//! JSON cells, the Python package's matrices). A rank model takes the Geneformer tokens the
//! tokenizer wrote. A value model (DESIGN.md §11) takes `<cls>` and genes with their values
//! `x = ln(1 + c / n_counts · L)`: every gene the source measured when there are at most
//! `values.inference_genes` of them (the masked autoencoder's encoder seeing the whole cell, as
//! MAEs are used after training); past that, a uniform sample of that many measured genes,
//! detected or not, as training draws its visible genes, drawn with a seed from the cell's own
//! expression (so a cell's input, and its embedding, do not depend on the batch, the order or the
//! thread it came with). Filling the cap with detected genes first instead showed the encoder
//! cells unlike any it trained on (Spectra: 57% detected against 9%; Zeisel: all against 58%);
//! on Zeisel the same models' ARI went from 0.13 that way to 0.28 this way (REPORT §10).

use corrflow_io::error::{Error, Result};

use crate::model_meta::{ModelConfig, ValueModel};

/// A cell's expression: its detected vocabulary genes in rank order with their raw counts, and
/// its total count over all of its source's genes.
#[derive(Clone, Copy, Debug)]
pub struct CellExpression<'a> {
    pub genes: &'a [u32],
    pub counts: &'a [f32],
    pub total: f64,
}

/// A value model's input for one cell: `<cls>` first (value 0), then the genes it sees with
/// their values: its detected genes in rank order, then its undetected ones ascending. `measured`
/// is the source's measured vocabulary genes, ascending.
pub fn value_input(cls: u32, v: &ValueModel, measured: &[u32], cell: CellExpression<'_>) -> (Vec<u32>, Vec<f32>) {
    value_input_with(cls, v, measured, cell, cell_seed(cell.genes, cell.counts), &[])
}

/// [`value_input`] with the sample's seed given and the genes `always` among those seen besides
/// it (`perturb`: the perturbed genes, seen in the original and the perturbed cell alike, each
/// cell's sample seeded by its original expression).
pub fn value_input_with(
    cls: u32,
    v: &ValueModel,
    measured: &[u32],
    cell: CellExpression<'_>,
    seed: u64,
    always: &[u32],
) -> (Vec<u32>, Vec<f32>) {
    let cap = v.inference_genes;
    let detected_pool;
    let measured = if v.visible.detected_only() {
        detected_pool = detected_among(measured, cell);
        &detected_pool[..]
    } else {
        measured
    };
    let mut seen: Vec<u32> =
        if measured.len() <= cap { measured.to_vec() } else { sample(measured.to_vec(), cap, seed) };
    if !always.is_empty() {
        seen.extend_from_slice(always);
        seen.sort_unstable();
        seen.dedup();
    }
    let mut tokens = Vec::with_capacity(seen.len() + 1);
    let mut values = Vec::with_capacity(seen.len() + 1);
    tokens.push(cls);
    values.push(0.0);
    for (&g, &c) in cell.genes.iter().zip(cell.counts) {
        if seen.binary_search(&g).is_ok() {
            tokens.push(g);
            values.push(v.value(f64::from(c), cell.total));
        }
    }
    let mut detected: Vec<u32> = cell.genes.to_vec();
    detected.sort_unstable();
    for g in seen {
        if detected.binary_search(&g).is_err() {
            tokens.push(g);
            values.push(0.0);
        }
    }
    (tokens, values)
}

/// The genes of `pool` (ascending) the cell detected (count > 0), ascending: the pool of a model
/// whose encoder sees detected genes only (`values.visible = "detected"`).
fn detected_among(pool: &[u32], cell: CellExpression<'_>) -> Vec<u32> {
    let mut detected: Vec<u32> = cell
        .genes
        .iter()
        .zip(cell.counts)
        .filter(|&(g, &c)| c > 0.0 && pool.binary_search(g).is_ok())
        .map(|(&g, _)| g)
        .collect();
    detected.sort_unstable();
    detected
}

/// A seed from a cell's expression (FNV-1a over its genes and counts' bits).
pub fn cell_seed(genes: &[u32], counts: &[f32]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for word in genes.iter().copied().chain(counts.iter().map(|c| c.to_bits())) {
        for byte in word.to_le_bytes() {
            h = (h ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

/// `k` of `items`, uniformly without replacement (a partial Fisher–Yates with `seed`), in
/// ascending order.
fn sample(mut items: Vec<u32>, k: usize, seed: u64) -> Vec<u32> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    for i in 0..k {
        let j = rng.random_range(i..items.len());
        items.swap(i, j);
    }
    items.truncate(k);
    items.sort_unstable();
    items
}

/// The value settings of a model that sees values, or the error naming what a rank-only input
/// lacks.
pub fn value_settings(model: &ModelConfig) -> Option<&ValueModel> {
    model.values.as_ref().filter(|_| model.input.sees_values())
}

/// The error of a value model given tokens only (a source without counts).
pub fn needs_expression(what: &str) -> Error {
    Error::Usage(format!(
        "{what}: this model sees expression values (a value model), which needs each cell's counts, not only its \
         rank tokens"
    ))
}

/// The `<cls>` token a value model's input starts with.
pub fn cls_token(vocab: &corrflow_io::vocab::Vocabulary) -> Result<u32> {
    vocab.cls.ok_or_else(|| Error::Usage("a value model's vocabulary has no <cls> token".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(cap: usize) -> ValueModel {
        ValueModel { inference_genes: cap, target_sum: 100.0, ..ValueModel::default() }
    }

    #[test]
    fn every_measured_gene_is_seen_under_the_cap_detected_first_then_zeros_ascending() {
        let cell = CellExpression { genes: &[7, 3], counts: &[5.0, 1.0], total: 10.0 };
        let (t, v) = value_input(1, &settings(10), &[2, 3, 5, 7, 9], cell);
        assert_eq!(t, vec![1, 7, 3, 2, 5, 9]);
        assert_eq!(v[0], 0.0);
        assert!((v[1] - (1.0f64 + 50.0).ln() as f32).abs() < 1e-6);
        assert!((v[2] - (1.0f64 + 10.0).ln() as f32).abs() < 1e-6);
        assert_eq!(&v[3..], &[0.0, 0.0, 0.0]);
    }

    #[test]
    fn past_the_cap_a_uniform_sample_of_the_measured_genes_that_depends_on_the_cell_only() {
        let measured: Vec<u32> = (0..1000).collect();
        // 400 detected genes, in rank order (descending counts).
        let genes: Vec<u32> = (0..400).map(|i| (i * 7919 + 13) % 1000).collect();
        let counts: Vec<f32> = (0..400).map(|i| 1000.0 - i as f32).collect();
        let cell = CellExpression { genes: &genes, counts: &counts, total: 1e6 };
        let (a, va) = value_input(1, &settings(200), &measured, cell);
        let (b, _) = value_input(1, &settings(200), &measured, cell);
        assert_eq!(a.len(), 201);
        assert_eq!(a, b);
        let mut distinct = a[1..].to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 200);
        // As many detected genes as a uniform draw gives (40% of 200, within 5 sd), not all 200.
        let shown = va[1..].iter().filter(|&&x| x > 0.0).count();
        assert!((80 - 35..=80 + 35).contains(&shown), "{shown} detected of 200");
        // Detected genes first, in the cell's rank order; then the zeros ascending.
        let rank = |g: u32| genes.iter().position(|&h| h == g);
        let ranks: Vec<usize> = a[1..=shown].iter().map(|&g| rank(g).unwrap()).collect();
        assert!(ranks.windows(2).all(|w| w[0] < w[1]));
        assert!(a[shown + 1..].windows(2).all(|w| w[0] < w[1]) && a[shown + 1..].iter().all(|&g| rank(g).is_none()));
        let mut other_counts = counts.clone();
        other_counts[399] = 2.0;
        let other = CellExpression { genes: &genes, counts: &other_counts, total: 1e6 };
        assert_ne!(value_input(1, &settings(200), &measured, other).0, a);
    }

    #[test]
    fn a_detected_pool_shows_only_the_detected_genes_of_the_pool_sampled_past_the_cap() {
        use crate::model_meta::VisiblePool;
        let detected = |cap| ValueModel { visible: VisiblePool::Detected, ..settings(cap) };
        // Gene 8 is detected but not measured by the source; gene 5 is listed with a zero count.
        let cell = CellExpression { genes: &[7, 3, 8, 5], counts: &[5.0, 1.0, 2.0, 0.0], total: 10.0 };
        let (t, v) = value_input(1, &detected(10), &[2, 3, 5, 7, 9], cell);
        assert_eq!(t, vec![1, 7, 3]);
        assert!(v[1..].iter().all(|&x| x > 0.0));
        // Past the cap: a sample of the detected genes only, never a zero.
        let measured: Vec<u32> = (0..1000).collect();
        let genes: Vec<u32> = (0..400).map(|i| (i * 7919 + 13) % 1000).collect();
        let counts: Vec<f32> = (0..400).map(|i| 1000.0 - i as f32).collect();
        let cell = CellExpression { genes: &genes, counts: &counts, total: 1e6 };
        let (a, va) = value_input(1, &detected(200), &measured, cell);
        assert_eq!(a.len(), 201);
        assert!(va[1..].iter().all(|&x| x > 0.0));
        assert_eq!(value_input(1, &detected(200), &measured, cell).0, a);
    }
}
