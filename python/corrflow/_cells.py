"""Models and judges applied to an AnnData's cells: `embed` and `annotate` (obsm / obs out),
`eval_cells` (a DataFrame of scores beside baselines)."""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np

from . import _native
from ._anndata import _blocks, _counts_and_genes, _csr_arrays
from ._types import PathLike


def embed(
    adata: Any,
    model: PathLike = "model.onnx",
    pooling: Optional[str] = None,
    key: Optional[str] = "X_corrflow",
    *,
    gene_column: Optional[str] = None,
    counts: str = "X",
    batch_size: int = 64,
    token_budget: int = 16384,
    threads: int = 0,
    allow_normalized: bool = False,
    log1p: bool = False,
    layer: Optional[int] = None,
    emb_layer: Optional[int] = None,
    drop_empty: bool = False,
) -> np.ndarray:
    """Cell embeddings from a model written by ``corrflow export onnx``, run by ONNX Runtime on
    all cores (``threads=0``), written to ``adata.obsm[key]`` (unless ``key`` is None) and
    returned, float32 ``[n_obs, dim]``. Cells with no vocabulary gene get NaN rows, and a
    warning says how many (scanpy's ``neighbors`` refuses NaN); ``drop_empty=True`` removes those
    cells from ``adata`` (in place) and returns the rows of the others. A cell's vector does not
    depend on ``batch_size`` or ``token_budget``. ``pooling`` ("mean"/"cls"), if given, must be
    the one the model was exported with. The layer: a model gives the states of the layer it was
    exported at (``corrflow export onnx --layer N`` or ``--emb-layer N``); ``layer`` (corrflow's
    numbering, -1 = last) or ``emb_layer`` (Geneformer's, 0 = last, -1 = second to last), if
    given, must name that layer, and the error says how to export another."""
    parts = [
        _native.embed_csr(
            indptr, indices, data, genes, cells, os.fspath(model), pooling=pooling,
            batch_size=batch_size, token_budget=token_budget, threads=threads,
            allow_normalized=allow_normalized, log1p=log1p, layer=layer, emb_layer=emb_layer,
        )
        for indptr, indices, data, genes, cells in _blocks(adata, counts, gene_column)
    ]
    out = parts[0] if len(parts) == 1 else np.ascontiguousarray(np.vstack(parts))
    empty = np.isnan(out).any(axis=1) if out.size else np.zeros(out.shape[0], dtype=bool)
    if empty.any():
        if drop_empty:
            adata._inplace_subset_obs(~empty)
            out = np.ascontiguousarray(out[~empty])
        else:
            warnings.warn(
                f"{int(empty.sum())} of {len(empty)} cells express no gene of the model's vocabulary: "
                "their embeddings are NaN rows (scanpy's neighbors refuses NaN); pass drop_empty=True "
                "to remove those cells",
                stacklevel=2,
            )
    if key is not None:
        adata.obsm[key] = out
    return out


# --- Cell Ontology annotation --------------------------------------------------------------------

_CALL_COLUMNS = ("leaf_id", "leaf_label", "leaf_probability", "call_id", "call_label", "call_probability", "call_depth")


def annotate(
    adata: Any,
    model: PathLike = "model.onnx",
    threshold: float = 0.5,
    key: Optional[str] = "corrflow",
    *,
    gene_column: Optional[str] = None,
    counts: str = "X",
    batch_size: int = 64,
    token_budget: int = 16384,
    threads: int = 0,
    allow_normalized: bool = False,
    log1p: bool = False,
) -> Any:
    """Cell Ontology calls from a model with a hierarchical cell-type head (``corrflow train
    --hce-ontology``, then ``corrflow export onnx``), run by ONNX Runtime: per cell the most
    probable leaf and the reliable call (the deepest term of the greedy top-down path whose
    probability is at least ``threshold``), each with its probability, the same calls as
    ``corrflow annotate --model`` and ``POST /v1/annotate``.

    Returns a pandas DataFrame indexed by ``adata.obs_names`` with columns leaf_id, leaf_label,
    leaf_probability, call_id, call_label, call_probability, call_depth (None / NaN / -1 for
    cells with no vocabulary gene). Unless ``key`` is None it also writes them to
    ``adata.obs[f"{key}_{column}"]``, the leaf probabilities (float32 ``[n_obs, leaves]``) to
    ``adata.obsm[f"{key}_leaf_probabilities"]`` and the leaves' term ids and the ontology release
    to ``adata.uns[f"{key}_ontology"]``."""
    import pandas as pd

    parts = [
        _native.annotate_csr(
            indptr, indices, data, genes, cells, os.fspath(model), threshold=threshold,
            batch_size=batch_size, token_budget=token_budget, threads=threads,
            allow_normalized=allow_normalized, log1p=log1p,
        )
        for indptr, indices, data, genes, cells in _blocks(adata, counts, gene_column)
    ]
    out = parts[0]
    if len(parts) > 1:  # a backed AnnData's blocks, joined
        out = dict(out)
        for c in _CALL_COLUMNS:
            out[c] = np.concatenate([np.asarray(p[c]) for p in parts])
        out["probabilities"] = np.ascontiguousarray(np.vstack([p["probabilities"] for p in parts]))
    frame = pd.DataFrame({c: out[c] for c in _CALL_COLUMNS}, index=adata.obs_names)
    if key is not None:
        for c in _CALL_COLUMNS:
            adata.obs[f"{key}_{c}"] = frame[c].values
        adata.obsm[f"{key}_leaf_probabilities"] = out["probabilities"]
        adata.uns[f"{key}_ontology"] = {"version": out["ontology_version"], "leaves": list(out["leaves"])}
    return frame



