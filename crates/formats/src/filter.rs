//! Sources restricted to some of their cells, in file order, so that every stage downstream sees
//! only those: Geneformer's cell filter (its tokenizer keeps only the cells whose `filter_pass`,
//! an obs column or a loom column attribute, is 1) and a [`Shard`] (one of N consecutive parts,
//! for embedding an atlas with N processes or hosts).

use std::ops::Range;
use std::path::Path;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::{CellChunk, CellSource, ChunkValues, ObsKind, ObsValues, SourceMeta};

/// The obs column (loom: column attribute) Geneformer filters on.
pub const FILTER_PASS: &str = "filter_pass";

/// `source` restricted to the cells with `filter_pass` == 1; `source` itself when the file has
/// no such column. `chunk_cells` is the source's own chunk grid: it is read within one chunk at
/// a time (transposed sources hold their cells in buckets of that size).
pub fn honour_filter_pass(mut source: Box<dyn CellSource>, chunk_cells: usize) -> Result<Box<dyn CellSource>> {
    let Some(values) = source.read_obs_column(FILTER_PASS)? else { return Ok(source) };
    check_column_len(source.path(), FILTER_PASS, values.len(), source.n_cells())?;
    let kept = kept_rows(source.path(), &values)?;
    tracing::info!(
        file = %source.path().display(),
        kept = kept.len(),
        of = source.n_cells(),
        "filter_pass: reading only the cells marked 1 (--ignore-filter-pass reads all)"
    );
    let meta = SourceMeta { n_cells: kept.len(), ..source.meta().clone() };
    let selection = source.selection();
    Ok(Box::new(Selected { inner: source, meta, rows: Rows::List(kept), chunk_cells: chunk_cells.max(1), selection }))
}

