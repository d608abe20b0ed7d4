"""The baseline users run today: Geneformer V1's tokenization path (TranscriptomeTokenizer's
tokenize_anndata + rank_genes, reimplemented with the same numpy/scipy operations and chunk size
because Geneformer itself is not on PyPI), on one core, h5ad in → token lists out, written to
Parquet with pyarrow (Geneformer writes a Hugging Face dataset, i.e. Arrow).

geneformer_baseline.py IN.h5ad OUT.parquet [--gene-column C]
"""
import argparse
import csv
import time
from pathlib import Path

import anndata as ad
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

VOCAB = Path(__file__).resolve().parents[1] / "vocab" / "geneformer-v1"


def tsv(name):
    with open(VOCAB / name) as f:
        r = csv.reader(f, delimiter="\t")
        next(r)
        return list(r)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("h5ad")
    p.add_argument("out")
    p.add_argument("--gene-column")
    args = p.parse_args()
    t0 = time.time()
    token = {g: int(i) for g, i in tsv("token_dictionary.tsv")}
    median = {g: float(m) for g, m in tsv("gene_median_dictionary.tsv")}
    symbol = {s: g for s, g in tsv("gene_name_id.tsv") if s}
    adata = ad.read_h5ad(args.h5ad, backed="r")
    ids = adata.var[args.gene_column] if args.gene_column else adata.var_names
    ens = [g if g in median else symbol.get(g) for g in ids]
    loc = np.where([e in median for e in ens])[0]
    norm = np.array([median[ens[i]] for i in loc])
    toks = np.array([token[ens[i]] for i in loc])
    cells, names = [], []
    chunk = 512
    for i in range(0, adata.n_obs, chunk):
        X = sp.csr_matrix(adata.X[i : i + chunk])
        n_counts = np.asarray(X.sum(axis=1))
        Xn = sp.csr_matrix(X[:, loc] / n_counts * 10_000 / norm)
        for r in range(Xn.shape[0]):
            row = Xn[r]
            cells.append(toks[row.indices][np.argsort(-row.data)][:2048].astype(np.int32))
        names.extend(adata.obs_names[i : i + chunk])
    table = pa.table({"input_ids": pa.array(cells, type=pa.list_(pa.int32())), "cell_id": names})
    pq.write_table(table, args.out, compression="zstd")
    dt = time.time() - t0
    print(f"{len(cells)} cells in {dt:.2f}s: {len(cells) / dt:.0f} cells/s")


if __name__ == "__main__":
    main()
