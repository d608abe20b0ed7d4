"""Independent reference of CorrMask Algorithm 1, written the way a user would with numpy/scipy
(rankdata per column, z-score, Z.T @ Z, per-gene selection loop, spearmanr on the overlap).
It is both the correctness reference of `corrflow graph build` (tests/graph_exact.rs) and the
baseline of its benchmark.

graph_reference.py CORPUS OUT.json [--l-max 2048 --min-presence 50 --max-genes 2000
    --rho-min 0.2 --m-min 200 --n-neigh 50]   (all cells of all atlases, no sampling)
Writes {"genes": [...], "edges": [[u, v, rho_local, rho_global, co_count], ...], "seconds": {...}}.
"""
import argparse
import json
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from scipy.stats import rankdata, spearmanr


def load_cells(corpus):
    corpus = Path(corpus)
    info = json.loads((corpus / "corpus.json").read_text())
    specials = set()
    with open(corpus / "vocab" / "token_dictionary.tsv") as f:
        next(f)
        for line in f:
            tok, i = line.rstrip("\n").split("\t")
            if tok.startswith("<"):
                specials.add(int(i))
    specials |= {t for t in (info["layout"]["cls"], info["layout"]["eos"]) if t is not None}
    cells = []
    for atlas in sorted(p for p in (corpus / "atlases").iterdir() if (p / "manifest.json").exists() and not p.name.startswith(".")):
        manifest = json.loads((atlas / "manifest.json").read_text())
        for s in manifest["shards"]:
            for ids in pq.read_table(atlas / s["file"], columns=["input_ids"])["input_ids"].to_pylist():
                cells.append([t for t in ids if t not in specials])
    return cells


def main():
    p = argparse.ArgumentParser()
    p.add_argument("corpus")
    p.add_argument("out")
    p.add_argument("--l-max", type=int, default=2048)
    p.add_argument("--min-presence", type=int, default=50)
    p.add_argument("--max-genes", type=int, default=2000)
    p.add_argument("--rho-min", type=float, default=0.2)
    p.add_argument("--m-min", type=int, default=200)
    p.add_argument("--n-neigh", type=int, default=50)
    a = p.parse_args()
    t0 = time.time()
    cells = load_cells(a.corpus)
    t_load = time.time() - t0

    t1 = time.time()
    L = a.l_max
    presence = {}
    for c in cells:
        for t in c[:L]:
            presence[t] = presence.get(t, 0) + 1
    eligible = sorted(((n, t) for t, n in presence.items() if n >= max(a.min_presence, 1)), key=lambda x: (-x[0], x[1]))
    genes = sorted(t for _, t in eligible[: a.max_genes])
    idx = {t: i for i, t in enumerate(genes)}
    N, G = len(cells), len(genes)
    X = np.zeros((N, G))
    P = np.zeros((N, G), dtype=bool)
    for i, c in enumerate(cells):
        for pos, t in enumerate(c[:L], start=1):
            j = idx.get(t)
            if j is not None:
                X[i, j] = L - pos
                P[i, j] = True
    R = rankdata(X, axis=0)  # average ranks per column
    Z = (R - R.mean(axis=0)) / R.std(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        C = Z.T @ Z / N
    Pf = P.astype(np.float64)
    co = Pf.T @ Pf
    t_stats = time.time() - t1

    t2 = time.time()
    tokens = np.array(genes)
    pairs = set()
    for u in range(G):
        r = np.abs(C[u])
        ok = np.array([v != u and not np.isnan(r[v]) for v in range(G)])
        cand = np.where(ok)[0]
        order = cand[np.lexsort((tokens[cand], -r[cand]))][: a.n_neigh]
        for v in order:
            if r[v] >= a.rho_min and co[u, v] >= a.m_min:
                pairs.add((min(u, v), max(u, v)))
    edges = []
    for u, v in sorted(pairs):
        m = P[:, u] & P[:, v]
        rho = spearmanr(X[m, u], X[m, v]).statistic
        if not np.isnan(rho):
            edges.append([int(genes[u]), int(genes[v]), float(rho), float(C[u, v]), int(co[u, v])])
    t_local = time.time() - t2
    Path(a.out).write_text(json.dumps({
        "cells": N, "genes": genes, "edges": edges,
        "seconds": {"load": t_load, "statistics": t_stats, "selection_and_local": t_local, "total": time.time() - t0},
    }))
    print(f"{N} cells, {G} genes, {len(edges)} edges; statistics {t_stats:.2f}s, selection+local {t_local:.2f}s")


if __name__ == "__main__":
    main()
