"""``corrflow.pretrain`` on 2 nodes: ``torchrun --nnodes 2`` whose nodes are two network namespaces
of this machine, joined by a veth pair with private addresses of the test's own (no traffic
leaves the machine). Needs root (``ip netns add``); skipped where that is not allowed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import TINY  # noqa: E402


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@pytest.fixture
def two_hosts():
    """Namespaces cf<pid>a / cf<pid>b with 10.213.<n>.1 and .2 on a veth pair; removed after."""
    tag = f"cf{os.getpid() % 100000}"
    names = (f"{tag}a", f"{tag}b")
    if subprocess.run(["ip", "netns", "add", names[0]], capture_output=True).returncode != 0:
        pytest.skip("`ip netns add` is not permitted here (needs root)")
    try:
        ip("netns", "add", names[1])
        subnet = f"10.213.{os.getpid() % 250}"
        ends = (f"{tag}va", f"{tag}vb")
        ip("link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
        for ns, end, host in zip(names, ends, (1, 2)):
            ip("link", "set", end, "netns", ns)
            ip("-n", ns, "addr", "add", f"{subnet}.{host}/24", "dev", end)
            ip("-n", ns, "link", "set", end, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield list(zip(names, ends)), f"{subnet}.1"
    finally:
        for ns in names:
            ip("netns", "del", ns, check=False)


@pytest.mark.slow
def test_two_namespace_nodes_train_one_run_on_disjoint_cells(two_hosts, pbmc_corpus, pbmc_graph, tmp_path):
    hosts, head = two_hosts
    torchrun = Path(sys.executable).with_name("torchrun")
    run = tmp_path / "run"
    procs = []
    for rank, (ns, end) in enumerate(hosts):
        # gloo binds to the namespace's own interface (the hostname resolves to neither).
        env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": end}
        cmd = ["ip", "netns", "exec", ns, str(torchrun), "--nnodes", "2", "--node-rank", str(rank),
               "--nproc-per-node", "1", "--master-addr", head, "--master-port", "29611",
               "-m", "corrflow.pretrain", "--config", str(TINY), "--corpus", str(pbmc_corpus),
               "--graph", str(pbmc_graph), "--out", str(run), "--max-steps", "3", "--record-cells"]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-4000:]
    summary = json.loads([o for o, _ in outs if o.strip()][0].strip().splitlines()[-1])
    assert summary["world_size"] == 2 and summary["steps"] == 3
    cells = []
    for r in (0, 1):
        lines = [json.loads(l) for l in (run / "cells" / f"rank-{r}.jsonl").read_text().splitlines()]
        cells.append({c for l in lines for c in l["cells"]})
    assert len(cells[0]) == len(cells[1]) == 3 * 8 and not cells[0] & cells[1]
    assert (run / "hf" / "model.safetensors").exists()
