"""Writes the sparse-matrix cases of tests/csr_invariants.rs from make_fixtures.py's good/csr.h5ad
(64 real cells x 3,000 genes).

Usage: make_csr_cases.py GOOD_DIR OUT_DIR

dup/     the cells with genes listed twice within a cell (each count split in two, explicit
         zeros added, entries shuffled): canonical.h5ad holds scipy's `sum_duplicates()` of them
         (the reference); csr.h5ad, csc.h5ad, legacy.h5ad, tenx.h5, v2.zarr, v3.zarr, mtx/ hold
         the non-canonical matrix (CSC: a cell listed twice within a gene).
indptr/  index pointers that break scipy's `check_format`: h5ad (start, last, decreasing),
         legacy h5ad, 10x, CSC h5ad, zarr CSR (start, last, decreasing), zarr CSC (start).
chunks/  zarr stores whose sparse arrays have small chunks (v2, v3, v3 sharded; X, raw/X and
         layers/counts), for the test to delete chunks from; leading_empty.zarr/.h5ad: the first
         cells empty, so zarr-python leaves out the all-zero indptr chunk; zeros_sharded.zarr: a
         sharded X whose data holds an inner chunk of explicit zeros, which zarr leaves out.
Prints one JSON line with the number of entries summed in dup/.
"""
import gzip
import json
import shutil
import sys
import warnings
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import scipy.io
import scipy.sparse as sp
import zarr

warnings.filterwarnings("ignore")
good, out = Path(sys.argv[1]), Path(sys.argv[2])
if out.exists():
    shutil.rmtree(out)
base = ad.read_h5ad(good / "csr.h5ad")
base.X = sp.csr_matrix(base.X, dtype=np.float32)
base.obs = base.obs[[]]
rng = np.random.default_rng(51)


def non_canonical(x):
    """Each count c >= 2 split into two entries a + (c - a) of the same gene (every third one),
    an explicit zero repeating a gene now and then, and every cell's entries shuffled."""
    x = x.tocsr()
    rows, cols, vals = [], [], []
    for i in range(x.shape[0]):
        lo, hi = x.indptr[i], x.indptr[i + 1]
        r = []
        for k in range(lo, hi):
            g, c = int(x.indices[k]), float(x.data[k])
            if c >= 2 and k % 3 == 0:
                a = float(rng.integers(1, int(c)))
                r += [(g, a), (g, c - a)]
            else:
                r.append((g, c))
            if k % 11 == 0:
                r.append((g, 0.0))
        rng.shuffle(r)
        rows += [i] * len(r)
        cols += [g for g, _ in r]
        vals += [v for _, v in r]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=x.shape[0]))]).astype(np.int64)
    return sp.csr_matrix((np.array(vals, np.float32), np.array(cols, np.int32), indptr), shape=x.shape)


def csc_arrays(m):
    """The CSC arrays of `m` keeping its repeated entries (scipy's conversions sum them)."""
    coo = m.tocoo()
    order = np.argsort(coo.col, kind="stable")
    indptr = np.concatenate([[0], np.cumsum(np.bincount(coo.col, minlength=m.shape[1]))]).astype(np.int64)
    return coo.data[order], coo.row[order].astype(np.int32), indptr


def put_x(path, enc, data, indices, indptr, shape, group="X"):
    """Replaces an h5ad's sparse matrix by the given arrays, as they are."""
    with h5py.File(path, "a") as f:
        del f[group]
        g = f.create_group(group)
        g.attrs["encoding-type"], g.attrs["encoding-version"] = enc, "0.1.0"
        g.attrs["shape"] = np.array(shape)
        g["data"], g["indices"], g["indptr"] = data, indices, indptr


