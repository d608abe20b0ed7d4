//! What the exact pair sums of a streamed graph build cost per cell as the atlas grows.
//!
//! The f64 products stay exact only while a batch's partial sums stay below 2^53, and the
//! largest mapped score grows with the cells (|y| up to ~2N), so batches shrink as the atlas
//! grows and each pays a fixed G × G accumulation. This times `PairSums::add_cells_in` on
//! synthetic cells (2,000 graph genes, ~300 present per cell, of which `UBIQUITOUS` genes in
//! every cell as an atlas's most common genes are; L_max 2,048; seeded) under rank maps scaled
//! so that max |y| is what an atlas of the given size has.
//!
//! cargo run --release -p corrflow-algorithms --example pair_sums_batch -- MAX_ABS_Y [CELLS [UBIQUITOUS]]
//! (session 53's 16× all-cells build: max |y| ≈ 1.9M; 64×: ≈ 7.5M)

use corrflow_algorithms::graph::{BatchWork, PairSums, RankMaps, ScoreHistograms, ScoredCell};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(target) = args.get(1).and_then(|s| s.parse::<i64>().ok()) else {
        eprintln!("usage: pair_sums_batch MAX_ABS_Y [CELLS [UBIQUITOUS]]");
        std::process::exit(2);
    };
    let n_cells: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(16384);
    let ubiquitous: u32 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (g, l) = (2000usize, 2048usize);
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = |n: u64| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    let cells: Vec<ScoredCell> = (0..n_cells)
        .map(|_| {
            let mut genes: Vec<u32> = (0..300).map(|_| next(g as u64) as u32).collect();
            genes.extend(0..ubiquitous);
            genes.sort_unstable();
            genes.dedup();
            ScoredCell { scores: genes.iter().map(|_| 1 + next(l as u64 - 1) as u16).collect(), genes }
        })
        .collect();
    let mut h = ScoreHistograms::new(g, l);
    cells.iter().for_each(|c| h.add_cell(c, 1));
    let mut maps = RankMaps::from_histograms(&h);
    // Scaling every mapped score by an integer keeps them exact integers.
    let f = (target / maps.max_abs_y().max(1)).max(1);
    maps.t2.iter_mut().for_each(|x| *x *= f);
    let (mut sums, mut work) = (PairSums::new(g), BatchWork::default());
    let t = Instant::now();
    for block in cells.chunks(8192) {
        sums.add_cells_in(&mut work, block, &maps, 1, 1);
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "max |y| {}, worst-case exact batch {} cells, {ubiquitous} ubiquitous genes: {n_cells} cells in {s:.2} s, {:.1} µs per cell (one thread)",
        maps.max_abs_y(),
        PairSums::exact_batch(maps.max_abs_y()),
        s / n_cells as f64 * 1e6
    );
}
