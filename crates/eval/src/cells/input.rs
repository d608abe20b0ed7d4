//! What `eval cells` reads: the cells of an h5ad (their ids, label, batch and counts, streamed
//! chunk by chunk into one sparse matrix) and embeddings from Parquet (`cell_id`, `embedding`)
//! lined up with those cells by id.

use std::collections::HashMap;
use std::path::Path;

use arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch, StringArray};

use corrflow_io::error::{Error, Result};
use corrflow_io::formats::{self, CellChunk, ReadOptions};
use corrflow_io::tokenize::ValueTransform;

use crate::baselines::CsrMatrix;
use crate::embeddings_file;

/// The cells of the input file.
pub struct InputCells {
    pub ids: Vec<String>,
    pub labels: Vec<Option<String>>,
    pub batches: Option<Vec<Option<String>>>,
    /// Counts (after `expm1` for log-normalised input); empty when `counts_problem` says why.
    pub counts: CsrMatrix,
    /// Whether every stored value is a whole number (raw counts).
    pub integer_counts: bool,
    /// Why the values cannot be counts (the baselines then say so).
    pub counts_problem: Option<String>,
}

fn optional(values: formats::ObsValues) -> Vec<Option<String>> {
    let missing: Vec<bool> = match &values {
        formats::ObsValues::Utf8(v) => v.iter().map(Option::is_none).collect(),
        formats::ObsValues::Float64(v) => v.iter().map(|x| x.is_none_or(|f| f.is_nan())).collect(),
        formats::ObsValues::Int64(v) => v.iter().map(Option::is_none).collect(),
        formats::ObsValues::Boolean(v) => v.iter().map(Option::is_none).collect(),
    };
    values.into_strings().into_iter().zip(missing).map(|(s, m)| (!m).then_some(s)).collect()
}

/// Reads every cell of `path` with its `label` (and `batch`) obs column.
pub fn read_cells(
    path: &Path,
    read: &ReadOptions,
    transform: ValueTransform,
    label: &str,
    batch: Option<&str>,
) -> Result<InputCells> {
    let mut opts = read.clone();
    opts.obs_columns = std::iter::once(label.to_string()).chain(batch.map(str::to_string)).collect();
    let mut source = formats::open(path, &opts)?;
    let n = source.n_cells();
    let mut cells = InputCells {
        ids: Vec::with_capacity(n),
        labels: Vec::with_capacity(n),
        batches: batch.map(|_| Vec::with_capacity(n)),
        counts: CsrMatrix { genes: source.gene_ids().len(), indptr: vec![0], ..Default::default() },
        integer_counts: true,
        counts_problem: None,
    };
    let step = opts.chunk_cells.max(1);
    for start in (0..n).step_by(step) {
        let chunk = source.read_chunk(start..(start + step).min(n))?;
        if cells.counts_problem.is_none() {
            match append_counts(&mut cells.counts, &chunk, transform) {
                Ok(whole) => cells.integer_counts &= whole,
                Err(problem) => {
                    cells.counts_problem = Some(problem);
                    cells.counts = CsrMatrix::default();
                }
            }
        }
        cells.ids.extend(chunk.cell_ids);
        let mut obs = chunk.obs.into_iter();
        cells.labels.extend(optional(obs.next().ok_or_else(|| Error::internal("eval cells", "label column"))?));
        if let (Some(b), Some(values)) = (cells.batches.as_mut(), obs.next()) {
            b.extend(optional(values));
        }
    }
    Ok(cells)
}

/// Appends a chunk's cells to `m` (values through `transform`). `Ok(whole)`: whether every
/// value was a whole number; `Err`: a value no counts matrix holds (negative, not finite).
pub fn append_counts(
    m: &mut CsrMatrix,
    chunk: &CellChunk,
    transform: ValueTransform,
) -> std::result::Result<bool, String> {
    let mut integer = true;
    for i in 0..chunk.n_cells() {
        let (genes, values) = chunk.cell(i);
        for (k, &g) in genes.iter().enumerate() {
            let raw = values.get(k);
            if !raw.is_finite() || raw < 0.0 {
                let cell = chunk.cell_ids.get(i).map_or("?", String::as_str);
                return Err(format!("cell {cell} holds {raw} (not counts: negative or not finite, e.g. scaled data)"));
            }
            integer &= raw.fract() == 0.0;
            m.indices.push(g);
            m.values.push(match transform {
                ValueTransform::None => raw,
                ValueTransform::Expm1 => raw.exp_m1(),
            });
        }
        m.indptr.push(m.indices.len());
    }
    Ok(integer)
}

const HINT: &str = "write it with corrflow embed";

/// Embeddings of the input's cells from an `embed` Parquet file: one row per input cell
/// (`None` where the file has no finite embedding for it), and the dimension.
pub fn read_embeddings(path: &Path, ids: &[String]) -> Result<(Vec<Option<Vec<f32>>>, usize)> {
    let position: HashMap<&str, usize> = ids.iter().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
    let (reader, dim) = embeddings_file::open(path, Some("cell_id"), HINT)?;
    let mut rows: Vec<Option<Vec<f32>>> = vec![None; ids.len()];
    let (mut total, mut matched, mut finite, mut seen) = (0usize, 0usize, 0usize, vec![false; ids.len()]);
    for rb in reader {
        let rb: RecordBatch = rb.map_err(|e| Error::parquet_read(path, e))?;
        let column =
            |name: &str| rb.column_by_name(name).ok_or_else(|| Error::format(path, format!("no '{name}' column")));
        let cell_ids = column("cell_id")?
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| Error::format(path, format!("'cell_id' is not a string column ({HINT})")))?;
        let emb = column("embedding")?
            .as_any()
            .downcast_ref::<FixedSizeListArray>()
            .ok_or_else(|| Error::format(path, format!("'embedding' is not a fixed-size list ({HINT})")))?;
        let values = emb
            .values()
            .as_any()
            .downcast_ref::<Float32Array>()
            .ok_or_else(|| Error::format(path, "embedding values are not f32"))?;
        total += rb.num_rows();
        for r in 0..rb.num_rows() {
            let Some(&i) = position.get(cell_ids.value(r)) else { continue };
            if std::mem::replace(&mut seen[i], true) {
                return Err(Error::invalid(path, format!("cell '{}' appears twice", cell_ids.value(r))));
            }
            matched += 1;
            let row = &values.values()[r * dim..(r + 1) * dim];
            if !emb.is_null(r) && row.iter().all(|v| v.is_finite()) {
                rows[i] = Some(row.to_vec());
                finite += 1;
            }
        }
    }
    if total == 0 {
        return Err(Error::invalid(path, format!("the file has no rows, so no embeddings ({HINT})")));
    }
    if matched == 0 {
        return Err(Error::invalid(
            path,
            "none of its cell_id values is a cell of the input file (embed the same file)",
        ));
    }
    if finite == 0 {
        return Err(Error::invalid(
            path,
            format!("none of the embeddings of its {matched} cells of the input is finite (every row holds NaN, inf or null)"),
        ));
    }
    Ok((rows, dim))
}
