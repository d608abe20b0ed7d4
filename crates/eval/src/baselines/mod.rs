//! The baselines every embedding is judged against, computed from the same cells in the same
//! run, by scanpy's recipe: `pp.normalize_total` (to the median total) → `pp.log1p` →
//! `pp.highly_variable_genes(flavor="seurat", n_top_genes=2000)` → `pp.pca(n_comps=50)`; the
//! log-normalised HVG matrix itself; and a Gaussian random projection of it.

mod hvg;
mod pca;
mod random;

pub use hvg::{highly_variable_genes, log_normalize, CsrMatrix};
pub use pca::{pca, pca_centring};
pub use random::random_projection;
