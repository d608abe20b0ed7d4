"""CorrMask Algorithm 2 and the masking audit, written the way a user would in plain Python
(a dict of neighbour sets, random.shuffle / random.sample), as the baseline of
`corrflow mask audit` and as an independent check of its numbers.

mask_reference.py bench CORPUS GRAPH [--lam 0.5 --p 0.15 --k-max 5 --length 0 --cells 2000]
    Masks cells with Algorithm 2 and prints {"sequences_per_s": ..., "hit_rate": ...}.
    --length L masks synthetic sequences of L genes drawn from the corpus' genes instead.
mask_reference.py audit CORPUS GRAPH DUMP
    Recomputes mean span, conditional hit rate, masked and structural fractions from a
    `mask audit --dump` file (positions index the cell's input_ids) and prints them as JSON.
"""
import argparse
import json
import math
import random
import time
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq


def load_cells(corpus):
    """(cell_id, gene tokens, offset of the genes in input_ids) in corpus key order."""
    corpus = Path(corpus)
    layout = json.loads((corpus / "corpus.json").read_text())["layout"]
    cls, eos = layout["cls"], layout["eos"]
    cells = []
    for atlas in sorted(p for p in (corpus / "atlases").iterdir() if (p / "manifest.json").exists() and not p.name.startswith(".")):
        manifest = json.loads((atlas / "manifest.json").read_text())
        for s in manifest["shards"]:
            t = pq.read_table(atlas / s["file"], columns=["cell_id", "input_ids"])
            for cid, ids in zip(t["cell_id"].to_pylist(), t["input_ids"].to_pylist()):
                start = 1 if cls is not None and ids and ids[0] == cls else 0
                end = len(ids) - 1 if eos is not None and len(ids) > start and ids[-1] == eos else len(ids)
                cells.append((cid, ids[start:end], start))
    return cells


def load_graph(graph):
    nbrs = defaultdict(set)
    t = pq.read_table(Path(graph) / "edges.parquet", columns=["u", "v"])
    for u, v in zip(t["u"].to_pylist(), t["v"].to_pylist()):
        nbrs[u].add(v)
        nbrs[v].add(u)
    return nbrs


def corrmask(x, nbrs, p, lam, k_max, rng):
    """Algorithm 2 (positions only; the 80/10/10 replacement is a fixed cost on top)."""
    n = len(x)
    budget = math.floor(n * p)
    quota = math.floor(budget * lam)
    pos = {g: i for i, g in enumerate(x)}
    masked = set()
    seeds = [g for g in x if nbrs.get(g)]
    rng.shuffle(seeds)
    for s in seeds:
        if len(masked) >= quota:
            break
        masked.add(pos[s])
        present = [v for v in nbrs[s] if v in pos]
        for g in rng.sample(present, min(k_max, len(present))):
            if len(masked) >= quota:
                break
            masked.add(pos[g])
    if len(masked) < budget:
        free = [i for i in range(n) if i not in masked]
        masked.update(rng.sample(free, budget - len(masked)))
    return sorted(masked)


def bench(args):
    cells = [c[1] for c in load_cells(args.corpus)]
    nbrs = load_graph(args.graph)
    rng = random.Random(0)
    if args.length:
        genes = sorted({g for c in cells for g in c})
        cells = [rng.sample(genes, min(args.length, len(genes))) for _ in range(args.cells)]
    cells = cells[: args.cells]
    start = time.perf_counter()
    masks = [corrmask(x, nbrs, args.p, args.lam, args.k_max, rng) for x in cells]
    secs = time.perf_counter() - start
    hits = pairs = 0
    for x, m in zip(cells, masks):
        ms = {x[i] for i in m}
        for g in ms:
            pairs += len(nbrs.get(g, ()))
            hits += sum(1 for v in nbrs.get(g, ()) if v in ms)
    print(json.dumps({"cells": len(cells), "seconds": secs, "sequences_per_s": len(cells) / secs,
                      "mean_length": sum(map(len, cells)) / len(cells), "hit_rate": hits / max(pairs, 1)}))


def audit(args):
    cells = load_cells(args.corpus)
    nbrs = load_graph(args.graph)
    dump = pq.read_table(args.dump).to_pydict()
    assert dump["cell_id"] == [c[0] for c in cells], "dump cells are not the corpus cells in order"
    genes = masked = structural = runs = pairs = hits = 0
    budget_ok = True
    for (cid, x, off), positions, s in zip(cells, dump["positions"], dump["structural"]):
        genes += len(x)
        masked += len(positions)
        structural += s
        budget_ok &= len(positions) == math.floor(len(x) * args.p)
        runs += sum(1 for i, q in enumerate(positions) if i == 0 or positions[i - 1] + 1 != q)
        ms = {x[q - off] for q in positions}
        for g in ms:
            pairs += len(nbrs.get(g, ()))
            hits += sum(1 for v in nbrs.get(g, ()) if v in ms)
    print(json.dumps({"cells": len(cells), "mean_span": masked / runs, "hit_rate": hits / pairs,
                      "masked_fraction": masked / genes, "structural_fraction": structural / masked,
                      "budget_exact": budget_ok}))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench")
    b.add_argument("corpus")
    b.add_argument("graph")
    b.add_argument("--lam", type=float, default=0.5)
    b.add_argument("--p", type=float, default=0.15)
    b.add_argument("--k-max", type=int, default=5)
    b.add_argument("--length", type=int, default=0)
    b.add_argument("--cells", type=int, default=2000)
    a = sub.add_parser("audit")
    a.add_argument("corpus")
    a.add_argument("graph")
    a.add_argument("dump")
    a.add_argument("--p", type=float, default=0.15)
    args = ap.parse_args()
    bench(args) if args.cmd == "bench" else audit(args)


if __name__ == "__main__":
    main()
