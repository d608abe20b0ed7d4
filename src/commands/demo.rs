//! `demo`: the whole pipeline on the bundled dataset, summarised.

use std::path::Path;

use anyhow::Result;
use corrflow::config::Config;

use super::print_summary;

pub(crate) fn demo(cfg: &Config, out: &Path, json: bool) -> Result<()> {
    let progress = !json;
    let s = corrflow::demo::run_demo(out, cfg, progress)?;
    let mut human = format!(
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
    // 40 steps of a tiny model: its held-out accuracy may not beat gene frequencies yet.
    for w in s.train.warnings() {
        human.push_str(&format!("\nnote: {w}"));
    }
    print_summary(json, &human, &s)
}
