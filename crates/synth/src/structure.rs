//! Structure recovery (paper Fig. 2, Appendix B.1): cells activate one of several equal gene
//! modules; after dropout and top-K rank tokenization, do gene pairs that are *adjacent* in the
//! token sequences, or pairs that merely *co-occur* in them, reveal the modules?
//!
//! Both matrices are counted by the graph stage's statistics code: cells are scored over a graph
//! vocabulary of all genes ([`GraphVocab::score`], `L_max = K`), co-occurrence is
//! [`co_presence`] and adjacency is [`adjacency_counts`].

use corrflow_algorithms::graph::{adjacency_counts, co_presence, GraphVocab, ScoredCell};
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::{exponential, normal, rng, StructureParams};
use corrflow_algorithms::auroc::pair_auroc;

/// A generated data set.
#[derive(Clone, Debug, PartialEq)]
pub struct StructureData {
    /// Module of each gene (genes are in contiguous equal blocks).
    pub module_of: Vec<u32>,
    /// Active module of each cell.
    pub active: Vec<u32>,
    /// Observed expression after dropout, `cells × genes` row-major.
    pub observed: Vec<f64>,
    /// Each cell's tokens: the top-K genes by observed value, descending (ties by gene index).
    pub tokens: Vec<Vec<u32>>,
}

/// The module of gene `g` when `genes` are split into `modules` contiguous equal blocks.
pub fn module_of(g: usize, genes: usize, modules: usize) -> usize {
    g / (genes / modules)
}

/// Appendix B.1, steps (1)–(4), cell by cell; cell `i` draws from its own stream `(seed, i)`.
pub fn generate(p: &StructureParams) -> StructureData {
    let (n, k) = (p.genes, p.modules);
    let module_of: Vec<u32> = (0..n).map(|g| module_of(g, n, k) as u32).collect();
    let size = n / k;
    let mut active = Vec::with_capacity(p.cells);
    let mut observed = Vec::with_capacity(p.cells * n);
    let mut tokens = Vec::with_capacity(p.cells);
    let mut order: Vec<u32> = Vec::with_capacity(n);
    for cell in 0..p.cells {
        let mut r = rng(p.seed, cell as u64);
        let mut x: Vec<f64> = (0..n).map(|_| exponential(&mut r, p.background_rate)).collect();
        let m = r.random_range(0..k);
        for v in &mut x[m * size..(m + 1) * size] {
            *v += normal(&mut r, p.signal_mean, p.signal_sd);
        }
        for v in &mut x {
            if r.random::<f64>() < p.dropout {
                *v = 0.0;
            }
        }
        order.clear();
        order.extend(0..n as u32);
        order.sort_by(|&a, &b| x[b as usize].total_cmp(&x[a as usize]).then(a.cmp(&b)));
        tokens.push(order[..p.top_k].to_vec());
        active.push(m as u32);
        observed.extend_from_slice(&x);
    }
    StructureData { module_of, active, observed, tokens }
}

/// The adjacency matrix A (consecutive-rank pairs) and the co-occurrence matrix C (all pairs of
/// a cell), both `genes × genes` row-major, with zero diagonals.
pub fn recover(tokens: &[Vec<u32>], genes: usize, top_k: usize) -> (Vec<i64>, Vec<i64>) {
    let vocab = GraphVocab::from_tokens((0..genes as u32).collect(), genes);
    let cells: Vec<ScoredCell> = tokens
        .iter()
        .map(|t| {
            let mut c = ScoredCell::default();
            vocab.score(t, top_k, &mut c);
            c
        })
        .collect();
    let adjacency = adjacency_counts(&cells, genes);
    let mut co = co_presence(&cells, genes);
    for u in 0..genes {
        co[u * genes + u] = 0;
    }
    (adjacency, co)
}

/// How one affinity matrix separates same-module from cross-module pairs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Separation {
    pub auroc: f64,
    /// Mean entry over same-module and over cross-module pairs.
    pub mean_within: f64,
    pub mean_between: f64,
    /// Share of same-module pairs with a zero entry (never adjacent / never together).
    pub zero_within: f64,
}

/// Scores a symmetric matrix against the modules.
pub fn separation(matrix: &[i64], module_of: &[u32]) -> Separation {
    let n = module_of.len();
    let m: Vec<f64> = matrix.iter().map(|&v| v as f64).collect();
    let same = |u: usize, v: usize| module_of[u] == module_of[v];
    let auroc = pair_auroc(&m, n, same).unwrap_or(f64::NAN);
    let (mut sw, mut nw, mut zw, mut sb, mut nb) = (0.0, 0usize, 0usize, 0.0, 0usize);
    for u in 0..n {
        for v in u + 1..n {
            let x = m[u * n + v];
            if same(u, v) {
                sw += x;
                nw += 1;
                zw += usize::from(x == 0.0);
            } else {
                sb += x;
                nb += 1;
            }
        }
    }
    Separation {
        auroc,
        mean_within: sw / nw.max(1) as f64,
        mean_between: sb / nb.max(1) as f64,
        zero_within: zw as f64 / nw.max(1) as f64,
    }
}

