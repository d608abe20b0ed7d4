//! CorrMask Algorithm 1 (the gene dependency graph) as pure functions over plain data.
//!
//! A cell is reduced to the *position scores* of the graph-vocabulary genes among its first
//! `L_max` tokens (`s = L_max − pos`, absent = 0). Everything the graph needs is then additive
//! and exact in integers: per-gene score histograms ([`ScoreHistograms`]), and per-pair sums
//! under per-gene *rank maps* ([`RankMaps`]: twice the mid-rank of each score, zeros included)
//! accumulated batch by batch with dense matrix products ([`PairSums`]). When the maps come
//! from the same cells, the correlations derived from them are exactly Spearman's ρ with average
//! ranks; when the maps are frozen and cells are added or retracted, sums stay exact under the
//! frozen maps (the incremental design of docs/DESIGN.md §5.2).

mod batch;
mod extend;
mod pair_counts;
mod params;
mod products;
mod ranks;
mod scores;
mod screen;
mod select;
mod spearman;
mod stats;

pub use batch::BatchWork;
pub use extend::{remap_rows, remap_square, GeneRowSums};
pub use pair_counts::{adjacency_counts, co_presence};
pub use params::GraphParams;
pub use ranks::{RankMaps, ScoreHistograms};
pub use scores::{count_presence, GraphVocab, ScoredCell};
pub use screen::approx_correlations;
pub use select::{candidate_pairs, screened_candidate_pairs, GraphEdge};
pub use spearman::{
    count_scores, doubled_ranks_in_place, rank_cross, rho_of_sums, spearman_average_ranks, OverlapScratch,
};
pub use stats::{global_correlations, GeneMoments, PairSums};
