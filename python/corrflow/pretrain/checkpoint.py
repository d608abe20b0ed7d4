"""Checkpoints of a ``corrflow.pretrain`` run, and resuming from them exactly.

```
RUN/checkpoints/step-00000020/model.pt      full (unsharded) model state, as BertForMaskedLM names it
                              optim.pt      AdamW state (full, by parameter name)
                              sched.pt      the learning-rate schedule's state
                              rng-R.pt      rank R's torch / CUDA / Python RNG states (dropout)
                              state.json    step, data position (epoch, micro-batch), graph hash,
                                            world size, the settings, the sha256 of every file
                                            above ("files"), and as its last field state_sha256:
                                            the sha256 of its own bytes before it; written last
RUN/checkpoints/.step-00000020.partial/     a checkpoint being written
```
A checkpoint is written into the ``.partial`` directory, each file flushed to disk (fsync), and
renamed into place whole: a run killed at any point (kill -9 included) leaves its previous
checkpoints as they were, and the partial one is never read. Loading checks ``state.json``
against its own checksum and every file against the checksum it records (the sealed format of
``corrflow train``'s checkpoints, ``corrflow_io::util::sealed``), so a damaged or edited file is
refused, naming it, instead of resuming from it.

Model and optimizer go through ``torch.distributed.checkpoint.state_dict`` as full state dicts,
so DDP and FSDP runs write the same files and resume each other. RUN must be on a file system
every node sees (as with any multi-node checkpoint).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
import torch.distributed as dist

STATE = "state.json"
#: The last field of ``state.json``: the sha256 of the file's bytes before it.
CHECKSUM_KEY = "state_sha256"
_END = '"\n}\n'


def checkpoints(run: Path) -> Path:
    return run / "checkpoints"


def step_dir(run: Path, step: int) -> Path:
    return checkpoints(run) / f"step-{step:08d}"


def latest(run: Path) -> Optional[Path]:
    """The newest complete checkpoint (one with its state.json)."""
    found = sorted(p for p in checkpoints(run).glob("step-*") if (p / STATE).is_file())
    return found[-1] if found else None


def _options(**kw):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True, **kw)


# --- the files -----------------------------------------------------------------------------------

def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_bytes(path: Path, data: bytes) -> None:
    """``data`` into ``path``, flushed to disk before it returns."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _save(obj: Any, path: Path) -> None:
    """``torch.save`` of ``obj`` into ``path``, flushed to disk before it returns."""
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sealed_json(state: Dict[str, Any]) -> bytes:
    """``state`` as pretty JSON whose last field ``state_sha256`` is the sha256 of the bytes before
    it (``corrflow_io::util::sealed``'s layout)."""
    text = json.dumps(state, indent=2)
    if not (text.startswith("{") and text.endswith("\n}")) or len(state) == 0:
        raise ValueError("a sealed state must be a JSON object with fields")
    body = text[: -len("\n}")]
    digest = hashlib.sha256(body.encode()).hexdigest()
    return f'{body},\n  "{CHECKSUM_KEY}": "{digest}{_END}'.encode()


def read_state(ckpt: Path) -> Dict[str, Any]:
    """``ckpt``'s state.json, checked against the checksum it carries; ValueError naming the file
    when it is damaged, edited or unsealed."""
    path = ckpt / STATE
    data = path.read_bytes()
    opening = f',\n  "{CHECKSUM_KEY}": "'.encode()
    head = data[: -len(_END)] if data.endswith(_END.encode()) else None
    body, recorded = (head[:-64], head[-64:]) if head is not None and len(head) >= 64 else (None, b"")
    if body is None or not body.endswith(opening) or not all(c in b"0123456789abcdef" for c in recorded):
        raise ValueError(f"{path}: has no checksum (its last field must be \"{CHECKSUM_KEY}\"): written by an "
                         "older corrflow.pretrain, or damaged or edited; resume it with the version that wrote it, "
                         "or start a new --out")
    actual = hashlib.sha256(body[: -len(opening)]).hexdigest()
    if actual != recorded.decode():
        raise ValueError(f"{path}: does not match the checksum recorded in it (damaged or edited): its content "
                         f"hashes to {actual}, recorded {CHECKSUM_KEY} {recorded.decode()}")
    return json.loads(data)