def put_zarr_x(path, enc, data, indices, indptr, shape, fmt, key="X", chunks=None, shards=None):
    """Replaces a zarr store's sparse matrix by the given arrays, as they are."""
    root = zarr.open_group(path, mode="a", zarr_format=fmt)
    if key in root:
        del root[key]
    g = root.create_group(key)
    g.attrs.update({"encoding-type": enc, "encoding-version": "0.1.0", "shape": list(shape)})
    for name, arr in [("data", data), ("indices", indices), ("indptr", indptr)]:
        kw = {"chunks": (chunks,)} if chunks else {}
        if shards:
            kw["shards"] = (shards,)
        g.create_array(name, data=np.asarray(arr), **kw)
    # Consolidated metadata would describe the old arrays.
    (Path(path) / ".zmetadata").unlink(missing_ok=True)
    meta = Path(path) / "zarr.json"
    if fmt == 3 and meta.exists():
        j = json.loads(meta.read_text())
        j.pop("consolidated_metadata", None)
        meta.write_text(json.dumps(j))


def write_zarr(adata, path, fmt):
    ad.settings.zarr_write_format = fmt
    if hasattr(ad.settings, "auto_shard_zarr_v3"):
        ad.settings.auto_shard_zarr_v3 = False
    adata.write_zarr(path)


# --- dup/: repeated genes within cells, summed as scipy's sum_duplicates ---
dup = out / "dup"
dup.mkdir(parents=True)
nc = non_canonical(base.X)
canon = nc.copy()
canon.sum_duplicates()
assert not nc.has_canonical_format and canon.has_canonical_format
ref = base.copy()
ref.X = canon
ref.write_h5ad(dup / "canonical.h5ad")
shape = base.X.shape
base.write_h5ad(dup / "csr.h5ad")
put_x(dup / "csr.h5ad", "csr_matrix", nc.data, nc.indices, nc.indptr, shape)
base.write_h5ad(dup / "csc.h5ad")
put_x(dup / "csc.h5ad", "csc_matrix", *csc_arrays(nc), shape)
for fmt in (2, 3):
    write_zarr(base, dup / f"v{fmt}.zarr", fmt)
    put_zarr_x(dup / f"v{fmt}.zarr", "csr_matrix", nc.data, nc.indices, nc.indptr, shape, fmt)
write_zarr(base, dup / "v3_csc.zarr", 3)
put_zarr_x(dup / "v3_csc.zarr", "csc_matrix", *csc_arrays(nc), shape, 3)
with h5py.File(dup / "legacy.h5ad", "w") as f:
    g = f.create_group("X")
    g.attrs["h5sparse_format"], g.attrs["h5sparse_shape"] = "csr", np.array(shape)
    g["data"], g["indices"], g["indptr"] = nc.data, nc.indices, nc.indptr
    obs = np.zeros(shape[0], dtype=[("index", "S20")])
    obs["index"] = [s.encode() for s in base.obs_names]
    f["obs"] = obs
    var = np.zeros(shape[1], dtype=[("index", "S20"), ("gene_ids", "S15")])
    var["index"] = [s.encode() for s in base.var_names]
    var["gene_ids"] = [s.encode() for s in base.var["gene_ids"]]
    f["var"] = var


def tenx(path, data, indices, indptr):
    """A 10x v3 file: genes x cells compressed by cell, i.e. the cells' CSR arrays."""
    with h5py.File(path, "w") as f:
        m = f.create_group("matrix")
        m["data"], m["indices"], m["indptr"] = data.astype(np.int32), indices, indptr
        m["shape"] = np.array([shape[1], shape[0]], dtype=np.int32)
        m["barcodes"] = np.array([s.encode() for s in base.obs_names])
        feats = m.create_group("features")
        feats["id"] = np.array([s.encode() for s in base.var["gene_ids"]])
        feats["name"] = np.array([s.encode() for s in base.var_names])
        feats["feature_type"] = np.array([b"Gene Expression"] * shape[1])


tenx(dup / "tenx.h5", nc.data, nc.indices, nc.indptr)
mtx = dup / "mtx"
mtx.mkdir()
coo = nc.tocoo()  # keeps the repeated entries, as a MatrixMarket file may
with open(mtx / "matrix.mtx", "w") as f:
    f.write(f"%%MatrixMarket matrix coordinate integer general\n{shape[1]} {shape[0]} {coo.nnz}\n")
    f.writelines(f"{g + 1} {c + 1} {int(v)}\n" for c, g, v in zip(coo.row, coo.col, coo.data))
