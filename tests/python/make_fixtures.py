"""Writes the reader and robustness fixtures into OUTDIR, all from the same 64 real cells
(the first 64 of the bundled pbmc1k, restricted to 3,000 genes so the files stay small):

good/  csr.h5ad csc.h5ad dense.h5ad legacy.h5ad (anndata<0.7 layout: h5sparse X, compound
       obs/var, categorical codes with uns/<col>_categories) raw_layers.h5ad (counts in raw/X and
       layers/counts, normalized X), tenx_v3.h5, mtx/ (gzipped Cell Ranger layout), repeat8.h5ad
bad/   truncated.h5ad wrong_encoding.h5ad shape_mismatch.h5ad negative.h5ad nan.h5ad
       non_integer.h5ad no_vocab_genes.h5ad empty.h5ad not_hdf5.h5ad bad_indices.h5ad
       truncated.mtx/, and the unclear-message cases of issue 28: tenx_no_barcodes.h5,
       no_x.h5ad (counts only in raw/X), not_anndata.h5, tenx_short_feature_type.h5, obs_short.h5ad, extra_entries.mtx/,
       damaged_gzip.mtx/ (garbage that still inflates, caught by the CRC)
hints/ lognorm_raw.h5ad counts_layer.h5ad zero_cell.h5ad tenx_gene_id.h5 unknown_genes.mtx/ (issue 44)
"""
import gzip
import shutil
import sys
from pathlib import Path

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import scipy.io
import scipy.sparse as sp

src, out = Path(sys.argv[1]), Path(sys.argv[2])
good, bad = out / "good", out / "bad"
good.mkdir(parents=True, exist_ok=True)
bad.mkdir(parents=True, exist_ok=True)

full = ad.read_h5ad(src)
a = full[:64].copy()
# Keep the 3,000 genes with most counts in these cells, in file order.
top = np.sort(np.argsort(-np.asarray(a.X.sum(axis=0)).ravel(), kind="stable")[:3000])
a = a[:, top].copy()
a.X = sp.csr_matrix(a.X, dtype=np.float32)
rng = np.random.default_rng(1)
a.obs["cell_type"] = pd.Categorical(rng.choice(["B", "T", "NK", "Mono"], a.n_obs))
a.obs["score"] = rng.normal(size=a.n_obs)
a.obs["batch"] = rng.integers(0, 3, a.n_obs)
a.obs["flag"] = rng.integers(0, 2, a.n_obs).astype(bool)
a.write_h5ad(good / "csr.h5ad")

c = a.copy()
c.X = sp.csc_matrix(c.X)
c.write_h5ad(good / "csc.h5ad")

d = a.copy()
d.X = np.asarray(d.X.todarray() if hasattr(d.X, "todarray") else d.X.toarray())
d.write_h5ad(good / "dense.h5ad")

r = a.copy()
r.layers["counts"] = r.X.copy()
r.raw = r.copy()
x = r.X.multiply(1.0 / np.asarray(r.X.sum(axis=1))).tocsr()
r.X = sp.csr_matrix(np.log1p(x * 1e4), dtype=np.float32)
r.write_h5ad(good / "raw_layers.h5ad")

rep = ad.concat([a] * 8, index_unique="-", merge="same")
rep.write_h5ad(good / "repeat8.h5ad")
rep.X = sp.csc_matrix(rep.X)
rep.write_h5ad(good / "repeat8_csc.h5ad")

# Legacy anndata (< 0.7) layout, written by hand as the old writer did.
with h5py.File(good / "legacy.h5ad", "w") as f:
    g = f.create_group("X")
    g.attrs["h5sparse_format"] = "csr"
    g.attrs["h5sparse_shape"] = np.array(a.shape)
    g["data"], g["indices"], g["indptr"] = a.X.data, a.X.indices, a.X.indptr
    cats = list(a.obs["cell_type"].cat.categories)
    obs = np.zeros(a.n_obs, dtype=[("index", "S20"), ("cell_type", "i1"), ("score", "<f4")])
    obs["index"] = [s.encode() for s in a.obs_names]
    obs["cell_type"] = a.obs["cell_type"].cat.codes.values
    obs["score"] = a.obs["score"].values
    f["obs"] = obs
    var = np.zeros(a.n_vars, dtype=[("index", "S20"), ("gene_ids", "S15")])
    var["index"] = [s.encode() for s in a.var_names]
    var["gene_ids"] = [s.encode() for s in a.var["gene_ids"]]
    f["var"] = var
    f.create_group("uns")["cell_type_categories"] = np.array([s.encode() for s in cats], dtype="S10")

