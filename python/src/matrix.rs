//! A cells × genes CSR matrix handed over from Python (scipy's `indptr`, `indices`, `data`),
//! read in place, and cut into the library's [`CellChunk`]s.

use std::ops::Range;

use corrflow_io::formats::{CellChunk, ChunkValues};
use numpy::{PyReadonlyArray1, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// The three arrays of a CSR matrix, borrowed from NumPy (read-only, not copied).
pub(crate) struct CsrArrays<'py> {
    indptr: Indptr<'py>,
    indices: PyReadonlyArray1<'py, i32>,
    values: Values<'py>,
    pub n_genes: usize,
}

enum Indptr<'py> {
    I32(PyReadonlyArray1<'py, i32>),
    I64(PyReadonlyArray1<'py, i64>),
}

enum Values<'py> {
    F32(PyReadonlyArray1<'py, f32>),
    F64(PyReadonlyArray1<'py, f64>),
}

impl<'py> CsrArrays<'py> {
    /// Takes the arrays as NumPy gives them: `indptr` int32 or int64, `indices` int32, `data`
    /// float32 or float64 (the Python side casts other dtypes first).
    pub fn extract(
        indptr: &Bound<'py, PyAny>,
        indices: &Bound<'py, PyAny>,
        data: &Bound<'py, PyAny>,
        n_genes: usize,
    ) -> PyResult<Self> {
        let indptr = if let Ok(a) = indptr.extract::<PyReadonlyArray1<i64>>() {
            Indptr::I64(a)
        } else {
            Indptr::I32(
                indptr.extract().map_err(|_| PyTypeError::new_err("indptr must be a 1-d int32 or int64 array"))?,
            )
        };
        let indices = indices.extract().map_err(|_| PyTypeError::new_err("indices must be a 1-d int32 array"))?;
        let values = if let Ok(a) = data.extract::<PyReadonlyArray1<f32>>() {
            Values::F32(a)
        } else {
            Values::F64(
                data.extract().map_err(|_| PyTypeError::new_err("data must be a 1-d float32 or float64 array"))?,
            )
        };
        let csr = Self { indptr, indices, values, n_genes };
        csr.validate()?;
        Ok(csr)
    }

    pub fn n_cells(&self) -> usize {
        self.view().indptr_len().saturating_sub(1)
    }

    /// The arrays as plain slices (they can cross into a thread without the GIL).
    pub fn view(&self) -> CsrView<'_> {
        let slice = "NumPy gave a contiguous array";
        CsrView {
            indptr: match &self.indptr {
                Indptr::I32(a) => IndptrSlice::I32(a.as_slice().expect(slice)),
                Indptr::I64(a) => IndptrSlice::I64(a.as_slice().expect(slice)),
            },
            indices: self.indices.as_slice().expect(slice),
            values: match &self.values {
                Values::F32(a) => ValuesSlice::F32(a.as_slice().expect(slice)),
                Values::F64(a) => ValuesSlice::F64(a.as_slice().expect(slice)),
            },
        }
    }

    /// The structure a chunk relies on: contiguous arrays, `indptr` from 0 rising to the number
    /// of stored values, column indices inside the gene table.
    fn validate(&self) -> PyResult<()> {
        let contiguous = match (&self.indptr, &self.values) {
            (Indptr::I32(p), _) if !p.is_c_contiguous() => false,
            (Indptr::I64(p), _) if !p.is_c_contiguous() => false,
            (_, Values::F32(v)) => v.is_c_contiguous(),
            (_, Values::F64(v)) => v.is_c_contiguous(),
        };
        if !contiguous || !self.indices.is_c_contiguous() {
            return Err(PyValueError::new_err("the CSR arrays must be C-contiguous"));
        }
        let v = self.view();
        let n = v.indptr_len();
        if n == 0 || v.offset(0) != 0 {
            return Err(PyValueError::new_err("indptr must start at 0"));
        }
        if (1..n).any(|i| v.offset(i) < v.offset(i - 1)) {
            return Err(PyValueError::new_err("indptr must not decrease"));
        }
        let nnz = v.offset(n - 1);
        if nnz != v.indices.len() || nnz != v.values_len() {
            return Err(PyValueError::new_err(format!(
                "indptr ends at {nnz} but there are {} indices and {} values",
                v.indices.len(),
                v.values_len()
            )));
        }
        if let Some(&bad) = v.indices.iter().find(|&&c| c < 0 || c as usize >= self.n_genes) {
            return Err(PyValueError::new_err(format!("gene index {bad} outside the {} genes", self.n_genes)));
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
pub(crate) struct CsrView<'a> {
    indptr: IndptrSlice<'a>,
    indices: &'a [i32],
    values: ValuesSlice<'a>,
}

#[derive(Clone, Copy)]
enum IndptrSlice<'a> {
    I32(&'a [i32]),
    I64(&'a [i64]),
}

#[derive(Clone, Copy)]
enum ValuesSlice<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
}

impl CsrView<'_> {
    fn indptr_len(&self) -> usize {
        match self.indptr {
            IndptrSlice::I32(p) => p.len(),
            IndptrSlice::I64(p) => p.len(),
        }
    }

    fn values_len(&self) -> usize {
        match self.values {
            ValuesSlice::F32(v) => v.len(),
            ValuesSlice::F64(v) => v.len(),
        }
    }

    fn offset(&self, i: usize) -> usize {
        match self.indptr {
            IndptrSlice::I32(p) => p[i].max(0) as usize,
            IndptrSlice::I64(p) => p[i].max(0) as usize,
        }
    }

    /// Cells `rows` as a chunk (values keep their width); `cell_ids` are the chunk's ids. A
    /// gene listed twice in a cell (a non-canonical scipy matrix) is summed, as scipy's
    /// `sum_duplicates` and every file reader do.
    pub fn chunk(&self, rows: Range<usize>, cell_ids: Vec<String>) -> CellChunk {
        let (lo, hi) = (self.offset(rows.start), self.offset(rows.end));
        let indptr = (rows.start..=rows.end).map(|i| self.offset(i) - lo).collect();
        let genes = self.indices[lo..hi].iter().map(|&c| c as u32).collect();
        let values = match self.values {
            ValuesSlice::F32(v) => ChunkValues::F32(v[lo..hi].to_vec()),
            ValuesSlice::F64(v) => ChunkValues::F64(v[lo..hi].to_vec()),
        };
        let mut chunk = CellChunk { first_cell: rows.start, indptr, genes, values, cell_ids, obs: Vec::new() };
        chunk.sum_duplicates();
        chunk
    }
}
