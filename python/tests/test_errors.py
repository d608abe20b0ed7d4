"""Bad input raises a clear exception; a Ctrl-C interrupts a long call."""

import signal
import subprocess
import sys
import textwrap
import time

import anndata
import numpy as np
import pytest
import scipy.sparse as sp

import corrflow
from conftest import BUNDLED, ROOT


def small():
    return anndata.read_h5ad(BUNDLED)[:20].copy()


def test_a_matrix_of_the_wrong_dtype_is_refused():
    adata = small()
    adata.X = adata.X.toarray() > 0
    with pytest.raises(TypeError, match="dtype bool"):
        corrflow.tokenize(adata, gene_column="gene_ids")


def test_a_missing_gene_column_names_the_columns_there_are():
    with pytest.raises(ValueError, match="gene_column='nope'.*gene_ids"):
        corrflow.tokenize(small(), gene_column="nope")


def test_nan_counts_name_the_cell_and_the_gene():
    adata = small()
    X = adata.X.tocsr(copy=True)
    X.data[5] = np.nan
    adata.X = X
    with pytest.raises(corrflow.CorrflowError, match=r"cell \d+ \('.*'\), gene '.*': a non-finite value"):
        corrflow.tokenize(adata, gene_column="gene_ids")


def test_normalized_values_are_refused_unless_allowed():
    adata = small()
    adata.X = adata.X * 0.5
    with pytest.raises(corrflow.CorrflowError, match="non-integer count"):
        corrflow.tokenize(adata, gene_column="gene_ids")
    assert corrflow.tokenize(adata, gene_column="gene_ids", allow_normalized=True).null_count < adata.n_obs


def test_genes_outside_the_vocabulary_and_unknown_options_are_reported():
    adata = small()
    adata.var_names = [f"not-a-gene-{i}" for i in range(adata.n_vars)]
    with pytest.raises(corrflow.CorrflowError, match="none of its .* genes is in vocabulary"):
        corrflow.tokenize(adata)
    with pytest.raises(ValueError, match="version must be"):
        corrflow.tokenize(small(), gene_column="gene_ids", version="v3")
    with pytest.raises(ValueError, match="counts='layer:x'"):
        corrflow.tokenize(small(), gene_column="gene_ids", counts="layer:x")


def test_a_corrupt_shard_is_refused_on_read(work, pbmc_corpus):
    import shutil

    copy = work / "corrupt_corpus"
    shutil.copytree(pbmc_corpus, copy)
    shard = corrflow.Corpus(copy).shards()[0]["path"]
    data = bytearray(open(shard, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(shard, "wb").write(bytes(data))
    with pytest.raises(corrflow.CorrflowError, match="checksum|sha256"):
        corrflow.Corpus(copy).to_arrow()


def test_masked_batches_refuse_bad_ranks_strategies_and_parameters(pbmc_corpus, pbmc_graph):
    with pytest.raises(ValueError, match="rank 2 is not one of world_size 2"):
        corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, rank=2, world_size=2)
    with pytest.raises(ValueError, match="unknown masking strategy 'bert'"):
        corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, strategy="bert")
    with pytest.raises(ValueError, match="unknown parameter 'q'"):
        corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, q=0.1)
    with pytest.raises(corrflow.CorrflowError, match="needs a dependency graph"):
        corrflow.MaskedBatches(pbmc_corpus)
    with pytest.raises(corrflow.CorrflowError, match="mask.p must be in"):
        corrflow.MaskedBatches(pbmc_corpus, pbmc_graph, p=1.5)


def run_and_interrupt(script: str, after: float = 1.0):
    """Starts `script`, waits for it to print 'started', sends SIGINT `after` seconds later and
    returns (seconds from the signal to its exit, stderr)."""
    # The child gets SIGINT's default disposition: a runner that started this test in the
    # background with SIGINT ignored would pass that on, and Python then installs no handler.
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().strip() == "started", proc.stderr.read()
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=60)
    return time.monotonic() - t0, err, proc.returncode


def test_ctrl_c_interrupts_a_long_tokenize():
    script = """
        import anndata, numpy as np, scipy.sparse as sp, corrflow
        rng = np.random.default_rng(0)
        base = anndata.read_h5ad(%r)
        X = sp.vstack([base.X] * 400).tocsr()   # 400k cells: minutes of tokenizing
        adata = anndata.AnnData(X=X, var=base.var)
        print("started", flush=True)
        corrflow.tokenize(adata, gene_column="gene_ids")
        print("finished", flush=True)
    """ % str(BUNDLED)
    seconds, err, code = run_and_interrupt(script)
    assert "KeyboardInterrupt" in err and code != 0, err
    assert seconds < 10, f"took {seconds:.1f}s to stop"


