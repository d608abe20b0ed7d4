"""Files -> a corpus (`ingest`), and the corpus on disk (`Corpus`)."""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import pyarrow as pa

from . import _native
from ._native import CorrflowError
from ._types import PathLike


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
