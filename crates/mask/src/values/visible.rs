//! Which genes of a cell the encoder sees. A value model's cell is every gene its atlas
//! measured, zeros included; the hidden set is chosen by the masking strategy over that list
//! (random: uniform; CorrMask: Algorithm 2, graph partners hidden together with quota λ, then a
//! uniform top-up), `|hidden| = L − K`, and the rest is visible. Drawn from the cell's RNG
//! `(seed, epoch, cell)`, so a resumed run and any thread count see the same sets.

use corrflow_algorithms::mask::{cell_rng, mask_cell, MaskParams, MaskPlan, MaskScratch, MaskTables};
use corrflow_io::corpus::CorpusIndex;

/// Index of "none" in the token → decoding-index table.
pub const NOT_DECODED: u32 = u32::MAX;

/// An atlas' measured genes and their place in the decoding set.
#[derive(Clone, Debug)]
pub struct AtlasGenes {
    /// The genes the visible set is drawn from (ascending tokens; the hidden set is the rest of
    /// them): every measured gene, or only the measured genes of the decoding set
    /// (`model.values.visible = "decoded"`).
    pub pool: Vec<u32>,
    /// 1 where the decoding gene is measured by the atlas, 0 where not (its cells' loss skips it).
    pub decode_measured: Vec<f32>,
}

impl AtlasGenes {
    /// An atlas measuring `measured` (ascending), for the decoding set `decode` (ascending);
    /// `decoded_only` draws the visible genes from the decoding set alone.
    pub fn new(decode: &[u32], measured: &[u32], decoded_only: bool) -> Self {
        let decode_measured = decode.iter().map(|t| f32::from(u8::from(measured.binary_search(t).is_ok()))).collect();
        let pool = if decoded_only {
            measured.iter().copied().filter(|t| decode.binary_search(t).is_ok()).collect()
        } else {
            measured.to_vec()
        };
        Self { pool, decode_measured }
    }
}

/// Where a cell's visible genes are drawn from (`model.values.visible`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VisibleFrom {
    /// Only the measured genes of the decoding set.
    pub decoded_only: bool,
    /// Only the genes the cell detected (count > 0): the encoder never sees a zero.
    pub detected_only: bool,
}

/// The atlas of every cell key, and each atlas' genes.
#[derive(Debug)]
pub struct CellAtlases {
    /// (first key, atlas index) of each shard, in key order.
    starts: Vec<(u64, usize)>,
    pub atlases: Vec<AtlasGenes>,
    /// Token → index in the decoding set ([`NOT_DECODED`] for the rest).
    pub decode_index: Vec<u32>,
    /// Whether each cell's visible genes are drawn from its detected genes of the pool only.
    pub detected_only: bool,
}

impl CellAtlases {
    /// The atlases of `index` (each with its measured genes) and the decoding set `decode`
    /// (ascending); `from`: see [`VisibleFrom`] and [`AtlasGenes::new`].
    pub fn new(index: &CorpusIndex, measured: Vec<(String, Vec<u32>)>, decode: &[u32], from: VisibleFrom) -> Self {
        let position = |name: &str| measured.iter().position(|(n, _)| n == name).unwrap_or(0);
        let starts = index.shards.iter().map(|s| (s.first_key, position(&s.atlas))).collect();
        let atlases = measured.iter().map(|(_, m)| AtlasGenes::new(decode, m, from.decoded_only)).collect();
        let size = decode.iter().map(|&t| t as usize + 1).max().unwrap_or(0);
        let mut decode_index = vec![NOT_DECODED; size];
        for (i, &t) in decode.iter().enumerate() {
            decode_index[t as usize] = i as u32;
        }
        Self { starts, atlases, decode_index, detected_only: from.detected_only }
    }

    /// The genes of the atlas cell `key` belongs to.
    pub fn of(&self, key: u64) -> &AtlasGenes {
        let i = self.starts.partition_point(|&(first, _)| first <= key).saturating_sub(1);
        &self.atlases[self.starts.get(i).map_or(0, |s| s.1)]
    }

