"""corrflow.torch.MaskedDataset in PyTorch (torchrun training itself: test_pretrain.py). Skipped
where torch and transformers are not installed."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import corrflow  # noqa: E402
from corrflow.torch import MaskedDataset  # noqa: E402

TINY = dict(batch_size=8, group_batches=10, shuffle_buffer=2000, max_len=256)


def test_masked_dataset_yields_the_loaders_batches_as_tensors(pbmc_corpus, pbmc_graph):
    from torch.utils.data import DataLoader

    ds = MaskedDataset(pbmc_corpus, pbmc_graph, rank=1, world_size=2, **TINY)
    want = list(corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, rank=1, world_size=2, **TINY))
    got = list(DataLoader(ds, batch_size=None))
    assert len(got) == len(want) == len(ds)
    for g, w in zip(got, want):
        assert g["input_ids"].dtype == torch.int64
        assert np.array_equal(g["labels"].numpy(), w["labels"])
