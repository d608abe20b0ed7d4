//! `corrflow vocab build`: per-gene medians of the nonzero normalized expression
//! (`count / n_counts * 10,000`, Geneformer's definition) in one streaming pass.
//!
//! Each gene gets a [`LogQuantileSketch`]: its median is within relative error `alpha`
//! (default 0.1%) of the exact `numpy.median` of the gene's nonzero normalized values, for any
//! data and corpus size; memory is one small bucket map per gene, not one value per cell.
//! That memory still follows the buckets the values reach, which new cells keep widening
//! (BENCHMARKS "Atlas scale", session 49); `two_pass` reads the inputs twice instead, a coarse
//! pass to find the buckets of each gene's middle ranks and a fine pass inside them only, for
//! the same medians in memory that stays nearly flat.
//!
//! One pass keeps its memory bounded too: when the sketches' pages pass `sketch_memory_mb`, the
//! outermost pages of the genes whose middle ranks lie farthest from them are folded into counts
//! ([`Side`]), which leaves every median as it was. A gene whose median later moves into a
//! folded tail is known at the end and counted again, alone, in a second read of the inputs.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use corrflow_algorithms::{rank::TARGET_SUM, LogQuantileSketch, Side, MIN_ALPHA, PAGE_BYTES};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::formats::{open, ReadOptions};
use crate::tokenize::{cell_counts, sum_duplicates, TokenizeOptions};
use crate::vocab::{Vocabulary, MASK, PAD};

/// Settings of `vocab build`.
#[derive(Clone, Debug)]
pub struct VocabBuildOptions {
    pub name: String,
    pub read: ReadOptions,
    /// Value validation (counts vs normalized, log1p input).
    pub values: TokenizeOptions,
    /// Relative error bound of the medians.
    pub alpha: f64,
    /// Genes expressed in fewer cells are left out.
    pub min_cells: u64,
    /// Read the inputs twice, in memory that stays nearly flat as cells are added (same
    /// medians).
    pub two_pass: bool,
    /// Memory for the one-pass sketches' counts, in MiB (0: no limit). Past it, pages far from
    /// each median are folded; the medians stay the same.
    pub sketch_memory_mb: u64,
}

/// Default of `sketch_memory_mb`: above what 65k cells of three atlases take (~113 MiB), so
/// small inputs never fold, and a fixed bound for any larger one.
pub const SKETCH_MEMORY_MB: u64 = 128;

/// Relative error of the first pass of `two_pass`: ~50 times wider buckets than the default
/// alpha, so a gene's whole range fits one or two pages of counts.
pub const COARSE_ALPHA: f64 = 0.05;

/// What `vocab build --json` prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VocabBuildSummary {
    pub command: String,
    pub out: String,
    pub genes: usize,
    pub genes_below_min_cells: usize,
    pub cells: u64,
    pub alpha: f64,
    /// Passes over the inputs: 2 with `two_pass` (below [`COARSE_ALPHA`]) or when some gene
    /// was counted again, else 1.
    #[serde(default)]
    pub passes: u32,
    /// Genes counted again in a second pass because their median moved into a folded tail.
    #[serde(default)]
    pub genes_recounted: usize,
    /// Pages of the one-pass sketches folded to stay within `sketch_memory_mb`.
    #[serde(default)]
    pub pages_folded: u64,
    pub hash: String,
    pub seconds: f64,
}

/// Streaming estimator of each gene's median nonzero normalized expression.
#[derive(Debug)]
pub struct MedianEstimator {
    alpha: f64,
    index: HashMap<String, usize>,
    genes: Vec<String>,
    sketches: Vec<LogQuantileSketch>,
    /// (slot, bucket) of values not yet in their sketch. Adding values one by one was a
    /// B-tree descent with cache misses each (~550 ns per value); sorted, each gene's values
    /// land together and equal buckets are added once.
    pending: Vec<(u32, i32)>,
    cells: u64,
    /// Set for the second pass of a two-pass estimate: only values in these buckets are added.
    first: Option<FirstPass>,
    /// Most pages the sketches may hold before their tails are folded (`None`: no limit).
    page_budget: Option<usize>,
    pages_folded: u64,
    /// Set for a second pass that counts again, in full, the slots marked true.
    recount: Option<Vec<bool>>,
}

