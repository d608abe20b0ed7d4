//! One pass over all pairwise Euclidean distances of a set of cells, in blocks of rows (never
//! the whole `n × n` matrix): each row's nearest neighbours, and its summed distances to every
//! label and, within its own label, to every batch — what the k-NN graph, the label silhouette
//! and the batch silhouette need. Blocks run on rayon's threads; each row's results depend only
//! on that row, so they never depend on the thread count.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use rayon::prelude::*;

use super::products::{Points, Products};

/// A labeling of the cells by codes `0..count`.
#[derive(Clone, Copy)]
pub struct Groups<'a> {
    pub codes: &'a [usize],
    pub count: usize,
}

impl Groups<'_> {
    pub fn sizes(&self) -> Vec<usize> {
        let mut s = vec![0; self.count];
        for &c in self.codes {
            s[c] += 1;
        }
        s
    }
}

/// Each cell's `k` nearest other cells (itself excluded), nearest first, ties by index.
#[derive(Clone, Debug)]
pub struct Neighbours {
    pub k: usize,
    pub indices: Vec<u32>,
    pub distances: Vec<f64>,
}

impl Neighbours {
    pub fn len(&self) -> usize {
        self.indices.len().checked_div(self.k).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first `k` of each cell's neighbours.
    pub fn truncate(&self, k: usize) -> Neighbours {
        let k = k.min(self.k);
        let n = self.len();
        let mut out = Neighbours { k, indices: Vec::with_capacity(n * k), distances: Vec::with_capacity(n * k) };
        for i in 0..n {
            out.indices.extend_from_slice(&self.indices[i * self.k..i * self.k + k]);
            out.distances.extend_from_slice(&self.distances[i * self.k..i * self.k + k]);
        }
        out
    }

    pub fn of(&self, i: usize) -> (&[u32], &[f64]) {
        (&self.indices[i * self.k..(i + 1) * self.k], &self.distances[i * self.k..(i + 1) * self.k])
    }
}

/// What one pass gives.
pub struct DistanceSums {
    pub neighbours: Neighbours,
    /// `n × labels`: each cell's summed distance to the cells of every label.
    pub label_sums: Vec<f64>,
    /// `n × batches`: each cell's summed distance to the cells of every batch that share its
    /// label (the batch silhouette is computed within labels).
    pub batch_sums: Option<Vec<f64>>,
}

/// Rows per block: a block's dot products are `rows × n` f32, about 32 MB (599 rows at 14,000
/// cells, 256 from 32,768 cells). Each block re-packs the whole matrix for its product,
/// so small blocks spend their time packing: at 256 rows and 14,000 cells of 2,000 features,
/// packing was a tenth of `eval cells`.
fn block_rows(n: usize) -> usize {
    ((1usize << 23) / n.max(1)).clamp(256, 2048)
}

#[derive(PartialEq)]
struct Candidate(f64, u32);
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Candidate {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0).then(self.1.cmp(&o.1))
    }
}