# 10x Genomics v3 HDF5: genes x cells, compressed by cell; one non-gene feature added.
with h5py.File(good / "tenx_v3.h5", "w") as f:
    m = f.create_group("matrix")
    csc = sp.vstack([a.X.T.tocsr(), sp.csr_matrix(np.full((1, a.n_obs), 7.0, dtype=np.float32))]).tocsc()
    m["data"] = csc.data.astype(np.int32)
    m["indices"], m["indptr"] = csc.indices, csc.indptr
    m["shape"] = np.array(csc.shape, dtype=np.int32)
    m["barcodes"] = np.array([s.encode() for s in a.obs_names])
    feats = m.create_group("features")
    feats["id"] = np.array([s.encode() for s in list(a.var["gene_ids"]) + ["CD3_TotalSeqB"]])
    feats["name"] = np.array([s.encode() for s in list(a.var_names) + ["CD3"]])
    feats["feature_type"] = np.array([b"Gene Expression"] * a.n_vars + [b"Antibody Capture"])

# 10x Genomics v2 HDF5 of two genomes (a barnyard run): GRCh38 holds the cells' human genes,
# mm10 the same counts under mouse ids; and a v3 file with both genomes in one matrix.
with h5py.File(good / "tenx_v2_two_genomes.h5", "w") as f:
    csc = a.X.T.tocsc()
    for genome, ids in [("GRCh38", list(a.var["gene_ids"])),
                        ("mm10", [f"ENSMUSG{i:011d}" for i in range(a.n_vars)])]:
        g = f.create_group(genome)
        g["data"] = csc.data.astype(np.int32)
        g["indices"], g["indptr"] = csc.indices, csc.indptr
        g["shape"] = np.array(csc.shape, dtype=np.int32)
        g["barcodes"] = np.array([s.encode() for s in a.obs_names])
        g["genes"] = np.array([s.encode() for s in ids])
        g["gene_names"] = np.array([s.encode() for s in a.var_names])
with h5py.File(good / "tenx_v3_two_genomes.h5", "w") as f:
    m = f.create_group("matrix")
    mouse = sp.csr_matrix(np.ones((5, a.n_obs), dtype=np.float32))
    csc = sp.vstack([a.X.T.tocsr(), mouse]).tocsc()
    m["data"] = csc.data.astype(np.int32)
    m["indices"], m["indptr"] = csc.indices, csc.indptr
    m["shape"] = np.array(csc.shape, dtype=np.int32)
    m["barcodes"] = np.array([s.encode() for s in a.obs_names])
    feats = m.create_group("features")
    feats["id"] = np.array([s.encode() for s in list(a.var["gene_ids"]) + [f"ENSMUSG{i:011d}" for i in range(5)]])
    feats["name"] = np.array([s.encode() for s in list(a.var_names) + [f"m{i}" for i in range(5)]])
    feats["feature_type"] = np.array([b"Gene Expression"] * (a.n_vars + 5))
    feats["genome"] = np.array([b"GRCh38"] * a.n_vars + [b"mm10"] * 5)

# MatrixMarket directory, Cell Ranger layout (genes x cells, gzipped).
mtx = good / "mtx"
mtx.mkdir(exist_ok=True)
scipy.io.mmwrite(str(mtx / "matrix.mtx"), sp.coo_matrix(a.X.T.astype(np.int64)), field="integer")
for name in ["matrix.mtx"]:
    with open(mtx / name, "rb") as fi, gzip.open(mtx / f"{name}.gz", "wb") as fo:
        shutil.copyfileobj(fi, fo)
    (mtx / name).unlink()
with gzip.open(mtx / "features.tsv.gz", "wt") as f:
    for gid, sym in zip(a.var["gene_ids"], a.var_names):
        f.write(f"{gid}\t{sym}\tGene Expression\n")
with gzip.open(mtx / "barcodes.tsv.gz", "wt") as f:
    f.write("".join(f"{b}\n" for b in a.obs_names))

