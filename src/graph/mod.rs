//! The gene dependency graph stage (CorrMask Algorithm 1): corpus in, graph directory out.
//!
//! ```text
//! GRAPH/edges.parquet   u, v (token ids, u < v), rho (ρ_local), rho_global, co_count
//! GRAPH/genes.parquet   token_id, gene_id, presence
//! GRAPH/graph.json      parameters, cells, atlases, edge count, content hash
//! ```

mod build;
mod files;
mod show;

pub use build::{build_exact, load_corpus_cells, BuildSummary, CorpusCells};
pub use files::{read_graph, write_graph, Graph, GraphInfo};
pub use show::show_graph;
