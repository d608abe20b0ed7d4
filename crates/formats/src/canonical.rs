//! Cells in canonical form. A compressed sparse matrix may list a gene twice within one cell
//! (scipy calls such a matrix non-canonical): scipy and anndata read it as the sum of the two
//! entries (`sum_duplicates`), and so does every consumer of a [`CellChunk`] here, because every
//! source [`crate::open`] returns puts its chunks in that form: each cell's genes strictly
//! ascending, repeated genes summed in the width the file stores them. A cell that is already
//! canonical (nearly always) costs one comparison per entry and is not moved.

use std::ops::{AddAssign, Range};

use crate::error::Result;
use crate::{CellChunk, CellSource, ChunkValues, ObsValues, SourceMeta};

impl CellChunk {
    /// Sorts each cell's genes and sums repeated ones, as scipy's `sum_duplicates` does; returns
    /// how many entries were merged into others.
    pub fn sum_duplicates(&mut self) -> usize {
        let n = self.n_cells();
        let Some(first) = (0..n).find(|&i| !ascending(&self.genes[self.indptr[i]..self.indptr[i + 1]])) else {
            return 0;
        };
        let before = self.genes.len();
        match &mut self.values {
            ChunkValues::F32(v) => canonicalize(&mut self.indptr, &mut self.genes, v, first),
            ChunkValues::F64(v) => canonicalize(&mut self.indptr, &mut self.genes, v, first),
        }
        before - self.genes.len()
    }
}

/// Whether genes strictly ascend (no repeat). Non-short-circuit so that it vectorizes.
fn ascending(cols: &[u32]) -> bool {
    cols.windows(2).fold(true, |ok, w| ok & (w[0] < w[1]))
}

/// Rewrites cells `first..` in place: canonical cells are moved down, the others sorted by gene
/// (stably: repeats are summed in file order) and merged. Entries only ever move down.
fn canonicalize<T: Copy + AddAssign>(indptr: &mut [usize], genes: &mut Vec<u32>, values: &mut Vec<T>, first: usize) {
    let mut pairs: Vec<(u32, T)> = Vec::new();
    let mut start = indptr[first];
    let mut w = start;
    for i in first..indptr.len() - 1 {
        let end = indptr[i + 1];
        if ascending(&genes[start..end]) {
            genes.copy_within(start..end, w);
            values.copy_within(start..end, w);
            w += end - start;
        } else {
            pairs.clear();
            pairs.extend(genes[start..end].iter().copied().zip(values[start..end].iter().copied()));
            pairs.sort_by_key(|p| p.0);
            let cell = w;
            for &(g, v) in &pairs {
                if w > cell && genes[w - 1] == g {
                    values[w - 1] += v;
                } else {
                    genes[w] = g;
                    values[w] = v;
                    w += 1;
                }
            }
        }
        indptr[i + 1] = w;
        start = end;
    }
    genes.truncate(w);
    values.truncate(w);
}

/// A source whose chunks are put in canonical form.
pub(crate) struct Canonical {
    inner: Box<dyn CellSource>,
    /// Whether the file was seen to repeat a gene within a cell (logged once).
    reported: bool,
}

/// `source` with canonical chunks.
pub(crate) fn canonical(source: Box<dyn CellSource>) -> Box<dyn CellSource> {
    Box::new(Canonical { inner: source, reported: false })
}

impl CellSource for Canonical {
    fn meta(&self) -> &SourceMeta {
        self.inner.meta()
    }

    fn read_chunk(&mut self, rows: Range<usize>) -> Result<CellChunk> {
        let mut chunk = self.inner.read_chunk(rows)?;
        let merged = chunk.sum_duplicates();
        if merged > 0 && !std::mem::replace(&mut self.reported, true) {
            tracing::info!(
                file = %self.inner.path().display(),
                first_cell = chunk.first_cell,
                "cells list a gene more than once; its entries are summed (scipy's sum_duplicates)"
            );
        }
        Ok(chunk)
    }

    fn format(&self) -> &'static str {
        self.inner.format()
    }

    fn gene_column(&self) -> Option<&str> {
        self.inner.gene_column()
    }

    fn read_obs_column(&mut self, name: &str) -> Result<Option<ObsValues>> {
        self.inner.read_obs_column(name)
    }

    fn selection(&self) -> Option<String> {
        self.inner.selection()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(rows: &[&[(u32, f32)]]) -> CellChunk {
        let mut c = CellChunk { indptr: vec![0], values: ChunkValues::F32(Vec::new()), ..Default::default() };
        let ChunkValues::F32(v) = &mut c.values else { unreachable!() };
        for r in rows {
            for &(g, x) in *r {
                c.genes.push(g);
                v.push(x);
            }
            c.indptr.push(c.genes.len());
        }
        c
    }

    #[test]
    fn repeated_genes_are_summed_and_cells_sorted_as_scipy_does() {
        let mut c =
            chunk(&[&[(1, 1.0), (4, 2.0)], &[(3, 1.0), (1, 5.0), (3, 2.0), (0, 0.0)], &[], &[(2, 1.0), (7, 1.0)]]);
        assert_eq!(c.sum_duplicates(), 1);
        assert_eq!(c.indptr, [0, 2, 5, 5, 7]);
        assert_eq!(c.genes, [1, 4, 0, 1, 3, 2, 7]);
        assert_eq!(c.values, ChunkValues::F32(vec![1.0, 2.0, 0.0, 5.0, 3.0, 1.0, 1.0]));
        // Canonical chunks are left as they are.
        let before = c.clone();
        assert_eq!(c.sum_duplicates(), 0);
        assert_eq!((c.indptr, c.genes, c.values), (before.indptr, before.genes, before.values));
        // f64 storage, a gene three times, unsorted but without repeats.
        let mut c = CellChunk {
            indptr: vec![0, 3, 5],
            genes: vec![2, 2, 2, 9, 1],
            values: ChunkValues::F64(vec![1.0, 2.0, 4.0, 1.0, 1.0]),
            ..Default::default()
        };
        assert_eq!(c.sum_duplicates(), 2);
        assert_eq!((c.indptr, c.genes), (vec![0, 1, 3], vec![2, 1, 9]));
        assert_eq!(c.values, ChunkValues::F64(vec![7.0, 1.0, 1.0]));
    }
}