def _read_checked(ckpt: Path, name: str, state: Dict[str, Any]) -> bytes:
    """The bytes of ``ckpt``'s file ``name``, checked against the sha256 state.json records."""
    path = ckpt / name
    recorded = state.get("files", {}).get(name)
    if recorded is None:
        raise ValueError(f"{path}: not recorded in {ckpt / STATE} (its \"files\" list the checkpoint's files)")
    data = path.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != recorded:
        raise ValueError(f"{path}: does not match its checksum (damaged or modified): sha256 {actual}, "
                         f"{STATE} records {recorded}")
    return data


# --- writing and loading ---------------------------------------------------------------------------

def _remove(path: Path) -> None:
    """Deletes a directory by renaming it out of ``step-*`` first, so that a run killed while the
    files go never leaves a half-deleted checkpoint that looks complete."""
    gone = path.with_name(f".{path.name}.removing")
    if gone.exists():
        shutil.rmtree(gone)
    path.rename(gone)
    shutil.rmtree(gone)


def save(run: Path, model, optim, sched, state: Dict[str, Any], keep: int) -> Path:
    """Writes a checkpoint (every rank takes part; rank 0 writes the shared files and publishes
    it) and keeps the newest ``keep``."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    rank = dist.get_rank()
    final = step_dir(run, state["step"])
    stage = final.with_name(f".{final.name}.partial")
    model_state, optim_state = get_state_dict(model, optim, options=_options())
    if rank == 0:
        for stale in checkpoints(run).glob(".step-*"):
            shutil.rmtree(stale)  # left by a run killed while writing or removing one
        stage.mkdir(parents=True)
    dist.barrier()
    rng = {"torch": torch.get_rng_state(), "python": random.getstate(),
           "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None}
    _save(rng, stage / f"rng-{rank}.pt")
    if rank == 0:
        _save(model_state, stage / "model.pt")
        _save(optim_state, stage / "optim.pt")
        _save(sched.state_dict(), stage / "sched.pt")
    dist.barrier()
    if rank == 0:
        files = sorted(p.name for p in stage.iterdir())
        sealed = {**state, "files": {name: _sha256_file(stage / name) for name in files}}
        _write_bytes(stage / STATE, sealed_json(sealed))
        _fsync_dir(stage)
        if final.exists():
            _remove(final)
        stage.rename(final)
        _fsync_dir(checkpoints(run))
        done = sorted(p for p in checkpoints(run).glob("step-*") if (p / STATE).is_file())
        for old in done[:-keep]:
            _remove(old)
    dist.barrier()
    return final


def _agree(error: Optional[str]) -> None:
    """Raises on every rank when any rank failed (``error``): a rank that raised alone would leave
    the others waiting in the first collective."""
    errors: List[Optional[str]] = [None] * dist.get_world_size()
    dist.all_gather_object(errors, error)
    first = next((e for e in errors if e), None)
    if first:
        raise ValueError(first)


def load(ckpt: Path, model, optim, sched) -> Dict[str, Any]:
    """Restores model, optimizer, schedule and this rank's RNG from ``ckpt``, every file checked
    against the sha256 its state.json records; returns the state."""
    from torch.distributed.checkpoint.state_dict import set_state_dict

    loaded, error = {}, None
    try:
        state = read_state(ckpt)
        for name in ("model.pt", "optim.pt", "sched.pt", f"rng-{dist.get_rank()}.pt"):
            loaded[name] = io.BytesIO(_read_checked(ckpt, name, state))
    except (OSError, ValueError) as e:
        error = str(e)
    _agree(error)
    model_state = torch.load(loaded["model.pt"], map_location="cpu", weights_only=True)
    optim_state = torch.load(loaded["optim.pt"], map_location="cpu", weights_only=False)
    set_state_dict(model, optim, model_state_dict=model_state, optim_state_dict=optim_state, options=_options())
    sched.load_state_dict(torch.load(loaded["sched.pt"], weights_only=False))
    rng = torch.load(loaded[f"rng-{dist.get_rank()}.pt"], weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(rng["cuda"])
    return state