# --- malformed inputs ---
blob = (good / "csr.h5ad").read_bytes()
(bad / "truncated.h5ad").write_bytes(blob[: len(blob) // 2])
(bad / "empty.h5ad").write_bytes(b"")
(bad / "not_hdf5.h5ad").write_bytes(b"cell,gene,count\n1,2,3\n")


def variant(name, edit):
    p = bad / name
    shutil.copy(good / "csr.h5ad", p)
    with h5py.File(p, "r+") as f:
        edit(f)


variant("wrong_encoding.h5ad", lambda f: f["X"].attrs.__setitem__("encoding-type", "coo_matrix"))


def shape_mismatch(f):
    ip = f["X/indptr"][:-5]
    del f["X/indptr"]
    f["X/indptr"] = ip


variant("shape_mismatch.h5ad", shape_mismatch)


def set_value(v, at=100):
    def edit(f):
        d = f["X/data"][:]
        d[at] = v
        f["X/data"][:] = d
    return edit


variant("negative.h5ad", set_value(-3.0))
variant("nan.h5ad", set_value(np.nan))
variant("non_integer.h5ad", set_value(2.5))


def bad_indices(f):
    i = f["X/indices"][:]
    i[10] = 10_000_000
    f["X/indices"][:] = i


variant("bad_indices.h5ad", bad_indices)

nv = a.copy()
nv.var["gene_ids"] = [f"NOTAGENE{i}" for i in range(nv.n_vars)]
nv.var_names = [f"fake{i}" for i in range(nv.n_vars)]
nv.write_h5ad(bad / "no_vocab_genes.h5ad")

tm = bad / "truncated.mtx"
tm.mkdir(exist_ok=True)
with gzip.open(mtx / "matrix.mtx.gz", "rt") as f:
    lines = f.readlines()
(tm / "matrix.mtx").write_text("".join(lines[: len(lines) // 2]))
shutil.copy(mtx / "features.tsv.gz", tm / "features.tsv.gz")
shutil.copy(mtx / "barcodes.tsv.gz", tm / "barcodes.tsv.gz")

# 10x file that lost its barcodes; AnnData without X; HDF5 that is neither.
shutil.copy(good / "tenx_v3.h5", bad / "tenx_no_barcodes.h5")
with h5py.File(bad / "tenx_no_barcodes.h5", "r+") as f:
    del f["matrix/barcodes"]
shutil.copy(good / "raw_layers.h5ad", bad / "no_x.h5ad")
with h5py.File(bad / "no_x.h5ad", "r+") as f:
    del f["X"]
shutil.copy(good / "tenx_v3.h5", bad / "tenx_short_feature_type.h5")
with h5py.File(bad / "tenx_short_feature_type.h5", "r+") as f:
    types = f["matrix/features/feature_type"][:-1]
    del f["matrix/features/feature_type"]
    f["matrix/features/feature_type"] = types
with h5py.File(bad / "not_anndata.h5", "w") as f:
    f["expression"] = np.ones((3, 3), dtype=np.float32)


def obs_short(f):
    n = f["obs/score"].shape[0]
    score = f["obs/score"][: n // 2]
    del f["obs/score"]
    f["obs/score"] = score


variant("obs_short.h5ad", obs_short)

# MatrixMarket: one entry more than the header announces; a gzip whose deflate data is altered
# so that it still inflates (to wrong bytes) and only the CRC at the end tells.
with gzip.open(mtx / "matrix.mtx.gz", "rt") as f:
    lines = f.readlines()
for name, text in [("extra_entries.mtx", "".join(lines) + lines[-1])]:
    d = bad / name
    d.mkdir(exist_ok=True)
    (d / "matrix.mtx").write_text(text)
    shutil.copy(mtx / "features.tsv.gz", d / "features.tsv.gz")
    shutil.copy(mtx / "barcodes.tsv.gz", d / "barcodes.tsv.gz")
dg = bad / "damaged_gzip.mtx"
dg.mkdir(exist_ok=True)
raw = "".join(lines).encode()
stored = bytearray(gzip.compress(raw, compresslevel=0))  # stored blocks: bytes pass through
at = len(stored) - 8 - len(raw) // 2
stored[at] = ord("x") if stored[at] != ord("x") else ord("y")
(dg / "matrix.mtx.gz").write_bytes(bytes(stored))
shutil.copy(mtx / "features.tsv.gz", dg / "features.tsv.gz")
shutil.copy(mtx / "barcodes.tsv.gz", dg / "barcodes.tsv.gz")
print("fixtures written to", out)

# Issue 44's hints: files whose hints used to name the wrong fix.
hints = out / "hints"
hints.mkdir(exist_ok=True)
# Log-normalised values in raw.X as well as in X (`adata.raw = adata` after sc.pp.log1p).
ln = r.copy()
del ln.layers["counts"]
ln.raw = ln.copy()
ln.write_h5ad(hints / "lognorm_raw.h5ad")
# Raw counts only in layers/counts, log-normalised X, no raw.
cl = r.copy()
cl.raw = None
cl.write_h5ad(hints / "counts_layer.h5ad")
# One cell (the first) without any count: no token, so no embedding.
zc = a.copy()
zc.X = (sp.diags(np.r_[0.0, np.ones(zc.n_obs - 1)]) @ zc.X).tocsr().astype(np.float32)
zc.X.eliminate_zeros()
zc.write_h5ad(hints / "zero_cell.h5ad")
# Space Ranger 2.1's 10x file: features/gene_id beside id and name.
shutil.copy(good / "tenx_v3.h5", hints / "tenx_gene_id.h5")
with h5py.File(hints / "tenx_gene_id.h5", "r+") as f:
    f["matrix/features/gene_id"] = f["matrix/features/id"][:]
# A MatrixMarket folder none of whose feature ids or names is a known gene.
mu = hints / "unknown_genes.mtx"
mu.mkdir(exist_ok=True)
shutil.copy(mtx / "matrix.mtx.gz", mu / "matrix.mtx.gz")
shutil.copy(mtx / "barcodes.tsv.gz", mu / "barcodes.tsv.gz")
with gzip.open(mu / "features.tsv.gz", "wt") as f:
    for i in range(a.n_vars):
        f.write(f"NOTAGENE{i}\tfake{i}\tGene Expression\n")
