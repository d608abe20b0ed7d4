//! What each subcommand does with its arguments: build the library's request, run it, print
//! the human summary (and with `--json` a JSON line after it). One module per pipeline stage.

mod annotate;
mod demo;
mod eval_cells;
mod finetune;
mod graph;
mod hf;
mod ingest;
mod mask;
mod serve;
pub(crate) mod synth;
mod train;

use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::Result;
use corrflow::config::Config;
use corrflow::fs::paths::Overlap;
use serde::Serialize;

use crate::cli::{Cli, Command, ExportCommand, ImportCommand};

/// Prints a command's human summary and, with `--json`, its JSON summary as the last line.
fn print_summary<T: Serialize>(json: bool, human: &str, summary: &T) -> Result<()> {
    println!("{human}");
    if json {
        println!("{}", serde_json::to_string(summary)?);
    }
    Ok(())
}

/// The `--config` file, an input of every command.
static CONFIG: OnceLock<PathBuf> = OnceLock::new();

/// The check of a command's inputs and outputs (before any work), with `--config` among the
/// inputs: no command writes over its own configuration.
fn overlap() -> Overlap {
    let o = Overlap::new();
    match CONFIG.get() {
        Some(config) => o.input("--config", config),
        None => o,
    }
}

pub(crate) fn run(cli: Cli) -> Result<()> {
    let cfg = match &cli.config {
        Some(p) => {
            let _ = CONFIG.set(p.clone());
            Config::load(p)?
        }
        None => Config::default(),
    };
    let json = cli.json;
    match cli.command {
        Command::Demo { out } => demo::demo(&cfg, &out, json),
        Command::Ingest(a) => ingest::ingest(&cfg, a, json),
        Command::Vocab(c) => ingest::vocab(&cfg, c, json),
        Command::Export(ExportCommand::Hf { corpus, atlas, out }) => ingest::export_hf(corpus, atlas, out, json),
        Command::Export(ExportCommand::HfModel { checkpoint, out }) => hf::export_hf_model(checkpoint, out, json),
        Command::Export(ExportCommand::Onnx { checkpoint, out, pooling, layer, emb_layer }) => {
            let layer = serve::layer_or_emb_layer(layer, emb_layer)?;
            serve::export_onnx(checkpoint, out, pooling, layer, json)
        }
        Command::Graph(c) => graph::graph(&cfg, c, json),
        Command::Mask(c) => mask::mask(&cfg, c, json),
        Command::Train(a) => train::train(&cfg, a, json),
        Command::Eval(c) => train::eval(&cfg, c, json),
        Command::Finetune(a) => finetune::finetune(&cfg, a, json),
        Command::Embed(a) => serve::embed(&cfg, a, json),
        Command::Serve(a) => serve::serve(a, json),
        Command::Perturb(a) => serve::perturb(&cfg, a, json),
        Command::Import(ImportCommand::Hf { model, vocab, version, out }) => {
            hf::import_hf(&model, vocab.as_deref(), version, &out, json)
        }
        Command::Import(ImportCommand::Values { model, out }) => hf::import_values(&model, &out, json),
        Command::Ontology(c) => annotate::ontology(&cfg, c, json),
        Command::Annotate(a) => annotate::annotate(&cfg, a, json),
        Command::Synth(c) => {
            let (human, summary) = synth::execute(&c, &cfg.synth, !json)?;
            print_summary(json, &human, &summary)
        }
    }
}
