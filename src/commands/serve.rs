//! `embed`, `export onnx` and `serve`: a trained encoder put to use.

use std::path::PathBuf;

use anyhow::Result;
use corrflow::config::Config;
use corrflow::embed::ModelSource;
use corrflow::fs::paths::Overlap;

use super::print_summary;
use crate::cli::{EmbedArgs, PerturbArgs, ServeArgs};

/// `overlap` with the files of the model a command reads: a checkpoint (or run) directory, or an
/// exported model and its vocabulary directory beside it.
pub(crate) fn model_inputs(model: &ModelSource, overlap: Overlap) -> Overlap {
    match model {
        ModelSource::Checkpoint(dir) => overlap.input("--checkpoint", dir),
        ModelSource::Onnx(file) => {
            overlap.input("--model", file).input("--model's vocabulary", corrflow::model_meta::vocab_sidecar(file))
        }
    }
}

pub(crate) fn embed(cfg: &Config, args: EmbedArgs, json: bool) -> Result<()> {
    let EmbedArgs { cells, out, h5ad_out, obs_columns, pooling, layer, emb_layer, genes, shard } = args;
    let layer = layer_or_emb_layer(layer, emb_layer)?;
    let mut cells = cells.run(cfg, obs_columns, !json);
    cells.read.shard = shard;
    model_inputs(&cells.model, super::overlap().input("--input", &cells.input))
        .output("--out", &out)
        .output_opt("--h5ad-out", h5ad_out.as_deref())
        .check()?;
    let req = corrflow::embed::EmbedRequest { cells, out, h5ad_out, pooling, layer, genes };
    let s = corrflow::embed::embed(&req)?;
    let what = s.genes.map_or_else(String::new, |g| format!("{g} genes from "));
    let mut human = format!(
        "embed ({}): {what}{} cells ({} dropped: no vocabulary gene) -> {} ({}-dim, layer {}) in {:.2}s ({:.0} cells/s)",
        s.encoder, s.cells, s.dropped, s.out, s.dim, s.layer, s.seconds, s.cells_per_s
    );
    for w in &s.warnings {
        human.push_str(&format!("\nwarning: {w}"));
    }
    print_summary(json, &human, &s)
}

/// `--layer`, or `--emb-layer` (Geneformer's numbering) turned into it.
pub(crate) fn layer_or_emb_layer(layer: i64, emb_layer: Option<i64>) -> Result<i64> {
    Ok(match emb_layer {
        None => layer,
        Some(e) if e <= 0 => corrflow::embed::layer_from_emb_layer(e),
        Some(e) => anyhow::bail!(
            "--emb-layer {e}: Geneformer's emb_layer counts back from the last layer (0 = last, -1 = second to \
             last); for layers counted from the first use --layer 1..=layers"
        ),
    })
}

pub(crate) fn export_onnx(
    checkpoint: PathBuf,
    out: PathBuf,
    pooling: Option<corrflow::embed::Pooling>,
    layer: i64,
    json: bool,
) -> Result<()> {
    super::overlap()
        .input("--checkpoint", &checkpoint)
        .output("--out", &out)
        .replaced_dir("--out's vocabulary", corrflow::model_meta::vocab_sidecar(&out))
        .check()?;
    let s = corrflow::export::export_onnx(&corrflow::export::ExportRequest { checkpoint, out, pooling, layer })?;
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
    print_summary(json, &human, &s)
}

pub(crate) fn serve(args: ServeArgs, json: bool) -> Result<()> {
    let ServeArgs {
        model,
        addr,
        runtime,
        batching,
        batch_wait_ms,
        max_queue,
        max_body_bytes,
        max_inflight_mb,
        max_cells,
        body_timeout_s,
        min_body_bytes_per_s,
        body_grace_s,
        small_body_bytes,
        token,
        allow_normalized,
    } = args;
    if !addr.ip().is_loopback() && token.is_none() {
        tracing::warn!("serving on {addr} (not loopback) without --token: anyone who can reach it can use it");
    }
    let options = corrflow::server::ServeOptions {
        model,
        addr,
        runtime: runtime.options(),
        batch: corrflow::server::batcher::BatchConfig {
            token_budget: batching.token_budget,
            max_rows: batching.max_batch_cells,
            max_wait: std::time::Duration::from_millis(batch_wait_ms),
        },
        max_queue,
        max_body_bytes,
        max_inflight_bytes: max_inflight_mb << 20,
        max_cells_per_request: max_cells,
        bearer_token: token,
        body_timeout: std::time::Duration::from_secs(body_timeout_s),
        min_body_rate: min_body_bytes_per_s as u64,
        body_grace: std::time::Duration::from_secs(body_grace_s),
        small_body_bytes,
        allow_normalized,
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let s = rt.block_on(corrflow::server::serve(options, corrflow::server::shutdown_signal(), |a| {
        eprintln!("corrflow serve: listening on http://{a}");
    }))?;
    let human = format!("served {} embed requests ({} cells) on {}", s.requests, s.cells, s.addr);
    print_summary(json, &human, &s)
}

pub(crate) fn perturb(cfg: &Config, a: PerturbArgs, json: bool) -> Result<()> {
    let cells = a.cells.run(cfg, Vec::new(), !json);
    model_inputs(&cells.model, super::overlap().input("--input", &cells.input))
        .input_opt("--module", a.module.as_deref())
        .output("--out", &a.out)
        .output_opt("--genes-out", a.genes_out.as_deref())
        .check()?;
    let (how, flag, genes) = if a.delete.is_empty() && !a.overexpress.is_empty() {
        (corrflow::algorithms::perturb::Perturbation::Overexpress, "--overexpress", a.overexpress)
    } else {
        (corrflow::algorithms::perturb::Perturbation::Delete, "--delete", a.delete)
    };
    anyhow::ensure!(!genes.is_empty(), "{flag}: the value is empty (Ensembl ids or symbols, comma-separated)");
    let cells_where = a
        .cells_where
        .map(|s| match s.split_once('=') {
            Some((c, v)) if !c.is_empty() => Ok((c.to_string(), v.to_string())),
            _ => Err(anyhow::anyhow!("--cells-where takes COL=VALUE, got '{s}'")),
        })
        .transpose()?;
    let req = corrflow::perturb::PerturbRequest {
        cells,
        out: a.out,
        genes_out: a.genes_out,
        genes,
        how,
        module: a.module,
        cells_where,
        random_sets: a.random_sets,
        seed: a.seed,
    };
    let s = corrflow::perturb::perturb_cells(&req)?;
    let random = if s.random_mean_shifts.is_empty() {
        String::new()
    } else {
        let mean = s.random_mean_shifts.iter().sum::<f64>() / s.random_mean_shifts.len() as f64;
        format!(
            "; {} random gene sets of matched expression: mean shift {:.5}, permutation p = {:.3}",
            s.random_sets,
            mean,
            s.p_value.unwrap_or(f64::NAN)
        )
    };
    let human = format!(
        "perturb ({}): {} tokens ({} graph partners) in {} of {} cells: mean cell-embedding shift (1 − cosine) {:.5}{random} -> {} in {:.1}s",
        s.how, s.tokens.len(), s.module_partners, s.cells_perturbed, s.cells, s.mean_shift, s.out, s.seconds
    );
    print_summary(json, &human, &s)
}
