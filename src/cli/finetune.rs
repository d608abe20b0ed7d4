//! `finetune` arguments: each flag overrides `[finetune]` of the config.

use std::path::PathBuf;

use clap::Args;
use corrflow::model::Pooling;

use super::serde_enum;

#[derive(Args)]
#[command(group(clap::ArgGroup::new("labels").required(true).args(["label", "gene_labels"])))]
pub(crate) struct FinetuneArgs {
    /// The pre-trained checkpoint (or its run directory: the latest checkpoint).
    #[arg(long, value_name = "CKPT")]
    pub(crate) checkpoint: PathBuf,
    /// A corpus tokenized with the model's vocabulary.
    #[arg(long, value_name = "CORPUS")]
    pub(crate) corpus: PathBuf,
    /// Atlases of the corpus to use (default: all).
    #[arg(long, value_delimiter = ',', value_name = "A1,A2")]
    pub(crate) atlases: Vec<String>,
    /// Cell classification: the obs column with the labels (stored with `ingest --obs-columns`).
    #[arg(long, value_name = "COL")]
    pub(crate) label: Option<String>,
    /// Cell classification: label values to leave out (their cells are not used), e.g. doublets.
    #[arg(long, value_delimiter = ',', value_name = "L1,L2", requires = "label")]
    pub(crate) exclude: Vec<String>,
    /// Gene classification: a CSV of gene labels (one column per class, marked Yes/1/true).
    #[arg(long, value_name = "FILE.csv")]
    pub(crate) gene_labels: Option<PathBuf>,
    /// The gene id column of --gene-labels (Ensembl ids or symbols).
    #[arg(long, default_value = "ensembl_id", value_name = "COL")]
    pub(crate) id_column: String,
    /// The class columns of --gene-labels, in class order.
    #[arg(long, value_delimiter = ',', value_name = "C1,C2", requires = "gene_labels")]
    pub(crate) classes: Vec<String>,
    /// Run directory: checkpoints/, vocab/, metrics.jsonl, predictions.parquet, results.json.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: PathBuf,
    /// Overrides finetune.epochs.
    #[arg(long)]
    pub(crate) epochs: Option<usize>,
    /// Overrides finetune.patience (epochs without a better validation macro-F1).
    #[arg(long)]
    pub(crate) patience: Option<usize>,
    /// Overrides finetune.lr.
    #[arg(long)]
    pub(crate) lr: Option<f64>,
    /// Overrides finetune.batch_size.
    #[arg(long)]
    pub(crate) batch_size: Option<usize>,
    /// Overrides finetune.freeze_layers: freeze the embeddings and the first N layers.
    #[arg(long, value_name = "N")]
    pub(crate) freeze_layers: Option<usize>,
    /// Weigh classes by scikit-learn's balanced weights (finetune.class_weights).
    #[arg(long)]
    pub(crate) class_weights: bool,
    /// Overrides finetune.validation_fraction.
    #[arg(long)]
    pub(crate) validation_fraction: Option<f64>,
    /// Overrides finetune.test_fraction.
    #[arg(long)]
    pub(crate) test_fraction: Option<f64>,
    /// Overrides finetune.max_len.
    #[arg(long)]
    pub(crate) max_len: Option<usize>,
    /// mean or cls (overrides finetune.pooling).
    #[arg(long, value_parser = serde_enum::<Pooling>, value_name = "mean|cls")]
    pub(crate) pooling: Option<Pooling>,
    /// Overrides finetune.seed.
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Discard what --out holds (checkpoints, results) and start again.
    #[arg(long)]
    pub(crate) restart: bool,
    /// Stop after this step, writing a checkpoint (running the same command again resumes).
    #[arg(long, value_name = "STEP")]
    pub(crate) stop_at_step: Option<u64>,
}
