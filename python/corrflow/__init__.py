"""corrflow from Python: tokenize AnnData in memory, ingest files into a corpus, build and
update the gene dependency graph, stream the trainer's CorrMask batches into a PyTorch loop,
and embed cells with an exported ONNX model.

Everything runs in corrflow's Rust library (the same code as the ``corrflow`` command line), with
the GIL released; a Ctrl-C stops a long call at its next safe point. Library errors are raised
as :class:`CorrflowError` with the library's message (it names the file and the problem).
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np
import pyarrow as pa

from . import _native
from ._native import CorrflowError, ValueBatches, __version__

__all__ = [
    "CorrflowError",
    "Corpus",
    "Graph",
    "MaskedBatches",
    "ValueBatches",
    "annotate",
    "embed",
    "eval_cells",
    "ingest",
    "set_progress",
    "tokenize",
    "__version__",
]

PathLike = Union[str, "os.PathLike[str]"]


# --- progress ------------------------------------------------------------------------------------


def set_progress(receiver: Any = True) -> None:
    """Show the progress of long calls (``ingest``, ``embed``, ``annotate``).

    The library reports progress as events (the ``corrflow`` command draws them as bars).
    ``receiver`` chooses what happens to them:

    - ``True``: a ``tqdm`` bar per task (``tqdm.auto``, so notebooks get widgets);
    - a callable: ``receiver(kind, task_id, name, unit, position, total, message)`` for every
      event, ``kind`` being ``"start"``, ``"advance"`` or ``"finish"`` (called from worker
      threads, with the GIL held; keep it quick);
    - ``False`` or ``None``: nothing (the default).
    """
    if receiver is True:
        receiver = _TqdmBars()
    elif receiver is False:
        receiver = None
    elif receiver is not None and not callable(receiver):
        raise TypeError(f"set_progress takes True, False, None or a callable, got {type(receiver).__name__}")
    _native.set_progress(receiver)


class _TqdmBars:
    """Progress events as tqdm bars, one per running task."""

    def __init__(self) -> None:
        from tqdm.auto import tqdm  # imported here: tqdm is only needed for the bars

        self._tqdm = tqdm
        self._bars: Dict[int, Any] = {}

    def __call__(self, kind, task_id, name, unit, position, total, message) -> None:
        if kind == "start":
            self._bars[task_id] = self._tqdm(total=total, initial=position, desc=name, unit=f" {unit}")
            return
        bar = self._bars.get(task_id)
        if bar is None:
            return
        bar.update(position - bar.n)
        if message:
            bar.set_postfix_str(message, refresh=False)
        if kind == "finish":
            bar.close()
            del self._bars[task_id]


# --- AnnData in memory -> CSR arrays ------------------------------------------------------------


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


# --- files -> corpus -----------------------------------------------------------------------------


def ingest(
    paths: Union[PathLike, Sequence[PathLike]],
    corpus: PathLike,
    atlas: str,
    *,
    vocab: str = "geneformer-v1",
    version: str = "v1",
    max_genes: Optional[int] = None,
    counts: str = "X",
    gene_column: Optional[str] = None,
    obs_columns: Sequence[str] = (),
    allow_normalized: bool = False,
    log1p: bool = False,
    chunk_cells: int = 256,
    shard_cells: int = 100_000,
    zstd_level: int = 1,
    restart: bool = False,
    ignore_filter_pass: bool = False,
    value_filter: Optional[str] = None,
    measurement: str = "RNA",
) -> Dict[str, Any]:
    """``corrflow ingest``: h5ad / AnnData zarr / loom / 10x h5 / Matrix Market files, and
    TileDB-SOMA experiments (CELLxGENE Census is one; needs the ``tiledbsoma`` package), streamed
    into atlas ``atlas`` of ``corpus`` (bounded memory, shards committed atomically). Cells whose
    obs column (loom: column attribute) ``filter_pass`` is not 1 are left out, as Geneformer's
    tokenizer does, unless ``ignore_filter_pass``. Returns the summary the CLI's ``--json``
    prints. A Ctrl-C stops it after the chunk being read; calling it again resumes.

    For a SOMA experiment: ``value_filter`` selects cells by ``obs`` as tiledbsoma takes it
    (``"cell_type == 'B cell' and is_primary_data == True"``); ``measurement`` (default "RNA");
    ``counts`` "X" takes the measurement's only X layer, or "raw" (Census' counts) among several,
    ``"layer:NAME"`` names one, "raw" reads tiledbsoma's ``raw`` measurement; ``gene_column``
    defaults to var's ``var_id`` (``tiledbsoma.io.from_h5ad``) or ``feature_id`` (Census)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    from . import _soma

    if value_filter is not None and not any(_is_soma(p) for p in paths):
        raise ValueError("value_filter selects cells of a TileDB-SOMA experiment; none of the inputs is one")
    with _soma.using(value_filter=value_filter, measurement=measurement):
        summary = _native.ingest(
            paths, os.fspath(corpus), atlas, vocab=vocab, version=version,
            max_genes=max_genes, counts=counts, gene_column=gene_column, obs_columns=list(obs_columns),
            allow_normalized=allow_normalized, log1p=log1p, chunk_cells=chunk_cells,
            shard_cells=shard_cells, zstd_level=zstd_level, restart=restart,
            ignore_filter_pass=ignore_filter_pass,
        )
    summary = json.loads(summary)
    for w in summary.get("warnings", []):
        warnings.warn(w, stacklevel=2)
    return summary


