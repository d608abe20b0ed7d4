"""``corrflow.pretrain`` under attack: killed (SIGKILL) while writing a checkpoint, resumed with
another ``--grad-accum``, resumed from an edited ``state.json`` or a damaged optimizer file, and
bad flags and presets. One process each, a tiny model, 6 steps (the 2-process cases are in
test_pretrain.py). Skipped where torch and transformers are not installed."""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import TINY  # noqa: E402

STEPS = 6

# Runs corrflow.pretrain and kills itself with SIGKILL at one point of the step-4 checkpoint's
# write: no test hook in the trainer, the process just dies there as under `kill -9`.
KILLER = r'''
import io, os, signal, sys
from pathlib import Path
import torch

point, stage = sys.argv[1], sys.argv[2]

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if point == "mid-file":
    # optim.pt half written.
    real_save = torch.save
    def save(obj, f, *args, **kw):
        name = os.fspath(f) if isinstance(f, (str, os.PathLike)) else getattr(f, "name", "")
        if stage in str(name) and str(name).endswith("optim.pt"):
            buf = io.BytesIO()
            real_save(obj, buf, *args, **kw)
            f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
            f.flush()
            die()
        return real_save(obj, f, *args, **kw)
    torch.save = save
elif point == "before-rename":
    # Every file and the sealed state.json written, the directory not yet renamed into place.
    real_rename = Path.rename
    def rename(self, target):
        if self.name == stage:
            die()
        return real_rename(self, target)
    Path.rename = rename

from corrflow.pretrain.cli import main
sys.exit(main(sys.argv[3:]))
'''


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    """TINY with short cells, a checkpoint every 2 steps and the held-out evaluation at the end."""
    text = TINY.read_text()
    for old, new in (("max_len = 256", "max_len = 64"), ("eval_every = 20", "eval_every = 1000"),
                     ("checkpoint_every = 20", "checkpoint_every = 2"), ("eval_cells = 48", "eval_cells = 8")):
        assert old in text
        text = text.replace(old, new)
    path = tmp_path_factory.mktemp("pretrain-attacks") / "attacks.toml"
    path.write_text(text)
    return path