/// What the coarse first pass found: each slot's sketch and the buckets of its middle ranks.
#[derive(Debug)]
struct FirstPass {
    sketches: Vec<LogQuantileSketch>,
    /// (bucket of rank ⌊(n−1)/2⌋, bucket of rank ⌊n/2⌋, values below the first), by slot.
    middle: Vec<Option<(i32, i32, u64)>>,
}

/// Fewest values a sketch must hold before its pages may fold. A gene seen in a few hundred
/// cells holds a few pages at most, and its median can still move far: on the scale driver's
/// 1M-cell atlas every gene counted again had 110–415 values when folded (session 63).
const MIN_FOLD_VALUES: u64 = 4096;

/// Values buffered before they are added to the sketches (8 bytes each).
const PENDING_VALUES: usize = 1 << 18;

impl MedianEstimator {
    pub fn new(alpha: f64) -> Self {
        Self {
            alpha,
            index: HashMap::new(),
            genes: Vec::new(),
            sketches: Vec::new(),
            pending: Vec::new(),
            cells: 0,
            first: None,
            page_budget: None,
            pages_folded: 0,
            recount: None,
        }
    }

    /// Keeps the sketches' pages within `mb` MiB by folding their tails (0: no limit).
    pub fn with_sketch_memory_mb(self, mb: u64) -> Self {
        let pages = usize::try_from(mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX) / PAGE_BYTES;
        self.with_page_budget((mb > 0).then_some(pages))
    }

    fn with_page_budget(mut self, pages: Option<usize>) -> Self {
        self.page_budget = pages;
        self
    }

    /// Slots whose median moved into a folded tail after the first pass: they must be counted
    /// again ([`Self::start_recount`]).
    pub fn slots_to_recount(&mut self) -> Vec<usize> {
        self.flush();
        let slots: Vec<usize> =
            self.sketches.iter().enumerate().filter(|(_, s)| s.median_folded()).map(|(i, _)| i).collect();
        for &i in &slots {
            let (below, above) = self.sketches[i].folded();
            let values = self.sketches[i].count();
            tracing::debug!(gene = %self.genes[i], values, below, above, "median moved into a folded tail");
        }
        slots
    }

    /// Starts a second pass that counts `slots` again from nothing, with no limit on their
    /// pages; the same inputs must then be read again, in the same order.
    pub fn start_recount(&mut self, slots: &[usize]) {
        self.flush();
        let mut marked = vec![false; self.sketches.len()];
        for &i in slots {
            marked[i] = true;
            self.sketches[i] = LogQuantileSketch::new(self.alpha);
        }
        self.recount = Some(marked);
        self.page_budget = None;
    }

    /// Pages folded so far to stay within the budget.
    pub fn pages_folded(&self) -> u64 {
        self.pages_folded
    }

    /// Ends a first pass (made with a coarse alpha) and starts the second, whose sketches of
    /// relative error `alpha` count only the values in the buckets of each gene's middle ranks.
    /// The same inputs must then be read again, in the same order.
    pub fn start_second_pass(&mut self, alpha: f64) {
        self.flush();
        let middle = self.sketches.iter().map(LogQuantileSketch::median_buckets).collect();
        let fine = self.sketches.iter().map(|_| LogQuantileSketch::new(alpha)).collect();
        self.first = Some(FirstPass { sketches: std::mem::replace(&mut self.sketches, fine), middle });
        self.alpha = alpha;
    }

