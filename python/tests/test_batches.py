"""corrflow.MaskedBatches: the trainer's batches, sharded for data-parallel ranks."""

import json

import numpy as np
import pytest

import corrflow
from conftest import corrflow as cli

# The tiny config's training settings (configs/tiny.toml).
TINY = dict(batch_size=8, group_batches=10, shuffle_buffer=2000, max_len=256, eval_fraction=0.05, seed=0)


def test_batches_equal_the_trainers_batches_for_the_same_seed_and_epoch(work, pbmc_corpus, pbmc_graph):
    dump = work / "batches.jsonl"
    cli("train", "--corpus", pbmc_corpus, "--graph", pbmc_graph, "--out", work / "dump_run",
        "--max-steps", 12, "--dump-batches", dump)
    trainer = [json.loads(line) for line in open(dump)]
    mine = corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, **TINY)
    assert len(trainer) == 12
    for want, got in zip(trainer, mine):
        shape = (want["rows"], want["len"])
        for key in ("input_ids", "attention_mask", "labels"):
            assert got[key].dtype == np.int64 and got[key].shape == shape
            assert got[key].ravel().tolist() == want[key], key


def epoch_cells(batches):
    return [int(k) for b in batches for k in b["cell_index"]]


def test_world_size_2_shards_are_disjoint_equally_long_and_together_the_epoch(pbmc_corpus, pbmc_graph):
    whole = list(corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, **TINY))
    shards = [list(corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, rank=r, world_size=2, **TINY)) for r in (0, 1)]
    assert len(shards[0]) == len(shards[1]) == len(corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, world_size=2, **TINY))
    a, b = epoch_cells(shards[0]), epoch_cells(shards[1])
    assert not set(a) & set(b)
    assert len(a) + len(b) == len(set(a) | set(b)) == len(epoch_cells(whole))
    assert sorted(a + b) == sorted(epoch_cells(whole))
    # A cell is masked the same in any shard.
    rows = {}
    for batch in whole:
        for r, k in enumerate(batch["cell_index"]):
            n = int(batch["attention_mask"][r].sum())
            rows[int(k)] = batch["labels"][r, :n].tolist()
    for shard in shards:
        for batch in shard:
            for r, k in enumerate(batch["cell_index"]):
                n = int(batch["attention_mask"][r].sum())
                assert batch["labels"][r, :n].tolist() == rows[int(k)]


def test_a_start_skips_the_first_batches_and_the_rest_are_the_full_epochs(pbmc_corpus, pbmc_graph):
    for world in (1, 2):
        whole = list(corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, rank=world - 1, world_size=world, **TINY))
        start = len(whole) // 2 + 1
        rest = corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, rank=world - 1, world_size=world, start=start, **TINY)
        assert len(rest) == len(whole) - start
        rest = list(rest)
        assert len(rest) == len(whole) - start > 0
        for a, b in zip(whole[start:], rest):
            assert a.keys() == b.keys()
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])
    past = corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, start=10**6, **TINY)
    assert len(past) == 0 and list(past) == []


def test_batches_are_deterministic_and_do_not_depend_on_the_thread_count(pbmc_corpus, pbmc_graph):
    runs = [list(corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, num_threads=t, **TINY)) for t in (1, 3)]
    assert len(runs[0]) == len(runs[1]) > 0
    for x, y in zip(*runs):
        for key in ("input_ids", "labels", "cell_index"):
            assert np.array_equal(x[key], y[key])
    other = next(iter(corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, **{**TINY, "seed": 1})))
    assert not np.array_equal(other["labels"], runs[0][0]["labels"]) or other["labels"].shape != runs[0][0]["labels"].shape


def test_epochs_differ_and_held_out_cells_never_appear(pbmc_corpus, pbmc_graph):
    e0 = epoch_cells(corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, epoch=0, **TINY))
    e1 = epoch_cells(corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, epoch=1, **TINY))
    assert sorted(e0) == sorted(e1) and e0 != e1
    n = corrflow.Corpus(pbmc_corpus).n_cells
    assert 0.9 * n < len(e0) < n


def test_labels_mark_exactly_the_masked_positions_in_transformers_layout(pbmc_corpus, pbmc_graph):
    batch = next(iter(corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, **TINY)))
    masked = batch["labels"] != -100
    assert masked.any() and not (masked & (batch["attention_mask"] == 0)).any()
    share = masked.sum() / batch["attention_mask"].sum()
    assert 0.05 < share < 0.25
