"""corrflow.ingest reads TileDB-SOMA experiments through tiledbsoma (issue 44 item 3): an
experiment written by `tiledbsoma.io.from_h5ad` gives the tokens, cell ids and obs columns of
its h5ad; an obs value filter selects exactly the matching cells; filter_pass is honoured; bad
filters, layers and gene columns get clear errors; the command line says to use Python."""

import json
import subprocess

import anndata
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import tiledbsoma.io

import corrflow
from conftest import BUNDLED, cli_path

OBS = ["cell_type", "score", "n_int", "flag"]


def table(corpus, atlas):
    return pq.read_table(corpus / "atlases" / atlas / "shard-00000.parquet").drop_columns(["atlas"])


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    """300 bundled cells with obs columns of every kind, as h5ad and as a SOMA experiment."""
    d = tmp_path_factory.mktemp("soma")
    a = anndata.read_h5ad(BUNDLED)[:300].copy()
    n = a.n_obs
    a.obs["cell_type"] = pd.Categorical(np.where(np.arange(n) % 3 == 0, "B cell", "T cell"))
    a.obs["score"] = np.linspace(0, 1, n)
    a.obs["n_int"] = np.arange(n, dtype=np.int64)
    a.obs["flag"] = np.arange(n) % 2 == 0
    h5ad = d / "cells.h5ad"
    a.write_h5ad(h5ad)
    uri = tiledbsoma.io.from_h5ad(str(d / "exp"), str(h5ad), measurement_name="RNA")
    a.obs["filter_pass"] = (np.arange(n) % 4 == 0).astype(np.int64)
    fp = d / "fp.h5ad"
    a.write_h5ad(fp)
    fp_uri = tiledbsoma.io.from_h5ad(str(d / "exp_fp"), str(fp), measurement_name="RNA")
    return d, h5ad, uri, fp_uri


def test_a_soma_experiment_gives_the_tokens_and_obs_of_its_h5ad(cells):
    d, h5ad, uri, _ = cells
    corpus = d / "corpus1"
    kw = dict(gene_column="gene_ids", obs_columns=OBS, chunk_cells=64)
    corrflow.ingest(h5ad, corpus, "h5ad", **kw)
    s = corrflow.ingest(uri, corpus, "soma", **kw)
    assert s["cells_read"] == 300
    ref, got = table(corpus, "h5ad"), table(corpus, "soma")
    assert got.schema == ref.schema, (got.schema, ref.schema)
    assert got.equals(ref)
    manifest = json.loads((corpus / "atlases" / "soma" / "manifest.json").read_text())
    assert manifest["inputs"][0]["format"] == "TileDB-SOMA"
    assert manifest["inputs"][0]["selection"] == "measurement RNA, X layer data"


def test_a_value_filter_selects_exactly_the_matching_cells(cells):
    d, h5ad, uri, _ = cells
    corpus = d / "corpus2"
    kw = dict(gene_column="gene_ids", obs_columns=OBS)
    corrflow.ingest(h5ad, corpus, "all", **kw)
    query = "cell_type == 'B cell' and score > 0.5"
    s = corrflow.ingest(uri, corpus, "b", value_filter=query, **kw)
    ref = table(corpus, "all").to_pandas()
    want = ref[(ref.cell_type == "B cell") & (ref.score > 0.5)].reset_index(drop=True)
    got = table(corpus, "b").to_pandas()
    assert s["cells_read"] == len(want) == 50
    assert got.cell_id.tolist() == want.cell_id.tolist()
    assert [list(t) for t in got.input_ids] == [list(t) for t in want.input_ids]
    manifest = json.loads((corpus / "atlases" / "b" / "manifest.json").read_text())
    assert manifest["inputs"][0]["selection"].endswith(f"obs {query}")
    # The same experiment with another filter is other cells, not a duplicate input.
    assert not any("same content" in w for w in s.get("warnings", []))


def test_filter_pass_is_honoured_unless_ignored(cells):
    d, _, _, fp_uri = cells
    corpus = d / "corpus3"
    assert corrflow.ingest(fp_uri, corpus, "fp", gene_column="gene_ids")["cells_read"] == 75
    assert corrflow.ingest(fp_uri, corpus, "every", gene_column="gene_ids", ignore_filter_pass=True)["cells_read"] == 300


def test_bad_filters_layers_and_columns_are_refused_clearly(cells):
    d, h5ad, uri, _ = cells
    corpus = d / "corpus4"
    with pytest.raises(corrflow.CorrflowError, match="value_filter 'nope == 1': .*Column nope does not exist"):
        corrflow.ingest(uri, corpus, "x", value_filter="nope == 1", gene_column="gene_ids")
    with pytest.raises(corrflow.CorrflowError, match="no X layer 'counts'.*data"):
        corrflow.ingest(uri, corpus, "x", counts="layer:counts", gene_column="gene_ids")
    with pytest.raises(corrflow.CorrflowError, match="var has no column 'symbol'.*gene_ids"):
        corrflow.ingest(uri, corpus, "x", gene_column="symbol")
    with pytest.raises(corrflow.CorrflowError, match="has no cells"):
        corrflow.ingest(uri, corpus, "x", value_filter="score > 2", gene_column="gene_ids")
    with pytest.raises(ValueError, match="none of the inputs is one"):
        corrflow.ingest(h5ad, corpus, "x", value_filter="score > 0.5")
    assert not (corpus / "atlases" / "x").exists()
    out = subprocess.run([str(cli_path()), "ingest", "--atlas", "x", "--out", str(corpus), uri], capture_output=True, text=True)
    assert out.returncode == 1 and "TileDB-SOMA experiment" in out.stderr and "corrflow.ingest" in out.stderr, out.stderr