# --- Judging embeddings against baselines ---------------------------------------------------------

_EVAL_COLUMNS = (
    "kind", "dim", "ari", "nmi", "leiden_resolution", "ari_best", "ari_mean", "nmi_mean",
    "silhouette_label", "accuracy", "accuracy_sd", "macro_f1", "macro_f1_sd", "rare_macro_f1",
    "knn_accuracy", "knn_macro_f1", "silhouette_batch", "graph_connectivity", "ilisi", "clisi",
)


def _obs_strings(adata: Any, column: str, what: str) -> List[Optional[str]]:
    import pandas as pd

    if column not in adata.obs.columns:
        raise ValueError(f"{what}={column!r} is not an obs column (columns: {list(adata.obs.columns)})")
    values = adata.obs[column]
    return [None if pd.isna(v) else str(v) for v in values]


def eval_cells(
    adata: Any,
    obsm_key: Union[str, Sequence[str], None],
    label: str,
    batch: Optional[str] = None,
    *,
    counts: str = "X",
    log1p: bool = False,
    allow_normalized: bool = False,
    baselines: bool = True,
    seed: int = 0,
    neighbours: int = 15,
    lisi_neighbours: int = 90,
    resolutions: Optional[Sequence[float]] = None,
    n_top_genes: int = 2000,
    n_comps: int = 50,
    folds: int = 5,
) -> Any:
    """Judges cell embeddings (``adata.obsm[obsm_key]``; a list of keys compares several) beside
    baselines computed from the same cells in the same call — PCA of the log-normalised 2,000
    highly variable genes, the HVG matrix, a Gaussian random projection — on the tasks of
    scib-metrics and cz-benchmarks: Leiden clustering (ARI, NMI; the resolution of the best NMI
    among ``resolutions``), label silhouette, 5-fold logistic and k-NN probes, and with ``batch``
    the batch silhouette, graph connectivity, iLISI and cLISI. The same code as ``corrflow eval
    cells``. The baselines read the counts named by ``counts`` (``X``, ``raw``, ``layer:NAME``;
    ``log1p=True`` for log-normalised values); a baseline that cannot be computed is reported in
    ``.attrs["corrflow"]["skipped"]``.

    Returns a pandas DataFrame, one row per method (index: the obsm keys, ``pca``, ``random``,
    ``hvg``), one column per metric; the whole report (per-class F1, every Leiden resolution,
    which method is best per metric) is in ``.attrs["corrflow"]``."""
    import pandas as pd

    keys = [] if obsm_key is None else [obsm_key] if isinstance(obsm_key, str) else list(obsm_key)
    embeddings = []
    for key in keys:
        if key not in adata.obsm:
            raise ValueError(f"obsm_key={key!r} is not in adata.obsm (keys: {list(adata.obsm.keys())})")
        matrix = np.asarray(adata.obsm[key], dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != adata.n_obs:
            raise ValueError(f"adata.obsm[{key!r}] must be 2-d with one row per cell, got shape {matrix.shape}")
        embeddings.append((key, np.ascontiguousarray(matrix)))
    labels = _obs_strings(adata, label, "label")
    batches = None if batch is None else _obs_strings(adata, batch, "batch")
    arrays: Dict[str, Any] = {}
    if baselines:
        matrix, genes = _counts_and_genes(adata, counts, None)
        indptr, indices, data, shape = _csr_arrays(matrix)
        arrays = dict(indptr=indptr, indices=indices, data=data, n_genes=int(shape[1]))
    report = json.loads(_native.eval_cells(
        embeddings, labels, batches, counts_name=counts, log1p=log1p,
        allow_normalized=allow_normalized, baselines=baselines, seed=seed, neighbours=neighbours,
        lisi_neighbours=lisi_neighbours, resolutions=None if resolutions is None else [float(r) for r in resolutions],
        n_top_genes=n_top_genes, n_comps=n_comps, folds=folds, label_column=label,
        batch_column=batch or "batch", **arrays,
    ))
    rows = {name: {c: report["methods"][name].get(c) for c in _EVAL_COLUMNS} for name in report["order"]}
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index.name = "method"
    frame.attrs["corrflow"] = report
    return frame