def _is_soma(path: str) -> bool:
    """The check of crates/formats/src/soma.rs: a TileDB group with a SOMA experiment's `ms`."""
    return os.path.exists(os.path.join(path, "__tiledb_group.tdb")) and os.path.isdir(os.path.join(path, "ms"))


class Corpus:
    """A token corpus on disk (``corrflow ingest``'s output): its atlases, cells and vocabulary.

    ``atlases`` restricts it to some atlases (default: every finished one)."""

    def __init__(self, path: PathLike, atlases: Optional[Sequence[str]] = None):
        self.path = Path(path)
        self._atlases = list(atlases or [])
        self._info = _native.corpus_info(os.fspath(self.path), self._atlases)

    @property
    def atlases(self) -> List[str]:
        return list(self._info["atlases"])

    @property
    def n_cells(self) -> int:
        return int(self._info["cells"])

    def __len__(self) -> int:
        return self.n_cells

    @property
    def vocab(self) -> Dict[str, Any]:
        """Vocabulary name, hash and size, the sequence layout and the special tokens."""
        keys = ("vocab_name", "vocab_hash", "vocab_size", "max_genes", "cls", "eos", "pad", "mask")
        return {k: self._info[k] for k in keys}

    def shards(self) -> List[Dict[str, Any]]:
        return [dict(s) for s in self._info["shards"]]

    def to_arrow(self, verify: bool = True) -> pa.Table:
        """Every cell as one pyarrow Table (``cell_id``, ``input_ids``, ``length``, obs columns),
        in key order; shard checksums are verified first unless ``verify=False``."""
        import pyarrow.parquet as pq

        info = _native.corpus_info(os.fspath(self.path), self._atlases, verify=verify)
        tables = [pq.read_table(s["path"]) for s in info["shards"]]
        if not tables:
            raise CorrflowError(f"{self.path}: no cells")
        return pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]

    def to_hf(self, path: Optional[PathLike] = None):
        """The corpus as a Hugging Face ``datasets.Dataset`` (written in ``save_to_disk`` layout to
        ``path``, or a temporary directory, and loaded from there)."""
        import datasets

        out = Path(path) if path is not None else Path(tempfile.mkdtemp(prefix="corrflow-hf-")) / "dataset"
        _native.export_hf(os.fspath(self.path), os.fspath(out), self._atlases)
        return datasets.load_from_disk(os.fspath(out))

    def __repr__(self) -> str:
        return f"Corpus({os.fspath(self.path)!r}, atlases={self.atlases}, cells={self.n_cells})"


# --- the dependency graph ------------------------------------------------------------------------


