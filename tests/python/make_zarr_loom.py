"""Writes the zarr and loom variants of tests/python/make_fixtures.py's good/csr.h5ad.

Usage: make_zarr_loom.py GOOD_DIR OUT_DIR

Every store holds the same cells and counts as csr.h5ad, so corrflow must give the same tokens
for each (tests/zarr_loom.rs). AnnData zarr stores are written by anndata itself
(`write_zarr`): zarr format 2 and 3, and 3 sharded when this anndata can shard (its
`auto_shard_zarr_v3` setting); loom files by loompy when it is installed, else by h5py in
the layout loompy 3.0.8 writes. `filter_pass` variants mark every other cell 0 (Geneformer drops those).
Also (issue 51): looms written by anndata's `write_loom` (wl_unnamed, wl_named: the obs index named
'cell', wl_two: and a 'barcode' column of distinct strings), and damaged looms (matrix_1d, matrix_3d,
layer_short, no_layers, no_vocab_genes). Prints one JSON line saying which writers were used.
"""
import json
import shutil
import sys
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import scipy.sparse as sp

good, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
a = ad.read_h5ad(good / "csr.h5ad")
a.X = sp.csr_matrix(a.X)
n = a.n_obs
# obs in every encoding anndata writes: categorical, string, numbers, bool, nullable ones.
a.obs["label"] = a.obs["cell_type"].astype(str)
a.obs["n_int"] = pd.array([None if i % 5 == 0 else i for i in range(n)], dtype="Int64")
a.obs["n_bool"] = pd.array([None if i % 7 == 0 else i % 2 == 0 for i in range(n)], dtype="boolean")
fp = a.copy()
fp.obs["filter_pass"] = np.arange(n) % 2

settings = ad.settings
info = {"anndata": ad.__version__ if hasattr(ad, "__version__") else "?"}


def write(adata, name, fmt, shard=False):
    settings.zarr_write_format = fmt
    if hasattr(settings, "auto_shard_zarr_v3"):
        settings.auto_shard_zarr_v3 = shard
    adata.write_zarr(out / name)


write(a, "v2.zarr", 2)
write(a, "v3.zarr", 3)
info["sharded"] = hasattr(settings, "auto_shard_zarr_v3")
if info["sharded"]:
    write(a, "v3_sharded.zarr", 3, shard=True)
csc = a.copy()
csc.X = sp.csc_matrix(a.X)
write(csc, "v3_csc.zarr", 3)
dense = a.copy()
dense.X = a.X.toarray()
write(dense, "v2_dense.zarr", 2)
# Counts in raw and in a layer, X normalised.
rl = a.copy()
rl.layers["counts"] = a.X.copy()
rl.raw = a.copy()
rl.X = sp.csr_matrix(np.log1p(a.X.toarray()))
write(rl, "v3_raw_layers.zarr", 3)
write(fp, "v3_filter_pass.zarr", 3)
fp.write_h5ad(out / "filter_pass.h5ad")
# A zarr store that is not AnnData (no obs/var).
settings.zarr_write_format = 3
import zarr

g = zarr.open_group(out / "plain.zarr", mode="w")
g.create_array("x", shape=(3,), dtype="f4")


def write_loom(path, adata, filter_pass=None):
    counts = adata.X.toarray().T.astype(np.float32)  # genes x cells
    row = {"ensembl_id": adata.var["gene_ids"].astype(str).values, "Gene": adata.var_names.astype(str).values}
    col = {"CellID": adata.obs_names.astype(str).values, "n_counts": counts.sum(axis=0)}
    if filter_pass is not None:
        col["filter_pass"] = filter_pass
    try:
        import loompy

        loompy.create(str(path), counts, row, col)
        return "loompy " + loompy.__version__
    except ImportError:
        pass
    # The layout loompy 3.0.8 writes (checked against it): /matrix genes x cells, float32,
    # gzip-compressed; attributes as 1-d gzip datasets, strings variable-length UTF-8; empty
    # /layers, /row_graphs, /col_graphs groups; the spec version and creation date in /attrs.
    vlen = h5py.string_dtype("utf-8")
    with h5py.File(path, "w") as f:
        f.create_dataset("matrix", data=counts, chunks=(min(64, counts.shape[0]), min(64, counts.shape[1])),
                         compression="gzip", maxshape=(counts.shape[0], None))
        for group, attrs in (("row_attrs", row), ("col_attrs", col)):
            g = f.create_group(group)
            for k, v in attrs.items():
                v = np.asarray(v)
                if v.dtype.kind in "UO":
                    g.create_dataset(k, data=v.astype(object), dtype=vlen, compression="gzip")
                else:
                    g.create_dataset(k, data=v, compression="gzip")
        for g in ("layers", "row_graphs", "col_graphs"):
            f.create_group(g)
        a = f.create_group("attrs")
        a.create_dataset("LOOM_SPEC_VERSION", data="3.0.0", dtype=vlen)
        a.create_dataset("CreationDate", data="20260101T000000.000000Z", dtype=vlen)
    return "h5py (loompy 3 layout)"


info["loom"] = write_loom(out / "cells.loom", a)
write_loom(out / "filter_pass.loom", a, filter_pass=np.arange(n) % 2)

# Looms whose matrix or a layer has the wrong shape, without /layers, without vocabulary genes
# (issue 51's messages).
for name, edit in [
    ("matrix_1d.loom", lambda f: f.__setitem__("matrix", np.zeros(a.n_vars, dtype="f4"))),
    ("matrix_3d.loom", lambda f: f.__setitem__("matrix", np.zeros((a.n_vars, n, 2), dtype="f4"))),
    ("layer_short.loom", lambda f: f["layers"].__setitem__("spliced", np.zeros((a.n_vars, n - 3), dtype="f4"))),
    ("no_layers.loom", lambda f: f.__delitem__("layers")),  # loompy always writes /layers; others may not
    ("no_vocab_genes.loom", lambda f: (f["row_attrs"].__delitem__("ensembl_id"), f["row_attrs"].__delitem__("Gene"),
                                       f["row_attrs"].__setitem__("Gene", np.array([f"NOPE{i}".encode() for i in range(a.n_vars)])))),
]:
    shutil.copy(out / "cells.loom", out / name)
    with h5py.File(out / name, "a") as f:
        if name.startswith("matrix"):
            del f["matrix"]
        edit(f)

# Looms written by anndata's write_loom (needs loompy): the obs index stored under its name.
try:
    import loompy  # noqa: F401

    wl = a.copy()
    wl.obs = a.obs[["cell_type"]].copy()
    wl.write_loom(out / "wl_unnamed.loom")  # the index under col_attrs/obs_names
    wl.obs.index.name = "cell"
    wl.write_loom(out / "wl_named.loom")  # under col_attrs/cell
    wl.obs["barcode"] = [f"bc{i}" for i in range(n)]
    wl.write_loom(out / "wl_two.loom")  # cell and barcode both distinct strings
    info["write_loom"] = True
except ImportError:
    info["write_loom"] = False
print(json.dumps(info))
