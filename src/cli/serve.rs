//! Arguments of the commands that run a model on cells: `embed`, `perturb`, `serve`, and the
//! model source and ONNX Runtime settings they share.

use std::path::PathBuf;

use clap::Args;
use corrflow::model::Pooling;
use corrflow::runtime::RuntimeDevice;

use corrflow::config::Config;

use super::{bounded, parse_threads, serde_enum, BatchArgs, ReadArgs};

/// Which model encodes the cells (`embed`, `perturb`).
#[derive(Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["checkpoint", "model"])))]
pub(crate) struct ModelSourceArgs {
    /// Checkpoint directory, or a run directory (its latest checkpoint), run by burn.
    #[arg(long, value_name = "CKPT")]
    pub(crate) checkpoint: Option<PathBuf>,
    /// A model written by `export onnx` (its FILE.vocab/ beside it), run by ONNX Runtime.
    #[arg(long, value_name = "FILE.onnx")]
    pub(crate) model: Option<PathBuf>,
}

impl ModelSourceArgs {
    pub(crate) fn source(self) -> corrflow::embed::ModelSource {
        match (self.checkpoint, self.model) {
            (Some(c), _) => corrflow::embed::ModelSource::Checkpoint(c),
            (None, Some(m)) => corrflow::embed::ModelSource::Onnx(m),
            (None, None) => unreachable!("clap requires --checkpoint or --model"),
        }
    }
}

/// The cells a model runs on, and how (`embed`, `annotate`, `perturb`).
#[derive(Args)]
pub(crate) struct CellsArgs {
    #[command(flatten)]
    pub(crate) source: ModelSourceArgs,
    /// Cells: .h5ad, AnnData .zarr (formats 2 and 3), .loom, 10x .h5, or a MatrixMarket
    /// directory; raw counts (see --allow-normalized and --log1p for normalized values).
    #[arg(long, value_name = "FILE")]
    pub(crate) input: PathBuf,
    #[command(flatten)]
    pub(crate) read: ReadArgs,
    #[command(flatten)]
    pub(crate) batching: BatchArgs,
    #[command(flatten)]
    pub(crate) runtime: RuntimeArgs,
}

impl CellsArgs {
    /// The library's description of the run; `obs_columns` are read beside the counts.
    pub(crate) fn run(self, cfg: &Config, obs_columns: Vec<String>, progress: bool) -> corrflow::infer::CellsRun {
        corrflow::infer::CellsRun {
            model: self.source.source(),
            read: self.read.read_options(cfg, obs_columns),
            allow_normalized: self.read.allow_normalized || self.read.log1p,
            transform: self.read.transform(),
            input: self.input,
            batching: self.batching.batching(),
            runtime: self.runtime.options(),
            progress,
        }
    }
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["delete", "overexpress"])))]
pub(crate) struct PerturbArgs {
    #[command(flatten)]
    pub(crate) cells: CellsArgs,
    /// Per-cell output (Parquet): cell_id, genes_present, cosine, shift.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: PathBuf,
    /// Also every other gene's mean embedding shift over the perturbed cells (Parquet: gene_id,
    /// symbol, token_id, n_cells, mean_shift), Geneformer's gene output.
    #[arg(long, value_name = "FILE")]
    pub(crate) genes_out: Option<PathBuf>,
    /// Genes to delete (Ensembl ids or symbols), comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "G1,G2")]
    pub(crate) delete: Vec<String>,
    /// Genes to overexpress (moved to the front of each cell).
    #[arg(long, value_delimiter = ',', value_name = "G1,G2")]
    pub(crate) overexpress: Vec<String>,
    /// A dependency graph: perturb each gene together with its graph partners.
    #[arg(long, value_name = "GRAPH")]
    pub(crate) module: Option<PathBuf>,
    /// Only cells whose obs column has this value (COL=VALUE).
    #[arg(long, value_name = "COL=VALUE")]
    pub(crate) cells_where: Option<String>,
    /// Random gene sets of matched expression for the permutation test (0 to 10,000; each set
    /// encodes every cell again).
    #[arg(long, default_value_t = 20, value_parser = bounded::<0, 10_000>)]
    pub(crate) random_sets: usize,
    /// Seed of the random gene sets.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
}

