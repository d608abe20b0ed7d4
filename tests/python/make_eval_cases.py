"""Small inputs of `eval cells` / `eval probe` / `eval genes` on degenerate label sets and
malformed embeddings files (tests/eval_cells.rs): `make_eval_cases.py OUT_DIR`.

Cells: counts over 60 genes; `cell_type` as each case needs; embeddings as `embed` writes them
(`cell_id`, `embedding` fixed-size list of float32, the label beside for `eval probe`)."""

import sys
from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(0)
GENES = 60


def emb_table(ids, emb, labels=None, id_column="cell_id"):
    emb = np.asarray(emb, dtype=np.float32)
    cols = {id_column: pa.array([str(i) for i in ids], pa.string()),
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel(), pa.float32()), emb.shape[1])}
    if labels is not None:
        cols["cell_type"] = pa.array(labels, pa.string())
    return pa.table(cols)


def case(name, labels, batch=None):
    """An h5ad of len(labels) cells (class t expresses genes 10t.. strongly) and its embeddings."""
    n = len(labels)
    codes = pd.Categorical(labels).codes
    lam = np.ones((n, GENES))
    for i, c in enumerate(codes):
        lam[i, (10 * max(c, 0)) % GENES:(10 * max(c, 0)) % GENES + 10] = 8.0
    x = sp.csr_matrix(rng.poisson(lam).astype(np.float32))
    obs = pd.DataFrame({"cell_type": pd.Categorical(labels)}, index=[f"c{i}" for i in range(n)])
    if batch is not None:
        obs["batch"] = pd.Categorical(batch)
    var = pd.DataFrame(index=[f"ENSG{g:011d}" for g in range(GENES)])
    ad.AnnData(x, obs=obs, var=var).write_h5ad(out / f"{name}.h5ad")
    emb = rng.normal(size=(n, 8)) * 0.3 + np.asarray(codes)[:, None] * 2.0
    pq.write_table(emb_table(obs.index, emb, [v if isinstance(v, str) else None for v in labels]),
                   out / f"{name}.parquet")
    return obs.index, emb


# One cell per class (issue 51, item 7), and classes smaller than the folds beside larger ones.
case("singletons", ["A", "B", "C", "D"])
case("rare", ["A"] * 8 + ["B"] * 8 + ["C"] + ["D"] * 2)
# 30 cells in 3 classes, two batches: the good control, and the base of the broken files.
ids, emb = case("good", ["A"] * 10 + ["B"] * 10 + ["C"] * 10, batch=["b1", "b2"] * 15)
# No label at all; one batch value.
case("unlabelled", [None] * 12, batch=["b1", "b2"] * 6)
case("onebatch", ["A"] * 6 + ["B"] * 6, batch=["b1"] * 12)
# Broken embeddings of good.h5ad's cells.
pq.write_table(emb_table(ids, np.full((len(ids), 8), np.nan), ["A"] * 10 + ["B"] * 10 + ["C"] * 10),
               out / "nan.parquet")
pq.write_table(pa.table({"cell_id": pa.array([str(i) for i in ids]),
                         "embedding": pa.array([[]] * len(ids), pa.list_(pa.float32(), 0))}), out / "zero.parquet")
pq.write_table(pa.table({}), out / "nocols.parquet")
pq.write_table(emb_table([], np.zeros((0, 8))), out / "norows.parquet")
# Gene embeddings for eval genes: a 0-wide one, and labels for it.
genes = [f"ENSG{g:011d}" for g in range(GENES)]
pq.write_table(pa.table({"gene_id": pa.array(genes),
                         "embedding": pa.array([[]] * GENES, pa.list_(pa.float32(), 0))}), out / "genes-zero.parquet")
pq.write_table(emb_table(genes, rng.normal(size=(GENES, 4)), id_column="gene_id"), out / "genes.parquet")
(out / "genes.csv").write_text("ensembl_id,dosage_sensitive,dosage_insensitive\n"
                               + "".join(f"{g},{int(k % 2 == 0)},{int(k % 2 == 1)}\n" for k, g in enumerate(genes)))
(out / "genes-other.csv").write_text("ensembl_id,dosage_sensitive,dosage_insensitive\n"
                                     + "".join(f"X{g},{int(k % 2 == 0)},{int(k % 2 == 1)}\n" for k, g in enumerate(genes)))
