//! What Cell Ontology annotation costs on top of embedding, on an exported model with a
//! hierarchical head (`train --hce-ontology`, `export onnx`):
//! 1. ONNX Runtime cell embeddings only (what `embed --model` computes) against embeddings +
//!    leaf probabilities + decoding every cell (leaf-argmax, lineage, greedy path, reliable
//!    call: what `annotate --model` and `/v1/annotate` compute), alternating for ROUNDS rounds
//!    over the same cells and batches;
//! 2. the decoder alone on the cached probabilities (cells/s).
//!
//! cargo bench --bench annotate -- MODEL.onnx CORPUS [ROUNDS]

use std::path::PathBuf;
use std::time::Instant;

use corrflow::encode::{split_probabilities, Encoder};
use corrflow::ontology::calls::Annotator;
use corrflow::runtime::{plan_batches, OrtEncoder, PaddedBatch, RuntimeOptions};

const TOKEN_BUDGET: usize = 16384;
const MAX_ROWS: usize = 64;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    anyhow::ensure!(args.len() >= 2, "usage: cargo bench --bench annotate -- MODEL.onnx CORPUS [ROUNDS]");
    let (model, corpus) = (PathBuf::from(&args[0]), PathBuf::from(&args[1]));
    let rounds: usize = args.get(2).map_or(Ok(5), |s| s.parse())?;
    let mut encoder = OrtEncoder::open(&model, &RuntimeOptions::default())?;
    let head = encoder
        .meta
        .model
        .hce
        .clone()
        .ok_or_else(|| anyhow::anyhow!("{} has no hierarchical head", model.display()))?;
    let annotator = Annotator::new(&head, 0.5).map_err(anyhow::Error::msg)?;
    let keep = encoder.meta.tokenize_layout().max_genes;
    let pad = encoder.vocab.pad;
    let opened = corrflow::corpus::Corpus::open(&corpus)?;
    let mut cells: Vec<Vec<u32>> = Vec::new();
    opened.index(&[])?.for_each_cell_block(opened.vocab.len(), |b| {
        cells.extend((0..b.len()).map(|i| b.cell(i).iter().take(keep).copied().collect::<Vec<u32>>()));
        Ok(())
    })?;
    cells.truncate(4000);
    let lengths: Vec<usize> = cells.iter().map(Vec::len).collect();
    let plan = plan_batches(&lengths, TOKEN_BUDGET, MAX_ROWS);
    let (dim, k) = (encoder.dim(), encoder.classes().len());
    println!(
        "model {} (hidden {dim}, {k} leaves over {} terms), {} cells, mean length {:.0}",
        model.display(),
        head.terms.len(),
        cells.len(),
        lengths.iter().sum::<usize>() as f64 / cells.len() as f64
    );
    let batch = |rows: &Vec<usize>| PaddedBatch::new(rows.iter().map(|&i| cells[i].as_slice()), pad);
    let mut probs_cache = Vec::new();
    let (mut embed_rates, mut annotate_rates, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..=rounds {
        let t = Instant::now();
        for rows in &plan {
            encoder.embed(&batch(rows))?;
        }
        let embed = cells.len() as f64 / t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut calls = 0usize;
        probs_cache.clear();
        for rows in &plan {
            let (_, probs) = split_probabilities(encoder.encode_with_probabilities(&batch(rows))?, dim, k);
            calls += probs.chunks(k).map(|p| annotator.call(p)).filter(|c| c.call.is_some()).count();
            probs_cache.extend(probs);
        }
        let annotate = cells.len() as f64 / t.elapsed().as_secs_f64();
        if round > 0 {
            // Round 0 warms both paths up.
            embed_rates.push(embed);
            annotate_rates.push(annotate);
            ratios.push(annotate / embed);
        }
        println!("round {round}: embed {embed:.0} cells/s, annotate {annotate:.0} cells/s ({calls} reliable calls)");
    }
    let t = Instant::now();
    let decoded = probs_cache.chunks(k).map(|p| annotator.call(p).greedy.len()).sum::<usize>();
    let decode = cells.len() as f64 / t.elapsed().as_secs_f64();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "median over {rounds} rounds: embed {:.0} cells/s, annotate {:.0} cells/s, annotate/embed {:.3}; decoder alone {decode:.0} cells/s ({decoded} greedy terms)",
        median(embed_rates),
        median(annotate_rates),
        median(ratios)
    );
    Ok(())
}