/// Distances from every cell to all cells, reduced as [`DistanceSums`] describes.
pub fn distance_pass(points: Points<'_>, k: usize, labels: Groups<'_>, batches: Option<Groups<'_>>) -> DistanceSums {
    let n = points.len();
    let k = k.min(n.saturating_sub(1));
    // The products run in f32 (twice f64's rate, half its memory); norms and distances stay in
    // f64. Shifting each column first (distances do not change: `products.rs`) keeps the norms
    // near the distances, so the f32 rounding of `|x|² + |y|² − 2x·y` stays small beside them;
    // near-duplicates, where it would not, are recomputed in f64 (`squared_to_distances`).
    let products = Products::new(points);
    tracing::debug!(cells = n, dim = points.dim, indexed = products.indexed_columns(), "distance pass products");
    let block = block_rows(n);
    let blocks: Vec<usize> = (0..n).step_by(block).collect();
    let per_block: Vec<Vec<RowResult>> = blocks
        .par_iter()
        .map(|&start| {
            let rows = block.min(n - start);
            let dots = products.block(start, rows);
            let mut chunk = vec![0.0; CHUNK.min(n)];
            (0..rows)
                .map(|r| {
                    let i = start + r;
                    let col = dots.col(r).try_as_col_major().expect("a column of a column-major Mat");
                    let mut row = RowReducer::new(i, k, labels, batches);
                    for from in (0..n).step_by(CHUNK) {
                        let d = &mut chunk[..CHUNK.min(n - from)];
                        squared_to_distances(
                            i,
                            from,
                            points,
                            &products.norms,
                            &col.as_slice()[from..from + d.len()],
                            d,
                        );
                        row.add(from, d);
                    }
                    row.finish()
                })
                .collect()
        })
        .collect();
    let mut out = DistanceSums {
        neighbours: Neighbours { k, indices: Vec::with_capacity(n * k), distances: Vec::with_capacity(n * k) },
        label_sums: Vec::with_capacity(n * labels.count),
        batch_sums: batches.map(|b| Vec::with_capacity(n * b.count)),
    };
    for row in per_block.into_iter().flatten() {
        out.neighbours.indices.extend(row.neighbours.iter().map(|c| c.1));
        out.neighbours.distances.extend(row.neighbours.iter().map(|c| c.0));
        out.label_sums.extend(row.label_sums);
        if let (Some(all), Some(b)) = (out.batch_sums.as_mut(), row.batch_sums) {
            all.extend(b);
        }
    }
    out
}

struct RowResult {
    neighbours: Vec<Candidate>,
    label_sums: Vec<f64>,
    batch_sums: Option<Vec<f64>>,
}

/// Cells per chunk of a row's distances: 16 KB of f64, so that the chunk's loops below run in L1
/// (at 100,000 cells a whole row is 800 KB, and five passes over it from L2/L3 made the
/// low-dimensional methods' distance pass 6× their product).
const CHUNK: usize = 2048;

/// `dist[t] = √max(0, |x_i|² + |x_j|² − 2 x_i·x_j)` for `j = from + t`, from the (centred) norms
/// and f32 products `dots` (`dist[i − from]` = 0). Where that squared distance is under a
/// thousandth of the norms, the product's rounding (~10⁻⁷ of them) would be a visible part of
/// it: those pairs (near-duplicates, which the nearest-neighbour lists rank) are recomputed in
/// f64 from the rows. The other loops are branch-free over equal-length slices so that they
/// vectorise (with `f64::max` and iterator adaptors the compiler kept the square roots scalar).
fn squared_to_distances(i: usize, from: usize, points: Points<'_>, norms: &[f64], dots: &[f32], dist: &mut [f64]) {
    let len = dist.len();
    let norm_i = norms[i];
    let (norms, dots) = (&norms[from..from + len], &dots[..len]);
    for t in 0..len {
        dist[t] = norm_i + norms[t] - 2.0 * f64::from(dots[t]);
    }
    // Counted without a branch (it vectorises); near-duplicates are rare, so the loop that
    // fixes them runs for few chunks.
    let near: usize = (0..len).map(|t| usize::from(dist[t] < 1e-3 * (norm_i + norms[t]))).sum();
    if near > 0 {
        let xi = points.row(i);
        for t in 0..len {
            if dist[t] < 1e-3 * (norm_i + norms[t]) {
                dist[t] = xi.iter().zip(points.row(from + t)).map(|(a, b)| (a - b) * (a - b)).sum();
            }
        }
    }
    // The square root in f32 (relative error ~6e-8, four lanes a step): in f64 it was half of
    // the pass at 100,000 cells of 64 dimensions (10¹⁰ roots).
    for d in dist.iter_mut() {
        *d = f64::from((if *d > 0.0 { *d } else { 0.0 } as f32).sqrt());
    }
    if (from..from + len).contains(&i) {
        dist[i - from] = 0.0;
    }
}

