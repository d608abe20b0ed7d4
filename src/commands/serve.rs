//! `embed`, `export onnx` and `serve`: a trained encoder put to use.

use std::path::PathBuf;

use anyhow::Result;
use corrflow::config::Config;

use super::print_summary;
use crate::cli::{EmbedArgs, ServeArgs};

pub(crate) fn embed(cfg: &Config, args: EmbedArgs, json: bool) -> Result<()> {
    let progress = !json;
    let EmbedArgs { checkpoint, model, input, out, h5ad_out, read, obs_columns, pooling, layer, batching, runtime } =
        args;
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
        read: read.read_options(cfg, obs_columns),
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
    print_summary(json, &human, &s)
}

pub(crate) fn export_onnx(
    checkpoint: PathBuf,
    out: PathBuf,
    pooling: corrflow::embed::Pooling,
    json: bool,
) -> Result<()> {
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
        token,
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
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let s = rt.block_on(corrflow::server::serve(options, corrflow::server::shutdown_signal(), |a| {
        eprintln!("corrflow serve: listening on http://{a}");
    }))?;
    let human = format!("served {} embed requests ({} cells) on {}", s.requests, s.cells, s.addr);
    print_summary(json, &human, &s)
}
