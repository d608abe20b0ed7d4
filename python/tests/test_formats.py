"""corrflow.ingest reads AnnData zarr stores (the same dispatch as the CLI): the tokens of a
store written by anndata are those of the h5ad it came from, and Geneformer's filter_pass is
honoured unless ignore_filter_pass."""

import anndata
import numpy as np
import pyarrow.parquet as pq

import corrflow
from conftest import BUNDLED


def tokens(corpus, atlas):
    t = pq.read_table(corpus / "atlases" / atlas / "shard-00000.parquet")
    return t.column("cell_id").to_pylist(), t.column("input_ids").to_pylist()


def test_a_zarr_store_gives_the_tokens_of_its_h5ad_and_filter_pass_is_honoured(tmp_path):
    adata = anndata.read_h5ad(BUNDLED)[:120].copy()
    h5ad, store = tmp_path / "cells.h5ad", tmp_path / "cells.zarr"
    adata.write_h5ad(h5ad)
    anndata.settings.zarr_write_format = 3
    adata.obs["filter_pass"] = (np.arange(adata.n_obs) % 3 == 0).astype(np.int64)
    adata.write_zarr(store)
    corpus = tmp_path / "corpus"
    kw = dict(gene_column="gene_ids")
    corrflow.ingest(h5ad, corpus, "h5ad", **kw)
    corrflow.ingest(store, corpus, "zarr_all", ignore_filter_pass=True, **kw)
    s = corrflow.ingest(store, corpus, "zarr", **kw)
    ids, toks = tokens(corpus, "h5ad")
    assert tokens(corpus, "zarr_all") == (ids, toks)
    assert s["cells_read"] == 40 and tokens(corpus, "zarr") == (ids[::3], toks[::3])
