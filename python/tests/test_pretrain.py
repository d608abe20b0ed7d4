"""``corrflow.pretrain`` under torchrun: 2 processes on CPU (gloo), exact resume, disjoint rank
shards, the hf/ directory into ``corrflow import hf``, and the graph's updates between epochs.
Skipped where torch and transformers are not installed."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import ROOT, TINY, cli_path, corrflow  # noqa: E402

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def pretrain(corpus, graph, out, steps, *extra, procs=2, config=TINY, background=False):
    """torchrun --standalone (a free port of its own) with `procs` processes."""
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--standalone", "--nproc-per-node", str(procs), "-m", "corrflow.pretrain",
           "--config", str(config), "--corpus", str(corpus), "--graph", str(graph), "--out", str(out),
           "--max-steps", str(steps), *map(str, extra)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    return p if background else finish(p)


def finish(p):
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1]), err


def metrics(run):
    return [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(work, pbmc_corpus, pbmc_graph):
    """A run stopped at 20 steps and continued to 30, and an uninterrupted 30-step run (made side
    by side)."""
    resumed, whole = work / "pretrain-resumed", work / "pretrain-whole"
    a = pretrain(pbmc_corpus, pbmc_graph, resumed, 20, "--record-cells", background=True)
    b = pretrain(pbmc_corpus, pbmc_graph, whole, 30, background=True)
    first, _ = finish(a)
    finish(b)
    second, err = pretrain(pbmc_corpus, pbmc_graph, resumed, 30, "--record-cells")
    return {"resumed": resumed, "whole": whole, "first": first, "second": second, "err": err}


@pytest.mark.slow
def test_a_resumed_run_equals_an_uninterrupted_one(runs):
    assert runs["first"]["steps"] == 20 and runs["second"]["steps"] == 30
    assert runs["second"]["resumed_from"] == 20 and "resumed from" in runs["err"]
    a, b = metrics(runs["resumed"]), metrics(runs["whole"])
    assert [m["step"] for m in a] == list(range(1, 31)), "every step logged once"
    assert [m["step"] for m in b] == list(range(1, 31))
    for x, y in zip(a, b):
        assert x["loss"] == y["loss"] and x["lr"] == y["lr"], (x, y)
    assert a[-1]["loss"] < a[0]["loss"], "it learns"
    # corrflow train's schema, with the held-out evaluation at eval_every (20) and the end.
    for key in ("step", "epoch", "loss", "lr", "tokens_per_s", "tokens", "masked"):
        assert key in a[0]
    evals = [m for m in a if "eval_loss" in m]
    assert [m["step"] for m in evals] == [20, 30]
    assert all(0 <= m["eval_accuracy"] <= 1 and np.isfinite(m["eval_loss"]) for m in evals)
    assert evals[0]["eval_loss"] == [m for m in b if m["step"] == 20][0]["eval_loss"]


@pytest.mark.slow
def test_a_resume_with_another_world_size_is_refused_naming_both(runs, pbmc_corpus, pbmc_graph):
    """The 2-process run continued by one process: refused before anything is written."""
    import socket

    run = runs["whole"]
    before = (run / "metrics.jsonl").read_bytes()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    cmd = [sys.executable, "-m", "corrflow.pretrain", "--config", str(TINY), "--corpus", str(pbmc_corpus),
           "--graph", str(pbmc_graph), "--out", str(run), "--max-steps", "40"]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**ENV, "MASTER_PORT": port}, timeout=600)
    assert p.returncode == 2, p.stderr[-4000:]
    assert "written by a world of 2 process(es), resumed by 1" in p.stderr, p.stderr[-2000:]
    assert (run / "metrics.jsonl").read_bytes() == before


@pytest.mark.slow
def test_ranks_train_on_disjoint_cells(runs):
    cells = {}
    for r in (0, 1):
        lines = [json.loads(l) for l in (runs["resumed"] / "cells" / f"rank-{r}.jsonl").read_text().splitlines()]
        assert [l["step"] for l in lines] == list(range(1, 31))
        cells[r] = [c for l in lines for c in l["cells"]]
    assert len(cells[0]) == len(cells[1]) == 30 * 8
    assert not set(cells[0]) & set(cells[1]), "no cell on both ranks"
    assert len(set(cells[0])) == len(cells[0]), "no cell twice within an epoch"


@pytest.mark.slow
def test_the_hf_directory_imports_into_corrflow_and_embeds_as_transformers_does(runs, work, pbmc_corpus):
    from transformers import BertForMaskedLM

    hf = runs["resumed"] / "hf"
    model, info = BertForMaskedLM.from_pretrained(hf, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    imported = work / "pretrain-imported"
    s = json.loads(corrflow("import", "hf", "--model", hf, "--out", imported).strip().splitlines()[-1])
    assert s["not_imported"] == [] and s["layers"] == 2 and s["hidden"] == 64
    # Every file of hf/ checked against the sha256 record the run wrote.
    assert s["sha256_checked"] == len((hf / "corrflow_sha256.txt").read_text().splitlines()) > 3
    onnx = work / "pretrain.onnx"
    corrflow("export", "onnx", "--checkpoint", imported, "--out", onnx)
    # The exported model's cell embeddings are transformers' (mean over genes, last layer).
    import anndata

    import corrflow as cf

    adata = anndata.read_h5ad(ROOT / "datasets" / "default" / "pbmc1k.h5ad")[:4].copy()
    got = cf.embed(adata, model=onnx, key=None, gene_column="gene_ids")
    tokens = cf.tokenize(adata, gene_column="gene_ids", as_lists=True)
    want = []
    model.eval()
    with torch.no_grad():
        for t in tokens:
            states = model.bert(input_ids=torch.tensor([t])).last_hidden_state[0]
            want.append(states.mean(0).numpy())
    assert np.abs(np.asarray(got) - np.stack(want)).max() < 1e-4


@pytest.mark.slow
def test_a_graph_updated_between_runs_masks_the_next_epoch(work, pbmc_corpus, tmp_path):
    """Batches of 64 cells of 32 tokens, 2 epochs; the graph is replaced after the first, and the
    next epoch logs the change (the same check runs at every epoch of a longer run)."""
    import corrflow as cf

    config = tmp_path / "small.toml"
    text = TINY.read_text().replace("batch_size = 8", "batch_size = 64").replace("max_len = 256", "max_len = 32")
    config.write_text(text.replace("eval_cells = 48", "eval_cells = 8").replace("epochs = 1", "epochs = 2"))
    graph = tmp_path / "graph"
    corrflow("graph", "build", "--corpus", pbmc_corpus, "--out", graph)
    epoch = len(cf.MaskedBatches(pbmc_corpus, graph, batch_size=64, max_len=32, group_batches=10,
                                 shuffle_buffer=2000, eval_fraction=0.05))
    run = tmp_path / "run"
    first, _ = pretrain(pbmc_corpus, graph, run, epoch, procs=1, config=config)
    assert metrics(run)[-1]["epoch"] == 0
    other = tmp_path / "other.toml"
    other.write_text(text.replace("rho_min = 0.2", "rho_min = 0.3"))
    rebuilt = tmp_path / "graph2"
    corrflow("graph", "build", "--corpus", pbmc_corpus, "--out", rebuilt, config=other)
    shutil.rmtree(graph)
    rebuilt.rename(graph)
    second, err = pretrain(pbmc_corpus, graph, run, epoch + 2, procs=1, config=config)
    assert "epoch 1: the graph changed" in err, err[-2000:]
    assert metrics(run)[-1]["epoch"] == 1


@pytest.mark.slow
def test_fsdp_with_gradient_accumulation_trains_and_a_ddp_run_resumes_it(work, pbmc_corpus, pbmc_graph):
    """FSDP2 on 2 CPU processes, 2 micro-batches per step; its full-state checkpoint resumes
    under DDP."""
    run = work / "pretrain-fsdp"
    first, _ = pretrain(pbmc_corpus, pbmc_graph, run, 3, "--fsdp", "--grad-accum", "2")
    assert first["fsdp"] and first["steps"] == 3
    m = metrics(run)
    assert [x["step"] for x in m] == [1, 2, 3] and all(x["tokens"] == 2 * 2 * 8 * 256 for x in m)
    second, err = pretrain(pbmc_corpus, pbmc_graph, run, 4, "--grad-accum", "2")
    assert second["resumed_from"] == 3 and not second["fsdp"]
    assert [x["step"] for x in metrics(run)] == [1, 2, 3, 4]
    assert np.isfinite(metrics(run)[-1]["loss"])


def test_bad_settings_are_refused_with_the_file_and_key(tmp_path, pbmc_corpus, pbmc_graph, capsys):
    from corrflow.pretrain.cli import main

    bad = tmp_path / "bad.toml"
    bad.write_text(TINY.read_text().replace('objective = "mlm"', 'objective = "wced"'))
    args = ["--corpus", str(pbmc_corpus), "--graph", str(pbmc_graph), "--out", str(tmp_path / "run")]
    assert main(["--config", str(bad), *args]) == 2
    assert "[model].objective = 'wced'" in capsys.readouterr().err
    bad.write_text(TINY.read_text().replace("lr = 1e-3", "lr = 1e-3\nlearning_rate = 1"))
    assert main(["--config", str(bad), *args]) == 2
    assert "[train].learning_rate: unknown field `learning_rate`, expected one of" in capsys.readouterr().err
    # A wrong value is named by its key.
    bad.write_text(TINY.read_text().replace("lr = 1e-3", "lr = \"fast\""))
    assert main(["--config", str(bad), *args]) == 2
    assert "[train].lr: invalid type: string \"fast\", expected f64" in capsys.readouterr().err
    # [train]'s checks are the trainer's own (TrainConfig::validate), with the file named.
    bad.write_text(TINY.read_text().replace("mask_workers = 1", "mask_workers = 0"))
    assert main(["--config", str(bad), *args]) == 2
    assert f"{bad}: [train]: train.mask_workers must be in 1..=256" in capsys.readouterr().err
    # --out must not be (or hold) an input.
    assert main(["--config", str(TINY), "--corpus", str(pbmc_corpus), "--graph", str(pbmc_graph),
                 "--out", str(pbmc_corpus)]) == 2
    assert "overlap: refusing to write into an input" in capsys.readouterr().err
    assert not (pbmc_corpus / "metrics.jsonl").exists()
