//! Geneformer's cell filter: its tokenizer keeps only the cells whose `filter_pass` (an obs
//! column, or a loom column attribute) is 1. A source wrapped here reads just those cells, in
//! file order, so every stage downstream sees the filtered file.

use std::ops::Range;
use std::path::Path;

use crate::error::{Error, Result};
use crate::{CellChunk, CellSource, ChunkValues, ObsKind, ObsValues, SourceMeta};

/// The obs column (loom: column attribute) Geneformer filters on.
pub const FILTER_PASS: &str = "filter_pass";

/// `source` restricted to the cells with `filter_pass` == 1; `source` itself when the file has
/// no such column. `chunk_cells` is the source's own chunk grid: it is read within one chunk at
/// a time (transposed sources hold their cells in buckets of that size).
pub fn honour_filter_pass(mut source: Box<dyn CellSource>, chunk_cells: usize) -> Result<Box<dyn CellSource>> {
    let Some(values) = source.read_obs_column(FILTER_PASS)? else { return Ok(source) };
    let kept = kept_rows(source.path(), &values)?;
    tracing::info!(
        file = %source.path().display(),
        kept = kept.len(),
        of = source.n_cells(),
        "filter_pass: reading only the cells marked 1 (--ignore-filter-pass reads all)"
    );
    let meta = SourceMeta { n_cells: kept.len(), ..source.meta().clone() };
    Ok(Box::new(FilterPass { inner: source, meta, kept, chunk_cells: chunk_cells.max(1) }))
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
    /// The inner source's, with the kept cells' count.
    meta: SourceMeta,
    /// Rows of `inner` that pass, ascending.
    kept: Vec<usize>,
    chunk_cells: usize,
}

impl CellSource for FilterPass {
    fn meta(&self) -> &SourceMeta {
        &self.meta
    }

    fn selection(&self) -> Option<String> {
        self.inner.selection()
    }

    fn gene_column(&self) -> Option<&str> {
        self.inner.gene_column()
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
        let mut values = ChunkValues::default();
        let mut obs: Vec<ObsValues> = Vec::new();
        // The wanted cells of one chunk of the source's grid at a time.
        let mut i = 0;
        while i < want.len() {
            let grid = want[i] / self.chunk_cells;
            let j = i + want[i..].iter().take_while(|&&r| r / self.chunk_cells == grid).count();
            let span = want[i]..want[j - 1] + 1;
            let chunk = self.inner.read_chunk(span.clone())?;
            let local: Vec<usize> = want[i..j].iter().map(|&r| r - span.start).collect();
            for &k in &local {
                let r = chunk.indptr[k]..chunk.indptr[k + 1];
                out.genes.extend_from_slice(&chunk.genes[r.clone()]);
                append_values(&mut values, &chunk.values, r);
                out.indptr.push(out.genes.len());
                out.cell_ids.push(chunk.cell_ids[k].clone());
            }
            let picked = chunk.obs.iter().map(|o| o.select(&local));
            if obs.is_empty() {
                obs = picked.collect();
            } else {
                obs.iter_mut().zip(picked).for_each(|(o, p)| o.extend(p));
            }
            i = j;
        }
        out.values = values;
        out.obs = obs;
        Ok(out)
    }

    fn format(&self) -> &'static str {
        self.inner.format()
    }

    fn read_obs_column(&mut self, name: &str) -> Result<Option<ObsValues>> {
        Ok(self.inner.read_obs_column(name)?.map(|v| v.select(&self.kept)))
    }
}

/// Appends `from[r]` to `to`, keeping f32 storage while every piece is f32 (an empty `to` takes
/// the storage of `from`).
fn append_values(to: &mut ChunkValues, from: &ChunkValues, r: Range<usize>) {
    match (to, from) {
        (to @ ChunkValues::F64(_), ChunkValues::F32(v)) if to.is_empty() => *to = ChunkValues::F32(v[r].to_vec()),
        (ChunkValues::F32(o), ChunkValues::F32(v)) => o.extend_from_slice(&v[r]),
        (ChunkValues::F64(o), ChunkValues::F64(v)) => o.extend_from_slice(&v[r]),
        (to, from) => r.for_each(|k| to.push(from.get(k))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ObsField;

    #[test]
    fn only_cells_marked_one_pass_and_strings_are_refused() {
        let p = Path::new("x.loom");
        assert_eq!(kept_rows(p, &ObsValues::Int64(vec![Some(1), Some(0), None, Some(1), Some(2)])).unwrap(), [0, 3]);
        assert_eq!(kept_rows(p, &ObsValues::Float64(vec![Some(0.0), Some(1.0)])).unwrap(), [1]);
        assert_eq!(kept_rows(p, &ObsValues::Boolean(vec![Some(true), Some(false)])).unwrap(), [0]);
        let e = kept_rows(p, &ObsValues::Utf8(vec![Some("1".into())])).unwrap_err().to_string();
        assert!(e.contains("x.loom") && e.contains("--ignore-filter-pass"), "{e}");
    }

    /// Cells `i` with one value `i`, readable only within chunks of 4 (as transposed sources).
    struct Grid(SourceMeta);

    impl CellSource for Grid {
        fn meta(&self) -> &SourceMeta {
            &self.0
        }
        fn read_chunk(&mut self, rows: Range<usize>) -> Result<CellChunk> {
            assert_eq!(rows.start / 4, (rows.end - 1) / 4, "{rows:?} crosses a chunk");
            let n = rows.len();
            Ok(CellChunk {
                first_cell: rows.start,
                indptr: (0..=n).collect(),
                genes: vec![0; n],
                values: ChunkValues::F32(rows.clone().map(|i| i as f32).collect()),
                cell_ids: rows.clone().map(|i| format!("c{i}")).collect(),
                obs: vec![ObsValues::Int64(rows.clone().map(|i| Some(i as i64 % 3)).collect())],
            })
        }
        fn format(&self) -> &'static str {
            "grid"
        }
        fn read_obs_column(&mut self, _: &str) -> Result<Option<ObsValues>> {
            Ok(Some(ObsValues::Int64((0..self.0.n_cells).map(|i| Some(i64::from(i % 3 == 1))).collect())))
        }
    }

    #[test]
    fn passing_cells_are_read_within_the_sources_chunks_with_their_values_and_obs() {
        let field = ObsField { name: "x".into(), kind: ObsKind::Int64 };
        let meta = SourceMeta { path: "grid".into(), n_cells: 20, genes: Vec::new(), obs_fields: vec![field] };
        let mut f = honour_filter_pass(Box::new(Grid(meta)), 4).unwrap();
        // Cells 1, 4, 7, 10, 13, 16, 19 pass.
        assert_eq!(f.n_cells(), 7);
        let c = f.read_chunk(1..6).unwrap();
        assert_eq!(c.cell_ids, ["c4", "c7", "c10", "c13", "c16"]);
        assert_eq!(c.values, ChunkValues::F32(vec![4.0, 7.0, 10.0, 13.0, 16.0]));
        assert_eq!(c.indptr, [0, 1, 2, 3, 4, 5]);
        assert_eq!(c.obs, [ObsValues::Int64(vec![Some(1); 5])]);
        assert_eq!(f.read_chunk(6..7).unwrap().cell_ids, ["c19"]);
    }
}
