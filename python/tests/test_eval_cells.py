"""`corrflow eval cells` and `corrflow.eval_cells` against the reference implementations: the
deterministic metrics within 1e-3 of scib-metrics / scikit-learn / scanpy on the same embeddings
and the same exact neighbour lists, the Leiden-based ones within the reference's spread over seeds
at the same resolution, and the PCA baseline equal to scanpy's recipe on the same cells."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import DATA, corrflow

ad = pytest.importorskip("anndata")
sc = pytest.importorskip("scanpy")
scib = pytest.importorskip("scib_metrics")
from scib_metrics.nearest_neighbors import NeighborsResults  # noqa: E402
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score  # noqa: E402
from sklearn.neighbors import NearestNeighbors  # noqa: E402

import corrflow as cf  # noqa: E402

PBMC68K = DATA / "pbmc68k_reduced.h5ad"
TOP = 300  # fewer than the file's 765 genes, so that the HVG selection itself is tested
ARGS = ["--counts", "raw", "--log1p", "--label", "bulk_labels", "--batch", "phase", "--n-top-genes", TOP]


@pytest.fixture(scope="module")
def adata():
    return ad.read_h5ad(PBMC68K)


@pytest.fixture(scope="module")
def cli_report(adata, tmp_path_factory):
    """The CLI on the file's own X_pca, written as `embed` writes embeddings."""
    out = tmp_path_factory.mktemp("eval") / "x_pca.parquet"
    emb = np.asarray(adata.obsm["X_pca"], dtype=np.float32)
    table = pa.table({
        "cell_id": pa.array([str(c) for c in adata.obs_names]),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), emb.shape[1]),
    })
    pq.write_table(table, out)
    printed = corrflow("eval", "cells", "--embeddings", out, "--input", PBMC68K, *ARGS)
    # The table first, the --json summary as the last line.
    assert "* best of the row" in printed
    return json.loads(printed.strip().splitlines()[-1])


def exact_neighbours(x, k):
    nn = NearestNeighbors(n_neighbors=k).fit(x)
    dist, idx = nn.kneighbors(x)
    return NeighborsResults(indices=idx, distances=dist)


def test_the_report_has_every_method_and_metric(cli_report):
    assert set(cli_report["methods"]) == {"embeddings", "pca", "hvg", "random"}
    for m in cli_report["methods"].values():
        for key in ("ari", "nmi", "silhouette_label", "accuracy", "macro_f1", "knn_accuracy",
                    "silhouette_batch", "graph_connectivity", "ilisi", "clisi"):
            assert key in m and np.isfinite(m[key]), key
    assert cli_report["cells"] == 700 and cli_report["classes"] == 10
    assert set(cli_report["best"]) >= {"ari", "nmi", "silhouette_label", "macro_f1"}


def test_deterministic_metrics_match_scib_metrics(adata, cli_report):
    x = np.asarray(adata.obsm["X_pca"], dtype=np.float64)
    labels = adata.obs["bulk_labels"].astype(str).to_numpy()
    batch = adata.obs["phase"].astype(str).to_numpy()
    ours = cli_report["methods"]["embeddings"]
    assert ours["silhouette_label"] == pytest.approx(scib.silhouette_label(x, labels), abs=1e-3)
    assert ours["silhouette_batch"] == pytest.approx(scib.silhouette_batch(x, labels, batch), abs=1e-3)
    nn90 = exact_neighbours(x, 90)
    assert ours["ilisi"] == pytest.approx(scib.ilisi_knn(nn90, batch), abs=1e-3)
    assert ours["clisi"] == pytest.approx(scib.clisi_knn(nn90, labels), abs=1e-3)
    nn15 = exact_neighbours(x, 15)
    assert ours["graph_connectivity"] == pytest.approx(scib.graph_connectivity(nn15, labels), abs=1e-3)


def test_leiden_scores_are_within_the_reference_spread(adata, cli_report):
    ours = cli_report["methods"]["embeddings"]
    res = ours["leiden_resolution"]
    ref = adata.copy()
    sc.pp.neighbors(ref, n_neighbors=15, use_rep="X_pca")
    truth = ref.obs["bulk_labels"].astype(str).to_numpy()
    ari, nmi = [], []
    for seed in range(8):
        sc.tl.leiden(ref, resolution=res, flavor="igraph", n_iterations=-1, random_state=seed, key_added="c")
        ari.append(adjusted_rand_score(truth, ref.obs["c"]))
        nmi.append(normalized_mutual_info_score(truth, ref.obs["c"]))
    # Same graph, same objective, another optimiser's random path: within the seeds' range, with
    # a margin of 0.03 for the few-seed estimate of that range.
    assert min(ari) - 0.03 <= ours["ari"] <= max(ari) + 0.03, (ours["ari"], ari)
    assert min(nmi) - 0.03 <= ours["nmi"] <= max(nmi) + 0.03, (ours["nmi"], nmi)


