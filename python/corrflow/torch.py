"""``corrflow.torch``: :class:`MaskedDataset`, corrflow's masked batches as a PyTorch
``IterableDataset`` for single-process, ``torchrun`` / DDP and Lightning training.

Importing this module imports torch; the rest of corrflow does not need it.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional

import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from . import MaskedBatches

__all__ = ["MaskedDataset"]


class MaskedDataset(IterableDataset):
    """An epoch of CorrMask batches (dicts of tensors: ``input_ids``, ``attention_mask``,
    ``labels``, ``cell_index``) for a ``DataLoader(dataset, batch_size=None)``.

    ``rank`` and ``world_size`` default to ``torch.distributed``'s when a process group is
    initialised (else 0 and 1), so every DDP rank reads a disjoint shard with the same number of
    batches. With ``DataLoader(num_workers=k)`` each worker takes a further disjoint share of its
    rank's shard. Call :meth:`set_epoch` before each epoch, as with ``DistributedSampler``.
    Other keyword arguments go to :class:`corrflow.MaskedBatches` (``graph``, ``strategy``,
    ``batch_size``, ``max_len``, ``seed``, ...).
    """

    def __init__(self, corpus: Any, graph: Any = None, *, epoch: int = 0, rank: Optional[int] = None,
                 world_size: Optional[int] = None, **options: Any):
        super().__init__()
        self.corpus, self.graph, self.epoch, self.options = corpus, graph, epoch, options
        distributed = dist.is_available() and dist.is_initialized()
        self.rank = rank if rank is not None else (dist.get_rank() if distributed else 0)
        self.world_size = world_size if world_size is not None else (dist.get_world_size() if distributed else 1)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _shard(self):
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        return self.rank * workers + worker, self.world_size * workers

    def _batches(self) -> MaskedBatches:
        rank, world = self._shard()
        return MaskedBatches(self.corpus, self.graph, epoch=self.epoch, rank=rank, world_size=world, **self.options)

    def __len__(self) -> int:
        return len(self._batches())

    def __iter__(self) -> Iterator[Dict[str, torch.Tensor]]:
        for batch in self._batches():
            yield {k: torch.from_numpy(v) for k, v in batch.items()}
