//! The `corrflow` command line.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use corrflow::config::{Config, ModelVersion};
use corrflow::ingest::{run_ingest, CountsSource, IngestRequest, ReadOptions};
use corrflow::tokenize::{TokenizeOptions, ValueTransform};
use corrflow::vocab::{build_vocabulary, VocabBuildOptions, Vocabulary};
use corrflow_operators::mask::MaskStrategy;
use corrflow_operators::SequenceLayout;
use serde::Serialize;

#[derive(Parser)]
#[command(name = "corrflow", version, about = "Single-cell atlases to CorrMask-pretrained, servable foundation models")]
struct Cli {
    /// TOML config (presets in configs/); command-line flags override it.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print a machine-readable JSON summary as the last line.
    #[arg(long, global = true)]
    json: bool,
    /// More logging (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
    /// Cell embeddings of an h5ad from a trained encoder (Parquet, optionally obsm in an h5ad copy).
    Embed {
        /// Checkpoint directory, or a run directory (its latest checkpoint).
        #[arg(long, value_name = "CKPT")]
        checkpoint: PathBuf,
        #[arg(long, value_name = "FILE")]
        input: PathBuf,
        /// Parquet: cell_id, embedding, the --obs-columns.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Also write a copy of the input with obsm["X_corrflow"].
        #[arg(long, value_name = "FILE")]
        h5ad_out: Option<PathBuf>,
        #[command(flatten)]
        read: ReadArgs,
        /// obs columns copied into the Parquet (e.g. labels for `eval probe`).
        #[arg(long, value_delimiter = ',', value_name = "A,B")]
        obs_columns: Vec<String>,
        /// mean (over genes, Geneformer's cell mode) or cls.
        #[arg(long, value_enum, default_value = "mean")]
        pooling: corrflow::embed::Pooling,
        /// Layer whose states are pooled: 1..=layers, 0 = embeddings, −1 = last (default).
        #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
        layer: i64,
        #[arg(long, default_value_t = 32)]
        batch_size: usize,
    },
    /// Evaluations of embeddings.
    #[command(subcommand)]
    Eval(EvalCommand),
    /// Pre-train the encoder (sections [model], [train] and [mask] of the config); resumes from
    /// the latest checkpoint in --out.
    Train {
        /// Run directory: metrics.jsonl, checkpoints/, vocab/.
        #[arg(long, value_name = "DIR", default_value = "corrflow-run")]
        out: PathBuf,
        /// Overrides train.corpus.
        #[arg(long, value_name = "CORPUS")]
        corpus: Option<PathBuf>,
        /// Overrides train.graph.
        #[arg(long, value_name = "GRAPH")]
        graph: Option<PathBuf>,
        /// Overrides mask.strategy.
        #[arg(long, value_parser = parse_strategy)]
        strategy: Option<MaskStrategy>,
        /// Overrides mask.lambda.
        #[arg(long)]
        lambda: Option<f64>,
        /// Overrides train.max_steps.
        #[arg(long)]
        max_steps: Option<u64>,
        /// Overrides train.seed and mask.seed.
        #[arg(long)]
        seed: Option<u64>,
        /// cpu or cuda (overrides train.device).
        #[arg(long, value_enum)]
        device: Option<corrflow::train::Device>,
        /// Discard the checkpoints in --out instead of resuming.
        #[arg(long)]
        restart: bool,
    },
}

