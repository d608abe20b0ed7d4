//! Tokenization throughput on real cells held in memory: validation, normalization and
//! rank-value encoding only (no HDF5 reading, no Parquet writing), the part of `ingest` that
//! runs on the rayon pool.
//!
//! cargo bench --bench tokenize -- FILE.h5ad [ROUNDS]      (RAYON_NUM_THREADS=1 for one core)

use std::path::PathBuf;
use std::time::Instant;

use corrflow::formats::{open, ReadOptions};
use corrflow::tokenize::{tokenize_chunk, GeneMapper, TokenizeOptions};
use corrflow::vocab::{Vocabulary, BUILTIN};
use corrflow_algorithms::SequenceLayout;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    anyhow::ensure!(!args.is_empty(), "usage: cargo bench --bench tokenize -- FILE.h5ad [ROUNDS]");
    let path = PathBuf::from(&args[0]);
    let rounds: usize = args.get(1).map_or(Ok(5), |s| s.parse())?;
    let vocab = Vocabulary::resolve(BUILTIN)?;
    let read = ReadOptions::default();
    let mut source = open(&path, &read)?;
    let mapper = GeneMapper::new(&vocab, source.gene_ids());
    let gene_ids = source.gene_ids().to_vec();
    let n = source.n_cells();
    let chunks = (0..n)
        .step_by(read.chunk_cells)
        .map(|s| source.read_chunk(s..(s + read.chunk_cells).min(n)))
        .collect::<Result<Vec<_>, _>>()?;
    let values: usize = chunks.iter().map(|c| c.values.len()).sum();
    let opts = TokenizeOptions { layout: SequenceLayout::v1(), allow_normalized: false, transform: Default::default() };
    println!("{}: {n} cells, {values} stored values, {} rayon threads", path.display(), rayon::current_num_threads());
    for round in 0..rounds {
        let t = Instant::now();
        let mut tokens = 0usize;
        for c in &chunks {
            tokens += tokenize_chunk(&path, c, &gene_ids, &mapper, &vocab, &opts)?.tokens.len();
        }
        let s = t.elapsed().as_secs_f64();
        println!(
            "round {round}: {:.1} ms, {:.0} cells/s, {:.2} ns per stored value ({tokens} tokens)",
            s * 1e3,
            n as f64 / s,
            s * 1e9 / values as f64
        );
    }
    Ok(())
}