def test_ctrl_c_stops_an_ingest_which_then_resumes(work):
    big = work / "big.h5ad"
    base = anndata.read_h5ad(BUNDLED)
    anndata.AnnData(X=sp.vstack([base.X] * 40).tocsr(), var=base.var).write_h5ad(big)
    corpus = work / "interrupted_corpus"
    # One cell per chunk: ~5 s of ingest, so the signal comes in the middle of it.
    options = dict(shard_cells=1000, chunk_cells=1)
    script = f"""
        import corrflow
        print("started", flush=True)
        corrflow.ingest([{str(big)!r}], {str(corpus)!r}, "big", gene_column="gene_ids", **{options!r})
    """
    seconds, err, code = run_and_interrupt(script, after=1.5)
    assert "KeyboardInterrupt" in err and code != 0, err
    assert seconds < 10, f"took {seconds:.1f}s to stop"
    summary = corrflow.ingest([big], corpus, "big", gene_column="gene_ids", **options)
    assert summary["resumed_shards"] >= 1 and summary["cells_kept"] == corrflow.Corpus(corpus).n_cells


# --- what a new user passes, runs and reads (issue 44) ----------------------------------------


@pytest.mark.parametrize("fn", ["tokenize", "embed"])
def test_a_path_or_a_bare_matrix_instead_of_an_anndata_is_a_type_error_saying_what_is_accepted(fn):
    call = getattr(corrflow, fn)
    for wrong, says in [
        (str(BUNDLED), "corrflow.ingest"),
        (BUNDLED, "anndata.read_h5ad"),
        (np.ones((3, 4), dtype=np.float32), "anndata.AnnData(X=matrix"),
        (sp.csr_matrix(np.ones((3, 4))), "gene ids"),
        ({"X": 1}, "expected an AnnData"),
    ]:
        with pytest.raises(TypeError, match="expected an AnnData") as e:
            call(wrong)
        assert says in str(e.value), str(e.value)


def test_embed_warns_of_cells_without_vocabulary_genes_and_drops_them_when_asked(onnx_model):
    adata = small()
    keep = np.ones(adata.n_obs)
    keep[3] = 0  # a cell with no count at all has no token
    X = (sp.diags(keep) @ adata.X.tocsr()).tocsr().astype(np.float32)
    X.eliminate_zeros()
    adata.X = X
    with pytest.warns(UserWarning, match="1 of 20 cells express no gene of the model's vocabulary"):
        out = corrflow.embed(adata, model=onnx_model, gene_column="gene_ids")
    assert np.isnan(out[3]).all() and not np.isnan(np.delete(out, 3, axis=0)).any()
    name = adata.obs_names[3]
    out = corrflow.embed(adata, model=onnx_model, gene_column="gene_ids", drop_empty=True)
    assert adata.n_obs == 19 and name not in adata.obs_names
    assert out.shape[0] == 19 and not np.isnan(out).any()
    assert adata.obsm["X_corrflow"].shape == out.shape


def readme_python_snippet() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("\n## Python") :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```", start)]


def test_the_readme_python_snippet_runs_in_a_fresh_clone(tmp_path, onnx_model):
    """README's snippet, run as a reader of a fresh clone would (from its root, with the files
    that ship and the tour's exported model), finishes without an error."""
    import shutil

    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "default").symlink_to(ROOT / "datasets" / "default")
    (tmp_path / "out").mkdir()
    shutil.copy(onnx_model, tmp_path / "out" / "model.onnx")
    shutil.copytree(onnx_model.with_suffix(".vocab"), tmp_path / "out" / "model.vocab")
    snippet = readme_python_snippet()
    assert "datasets/data" not in snippet.split("#")[0], "the snippet needs only files that ship"
    out = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{snippet}\n{out.stderr}"


def test_the_served_openapi_document_is_valid_openapi_3_0(onnx_model):
    """/openapi.json as served passes openapi-spec-validator (client generators reject what it
    rejects)."""
    validator = pytest.importorskip(
        "openapi_spec_validator",
        reason="openapi-spec-validator is not installed: pip install -r tests/python/requirements.txt",
    )
    import json
    import urllib.request

    from conftest import cli_path

    server = subprocess.Popen(
        [str(cli_path()), "serve", "--model", str(onnx_model), "--addr", "127.0.0.1:0"],
        stderr=subprocess.PIPE, text=True,
    )
    try:
        line = ""
        while "listening on http://" not in line:
            line = server.stderr.readline()
            assert line, "the server exited without listening"
        url = line.split("listening on ")[1].strip()
        with urllib.request.urlopen(f"{url}/openapi.json", timeout=30) as r:
            doc = json.load(r)
        assert doc["openapi"] == "3.0.3"
        validator.validate(doc)
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stderr.close()
