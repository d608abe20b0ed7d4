//! `ontology`, `annotate` and `train --hce-*` arguments: the Cell Ontology, label maps and the
//! hierarchical cell-type head.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use corrflow::model::Pooling;

use super::{serde_enum, CellsArgs, ReadArgs};

#[derive(Subcommand)]
pub(crate) enum OntologyCommand {
    /// Propose Cell Ontology ids for the labels of an obs column (exact label or synonym match,
    /// ignoring case and punctuation): a TSV to check, edit and pass to `ingest --cell-type-map`.
    Map {
        /// The ontology (datasets/data/CL-ontology-*.json.zst).
        #[arg(long, value_name = "FILE")]
        ontology: PathBuf,
        /// The cell file with the labels.
        #[arg(long, value_name = "FILE.h5ad")]
        labels: PathBuf,
        /// The obs column with the labels.
        #[arg(long, value_name = "COL")]
        column: String,
        /// Where the TSV goes.
        #[arg(long, value_name = "MAP.tsv")]
        out: PathBuf,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Look terms up by id, label or synonym: parents, depth, leaves under them.
    Show {
        /// The ontology (datasets/data/CL-ontology-*.json.zst).
        #[arg(long, value_name = "FILE")]
        ontology: PathBuf,
        /// Ids, labels or synonyms.
        #[arg(required = true, value_name = "TERM")]
        terms: Vec<String>,
    },
}

/// Multitask pre-training with a hierarchical cell-type head (BMFM-RNA's HCE).
#[derive(Args, Clone, Default)]
pub(crate) struct HceArgs {
    /// Add a hierarchical cross-entropy head over this ontology (datasets/data/CL-ontology-*.json.zst),
    /// trained on the corpus' --hce-column next to the reconstruction objective.
    #[arg(long, value_name = "FILE")]
    pub(crate) hce_ontology: Option<PathBuf>,
    /// The obs column of term ids (from `ingest --cell-type-map`).
    #[arg(long, default_value = "cl_id", value_name = "COL", requires = "hce_ontology")]
    pub(crate) hce_column: String,
    /// Weight of the hierarchical loss next to the reconstruction loss.
    #[arg(long, default_value_t = 1.0, requires = "hce_ontology")]
    pub(crate) hce_weight: f64,
    /// Reconstruction-only steps before the hierarchical loss starts.
    #[arg(long, default_value_t = 0, value_name = "STEPS", requires = "hce_ontology")]
    pub(crate) hce_warmup: u64,
    /// The cell vector the head reads: mean (default) or cls (V2 models).
    #[arg(long, value_parser = serde_enum::<Pooling>, value_name = "mean|cls", requires = "hce_ontology")]
    pub(crate) hce_pooling: Option<Pooling>,
}

impl HceArgs {
    pub(crate) fn options(&self) -> Option<corrflow::train::hce::HceOptions> {
        self.hce_ontology.as_ref().map(|o| corrflow::train::hce::HceOptions {
            ontology: o.clone(),
            column: self.hce_column.clone(),
            weight: self.hce_weight,
            warmup_steps: self.hce_warmup,
            pooling: self.hce_pooling.unwrap_or_default(),
        })
    }
}

#[derive(Args)]
pub(crate) struct AnnotateArgs {
    #[command(flatten)]
    pub(crate) cells: CellsArgs,
    /// Parquet: cell_id, leaf (id, label, probability), greedy path with probabilities, the
    /// reliable call (id, label, probability, depth).
    #[arg(long, value_name = "FILE")]
    pub(crate) out: PathBuf,
    /// Also write a copy of the input with the calls as obs columns (corrflow_leaf, corrflow_call, ...).
    #[arg(long, value_name = "FILE")]
    pub(crate) h5ad_out: Option<PathBuf>,
    /// τ: the reliable call is the deepest term of the greedy path with probability ≥ τ.
    #[arg(long, default_value_t = 0.5)]
    pub(crate) threshold: f64,
    /// The ontology file: refused unless it is the release the model was trained with.
    #[arg(long, value_name = "FILE")]
    pub(crate) ontology: Option<PathBuf>,
    /// Score the calls against this obs column (term ids, or labels with --truth-map):
    /// exact, ancestor-tolerant and per-depth accuracy, macro-F1 at the labels' level.
    #[arg(long, value_name = "COL")]
    pub(crate) truth: Option<String>,
    /// A cell-type map (TSV) turning --truth's labels into term ids.
    #[arg(long, value_name = "MAP.tsv", requires = "truth")]
    pub(crate) truth_map: Option<PathBuf>,
}