with gzip.open(mtx / "features.tsv.gz", "wt") as f:
    f.writelines(f"{gid}\t{sym}\tGene Expression\n" for gid, sym in zip(base.var["gene_ids"], base.var_names))
with gzip.open(mtx / "barcodes.tsv.gz", "wt") as f:
    f.writelines(f"{b}\n" for b in base.obs_names)

# --- indptr/: index pointers scipy's check_format refuses ---
bad = out / "indptr"
bad.mkdir()
x = base.X
nnz = x.nnz


def broken(kind):
    p = x.indptr.astype(np.int64).copy()
    if kind == "start":
        p[0] = 5
    elif kind == "last":
        p[-1] = nnz - 3
    else:
        p[10], p[11] = p[11], p[10]
    return p


for kind in ("start", "last", "decreasing"):
    base.write_h5ad(bad / f"h5ad_{kind}.h5ad")
    put_x(bad / f"h5ad_{kind}.h5ad", "csr_matrix", x.data, x.indices, broken(kind), shape)
    write_zarr(base, bad / f"zarr_{kind}.zarr", 3)
    put_zarr_x(bad / f"zarr_{kind}.zarr", "csr_matrix", x.data, x.indices, broken(kind), shape, 3)
shutil.copy(dup / "legacy.h5ad", bad / "legacy_start.h5ad")
with h5py.File(bad / "legacy_start.h5ad", "a") as f:
    del f["X/data"], f["X/indices"], f["X/indptr"]
    f["X/data"], f["X/indices"], f["X/indptr"] = x.data, x.indices, broken("start")
tenx(bad / "tenx_start.h5", x.data, x.indices, broken("start"))
cd, ci, cp = csc_arrays(x)
cp = cp.copy()
cp[0] = 5
base.write_h5ad(bad / "csc_start.h5ad")
put_x(bad / "csc_start.h5ad", "csc_matrix", cd, ci, cp, shape)
write_zarr(base, bad / "zarr_csc_start.zarr", 3)
put_zarr_x(bad / "zarr_csc_start.zarr", "csc_matrix", cd, ci, cp, shape, 3)

# --- chunks/: small chunks to delete; zarr-python's own omissions ---
ch = out / "chunks"
ch.mkdir()
withraw = base.copy()
withraw.layers["counts"] = x.copy()
withraw.raw = base.copy()
for name, fmt, shards in [("v2.zarr", 2, None), ("v3.zarr", 3, None), ("v3_sharded.zarr", 3, 1024)]:
    write_zarr(withraw, ch / name, fmt)
    for key in ("X", "raw/X", "layers/counts"):
        put_zarr_x(ch / name, "csr_matrix", x.data, x.indices, x.indptr, shape, fmt, key=key, chunks=256,
                   shards=shards)
    # indptr (65 entries) in chunks of 16 too.
    root = zarr.open_group(ch / name, mode="a", zarr_format=fmt)
    del root["X/indptr"]
    kw = {"chunks": (16,)} if not shards else {"chunks": (16,), "shards": (64,)}
    root["X"].create_array("indptr", data=x.indptr.astype(np.int64), **kw)
lead = base.copy()
lx = x.tolil()
lx[:20, :] = 0
lead.X = sp.csr_matrix(lx, dtype=np.float32)
lead.write_h5ad(ch / "leading_empty.h5ad")
write_zarr(base, ch / "leading_empty.zarr", 3)
lp = lead.X
put_zarr_x(ch / "leading_empty.zarr", "csr_matrix", lp.data, lp.indices, lp.indptr, shape, 3, chunks=16)
zx = x.copy()
zx.data[256:512] = 0  # a whole inner chunk of explicit zeros: zarr does not write it
write_zarr(base, ch / "zeros_sharded.zarr", 3)
put_zarr_x(ch / "zeros_sharded.zarr", "csr_matrix", zx.data, zx.indices, zx.indptr, shape, 3, chunks=256, shards=1024)
print(json.dumps({"dup_entries": int(nc.nnz), "canonical_entries": int(canon.nnz)}))