def test_the_pca_baseline_is_scanpys_recipe(adata, cli_report):
    ref = ad.AnnData(np.expm1(adata.raw.X.toarray()), obs=adata.obs[["bulk_labels"]].copy())
    sc.pp.normalize_total(ref)
    sc.pp.log1p(ref)
    sc.pp.highly_variable_genes(ref, flavor="seurat", n_top_genes=TOP)
    assert cli_report["methods"]["hvg"]["dim"] == int(ref.var["highly_variable"].sum())
    sc.pp.pca(ref, n_comps=50)
    labels = ref.obs["bulk_labels"].astype(str).to_numpy()
    x = np.asarray(ref.obsm["X_pca"], dtype=np.float64)
    ours = cli_report["methods"]["pca"]
    assert ours["dim"] == 50
    assert ours["silhouette_label"] == pytest.approx(scib.silhouette_label(x, labels), abs=1e-3)
    nn90 = exact_neighbours(x, 90)
    assert ours["clisi"] == pytest.approx(scib.clisi_knn(nn90, labels), abs=1e-3)


def test_the_python_function_gives_the_clis_numbers(adata, cli_report):
    frame = cf.eval_cells(adata, "X_pca", "bulk_labels", "phase", counts="raw", log1p=True, n_top_genes=TOP)
    assert list(frame.index) == ["X_pca", "pca", "random", "hvg"]
    ours = cli_report["methods"]
    for method, key in [("embeddings", "X_pca"), ("pca", "pca"), ("hvg", "hvg"), ("random", "random")]:
        for metric in ("ari", "nmi", "silhouette_label", "macro_f1", "ilisi", "graph_connectivity"):
            assert frame.loc[key, metric] == pytest.approx(ours[method][metric], abs=1e-9), (key, metric)
    assert frame.attrs["corrflow"]["best"]


def test_bad_input_is_refused_with_a_clear_message(adata):
    with pytest.raises(ValueError, match="obsm_key"):
        cf.eval_cells(adata, "X_nope", "bulk_labels")
    with pytest.raises(ValueError, match="label"):
        cf.eval_cells(adata, "X_pca", "no_such_column")
    with pytest.raises(cf.CorrflowError, match="neighbours"):
        cf.eval_cells(adata, "X_pca", "bulk_labels", counts="raw", log1p=True, neighbours=0)


def test_without_counts_the_baselines_are_reported_not_computed(adata):
    # X of this file is scaled (negative values): not counts, and not log1p of counts.
    frame = cf.eval_cells(adata, "X_pca", "bulk_labels", counts="X")
    skipped = {s["method"] for s in frame.attrs["corrflow"]["skipped"]}
    assert skipped == {"pca", "hvg", "random"}
    assert list(frame.index) == ["X_pca"]


def _small(labels, genes=40, seed=0):
    """`len(labels)` cells of counts over `genes` genes, an 8-d embedding near 2 × the class code."""
    rng = np.random.default_rng(seed)
    import pandas as pd
    import scipy.sparse as sp

    codes = pd.Categorical(labels).codes
    a = ad.AnnData(sp.csr_matrix(rng.poisson(2.0, size=(len(labels), genes)).astype(np.float32)),
                   obs=pd.DataFrame({"cell_type": pd.Categorical(labels)},
                                    index=[f"c{i}" for i in range(len(labels))]))
    a.obsm["X_emb"] = (rng.normal(size=(len(labels), 8)) * 0.3 + codes[:, None] * 2.0).astype(np.float32)
    return a


def test_one_cell_per_class_skips_the_probes_instead_of_failing():
    import pandas as pd

    # Issue 51, item 7: four classes of one cell, two folds.
    frame = cf.eval_cells(_small(["A", "B", "C", "D"]), "X_emb", "cell_type", baselines=False, folds=2)
    report = frame.attrs["corrflow"]
    assert "0 of the 4 classes" in report["probes_not_computed"]
    assert [c["cells"] for c in report["probe_skipped_classes"]] == [1, 1, 1, 1]
    assert pd.isna(frame.loc["X_emb", "macro_f1"]) and np.isfinite(frame.loc["X_emb", "silhouette_label"])
    # A class smaller than the folds beside larger ones: left out of the probes only.
    frame = cf.eval_cells(_small(["A"] * 8 + ["B"] * 8 + ["C"]), "X_emb", "cell_type", baselines=False, folds=3)
    assert frame.attrs["corrflow"]["probe_skipped_classes"] == [{"class": "C", "cells": 1}]
    assert np.isfinite(frame.loc["X_emb", "macro_f1"])


def test_more_hvgs_than_genes_keeps_every_gene():
    frame = cf.eval_cells(_small(["A"] * 15 + ["B"] * 15), "X_emb", "cell_type", n_top_genes=100000, n_comps=5)
    assert 2 <= frame.loc["hvg", "dim"] <= 40
    assert any("more than the 40 genes" in n for n in frame.attrs["corrflow"]["baseline_notes"])


def test_unusable_embeddings_are_named():
    a = _small(["A"] * 6 + ["B"] * 6)
    a.obsm["X_nan"] = np.full((a.n_obs, 4), np.nan, dtype=np.float32)
    with pytest.raises(cf.CorrflowError, match=r"obsm\['X_nan'\].*finite"):
        cf.eval_cells(a, "X_nan", "cell_type", baselines=False, folds=2)
    a.obsm["X_zero"] = np.zeros((a.n_obs, 0), dtype=np.float32)
    with pytest.raises(cf.CorrflowError, match="0 wide"):
        cf.eval_cells(a, "X_zero", "cell_type", baselines=False, folds=2)
    with pytest.raises(cf.CorrflowError, match="given twice"):
        cf.eval_cells(a, ["X_emb", "X_emb"], "cell_type", baselines=False, folds=2)
