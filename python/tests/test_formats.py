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


def test_a_backed_anndata_is_read_in_blocks_with_the_results_of_the_in_memory_one(monkeypatch, onnx_model):
    """read_h5ad(backed="r"): tokenize and embed read the matrix from disk a block of rows at a
    time (here 300 cells, so 4 blocks) and give exactly what the in-memory AnnData gives."""
    import warnings

    monkeypatch.setattr(corrflow._anndata, "_BACKED_ROWS", 300)
    backed = anndata.read_h5ad(BUNDLED, backed="r")
    memory = anndata.read_h5ad(BUNDLED)
    assert corrflow.tokenize(backed, gene_column="gene_ids").equals(corrflow.tokenize(memory, gene_column="gene_ids"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        e_backed = corrflow.embed(backed, onnx_model, gene_column="gene_ids", key=None)
        e_memory = corrflow.embed(memory, onnx_model, gene_column="gene_ids", key=None)
    assert e_backed.shape == e_memory.shape == (1000, e_memory.shape[1])
    np.testing.assert_array_equal(e_backed, e_memory)
