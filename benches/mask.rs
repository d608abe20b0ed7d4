//! Masking throughput (sequences/s) of every strategy, single-threaded and on 2 threads, at
//! L = 2,048 and at a corpus' real lengths. Masking only: cells are in memory, as the masking
//! operator receives them.
//!
//! cargo bench --bench mask -- CORPUS GRAPH [SECONDS_PER_CASE [STRATEGY [LENGTH [THREADS]]]]
//! (LENGTH: 2048-unif, 2048-pres or real; THREADS: 1 or 2)

use std::path::PathBuf;
use std::time::Instant;

use corrflow::mask::MaskContext;
use corrflow_algorithms::mask::{prefetch_cell, MaskParams, MaskScratch, MaskStrategy, MaskedSequence};
use rand::seq::SliceRandom;
use rand::Rng;
use rand::SeedableRng;
use rayon::prelude::*;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    anyhow::ensure!(args.len() >= 2, "usage: cargo bench --bench mask -- CORPUS GRAPH [SECONDS]");
    let (corpus, graph) = (PathBuf::from(&args[0]), PathBuf::from(&args[1]));
    let secs: f64 = args.get(2).map_or(Ok(3.0), |s| s.parse())?;
    let opened = corrflow::corpus::Corpus::open(&corpus)?;
    let index = opened.index(&[])?;
    let (info, vocab) = (&opened.info, &opened.vocab);
    let base = MaskContext::open(info, vocab, &index, &graph, MaskParams::default(), true)?;
    let mut real: Vec<Vec<u32>> = Vec::new();
    index.for_each_cell_block(vocab.len(), |b| {
        real.extend((0..b.len()).map(|i| b.cell(i).to_vec()));
        Ok(())
    })?;
    // L = 2,048: distinct genes drawn from those the corpus expresses, uniformly (the graph's
    // genes are then rare: a worst case) and weighted by how many cells express them (the
    // composition of a deeply sequenced cell: frequent genes, the graph's, nearly always there).
    let mut presence: std::collections::HashMap<u32, f64> = std::collections::HashMap::new();
    for c in &real {
        for &t in c {
            *presence.entry(t).or_default() += 1.0;
        }
    }
    let mut genes: Vec<(u32, f64)> = presence.into_iter().collect();
    genes.sort_unstable_by_key(|g| g.0);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let uniform: Vec<Vec<u32>> = (0..4096)
        .map(|_| {
            let mut g: Vec<u32> = genes.iter().map(|g| g.0).collect();
            g.shuffle(&mut rng);
            g.truncate(2048);
            g
        })
        .collect();
    let weighted: Vec<Vec<u32>> = (0..4096)
        .map(|_| {
            // Efraimidis–Spirakis: the 2,048 largest u^(1/w).
            let mut keyed: Vec<(f64, u32)> =
                genes.iter().map(|&(t, w)| (rng.random::<f64>().powf(1.0 / w), t)).collect();
            keyed.select_nth_unstable_by(2047, |a, b| b.0.total_cmp(&a.0));
            keyed.truncate(2048);
            keyed.iter().map(|k| k.1).collect()
        })
        .collect();
    let mean_real = real.iter().map(Vec::len).sum::<usize>() as f64 / real.len() as f64;
    println!(
        "corpus {} cells (mean length {:.0}), graph {} genes / {} edges, {} distinct genes expressed",
        real.len(),
        mean_real,
        base.graph.genes(),
        base.graph.edges(),
        genes.len()
    );
    println!("{:<10} {:>10} {:>8} {:>14}", "strategy", "length", "threads", "sequences/s");
    let only = args
        .get(3)
        .map(|s| MaskStrategy::parse(s).ok_or_else(|| anyhow::anyhow!("unknown strategy {s}")))
        .transpose()?;
    for strategy in MaskStrategy::all().into_iter().filter(|s| only.is_none_or(|o| o == *s)) {
        let ctx = base.with_strategy(strategy, 0.5);
        let lengths = [("2048-unif", &uniform), ("2048-pres", &weighted), ("real", &real)];
        for (label, cells) in lengths.into_iter().filter(|l| args.get(4).is_none_or(|a| a == l.0)) {
            for threads in [1, 2].into_iter().filter(|t| args.get(5).is_none_or(|a| *a == t.to_string())) {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build()?;
                let rate = pool.install(|| throughput(&ctx, cells, secs));
                println!("{:<10} {:>10} {:>8} {:>14.0}", strategy.name(), label, threads, rate);
            }
        }
    }
    Ok(())
}

/// Cells per batch handed to a thread.
const BATCH: usize = 64;

/// Masks `cells` round after round for about `secs`; sequences per second.
fn throughput(ctx: &MaskContext, cells: &[Vec<u32>], secs: f64) -> f64 {
    let masker = ctx.masker();
    let start = Instant::now();
    let mut done = 0usize;
    let mut epoch = 0;
    while start.elapsed().as_secs_f64() < secs {
        // In batches, as the operator masks them: each cell's tokens are prefetched while the
        // one before it is masked.
        cells.par_chunks(BATCH).enumerate().for_each_init(
            || (MaskScratch::default(), MaskedSequence::default()),
            |(scratch, out), (b, batch)| {
                for (j, c) in batch.iter().enumerate() {
                    if let Some(next) = batch.get(j + 1) {
                        prefetch_cell(next);
                    }
                    masker.mask(c, epoch, (b * BATCH + j) as u64, scratch, out);
                }
            },
        );
        done += cells.len();
        epoch += 1;
    }
    done as f64 / start.elapsed().as_secs_f64()
}
