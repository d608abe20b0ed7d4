//! `corrflow.Graph`: build, read and update the gene dependency graph (CorrMask Algorithm 1).

use std::path::PathBuf;

use corrflow_algorithms::graph::GraphParams;
use corrflow_graph::Cluster;
use corrflow_io::util::Cancel;
use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{interrupt, py_err};

/// `default` with the fields of the JSON object `overrides` replaced; an unknown field is an
/// error naming it.
pub(crate) fn with_overrides<T: Serialize + DeserializeOwned>(default: T, overrides: &str, what: &str) -> PyResult<T> {
    let mut value = serde_json::to_value(default).expect("parameters serialize");
    let extra: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(overrides).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))?;
    let fields = value.as_object_mut().expect("parameters are a struct");
    for (k, v) in extra {
        if !fields.contains_key(&k) {
            let known: Vec<&String> = fields.keys().collect();
            return Err(PyValueError::new_err(format!("{what}: unknown parameter '{k}' (known: {known:?})")));
        }
        fields.insert(k, v);
    }
    serde_json::from_value(value).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}

fn cluster(workers: usize) -> Cluster {
    Cluster { workers: workers.max(1), processes: 1, process: 0, hostfile: None }
}

/// Builds a graph of `atlases` of `corpus` into `out` (exact, or the incremental rank-map
/// build that `update` can extend); returns the build summary as JSON. `params` is a JSON object
/// of `GraphParams` fields overriding the defaults.
#[pyfunction]
#[pyo3(signature = (corpus, out, atlases=Vec::new(), params="{}", incremental=false, workers=1))]
pub(crate) fn graph_build(
    py: Python<'_>,
    corpus: PathBuf,
    out: PathBuf,
    atlases: Vec<String>,
    params: &str,
    incremental: bool,
    workers: usize,
) -> PyResult<String> {
    let params = with_overrides(GraphParams::default(), params, "graph parameters")?;
    let cancel = Cancel::default();
    let mut summary = interrupt::run(py, &cancel, || {
        if incremental {
            let built = corrflow_graph::build_incremental(&corpus, &atlases, &params, &out, &cluster(workers))?;
            Ok(built.expect("a single process is never a helper").1)
        } else {
            let (mut graph, summary) = corrflow_graph::build_exact(&corpus, &atlases, &params)?;
            // The statistics cannot stop half-way; a Ctrl-C during them keeps the graph unwritten.
            cancel.check("graph build")?;
            corrflow_graph::write_graph(&out, &mut graph)?;
            Ok(summary)
        }
    })?;
    summary.out = out.display().to_string();
    Ok(serde_json::to_string(&summary).expect("a summary serializes"))
}

/// Adds an atlas directory to an incremental graph, retracts an included atlas by name, or
/// rebases it; returns the update summary as JSON.
#[pyfunction]
#[pyo3(signature = (graph, add=None, retract=None, rebase=false, workers=1))]
pub(crate) fn graph_update(
    py: Python<'_>,
    graph: PathBuf,
    add: Option<PathBuf>,
    retract: Option<String>,
    rebase: bool,
    workers: usize,
) -> PyResult<String> {
    let c = cluster(workers);
    let summary = interrupt::run(py, &Cancel::default(), || match (add, retract, rebase) {
        (Some(dir), None, false) => corrflow_graph::update_add(&graph, &dir, &c),
        (None, Some(name), false) => corrflow_graph::update_retract(&graph, &name, &c),
        (None, None, true) => corrflow_graph::rebase(&graph, &c),
        _ => Err(corrflow_io::Error::Usage("give exactly one of add=, retract= or rebase=True".into())),
    })?;
    Ok(serde_json::to_string(&summary).expect("a summary serializes"))
}

/// A graph directory's info (JSON), genes (`token_id`, `gene_id`, `presence`) and edges (`u`,
/// `v`, `rho`, `rho_global`, `co_count`) as NumPy arrays.
#[pyfunction]
pub(crate) fn graph_read<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let g = py.detach(|| corrflow_graph::read_graph(&path)).map_err(py_err)?;
    let d = PyDict::new(py);
    d.set_item("info", serde_json::to_string(&g.info).expect("info serializes"))?;
    d.set_item("token_id", PyArray1::from_iter(py, g.genes.iter().map(|x| x.0)))?;
    d.set_item("gene_id", g.genes.iter().map(|x| x.1.clone()).collect::<Vec<_>>())?;
    d.set_item("presence", PyArray1::from_iter(py, g.genes.iter().map(|x| x.2)))?;
    d.set_item("u", PyArray1::from_iter(py, g.edges.iter().map(|e| e.u)))?;
    d.set_item("v", PyArray1::from_iter(py, g.edges.iter().map(|e| e.v)))?;
    d.set_item("rho", PyArray1::from_iter(py, g.edges.iter().map(|e| e.rho)))?;
    d.set_item("rho_global", PyArray1::from_iter(py, g.edges.iter().map(|e| e.rho_global)))?;
    d.set_item("co_count", PyArray1::from_iter(py, g.edges.iter().map(|e| e.co_count)))?;
    Ok(d)
}