/// Row `i`'s reductions, fed its distances chunk by chunk.
struct RowReducer<'a> {
    i: usize,
    k: usize,
    labels: Groups<'a>,
    batches: Option<Groups<'a>>,
    heap: BinaryHeap<Candidate>,
    /// The heap's farthest once it holds k (until then every cell enters).
    worst: f64,
    /// Four interleaved accumulators per label: with few labels, one array's adds to the same
    /// slot form a chain of dependent load-add-stores, which set the loop's pace.
    partial: Vec<f64>,
    batch_sums: Option<Vec<f64>>,
}

impl<'a> RowReducer<'a> {
    fn new(i: usize, k: usize, labels: Groups<'a>, batches: Option<Groups<'a>>) -> Self {
        RowReducer {
            i,
            k,
            labels,
            batches,
            heap: BinaryHeap::with_capacity(k + 1),
            worst: f64::INFINITY,
            partial: vec![0.0; 4 * labels.count],
            batch_sums: batches.map(|b| vec![0.0; b.count]),
        }
    }

    /// The distances to cells `from..from + dist.len()`.
    fn add(&mut self, from: usize, dist: &[f64]) {
        let count = self.labels.count;
        let codes = &self.labels.codes[from..from + dist.len()];
        let quads = dist.len() / 4 * 4;
        for (d, l) in dist[..quads].chunks_exact(4).zip(codes[..quads].chunks_exact(4)) {
            for lane in 0..4 {
                self.partial[lane * count + l[lane]] += d[lane];
            }
        }
        for t in quads..dist.len() {
            self.partial[codes[t]] += dist[t];
        }
        if let (Some(s), Some(b)) = (self.batch_sums.as_mut(), self.batches) {
            let own = self.labels.codes[self.i];
            for (t, &dt) in dist.iter().enumerate() {
                if codes[t] == own {
                    s[b.codes[from + t]] += dt;
                }
            }
        }
        if self.k == 0 {
            return;
        }
        for (t, &dt) in dist.iter().enumerate() {
            let j = from + t;
            if j == self.i || (self.heap.len() == self.k && dt > self.worst) {
                continue;
            }
            let c = Candidate(dt, j as u32);
            if self.heap.len() < self.k {
                self.heap.push(c);
            } else if c < *self.heap.peek().expect("k > 0") {
                self.heap.pop();
                self.heap.push(c);
            }
            if self.heap.len() == self.k {
                self.worst = self.heap.peek().map_or(f64::INFINITY, |c| c.0);
            }
        }
    }