class Graph:
    """A gene dependency graph directory (CorrMask Algorithm 1): genes, edges with ρ_local,
    ρ_global and co-presence counts. ``vocab`` names genes by symbol in :meth:`neighbours`."""

    def __init__(self, path: PathLike, vocab: str = "geneformer-v1"):
        self.path = Path(path)
        self._vocab = vocab
        self._load()

    def _load(self) -> None:
        d = _native.graph_read(os.fspath(self.path))
        self.info: Dict[str, Any] = json.loads(d.pop("info"))
        self._d = d
        self._symbols: Optional[Dict[int, str]] = None

    @classmethod
    def open(cls, path: PathLike, vocab: str = "geneformer-v1") -> "Graph":
        return cls(path, vocab=vocab)

    @classmethod
    def build(
        cls,
        corpus: Union[PathLike, Corpus],
        out: PathLike,
        *,
        atlases: Optional[Sequence[str]] = None,
        incremental: bool = False,
        workers: int = 1,
        vocab: str = "geneformer-v1",
        **params: Any,
    ) -> "Graph":
        """``corrflow graph build``: the graph of ``corpus`` written to ``out``. ``params`` override
        the graph parameters (``n_sub``, ``l_max``, ``min_presence``, ``max_genes``, ``rho_min``,
        ``m_min``, ``n_neigh``, ``seed``, ...); ``incremental=True`` builds the rank-map graph that
        :meth:`update` and :meth:`retract` change exactly. The summary is in ``.summary``."""
        corpus_path = corpus.path if isinstance(corpus, Corpus) else Path(corpus)
        if atlases is None and isinstance(corpus, Corpus):
            atlases = corpus._atlases
        summary = _native.graph_build(
            os.fspath(corpus_path), os.fspath(out), list(atlases or []), json.dumps(params),
            incremental=incremental, workers=workers,
        )
        g = cls(out, vocab=vocab)
        g.summary = json.loads(summary)
        return g

    def update(self, add: Optional[PathLike] = None, *, retract: Optional[str] = None,
               rebase: bool = False, workers: int = 1) -> Dict[str, Any]:
        """``corrflow graph update``: add an atlas (its directory, ``corpus/atlases/NAME``), retract
        an included atlas by name, or rebase. Returns the summary; the graph is reloaded."""
        summary = _native.graph_update(
            os.fspath(self.path), add=os.fspath(add) if add is not None else None, retract=retract,
            rebase=rebase, workers=workers,
        )
        self._load()
        return json.loads(summary)

    def retract(self, name: str, workers: int = 1) -> Dict[str, Any]:
        """Retracts the included atlas ``name`` (exact: as if it had never been added)."""
        return self.update(retract=name, workers=workers)

    @property
    def n_genes(self) -> int:
        return len(self._d["token_id"])

    @property
    def n_edges(self) -> int:
        return len(self._d["u"])

    def genes(self) -> pa.Table:
        """``token_id``, ``gene_id``, ``symbol``, ``presence`` of the graph's genes."""
        symbols = self._symbol_map()
        tokens = self._d["token_id"]
        return pa.table({
            "token_id": tokens,
            "gene_id": self._d["gene_id"],
            "symbol": [symbols.get(int(t), "") for t in tokens],
            "presence": self._d["presence"],
        })

    def edges(self) -> pa.Table:
        """Every edge: ``u``, ``v`` (token ids, u < v), their gene ids, ``rho`` (ρ_local),
        ``rho_global``, ``co_count``."""
        gene_of = dict(zip(self._d["token_id"].tolist(), self._d["gene_id"]))
        u, v = self._d["u"], self._d["v"]
        return pa.table({
            "u": u,
            "v": v,
            "gene_u": [gene_of.get(int(t), "") for t in u],
            "gene_v": [gene_of.get(int(t), "") for t in v],
            "rho": self._d["rho"],
            "rho_global": self._d["rho_global"],
            "co_count": self._d["co_count"],
        })

    def neighbours(self, gene: str) -> pa.Table:
        """The partners of ``gene`` (Ensembl id or symbol), strongest |ρ_local| first:
        ``token_id``, ``gene_id``, ``symbol``, ``rho``, ``rho_global``, ``co_count``. Call
        ``.to_pandas()`` on it for a DataFrame."""
        token = self._token_of(gene)
        u, v = self._d["u"], self._d["v"]
        hit = (u == token) | (v == token)
        other = np.where(u[hit] == token, v[hit], u[hit])
        rho = self._d["rho"][hit]
        order = np.lexsort((other, -np.abs(rho)))
        gene_of = dict(zip(self._d["token_id"].tolist(), self._d["gene_id"]))
        symbols = self._symbol_map()
        other = other[order]
        return pa.table({
            "token_id": other,
            "gene_id": [gene_of.get(int(t), "") for t in other],
            "symbol": [symbols.get(int(t), "") for t in other],
            "rho": rho[order],
            "rho_global": self._d["rho_global"][hit][order],
            "co_count": self._d["co_count"][hit][order],
        })

    def _symbol_map(self) -> Dict[int, str]:
        if self._symbols is None:
            try:
                ids, _genes, names = _native.vocabulary_genes(self._vocab)
                self._symbols = {int(t): s for t, s in zip(ids, names) if s}
            except CorrflowError:
                self._symbols = {}
        return self._symbols

    def _token_of(self, gene: str) -> int:
        tokens = self._d["token_id"]
        for t, g in zip(tokens.tolist(), self._d["gene_id"]):
            if g == gene or g.split(".")[0] == gene:
                return int(t)
        wanted = gene.upper()
        for t, s in self._symbol_map().items():
            if s.upper() == wanted and t in set(tokens.tolist()):
                return t
        raise KeyError(f"gene {gene!r} is not in the graph ({self.n_genes} genes; ids or symbols of vocabulary {self._vocab!r})")

    def __repr__(self) -> str:
        return f"Graph({os.fspath(self.path)!r}, genes={self.n_genes}, edges={self.n_edges})"


