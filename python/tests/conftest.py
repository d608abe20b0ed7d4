"""Fixtures: corpora, graphs, a training run and an ONNX model made by the corrflow CLI, which the
package's results are compared with."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "datasets" / "data"
BUNDLED = ROOT / "datasets" / "default" / "pbmc1k.h5ad"
TINY = ROOT / "configs" / "tiny.toml"


def cli_path() -> Path:
    if os.environ.get("CORRFLOW_BIN"):
        return Path(os.environ["CORRFLOW_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache" / "corrflow" / "target"))
    return target / "release" / "corrflow"


def corrflow(*args, config=TINY):
    """Runs the corrflow CLI with `--json` and returns its summary."""
    cmd = [str(cli_path()), "--config", str(config), "--json", *map(str, args)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stderr}"
    return json.loads(out.stdout) if out.stdout.strip().startswith("{") else out.stdout


@pytest.fixture(scope="session")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("corrflow")


@pytest.fixture(scope="session")
def pbmc_corpus(work):
    """The bundled PBMC cells ingested by the CLI (tiny shards: many shard boundaries)."""
    out = work / "pbmc_corpus"
    corrflow("ingest", "--atlas", "pbmc1k", "--gene-column", "gene_ids", "--out", out, BUNDLED)
    return out


@pytest.fixture(scope="session")
def kang_corpus(work):
    out = work / "kang_corpus"
    corrflow("ingest", "--atlas", "ctrl", "--out", out, DATA / "kang_ctrl.h5ad")
    return out


@pytest.fixture(scope="session")
def pbmc_graph(work, pbmc_corpus):
    out = work / "pbmc_graph"
    corrflow("graph", "build", "--corpus", pbmc_corpus, "--out", out)
    return out


@pytest.fixture(scope="session")
def onnx_model(work, pbmc_corpus, pbmc_graph):
    """A tiny model trained for a few steps on the bundled cells, exported to ONNX."""
    run = work / "run"
    corrflow("train", "--corpus", pbmc_corpus, "--graph", pbmc_graph, "--out", run, "--max-steps", 4)
    model = work / "model.onnx"
    corrflow("export", "onnx", "--checkpoint", run, "--out", model)
    return model