/// Averages an `n × n` matrix over `bins × bins` blocks (off-diagonal entries only) and scales
/// the result to [0, 1] by its maximum, for a heatmap.
pub fn binned(matrix: &[f64], n: usize, bins: usize) -> Vec<f64> {
    let bin = |g: usize| g * bins / n;
    let (mut sum, mut count) = (vec![0.0; bins * bins], vec![0usize; bins * bins]);
    for u in 0..n {
        for v in 0..n {
            if u != v {
                let b = bin(u) * bins + bin(v);
                sum[b] += matrix[u * n + v];
                count[b] += 1;
            }
        }
    }
    let mean: Vec<f64> = sum.iter().zip(&count).map(|(s, &c)| if c == 0 { 0.0 } else { s / c as f64 }).collect();
    let max = mean.iter().copied().fold(0.0f64, f64::max);
    mean.iter().map(|v| if max > 0.0 { v / max } else { 0.0 }).collect()
}

/// The `[from, to)` diagonal block of an `n × n` matrix at full resolution, diagonal zeroed,
/// scaled to [0, 1] by its maximum.
pub fn window(matrix: &[f64], n: usize, from: usize, to: usize) -> Vec<f64> {
    let mut w = Vec::with_capacity((to - from) * (to - from));
    for u in from..to {
        for v in from..to {
            w.push(if u == v { 0.0 } else { matrix[u * n + v] });
        }
    }
    let max = w.iter().copied().fold(0.0f64, f64::max);
    w.iter().map(|v| if max > 0.0 { v / max } else { 0.0 }).collect()
}

/// The genes shown at full resolution: 60 around the boundary of the first two modules.
pub fn zoom_range(p: &StructureParams) -> (usize, usize) {
    let side = 60.min(p.genes);
    let from = (p.genes / p.modules).saturating_sub(side / 2).min(p.genes - side);
    (from, from + side)
}

/// The summary of `synth structure`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StructureReport {
    pub experiment: String,
    pub genes: usize,
    pub modules: usize,
    pub cells: usize,
    pub top_k: usize,
    pub seed: u64,
    pub adjacency: Separation,
    pub cooccurrence: Separation,
    /// Genes `[from, to)` of the full-resolution plot.
    pub zoom_genes: (usize, usize),
    pub seconds: f64,
    /// Files written (with `--out`).
    pub json: Option<String>,
    pub plot: Option<String>,
    pub zoom_plot: Option<String>,
}

/// Heatmaps for the plots: ground truth, adjacency, co-occurrence, each scaled to [0, 1]; all
/// genes averaged in `plot_bins × plot_bins` blocks, and the [`zoom_range`] genes one by one.
#[derive(Clone, Debug)]
pub struct Heatmaps {
    pub binned: [(String, Vec<f64>); 3],
    pub zoom: [(String, Vec<f64>); 3],
}

