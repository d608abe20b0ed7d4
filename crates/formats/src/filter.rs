//! Geneformer's cell filter: its tokenizer keeps only the cells whose `filter_pass` (an obs
//! column, or a loom column attribute) is 1. A source wrapped here reads just those cells, in
//! file order, so every stage downstream sees the filtered file.

use std::ops::Range;
use std::path::Path;

use crate::error::{Error, Result};
use crate::{CellChunk, CellSource, ChunkValues, ObsField, ObsKind, ObsValues};

/// The obs column (loom: column attribute) Geneformer filters on.
pub const FILTER_PASS: &str = "filter_pass";

/// `source` restricted to the cells with `filter_pass` == 1; `source` itself when the file has
/// no such column.
pub fn honour_filter_pass(mut source: Box<dyn CellSource>) -> Result<Box<dyn CellSource>> {
    let Some(values) = source.read_obs_column(FILTER_PASS)? else { return Ok(source) };
    let kept = kept_rows(source.path(), &values)?;
    tracing::info!(
        file = %source.path().display(),
        kept = kept.len(),
        of = source.n_cells(),
        "filter_pass: reading only the cells marked 1 (--ignore-filter-pass reads all)"
    );
    Ok(Box::new(FilterPass { inner: source, kept }))
}

/// Indices of the cells whose value is 1 (missing values and anything else are left out).
fn kept_rows(path: &Path, values: &ObsValues) -> Result<Vec<usize>> {
    let pass: Vec<bool> = match values {
        ObsValues::Int64(v) => v.iter().map(|x| *x == Some(1)).collect(),
        ObsValues::Float64(v) => v.iter().map(|x| *x == Some(1.0)).collect(),
        ObsValues::Boolean(v) => v.iter().map(|x| *x == Some(true)).collect(),
        ObsValues::Utf8(_) => {
            return Err(Error::format(
                path,
                "filter_pass holds strings; Geneformer's filter needs numbers (1 = keep the cell) — \
                 convert the column, or read every cell with --ignore-filter-pass",
            ))
        }
    };
    Ok(pass.iter().enumerate().filter(|(_, &p)| p).map(|(i, _)| i).collect())
}

struct FilterPass {
    inner: Box<dyn CellSource>,
    /// Rows of `inner` that pass, ascending.
    kept: Vec<usize>,
}

impl CellSource for FilterPass {
    fn path(&self) -> &Path {
        self.inner.path()
    }

    fn n_cells(&self) -> usize {
        self.kept.len()
    }

    fn gene_ids(&self) -> &[String] {
        self.inner.gene_ids()
    }

    fn obs_fields(&self) -> &[ObsField] {
        self.inner.obs_fields()
    }

    fn read_chunk(&mut self, rows: Range<usize>) -> Result<CellChunk> {
        if rows.end > self.kept.len() {
            return Err(Error::Usage(format!("rows {rows:?} beyond {} cells", self.kept.len())));
        }
        let mut out = CellChunk { first_cell: rows.start, indptr: vec![0], ..Default::default() };
        let want = &self.kept[rows];
        if want.is_empty() {
            out.obs = self
                .obs_fields()
                .iter()
                .map(|f| match f.kind {
                    ObsKind::Utf8 => ObsValues::Utf8(Vec::new()),
                    ObsKind::Float64 => ObsValues::Float64(Vec::new()),
                    ObsKind::Int64 => ObsValues::Int64(Vec::new()),
                    ObsKind::Boolean => ObsValues::Boolean(Vec::new()),
                })
                .collect();
            return Ok(out);
        }
        let span = want[0]..want[want.len() - 1] + 1;
        let chunk = self.inner.read_chunk(span.clone())?;
        let local: Vec<usize> = want.iter().map(|&r| r - span.start).collect();
        let mut values = match chunk.values {
            ChunkValues::F32(_) => ChunkValues::F32(Vec::new()),
            ChunkValues::F64(_) => ChunkValues::F64(Vec::new()),
        };
        for &i in &local {
            let r = chunk.indptr[i]..chunk.indptr[i + 1];
            out.genes.extend_from_slice(&chunk.genes[r.clone()]);
            match (&mut values, &chunk.values) {
                (ChunkValues::F32(o), ChunkValues::F32(v)) => o.extend_from_slice(&v[r]),
                (ChunkValues::F64(o), ChunkValues::F64(v)) => o.extend_from_slice(&v[r]),
                _ => unreachable!("same storage as the chunk"),
            }
            out.indptr.push(out.genes.len());
            out.cell_ids.push(chunk.cell_ids[i].clone());
        }
        out.values = values;
        out.obs = chunk.obs.iter().map(|o| o.select(&local)).collect();
        Ok(out)
    }

    fn format(&self) -> &'static str {
        self.inner.format()
    }

    fn read_obs_column(&mut self, name: &str) -> Result<Option<ObsValues>> {
        Ok(self.inner.read_obs_column(name)?.map(|v| v.select(&self.kept)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_cells_marked_one_pass_and_strings_are_refused() {
        let p = Path::new("x.loom");
        assert_eq!(kept_rows(p, &ObsValues::Int64(vec![Some(1), Some(0), None, Some(1), Some(2)])).unwrap(), [0, 3]);
        assert_eq!(kept_rows(p, &ObsValues::Float64(vec![Some(0.0), Some(1.0)])).unwrap(), [1]);
        assert_eq!(kept_rows(p, &ObsValues::Boolean(vec![Some(true), Some(false)])).unwrap(), [0]);
        let e = kept_rows(p, &ObsValues::Utf8(vec![Some("1".into())])).unwrap_err().to_string();
        assert!(e.contains("x.loom") && e.contains("--ignore-filter-pass"), "{e}");
    }
}