# --- masked batches ------------------------------------------------------------------------------


class MaskedBatches:
    """One epoch of the trainer's masked batches as dicts of NumPy arrays: ``input_ids``,
    ``attention_mask``, ``labels`` (int64 ``[rows, len]``, labels −100 at positions that are not
    predicted: the layout ``transformers`` models take) and ``cell_index`` (the cells' corpus keys).

    The cells, their order, length grouping and masks are those ``corrflow train`` uses for the
    same ``seed`` and ``epoch`` (held-out cells, ``eval_fraction``, are left out as in training).
    ``rank``/``world_size`` give each data-parallel rank a disjoint shard with the same number of
    batches; the shards together are the epoch. Masking runs on ``num_threads`` threads (default:
    all cores); the batches do not depend on it. ``mask_params`` override masking parameters
    (``p``, ``lambda``, ``k_max``, ``mask_token_rate``, ...). ``start`` skips the epoch's (this
    rank's) first batches without masking them, for resuming mid-epoch: the batches that follow
    are those of a full epoch from that index on.
    """

    def __init__(
        self,
        corpus: Union[PathLike, Corpus],
        graph: Union[None, PathLike, Graph] = None,
        strategy: str = "corrmask",
        batch_size: int = 12,
        max_len: int = 2048,
        epoch: int = 0,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        group_batches: int = 50,
        num_threads: Optional[int] = None,
        *,
        shuffle_buffer: int = 10_000,
        eval_fraction: float = 0.05,
        atlases: Optional[Sequence[str]] = None,
        start: int = 0,
        **mask_params: Any,
    ):
        if isinstance(corpus, Corpus):
            atlases = atlases if atlases is not None else corpus._atlases
            corpus = corpus.path
        if isinstance(graph, Graph):
            graph = graph.path
        self._it = _native.MaskedBatches(
            os.fspath(corpus), None if graph is None else os.fspath(graph), strategy=strategy,
            batch_size=batch_size, max_len=max_len, epoch=epoch, seed=seed, rank=rank,
            world_size=world_size, group_batches=group_batches, shuffle_buffer=shuffle_buffer,
            eval_fraction=eval_fraction, num_threads=num_threads, atlases=list(atlases or []),
            mask_params=json.dumps(mask_params), start=start,
        )

    def __len__(self) -> int:
        return len(self._it)

    def __iter__(self) -> Iterator[Dict[str, np.ndarray]]:
        return self

    def __next__(self) -> Dict[str, np.ndarray]:
        return next(self._it)

    def close(self) -> None:
        """Stops the masking threads; iteration ends."""
        self._it.close()


# --- embeddings ----------------------------------------------------------------------------------


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
