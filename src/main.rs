//! The `corrflow` command line.

use anyhow::{Context, Result};
use clap::Parser;
use corrflow::config::{Config, ModelVersion};
use corrflow::ingest::{run_ingest, IngestRequest};
use corrflow::tokenize::TokenizeOptions;
use corrflow::vocab::{build_vocabulary, VocabBuildOptions, Vocabulary};
use corrflow_operators::SequenceLayout;
use serde::Serialize;

mod cli;

use cli::*;

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
        "{} ({}): {} edges from {} cells; +{} -{} ~{} edges (delta {}); drift mean {:.4} max {:.4}, {} genes outside the graph vocabulary{}",
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
        s.drift.vocab_missing.map_or("?".to_string(), |m| m.to_string()),
        if s.rebased { "; rebased" } else { "" }
    );
    if s.drift.vocab_entered > 0 {
        line.push_str(&format!(
            "\n{} genes entered the graph vocabulary (statistics computed from the stored shards)",
            s.drift.vocab_entered
        ));
    }
    if s.rebase_recommended && !s.rebased {
        line.push_str(
            "\nrebase recommended: drift is above graph.rebase_drift, or more genes than graph.rebase_vocab would enter the graph vocabulary (run `corrflow graph rebase`)",
        );
    }
    line
}

