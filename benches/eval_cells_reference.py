"""What a user would otherwise run for `corrflow eval cells`: scanpy's recipe for the PCA / HVG
baselines, a random projection, and per method scanpy's neighbours + Leiden at scib-metrics'
resolutions (ARI/NMI), scib-metrics' silhouette_label (and with a batch: silhouette_batch,
graph_connectivity, iLISI/cLISI on exact 90-NN lists), and scikit-learn's 5-fold logistic and
k-NN probes. Used by benches/eval_cells.sh to time the same work side by side.

usage: eval_cells_reference.py H5AD EMBEDDINGS.parquet LABEL [--batch COL] [--counts raw] [--log1p]
Prints one JSON line: the seconds and the main scores per method.
"""
import argparse
import json
import time

import anndata as ad
import numpy as np
import pyarrow.parquet as pq
import scanpy as sc
import scipy.sparse as sp
import scib_metrics as scib
from scib_metrics.nearest_neighbors import NeighborsResults
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import adjusted_rand_score, f1_score, normalized_mutual_info_score
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.neighbors import KNeighborsClassifier, NearestNeighbors
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler


def neighbours(x, k):
    dist, idx = NearestNeighbors(n_neighbors=k).fit(x).kneighbors(x)
    return NeighborsResults(indices=idx, distances=dist)


def score(x, labels, batch):
    out = {}
    a = ad.AnnData(np.zeros((x.shape[0], 1), dtype=np.float32))
    a.obsm["rep"] = x
    # Exact neighbours, as corrflow computes them (scanpy's default switches to pynndescent at
    # 8,192 cells, and that path fails with anndata 0.12's sparse arrays in scanpy 1.11.5).
    sc.pp.neighbors(a, n_neighbors=15, use_rep="rep", transformer="sklearn")
    best = (-1.0, 0.0)
    for r in [0.2 * i for i in range(1, 11)]:
        sc.tl.leiden(a, resolution=r, flavor="igraph", n_iterations=2, random_state=0, key_added="c")
        nmi = normalized_mutual_info_score(labels, a.obs["c"])
        if nmi > best[0]:
            best = (nmi, adjusted_rand_score(labels, a.obs["c"]))
    out["nmi"], out["ari"] = best
    out["silhouette_label"] = float(scib.silhouette_label(x, labels))
    folds = StratifiedKFold(5, shuffle=True, random_state=0)
    for name, model in [("macro_f1", make_pipeline(StandardScaler(), LogisticRegression(max_iter=200))),
                        ("knn_macro_f1", KNeighborsClassifier(10, metric="cosine"))]:
        pred = cross_val_predict(model, x, labels, cv=folds)
        out[name] = f1_score(labels, pred, average="macro")
    if batch is not None:
        nn90 = neighbours(x, 90)
        out["silhouette_batch"] = float(scib.silhouette_batch(x, labels, batch))
        out["graph_connectivity"] = float(scib.graph_connectivity(nn90.subset_neighbors(15), labels))
        out["ilisi"] = float(scib.ilisi_knn(nn90, batch))
        out["clisi"] = float(scib.clisi_knn(nn90, labels))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("h5ad")
    ap.add_argument("embeddings")
    ap.add_argument("label")
    ap.add_argument("--batch")
    ap.add_argument("--counts", default="X")
    ap.add_argument("--log1p", action="store_true")
    a = ap.parse_args()
    start = time.perf_counter()
    adata = ad.read_h5ad(a.h5ad)
    table = pq.read_table(a.embeddings).to_pydict()
    emb = dict(zip(table["cell_id"], table["embedding"]))
    keep = [i for i, c in enumerate(adata.obs_names) if c in emb and not adata.obs[a.label].isna().iloc[i]]
    adata = adata[keep].copy()
    labels = adata.obs[a.label].astype(str).to_numpy()
    batch = None if a.batch is None else adata.obs[a.batch].astype(str).to_numpy()
    x = adata.raw.X if a.counts == "raw" else adata.X
    # scanpy 1.11's HVG code calls getnnz, which anndata 0.12's sparse arrays lack: a csr_matrix.
    base = ad.AnnData(sp.csr_matrix(x).astype(np.float32) if sp.issparse(x) else np.asarray(x, dtype=np.float32))
    if a.log1p:
        base.X = base.X.expm1() if hasattr(base.X, "expm1") else np.expm1(base.X)
    sc.pp.normalize_total(base)
    sc.pp.log1p(base)
    sc.pp.highly_variable_genes(base, flavor="seurat", n_top_genes=2000)
    hvg = base[:, base.var["highly_variable"]].X
    hvg = hvg.toarray() if hasattr(hvg, "toarray") else np.asarray(hvg)
    sc.pp.pca(base, n_comps=50)
    methods = {
        "embeddings": np.asarray([emb[c] for c in adata.obs_names], dtype=np.float32),
        "pca": base.obsm["X_pca"],
        "hvg": hvg,
    }
    dim = methods["embeddings"].shape[1]
    methods["random"] = hvg @ np.random.default_rng(0).normal(0, 1 / np.sqrt(dim), (hvg.shape[1], dim))
    scores = {m: score(np.asarray(x, dtype=np.float64), labels, batch) for m, x in methods.items()}
    print(json.dumps({"seconds": time.perf_counter() - start, "cells": len(labels), "methods": scores}))


if __name__ == "__main__":
    main()
