//! Micro-benchmark of rank-value encoding on Geneformer-like cells (655 genes):
//! `cargo run --release -p corrflow-algorithms --example rank_bench`
use corrflow_algorithms::{normalized_expression, rank_value_encode, RankScratch, SequenceLayout};

fn main() {
    // Deterministic pseudo-random cells: ~655 genes, counts mostly 1-3, log-spread medians.
    let mut state = 0x9E3779B97F4A7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let medians: Vec<f64> = (0..25_000).map(|_| 0.5 * 20f64.powf((next() % 1000) as f64 / 1000.0)).collect();
    let cells: Vec<Vec<(u32, f64)>> = (0..2000)
        .map(|_| {
            let mut genes: Vec<(u32, f64)> = Vec::new();
            let mut seen = std::collections::HashSet::new();
            while genes.len() < 655 {
                let g = (next() % 25_000) as u32;
                if seen.insert(g) {
                    let c =
                        1 + (next() % 100).leading_zeros().min(6) as u64 % 4 + (next() % 3 == 0) as u64 * (next() % 20);
                    genes.push((g, c as f64));
                }
            }
            let n: f64 = genes.iter().map(|g| g.1).sum::<f64>() * 3.0;
            genes.iter().map(|&(g, c)| (g, normalized_expression(c, n, medians[g as usize]))).collect()
        })
        .collect();
    let layout = SequenceLayout::v1();
    let mut scratch = RankScratch::default();
    let mut out = Vec::new();
    let mut check = 0u64;
    let t = std::time::Instant::now();
    for _ in 0..20 {
        for c in &cells {
            rank_value_encode(c, &layout, &mut scratch, &mut out);
            check = check.wrapping_add(out[0] as u64);
        }
    }
    let per = t.elapsed().as_secs_f64() / (20.0 * cells.len() as f64);
    println!("{:.2} µs per 655-gene cell ({:.1} ns per gene), checksum {check}", per * 1e6, per * 1e9 / 655.0);
}
