"""Checkpoints of a ``corrflow.pretrain`` run, and resuming from them exactly.

```
RUN/checkpoints/step-00000020/model.pt      full (unsharded) model state, as BertForMaskedLM names it
                              optim.pt      AdamW state (full, by parameter name)
                              sched.pt      the learning-rate schedule's state
                              rng-R.pt      rank R's torch / CUDA / Python RNG states (dropout)
                              state.json    step, data position (epoch, micro-batch), graph hash,
                                            world size, the settings; written last
RUN/checkpoints/.step-00000020.partial/     a checkpoint being written
```
Model and optimizer go through ``torch.distributed.checkpoint.state_dict`` as full state dicts,
so DDP and FSDP runs write the same files and resume each other. RUN must be on a file system
every node sees (as with any multi-node checkpoint).
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any, Dict, Optional

import torch
import torch.distributed as dist

STATE = "state.json"


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


def save(run: Path, model, optim, sched, state: Dict[str, Any], keep: int) -> Path:
    """Writes a checkpoint (every rank takes part; rank 0 writes the shared files) and keeps the
    newest ``keep``."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    rank = dist.get_rank()
    final = step_dir(run, state["step"])
    stage = final.with_name(f".{final.name}.partial")
    model_state, optim_state = get_state_dict(model, optim, options=_options())
    if rank == 0:
        if stage.exists():
            shutil.rmtree(stage)
        stage.mkdir(parents=True)
    dist.barrier()
    rng = {"torch": torch.get_rng_state(), "python": random.getstate(),
           "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None}
    torch.save(rng, stage / f"rng-{rank}.pt")
    if rank == 0:
        torch.save(model_state, stage / "model.pt")
        torch.save(optim_state, stage / "optim.pt")
        torch.save(sched.state_dict(), stage / "sched.pt")
    dist.barrier()
    if rank == 0:
        (stage / STATE).write_text(json.dumps(state, indent=1))
        if final.exists():
            shutil.rmtree(final)
        stage.rename(final)
        done = sorted(p for p in checkpoints(run).glob("step-*") if (p / STATE).is_file())
        for old in done[:-keep]:
            shutil.rmtree(old)
    dist.barrier()
    return final


def load(ckpt: Path, model, optim, sched) -> Dict[str, Any]:
    """Restores model, optimizer, schedule and this rank's RNG from ``ckpt``; returns its state."""
    from torch.distributed.checkpoint.state_dict import set_state_dict

    state = json.loads((ckpt / STATE).read_text())
    if state["world_size"] != dist.get_world_size():
        raise ValueError(f"{ckpt}: written by {state['world_size']} processes, resumed by "
                         f"{dist.get_world_size()}: the data shards would differ; resume with the same number")
    model_state = torch.load(ckpt / "model.pt", map_location="cpu", weights_only=True)
    optim_state = torch.load(ckpt / "optim.pt", map_location="cpu", weights_only=False)
    set_state_dict(model, optim, model_state_dict=model_state, optim_state_dict=optim_state, options=_options())
    sched.load_state_dict(torch.load(ckpt / "sched.pt", weights_only=False))
    rng = torch.load(ckpt / f"rng-{dist.get_rank()}.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(rng["cuda"])
    return state
