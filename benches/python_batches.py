#!/usr/bin/env python3
"""corrflow's Python package against what a user would write otherwise, interleaved rounds:

1. CorrMask batches into NumPy (`corrflow.MaskedBatches`) vs a PyTorch `DataLoader` over the
   same corpus read with pyarrow, padded and masked in Python (random 15% BERT masking with
   80/10/10 replacement; simpler than CorrMask, so the baseline is favoured).
2. `corrflow.tokenize` on an in-memory AnnData vs `corrflow ingest` of the same file (CLI).

Usage: benches/python_batches.py CORPUS GRAPH H5AD CORRFLOW_BIN [ROUNDS]
Run it with a Python that has corrflow (scripts/python-package.sh), anndata and torch.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import anndata
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch.utils.data import DataLoader, Dataset

import corrflow

corpus, graph, h5ad, cli = sys.argv[1:5]
rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 3
BATCH, MAX_LEN = 12, 2048


def corrflow_epoch(threads):
    n = 0
    for b in corrflow.MaskedBatches(corpus, graph, batch_size=BATCH, max_len=MAX_LEN, num_threads=threads):
        n += b["input_ids"].shape[0]
    return n


class Cells(Dataset):
    """The corpus' cells, read with pyarrow, as a map-style dataset."""

    def __init__(self):
        info = corrflow.Corpus(corpus)
        table = pa.concat_tables([pq.read_table(s["path"], columns=["input_ids"]) for s in info.shards()])
        col = table.column("input_ids").combine_chunks()
        self.offsets = col.offsets.to_numpy()
        self.values = col.values.to_numpy()
        self.vocab_size, self.mask_id, self.pad_id = info.vocab["vocab_size"], info.vocab["mask"], info.vocab["pad"]

    def __len__(self):
        return len(self.offsets) - 1

    def __getitem__(self, i):
        return self.values[self.offsets[i]:self.offsets[i + 1]][:MAX_LEN]


def make_collate(ds, seed):
    rng = np.random.default_rng(seed)

    def collate(cells):
        """Pads and masks like transformers' DataCollatorForLanguageModeling."""
        L = max(len(c) for c in cells)
        ids = np.full((len(cells), L), ds.pad_id, dtype=np.int64)
        att = np.zeros((len(cells), L), dtype=np.int64)
        for r, c in enumerate(cells):
            ids[r, :len(c)] = c
            att[r, :len(c)] = 1
        labels = ids.copy()
        masked = (rng.random(ids.shape) < 0.15) & (att == 1)
        labels[~masked] = -100
        replace = masked & (rng.random(ids.shape) < 0.8)
        ids[replace] = ds.mask_id
        rand = masked & ~replace & (rng.random(ids.shape) < 0.5)
        ids[rand] = rng.integers(2, ds.vocab_size, size=int(rand.sum()))
        return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(att),
                "labels": torch.from_numpy(labels)}

    return collate


def dataloader_epoch(ds, workers):
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True, collate_fn=make_collate(ds, 0), num_workers=workers,
                        generator=torch.Generator().manual_seed(0))
    return sum(b["input_ids"].shape[0] for b in loader)


def timed(f, *a):
    t0 = time.perf_counter()
    n = f(*a)
    return n, time.perf_counter() - t0


def tokenize_in_memory():
    adata = anndata.read_h5ad(h5ad)  # reading the file is not timed: the user already has it
    t0 = time.perf_counter()
    tokens = corrflow.tokenize(adata)
    return len(tokens) - tokens.null_count, time.perf_counter() - t0


def cli_ingest():
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        subprocess.run([cli, "--json", "ingest", "--atlas", "a", "--out", os.path.join(d, "c"), h5ad],
                       check=True, capture_output=True)
        return time.perf_counter() - t0


ds_load0 = time.perf_counter()
ds = Cells()
ds_load = time.perf_counter() - ds_load0
rows = {k: [] for k in ("corrflow_1", "corrflow_2", "dataloader_0", "dataloader_2", "tokenize", "ingest_cli")}
for r in range(rounds):
    for threads in (1, 2):
        n, s = timed(corrflow_epoch, threads)
        rows[f"corrflow_{threads}"].append(n / s)
    for workers in (0, 2):
        n, s = timed(dataloader_epoch, ds, workers)
        rows[f"dataloader_{workers}"].append(n / s)
    cells, s = tokenize_in_memory()
    rows["tokenize"].append(cells / s)
    rows["ingest_cli"].append(cells / cli_ingest())
    print(json.dumps({k: round(v[-1]) for k, v in rows.items()}), file=sys.stderr)

med = {k: float(np.median(v)) for k, v in rows.items()}
print(json.dumps({"rounds": rounds, "median_per_s": {k: round(v) for k, v in med.items()},
                  "dataset_load_s": round(ds_load, 2),
                  "masked_batches_vs_best_dataloader": round(max(med["corrflow_1"], med["corrflow_2"]) /
                                                             max(med["dataloader_0"], med["dataloader_2"]), 2),
                  "tokenize_vs_cli_ingest": round(med["tokenize"] / med["ingest_cli"], 2)}, indent=1))
