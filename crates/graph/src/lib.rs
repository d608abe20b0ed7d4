//! The gene dependency graph stage (CorrMask Algorithm 1): corpus in, graph directory out.
//!
//! ```text
//! GRAPH/edges.parquet   u, v (token ids, u < v), rho (ρ_local), rho_global, co_count
//! GRAPH/genes.parquet   token_id, gene_id, presence
//! GRAPH/graph.json      parameters, cells, atlases, edge count, content hash
//! ```

mod build;
mod changes;
mod gene_stats;
mod local_hist;
mod overlap;
mod parallel;
mod peer_loss;
mod show;
mod state;
mod stats_file;
mod stream;
mod update;

pub use build::{build_exact, BuildSummary};
pub use corrflow_io::graph_files::{read_graph, write_graph, write_graph_with, Graph, GraphInfo, INFO};
pub use parallel::{Cluster, SHARD_BLOCK_CELLS};
pub use show::show_graph;
pub use state::{Drift, GraphState};
pub use update::{build_incremental, rebase, update_add, update_retract, GraphDelta, UpdateSummary};