fn main() {
    let cli = Cli::parse();
    // ONNX Runtime logs every arena reservation at info: keep it at warn unless -vv.
    let default_level = match cli.verbose {
        0 => "warn",
        1 => "info,ort=warn",
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
                 pre-training (tiny model, 40 steps, CorrMask): loss {:.3} -> {:.3}, held-out accuracy {:.4} (unigram {:.4}), {:.0} tokens/s -> {}\n\
                 ONNX export: {} ({:.1} MB); embeddings by ONNX Runtime: {} cells at {:.0} cells/s -> {}",
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
                s.train.checkpoint.as_deref().unwrap_or("-"),
                s.export.out,
                s.export.bytes as f64 / 1e6,
                s.embed.cells,
                s.embed.cells_per_s,
                s.embed.out
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
        Command::Graph(GraphCommand::Build {
            corpus,
            out,
            atlas,
            n_sub,
            seed,
            max_genes,
            incremental,
            cluster,
            ..
        }) => {
            let mut params = cfg.graph.clone();
            params.n_sub = n_sub.unwrap_or(params.n_sub);
            params.seed = seed.unwrap_or(params.seed);
            params.max_genes = max_genes.unwrap_or(params.max_genes);
            anyhow::ensure!(
                incremental || (cluster.workers == 1 && cluster.processes == 1 && cluster.hostfile.is_none()),
                "-w/-n/-p/-h apply to `graph build --incremental` (the streamed dataflow); the in-memory \
                 exact build uses all cores by itself"
            );
            let mut s = if incremental {
                match corrflow::graph::build_incremental(&corpus, &atlas, &params, &out, &cluster.cluster()?)? {
                    Some((_, s)) => s,
                    None => {
                        let what = serde_json::json!({"command": "graph build", "helper": true});
                        return print_summary(cli.json, "graph build: statistics contributed to process 0", &what);
                    }
                }
            } else {
                let (mut graph, s) = corrflow::graph::build_exact(&corpus, &atlas, &params)?;
                corrflow::graph::write_graph(&out, &mut graph)?;
                s
            };
            s.out = out.display().to_string();
            let human = if incremental {
                format!(
                    "graph build: {} genes, {} edges from {} cells in {:.2}s (streamed: vocabulary and rank maps {:.2}s, exact statistics and selection {:.2}s, ρ_local {:.2}s) -> {}",
                    s.genes, s.edges, s.cells, s.seconds, s.seconds_load, s.seconds_statistics, s.seconds_local, out.display()
                )
            } else {
                format!(
                    "graph build: {} genes, {} edges from {} cells in {:.2}s (load {:.2}s, statistics {:.2}s incl. screening products {:.2}s at {:.0} GFLOP/s, exact ρ {:.2}s) -> {}",
                    s.genes, s.edges, s.cells, s.seconds, s.seconds_load, s.seconds_statistics, s.seconds_screening, s.screening_gflops, s.seconds_local, out.display()
                )
            };
            print_summary(cli.json, &human, &s)
        }
        Command::Graph(GraphCommand::Update { graph, add, retract, cluster, .. }) => {
            let cluster = cluster.cluster()?;
            let s = match (add, retract) {
                (Some(dir), _) => corrflow::graph::update_add(&graph, &dir, &cluster)?,
                (_, Some(name)) => corrflow::graph::update_retract(&graph, &name, &cluster)?,
                _ => unreachable!("clap requires --add or --retract"),
            };
            let human = update_line(&s);
            print_summary(cli.json, &human, &s)
        }
        Command::Graph(GraphCommand::Rebase { graph, cluster, .. }) => {
            let s = corrflow::graph::rebase(&graph, &cluster.cluster()?)?;
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
        Command::Train { out, corpus, graph, strategy, lambda, max_steps, seed, device, restart, profile_steps } => {
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
                profile_steps,
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
        Command::Embed {
            checkpoint,
            model,
            input,
            out,
            h5ad_out,
            read,
            obs_columns,
            pooling,
            layer,
            batching,
            runtime,
        } => {
            let model = match (checkpoint, model) {
                (Some(c), None) => corrflow::embed::ModelSource::Checkpoint(c),
                (None, Some(m)) => corrflow::embed::ModelSource::Onnx(m),
                _ => anyhow::bail!("give exactly one of --checkpoint and --model"),
            };
            let req = corrflow::embed::EmbedRequest {
                model,
                input,
                out,
                h5ad_out,
                read: read.read_options(&cfg, obs_columns),
                allow_normalized: read.allow_normalized || read.log1p,
                transform: read.transform(),
                pooling,
                layer,
                batch_size: batching.max_batch_cells,
                token_budget: batching.token_budget,
                runtime: runtime.options(),
                progress,
            };
            let s = corrflow::embed::embed(&req)?;
            let human = format!(
                "embed ({}): {} cells ({} dropped: no vocabulary gene) -> {} ({}-dim, layer {}) in {:.2}s ({:.0} cells/s)",
                s.encoder, s.cells, s.dropped, s.out, s.dim, s.layer, s.seconds, s.cells_per_s
            );
            print_summary(cli.json, &human, &s)
        }
        Command::Synth(c) => {
            let (human, summary) = corrflow::synth::cli::execute(&c, &cfg.synth, progress)?;
            print_summary(cli.json, &human, &summary)
        }
        Command::Eval(EvalCommand::Probe {
            embeddings,
            label,
            test_fraction,
            rare_fraction,
            alpha,
            max_iterations,
            seed,
            exclude,
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
                exclude,
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
        Command::Serve {
            model,
            addr,
            runtime,
            batching,
            batch_wait_ms,
            max_queue,
            max_body_bytes,
            max_cells,
            token,
        } => {
            if !addr.ip().is_loopback() && token.is_none() {
                tracing::warn!("serving on {addr} (not loopback) without --token: anyone who can reach it can use it");
            }
            let options = corrflow::serve::ServeOptions {
                model,
                addr,
                runtime: runtime.options(),
                batch: corrflow::serve::batcher::BatchConfig {
                    token_budget: batching.token_budget,
                    max_rows: batching.max_batch_cells,
                    max_wait: std::time::Duration::from_millis(batch_wait_ms),
                },
                max_queue,
                max_body_bytes,
                max_cells_per_request: max_cells,
                bearer_token: token,
            };
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            let s = rt.block_on(corrflow::serve::serve(options, corrflow::serve::shutdown_signal(), |a| {
                eprintln!("corrflow serve: listening on http://{a}");
            }))?;
            let human = format!("served {} embed requests ({} cells) on {}", s.requests, s.cells, s.addr);
            print_summary(cli.json, &human, &s)
        }
        Command::Export(ExportCommand::Onnx { checkpoint, out, pooling }) => {
            let s = corrflow::export::export_onnx(&corrflow::export::ExportRequest { checkpoint, out, pooling })?;
            let human = format!(
                "exported step {} ({} layers, hidden {}, {} parameters, {} nodes) -> {} ({:.1} MB) + {}",
                s.step,
                s.layers,
                s.hidden,
                s.parameters,
                s.nodes,
                s.out,
                s.bytes as f64 / 1e6,
                s.vocab_dir
            );
            print_summary(cli.json, &human, &s)
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