/// Generates the data, counts both matrices and scores them.
pub fn run(p: &StructureParams) -> (StructureReport, Heatmaps) {
    let start = std::time::Instant::now();
    let data = generate(p);
    let (adj_counts, co_counts) = recover(&data.tokens, p.genes, p.top_k);
    let n = p.genes;
    let truth: Vec<f64> =
        (0..n * n).map(|i| f64::from(u8::from(data.module_of[i / n] == data.module_of[i % n]))).collect();
    let as_f64 = |m: &[i64]| m.iter().map(|&v| v as f64).collect::<Vec<f64>>();
    let (adj, co) = (as_f64(&adj_counts), as_f64(&co_counts));
    let names = ["ground truth (same module)", "adjacency (consecutive ranks)", "co-occurrence (same cell)"];
    let (from, to) = zoom_range(p);
    let mats = [&truth, &adj, &co];
    let maps = Heatmaps {
        binned: std::array::from_fn(|i| (names[i].to_string(), binned(mats[i], n, p.plot_bins))),
        zoom: std::array::from_fn(|i| (names[i].to_string(), window(mats[i], n, from, to))),
    };
    let report = StructureReport {
        experiment: "structure".into(),
        genes: p.genes,
        modules: p.modules,
        cells: p.cells,
        top_k: p.top_k,
        seed: p.seed,
        adjacency: separation(&adj_counts, &data.module_of),
        cooccurrence: separation(&co_counts, &data.module_of),
        zoom_genes: (from, to),
        seconds: start.elapsed().as_secs_f64(),
        json: None,
        plot: None,
        zoom_plot: None,
    };
    (report, maps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> StructureParams {
        StructureParams { genes: 200, modules: 5, cells: 400, top_k: 20, plot_bins: 20, ..Default::default() }
    }

    #[test]
    fn one_module_is_active_per_cell_and_modules_are_equal() {
        let p = StructureParams { cells: 300, ..Default::default() };
        let d = generate(&p);
        let size = p.genes / p.modules;
        for m in 0..p.modules as u32 {
            assert_eq!(d.module_of.iter().filter(|&&x| x == m).count(), size);
        }
        assert!(d.active.iter().all(|&m| (m as usize) < p.modules));
        for (i, &m) in d.active.iter().enumerate() {
            let row = &d.observed[i * p.genes..(i + 1) * p.genes];
            // Only the active module's surviving genes carry the +N(10, 2) signal.
            let high = |g: &usize| row[*g] > 4.0;
            let active_high = (0..p.genes).filter(|&g| d.module_of[g] == m).filter(high).count();
            assert!(active_high > size / 4 && active_high < 3 * size / 4, "cell {i}: {active_high}");
            let other_max = (0..p.genes).filter(|&g| d.module_of[g] != m).map(|g| row[g]).fold(0.0, f64::max);
            assert!(other_max < 20.0, "cell {i}: background {other_max}");
        }
        let mut seen = vec![0; p.modules];
        d.active.iter().for_each(|&m| seen[m as usize] += 1);
        assert!(seen.iter().all(|&c| c > 30), "modules drawn uniformly: {seen:?}");
    }

    #[test]
    fn dropout_removes_about_half_and_tokens_are_the_top_k() {
        let p = StructureParams { cells: 200, ..Default::default() };
        let d = generate(&p);
        let zeros = d.observed.iter().filter(|&&v| v == 0.0).count() as f64 / d.observed.len() as f64;
        assert!((zeros - 0.5).abs() < 0.01, "dropout fraction {zeros}");
        for (i, t) in d.tokens.iter().enumerate() {
            let row = &d.observed[i * p.genes..(i + 1) * p.genes];
            assert_eq!(t.len(), p.top_k);
            let mut distinct = t.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), p.top_k);
            assert!(t.windows(2).all(|w| row[w[0] as usize] >= row[w[1] as usize]), "descending");
            let kth = row[*t.last().unwrap() as usize];
            let above = row.iter().filter(|&&v| v > kth).count();
            assert!(above < p.top_k, "no gene outside the tokens beats the K-th");
        }
    }

    #[test]
    fn same_seed_same_data_other_seed_other_data() {
        let p = small();
        assert_eq!(generate(&p), generate(&p));
        assert_ne!(generate(&p).observed, generate(&StructureParams { seed: 1, ..p }).observed);
    }

    #[test]
    fn matrices_count_what_the_paper_defines() {
        let tokens = vec![vec![3, 1, 0], vec![1, 2, 3]];
        let (a, c) = recover(&tokens, 4, 3);
        let at = |m: &[i64], u: usize, v: usize| m[u * 4 + v];
        assert_eq!((at(&a, 1, 3), at(&a, 0, 1), at(&a, 1, 2), at(&a, 2, 3), at(&a, 0, 3)), (1, 1, 1, 1, 0));
        assert_eq!((at(&c, 1, 3), at(&c, 0, 3), at(&c, 0, 2), at(&c, 3, 3)), (2, 1, 0, 0));
        assert_eq!(a.iter().sum::<i64>(), 2 * 2 * 2, "K − 1 adjacent pairs per cell, both ways");
        assert_eq!(c.iter().sum::<i64>(), 2 * 2 * 3, "K (K − 1) / 2 pairs per cell, both ways");
    }

    #[test]
    fn co_occurrence_separates_modules_better_than_adjacency() {
        let (r, maps) = run(&small());
        assert!(r.cooccurrence.auroc > 0.95, "{r:?}");
        assert!(r.cooccurrence.auroc > r.adjacency.auroc, "{r:?}");
        assert!(r.adjacency.zero_within > r.cooccurrence.zero_within);
        for (_, m) in &maps.binned {
            assert_eq!(m.len(), 20 * 20);
            assert!(m.iter().all(|v| (0.0..=1.0).contains(v)));
        }
        for (_, m) in &maps.zoom {
            assert_eq!(m.len(), 60 * 60);
            assert!(m.iter().all(|v| (0.0..=1.0).contains(v)));
        }
        assert_eq!(zoom_range(&small()), (10, 70), "60 genes around the boundary at 40");
    }

    #[test]
    fn binning_averages_off_diagonal_blocks() {
        let n = 4;
        let m: Vec<f64> = (0..16).map(|i| if i / n / 2 == i % n / 2 { 2.0 } else { 1.0 }).collect();
        let b = binned(&m, n, 2);
        assert_eq!(b, vec![1.0, 0.5, 0.5, 1.0]);
        assert_eq!(window(&m, n, 1, 3), vec![0.0, 1.0, 1.0, 0.0], "cross-block pairs, diagonal zeroed");
    }
}
