"""How many ρ_local rounds an all-cells graph build takes (`graph build --incremental`).

Replays `posting_chunks` of crates/graph/src/stream.rs on a build's kept state: its candidate
pairs (`state/candidates.bin`), each graph gene's presence (`state/presence.bin`) and the
postings budget (`graph.stream_memory_mb`, by default an eighth of the available memory, over
12 bytes a posting). Each round streams every shard again, so the rounds say how far the build is
from linear. `--scale F` multiplies the presence, to predict an atlas F times larger that
resamples the same cells.

usage: python benches/graph_rounds.py GRAPH_DIR [--scale 1,4] [--memory-mb N]
"""
import argparse
import json
import os

import numpy as np


def available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable"):
                return int(line.split()[1]) * 1024
    return 8 << 30


def budget(memory_mb):
    b = memory_mb << 20 if memory_mb else min(max(available_bytes() // 8, 64 << 20), 4 << 30)
    return b // 12


def rounds(pairs, per_gene, postings_budget):
    """(rounds, postings gathered): pairs cut in order, as `posting_chunks` cuts them."""
    n, total, size, start, needed = 0, 0, 0, 0, set()
    for k, (u, v) in enumerate(pairs):
        extra = sum(per_gene[x] for x in {u, v} if x not in needed)
        if k > start and size + extra > postings_budget:
            n, total, size, start, needed = n + 1, total + size, 0, k, set()
        for x in (u, v):
            if x not in needed:
                needed.add(x)
                size += per_gene[x]
    return n + 1, total + size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("graph")
    ap.add_argument("--scale", default="1")
    ap.add_argument("--memory-mb", type=int, default=0)
    a = ap.parse_args()
    state = os.path.join(a.graph, "state")
    genes = json.load(open(os.path.join(state, "state.json")))["genes"]
    index = {t: i for i, t in enumerate(genes)}
    presence = np.fromfile(os.path.join(state, "presence.bin"), dtype="<i8")
    raw = np.fromfile(os.path.join(state, "candidates.bin"), dtype=np.uint8).reshape(-1, 24)
    us = raw[:, 0:4].copy().view("<u4").ravel()
    vs = raw[:, 12:16].copy().view("<u4").ravel()
    pairs = sorted({tuple(sorted((index[int(u)], index[int(v)]))) for u, v in zip(us, vs)})
    per_gene = np.array([max(int(presence[t]), 0) for t in genes], dtype=np.int64)
    b = budget(a.memory_mb)
    print(f"{len(pairs)} candidate pairs, {len(genes)} graph genes, budget {b:,} postings")
    for f in [float(x) for x in a.scale.split(",")]:
        n, total = rounds(pairs, (per_gene * f).astype(np.int64), b)
        print(f"scale {f:g}: {n} rounds, {total:,} postings gathered "
              f"(every graph gene's postings: {int(per_gene.sum() * f):,})")


if __name__ == "__main__":
    main()