    /// Global slot of each of a file's gene ids (duplicates share a slot).
    pub fn slots(&mut self, gene_ids: &[String]) -> Vec<usize> {
        gene_ids
            .iter()
            .map(|g| {
                let g = g.trim().to_string();
                *self.index.entry(g.clone()).or_insert_with(|| {
                    self.genes.push(g);
                    self.sketches.push(LogQuantileSketch::new(self.alpha));
                    self.genes.len() - 1
                })
            })
            .collect()
    }

    /// Adds one cell: its (slot, count) pairs with duplicates already summed, and its total.
    pub fn add_cell(&mut self, counts: &[(usize, f64)], n_counts: f64) {
        if n_counts <= 0.0 {
            return;
        }
        if self.first.is_none() && self.recount.is_none() {
            self.cells += 1;
        }
        for &(slot, c) in counts {
            if self.recount.as_ref().is_some_and(|marked| !marked[slot]) {
                continue;
            }
            let x = c / n_counts * TARGET_SUM;
            if let Some(first) = &self.first {
                let coarse = first.sketches.get(slot).and_then(|s| s.bucket(x));
                let middle = first.middle.get(slot).copied().flatten();
                if !matches!((coarse, middle), (Some(k), Some((lo, hi, _))) if k == lo || k == hi) {
                    continue;
                }
            }
            if let Some(key) = self.sketches[slot].bucket(x) {
                self.pending.push((slot as u32, key));
            }
        }
        if self.pending.len() >= PENDING_VALUES {
            self.flush();
        }
    }

    /// Adds the buffered values to their sketches.
    fn flush(&mut self) {
        self.pending.sort_unstable();
        for run in self.pending.chunk_by(|a, b| a == b) {
            let (slot, key) = run[0];
            self.sketches[slot as usize].add_to_bucket(key, run.len() as u64);
        }
        self.pending.clear();
        if let Some(budget) = self.page_budget {
            self.fold_to(budget);
        }
    }

    /// When the sketches hold more than `budget` pages, folds end pages until they hold 7/8 of
    /// it (so folding is not redone at every flush), those whose values lie farthest from their
    /// gene's middle ranks (as a share of its values) first. Stops early when no page can fold
    /// without taking a middle rank.
    fn fold_to(&mut self, budget: usize) {
        let mut held: usize = self.sketches.iter().map(LogQuantileSketch::pages).sum();
        if held <= budget {
            return;
        }
        let target = budget - budget / 8;
        while held > target {
            let mut ends: Vec<(f64, usize, Side)> = Vec::new();
            for (slot, s) in self.sketches.iter().enumerate().filter(|(_, s)| s.count() >= MIN_FOLD_VALUES) {
                for side in [Side::Low, Side::High] {
                    if let Some(margin) = s.end_page_margin(side) {
                        ends.push((margin as f64 / s.count() as f64, slot, side));
                    }
                }
            }
            if ends.is_empty() {
                return;
            }
            // Farthest first; ties by slot and side, so the folds depend on the data alone.
            ends.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
            for (_, slot, side) in ends {
                if held <= target {
                    break;
                }
                let s = &mut self.sketches[slot];
                let before = s.pages();
                s.fold_end_page(side);
                let freed = before - s.pages();
                held -= freed;
                self.pages_folded += freed as u64;
            }
        }
    }

    /// (gene id, estimated median, number of cells expressing it), for genes seen expressed.
    /// Fails when a second pass did not see the values of the first (the inputs changed).
    pub fn medians(&mut self) -> Result<Vec<(String, f64, u64)>> {
        self.flush();
        let Some(first) = &self.first else {
            if let Some(g) = self.genes.iter().zip(&self.sketches).find(|(_, s)| s.median_folded()).map(|(g, _)| g) {
                return Err(Error::Usage(format!(
                    "vocab build: gene {g}'s median lies in values folded to save memory and was not counted \
                     again; the inputs changed while being read (build again once they are complete)"
                )));
            }
            return Ok(self
                .genes
                .iter()
                .zip(&self.sketches)
                .filter_map(|(g, s)| s.median().map(|m| (g.clone(), m, s.count())))
                .collect());
        };
        let coarse = first.sketches.iter().zip(&first.middle);
        self.genes
            .iter()
            .zip(&self.sketches)
            .zip(coarse)
            .filter_map(|((g, fine), (coarse, middle))| {
                let (_, _, below) = (*middle)?;
                Some(fine.median_in(coarse.count(), below).map(|m| (g.clone(), m, coarse.count())).ok_or_else(|| {
                    Error::Usage(format!(
                        "vocab build --two-pass: gene {g}'s middle values were not read again in the second pass; \
                         the inputs changed while being read (build again once they are complete)"
                    ))
                }))
            })
            .collect()
    }

