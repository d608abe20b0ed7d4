"""corrflow.tokenize on in-memory AnnData equals `corrflow ingest` on the file, cell for cell."""

import anndata
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

import corrflow
from conftest import BUNDLED, DATA, corrflow as cli


def shard_cells(corpus):
    """cell_id -> input_ids of every cell of a CLI corpus, in key order."""
    info = corrflow.Corpus(corpus)
    table = pa.concat_tables([pq.read_table(s["path"], columns=["cell_id", "input_ids"]) for s in info.shards()])
    return table.column("cell_id").to_pylist(), table.column("input_ids").to_pylist()


def assert_same_as_cli(adata, tokens, corpus):
    ids, want = shard_cells(corpus)
    kept = [i for i, t in enumerate(tokens) if t is not None]
    assert [str(adata.obs_names[i]) for i in kept] == ids
    assert [tokens[i] for i in kept] == want


def test_tokenize_equals_the_cli_shards_cell_for_cell_on_the_bundled_cells(pbmc_corpus):
    adata = anndata.read_h5ad(BUNDLED)
    tokens = corrflow.tokenize(adata, gene_column="gene_ids")
    assert isinstance(tokens, pa.ListArray) and len(tokens) == adata.n_obs
    assert_same_as_cli(adata, tokens.to_pylist(), pbmc_corpus)


def test_tokenize_equals_the_cli_shards_cell_for_cell_on_kang(kang_corpus):
    adata = anndata.read_h5ad(DATA / "kang_ctrl.h5ad")
    assert_same_as_cli(adata, corrflow.tokenize(adata, as_lists=True), kang_corpus)


def test_v2_layout_equals_the_cli_v2_ingest(work):
    adata = anndata.read_h5ad(BUNDLED)
    out = work / "pbmc_v2"
    cli("ingest", "--atlas", "a", "--gene-column", "gene_ids", "--model-version", "v2", "--out", out, BUNDLED)
    tokens = corrflow.tokenize(adata, gene_column="gene_ids", version="v2", as_lists=True)
    assert_same_as_cli(adata, tokens, out)


def test_csr_csc_and_dense_matrices_give_the_same_tokens():
    adata = anndata.read_h5ad(BUNDLED)[:200].copy()
    want = corrflow.tokenize(adata, gene_column="gene_ids", as_lists=True)
    for matrix in (sp.csc_matrix(adata.X), adata.X.toarray(), sp.csr_matrix(adata.X.astype(np.int64))):
        other = anndata.AnnData(X=matrix, obs=adata.obs, var=adata.var)
        assert corrflow.tokenize(other, gene_column="gene_ids", as_lists=True) == want


def test_a_gene_repeated_within_a_cell_is_summed_as_scipys_sum_duplicates_does():
    adata = anndata.read_h5ad(BUNDLED)[:40].copy()
    canonical = sp.csr_matrix(adata.X)
    canonical.sum_duplicates()
    want = corrflow.tokenize(anndata.AnnData(X=canonical, obs=adata.obs, var=adata.var), gene_column="gene_ids",
                             as_lists=True)
    # Each cell's entries split in two halves that repeat its genes, in reverse order: the same
    # matrix to scipy, a non-canonical one on disk or in memory.
    indptr, indices, data = [0], [], []
    for r in range(canonical.shape[0]):
        lo, hi = canonical.indptr[r], canonical.indptr[r + 1]
        genes, values = canonical.indices[lo:hi][::-1], canonical.data[lo:hi][::-1]
        first = np.floor(values / 2)
        indices += list(genes) + list(genes)
        data += list(first) + list(values - first)
        indptr.append(len(indices))
    split = sp.csr_matrix((np.array(data, dtype=np.float32), np.array(indices, dtype=np.int32),
                           np.array(indptr)), shape=canonical.shape)
    assert not split.has_canonical_format
    got = corrflow.tokenize(anndata.AnnData(X=split, obs=adata.obs, var=adata.var), gene_column="gene_ids",
                            as_lists=True)
    assert got == want


def test_tokens_are_a_zero_copy_list_array_of_int32_with_nulls_for_cells_without_vocabulary_genes():
    adata = anndata.read_h5ad(BUNDLED)[:50].copy()
    X = adata.X.toarray()
    X[3] = 0  # no counts at all: the cell ingest drops
    adata.X = sp.csr_matrix(X)
    tokens = corrflow.tokenize(adata, gene_column="gene_ids")
    assert tokens.type == pa.list_(pa.int32())
    assert tokens.null_count == 1 and not tokens[3].is_valid


def test_counts_from_a_layer_and_log1p_normalized_data_give_the_raw_counts_tokens():
    adata = anndata.read_h5ad(BUNDLED)[:300].copy()
    want = corrflow.tokenize(adata, gene_column="gene_ids", as_lists=True)
    adata.layers["counts"] = adata.X.copy()
    norm = adata.X.multiply(1e4 / adata.X.sum(axis=1)).tocsr()
    norm.data = np.log1p(norm.data)
    adata.X = norm
    assert corrflow.tokenize(adata, gene_column="gene_ids", counts="layer:counts", as_lists=True) == want
    assert corrflow.tokenize(adata, gene_column="gene_ids", log1p=True, as_lists=True) == want
