"""A realistic synthetic atlas for the scale benchmark (benches/atlas_scale.sh), written block by
block: the matrix is never whole in memory (only the obs table, ids and one label, is built whole,
~70 bytes a cell).

Three atlases, each resampled from the real cells of one dataset shipped by datasets/fetch.sh:
Kang PBMC (ctrl and stim, label `condition`), CBMC CITE-seq (`cell_type`) and pbmc3k (no label:
`unknown`), in shares of 60 / 30 / 10% of the cells (pbmc3k is the atlas of 10% that
`graph update --add` adds). A synthetic cell is a source cell drawn with
replacement whose counts are scaled by a depth factor exp(N(0, 0.3^2)) and drawn again from a
Poisson of that mean (zeros dropped), so no two cells are copies and depth varies as in a real
atlas.

usage: atlas_synth.py DATA_DIR OUT_DIR --cells N [--seed 0] [--formats h5ad,zarr] [--block 8192]
       [--compression gzip|none]
Writes OUT_DIR/<atlas>.h5ad and/or OUT_DIR/<atlas>.zarr, and prints one JSON line (cells and bytes
per atlas and format).
"""
import argparse
import json
import os
import shutil
import warnings

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import scipy.sparse as sp
import zarr

warnings.filterwarnings("ignore", category=FutureWarning)

SOURCES = [
    ("kang", ["kang_ctrl.h5ad", "kang_stim.h5ad"], 0.60),
    ("cbmc", ["cbmc_citeseq.h5ad"], 0.30),
    ("pbmc3k", ["pbmc3k.h5ad"], 0.10),
]


def source(data, files):
    """The source's cells (CSR, counts), gene ids and per-cell labels."""
    xs, labels, var = [], [], None
    for f in files:
        a = ad.read_h5ad(os.path.join(data, f))
        x = a.raw.X if a.raw is not None and a.raw.shape == a.shape else a.X
        xs.append(sp.csr_matrix(x, dtype=np.float32))
        if "cell_type" in a.obs:
            labels.append(a.obs["cell_type"].astype(str).to_numpy())
        elif f.startswith("kang_"):
            labels.append(np.full(a.n_obs, f[len("kang_"):-len(".h5ad")]))
        else:
            labels.append(np.full(a.n_obs, "unknown"))
        var = a.var_names if var is None else var
    return sp.vstack(xs).tocsr(), np.concatenate(labels), pd.Index(var)


def block(rng, x, rows):
    """Resampled cells `rows` of `x` with depth and Poisson noise."""
    b = x[rows]
    depth = np.exp(rng.normal(0.0, 0.3, size=len(rows))).astype(np.float32)
    b = sp.csr_matrix(b.multiply(depth[:, None]))
    b.data = rng.poisson(b.data).astype(np.float32)
    b.eliminate_zeros()
    b.sort_indices()
    return b


def open_store(path, fmt):
    # anndata consolidates a zarr store's metadata when it writes it: edits go to the store
    # itself, and the metadata is consolidated again at the end.
    return h5py.File(path, "r+") if fmt == "h5ad" else zarr.open_group(path, mode="r+", use_consolidated=False)


def write_atlas(out, name, x, labels, var, n, seed, formats, block_cells, compression):
    rng = np.random.default_rng([seed, [s[0] for s in SOURCES].index(name)])
    paths = {fmt: os.path.join(out, f"{name}.{fmt}") for fmt in formats}
    for p in paths.values():
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)
    all_rows = []
    done = 0
    # An atlas whose entries may pass 2^31 needs a 64-bit indptr from its first block: anndata
    # appends keep the dtype the array was written with (half the limit leaves room for the noise).
    wide = n * x.nnz / x.shape[0] > 2**30
    while done < n:
        k = min(block_cells, n - done)
        rows = rng.integers(0, x.shape[0], size=k)
        all_rows.append(rows)
        b = block(rng, x, rows)
        if wide and done == 0:
            b.indptr = b.indptr.astype(np.int64)
        for fmt, p in paths.items():
            if done == 0:
                first = ad.AnnData(X=b, obs=pd.DataFrame(index=[f"{name}-{i}" for i in range(k)]),
                                   var=pd.DataFrame(index=var))
                if fmt == "h5ad":
                    first.write_h5ad(p, compression=None if compression == "none" else compression)
                else:
                    first.write_zarr(p)
            else:
                with_store(p, fmt, lambda g: ad.io.sparse_dataset(g["X"]).append(b))
        done += k
    rows = np.concatenate(all_rows)
    obs = pd.DataFrame({"cell_type": pd.Categorical(labels[rows])},
                       index=pd.Index([f"{name}-{i}" for i in range(n)], dtype=str))
    for fmt, p in paths.items():
        with_store(p, fmt, lambda g: ad.io.write_elem(g, "obs", obs))
        if fmt == "zarr":
            zarr.consolidate_metadata(p)
    return {fmt: size_of(p) for fmt, p in paths.items()}


def with_store(path, fmt, f):
    g = open_store(path, fmt)
    try:
        f(g)
    finally:
        if fmt == "h5ad":
            g.close()


def size_of(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    return os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--cells", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--formats", default="h5ad,zarr")
    ap.add_argument("--block", type=int, default=8192)
    ap.add_argument("--compression", default="gzip", choices=["gzip", "none"])
    a = ap.parse_args()
    formats = [f for f in a.formats.split(",") if f]
    if not formats or set(formats) - {"h5ad", "zarr"}:
        raise SystemExit(f"--formats: h5ad and/or zarr, got {a.formats}")
    os.makedirs(a.out, exist_ok=True)
    report = {"cells": a.cells, "atlases": {}}
    left = a.cells
    for i, (name, files, share) in enumerate(SOURCES):
        n = left if i == len(SOURCES) - 1 else int(round(a.cells * share))
        left -= n
        x, labels, var = source(a.data, files)
        sizes = write_atlas(a.out, name, x, labels, var, n, a.seed, formats, a.block, a.compression)
        report["atlases"][name] = {"cells": n, "bytes": sizes}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
