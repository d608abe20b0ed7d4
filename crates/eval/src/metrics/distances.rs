//! One pass over all pairwise Euclidean distances of a set of cells, in blocks of rows (never
//! the whole `n × n` matrix): each row's nearest neighbours, and its summed distances to every
//! label and, within its own label, to every batch — what the k-NN graph, the label silhouette
//! and the batch silhouette need. Blocks run on rayon's threads; each row's results depend only
//! on that row, so they never depend on the thread count.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use faer::linalg::matmul::matmul;
use faer::{Accum, Mat, MatRef, Par};
use rayon::prelude::*;

/// Cells as the rows of a dense row-major matrix.
#[derive(Clone, Copy)]
pub struct Points<'a> {
    pub data: &'a [f64],
    pub dim: usize,
}

impl Points<'_> {
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn row(&self, i: usize) -> &[f64] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}

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
    // f64. Centring first (distances do not change) keeps the norms near the distances, so the
    // f32 rounding of `|x|² + |y|² − 2x·y` stays small beside them; near-duplicates, where it
    // would not, are recomputed in f64 (`squared_to_distances`).
    let dim = points.dim.max(1);
    let mut mean = vec![0.0f64; dim];
    points.data.chunks(dim).for_each(|row| mean.iter_mut().zip(row).for_each(|(m, v)| *m += v));
    mean.iter_mut().for_each(|m| *m /= n.max(1) as f64);
    let single: Vec<f32> =
        points.data.chunks(dim).flat_map(|row| row.iter().zip(&mean).map(|(v, m)| (v - m) as f32)).collect();
    let norms: Vec<f64> =
        single.chunks(points.dim.max(1)).map(|row| row.iter().map(|&v| f64::from(v) * f64::from(v)).sum()).collect();
    let all = MatRef::from_row_major_slice(&single, n, points.dim);
    let block = block_rows(n);
    let blocks: Vec<usize> = (0..n).step_by(block).collect();
    let per_block: Vec<Vec<RowResult>> = blocks
        .par_iter()
        .map(|&start| {
            let rows = block.min(n - start);
            // `n × rows`, column-major: one row's dot products are contiguous.
            let mut dots = Mat::<f32>::zeros(n, rows);
            matmul(dots.as_mut(), Accum::Replace, all, all.subrows(start, rows).transpose(), 1.0, Par::Seq);
            let mut dist = vec![0.0; n];
            (0..rows)
                .map(|r| {
                    let i = start + r;
                    let col = dots.col(r).try_as_col_major().expect("a column of a column-major Mat");
                    squared_to_distances(i, points, &norms, col.as_slice(), &mut dist);
                    dist[i] = 0.0;
                    reduce_row(i, &dist, k, labels, batches)
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

/// `dist[j] = √max(0, |x_i|² + |x_j|² − 2 x_i·x_j)` from the (centred) norms and f32 products.
/// Where that squared distance is under a thousandth of the norms, the product's rounding
/// (~10⁻⁷ of them) would be a visible part of it: those pairs (near-duplicates, which the
/// nearest-neighbour lists rank) are recomputed in f64 from the rows. The other two loops are
/// branch-free over equal-length slices so that they vectorise (with `f64::max` and iterator
/// adaptors the compiler kept the square roots scalar, a fifth of a 64-d method's time).
fn squared_to_distances(i: usize, points: Points<'_>, norms: &[f64], dots: &[f32], dist: &mut [f64]) {
    let n = dist.len();
    let (norms, dots) = (&norms[..n], &dots[..n]);
    let norm_i = norms[i];
    for j in 0..n {
        dist[j] = norm_i + norms[j] - 2.0 * f64::from(dots[j]);
    }
    let xi = points.row(i);
    for j in 0..n {
        if dist[j] < 1e-3 * (norm_i + norms[j]) {
            dist[j] = xi.iter().zip(points.row(j)).map(|(a, b)| (a - b) * (a - b)).sum();
        }
    }
    for d in dist.iter_mut() {
        *d = if *d > 0.0 { *d } else { 0.0 }.sqrt();
    }
}

/// Row `i`'s reductions from its distances to every cell (`dist[i]` = 0).
fn reduce_row(i: usize, dist: &[f64], k: usize, labels: Groups<'_>, batches: Option<Groups<'_>>) -> RowResult {
    let mut heap: BinaryHeap<Candidate> = BinaryHeap::with_capacity(k + 1);
    let mut label_sums = vec![0.0; labels.count];
    let mut batch_sums = batches.map(|b| vec![0.0; b.count]);
    let own = labels.codes[i];
    // Four interleaved accumulators: with few labels, one array's adds to the same slot form a
    // chain of dependent load-add-stores, which set this loop's pace.
    let mut partial = vec![0.0; 4 * labels.count];
    let (quads, rest) = (dist.len() / 4 * 4, dist.len() % 4);
    for (d, l) in dist[..quads].chunks_exact(4).zip(labels.codes[..quads].chunks_exact(4)) {
        for lane in 0..4 {
            partial[lane * labels.count + l[lane]] += d[lane];
        }
    }
    for j in quads..quads + rest {
        partial[labels.codes[j]] += dist[j];
    }
    for (l, sum) in label_sums.iter_mut().enumerate() {
        *sum = (0..4).map(|lane| partial[lane * labels.count + l]).sum();
    }
    if let (Some(s), Some(b)) = (batch_sums.as_mut(), batches) {
        for (j, &dj) in dist.iter().enumerate() {
            if labels.codes[j] == own {
                s[b.codes[j]] += dj;
            }
        }
    }
    if k > 0 {
        // Until the heap holds k, every cell enters; then only those nearer than its farthest.
        let mut worst = f64::INFINITY;
        for (j, &dj) in dist.iter().enumerate() {
            if j == i || (heap.len() == k && dj > worst) {
                continue;
            }
            let c = Candidate(dj, j as u32);
            if heap.len() < k {
                heap.push(c);
            } else if c < *heap.peek().expect("k > 0") {
                heap.pop();
                heap.push(c);
            }
            if heap.len() == k {
                worst = heap.peek().map_or(f64::INFINITY, |c| c.0);
            }
        }
    }
    RowResult { neighbours: heap.into_sorted_vec(), label_sums, batch_sums }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let dist = |i: usize, j: usize| {
            points.row(i).iter().zip(points.row(j)).map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt()
        };
        for i in [0, 17, 199] {
            let mut all: Vec<(f64, usize)> = (0..n).filter(|&j| j != i).map(|j| (dist(i, j), j)).collect();
            all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            let (idx, d) = out.neighbours.of(i);
            for r in 0..5 {
                assert!((d[r] - all[r].0).abs() < 1e-5, "{} vs {}", d[r], all[r].0);
            }
            assert_eq!(idx[0] as usize, all[0].1);
            for l in 0..3 {
                let s: f64 = (0..n).filter(|&j| codes[j] == l).map(|j| dist(i, j)).sum();
                assert!((out.label_sums[i * 3 + l] - s).abs() < 1e-5 * s.max(1.0));
            }
            let bs = out.batch_sums.as_ref().unwrap();
            let s: f64 = (0..n).filter(|&j| codes[j] == codes[i] && bcodes[j] == 1).map(|j| dist(i, j)).sum();
            assert!((bs[i * 2 + 1] - s).abs() < 1e-5 * s.max(1.0));
        }
    }
}