#[derive(Args)]
pub(crate) struct EmbedArgs {
    #[command(flatten)]
    pub(crate) cells: CellsArgs,
    /// Parquet: cell_id, embedding, the --obs-columns.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: PathBuf,
    /// Also write a copy of the input with obsm["X_corrflow"].
    #[arg(long, value_name = "FILE")]
    pub(crate) h5ad_out: Option<PathBuf>,
    /// obs columns copied into the Parquet (e.g. labels for `eval probe`).
    #[arg(long, value_delimiter = ',', value_name = "A,B")]
    pub(crate) obs_columns: Vec<String>,
    /// mean (over genes, Geneformer's cell mode; default) or cls. ONNX models pool as exported.
    #[arg(long, value_parser = serde_enum::<Pooling>, value_name = "mean|cls")]
    pub(crate) pooling: Option<Pooling>,
    /// Layer whose states are pooled: 1..=layers, 0 = embeddings, −1 = last (default), −2 =
    /// second to last. See --emb-layer for Geneformer's numbering.
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub(crate) layer: i64,
    /// The layer in Geneformer's `emb_layer` numbering: 0 = last, −1 = second to last
    /// (Geneformer's default), −k = k layers before the last. Same as --layer (EMB_LAYER − 1).
    #[arg(long, allow_hyphen_values = true, conflicts_with = "layer", value_name = "EMB_LAYER")]
    pub(crate) emb_layer: Option<i64>,
    /// Gene embeddings instead: each gene's token state averaged over the cells it is expressed
    /// in (Geneformer's gene mode): Parquet with gene_id, symbol, token_id, n_cells, embedding.
    #[arg(long, conflicts_with_all = ["h5ad_out", "obs_columns"])]
    pub(crate) genes: bool,
    /// Embed only part I of N consecutive parts of the input's cells (0 ≤ I < N), so that N
    /// processes or hosts (a SLURM array) split an atlas: their outputs, read in order of I, are
    /// the one-process output row for row.
    #[arg(long, value_name = "I/N", conflicts_with_all = ["h5ad_out", "genes"])]
    pub(crate) shard: Option<corrflow::formats::Shard>,
}

#[derive(Args)]
pub(crate) struct ServeArgs {
    /// A model written by `export onnx` (its FILE.vocab/ beside it).
    #[arg(long, value_name = "FILE.onnx")]
    pub(crate) model: PathBuf,
    /// Address to bind (loopback by default; port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) addr: std::net::SocketAddr,
    #[command(flatten)]
    pub(crate) runtime: RuntimeArgs,
    #[command(flatten)]
    pub(crate) batching: BatchArgs,
    /// How long a partly filled batch waits for more requests (ms, at most 60,000).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub(crate) batch_wait_ms: u64,
    /// Requests waiting for the batcher before new ones get 429 (1 to 1,048,576).
    #[arg(long, default_value_t = 256, value_parser = bounded::<1, 1_048_576>)]
    pub(crate) max_queue: usize,
    /// Larger bodies get 413 (1 byte to 4 GiB).
    #[arg(long, default_value_t = 16 << 20, value_parser = bounded::<1, 4_294_967_296>)]
    pub(crate) max_body_bytes: usize,
    /// Request bodies over --small-body-bytes held at once (MiB, declared lengths; at least one
    /// largest body): a request that would pass it gets 429 before its body is read. 1 to
    /// 1,048,576.
    #[arg(long, default_value_t = 256, value_parser = bounded::<1, 1_048_576>)]
    pub(crate) max_inflight_mb: usize,
    /// Most cells in one request (more: 413; 1 to 1,048,576).
    #[arg(long, default_value_t = 1024, value_parser = bounded::<1, 1_048_576>)]
    pub(crate) max_cells: usize,
    /// Seconds a client has to send a request's headers, and then its whole body (1 to 3,600):
    /// a stalled upload gets 408 and its connection is closed; a refused body is read and
    /// dropped for at most this long.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) body_timeout_s: u64,
    /// The slowest a request body may arrive, in bytes/s on average since the request head,
    /// checked from --body-grace-s on: a slower upload gets 408 and its connection is closed,
    /// and a refused body slower than that stops being drained (0 = no minimum; at most 1 GiB/s).
    #[arg(long, default_value_t = 1024, value_parser = bounded::<0, 1_073_741_824>)]
    pub(crate) min_body_bytes_per_s: usize,
    /// Seconds before --min-body-bytes-per-s is checked (1 to 3,600; at or past
    /// --body-timeout-s the minimum rate is never checked).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) body_grace_s: u64,
    /// Bodies declaring at most this many bytes are read before admission and take a request
    /// slot only once they have arrived, so that slow large uploads cannot take every slot;
    /// larger ones (and bodies of undeclared length) are admitted first, at most --max-queue at
    /// once (0 to 16 MiB; 0 = admit every body before reading it).
    #[arg(long, default_value_t = 64 << 10, value_parser = bounded::<0, 16_777_216>)]
    pub(crate) small_body_bytes: usize,
    /// Require `Authorization: Bearer TOKEN` (all routes but /health).
    #[arg(long, env = "CORRFLOW_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Accept non-integer counts (normalized data), as `ingest --allow-normalized` does;
    /// without it such a request gets 422, as ingest refuses such a file.
    #[arg(long)]
    pub(crate) allow_normalized: bool,
}

/// ONNX Runtime settings (`--model`, `serve`).
#[derive(Args, Clone)]
pub(crate) struct RuntimeArgs {
    /// ONNX Runtime intra-op threads (0 = one per core; at most 16 per core).
    #[arg(long, default_value_t = 0, value_parser = parse_threads)]
    pub(crate) threads: usize,
    /// cpu, or cuda (CUDA execution provider; needs the onnxruntime-gpu library).
    #[arg(long = "ort-device", value_parser = serde_enum::<RuntimeDevice>, value_name = "cpu|cuda", default_value = "cpu")]
    pub(crate) device: RuntimeDevice,
}

impl RuntimeArgs {
    pub(crate) fn options(&self) -> corrflow::runtime::RuntimeOptions {
        corrflow::runtime::RuntimeOptions { threads: self.threads, device: self.device }
    }
}
