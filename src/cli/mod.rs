//! The command-line interface: subcommands and their arguments (clap derive).

mod eval;
pub(crate) mod finetune;
mod graph;
mod ingest;
pub(crate) mod ontology;
mod serve;
pub(crate) mod synth;
mod values;

pub(crate) use eval::EvalCellsArgs;
pub(crate) use graph::{BatchArgs, GraphCommand};
pub(crate) use ingest::{IngestArgs, ReadArgs, VocabCommand};
pub(crate) use serve::{CellsArgs, EmbedArgs, PerturbArgs, RuntimeArgs, ServeArgs};
pub(crate) use values::{bounded, parse_threads};

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use corrflow::model::Pooling;
use corrflow::train::Device;
use corrflow_algorithms::mask::MaskStrategy;

#[derive(Parser)]
#[command(
    name = "corrflow",
    version,
    propagate_version = true,
    about = "Single-cell atlases to CorrMask-pretrained, servable foundation models"
)]
pub(crate) struct Cli {
    /// TOML config (presets in configs/); command-line flags override it.
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Print a machine-readable JSON summary as the last line.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// More logging (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
    #[command(subcommand)]
    pub(crate) command: Command,
}

impl Cli {
    /// Parses the command line, exiting with clap's message on an error. Every option that takes
    /// a value accepts a negative number as that value (`--lr -1`), so the value's own check
    /// names the flag and its bound instead of clap reading `-1` as an unknown flag.
    pub(crate) fn parse_args() -> Self {
        use clap::{CommandFactory, FromArgMatches};
        let matches = values::negative_values(Self::command()).get_matches();
        Self::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run the pipeline on the bundled dataset (1,000 real PBMCs), offline.
    Demo {
        /// Output directory (recreated on each run).
        #[arg(long, default_value = "corrflow-demo")]
        out: PathBuf,
    },
    /// Tokenize single-cell files into a token-shard corpus.
    Ingest(IngestArgs),
    /// Gene vocabularies.
    #[command(subcommand)]
    Vocab(VocabCommand),
    /// Export a corpus to other formats.
    #[command(subcommand)]
    Export(ExportCommand),
    /// The gene dependency graph (CorrMask Algorithm 1).
    #[command(subcommand)]
    Graph(GraphCommand),
    /// Masking (CorrMask Algorithm 2 and its baselines).
    #[command(subcommand)]
    Mask(MaskCommand),
    /// Cell embeddings of an h5ad from a checkpoint (burn) or an exported model (ONNX Runtime):
    /// Parquet, optionally obsm["X_corrflow"] in an h5ad copy.
    Embed(EmbedArgs),
    /// HTTP embedding server for an exported model: POST /v1/embed, GET /health, /info,
    /// /metrics, /openapi.json.
    Serve(ServeArgs),
    /// Evaluations of embeddings.
    #[command(subcommand)]
    Eval(EvalCommand),
    /// Synthetic experiments of the CorrMask paper (Appendix B; section [synth] of the config).
    #[command(subcommand)]
    Synth(synth::SynthCommand),
    /// Pre-train the encoder (sections [model], [train] and [mask] of the config); resumes from
    /// the latest checkpoint in --out.
    Train(TrainArgs),
    /// Fine-tune a pre-trained checkpoint to classify cells (an obs column) or genes (a labels
    /// CSV): stratified split, early stopping on validation macro-F1, test scores and predictions.
    Finetune(finetune::FinetuneArgs),
    /// In-silico perturbation: delete or overexpress genes in every cell and measure how far the
    /// cell embeddings move, against random gene sets of matched expression.
    Perturb(PerturbArgs),
    /// Import published models as corrflow checkpoints.
    #[command(subcommand)]
    Import(ImportCommand),
    /// The Cell Ontology: propose label maps, look terms up.
    #[command(subcommand)]
    Ontology(ontology::OntologyCommand),
    /// Cell Ontology calls at every depth from a model with a hierarchical head (`train
    /// --hce-ontology`): leaf, greedy path and the reliable call, each with its probability.
    Annotate(ontology::AnnotateArgs),
}

#[derive(Subcommand)]
pub(crate) enum ImportCommand {
    /// A Hugging Face BERT directory (config.json + model.safetensors: BertForMaskedLM,
    /// BertForSequenceClassification's encoder, BertModel), as Geneformer's models ship, into a
    /// run directory usable by `export onnx`, `embed` and `train`.
    Hf {
        /// The model directory.
        #[arg(long, value_name = "DIR")]
        model: PathBuf,
        /// Its vocabulary: a built-in name (geneformer-v1), a directory of TSV tables, or a
        /// directory of Geneformer's pickled dictionaries (token_dictionary*.pkl, ...). Default:
        /// the one the model directory carries (DIR/vocab/, or DIR's pickles, as `export
        /// hf-model` and `corrflow.pretrain` write them), else geneformer-v1.
        #[arg(long)]
        vocab: Option<String>,
        /// v2: the vocabulary gains <cls> and <eos> (Geneformer V2's layout), as with ingest.
        /// (`--version` alone prints corrflow's version.)
        #[arg(long = "model-version", value_parser = serde_enum::<corrflow::config::ModelVersion>, value_name = "v1|v2", default_value = "v1")]
        version: corrflow::config::ModelVersion,
        /// The new run directory (its vocab/ and checkpoints/step-00000000/).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// A value model (objective txfm or wced) trained by `corrflow.pretrain` in PyTorch: its
    /// RUN/values/ directory (config.json, model.safetensors, vocab/, corrflow_sha256.txt) into
    /// a run directory usable by `export onnx`, `embed`, `serve` and `annotate`.
    Values {
        /// The value model directory (RUN/values/ of a `corrflow.pretrain` run).
        #[arg(long, value_name = "DIR")]
        model: PathBuf,
        /// The new run directory (its vocab/ and one checkpoint at the model's step).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

#[derive(Args)]
pub(crate) struct TrainArgs {
    /// Run directory: metrics.jsonl, checkpoints/, vocab/.
    #[arg(long, value_name = "DIR", default_value = "corrflow-run")]
    pub(crate) out: PathBuf,
    /// Overrides train.corpus.
    #[arg(long, value_name = "CORPUS")]
    pub(crate) corpus: Option<PathBuf>,
    /// Overrides train.graph.
    #[arg(long, value_name = "GRAPH")]
    pub(crate) graph: Option<PathBuf>,
    /// Overrides mask.strategy.
    #[arg(long, value_parser = parse_strategy)]
    pub(crate) strategy: Option<MaskStrategy>,
    /// Overrides mask.lambda.
    #[arg(long)]
    pub(crate) lambda: Option<f64>,
    /// Overrides train.max_steps: the run ends at whichever comes first, these optimiser steps
    /// or the last step of the epochs (train.epochs, --epochs); a --max-steps the epochs do not
    /// reach is warned about and named in the summary.
    #[arg(long)]
    pub(crate) max_steps: Option<u64>,
    /// Overrides train.epochs: passes over the training cells (1 to 1,000,000).
    #[arg(long, value_parser = bounded::<1, 1_000_000>)]
    pub(crate) epochs: Option<usize>,
    /// Overrides train.seed and mask.seed.
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// cpu, cuda, cuda-kernels (CUDA with corrflow's fused kernels) or wgpu (overrides
    /// train.device; the GPU ones need a build with that feature).
    #[arg(long, value_parser = serde_enum::<Device>, value_name = "cpu|cuda|cuda-kernels|wgpu")]
    pub(crate) device: Option<Device>,
    /// Discard the checkpoints in --out instead of resuming.
    #[arg(long)]
    pub(crate) restart: bool,
    /// Log each step's phases (prepare, forward, backward, clip, optimizer) in milliseconds
    /// as `phase_ms` in metrics.jsonl, waiting for the device after each (slows training).
    #[arg(long)]
    pub(crate) profile_steps: bool,
    /// Stop after this optimiser step, with a checkpoint there, as a preempted job would; the
    /// same command resumes the run to the weights an uninterrupted one reaches (the schedule
    /// still ends at --max-steps). For schedulers that give jobs time slices.
    #[arg(long, value_name = "STEP")]
    pub(crate) stop_at_step: Option<u64>,
    /// Append each step's batch (input_ids, attention_mask, labels) as a JSON line to FILE,
    /// outside the step timing: what `benches/train_cpu.sh` replays in PyTorch.
    #[arg(long, value_name = "FILE")]
    pub(crate) dump_batches: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) hce: ontology::HceArgs,
    /// Start from this pre-trained checkpoint's weights (encoder, MLM head) instead of a random
    /// initialisation: with --hce-ontology, fine-tuning a pre-trained model with the
    /// hierarchical head (same architecture and vocabulary).
    #[arg(long, value_name = "CKPT")]
    pub(crate) init_from: Option<PathBuf>,
}

#[derive(Subcommand)]
pub(crate) enum MaskCommand {
    /// Mask every cell of a corpus and print the paper's Table 3 (mean span, conditional hit
    /// rate) with the masked and structural fractions.
    Audit {
        /// Corpus directory (from `ingest`).
        #[arg(long, value_name = "CORPUS")]
        corpus: PathBuf,
        /// Graph directory (from `graph build`), built from the same vocabulary.
        #[arg(long, value_name = "GRAPH")]
        graph: PathBuf,
        /// Strategies, comma-separated: random, pmi, pmi-rand, corrmask (default: the config's).
        #[arg(long, value_delimiter = ',', value_parser = parse_strategy)]
        strategy: Vec<MaskStrategy>,
        /// CorrMask's structural ratio λ (1.0 = CorrMask-100).
        #[arg(long)]
        lambda: Option<f64>,
        /// Masking rate p.
        #[arg(long)]
        p: Option<f64>,
        /// Masking seed (overrides mask.seed).
        #[arg(long)]
        seed: Option<u64>,
        /// Epoch whose masks to draw (masks are seeded by seed, epoch and cell).
        #[arg(long, default_value_t = 0)]
        epoch: u64,
        /// Atlases to include (default: all).
        #[arg(long, value_delimiter = ',')]
        atlas: Vec<String>,
        /// Write every cell's masked positions (Parquet: cell_id, positions, structural).
        #[arg(long, value_name = "FILE")]
        dump: Option<PathBuf>,
        /// Also audit CorrMask at each of these λ, e.g. 0,0.25,0.5,0.75,1.
        #[arg(long, value_delimiter = ',', value_name = "L,L,...")]
        sweep: Vec<f64>,
        /// SVG plot of the sweep.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub(crate) enum EvalCommand {
    /// Cell embeddings judged beside PCA / HVG / random-projection baselines computed from the
    /// same cells in the same run: Leiden clustering (ARI, NMI), label silhouette, logistic and
    /// k-NN probes, and with --batch the batch-mixing metrics (scib-metrics' definitions).
    Cells(Box<EvalCellsArgs>),
    /// Probes of frozen cell embeddings under seeded stratified k-fold cross-validation: a
    /// logistic regression and a cosine k-NN vote; accuracy, macro-F1, per-class F1 and AUROC,
    /// mean ± sd over the folds.
    Probe {
        /// Parquet from `embed` with the label column (`--obs-columns`).
        #[arg(long, value_name = "FILE")]
        embeddings: PathBuf,
        /// Label column of the embeddings file.
        #[arg(long)]
        label: String,
        /// Stratified folds; 1 = one seeded split holding out --test-fraction of each class.
        #[arg(long, default_value_t = 5)]
        folds: usize,
        /// Held-out share of each class with --folds 1.
        #[arg(long, default_value_t = 0.2)]
        test_fraction: f64,
        /// Neighbours of the k-NN vote.
        #[arg(long, default_value_t = 10)]
        neighbours: usize,
        /// Share of classes (rarest first) whose macro-F1 is reported separately.
        #[arg(long, default_value_t = 0.25)]
        rare_fraction: f64,
        /// L2 penalty.
        #[arg(long, default_value_t = 1.0)]
        alpha: f64,
        /// Most optimiser iterations of the logistic regression.
        #[arg(long, default_value_t = 200)]
        max_iterations: u64,
        /// Seed of the folds.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Classes to leave out, comma-separated (e.g. Mouse,Unknown).
        #[arg(long, value_delimiter = ',')]
        exclude: Vec<String>,
    },
    /// Binary gene classification on gene embeddings (`embed --genes`), stratified k-fold AUROC
    /// of a logistic regression and a cosine k-NN vote (Geneformer's dosage-sensitivity task).
    Genes {
        /// Parquet from `embed --genes`.
        #[arg(long, value_name = "FILE")]
        embeddings: PathBuf,
        /// CSV with a header: a gene id column and a column each marking positives and negatives.
        #[arg(long, value_name = "FILE.csv")]
        labels: PathBuf,
        /// The labels' column of gene ids.
        #[arg(long, default_value = "ensembl_id")]
        id_column: String,
        /// The labels' column marking positive genes.
        #[arg(long, default_value = "dosage_sensitive")]
        positive: String,
        /// The labels' column marking negative genes.
        #[arg(long, default_value = "dosage_insensitive")]
        negative: String,
        /// Stratified folds of the cross-validation.
        #[arg(long, default_value_t = 5)]
        folds: usize,
        /// Seed of the folds.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// L2 penalty of the logistic regression.
        #[arg(long, default_value_t = 1.0)]
        alpha: f64,
        /// Neighbours of the k-NN vote.
        #[arg(long, default_value_t = 10)]
        neighbours: usize,
    },
}

pub(crate) fn parse_strategy(s: &str) -> std::result::Result<MaskStrategy, String> {
    MaskStrategy::parse(s).ok_or_else(|| format!("unknown strategy '{s}' ({})", MaskStrategy::names()))
}

#[derive(Subcommand)]
pub(crate) enum ExportCommand {
    /// Hugging Face `datasets` save_to_disk layout (Arrow IPC stream files).
    Hf {
        /// Corpus directory (from `ingest`).
        #[arg(long, value_name = "CORPUS")]
        corpus: PathBuf,
        /// Atlases to export (default: all).
        #[arg(long, value_delimiter = ',')]
        atlas: Vec<String>,
        /// Output directory (`datasets.load_from_disk` reads it).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// A checkpoint as a Hugging Face BertForMaskedLM directory (config.json, model.safetensors,
    /// the vocabulary as TSV tables and Geneformer's pickles); heads BERT has no slot for go to
    /// corrflow_heads.safetensors beside it. `import hf` reads it back bit for bit.
    HfModel {
        /// Checkpoint directory, or a run directory (its latest checkpoint).
        #[arg(long, value_name = "CKPT")]
        checkpoint: PathBuf,
        /// The model directory (replaced whole when it is one already).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// A checkpoint's encoder as ONNX (opset 17, dynamic batch and sequence axes), with its
    /// vocabulary beside it (FILE.vocab/).
    Onnx {
        /// Checkpoint directory, or a run directory (its latest checkpoint).
        #[arg(long, value_name = "CKPT")]
        checkpoint: PathBuf,
        /// The ONNX file to write (its vocabulary goes to FILE.vocab/).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// What the cell_embedding output pools: mean over genes, or the <cls> state (V2). Default:
        /// mean for rank models, cls for value models (their embedding is the CLS state).
        #[arg(long, value_parser = serde_enum::<Pooling>, value_name = "mean|cls")]
        pooling: Option<Pooling>,
        /// The layer whose states the model outputs, numbered as embed's --layer (-1 = last,
        /// -2 = second to last, 1..=layers); the model keeps the layers up to it.
        #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
        layer: i64,
        /// The same in Geneformer's emb_layer numbering (0 = last, -1 = second to last).
        #[arg(long, allow_hyphen_values = true, conflicts_with = "layer", value_name = "EMB_LAYER")]
        emb_layer: Option<i64>,
    },
}

/// Parses a flag value into one of the library's enums by its serde name (`cpu`, `mean`, `v2`,
/// ...), so the library needs no clap; an unknown value's error lists the accepted ones.
pub(crate) fn serde_enum<T: serde::de::DeserializeOwned>(s: &str) -> std::result::Result<T, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// `--help` of every subcommand documents every argument: a blank line in a help listing
    /// says nothing about what the flag does.
    #[test]
    fn every_argument_of_every_subcommand_has_help_text() {
        fn walk(cmd: &clap::Command, path: &str, blank: &mut Vec<String>) {
            for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                let help = a.get_long_help().or(a.get_help()).map(|h| h.to_string()).unwrap_or_default();
                if help.trim().is_empty() {
                    let name = a.get_long().map_or_else(|| format!("<{}>", a.get_id()), |l| format!("--{l}"));
                    blank.push(format!("{path} {name}"));
                }
            }
            for s in cmd.get_subcommands() {
                walk(s, &format!("{path} {}", s.get_name()), blank);
            }
        }
        let mut cmd = super::Cli::command();
        cmd.build();
        let mut blank = Vec::new();
        walk(&cmd, "corrflow", &mut blank);
        assert!(blank.is_empty(), "arguments without help text:\n{}", blank.join("\n"));
    }

    /// `--version` prints the program's version after any subcommand: no subcommand has a
    /// `--version` flag of its own that would shadow it.
    #[test]
    fn version_is_the_programs_after_every_subcommand() {
        for args in [
            &["corrflow", "--version"][..],
            &["corrflow", "ingest", "--version"],
            &["corrflow", "import", "hf", "--version"],
        ] {
            let e = super::Cli::command().try_get_matches_from(args).expect_err("--version exits");
            assert_eq!(e.kind(), clap::error::ErrorKind::DisplayVersion, "{args:?}: {e}");
        }
    }

    /// `train --device` names every device the trainer accepts, each of which parses.
    #[test]
    fn train_device_help_lists_every_device() {
        let cmd = super::Cli::command();
        let train = cmd.find_subcommand("train").expect("train");
        let device = train.get_arguments().find(|a| a.get_id() == "device").expect("--device");
        let help = device.get_help().map(|h| h.to_string()).unwrap_or_default();
        for d in ["cpu", "cuda", "cuda-kernels", "wgpu"] {
            assert!(super::serde_enum::<corrflow::train::Device>(d).is_ok(), "{d}");
            assert!(help.contains(d), "train --help does not name device '{d}':\n{help}");
        }
    }
}
