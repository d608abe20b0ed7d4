"""corrflow.annotate equals `corrflow annotate --model` on a model with a hierarchical
cell-type head (trained by the CLI on the Spectra sample's labels mapped to the Cell Ontology)."""

import anndata
import numpy as np
import pyarrow.parquet as pq
import pytest

import corrflow
from conftest import DATA, ROOT, corrflow as cli

SPECTRA = DATA / "spectra_sample.h5ad"
ONTOLOGY = DATA / "CL-ontology-v2026-03-26.json.zst"


@pytest.fixture(scope="session")
def hce_model(work):
    corpus, run, model = work / "hce_corpus", work / "hce_run", work / "hce.onnx"
    cli("ingest", "--atlas", "spectra", "--out", corpus, "--log1p", "--obs-columns", "cell_type_annotations",
        "--cell-type-map", ROOT / "datasets" / "cell_type_maps" / "spectra_sample.tsv", SPECTRA)
    cli("train", "--corpus", corpus, "--strategy", "random", "--out", run, "--max-steps", 10,
        "--hce-ontology", ONTOLOGY)
    cli("export", "onnx", "--checkpoint", run, "--out", model)
    return model


def test_annotate_returns_the_cli_calls_and_writes_them_into_the_anndata(work, hce_model):
    out = work / "calls.parquet"
    cli("annotate", "--model", hce_model, "--input", SPECTRA, "--log1p", "--out", out)
    theirs = pq.read_table(out).to_pandas().set_index("cell_id")
    adata = anndata.read_h5ad(SPECTRA)
    frame = corrflow.annotate(adata, hce_model, log1p=True)
    assert list(frame.index) == list(adata.obs_names)
    mine = frame.loc[theirs.index]
    assert (mine["leaf_id"].values == theirs["leaf_id"].values).all()
    np.testing.assert_allclose(mine["leaf_probability"], theirs["leaf_probability"], rtol=0, atol=1e-4)
    assert (mine["call_id"].values == theirs["call_id"].values).all()
    probs = adata.obsm["corrflow_leaf_probabilities"]
    assert probs.dtype == np.float32 and probs.shape[1] == len(adata.uns["corrflow_ontology"]["leaves"])
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-4)
    assert adata.uns["corrflow_ontology"]["version"] == "v2026-03-26"
    assert (adata.obs["corrflow_call_label"] == frame["call_label"]).all()


def test_a_higher_threshold_gives_calls_no_deeper(hce_model):
    adata = anndata.read_h5ad(SPECTRA)[:100].copy()
    loose = corrflow.annotate(adata, hce_model, threshold=0.2, key=None, log1p=True)
    strict = corrflow.annotate(adata, hce_model, threshold=0.9, key=None, log1p=True)
    assert (strict["call_depth"] <= loose["call_depth"]).all()
    assert "corrflow_leaf_id" not in adata.obs


def test_a_model_without_a_hierarchical_head_is_refused(onnx_model):
    adata = anndata.read_h5ad(SPECTRA)[:5].copy()
    with pytest.raises(ValueError, match="no hierarchical cell-type head"):
        corrflow.annotate(adata, onnx_model, log1p=True)