    pub fn cells(&self) -> u64 {
        self.cells
    }
}

/// `None` when `alpha` is a usable relative error for the median sketches; otherwise the
/// allowed range, for the caller's message (`--alpha` here, `vocab.alpha` in the config).
pub fn alpha_out_of_range(alpha: f64) -> Option<String> {
    (!(alpha >= MIN_ALPHA && alpha < 0.5)).then(|| format!("[{MIN_ALPHA:e}, 0.5)"))
}

/// Builds a vocabulary from `inputs` and writes it to `out`.
pub fn build_vocabulary(
    inputs: &[PathBuf],
    out: &Path,
    opts: &VocabBuildOptions,
) -> Result<(Vocabulary, VocabBuildSummary)> {
    let started = Instant::now();
    if let Some(allowed) = alpha_out_of_range(opts.alpha) {
        return Err(Error::Usage(format!("--alpha must be in {allowed}, got {}", opts.alpha)));
    }
    let mut passes = if opts.two_pass && opts.alpha < COARSE_ALPHA { 2 } else { 1 };
    let mut est = if passes == 2 {
        MedianEstimator::new(COARSE_ALPHA)
    } else {
        MedianEstimator::new(opts.alpha).with_sketch_memory_mb(opts.sketch_memory_mb)
    };
    let first = add_cells(inputs, opts, &mut est)?;
    let mut recounted = 0;
    if passes == 2 {
        est.start_second_pass(opts.alpha);
        check_same_cells(inputs, &first, &add_cells(inputs, opts, &mut est)?, "of --two-pass")?;
    } else {
        let slots = est.slots_to_recount();
        if !slots.is_empty() {
            recounted = slots.len();
            est.start_recount(&slots);
            check_same_cells(inputs, &first, &add_cells(inputs, opts, &mut est)?, "(a recount of folded genes)")?;
            passes = 2;
        }
    }
    let mut medians = est.medians()?;
    let before = medians.len();
    medians.retain(|m| m.2 >= opts.min_cells);
    if medians.is_empty() {
        return Err(Error::Usage(format!("no gene is expressed in at least {} cells of the inputs", opts.min_cells)));
    }
    medians.sort_by(|a, b| a.0.cmp(&b.0));
    let mut tokens = format!("token\tid\n{PAD}\t0\n{MASK}\t1\n");
    let mut med = String::from("ensembl_id\tmedian\n");
    for (i, (g, m, _)) in medians.iter().enumerate() {
        let _ = writeln!(tokens, "{g}\t{}", i + 2);
        let _ = writeln!(med, "{g}\t{m:?}");
    }
    let vocab = Vocabulary::from_tables(&opts.name, &tokens, &med, None)?;
    vocab.write_dir(out)?;
    let summary = VocabBuildSummary {
        command: "vocab build".into(),
        out: out.display().to_string(),
        genes: medians.len(),
        genes_below_min_cells: before - medians.len(),
        cells: est.cells(),
        alpha: opts.alpha,
        passes,
        genes_recounted: recounted,
        pages_folded: est.pages_folded(),
        hash: vocab.hash().to_string(),
        seconds: started.elapsed().as_secs_f64(),
    };
    Ok((vocab, summary))
}

