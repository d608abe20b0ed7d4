#!/usr/bin/env python3
"""Ingest of the same cells from each format corrflow reads (issue 44): Kang ctrl as h5ad, AnnData
zarr v3 (sharded where this anndata can shard), loom and a TileDB-SOMA experiment, by
`corrflow ingest` (wall time and peak RSS, `/usr/bin/time`; SOMA: `corrflow.ingest` in Python,
the only way corrflow reads it), against what a user would otherwise run: the format's own
reader into an AnnData in memory (`anndata.read_h5ad` / `read_zarr` / `read_loom`,
`tiledbsoma.io.to_anndata`) then `corrflow.tokenize` (the tokens are the same; the reading is
the difference). Rounds interleave every format and both ways, each in a fresh process.

Usage: benches/formats_ingest.py CORRFLOW_BIN KANG_H5AD WORKDIR [ROUNDS] [--json OUT]
Run it with a Python that has corrflow, anndata, loompy and tiledbsoma (the test venv). The conversions are
written once into WORKDIR (by anndata and loompy) and reused.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PY_READ = r"""
import json, resource, sys, time
import anndata as ad, corrflow
fmt, path = sys.argv[1:3]
t = time.perf_counter()
if fmt == "soma":
    import tiledbsoma, tiledbsoma.io
    with tiledbsoma.Experiment.open(path) as exp:
        a = tiledbsoma.io.to_anndata(exp, measurement_name="RNA", X_layer_name="data")
elif fmt == "loom":
    # Geneformer's attributes: genes by ensembl_id, counts genes x cells in /matrix.
    a = ad.read_loom(path, sparse=True, var_names="ensembl_id", obs_names="CellID")
else:
    a = ad.read_h5ad(path) if fmt == "h5ad" else ad.read_zarr(path)
read = time.perf_counter() - t
tokens = corrflow.tokenize(a)
total = time.perf_counter() - t
print(json.dumps({"cells": a.n_obs, "kept": len(tokens) - tokens.null_count, "read_s": read, "seconds": total,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def convert(h5ad, work):
    """Kang as zarr v3 (sharded when anndata can) and loom, with Geneformer's loom attributes."""
    files = {"h5ad": h5ad, "zarr": os.path.join(work, "kang.zarr"), "loom": os.path.join(work, "kang.loom"),
             "soma": os.path.join(work, "kang.soma")}
    if not all(os.path.exists(f) for f in files.values()):
        script = r"""
import sys, anndata as ad, loompy, numpy as np, scipy.sparse as sp
h5ad, zarr_path, loom_path = sys.argv[1:4]
a = ad.read_h5ad(h5ad)
a.X = sp.csr_matrix(a.X)
ad.settings.zarr_write_format = 3
sharded = hasattr(ad.settings, "auto_shard_zarr_v3")
if sharded:
    ad.settings.auto_shard_zarr_v3 = True
a.write_zarr(zarr_path)
loompy.create(loom_path, a.X.T.tocsr().astype(np.float32),
              {"ensembl_id": np.asarray(a.var_names, dtype=str)}, {"CellID": np.asarray(a.obs_names, dtype=str)})
import tiledbsoma.io
tiledbsoma.io.from_h5ad(sys.argv[4], h5ad, measurement_name="RNA")
print("sharded" if sharded else "unsharded")
"""
        out = subprocess.run([sys.executable, "-c", script, h5ad, files["zarr"], files["loom"], files["soma"]],
                             capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(out.stderr)
    return files


SOMA_INGEST = r"""
import json, resource, sys, time
import corrflow, tiledbsoma  # imported before the clock starts, as the baseline's readers are
path, corpus = sys.argv[1:3]
t = time.perf_counter()
s = corrflow.ingest([path], corpus, "a")
print(json.dumps({"cells": s["cells_read"], "kept": s["cells_kept"], "seconds": time.perf_counter() - t,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def corrflow_ingest(bin_, fmt, path):
    if fmt == "soma":
        with tempfile.TemporaryDirectory() as d:
            out = subprocess.run([sys.executable, "-c", SOMA_INGEST, path, os.path.join(d, "c")], capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{fmt}: {out.stderr}")
            return json.loads(out.stdout)
    with tempfile.TemporaryDirectory() as d:
        cmd = ["/usr/bin/time", "-f", "%e %M", bin_, "ingest", "--json", "--atlas", "a", "--out", os.path.join(d, "c"), path]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{fmt}: {out.stderr}")
        wall, rss_kb = out.stderr.strip().splitlines()[-1].split()
        s = json.loads(out.stdout.strip().splitlines()[-1])
        return {"cells": s["cells_read"], "kept": s["cells_kept"], "seconds": float(wall), "peak_mb": int(rss_kb) / 1024}


def python_read(fmt, path):
    out = subprocess.run([sys.executable, "-c", PY_READ, fmt, path], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{fmt}: {out.stderr}")
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("h5ad")
    ap.add_argument("work")
    ap.add_argument("rounds", nargs="?", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    files = convert(a.h5ad, a.work)
    runs = []
    for r in range(a.rounds):
        for fmt, path in files.items():
            for way, f in (("corrflow ingest", lambda: corrflow_ingest(a.bin, fmt, path)),
                           ("anndata + tokenize", lambda: python_read(fmt, path))):
                res = {"round": r, "format": fmt, "way": way, **f()}
                runs.append(res)
                print(json.dumps(res), flush=True)
    table = []
    for fmt in files:
        row = {"format": fmt}
        for way in ("corrflow ingest", "anndata + tokenize"):
            rs = [x for x in runs if x["format"] == fmt and x["way"] == way]
            sec = statistics.median(x["seconds"] for x in rs)
            row[way] = {"median_s": sec, "cells_per_s": rs[0]["cells"] / sec,
                        "peak_mb": max(x["peak_mb"] for x in rs), "kept": rs[0]["kept"]}
        row["speedup"] = row["anndata + tokenize"]["median_s"] / row["corrflow ingest"]["median_s"]
        table.append(row)
        print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": runs, "table": table, "when": time.strftime("%Y-%m-%d %H:%M")}, f, indent=1)


if __name__ == "__main__":
    main()