    /// The decoding index of token `t`, if it is decoded.
    pub fn decode_index(&self, t: u32) -> Option<usize> {
        self.decode_index.get(t as usize).copied().filter(|&i| i != NOT_DECODED).map(|i| i as usize)
    }
}

/// Chooses the visible genes of one cell: indices into `measured`, ascending. `k` is the number
/// visible (K; all when the atlas measured fewer), `params.p` is ignored for the budget.
#[allow(clippy::too_many_arguments)]
pub fn choose_visible(
    measured: &[u32],
    k: usize,
    params: &MaskParams,
    tables: MaskTables<'_>,
    (epoch, cell): (u64, u64),
    scratch: &mut MaskScratch,
    plan: &mut MaskPlan,
    out: &mut Vec<u32>,
) {
    out.clear();
    let n = measured.len();
    if n <= k {
        out.extend(0..n as u32);
        return;
    }
    // The budget ⌊L·p⌋ is L − K exactly: half a gene above it absorbs rounding.
    let hidden = n - k;
    let params = MaskParams { p: (hidden as f64 + 0.5) / n as f64, ..params.clone() };
    let mut rng = cell_rng(params.seed, epoch, cell);
    mask_cell(measured, &params, tables, &mut rng, scratch, plan);
    let mut h = plan.positions.iter().peekable();
    for i in 0..n as u32 {
        if h.next_if_eq(&&i).is_none() {
            out.push(i);
        }
    }
}

/// K of a cell with `measured` genes: `train.visible_genes`, or `(1 − mask.p)·L` when 0.
pub fn visible_count(visible_genes: usize, p: f64, measured: usize) -> usize {
    if visible_genes > 0 {
        visible_genes.min(measured)
    } else {
        ((1.0 - p) * measured as f64).round().max(1.0) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corrflow_algorithms::mask::{MaskStrategy, NeighbourTable};

    #[test]
    fn exactly_k_genes_are_visible_the_same_for_the_same_cell_and_different_across_cells() {
        let measured: Vec<u32> = (0..500).map(|t| t * 3 + 2).collect();
        let graph = NeighbourTable::default();
        let tables = MaskTables { graph: &graph, pmi: None };
        let params = MaskParams { strategy: MaskStrategy::RANDOM, ..MaskParams::default() };
        let (mut scratch, mut plan) = (MaskScratch::default(), MaskPlan::default());
        let mut a = Vec::new();
        let mut b = Vec::new();
        choose_visible(&measured, 50, &params, tables, (0, 7), &mut scratch, &mut plan, &mut a);
        choose_visible(&measured, 50, &params, tables, (0, 7), &mut scratch, &mut plan, &mut b);
        assert_eq!(a.len(), 50);
        assert_eq!(a, b);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        choose_visible(&measured, 50, &params, tables, (0, 8), &mut scratch, &mut plan, &mut b);
        assert_ne!(a, b);
        choose_visible(&measured[..30], 50, &params, tables, (0, 7), &mut scratch, &mut plan, &mut b);
        assert_eq!(b, (0..30).collect::<Vec<_>>());
        assert_eq!(visible_count(0, 0.9, 1000), 100);
        assert_eq!(visible_count(256, 0.9, 100), 100);
    }

    #[test]
    fn the_visible_pool_is_every_measured_gene_or_the_decoded_ones_only() {
        let (measured, decode) = ([2u32, 4, 6, 8, 10], [1u32, 4, 8, 9]);
        let all = AtlasGenes::new(&decode, &measured, false);
        assert_eq!(all.pool, measured);
        // The loss still skips decoding genes the atlas did not measure, whatever the pool.
        assert_eq!(all.decode_measured, [0.0, 1.0, 1.0, 0.0]);
        let decoded = AtlasGenes::new(&decode, &measured, true);
        assert_eq!(decoded.pool, [4, 8]);
        assert_eq!(decoded.decode_measured, all.decode_measured);
    }
}
