use serde::{Deserialize, Serialize};

/// Parameters of Algorithm 1 (defaults: the CorrMask paper's Table 4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GraphParams {
    /// Cells sampled for the graph (`N_sub`); 0 = all cells.
    pub n_sub: u64,
    /// Positions scored per cell (`L_max`).
    pub l_max: usize,
    /// Genes present in fewer cells are left out.
    pub min_presence: u64,
    /// Graph vocabulary: the most present genes, at most this many.
    pub max_genes: usize,
    /// `ρ_min`: candidates with smaller |ρ_global| are dropped.
    pub rho_min: f64,
    /// `M_min`: candidates co-present in fewer cells are dropped.
    pub m_min: u64,
    /// `N_neigh`: candidates per gene, by |ρ_global|.
    pub n_neigh: usize,
    /// Seed of the `N_sub` sample.
    pub seed: u64,
    /// Incremental updates: drift (largest per-gene KS distance between the current score
    /// distribution and the frozen rank maps) above which a rebase is recommended.
    pub rebase_drift: f64,
    /// Incremental updates: share of the graph vocabulary that may be missing (genes the
    /// vocabulary rule picks now that the state has no statistics for). Above it an update
    /// computes theirs (`extend_vocab`) or, without that, recommends a rebase.
    pub rebase_vocab: f64,
    /// Rebase automatically when the drift exceeds `rebase_drift` or `rebase_vocab`.
    pub auto_rebase: bool,
    /// Incremental updates: when more than `rebase_vocab` of the vocabulary is missing, compute
    /// the missing genes' statistics from the stored shards of the included atlases (two passes
    /// over them; the products cost `missing / max_genes` of a rebase's) so the graph has the
    /// vocabulary of an exact build. `false` leaves them out until a rebase.
    pub extend_vocab: bool,
    /// Streamed builds (`build --incremental`, `rebase`): memory in MB for ρ_local: the
    /// postings it is computed from when they all fit (one pass over the shards), otherwise
    /// per-pair score histograms in rounds of pairs that fit (two passes each, as many rounds
    /// at any number of cells); 0 = half of what the exact pair sums of `max_genes` genes hold
    /// ([`PairSums::bytes`](super::PairSums::bytes): 112 MB at 2,000), within 64 MB and an
    /// eighth of the available memory.
    pub stream_memory_mb: u64,
}

impl Default for GraphParams {
    fn default() -> Self {
        Self {
            n_sub: 100_000,
            l_max: 2048,
            min_presence: 50,
            max_genes: 2000,
            rho_min: 0.2,
            m_min: 200,
            n_neigh: 50,
            seed: 0,
            rebase_drift: 0.1,
            rebase_vocab: 0.02,
            auto_rebase: false,
            extend_vocab: true,
            stream_memory_mb: 0,
        }
    }
}

impl GraphParams {
    pub fn validate(&self) -> Result<(), String> {
        if self.l_max == 0 || self.l_max > u16::MAX as usize {
            return Err(format!("graph.l_max must be in 1..=65535, got {}", self.l_max));
        }
        if self.max_genes == 0 || self.n_neigh == 0 {
            return Err("graph.max_genes and graph.n_neigh must be > 0".into());
        }
        if self.max_genes > crate::mask::MAX_GRAPH_GENES {
            return Err(format!(
                "graph.max_genes must be at most {}, got {}",
                crate::mask::MAX_GRAPH_GENES,
                self.max_genes
            ));
        }
        if !(0.0..=1.0).contains(&self.rho_min) {
            return Err(format!("graph.rho_min must be in [0, 1], got {}", self.rho_min));
        }
        Ok(())
    }
}
