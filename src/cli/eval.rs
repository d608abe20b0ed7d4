//! `eval cells`: its arguments.

use std::path::PathBuf;

use clap::Args;

use super::{BatchArgs, ReadArgs, RuntimeArgs};

/// Embeddings of cells judged beside baselines computed from the same cells in the same run.
#[derive(Args)]
pub(crate) struct EvalCellsArgs {
    /// Embeddings from `corrflow embed` (Parquet: cell_id, embedding); repeat to compare models.
    #[arg(long, value_name = "E.parquet")]
    pub(crate) embeddings: Vec<PathBuf>,
    /// Names of the --embeddings / --model / --checkpoint methods, in that order
    /// (default: "embeddings" for one, else the file names).
    #[arg(long, value_delimiter = ',', value_name = "A,B")]
    pub(crate) name: Vec<String>,
    /// Embed --input with an exported model first (ONNX Runtime).
    #[arg(long, value_name = "FILE.onnx")]
    pub(crate) model: Option<PathBuf>,
    /// Embed --input with a checkpoint first (burn).
    #[arg(long, value_name = "CKPT")]
    pub(crate) checkpoint: Option<PathBuf>,
    /// The cells (h5ad, 10x HDF5 or MatrixMarket): their labels, batches and counts.
    #[arg(long, value_name = "FILE")]
    pub(crate) input: PathBuf,
    #[command(flatten)]
    pub(crate) read: ReadArgs,
    /// obs column with the cell labels (e.g. cell types).
    #[arg(long, value_name = "COL")]
    pub(crate) label: String,
    /// obs column with batches: adds batch silhouette, graph connectivity, iLISI and cLISI.
    #[arg(long, value_name = "COL")]
    pub(crate) batch: Option<String>,
    /// Labels whose cells are left out, comma-separated (e.g. Unknown).
    #[arg(long, value_delimiter = ',', value_name = "A,B")]
    pub(crate) exclude: Vec<String>,
    /// Skip the PCA / HVG / random baselines (not recommended: nothing to compare with).
    #[arg(long)]
    pub(crate) no_baselines: bool,
    /// k-NN graph size, the cell itself included (scanpy's n_neighbors; 2 to 1,000).
    #[arg(long, default_value_t = 15, allow_negative_numbers = true)]
    pub(crate) neighbours: usize,
    /// Neighbours of iLISI / cLISI, the cell itself included (scib-metrics: 90; 2 to 1,000).
    #[arg(long, default_value_t = 90, allow_negative_numbers = true)]
    pub(crate) lisi_neighbours: usize,
    /// Leiden resolutions, comma-separated (each in (0, 100]; default scib-metrics' 0.2..2.0).
    #[arg(
        long,
        value_delimiter = ',',
        allow_negative_numbers = true,
        default_value = "0.2,0.4,0.6,0.8,1.0,1.2,1.4,1.6,1.8,2.0"
    )]
    pub(crate) resolutions: Vec<f64>,
    /// Highly variable genes of the baselines (1 to 100,000; more than the input has keeps every
    /// gene that varies, as scanpy does, and the report notes it).
    #[arg(long, default_value_t = 2000, allow_negative_numbers = true)]
    pub(crate) n_top_genes: usize,
    /// Principal components of the PCA baseline (1 to 1,000).
    #[arg(long, default_value_t = 50, allow_negative_numbers = true)]
    pub(crate) n_comps: usize,
    /// Stratified folds of the probes (2 to 100); classes with fewer cells are left out of the
    /// probes (and listed), as they cannot be tested in every fold.
    #[arg(long, default_value_t = 5, allow_negative_numbers = true)]
    pub(crate) folds: usize,
    /// L2 penalty of the logistic probe (1e-4 to 1e6: below, separable classes do not converge;
    /// above, every weight is zero).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub(crate) alpha: f64,
    /// Neighbours of the k-NN probe (1 to 1,000).
    #[arg(long, default_value_t = 10, allow_negative_numbers = true)]
    pub(crate) probe_neighbours: usize,
    /// Seed of Leiden, the folds and the random projection.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Also draw the methods (two principal components, coloured by label) and their scores.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) plot: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) batching: BatchArgs,
    #[command(flatten)]
    pub(crate) runtime: RuntimeArgs,
}
