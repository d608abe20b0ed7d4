"""The trainer's masked batches as NumPy arrays (`MaskedBatches`)."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterator, Optional, Sequence, Union

import numpy as np

from . import _native
from ._corpus import Corpus
from ._graph import Graph
from ._types import PathLike


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
