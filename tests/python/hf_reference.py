#!/usr/bin/env python3
"""Reference outputs of transformers' BertForMaskedLM for `tests/import_hf.rs`.

    CORRFLOW_HF_FIXTURE_DIR=/tmp/hf cargo test --release --test integration import_hf:: -- --ignored
    ~/.cache/corrflow/torch-venv/bin/python tests/python/hf_reference.py /tmp/hf tests/fixtures/hf

For each model directory the test wrote (v1: Geneformer V1-10M's shape; v2: a V2-like one),
four real cells (the bundled PBMCs, tokenized by corrflow, cut to different lengths so that the
batch is padded) are run through `BertForMaskedLM.from_pretrained(dir).bert` in fp32, and the
first 8 positions' final hidden states and the mean over gene positions (the cell embedding,
Geneformer's `cell` mode) are written to `{v1,v2}-expected.json`. Needs torch, transformers,
anndata and the corrflow package.
"""

import json
import sys
from pathlib import Path

import anndata
import torch
from transformers import BertForMaskedLM

import corrflow

ROOT = Path(__file__).resolve().parents[2]
models, out = Path(sys.argv[1]), Path(sys.argv[2])
adata = anndata.read_h5ad(ROOT / "datasets" / "default" / "pbmc1k.h5ad")[:20].copy()
FIRST = 8

for name, version, lengths in (("v1", "v1", [300, 173, 256, 64]), ("v2", "v2", [500, 120, 333, 50])):
    tokens = [t for t in corrflow.tokenize(adata, gene_column="gene_ids", version=version, as_lists=True) if t]
    cells = []
    for t, n in zip(tokens, lengths):
        if version == "v2":  # <cls> genes <eos>, cut inside
            cells.append(t[: n - 1] + [t[-1]] if len(t) > n else t)
        else:
            cells.append(t[:n])
    model = BertForMaskedLM.from_pretrained(models / name).eval()
    pad = model.config.pad_token_id or 0
    L = max(map(len, cells))
    ids = torch.full((len(cells), L), pad, dtype=torch.long)
    att = torch.zeros((len(cells), L), dtype=torch.long)
    for r, c in enumerate(cells):
        ids[r, : len(c)] = torch.tensor(c)
        att[r, : len(c)] = 1
    with torch.no_grad():
        states = model.bert(input_ids=ids, attention_mask=att).last_hidden_state
    specials = {pad, 1} | ({ids[0, 0].item(), cells[0][-1]} if version == "v2" else set())
    gene = att.bool() & ~torch.isin(ids, torch.tensor(sorted(specials)))
    w = gene.float().unsqueeze(-1)
    pooled = (states * w).sum(1) / w.sum(1).clamp_min(1.0)
    result = {
        "model": f"{name}: random BertForMaskedLM written by tests/import_hf.rs (seed 7)",
        "transformers": __import__("transformers").__version__,
        "torch": torch.__version__,
        "input_ids": cells,
        "first_positions": FIRST,
        "hidden_first": [[[round(x, 7) for x in states[r, i].tolist()] for i in range(FIRST)] for r in range(len(cells))],
        "cell_embedding": [[round(x, 7) for x in pooled[r].tolist()] for r in range(len(cells))],
    }
    (out / f"{name}-expected.json").write_text(json.dumps(result))
    print(name, [len(c) for c in cells], file=sys.stderr)
