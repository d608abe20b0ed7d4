//! `ingest` and `vocab`, and how input files are read.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use corrflow::config::{Config, ModelVersion};
use corrflow::formats::{CountsSource, ReadOptions};
use corrflow::tokenize::ValueTransform;

use super::serde_enum;

#[derive(Args, Clone)]
pub(crate) struct ReadArgs {
    /// var column with gene ids (default: the var index; 10x/mtx: 'id' or 'name'; loom: a row
    /// attribute, by default ensembl_id, Accession, gene_ids, Gene or var_names).
    #[arg(long, value_name = "COL")]
    pub(crate) gene_column: Option<String>,
    /// Loom files: the column attribute with the cell names (default: CellID, obs_names,
    /// cell_id or cell_ids, else the only one of distinct strings, else the cells' positions).
    #[arg(long, value_name = "ATTR")]
    pub(crate) loom_cell_names: Option<String>,
    /// Where counts are: X, raw (raw/X) or layer:NAME.
    #[arg(long, default_value = "X", value_parser = clap::value_parser!(CountsSource))]
    pub(crate) counts: CountsSource,
    /// Accept non-integer values (normalized data; tokens are invariant to per-cell scaling).
    #[arg(long)]
    pub(crate) allow_normalized: bool,
    /// Values are log1p-transformed: apply expm1 first (implies --allow-normalized).
    #[arg(long)]
    pub(crate) log1p: bool,
    /// 10x files with several genomes: the one to read (a v2 file of several is refused without it).
    #[arg(long, value_name = "NAME")]
    pub(crate) genome: Option<String>,
}

impl ReadArgs {
    pub(crate) fn read_options(&self, cfg: &Config, obs_columns: Vec<String>) -> ReadOptions {
        ReadOptions {
            counts: self.counts.clone(),
            gene_column: self.gene_column.clone(),
            obs_columns,
            chunk_cells: cfg.ingest.chunk_cells,
            scratch_dir: std::env::temp_dir(),
            genome: self.genome.clone(),
            open_patience: None,
            filter_pass: false,
            cell_names: self.loom_cell_names.clone(),
            shard: None,
        }
    }

    pub(crate) fn transform(&self) -> ValueTransform {
        if self.log1p {
            ValueTransform::Expm1
        } else {
            ValueTransform::None
        }
    }
}

#[derive(Args)]
pub(crate) struct IngestArgs {
    /// Vocabulary: a built-in name (geneformer-v1) or a directory from `vocab build`.
    #[arg(long, default_value = corrflow::vocab::BUILTIN)]
    pub(crate) vocab: String,
    /// Atlas name (one corpus holds many atlases).
    #[arg(long)]
    pub(crate) atlas: String,
    /// Corpus directory.
    #[arg(long, value_name = "CORPUS")]
    pub(crate) out: PathBuf,
    #[command(flatten)]
    pub(crate) read: ReadArgs,
    /// obs columns to carry into the shards (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "A,B")]
    pub(crate) obs_columns: Vec<String>,
    /// A cell-type map (TSV from `ontology map`, edited): one of --obs-columns' labels become
    /// Cell Ontology ids in a `cl_id` column; unmapped labels are counted in the summary.
    #[arg(long, value_name = "MAP.tsv")]
    pub(crate) cell_type_map: Option<PathBuf>,
    /// Geneformer layout of the tokens: v1 (2,048 genes) or v2 (<cls> 4,094 genes <eos>).
    /// (`--version` alone prints corrflow's version.)
    #[arg(long = "model-version", value_parser = serde_enum::<ModelVersion>, value_name = "v1|v2")]
    pub(crate) version: Option<ModelVersion>,
    /// Also write the atlas in Hugging Face `save_to_disk` layout here.
    #[arg(long, value_name = "DIR")]
    pub(crate) hf: Option<PathBuf>,
    /// Discard an interrupted ingest of this atlas instead of resuming it.
    #[arg(long)]
    pub(crate) restart: bool,
    /// Read every cell, also those whose obs column (loom: column attribute) `filter_pass` is
    /// not 1 (by default they are left out, as Geneformer's tokenizer does).
    #[arg(long)]
    pub(crate) ignore_filter_pass: bool,
    /// Write rank tokens only, without each cell's expression (counts in rank order, total):
    /// a smaller corpus that rank models train on, and value models refuse (docs/values.md).
    #[arg(long)]
    pub(crate) ranks_only: bool,
    /// Input files: .h5ad, AnnData zarr stores, loom, 10x .h5, or MatrixMarket directories.
    #[arg(required = true, value_name = "FILE")]
    pub(crate) inputs: Vec<PathBuf>,
}

#[derive(Subcommand)]
pub(crate) enum VocabCommand {
    /// Compute a vocabulary (tokens + medians of nonzero normalized expression) in one pass
    /// (two with --two-pass).
    Build {
        /// Vocabulary directory to write (TSV tables; usable as `--vocab DIR`).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Name recorded for the vocabulary (default: the output directory's name).
        #[arg(long)]
        name: Option<String>,
        /// Relative error bound of the medians, in [1e-6, 0.5) (default: vocab.alpha, 0.001).
        #[arg(long)]
        alpha: Option<f64>,
        /// Leave out genes expressed in fewer cells.
        #[arg(long)]
        min_cells: Option<u64>,
        /// Read the inputs twice, in memory that stays nearly flat as cells are added: a coarse pass
        /// finds each gene's median bucket, a fine pass counts inside it. The same medians, byte
        /// for byte, in about twice the time (default: vocab.two_pass, false).
        #[arg(long)]
        two_pass: bool,
        /// MiB for one pass's median sketches (default: vocab.sketch_memory_mb, 128; 0: no
        /// limit). Past it, the pages of each gene's range farthest from its median are folded
        /// into counts; a gene whose median then moves into them is counted again in a second
        /// read. The same medians either way.
        #[arg(long, value_name = "MIB")]
        sketch_memory_mb: Option<u64>,
        #[command(flatten)]
        read: ReadArgs,
        /// Count every cell, also those whose `filter_pass` is not 1 (as `ingest`).
        #[arg(long)]
        ignore_filter_pass: bool,
        /// Input files: .h5ad, AnnData .zarr stores, .loom, 10x .h5, or MatrixMarket directories.
        #[arg(required = true, value_name = "FILE")]
        inputs: Vec<PathBuf>,
    },
}