/// Fails when a second pass read another number of cells from an input than the first.
fn check_same_cells(inputs: &[PathBuf], first: &[usize], second: &[usize], what: &str) -> Result<()> {
    match inputs.iter().zip(first.iter().zip(second)).find(|(_, (a, b))| a != b) {
        Some((path, (a, b))) => Err(Error::InvalidData {
            path: path.clone(),
            msg: format!("{a} cells in the first pass and {b} in the second {what}: it changed while being read"),
        }),
        None => Ok(()),
    }
}

/// Reads every cell of `inputs` into `est`: its (slot, count) pairs, duplicates summed. Returns
/// each input's number of cells.
fn add_cells(inputs: &[PathBuf], opts: &VocabBuildOptions, est: &mut MedianEstimator) -> Result<Vec<usize>> {
    let mut counts: Vec<(usize, f64)> = Vec::new();
    let mut cells = Vec::with_capacity(inputs.len());
    for path in inputs {
        let mut source = open(path, &opts.read)?;
        let gene_ids = source.gene_ids().to_vec();
        let slots = est.slots(&gene_ids);
        let n = source.n_cells();
        cells.push(n);
        let step = opts.read.chunk_cells.max(1);
        for start in (0..n).step_by(step) {
            let chunk = source.read_chunk(start..(start + step).min(n))?;
            for i in 0..chunk.n_cells() {
                counts.clear();
                let total = cell_counts(path, &chunk, i, &gene_ids, &opts.values, |col, v| {
                    counts.push((slots[col as usize], v))
                })?;
                sum_duplicates(&mut counts);
                est.add_cell(&counts, total);
            }
        }
    }
    Ok(cells)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cells of ten genes whose values spread over a wide range; `shift` scales every count
    /// of the second half, so the medians move after the first half's tails were folded.
    fn cells(n: usize, shift: f64) -> Vec<(Vec<(usize, f64)>, f64)> {
        (0..n)
            .map(|i| {
                let scale = if i >= n / 2 { shift } else { 1.0 };
                let counts: Vec<(usize, f64)> =
                    (0..10).map(|g| (g, scale * (1.0 + ((i * 7919 + g * 104_729) % 997) as f64).powf(1.7))).collect();
                (counts, 1e6)
            })
            .collect()
    }

    fn medians(cells: &[(Vec<(usize, f64)>, f64)], budget: Option<usize>) -> (Vec<(String, f64, u64)>, usize, u64) {
        let mut est = MedianEstimator::new(0.001).with_page_budget(budget);
        let genes: Vec<String> = (0..10).map(|g| format!("G{g}")).collect();
        est.slots(&genes);
        let read = |est: &mut MedianEstimator| cells.iter().for_each(|(c, n)| est.add_cell(c, *n));
        read(&mut est);
        let again = est.slots_to_recount();
        if !again.is_empty() {
            est.start_recount(&again);
            read(&mut est);
        }
        let folded = est.pages_folded();
        (est.medians().unwrap(), again.len(), folded)
    }

    /// Medians compared bit for bit.
    fn bits(m: &[(String, f64, u64)]) -> Vec<(String, u64, u64)> {
        m.iter().map(|(g, x, n)| (g.clone(), x.to_bits(), *n)).collect()
    }

    #[test]
    fn folded_sketches_give_the_unbounded_medians() {
        let data = cells(40_000, 1.0);
        let (whole, _, none) = medians(&data, None);
        let (folded, again, pages) = medians(&data, Some(40));
        assert_eq!(none, 0);
        assert!(pages > 0, "nothing was folded");
        assert_eq!(again, 0, "a stable median was counted again");
        assert_eq!(bits(&folded), bits(&whole));
    }

    #[test]
    fn a_median_that_moves_into_a_folded_tail_is_counted_again() {
        let data = cells(40_000, 1e4);
        let (whole, _, _) = medians(&data, None);
        let (folded, again, pages) = medians(&data, Some(40));
        assert!(pages > 0 && again > 0, "{pages} pages folded, {again} genes counted again");
        assert_eq!(bits(&folded), bits(&whole));
    }
}