#[derive(Subcommand)]
enum MaskCommand {
    /// Mask every cell of a corpus and print the paper's Table 3 (mean span, conditional hit
    /// rate) with the masked and structural fractions.
    Audit {
        #[arg(long, value_name = "CORPUS")]
        corpus: PathBuf,
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
enum EvalCommand {
    /// Logistic-regression probe on frozen embeddings (seeded stratified split).
    Probe {
        #[arg(long, value_name = "FILE")]
        embeddings: PathBuf,
        /// Label column of the embeddings file.
        #[arg(long)]
        label: String,
        #[arg(long, default_value_t = 0.2)]
        test_fraction: f64,
        /// Share of classes (rarest first) whose macro-F1 is reported separately.
        #[arg(long, default_value_t = 0.25)]
        rare_fraction: f64,
        /// L2 penalty.
        #[arg(long, default_value_t = 1.0)]
        alpha: f64,
        #[arg(long, default_value_t = 200)]
        max_iterations: u64,
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
}

fn parse_strategy(s: &str) -> std::result::Result<MaskStrategy, String> {
    MaskStrategy::parse(s).ok_or_else(|| format!("unknown strategy '{s}' (random, pmi, pmi-rand, corrmask)"))
}

#[derive(Subcommand)]
enum GraphCommand {
    /// Build the graph from a corpus, exactly as Algorithm 1 defines it.
    Build {
        #[arg(long, value_name = "CORPUS")]
        corpus: PathBuf,
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
        #[arg(long, value_name = "GRAPH")]
        graph: PathBuf,
        /// Atlas directory to add (CORPUS/atlases/NAME).
        #[arg(long, value_name = "ATLAS_DIR")]
        add: Option<PathBuf>,
        /// Name of an included atlas to retract.
        #[arg(long, value_name = "NAME")]
        retract: Option<String>,
        /// Worker threads per process.
        #[arg(short = 'w', long, default_value_t = 1)]
        workers: usize,
        /// Processes in the cluster.
        #[arg(short = 'n', long, default_value_t = 1)]
        processes: usize,
        /// This process' index (0..n).
        #[arg(short = 'p', long, default_value_t = 0)]
        process: usize,
        /// Host file: one host:port per process, in process order.
        #[arg(short = 'h', long, value_name = "FILE")]
        hostfile: Option<PathBuf>,
        #[arg(long, action = clap::ArgAction::Help)]
        help: Option<bool>,
    },
    /// Recompute rank maps and statistics from the stored shards (= an exact build).
    Rebase {
        #[arg(long, value_name = "GRAPH")]
        graph: PathBuf,
    },
    /// Print size, degree distribution and a gene's neighbours.
    Show {
        graph: PathBuf,
        /// Gene symbol or Ensembl id whose neighbours to list.
        #[arg(long)]
        gene: Option<String>,
        /// Vocabulary for gene names (default: the built-in one).
        #[arg(long, default_value = corrflow::vocab::BUILTIN)]
        vocab: String,
        #[arg(long, default_value_t = 15)]
        top: usize,
    },
}

#[derive(Args, Clone)]
struct ReadArgs {
    /// var column with gene ids (default: the var index; 10x/mtx: 'id' or 'name').
    #[arg(long, value_name = "COL")]
    gene_column: Option<String>,
    /// Where counts are: X, raw (raw/X) or layer:NAME.
    #[arg(long, default_value = "X", value_parser = clap::value_parser!(CountsSource))]
    counts: CountsSource,
    /// Accept non-integer values (normalized data; tokens are invariant to per-cell scaling).
    #[arg(long)]
    allow_normalized: bool,
    /// Values are log1p-transformed: apply expm1 first (implies --allow-normalized).
    #[arg(long)]
    log1p: bool,
}

impl ReadArgs {
    fn read_options(&self, cfg: &Config, obs_columns: Vec<String>) -> ReadOptions {
        ReadOptions {
            counts: self.counts.clone(),
            gene_column: self.gene_column.clone(),
            obs_columns,
            chunk_cells: cfg.ingest.chunk_cells,
            scratch_dir: std::env::temp_dir(),
        }
    }

    fn transform(&self) -> ValueTransform {
        if self.log1p {
            ValueTransform::Expm1
        } else {
            ValueTransform::None
        }
    }
}

#[derive(Args)]
struct IngestArgs {
    /// Vocabulary: a built-in name (geneformer-v1) or a directory from `vocab build`.
    #[arg(long, default_value = corrflow::vocab::BUILTIN)]
    vocab: String,
    /// Atlas name (one corpus holds many atlases).
    #[arg(long)]
    atlas: String,
    /// Corpus directory.
    #[arg(long, value_name = "CORPUS")]
    out: PathBuf,
    #[command(flatten)]
    read: ReadArgs,
    /// obs columns to carry into the shards (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "A,B")]
    obs_columns: Vec<String>,
    /// Geneformer layout: v1 (2,048 genes) or v2 (<cls> 4,094 genes <eos>).
    #[arg(long, value_enum)]
    version: Option<ModelVersion>,
    /// Also write the atlas in Hugging Face `save_to_disk` layout here.
    #[arg(long, value_name = "DIR")]
    hf: Option<PathBuf>,
    /// Discard an interrupted ingest of this atlas instead of resuming it.
    #[arg(long)]
    restart: bool,
    /// Input files: .h5ad, 10x .h5, or MatrixMarket directories.
    #[arg(required = true, value_name = "FILE")]
    inputs: Vec<PathBuf>,
}

#[derive(Subcommand)]
enum VocabCommand {
    /// Compute a vocabulary (tokens + medians of nonzero normalized expression) in one pass.
    Build {
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Name recorded for the vocabulary (default: the output directory's name).
        #[arg(long)]
        name: Option<String>,
        /// Relative error bound of the medians.
        #[arg(long)]
        alpha: Option<f64>,
        /// Leave out genes expressed in fewer cells.
        #[arg(long)]
        min_cells: Option<u64>,
        #[command(flatten)]
        read: ReadArgs,
        #[arg(required = true, value_name = "FILE")]
        inputs: Vec<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ExportCommand {
    /// Hugging Face `datasets` save_to_disk layout (Arrow IPC stream files).
    Hf {
        #[arg(long, value_name = "CORPUS")]
        corpus: PathBuf,
        /// Atlases to export (default: all).
        #[arg(long, value_delimiter = ',')]
        atlas: Vec<String>,
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
}

fn print_summary<T: Serialize>(json: bool, human: &str, summary: &T) -> Result<()> {
    println!("{human}");
    if json {
        println!("{}", serde_json::to_string(summary)?);
    }
    Ok(())
}

fn update_line(s: &corrflow::graph::UpdateSummary) -> String {
    if s.delta.is_none() && !s.rebased {
        return format!("{}: {}", s.command, s.change);
    }
    let mut line = format!(
        "{} ({}): {} edges from {} cells; +{} -{} ~{} edges (delta {}); drift mean {:.4} max {:.4}{}",
        s.command,
        s.change,
        s.edges,
        s.cells,
        s.added,
        s.removed,
        s.reweighted,
        s.delta.as_deref().unwrap_or("-"),
        s.drift.mean_ks,
        s.drift.max_ks,
        if s.rebased { "; rebased" } else { "" }
    );
    if s.rebase_recommended && !s.rebased {
        line.push_str("\nrebase recommended: drift is above graph.rebase_drift (run `corrflow graph rebase`)");
    }
    line
}

fn main() {
    let cli = Cli::parse();
    let default_level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    let cfg = match &cli.config {
        Some(p) => Config::load(p)?,
        None => Config::default(),
    };
    let progress = !cli.json;
    match cli.command {
        Command::Demo { out } => {
            let s = corrflow::demo::run_demo(&out, &cfg, progress)?;
            let human = format!(
                "demo: ingested {} of {} bundled PBMCs into {} ({} shards, {:.0} tokens/cell, {:.0} cells/s)\n\
                 first cell's top genes: {}\n\
                 dependency graph: {} genes, {} edges in {:.2}s -> {}\n\
                 CD74's strongest partners: {}\n\
                 masking audit: hit rate random {:.2}% vs CorrMask {:.2}% (mean span {:.3} vs {:.3})\n\
                 pre-training (tiny model, 40 steps, CorrMask): loss {:.3} -> {:.3}, held-out accuracy {:.4} (unigram {:.4}), {:.0} tokens/s -> {}",
                s.ingest.cells_kept,
                s.ingest.cells_read,
                out.join("corpus").display(),
                s.ingest.shards,
                s.mean_tokens_per_cell,
                s.ingest.cells_per_s,
                s.first_cell_top_genes.join(" "),
                s.graph.genes,
                s.graph.edges,
                s.graph.seconds,
                s.graph.out,
                s.cd74_neighbours.iter().map(|(g, r)| format!("{g} ({r:+.2})")).collect::<Vec<_>>().join(", "),
                100.0 * s.audit[0].hit_rate,
                100.0 * s.audit[1].hit_rate,
                s.audit[0].mean_span,
                s.audit[1].mean_span,
                s.train.first_loss.unwrap_or(f64::NAN),
                s.train.last_loss.unwrap_or(f64::NAN),
                s.train.eval_accuracy.unwrap_or(f64::NAN),
                s.train.unigram_accuracy.unwrap_or(f64::NAN),
                s.train.tokens_per_s,
                s.train.checkpoint.as_deref().unwrap_or("-")
            );
            print_summary(cli.json, &human, &s)
        }
        Command::Ingest(a) => {
            let version = a.version.unwrap_or(cfg.ingest.version);
            let mut vocab = Vocabulary::resolve(&a.vocab)?;
            let mut layout = match version {
                ModelVersion::V1 => SequenceLayout::v1(),
                ModelVersion::V2 => {
                    vocab = vocab.with_v2_specials();
                    SequenceLayout::v2(
                        vocab.cls.context("v2 vocabulary has <cls>")?,
                        vocab.eos.context("v2 vocabulary has <eos>")?,
                    )
                }
            };
            if let Some(m) = cfg.ingest.max_genes {
                layout.max_genes = m;
            }
            let req = IngestRequest {
                corpus: a.out.clone(),
                atlas: a.atlas.clone(),
                inputs: a.inputs.clone(),
                vocab,
                read: a.read.read_options(&cfg, a.obs_columns.clone()),
                tokenize: TokenizeOptions {
                    layout,
                    allow_normalized: a.read.allow_normalized || a.read.log1p,
                    transform: a.read.transform(),
                },
                shard_cells: cfg.ingest.shard_cells,
                zstd_level: cfg.ingest.zstd_level,
                restart: a.restart,
                show_progress: progress,
            };
            let s = run_ingest(&req)?;
            let mut human = format!(
                "ingest: atlas '{}': {} cells read, {} kept, {} dropped (no vocabulary gene), {} tokens, {} shards in {:.2}s ({:.0} cells/s, {:.1} MB/s)",
                s.atlas, s.cells_read, s.cells_kept, s.dropped.total(), s.tokens, s.shards, s.seconds, s.cells_per_s, s.mb_per_s
            );
            if let Some(hf) = &a.hf {
                let dir = corrflow::corpus::atlas_dir(&a.out, &a.atlas);
                let rows = corrflow::corpus::export_hf(&[dir], hf)?;
                human.push_str(&format!(
                    "\nexported {rows} cells to {} (Hugging Face save_to_disk layout)",
                    hf.display()
                ));
            }
            print_summary(cli.json, &human, &s)
        }
        Command::Vocab(VocabCommand::Build { out, name, alpha, min_cells, read, inputs }) => {
            let name =
                name.unwrap_or_else(|| out.file_name().map_or("custom".into(), |n| n.to_string_lossy().into_owned()));
            let opts = VocabBuildOptions {
                name,
                read: read.read_options(&cfg, Vec::new()),
                values: TokenizeOptions {
                    layout: SequenceLayout::v1(),
                    allow_normalized: read.allow_normalized || read.log1p,
                    transform: read.transform(),
                },
                alpha: alpha.unwrap_or(cfg.vocab.alpha),
                min_cells: min_cells.unwrap_or(cfg.vocab.min_cells),
            };
            let (_, s) = build_vocabulary(&inputs, &out, &opts)?;
            let human = format!(
                "vocab build: {} genes from {} cells, medians within {:.3}% relative error, written to {}",
                s.genes,
                s.cells,
                s.alpha * 100.0,
                out.display()
            );
            print_summary(cli.json, &human, &s)
        }
        Command::Graph(GraphCommand::Build { corpus, out, atlas, n_sub, seed, max_genes, incremental }) => {
            let mut params = cfg.graph.clone();
            params.n_sub = n_sub.unwrap_or(params.n_sub);
            params.seed = seed.unwrap_or(params.seed);
            params.max_genes = max_genes.unwrap_or(params.max_genes);
            let mut s = if incremental {
                corrflow::graph::build_incremental(&corpus, &atlas, &params, &out)?.1
            } else {
                let (mut graph, s, _) = corrflow::graph::build_exact(&corpus, &atlas, &params)?;
                corrflow::graph::write_graph(&out, &mut graph)?;
                s
            };
            s.out = out.display().to_string();
            let human = format!(
                "graph build: {} genes, {} edges from {} cells in {:.2}s (load {:.2}s, statistics {:.2}s incl. screening products {:.2}s at {:.0} GFLOP/s, exact ρ {:.2}s) -> {}",
                s.genes, s.edges, s.cells, s.seconds, s.seconds_load, s.seconds_statistics, s.seconds_screening, s.screening_gflops, s.seconds_local, out.display()
            );
            print_summary(cli.json, &human, &s)
        }
        Command::Graph(GraphCommand::Update { graph, add, retract, workers, processes, process, hostfile, .. }) => {
            anyhow::ensure!(
                workers >= 1 && processes >= 1 && process < processes,
                "need -w ≥ 1, -n ≥ 1 and 0 ≤ -p < -n"
            );
            let cluster = corrflow::graph::Cluster { workers, processes, process, hostfile };
            let s = match (add, retract) {
                (Some(dir), _) => corrflow::graph::update_add(&graph, &dir, &cluster)?,
                (_, Some(name)) => corrflow::graph::update_retract(&graph, &name, &cluster)?,
                _ => unreachable!("clap requires --add or --retract"),
            };
            let human = update_line(&s);
            print_summary(cli.json, &human, &s)
        }
        Command::Graph(GraphCommand::Rebase { graph }) => {
            let s = corrflow::graph::rebase(&graph)?;
            print_summary(cli.json, &update_line(&s), &s)
        }
        Command::Graph(GraphCommand::Show { graph, gene, vocab, top }) => {
            let g = corrflow::graph::read_graph(&graph)?;
            let vocab = Vocabulary::resolve(&vocab).ok();
            let report = corrflow::graph::show_graph(&g, Some(&graph), vocab.as_ref(), gene.as_deref(), top)
                .map_err(anyhow::Error::msg)?;
            let summary = serde_json::json!({"command": "graph show", "info": g.info});
            print_summary(cli.json, report.trim_end(), &summary)
        }
        Command::Mask(MaskCommand::Audit {
            corpus,
            graph,
            strategy,
            lambda,
            p,
            seed,
            epoch,
            atlas,
            dump,
            sweep,
            plot,
        }) => {
            let mut params = cfg.mask.clone();
            params.lambda = lambda.unwrap_or(params.lambda);
            params.p = p.unwrap_or(params.p);
            params.seed = seed.unwrap_or(params.seed);
            params.validate().map_err(anyhow::Error::msg)?;
            let strategies = if strategy.is_empty() { vec![params.strategy] } else { strategy };
            let req = corrflow::mask::AuditRequest {
                corpus,
                graph,
                atlases: atlas,
                strategies,
                params,
                sweep,
                epoch,
                dump,
                plot,
                progress,
            };
            let report = corrflow::mask::audit_command(&req)?;
            corrflow::mask::print_table(&report.rows);
            if !report.sweep.is_empty() {
                println!("\nλ sweep (CorrMask):");
                corrflow::mask::print_table(&report.sweep);
            }
            let mut human =
                format!("{} cells; graph {} genes / {} edges", report.cells, report.graph_genes, report.graph_edges);
            if let Some(n) = report.pmi_pairs {
                human.push_str(&format!("; {n} PMI-linked pairs"));
            }
            for (what, f) in [("dump", &report.dump), ("plot", &report.plot)] {
                if let Some(f) = f {
                    human.push_str(&format!("; {what} -> {f}"));
                }
            }
            print_summary(cli.json, &human, &report)
        }
        Command::Train { out, corpus, graph, strategy, lambda, max_steps, seed, device, restart } => {
            let mut train = cfg.train.clone();
            let mut mask = cfg.mask.clone();
            train.corpus = corpus.or(train.corpus);
            train.graph = graph.or(train.graph);
            train.max_steps = max_steps.unwrap_or(train.max_steps);
            train.device = device.unwrap_or(train.device);
            mask.strategy = strategy.unwrap_or(mask.strategy);
            mask.lambda = lambda.unwrap_or(mask.lambda);
            if let Some(s) = seed {
                train.seed = s;
                mask.seed = s;
            }
            let stop_after = std::env::var("CORRFLOW_TEST_STOP_AFTER_STEPS").ok().and_then(|v| v.parse().ok());
            let req = corrflow::train::TrainRequest {
                model: cfg.model.clone(),
                train,
                mask,
                out: out.clone(),
                restart,
                progress,
                stop_after,
            };
            let s = corrflow::train::train_on_device(&req)?;
            let fmt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.4}"));
            let human = format!(
                "train: {} of {} steps ({}), {} parameters, loss {} -> {}, eval loss {} accuracy {} (unigram baseline {}), {:.0} tokens/s -> {}",
                s.steps,
                s.total_steps,
                s.resumed_from.map_or("fresh".into(), |r| format!("resumed at {r}")),
                s.parameters,
                fmt(s.first_loss),
                fmt(s.last_loss),
                fmt(s.eval_loss),
                fmt(s.eval_accuracy),
                fmt(s.unigram_accuracy),
                s.tokens_per_s,
                s.checkpoint.as_deref().unwrap_or("-")
            );
            print_summary(cli.json, &human, &s)
        }
        Command::Embed { checkpoint, input, out, h5ad_out, read, obs_columns, pooling, layer, batch_size } => {
            let req = corrflow::embed::EmbedRequest {
                checkpoint,
                input,
                out,
                h5ad_out,
                read: read.read_options(&cfg, obs_columns),
                allow_normalized: read.allow_normalized || read.log1p,
                transform: read.transform(),
                pooling,
                layer,
                batch_size,
                progress,
            };
            let s = corrflow::embed::embed(&req)?;
            let human = format!(
                "embed: {} cells ({} dropped: no vocabulary gene) -> {} ({}-dim, layer {}) in {:.2}s ({:.0} cells/s)",
                s.cells, s.dropped, s.out, s.dim, s.layer, s.seconds, s.cells_per_s
            );
            print_summary(cli.json, &human, &s)
        }
        Command::Eval(EvalCommand::Probe {
            embeddings,
            label,
            test_fraction,
            rare_fraction,
            alpha,
            max_iterations,
            seed,
        }) => {
            anyhow::ensure!(
                (0.0..1.0).contains(&test_fraction) && test_fraction > 0.0,
                "--test-fraction must be in (0, 1)"
            );
            anyhow::ensure!(rare_fraction > 0.0 && rare_fraction <= 1.0, "--rare-fraction must be in (0, 1]");
            let req = corrflow::eval::ProbeRequest {
                embeddings,
                label,
                test_fraction,
                rare_fraction,
                alpha,
                max_iterations,
                seed,
            };
            let r = corrflow::eval::probe(&req)?;
            let mut human = format!(
                "probe '{}': {} cells ({} train / {} test), {} classes: accuracy {:.4}, macro-F1 {:.4}, rare-class macro-F1 {:.4} ({})",
                r.label, r.cells, r.train_cells, r.test_cells, r.classes, r.accuracy, r.macro_f1, r.rare_macro_f1, r.rare_classes.join(", ")
            );
            for c in &r.per_class {
                human.push_str(&format!(
                    "\n  {:<30} F1 {:.4}  ({} cells, {} test)",
                    c.class, c.f1, c.cells, c.test_cells
                ));
            }
            print_summary(cli.json, &human, &r)
        }
        Command::Export(ExportCommand::Hf { corpus, atlas, out }) => {
            let names = if atlas.is_empty() { corrflow::corpus::list_atlases(&corpus) } else { atlas };
            anyhow::ensure!(!names.is_empty(), "{}: no finished atlas in this corpus", corpus.display());
            let dirs: Vec<_> = names.iter().map(|n| corrflow::corpus::atlas_dir(&corpus, n)).collect();
            let rows = corrflow::corpus::export_hf(&dirs, &out)?;
            let summary = serde_json::json!({"command": "export hf", "out": out, "atlases": names, "cells": rows});
            print_summary(
                cli.json,
                &format!("exported {rows} cells from {} atlases to {}", names.len(), out.display()),
                &summary,
            )
        }
    }
}
