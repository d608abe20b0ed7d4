"""corrflow.torch.MaskedDataset in PyTorch, and the torchrun example with 2 processes. Skipped
where torch and transformers are not installed (the CI venv: torch is ~6 GB with its CUDA
libraries); run it with a venv that has them:
    ~/.cache/corrflow/torch-venv/bin/python -m pytest python/tests/test_torchrun.py
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import corrflow  # noqa: E402
from corrflow.torch import MaskedDataset  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pretrain_ddp.py"
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


@pytest.mark.slow
def test_torchrun_example_trains_bert_on_two_ranks_with_disjoint_cells(pbmc_corpus, pbmc_graph):
    torchrun = Path(sys.executable).with_name("torchrun")
    out = subprocess.run([str(torchrun), "--nproc-per-node", "2", str(EXAMPLE), str(pbmc_corpus), str(pbmc_graph),
                          "--steps", "3"], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    final = lines[-1]
    assert final["world_size"] == 2 and final["steps"] == 3
    assert final["cells_per_rank"][0] == final["cells_per_rank"][1] > 0 and final["cells_on_two_ranks"] == 0
    assert all(np.isfinite(l["loss"]) for l in lines[:-1])
