"""How much of an embedding is the cell's depth (REPORT §10): the share of variance on the first
principal axis of the centred embeddings, and the absolute correlation of that axis with each
cell's number of detected genes in the h5ad.

usage: python experiments/depth_axis.py CELLS.h5ad EMBEDDINGS.parquet [...]
"""
import sys

import anndata as ad
import numpy as np
import pyarrow.parquet as pq
import scipy.sparse as sp


def main():
    h5, embeddings = sys.argv[1], sys.argv[2:]
    a = ad.read_h5ad(h5)
    detected = np.asarray((a.X > 0).sum(1)).ravel() if sp.issparse(a.X) else (a.X > 0).sum(1)
    row = {c: i for i, c in enumerate(a.obs_names)}
    for path in embeddings:
        t = pq.read_table(path)
        ids = t.column("cell_id").to_pylist()
        m = np.stack(t.column("embedding").to_numpy(zero_copy_only=False))
        m = m - m.mean(0)
        u, s, _ = np.linalg.svd(m, full_matrices=False)
        share = s[0] ** 2 / (s ** 2).sum()
        d = np.array([detected[row[i]] for i in ids])
        r = abs(np.corrcoef(u[:, 0] * s[0], d)[0, 1])
        print(f"{path}: PC1 share {share:.2f}, |r| with detected genes {r:.2f}")


if __name__ == "__main__":
    main()
