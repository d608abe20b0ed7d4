#!/usr/bin/env python3
"""Peak RSS of corrflow's data loaders as the corpus grows (issue 43 item 6): one epoch of
`corrflow.MaskedBatches` (CorrMask, batch 64) and of `corrflow.torch.MaskedDataset` over Kang
ctrl ingested 1, 8 and 64 times (6,548 → 419,072 cells), each in a fresh process, seeds
interleaved. A loader's memory must not grow with the corpus beyond its index (a few bytes per
cell): the target is the 64× peak within 1.2× of the 1× peak.

Usage: benches/loader_memory.py CORRFLOW_BIN KANG_H5AD WORKDIR [--scales 1,8,64] [--seeds 0,1]
       [--loaders batches,dataset] [--shuffle-buffer 10000] [--json OUT]
Run it with a Python that has corrflow (scripts/python-package.sh) and torch. The corpora and the
graph (built once, on the 1× corpus) are kept in WORKDIR and reused.
"""
import argparse
import json
import os
import subprocess
import sys
import time

# One epoch in a fresh interpreter; prints the peak RSS (ru_maxrss) after and before iterating.
CHILD = r"""
import json, resource, sys, time
import numpy as np
loader, corpus, graph, seed, threads, buffer = sys.argv[1:7]
import corrflow
if loader == "dataset":
    import torch
    from corrflow.torch import MaskedDataset
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
opts = dict(strategy="corrmask", batch_size=64, seed=int(seed), num_threads=int(threads), shuffle_buffer=int(buffer))
t = time.perf_counter()
rows = 0
if loader == "batches":
    for b in corrflow.MaskedBatches(corpus, graph, **opts):
        rows += b["input_ids"].shape[0]
else:
    for b in torch.utils.data.DataLoader(MaskedDataset(corpus, graph, **opts), batch_size=None):
        rows += b["input_ids"].shape[0]
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"rows": rows, "seconds": time.perf_counter() - t, "before_mb": before, "peak_mb": peak}))
"""


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed:\n{r.stderr}")
    return r.stdout


def corpus_of(bin_, h5ad, work, scale):
    """Kang ingested `scale` times as atlases k0..k{scale-1}."""
    path = os.path.join(work, f"kang-{scale}x")
    if os.path.exists(os.path.join(path, "corpus.json")) and len(os.listdir(os.path.join(path, "atlases"))) == scale:
        return path
    for k in range(scale):
        if not os.path.isdir(os.path.join(path, "atlases", f"k{k}")):
            run([bin_, "ingest", "--atlas", f"k{k}", "--out", path, "--restart", h5ad])
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("h5ad")
    ap.add_argument("work")
    ap.add_argument("--scales", default="1,8,64")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--loaders", default="batches,dataset")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shuffle-buffer", type=int, default=10_000, help="cells (the loader's default: 10,000)")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    scales = [int(s) for s in a.scales.split(",")]
    corpora = {s: corpus_of(a.bin, a.h5ad, a.work, s) for s in scales}
    graph = os.path.join(a.work, "graph")
    if not os.path.exists(os.path.join(graph, "graph.json")):
        run([a.bin, "graph", "build", "--corpus", corpora[min(scales)], "--out", graph])
    results = []
    for seed in [int(s) for s in a.seeds.split(",")]:
        for loader in a.loaders.split(","):
            for scale in scales:  # interleaved: every scale within the same minutes
                out = run([sys.executable, "-c", CHILD, loader, corpora[scale], graph, str(seed), str(a.threads), str(a.shuffle_buffer)])
                r = {"loader": loader, "scale": scale, "seed": seed, **json.loads(out)}
                results.append(r)
                print(json.dumps(r), flush=True)
    summary = {}
    for loader in a.loaders.split(","):
        peak = {s: max(r["peak_mb"] for r in results if r["loader"] == loader and r["scale"] == s) for s in scales}
        summary[loader] = {"shuffle_buffer": a.shuffle_buffer, "peak_mb": peak, "ratio_largest_to_smallest": peak[max(scales)] / peak[min(scales)]}
    print(json.dumps({"summary": summary}))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": results, "summary": summary, "when": time.strftime("%Y-%m-%d %H:%M")}, f, indent=1)


if __name__ == "__main__":
    main()
