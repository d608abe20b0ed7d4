//! `graph` and the batching and cluster arguments it shares with `mask`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Subcommand)]
pub(crate) enum GraphCommand {
    /// Build the graph from a corpus, exactly as Algorithm 1 defines it. With `--incremental`
    /// the shards are streamed by a timely dataflow (`-w`/`-n`/`-p`/`-h` as for `update`).
    #[command(disable_help_flag = true)]
    Build {
        /// Corpus directory (from `ingest`).
        #[arg(long, value_name = "CORPUS")]
        corpus: PathBuf,
        /// Graph directory to write (edges.parquet, genes.parquet, graph.json).
        #[arg(long, value_name = "GRAPH")]
        out: PathBuf,
        /// Atlases to include (default: all).
        #[arg(long, value_delimiter = ',')]
        atlas: Vec<String>,
        /// Cells sampled (N_sub); 0 = all cells.
        #[arg(long)]
        n_sub: Option<u64>,
        /// Seed of the N_sub sample.
        #[arg(long)]
        seed: Option<u64>,
        /// Graph vocabulary size (most present genes).
        #[arg(long)]
        max_genes: Option<usize>,
        /// Also keep the incremental state (all cells) for `graph update` and `graph rebase`.
        #[arg(long)]
        incremental: bool,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Print help (`-h` is the host file).
        #[arg(long, action = clap::ArgAction::Help)]
        help: Option<bool>,
    },
    /// Add or retract an atlas, writing only the changes (a delta) and the new state.
    /// The atlas' statistics are computed by a timely dataflow: `-w` worker threads, and with
    /// `-n`/`-p`/`-h` one process per host of a cluster (run the same command on each; process
    /// 0 writes the graph).
    #[command(
        group(clap::ArgGroup::new("change").required(true).args(["add", "retract"])),
        disable_help_flag = true
    )]
    Update {
        /// Graph directory (built with `graph build --incremental`), updated in place.
        #[arg(long, value_name = "GRAPH")]
        graph: PathBuf,
        /// Atlas directory to add (CORPUS/atlases/NAME).
        #[arg(long, value_name = "ATLAS_DIR")]
        add: Option<PathBuf>,
        /// Name of an included atlas to retract.
        #[arg(long, value_name = "NAME")]
        retract: Option<String>,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Print help (`-h` is the host file).
        #[arg(long, action = clap::ArgAction::Help)]
        help: Option<bool>,
    },
    /// Recompute rank maps and statistics from the stored shards (= an exact build), streamed
    /// by the same dataflow as `build --incremental`.
    #[command(disable_help_flag = true)]
    Rebase {
        /// Graph directory (built with `graph build --incremental`), rebuilt in place.
        #[arg(long, value_name = "GRAPH")]
        graph: PathBuf,
        #[command(flatten)]
        cluster: ClusterArgs,
        /// Print help (`-h` is the host file).
        #[arg(long, action = clap::ArgAction::Help)]
        help: Option<bool>,
    },
    /// Print size, degree distribution and a gene's neighbours.
    Show {
        /// Graph directory (from `graph build`).
        #[arg(value_name = "GRAPH")]
        graph: PathBuf,
        /// Gene symbol or Ensembl id whose neighbours to list.
        #[arg(long)]
        gene: Option<String>,
        /// Vocabulary for gene names (default: the built-in one).
        #[arg(long, default_value = corrflow::vocab::BUILTIN)]
        vocab: String,
        /// Neighbours of --gene to list, strongest |ρ| first.
        #[arg(long, default_value_t = 15)]
        top: usize,
    },
}

/// How cells are grouped into model batches (`embed` and `serve`).
#[derive(Args, Clone, Copy)]
pub(crate) struct BatchArgs {
    /// Most cells per model batch (1 to 1,048,576).
    #[arg(long, default_value_t = 64, visible_alias = "batch-size", value_parser = super::bounded::<1, 1_048_576>)]
    pub(crate) max_batch_cells: usize,
    /// Most padded tokens per model batch (cells × longest cell in it; at least 1, and a batch
    /// the model can run in the memory available).
    #[arg(long, default_value_t = 16384, value_parser = super::bounded::<1, { usize::MAX }>)]
    pub(crate) token_budget: usize,
}

impl BatchArgs {
    pub(crate) fn batching(&self) -> corrflow::encode::Batching {
        corrflow::encode::Batching { token_budget: self.token_budget, max_rows: self.max_batch_cells }
    }
}

/// Where a graph dataflow runs (timely's own options).
#[derive(Args, Clone)]
pub(crate) struct ClusterArgs {
    /// Worker threads per process (1 to 16 per core).
    #[arg(short = 'w', long, default_value_t = 1, value_parser = super::parse_threads)]
    pub(crate) workers: usize,
    /// Processes in the cluster (run the same command on each; process 0 writes the graph).
    #[arg(short = 'n', long, default_value_t = 1)]
    pub(crate) processes: usize,
    /// This process' index (0..n).
    #[arg(short = 'p', long, default_value_t = 0)]
    pub(crate) process: usize,
    /// Host file: one host:port per process, in process order.
    #[arg(short = 'h', long, value_name = "FILE")]
    pub(crate) hostfile: Option<PathBuf>,
}

impl ClusterArgs {
    pub(crate) fn cluster(self) -> anyhow::Result<corrflow::graph::Cluster> {
        let ClusterArgs { workers, processes, process, hostfile } = self;
        anyhow::ensure!(workers >= 1 && processes >= 1 && process < processes, "need -w ≥ 1, -n ≥ 1 and 0 ≤ -p < -n");
        Ok(corrflow::graph::Cluster { workers, processes, process, hostfile })
    }
}
