"""corrflow.embed equals `corrflow embed --model`, does not depend on batching, and refuses a
damaged model."""

import anndata
import numpy as np
import pyarrow.parquet as pq
import pytest

import corrflow
from conftest import BUNDLED, corrflow as cli


def test_embed_writes_obsm_equal_to_the_cli_embeddings(work, onnx_model):
    out = work / "emb.parquet"
    cli("embed", "--model", onnx_model, "--input", BUNDLED, "--gene-column", "gene_ids", "--out", out)
    theirs = pq.read_table(out)
    adata = anndata.read_h5ad(BUNDLED)
    mine = corrflow.embed(adata, onnx_model, gene_column="gene_ids")
    assert adata.obsm["X_corrflow"] is mine and mine.dtype == np.float32
    row_of = {c: i for i, c in enumerate(adata.obs_names)}
    want = np.array(theirs.column("embedding").to_pylist(), dtype=np.float32)
    got = mine[[row_of[c] for c in theirs.column("cell_id").to_pylist()]]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_embeddings_do_not_depend_on_the_batch_size(onnx_model):
    adata = anndata.read_h5ad(BUNDLED)[:150].copy()
    runs = [corrflow.embed(adata, onnx_model, key=None, gene_column="gene_ids", batch_size=b) for b in (1, 7, 64)]
    np.testing.assert_allclose(runs[0], runs[1], rtol=0, atol=1e-5)
    np.testing.assert_allclose(runs[0], runs[2], rtol=0, atol=1e-5)


def test_embeddings_do_not_depend_on_the_thread_count(onnx_model):
    adata = anndata.read_h5ad(BUNDLED)[:100].copy()
    one = corrflow.embed(adata, onnx_model, key=None, gene_column="gene_ids", threads=1)
    two = corrflow.embed(adata, onnx_model, key=None, gene_column="gene_ids", threads=2)
    np.testing.assert_allclose(one, two, rtol=0, atol=1e-5)


def test_a_pooling_other_than_the_exported_one_is_refused(onnx_model):
    adata = anndata.read_h5ad(BUNDLED)[:5].copy()
    with pytest.raises(ValueError, match="re-export it"):
        corrflow.embed(adata, onnx_model, pooling="cls", gene_column="gene_ids")


def test_a_model_with_any_flipped_byte_is_refused_by_embed_and_annotate(tmp_path, onnx_model):
    """The package's readers check the model file against the sha256 its sidecar records."""
    import re
    import shutil

    model = tmp_path / "model.onnx"
    shutil.copy(onnx_model, model)
    shutil.copytree(onnx_model.with_suffix(".vocab"), model.with_suffix(".vocab"))
    adata = anndata.read_h5ad(BUNDLED)[:5].copy()
    size = model.stat().st_size
    for at in [k * (size - 1) // 11 for k in range(12)]:
        data = bytearray(model.read_bytes())
        data[at] ^= 0x01
        model.write_bytes(bytes(data))
        for read in (corrflow.embed, corrflow.annotate):
            with pytest.raises(corrflow.CorrflowError, match=re.escape(f"{model}: does not match the checksum")):
                read(adata, model, key=None, gene_column="gene_ids")
        data[at] ^= 0x01
        model.write_bytes(bytes(data))
    assert corrflow.embed(adata, model, key=None, gene_column="gene_ids").shape[0] == 5


def test_layer_choice_names_the_layer_the_model_was_exported_at(work, onnx_model):
    """An exported model gives its last layer's states; asking for another one says how to
    export it (`--layer` / `--emb-layer`), and a model exported at a layer embeds like it."""
    adata = anndata.read_h5ad(BUNDLED)[:50].copy()
    last = corrflow.embed(adata, onnx_model, key=None, gene_column="gene_ids")
    for kw in ({"layer": -1}, {"emb_layer": 0}):
        np.testing.assert_array_equal(corrflow.embed(adata, onnx_model, key=None, gene_column="gene_ids", **kw), last)
    with pytest.raises(ValueError, match="export onnx --emb-layer -1"):
        corrflow.embed(adata, onnx_model, key=None, gene_column="gene_ids", emb_layer=-1)
    with pytest.raises(ValueError, match="counts back from the last layer"):
        corrflow.embed(adata, onnx_model, key=None, gene_column="gene_ids", emb_layer=1)
    cut = work / "second_to_last.onnx"
    cli("export", "onnx", "--checkpoint", work / "run", "--out", cut, "--emb-layer", "-1")
    second = corrflow.embed(adata, cut, key=None, gene_column="gene_ids", emb_layer=0)
    assert second.shape == last.shape and np.abs(second - last).max() > 1e-3