    fn finish(self) -> RowResult {
        let count = self.labels.count;
        let label_sums = (0..count).map(|l| (0..4).map(|lane| self.partial[lane * count + l]).sum()).collect();
        RowResult { neighbours: self.heap.into_sorted_vec(), label_sums, batch_sums: self.batch_sums }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts row `i`'s neighbours (the first `k`), label sums and its sum over batch `batch`
    /// within its label against distances computed directly from the points.
    fn check_row(
        out: &DistanceSums,
        points: Points<'_>,
        codes: &[usize],
        bcodes: &[usize],
        i: usize,
        k: usize,
        batch: usize,
    ) {
        let n = points.len();
        let dist = |i: usize, j: usize| {
            points.row(i).iter().zip(points.row(j)).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt()
        };
        let mut all: Vec<(f64, usize)> = (0..n).filter(|&j| j != i).map(|j| (dist(i, j), j)).collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let (idx, d) = out.neighbours.of(i);
        for r in 0..k {
            assert!((d[r] - all[r].0).abs() < 1e-5, "row {i}: {} vs {}", d[r], all[r].0);
        }
        assert_eq!(idx[0] as usize, all[0].1);
        for l in 0..3 {
            let s: f64 = (0..n).filter(|&j| codes[j] == l).map(|j| dist(i, j)).sum();
            assert!((out.label_sums[i * 3 + l] - s).abs() < 1e-5 * s.max(1.0));
        }
        let bs = out.batch_sums.as_ref().unwrap();
        let s: f64 = (0..n).filter(|&j| codes[j] == codes[i] && bcodes[j] == batch).map(|j| dist(i, j)).sum();
        assert!((bs[i * 2 + batch] - s).abs() < 1e-5 * s.max(1.0));
    }

    #[test]
    fn rows_longer_than_a_chunk_reduce_as_a_direct_computation() {
        // 2.2 chunks per row, with exact duplicates (cell j and j + 2,000 coincide).
        let n = 2 * CHUNK + 400;
        let data: Vec<f64> =
            (0..n).flat_map(|i| [((i % 2000) as f64 * 0.37).sin(), ((i % 2000) as f64 * 0.11).cos()]).collect();
        let points = Points { data: &data, dim: 2 };
        let codes: Vec<usize> = (0..n).map(|i| i % 3).collect();
        let bcodes: Vec<usize> = (0..n).map(|i| (i / 7) % 2).collect();
        let (labels, batches) = (Groups { codes: &codes, count: 3 }, Groups { codes: &bcodes, count: 2 });
        let out = distance_pass(points, 4, labels, Some(batches));
        for i in [0, CHUNK - 1, CHUNK, n - 1] {
            assert_eq!(out.neighbours.of(i).1[0], 0.0, "row {i}: its duplicate is at distance 0");
            check_row(&out, points, &codes, &bcodes, i, 4, 0);
        }
    }

    #[test]
    fn neighbours_and_sums_match_a_direct_computation() {
        let data: Vec<f64> = (0..600).map(|i| ((i * 37 % 101) as f64 * 0.13).sin()).collect();
        let points = Points { data: &data, dim: 3 };
        let n = points.len();
        let codes: Vec<usize> = (0..n).map(|i| i % 3).collect();
        let bcodes: Vec<usize> = (0..n).map(|i| i % 2).collect();
        let labels = Groups { codes: &codes, count: 3 };
        let batches = Groups { codes: &bcodes, count: 2 };
        let out = distance_pass(points, 5, labels, Some(batches));
        for i in [0, 17, 199] {
            check_row(&out, points, &codes, &bcodes, i, 5, 1);
        }
    }

    #[test]
    fn mostly_one_value_columns_reduce_as_a_direct_computation() {
        // Log-count-like cells: 30 columns mostly at their minimum (indexed), two dense ones
        // (centred), with exact duplicates (cell j and j + 500 coincide).
        let (n, dim) = (1100, 32);
        let data: Vec<f64> = (0..n)
            .flat_map(|i| {
                let i = i % 500;
                (0..dim).map(move |c| match c {
                    0 | 1 => ((i * (c + 3)) as f64 * 0.7).sin(),
                    _ if (i * 31 + c * 17) % 19 == 0 => -0.2 + (i % 7) as f64 * 0.3 + 0.1,
                    _ => -0.2,
                })
            })
            .collect();
        let points = Points { data: &data, dim };
        assert_eq!(Products::new(points).indexed_columns(), dim - 2);
        let codes: Vec<usize> = (0..n).map(|i| i % 3).collect();
        let bcodes: Vec<usize> = (0..n).map(|i| (i / 7) % 2).collect();
        let (labels, batches) = (Groups { codes: &codes, count: 3 }, Groups { codes: &bcodes, count: 2 });
        let out = distance_pass(points, 4, labels, Some(batches));
        for i in [0, 1, 499, 500, 1099] {
            assert_eq!(out.neighbours.of(i).1[0], 0.0, "row {i}: its duplicate is at distance 0");
            check_row(&out, points, &codes, &bcodes, i, 4, 1);
        }
    }
}
