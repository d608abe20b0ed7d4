"""AnnData in memory or backed -> the CSR arrays the library reads in place, and `tokenize`."""

from __future__ import annotations

import os
from typing import Any, List, Optional, Union

import numpy as np
import pyarrow as pa

from . import _native


def _check_anndata(adata: Any) -> None:
    """A TypeError that says what is accepted, for the things people pass instead of an AnnData
    (a file path, a bare matrix), before an AttributeError deep inside would."""
    if isinstance(adata, (str, bytes, os.PathLike)):
        raise TypeError(
            f"expected an AnnData in memory, got the path {os.fsdecode(adata)!r}: read it first "
            "(anndata.read_h5ad(path)), or tokenize the file without loading it with "
            "corrflow.ingest(path, corpus=..., atlas=...)"
        )
    import scipy.sparse as sp

    if isinstance(adata, np.ndarray) or sp.issparse(adata):
        raise TypeError(
            f"expected an AnnData in memory, got a bare {type(adata).__module__}.{type(adata).__name__} "
            "matrix: corrflow needs its gene ids too; wrap it as "
            "anndata.AnnData(X=matrix, var=pandas.DataFrame(index=gene_ids))"
        )
    missing = [a for a in ("X", "var", "obs_names") if not hasattr(adata, a)]
    if missing:
        raise TypeError(
            f"expected an AnnData in memory (with X, var and obs_names), got {type(adata).__name__} "
            f"(no {', '.join(missing)})"
        )


def _counts_and_genes(adata: Any, counts: str, gene_column: Optional[str]):
    """The counts matrix a `counts` spec names (X, raw, layer:NAME) and its gene ids."""
    _check_anndata(adata)
    if counts == "X":
        matrix, var = adata.X, adata.var
    elif counts in ("raw", "raw/X"):
        if adata.raw is None:
            raise ValueError("counts='raw' but the AnnData has no .raw")
        matrix, var = adata.raw.X, adata.raw.var
    elif counts.startswith("layer:") and len(counts) > len("layer:"):
        name = counts[len("layer:"):]
        if name not in adata.layers:
            raise ValueError(f"counts={counts!r}: no layer {name!r} (layers: {list(adata.layers.keys())})")
        matrix, var = adata.layers[name], adata.var
    else:
        raise ValueError(f"counts={counts!r} is not 'X', 'raw' or 'layer:NAME'")
    if matrix is None:
        raise ValueError(f"counts={counts!r}: the AnnData has no matrix there")
    if gene_column is None:
        genes = [str(g) for g in var.index]
    else:
        if gene_column not in var.columns:
            raise ValueError(
                f"gene_column={gene_column!r} is not a var column (columns: {list(var.columns)})"
            )
        genes = [str(g) for g in var[gene_column]]
    return matrix, genes


def _csr_arrays(matrix: Any):
    """indptr, indices, data of a cells x genes matrix (CSR, CSC or dense), in the dtypes the
    library reads in place; CSC and dense matrices are converted to CSR in memory."""
    import scipy.sparse as sp

    if sp.issparse(matrix):
        csr = matrix.tocsr() if matrix.format != "csr" else matrix
    elif isinstance(matrix, np.ndarray):
        dense = np.asarray(matrix)
        if dense.ndim != 2:
            raise ValueError(f"the counts matrix must be 2-d, got shape {dense.shape}")
        _check_dtype(dense.dtype)
        csr = sp.csr_matrix(dense)
    else:
        raise TypeError(
            f"counts matrix of type {type(matrix).__name__} is not supported in memory: use a "
            "scipy.sparse matrix or a NumPy array (for a backed AnnData, call corrflow.ingest on the file)"
        )
    _check_dtype(csr.data.dtype)
    data = csr.data
    if data.dtype not in (np.float32, np.float64):
        data = data.astype(np.float64)
    indices = csr.indices
    if indices.dtype != np.int32:
        indices = indices.astype(np.int32)
    indptr = csr.indptr
    if indptr.dtype not in (np.int32, np.int64):
        indptr = indptr.astype(np.int64)
    return (
        np.ascontiguousarray(indptr),
        np.ascontiguousarray(indices),
        np.ascontiguousarray(data),
        csr.shape,
    )