/// Part `index` of `count` consecutive parts of a source's cells (`I/N` on the command line,
/// 0-based): rows `⌊n·I/N⌋ .. ⌊n·(I+1)/N⌋`, so the parts in order are the source, row for row,
/// and their sizes differ by at most one cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// The rows of this part of `n` cells.
    pub fn rows(&self, n: usize) -> Range<usize> {
        let at = |i: usize| (n as u128 * i as u128 / self.count as u128) as usize;
        at(self.index)..at(self.index + 1)
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let bad = || {
            format!("a shard is I/N with 0 ≤ I < N (e.g. 0/4 .. 3/4; a SLURM array's $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT), got '{s}'")
        };
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Self { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// `source` restricted to the cells of `shard` (after any other selection). A part without a
/// cell is refused: more parts than cells.
pub fn take_shard(source: Box<dyn CellSource>, shard: Shard, chunk_cells: usize) -> Result<Box<dyn CellSource>> {
    let n = source.n_cells();
    let rows = shard.rows(n);
    if rows.is_empty() {
        return Err(Error::Usage(format!(
            "shard {shard} of {} holds no cell: the input has {n} cells, so use at most {n} shards",
            source.path().display()
        )));
    }
    let selection = Some(match source.selection() {
        Some(inner) => format!("{inner}; shard {shard}: rows {}..{} of {n}", rows.start, rows.end),
        None => format!("shard {shard}: rows {}..{} of {n}", rows.start, rows.end),
    });
    let meta = SourceMeta { n_cells: rows.len(), ..source.meta().clone() };
    Ok(Box::new(Selected { inner: source, meta, rows: Rows::Range(rows), chunk_cells: chunk_cells.max(1), selection }))
}

/// Which rows of the inner source a selection reads, ascending.
enum Rows {
    List(Vec<usize>),
    Range(Range<usize>),
}

impl Rows {
    fn len(&self) -> usize {
        match self {
            Rows::List(v) => v.len(),
            Rows::Range(r) => r.len(),
        }
    }

    /// Inner rows of the selected rows `rows`.
    fn of(&self, rows: Range<usize>) -> Vec<usize> {
        match self {
            Rows::List(v) => v[rows].to_vec(),
            Rows::Range(r) => rows.map(|i| r.start + i).collect(),
        }
    }
}

/// Indices of the cells whose value is 1 (missing values and anything else are left out).
/// An obs column must hold one value per cell: a shorter one would leave cells out unseen, a
/// longer one name rows past the matrix.
fn check_column_len(path: &Path, name: &str, len: usize, n_cells: usize) -> Result<()> {
    if len == n_cells {
        return Ok(());
    }
    Err(Error::format(
        path,
        format!("obs column '{name}' holds {len} values for {n_cells} cells; it must hold one per cell"),
    ))
}

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

struct Selected {
    inner: Box<dyn CellSource>,
    /// The inner source's, with the kept cells' count.
    meta: SourceMeta,
    /// Rows of `inner` read.
    rows: Rows,
    chunk_cells: usize,
    selection: Option<String>,
}

impl CellSource for Selected {
    fn meta(&self) -> &SourceMeta {
        &self.meta
    }

    fn selection(&self) -> Option<String> {
        self.selection.clone()
    }

    fn gene_column(&self) -> Option<&str> {
        self.inner.gene_column()
    }

    fn read_chunk(&mut self, rows: Range<usize>) -> Result<CellChunk> {
        if rows.end > self.rows.len() {
            return Err(Error::Usage(format!("rows {rows:?} beyond {} cells", self.rows.len())));
        }
        let mut out = CellChunk { first_cell: rows.start, indptr: vec![0], ..Default::default() };
        let want = &self.rows.of(rows);
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
        let all = 0..self.rows.len();
        let Some(values) = self.inner.read_obs_column(name)? else { return Ok(None) };
        check_column_len(self.inner.path(), name, values.len(), self.inner.n_cells())?;
        Ok(Some(values.select(&self.rows.of(all))))
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

    /// `Grid` whose filter_pass column holds `.1` values, all 1.
    struct Uneven(Grid, usize);

    impl CellSource for Uneven {
        fn meta(&self) -> &SourceMeta {
            self.0.meta()
        }
        fn read_chunk(&mut self, rows: Range<usize>) -> Result<CellChunk> {
            self.0.read_chunk(rows)
        }
        fn format(&self) -> &'static str {
            "uneven"
        }
        fn read_obs_column(&mut self, _: &str) -> Result<Option<ObsValues>> {
            Ok(Some(ObsValues::Int64(vec![Some(1); self.1])))
        }
    }

    #[test]
    fn a_filter_pass_column_not_one_value_per_cell_is_refused() {
        for len in [0, 19, 21] {
            let meta = SourceMeta { path: "short.h5ad".into(), n_cells: 20, genes: Vec::new(), obs_fields: Vec::new() };
            let e = honour_filter_pass(Box::new(Uneven(Grid(meta), len)), 4).err().expect("refused").to_string();
            assert!(e.contains("short.h5ad") && e.contains(&format!("holds {len} values for 20 cells")), "{e}");
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

    #[test]
    fn shards_partition_the_cells_in_order_and_are_read_within_the_sources_chunks() {
        let meta = SourceMeta { path: "grid".into(), n_cells: 10, genes: Vec::new(), obs_fields: Vec::new() };
        let mut ids = Vec::new();
        for i in 0..3 {
            let shard: Shard = format!("{i}/3").parse().unwrap();
            let mut s = take_shard(Box::new(Grid(meta.clone())), shard, 4).unwrap();
            let n = s.n_cells();
            assert_eq!(n, [3, 3, 4][i]);
            assert!(s.selection().unwrap().contains(&format!("shard {i}/3")));
            ids.extend(s.read_chunk(0..n).unwrap().cell_ids);
        }
        assert_eq!(ids, (0..10).map(|i| format!("c{i}")).collect::<Vec<_>>());
        for bad in ["3/3", "0/0", "a/2", "2", "-1/2"] {
            assert!(bad.parse::<Shard>().unwrap_err().contains(bad), "{bad}");
        }
        let e = take_shard(Box::new(Grid(meta)), "0/11".parse().unwrap(), 4).err().unwrap().to_string();
        assert!(e.contains("holds no cell") && e.contains("at most 10 shards"), "{e}");
    }
}
