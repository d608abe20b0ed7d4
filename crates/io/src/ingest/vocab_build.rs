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

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use corrflow_algorithms::{rank::TARGET_SUM, LogQuantileSketch, MIN_ALPHA};
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
}

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
    /// Passes over the inputs: 2 with `two_pass` (below [`COARSE_ALPHA`]), else 1.
    #[serde(default)]
    pub passes: u32,
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
}

/// What the coarse first pass found: each slot's sketch and the buckets of its middle ranks.
#[derive(Debug)]
struct FirstPass {
    sketches: Vec<LogQuantileSketch>,
    /// (bucket of rank ⌊(n−1)/2⌋, bucket of rank ⌊n/2⌋, values below the first), by slot.
    middle: Vec<Option<(i32, i32, u64)>>,
}

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
        }
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
        if self.first.is_none() {
            self.cells += 1;
        }
        for &(slot, c) in counts {
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
    }

    /// (gene id, estimated median, number of cells expressing it), for genes seen expressed.
    /// Fails when a second pass did not see the values of the first (the inputs changed).
    pub fn medians(&mut self) -> Result<Vec<(String, f64, u64)>> {
        self.flush();
        let Some(first) = &self.first else {
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
    let passes = if opts.two_pass && opts.alpha < COARSE_ALPHA { 2 } else { 1 };
    let mut est = MedianEstimator::new(if passes == 2 { COARSE_ALPHA } else { opts.alpha });
    let first = add_cells(inputs, opts, &mut est)?;
    if passes == 2 {
        est.start_second_pass(opts.alpha);
        let second = add_cells(inputs, opts, &mut est)?;
        if let Some((path, (a, b))) = inputs.iter().zip(first.iter().zip(&second)).find(|(_, (a, b))| a != b) {
            return Err(Error::InvalidData {
                path: path.clone(),
                msg: format!(
                    "{a} cells in the first pass of --two-pass and {b} in the second: it changed while being read"
                ),
            });
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
        hash: vocab.hash().to_string(),
        seconds: started.elapsed().as_secs_f64(),
    };
    Ok((vocab, summary))
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