def _check_dtype(dtype: np.dtype) -> None:
    if not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)) or dtype == np.bool_:
        raise TypeError(f"counts must be integers or floats, got dtype {dtype}")


# Rows of a backed (on-disk) matrix read per block.
_BACKED_ROWS = 8192


def _is_backed(matrix: Any) -> bool:
    """A matrix left on disk: anndata's backed sparse datasets, h5py or zarr arrays."""
    import scipy.sparse as sp

    return matrix is not None and not (sp.issparse(matrix) or isinstance(matrix, np.ndarray)) \
        and hasattr(matrix, "shape") and hasattr(matrix, "__getitem__")


def _blocks(adata: Any, counts: str, gene_column: Optional[str]):
    """The cells as CSR arrays: all at once for an in-memory AnnData; for a backed one
    (``read_h5ad(path, backed="r")``), blocks of rows read from disk one after the other, so the
    matrix is never whole in memory. Yields (indptr, indices, data, genes, cells)."""
    matrix, genes = _counts_and_genes(adata, counts, gene_column)
    names = [str(c) for c in adata.obs_names]
    if not _is_backed(matrix):
        yield _block(matrix, genes, names)
        return
    if getattr(matrix, "format", None) == "csc":
        raise TypeError(
            "a backed AnnData whose matrix is stored by gene (CSC) cannot be read by cells without "
            "reading all of it: call corrflow.ingest on the file (it transposes out of core)"
        )
    for start in range(0, max(matrix.shape[0], 1), _BACKED_ROWS):
        block = matrix[start:start + _BACKED_ROWS]
        yield _block(block, genes, names[start:start + block.shape[0]])


def _block(matrix: Any, genes: List[str], cells: List[str]):
    """One block's CSR arrays, genes and cell names, checked against var."""
    indptr, indices, data, shape = _csr_arrays(matrix)
    if shape[1] != len(genes):
        raise ValueError(f"the matrix has {shape[1]} genes but var has {len(genes)}")
    return indptr, indices, data, genes, cells


def tokenize(
    adata: Any,
    vocab: str = "geneformer-v1",
    gene_column: Optional[str] = None,
    counts: str = "X",
    version: str = "v1",
    *,
    max_genes: Optional[int] = None,
    allow_normalized: bool = False,
    log1p: bool = False,
    as_lists: bool = False,
) -> Union[pa.ListArray, List[Optional[List[int]]]]:
    """Rank-value tokens of every cell of an AnnData, as ``corrflow ingest`` makes them. A backed
    AnnData (``read_h5ad(path, backed="r")``) is read from disk in blocks of 8,192 cells.

    The matrix may be CSR, CSC or dense (``counts``: ``"X"``, ``"raw"`` or ``"layer:NAME"``);
    genes are the var index or ``gene_column`` (Ensembl ids or symbols). Returns a pyarrow
    ``ListArray`` of int32 tokens aligned with ``adata.obs`` (built over the library's buffers
    without a copy); a cell with no vocabulary gene expressed, which ``ingest`` drops, is null.
    ``as_lists=True`` gives Python lists instead.
    """
    parts = [
        _native.tokenize_csr(
            indptr, indices, data, genes, cells, vocab=vocab, version=version, max_genes=max_genes,
            allow_normalized=allow_normalized, log1p=log1p,
        )[:3]
        for indptr, indices, data, genes, cells in _blocks(adata, counts, gene_column)
    ]
    if len(parts) == 1:
        offsets, tokens, kept = parts[0]
    else:  # a backed AnnData's blocks, joined
        shift = np.cumsum([0] + [len(p[1]) for p in parts[:-1]])
        offsets = np.concatenate([parts[0][0][:1]] + [p[0][1:] + s for p, s in zip(parts, shift)])
        tokens = np.concatenate([p[1] for p in parts])
        kept = np.concatenate([p[2] for p in parts])
    array = _list_array(offsets, tokens, kept)
    return array.to_pylist() if as_lists else array


def _list_array(offsets: np.ndarray, tokens: np.ndarray, kept: np.ndarray) -> pa.Array:
    mask = pa.array(~kept)
    if tokens.size < 2**31 - 1:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(tokens), mask=mask)
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(tokens), mask=mask)