def pretrain(config, corpus, graph, out, *extra, steps=STEPS, kill=None):
    """`python -m corrflow.pretrain` (a world of one); `kill`: (point, stage directory name)."""
    args = ["--config", str(config), "--corpus", str(corpus), "--graph", str(graph), "--out", str(out),
            "--max-steps", str(steps), *map(str, extra)]
    head = ["-c", KILLER, *kill] if kill else ["-m", "corrflow.pretrain"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_PORT": free_port()}
    return subprocess.run([sys.executable, *head, *args], capture_output=True, text=True, env=env, timeout=600)


def metrics(run):
    return [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def reference(config, pbmc_corpus, pbmc_graph, tmp_path_factory):
    run = tmp_path_factory.mktemp("pretrain-reference") / "run"
    p = pretrain(config, pbmc_corpus, pbmc_graph, run)
    assert p.returncode == 0, p.stderr[-4000:]
    return run


@pytest.mark.slow
@pytest.mark.parametrize("point", ["mid-file", "before-rename"])
def test_a_run_killed_while_writing_a_checkpoint_resumes_to_the_uninterrupted_runs_losses(
        point, config, pbmc_corpus, pbmc_graph, reference, tmp_path):
    run = tmp_path / "run"
    stage = ".step-00000004.partial"
    p = pretrain(config, pbmc_corpus, pbmc_graph, run, kill=(point, stage))
    assert p.returncode == -9, (p.returncode, p.stderr[-4000:])
    done = sorted(d.name for d in (run / "checkpoints").iterdir())
    assert done == [stage, "step-00000002"], "the partial checkpoint is never published"
    assert [m["step"] for m in metrics(run)] == [1, 2, 3, 4], "logged before the kill"
    p = pretrain(config, pbmc_corpus, pbmc_graph, run)
    assert p.returncode == 0, p.stderr[-4000:]
    assert "resumed from" in p.stderr and "step-00000002" in p.stderr
    got, want = metrics(run), metrics(reference)
    assert [m["step"] for m in got] == list(range(1, STEPS + 1)), "no step logged twice"
    for a, b in zip(got, want):
        assert (a["loss"], a["lr"]) == (b["loss"], b["lr"]), (a, b)
    assert got[-1]["eval_loss"] == want[-1]["eval_loss"]
    assert sorted(d.name for d in (run / "checkpoints").iterdir()) == ["step-00000004", "step-00000006"]


def resume_refused(config, pbmc_corpus, pbmc_graph, run, *extra):
    before = (run / "metrics.jsonl").read_bytes()
    p = pretrain(config, pbmc_corpus, pbmc_graph, run, *extra, steps=STEPS + 2)
    assert p.returncode == 2, p.stderr[-4000:]
    assert (run / "metrics.jsonl").read_bytes() == before, "a refused resume changes nothing"
    return p.stderr


@pytest.mark.slow
def test_an_edited_state_a_damaged_optimizer_or_another_grad_accum_is_refused(
        config, pbmc_corpus, pbmc_graph, reference, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    ckpt = run / "checkpoints" / "step-00000006"
    state = (ckpt / "state.json").read_bytes()
    # Another micro-batch position, the file still valid JSON.
    edited = state.replace(b'"step": 6', b'"step": 5')
    assert edited != state
    (ckpt / "state.json").write_bytes(edited)
    err = resume_refused(config, pbmc_corpus, pbmc_graph, run)
    assert "state.json: does not match the checksum recorded in it (damaged or edited)" in err, err[-2000:]
    (ckpt / "state.json").write_bytes(state)
    # One flipped bit in the optimizer's file.
    optim = (ckpt / "optim.pt").read_bytes()
    (ckpt / "optim.pt").write_bytes(optim[:1000] + bytes([optim[1000] ^ 1]) + optim[1001:])
    err = resume_refused(config, pbmc_corpus, pbmc_graph, run)
    assert "optim.pt: does not match its checksum (damaged or modified): sha256 " in err, err[-2000:]
    digests = [w for w in err.replace(",", " ").split() if len(w) == 64]
    assert len(digests) == 2 and digests[0] != digests[1], err[-2000:]
    (ckpt / "optim.pt").write_bytes(optim)
    err = resume_refused(config, pbmc_corpus, pbmc_graph, run, "--grad-accum", "2")
    assert "written with --grad-accum 1, resumed with --grad-accum 2" in err, err[-2000:]


def test_a_world_size_change_is_refused_naming_both_sizes(tmp_path):
    from corrflow.pretrain.loop import check_resumable

    saved = {"world_size": 2, "grad_accum": 1, "settings": {"model": {}, "train": {"lr": 1e-3}, "mask": {}}}
    with pytest.raises(ValueError, match=r"written by a world of 2 process\(es\), resumed by 1"):
        check_resumable(tmp_path, saved, {**saved, "world_size": 1})
    with pytest.raises(ValueError, match=r"\[train\].lr: 0.001 in the checkpoint, 0.002 now"):
        check_resumable(tmp_path, saved, {**saved, "settings": {**saved["settings"], "train": {"lr": 2e-3}}})


def test_a_line_cut_short_by_a_kill_is_dropped_from_the_metrics(tmp_path):
    from corrflow.pretrain.loop import _truncate_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n{"ste')
    _truncate_metrics(path, 2)
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'
    path.write_text('{"step": 1}\n{"ste\n{"step": 2}\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        _truncate_metrics(path, 2)


def test_a_sealed_state_verifies_and_any_changed_byte_is_refused(tmp_path):
    from corrflow.pretrain.checkpoint import read_state, sealed_json

    state = {"step": 4, "files": {"model.pt": "0" * 64}}
    data = sealed_json(state)
    (tmp_path / "state.json").write_bytes(data)
    assert read_state(tmp_path) == {**state, "state_sha256": json.loads(data)["state_sha256"]}
    for i in range(0, len(data), 7):
        (tmp_path / "state.json").write_bytes(data[:i] + bytes([data[i] ^ 0x20]) + data[i + 1:])
        with pytest.raises(ValueError, match="checksum"):
            read_state(tmp_path)
    (tmp_path / "state.json").write_text(json.dumps(state, indent=1))
    with pytest.raises(ValueError, match="has no checksum"):
        read_state(tmp_path)


@pytest.mark.parametrize("flag, value, want", [
    ("--max-steps", "0", "--max-steps 0: must be a positive number of optimizer steps"),
    ("--max-steps", "-3", "--max-steps -3: must be a positive number of optimizer steps"),
    ("--grad-accum", "0", "--grad-accum 0: must be >= 1"),
])
def test_bad_numbers_are_refused_naming_the_flag(flag, value, want, tmp_path, pbmc_corpus, pbmc_graph, capsys):
    from corrflow.pretrain.cli import main

    args = ["--config", str(TINY), "--corpus", str(pbmc_corpus), "--graph", str(pbmc_graph),
            "--out", str(tmp_path / "run"), flag, value]
    assert main(args) == 2
    assert want in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("objective, want", [
    ("wced", "[model].objective = 'wced' needs model.input = 'value' or 'bins' (a value model); on ranks, "
             "'wced-rank' is trained by `corrflow train`"),
    ("poisson", "[model].objective = 'poisson': corrflow.pretrain trains BERT's masked-LM objective and the value "
                "models (allowed: 'mlm', 'txfm', 'wced')"),
    ("mlmm", "[model].objective = 'mlmm' is not an objective (corrflow's: mlm, wced-rank, poisson, txfm, wced); "
             "corrflow.pretrain trains 'mlm', 'txfm', 'wced'"),
])
def test_objectives_it_does_not_train_are_refused_naming_the_key_and_the_allowed(
        objective, want, tmp_path, pbmc_corpus, pbmc_graph, capsys):
    from corrflow.pretrain.cli import main

    bad = tmp_path / "bad.toml"
    bad.write_text(TINY.read_text().replace('objective = "mlm"', f'objective = "{objective}"'))
    args = ["--config", str(bad), "--corpus", str(pbmc_corpus), "--graph", str(pbmc_graph),
            "--out", str(tmp_path / "run")]
    assert main(args) == 2
    assert want in capsys.readouterr().err


def test_init_from_checks_the_sha256_record_of_an_exported_directory(tmp_path):
    from corrflow.pretrain.model import RECORD, _write_record, verify_record

    (tmp_path / "vocab").mkdir()
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "vocab" / "token_dictionary.tsv").write_text("token\tid\n")
    verify_record(tmp_path)  # no record: a Hugging Face download, unchecked
    _write_record(tmp_path)
    assert (tmp_path / RECORD).read_text().splitlines()[1].endswith("  vocab/token_dictionary.tsv")
    verify_record(tmp_path)
    (tmp_path / "config.json").write_text("{ }")
    with pytest.raises(ValueError, match=r"config.json: does not match the sha256 recorded") as e:
        verify_record(tmp_path)
    assert len([w for w in str(e.value).replace(",", " ").split() if len(w) == 64]) == 2
