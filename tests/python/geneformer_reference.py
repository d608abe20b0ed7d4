"""Independent reference of Geneformer V1's TranscriptomeTokenizer, and a checker that compares
corrflow's token shards (read with pyarrow) and Hugging Face export (read with
datasets.load_from_disk) against it.

The reference follows geneformer/tokenizer.py (tokenize_anndata + rank_genes, model_version V1):
n_counts = total counts over all genes; keep genes in the median dictionary;
X / n_counts * 10000 / median (numpy, float64); per cell, nonzero genes sorted by
value descending; truncate to 2048. Geneformer's argsort leaves the order of exactly tied values
unspecified, so lists are compared as sequences of tie groups (same value), order within a group
free; corrflow must additionally order each group by ascending token id.

Usage: geneformer_reference.py --h5ad F [--gene-column C] [--counts X|raw] --atlas-dir D [--hf H]
Prints a JSON report; exits 1 on any mismatch.
"""
import argparse
import csv
import json
import sys
from pathlib import Path

import anndata as ad
import numpy as np
import scipy.sparse as sp

VOCAB = Path(__file__).resolve().parents[2] / "vocab" / "geneformer-v1"


def load_tsv(name):
    with open(VOCAB / name) as f:
        r = csv.reader(f, delimiter="\t")
        next(r)
        return [row for row in r]


def reference_tokens(h5ad, gene_column, counts, max_len=2048):
    token = {g: int(i) for g, i in load_tsv("token_dictionary.tsv")}
    median = {g: float(m) for g, m in load_tsv("gene_median_dictionary.tsv")}
    symbol = {}
    for s, g in load_tsv("gene_name_id.tsv"):
        if s:
            symbol.setdefault(s, g)
    a = ad.read_h5ad(h5ad)
    if counts == "raw":
        X, var = a.raw.X, a.raw.var
    else:
        X, var = a.X, a.var
    X = sp.csr_matrix(X, dtype=np.float64)
    ids = list(var.index if gene_column is None else var[gene_column].astype(str))

    def ensembl(g):
        if g in median:
            return g
        base = g.split(".")[0]
        if g.startswith("ENS") and base in median:
            return base
        e = symbol.get(g)
        return e if e in median else None

    mapped = [ensembl(g) for g in ids]
    # Duplicate ids are summed (Geneformer's collapse of duplicate Ensembl ids).
    genes = sorted({g for g in mapped if g is not None}, key=lambda g: token[g])
    col_of = {g: j for j, g in enumerate(genes)}
    rows, cols = [], []
    for i, g in enumerate(mapped):
        if g is not None:
            rows.append(i)
            cols.append(col_of[g])
    collapse = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(ids), len(genes)))
    n_counts = np.asarray(X.sum(axis=1)).ravel()[:, None]
    Xv = (X @ collapse).tocsr()
    norm = np.array([median[g] for g in genes])
    tokens = np.array([token[g] for g in genes])
    X_norm = sp.csr_matrix(Xv.toarray() / n_counts * 10_000 / norm) if Xv.shape[0] * Xv.shape[1] < 5e8 else None
    out, values = {}, {}
    for i, cell in enumerate(a.obs_names):
        row = X_norm[i] if X_norm is not None else sp.csr_matrix(Xv[i].toarray() / n_counts[i] * 10_000 / norm)
        v, t = row.data, tokens[row.indices]
        keep = v > 0
        v, t = v[keep], t[keep]
        if len(v) == 0:
            continue
        order = np.argsort(-v)  # Geneformer's rank_genes
        out[cell] = t[order][:max_len]
        values[cell] = dict(zip(t.tolist(), v.tolist()))
    return out, values


def compare(name, got, ref, values):
    """Counts cells whose tokens differ beyond tie order, and cells where corrflow's tie order
    is not ascending token id."""
    missing = [c for c in ref if c not in got]
    extra = [c for c in got if c not in ref]
    mismatched, bad_ties, reordered = [], [], 0
    for cell, r in ref.items():
        g = got.get(cell)
        if g is None:
            continue
        g = list(g)
        r = r.tolist()
        if g == r:
            continue
        vals = values[cell]
        # Same tie groups (value sequence) and the same set of tokens within each full group.
        if len(g) != len(r) or [vals.get(t) for t in g] != [vals[t] for t in r]:
            mismatched.append(cell)
            continue
        reordered += 1
    for cell, g in got.items():
        vals = values.get(cell, {})
        for a_, b_ in zip(g, g[1:]):
            if vals.get(a_) == vals.get(b_) and a_ > b_:
                bad_ties.append(cell)
                break
    ok = not (missing or extra or mismatched or bad_ties)
    return ok, {
        "source": name,
        "cells": len(got),
        "reference_cells": len(ref),
        "identical": len(ref) - len(missing) - len(mismatched) - reordered,
        "tie_order_only": reordered,
        "mismatched": len(mismatched),
        "missing": len(missing),
        "extra": len(extra),
        "ties_not_by_token_id": len(bad_ties),
        "examples": (mismatched + missing + extra + bad_ties)[:5],
    }


def read_parquet(atlas_dir):
    import pyarrow.parquet as pq

    manifest = json.loads((Path(atlas_dir) / "manifest.json").read_text())
    got = {}
    for s in manifest["shards"]:
        t = pq.read_table(Path(atlas_dir) / s["file"], columns=["cell_id", "input_ids", "length"])
        for cell, ids, n in zip(t["cell_id"].to_pylist(), t["input_ids"].to_pylist(), t["length"].to_pylist()):
            assert n == len(ids), f"length column {n} != {len(ids)} for {cell}"
            got[cell] = ids
    return got


def read_hf(hf_dir):
    from datasets import load_from_disk

    ds = load_from_disk(hf_dir)
    assert {"input_ids", "length", "cell_id"} <= set(ds.column_names), ds.column_names
    return {c: ids for c, ids in zip(ds["cell_id"], ds["input_ids"])}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--h5ad", required=True)
    p.add_argument("--gene-column")
    p.add_argument("--counts", default="X")
    p.add_argument("--atlas-dir", required=True)
    p.add_argument("--hf")
    args = p.parse_args()
    ref, values = reference_tokens(args.h5ad, args.gene_column, args.counts)
    results, ok_all = [], True
    sources = [("parquet", read_parquet(args.atlas_dir))]
    if args.hf:
        sources.append(("hf", read_hf(args.hf)))
    for name, got in sources:
        ok, report = compare(name, got, ref, values)
        ok_all &= ok
        results.append(report)
    print(json.dumps({"ok": ok_all, "results": results}))
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
