"""Type stubs of corrflow's Rust extension module (wrapped by ``corrflow/__init__.py``)."""

from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import numpy.typing as npt

__version__: str

class CorrflowError(Exception):
    """An error from corrflow's library: bad input, a corrupt file, a refused write."""

def tokenize_csr(
    indptr: npt.NDArray[Any],
    indices: npt.NDArray[np.int32],
    data: npt.NDArray[Any],
    gene_ids: List[str],
    cell_ids: List[str],
    vocab: str = "geneformer-v1",
    version: str = "v1",
    max_genes: Optional[int] = None,
    allow_normalized: bool = False,
    log1p: bool = False,
    source: str = "AnnData",
) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.bool_], Dict[str, Any]]: ...
def vocabulary_genes(vocab: str = "geneformer-v1") -> Tuple[List[int], List[str], List[str]]: ...
def ingest(
    paths: List[str],
    corpus: str,
    atlas: str,
    vocab: str = "geneformer-v1",
    version: str = "v1",
    max_genes: Optional[int] = None,
    counts: str = "X",
    gene_column: Optional[str] = None,
    obs_columns: List[str] = ...,
    allow_normalized: bool = False,
    log1p: bool = False,
    chunk_cells: int = 256,
    shard_cells: int = 100000,
    zstd_level: int = 1,
    restart: bool = False,
    ignore_filter_pass: bool = False,
) -> str: ...
def corpus_info(path: str, atlases: List[str] = ..., verify: bool = False) -> Dict[str, Any]: ...
def export_hf(corpus: str, out: str, atlases: List[str] = ...) -> int: ...
def graph_build(
    corpus: str, out: str, atlases: List[str] = ..., params: str = "{}", incremental: bool = False, workers: int = 1
) -> str: ...
def graph_update(
    graph: str, add: Optional[str] = None, retract: Optional[str] = None, rebase: bool = False, workers: int = 1
) -> str: ...
def graph_read(path: str) -> Dict[str, Any]: ...
def embed_csr(
    indptr: npt.NDArray[Any],
    indices: npt.NDArray[np.int32],
    data: npt.NDArray[Any],
    gene_ids: List[str],
    cell_ids: List[str],
    model: str,
    pooling: Optional[str] = None,
    batch_size: int = 64,
    token_budget: int = 16384,
    threads: int = 0,
    allow_normalized: bool = False,
    log1p: bool = False,
    source: str = "AnnData",
    layer: Optional[int] = None,
    emb_layer: Optional[int] = None,
) -> npt.NDArray[np.float32]: ...
def eval_cells(
    embeddings: List[Tuple[str, npt.NDArray[np.float32]]],
    labels: List[Optional[str]],
    batches: Optional[List[Optional[str]]] = None,
    indptr: Optional[npt.NDArray[Any]] = None,
    indices: Optional[npt.NDArray[np.int32]] = None,
    data: Optional[npt.NDArray[Any]] = None,
    n_genes: int = 0,
    counts_name: str = "X",
    log1p: bool = False,
    allow_normalized: bool = False,
    baselines: bool = True,
    seed: int = 0,
    neighbours: int = 15,
    lisi_neighbours: int = 90,
    resolutions: Optional[List[float]] = None,
    n_top_genes: int = 2000,
    n_comps: int = 50,
    folds: int = 5,
    source: str = "AnnData",
    label_column: str = "label",
    batch_column: str = "batch",
) -> str: ...
def annotate_csr(
    indptr: npt.NDArray[Any],
    indices: npt.NDArray[np.int32],
    data: npt.NDArray[Any],
    gene_ids: List[str],
    cell_ids: List[str],
    model: str,
    threshold: float = 0.5,
    batch_size: int = 64,
    token_budget: int = 16384,
    threads: int = 0,
    allow_normalized: bool = False,
    log1p: bool = False,
    source: str = "AnnData",
) -> Dict[str, Any]: ...

class MaskedBatches:
    def __init__(
        self,
        corpus: str,
        graph: Optional[str] = None,
        strategy: str = "corrmask",
        batch_size: int = 12,
        max_len: int = 2048,
        epoch: int = 0,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        group_batches: int = 50,
        shuffle_buffer: int = 10000,
        eval_fraction: float = 0.05,
        num_threads: Optional[int] = None,
        atlases: List[str] = ...,
        mask_params: str = "{}",
        start: int = 0,
    ) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> "MaskedBatches": ...
    def __next__(self) -> Dict[str, Any]: ...
    def close(self) -> None: ...
    def _drain(self) -> int: ...

def held_out_batches(
    corpus: str,
    graph: Optional[str] = None,
    strategy: str = "corrmask",
    batch_size: int = 12,
    max_len: int = 2048,
    seed: int = 0,
    eval_fraction: float = 0.05,
    eval_cells: int = 512,
    atlases: List[str] = ...,
    mask_params: str = "{}",
) -> List[Dict[str, Any]]: ...
def held_out_value_batches(
    corpus: str,
    graph: Optional[str] = None,
    strategy: str = "random",
    batch_size: int = 12,
    seed: int = 0,
    visible_genes: int = 256,
    mask_p: float = 0.9,
    mask_lambda: float = 0.5,
    decode: str = "hvg:1024",
    visible: str = "measured",
    target_sum: float = 1e5,
    eval_fraction: float = 0.05,
    eval_cells: int = 512,
    atlases: List[str] = ...,
    mask_params: str = "{}",
) -> List[Dict[str, Any]]: ...
def train_settings(table: str) -> str: ...
def set_progress(callback: Optional[Callable[..., None]] = None) -> None: ...

class ValueBatches:
    """A value model's training batches (``txfm`` / ``wced``): dicts of NumPy arrays ``input_ids``,
    ``values``, ``attention_mask`` ``[rows, len]`` (``<cls>`` first), ``counts``, ``measured``
    ``[rows, genes]`` over the decoding set, ``totals`` ``[rows]``."""

    decode_genes: List[int]
    cls: int
    def __init__(
        self,
        corpus: str,
        graph: Optional[str] = None,
        strategy: str = "random",
        batch_size: int = 12,
        epoch: int = 0,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        visible_genes: int = 256,
        mask_p: float = 0.9,
        mask_lambda: float = 0.5,
        decode: str = "hvg:1024",
        visible: str = "measured",
        target_sum: float = 1e5,
        group_batches: int = 50,
        shuffle_buffer: int = 10000,
        eval_fraction: float = 0.05,
        atlases: List[str] = ...,
        start: int = 0,
        mask_params: str = "{}",
    ) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> "ValueBatches": ...
    def __next__(self) -> Dict[str, Any]: ...
    def close(self) -> None: ...
