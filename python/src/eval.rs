//! `corrflow.eval_cells`: an embedding of AnnData's cells judged beside the PCA / HVG / random
//! baselines, by the same code as `corrflow eval cells`.

use corrflow_eval::baselines::CsrMatrix;
use corrflow_eval::cells::{self, CellData, CellEvalOptions, MethodInput};
use corrflow_io::tokenize::ValueTransform;
use numpy::{PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::matrix::CsrArrays;
use crate::py_err;

/// Scores `embeddings` (name → cells × dim float32) and the baselines; returns the report as
/// JSON (the `--json` summary of `eval cells`). `indptr`/`indices`/`data` are the counts (CSR),
/// or all None to skip the baselines' inputs (they are then reported as not computed).
#[pyfunction]
#[pyo3(signature = (embeddings, labels, batches=None, indptr=None, indices=None, data=None, n_genes=0, counts_name="X", log1p=false, allow_normalized=false, baselines=true, seed=0, neighbours=15, lisi_neighbours=90, resolutions=None, n_top_genes=2000, n_comps=50, folds=5, source="AnnData", label_column="label", batch_column="batch"))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn eval_cells<'py>(
    py: Python<'py>,
    embeddings: Vec<(String, PyReadonlyArray2<'py, f32>)>,
    labels: Vec<Option<String>>,
    batches: Option<Vec<Option<String>>>,
    indptr: Option<Bound<'py, PyAny>>,
    indices: Option<Bound<'py, PyAny>>,
    data: Option<Bound<'py, PyAny>>,
    n_genes: usize,
    counts_name: &str,
    log1p: bool,
    allow_normalized: bool,
    baselines: bool,
    seed: u64,
    neighbours: usize,
    lisi_neighbours: usize,
    resolutions: Option<Vec<f64>>,
    n_top_genes: usize,
    n_comps: usize,
    folds: usize,
    source: &str,
    label_column: &str,
    batch_column: &str,
) -> PyResult<String> {
    let n = labels.len();
    let transform = if log1p { ValueTransform::Expm1 } else { ValueTransform::None };
    let ids: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    let (counts, integer_counts) = counts_of(indptr, indices, data, n_genes, n, &ids, transform)?;
    let methods = methods_of(&embeddings, n)?;
    let cell_data = CellData {
        source: source.to_string(),
        ids,
        labels,
        batches,
        counts,
        counts_name: counts_name.to_string(),
        integer_counts,
        transform,
        allow_normalized,
    };
    let defaults = CellEvalOptions::default();
    let opts = CellEvalOptions {
        seed,
        neighbours,
        lisi_neighbours,
        resolutions: resolutions.unwrap_or(defaults.resolutions.clone()),
        n_top_genes,
        n_comps,
        folds,
        baselines,
        ..defaults
    };
    cells::validate_options(&opts).map_err(py_err)?;
    let batch = cell_data.batches.as_ref().map(|_| batch_column);
    let report =
        py.detach(|| cells::evaluate(&cell_data, &methods, label_column, batch, &[], &opts)).map_err(py_err)?;
    serde_json::to_string(&report).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The counts handed over as CSR arrays (`Err` inside: why they are not usable), and whether they
/// are whole numbers.
fn counts_of<'py>(
    indptr: Option<Bound<'py, PyAny>>,
    indices: Option<Bound<'py, PyAny>>,
    data: Option<Bound<'py, PyAny>>,
    n_genes: usize,
    n: usize,
    ids: &[String],
    transform: ValueTransform,
) -> PyResult<(Result<CsrMatrix, String>, bool)> {
    Ok(match (indptr, indices, data) {
        (Some(p), Some(i), Some(d)) => {
            let csr = CsrArrays::extract(&p, &i, &d, n_genes)?;
            if csr.n_cells() != n {
                return Err(PyValueError::new_err(format!("the counts have {} cells but labels {n}", csr.n_cells())));
            }
            let chunk = csr.view().chunk(0..n, ids.to_vec());
            let mut m = CsrMatrix { genes: n_genes, indptr: vec![0], ..Default::default() };
            match cells::append_counts(&mut m, &chunk, transform) {
                Ok(integer) => (Ok(m), integer),
                Err(why) => (Err(why), false),
            }
        }
        (None, None, None) => (Err("no counts were given".to_string()), true),
        _ => return Err(PyValueError::new_err("indptr, indices and data come together")),
    })
}

/// Each embedding matrix as rows lined up with the cells (`None` for a row with a non-finite value).
fn methods_of(embeddings: &[(String, PyReadonlyArray2<'_, f32>)], n: usize) -> PyResult<Vec<MethodInput>> {
    let mut methods = Vec::with_capacity(embeddings.len());
    for (name, array) in embeddings {
        let shape = array.shape();
        if shape[0] != n {
            return Err(PyValueError::new_err(format!(
                "embedding '{name}' has {} rows but there are {n} cells",
                shape[0]
            )));
        }
        let values = array.as_array();
        let rows = (0..n)
            .map(|i| {
                let row: Vec<f32> = values.row(i).iter().copied().collect();
                row.iter().all(|v| v.is_finite()).then_some(row)
            })
            .collect();
        methods.push(MethodInput { name: name.clone(), source: format!("obsm['{name}']"), rows, dim: shape[1] });
    }
    Ok(methods)
}
