//! `corrflow vocab build`: per-gene medians of the nonzero normalized expression
//! (`count / n_counts * 10,000`, Geneformer's definition) in one streaming pass.
//!
//! Each gene gets a [`LogQuantileSketch`]: its median is within relative error `alpha`
//! (default 0.1%) of the exact `numpy.median` of the gene's nonzero normalized values, for any
//! data and corpus size; memory is one small bucket map per gene, not one value per cell.

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
}

/// What `vocab build --json` prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VocabBuildSummary {
    pub command: String,
    pub out: String,
    pub genes: usize,
    pub genes_below_min_cells: usize,
    pub cells: u64,
    pub alpha: f64,
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
}

/// Values buffered before they are added to the sketches (8 bytes each).
const PENDING_VALUES: usize = 1 << 18;

impl MedianEstimator {
    pub fn new(alpha: f64) -> Self {
        Self { alpha, index: HashMap::new(), genes: Vec::new(), sketches: Vec::new(), pending: Vec::new(), cells: 0 }
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
        self.cells += 1;
        for &(slot, c) in counts {
            if let Some(key) = self.sketches[slot].bucket(c / n_counts * TARGET_SUM) {
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
    pub fn medians(&mut self) -> Vec<(String, f64, u64)> {
        self.flush();
        self.genes
            .iter()
            .zip(&self.sketches)
            .filter_map(|(g, s)| s.median().map(|m| (g.clone(), m, s.count())))
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
    let mut est = MedianEstimator::new(opts.alpha);
    let mut counts: Vec<(usize, f64)> = Vec::new();
    for path in inputs {
        let mut source = open(path, &opts.read)?;
        let gene_ids = source.gene_ids().to_vec();
        let slots = est.slots(&gene_ids);
        let n = source.n_cells();
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
    let mut medians = est.medians();
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
        hash: vocab.hash().to_string(),
        seconds: started.elapsed().as_secs_f64(),
    };
    Ok((vocab, summary))
}
