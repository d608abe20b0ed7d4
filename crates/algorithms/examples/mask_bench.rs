//! CorrMask masking throughput on synthetic cells of 2,048 genes, one thread: a quick check of
//! the pure masking code (and of code-generation settings) without a corpus.
//! `benches/mask.rs` measures the same on real cells and a real graph.
//!
//! cargo run --release -p corrflow-algorithms --example mask_bench [-- SECONDS [CASE]]

use std::time::Instant;

use corrflow_algorithms::mask::{
    MaskParams, MaskScratch, MaskStrategy, MaskTables, MaskedSequence, Masker, NeighbourTable, Replacement,
};
use corrflow_algorithms::SequenceLayout;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

fn main() {
    let secs: f64 = std::env::args().nth(1).map_or(2.0, |s| s.parse().expect("seconds"));
    let only = std::env::args().nth(2);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    // Like the Kang graph: 815 of the 2,000 most frequent genes (token ids 2..2002) have edges,
    // mean degree ~71; the vocabulary has 25,426 tokens.
    let vocab = 25_426u32;
    let graph_genes: Vec<u32> = {
        let mut g: Vec<u32> = (2..2002).collect();
        g.shuffle(&mut rng);
        g.truncate(815);
        g
    };
    let edges: Vec<(u32, u32)> =
        (0..29_053).map(|_| (graph_genes[rng.random_range(0..815)], graph_genes[rng.random_range(0..815)])).collect();
    let graph = NeighbourTable::from_edges(edges);
    let cells = |present_graph: bool, rng: &mut rand_chacha::ChaCha8Rng| -> Vec<Vec<u32>> {
        (0..2048)
            .map(|_| {
                let mut all: Vec<u32> = (2..vocab).filter(|t| !present_graph || !graph_genes.contains(t)).collect();
                all.shuffle(rng);
                all.truncate(if present_graph { 2048 - 815 } else { 2048 });
                if present_graph {
                    all.extend(&graph_genes);
                    all.shuffle(rng);
                }
                all
            })
            .collect()
    };
    let replacement =
        Replacement { mask_token: 1, gene_tokens: (2..vocab).collect(), mask_token_rate: 0.8, random_token_rate: 0.1 };
    let layout = SequenceLayout::v1();
    for (label, strategy, present) in [
        ("random", MaskStrategy::RANDOM, true),
        ("corrmask 2048-unif", MaskStrategy::CORRMASK, false),
        ("corrmask 2048-pres", MaskStrategy::CORRMASK, true),
    ] {
        if only.as_ref().is_some_and(|o| !label.contains(o.as_str())) {
            continue;
        }
        let cells = cells(present, &mut rng);
        let params = MaskParams { strategy, ..MaskParams::default() };
        let masker = Masker {
            params: &params,
            tables: MaskTables { graph: &graph, pmi: None },
            replacement: &replacement,
            layout: &layout,
        };
        let (mut scratch, mut out) = (MaskScratch::default(), MaskedSequence::default());
        let start = Instant::now();
        let mut done = 0u64;
        let mut checksum = 0u64;
        while start.elapsed().as_secs_f64() < secs {
            for (i, c) in cells.iter().enumerate() {
                masker.mask(c, done / 2048, i as u64, &mut scratch, &mut out);
                checksum = checksum.wrapping_add(u64::from(out.plan.positions[7]));
            }
            done += cells.len() as u64;
        }
        let rate = done as f64 / start.elapsed().as_secs_f64();
        println!("{label:<20} {rate:>10.0} sequences/s (1 thread; checksum {checksum})");
    }
}
