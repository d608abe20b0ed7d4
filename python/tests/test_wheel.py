"""The wheel one would upload (scripts/wheel.sh, `make wheel`; issue 44 item 5): manylinux by
PyPA's auditwheel, HDF5 bundled, and installable in a fresh venv from binaries only, where
`corrflow.embed` runs with the `onnxruntime` package and `corrflow.ingest` reads an h5ad through
the bundled HDF5."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import BUNDLED, ROOT


def wheel_path() -> Path:
    """The wheel `scripts/python-package.sh` built and installed for this test run."""
    if os.environ.get("CORRFLOW_WHEEL"):
        return Path(os.environ["CORRFLOW_WHEEL"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache" / "corrflow" / "target"))
    wheels = sorted((target / "wheels").glob("corrflow-*manylinux*.whl")) or sorted((ROOT / "dist").glob("corrflow-*.whl"))
    assert wheels, "no wheel: scripts/python-package.sh (make test) or make wheel builds one"
    return wheels[-1]


def test_the_wheel_is_abi3_manylinux_and_bundles_hdf5():
    wheel = wheel_path()
    assert "-cp39-abi3-manylinux_2_34_x86_64" in wheel.name, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("corrflow.libs/libhdf5") for n in names), names
    assert not any("onnxruntime" in n for n in names), "ONNX Runtime comes from its PyPI package"
    auditwheel = Path(sys.executable).parent / "auditwheel"
    out = subprocess.run([str(auditwheel), "show", str(wheel)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert 'consistent with the following platform tag: "manylinux_2_34_x86_64"' in " ".join(out.stdout.split())


FRESH = r"""
import os, subprocess, sys, warnings
import anndata, numpy as np
import corrflow, corrflow._native as native
# The extension's HDF5 is the bundled copy, not the system's.
ldd = subprocess.run(["ldd", native.__file__], capture_output=True, text=True).stdout
hdf5 = [l for l in ldd.splitlines() if "libhdf5" in l]
assert hdf5 and all("corrflow.libs" in l for l in hdf5), ldd
model, h5ad, corpus = sys.argv[1:4]
a = anndata.read_h5ad(h5ad)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    e = corrflow.embed(a, model, gene_column="gene_ids")
assert e.shape[0] == a.n_obs and np.isfinite(e).all(axis=1).sum() > 0.9 * a.n_obs, e.shape
s = corrflow.ingest([h5ad], corpus=corpus, atlas="fresh", gene_column="gene_ids")
assert s["cells_kept"] > 0, s
print("ok", e.shape)
"""


def test_a_fresh_venv_installs_it_without_compiling_and_embeds(tmp_path, onnx_model):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--only-binary", ":all:"]
    # onnxruntime comes as a dependency (pinned here to the tests' version); anndata to read the
    # h5ad. --only-binary: nothing may compile.
    out = subprocess.run(pip + [str(wheel_path()), "onnxruntime==1.31.1", "anndata"], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    show = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "show", "corrflow"], capture_output=True, text=True)
    assert "onnxruntime" in show.stdout, show.stdout
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
    run = subprocess.run([str(venv / "bin" / "python"), "-c", FRESH, str(onnx_model), str(BUNDLED), str(tmp_path / "corpus")],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("ok"), run.stdout
