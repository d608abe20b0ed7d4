"""The training loop of ``corrflow.pretrain``: one process per device under ``torchrun``."""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist

import corrflow

from . import checkpoint
from .config import Settings


def log(msg: str) -> None:
    if dist.get_rank() == 0:
        print(f"corrflow.pretrain: {msg}", file=sys.stderr, flush=True)


def learning_rate(lr: float, step: int, warmup: int, total: int) -> float:
    """``corrflow train``'s schedule (``corrflow_model::learning_rate``, Hugging Face's
    ``get_linear_schedule_with_warmup``): linear warm-up to ``lr`` over ``warmup`` steps, then a
    linear decay to 0 at ``total``. ``step`` is 0-based."""
    if step < warmup:
        return lr * (step + 1) / warmup
    left = max(total - step, 0)
    span = max(total - warmup, 1)
    return lr * min(max(left / span, 0.0), 1.0)


def graph_hash(graph: Optional[Path]) -> Optional[str]:
    """The graph's identity: graph.json's content hash (``graph update`` publishes a new one)."""
    if graph is None:
        return None
    info = json.loads((graph / "graph.json").read_text())
    return str(info.get("content_hash") or hashlib.sha256(json.dumps(info, sort_keys=True).encode()).hexdigest())


def task_for(settings: Settings, corpus, graph: Optional[Path], init_from: Optional[Path], attention: str,
             rank: int, world: int):
    """The objective's half of the loop (a ``Task``): ``mlm.MlmTask`` or ``value.ValueTask``.

    A task has ``module`` (what DDP / FSDP wrap), ``count_key`` (the metrics key of what
    ``forward`` counts), ``shard_units(module)`` (FSDP's units), ``batches(epoch, start, rank,
    world)``, ``micro_batches()`` (this rank's per epoch), ``held_out()``, ``forward(model, batch, device, bf16) -> (loss, count, correct)``,
    ``evaluate(model, held_out, device, bf16) -> metrics`` and ``export(state, out, step) ->
    summary entries``; the loop owns the schedule, accumulation, clipping, checkpoints, resume,
    metrics and the graph watch."""
    if settings.is_value:
        from .value import ValueTask

        return ValueTask(settings, corpus, graph, init_from, attention, rank, world)
    from .mlm import MlmTask

    return MlmTask(settings, corpus, graph, init_from, attention, rank, world)


class Run:
    """One process of a run: the model (wrapped for DDP or FSDP), its optimizer and schedule, the
    data, and where it is."""

    def __init__(self, args, settings: Settings):
        self.args, self.s = args, settings
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = _device(args.device)
        self.corpus = corrflow.Corpus(args.corpus)
        self.vocab = self.corpus.vocab
        t = settings.train
        self.bf16 = self.device.type == "cuda" and not args.fp32
        attention = "sdpa" if self.device.type == "cuda" else "eager"
        self.task = task_for(settings, self.corpus, args.graph, args.init_from, attention, self.rank, self.world)
        self.parameters = sum(p.numel() for p in self.task.module.parameters())
        self.model = self._wrap(self.task.module.to(self.device))
        self.optim = torch.optim.AdamW(self.model.parameters(), lr=t.lr, betas=(0.9, 0.999), eps=1e-8,
                                       weight_decay=t.weight_decay)
        # Micro-batches per epoch on each rank (the same on every rank), and optimizer steps.
        self.n_micro = self._micro_batches()
        self.per_epoch = math.ceil(self.n_micro / args.grad_accum)
        total = self.per_epoch * t.epochs
        self.total = min(total, t.max_steps) if t.max_steps > 0 else total
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.optim, lambda step: learning_rate(1.0, step, t.warmup_steps, self.total))
        self.step, self.epoch, self.micro = 0, 0, 0
        self.graph = graph_hash(args.graph)

    def _wrap(self, module):
        if self.args.fsdp:
            # FSDP2 (`fully_shard`): each encoder layer a unit of its own, the rest (embeddings,
            # the tied MLM head or the value decoder) the root's; runs on CPUs (gloo) as on GPUs.
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if self.bf16 \
                else MixedPrecisionPolicy()
            for layer in self.task.shard_units(module):
                fully_shard(layer, mp_policy=mp)
            return fully_shard(module, mp_policy=mp)
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DDP(module, device_ids=ids)

    def _batches(self, epoch: int, start: int = 0):
        return self.task.batches(epoch, start, self.rank, self.world)

    def _micro_batches(self) -> int:
        n = self.task.micro_batches()
        if n == 0:
            raise ValueError(f"--corpus {self.args.corpus}: no training cells (empty, or all held out)")
        return n

    # --- the data position --------------------------------------------------------------------

    def epochs(self) -> Iterator[Tuple[int, int, Dict[str, torch.Tensor]]]:
        """(epoch, micro-batch index, batch) from the current position on. The graph is read
        afresh at each epoch, so a graph updated during the run (`graph update`) masks the next
        epoch; each change is logged."""
        for epoch in range(self.epoch, self.s.train.epochs):
            now = graph_hash(self.args.graph)
            if now != self.graph:
                log(f"epoch {epoch}: the graph changed ({self.graph} -> {now}); its update masks this epoch on")
                self.graph = now
            # Resuming mid-epoch: the batches before the position are planned but not masked (the
            # masks depend on (seed, epoch, cell) only, so the rest are the same).
            first = self.micro if epoch == self.epoch else 0
            data = self._batches(epoch, first)
            for i, batch in enumerate(data, start=first):
                yield epoch, i, {k: torch.from_numpy(v) for k, v in batch.items() if isinstance(v, np.ndarray)}
            data.close()

    def state(self) -> Dict[str, Any]:
        return {"step": self.step, "epoch": self.epoch, "micro": self.micro, "total_steps": self.total,
                "world_size": self.world, "grad_accum": self.args.grad_accum, "graph": self.graph,
                "settings": {"model": asdict(self.s.model), "train": _jsonable(asdict(self.s.train)),
                             "mask": self.s.mask}}

    def resume(self) -> None:
        ckpt = checkpoint.latest(self.args.out)
        if ckpt is None:
            return
        check_resumable(ckpt, checkpoint.read_state(ckpt), self.state())
        state = checkpoint.load(ckpt, self.model, self.optim, self.sched)
        self.step, self.epoch, self.micro = state["step"], state["epoch"], state["micro"]
        self.graph = state["graph"]
        log(f"resumed from {ckpt} (step {self.step}, epoch {self.epoch}, micro-batch {self.micro})")


def check_resumable(ckpt: Path, saved: Dict[str, Any], mine: Dict[str, Any]) -> None:
    """Refuses to continue checkpoint ``ckpt`` (its state ``saved``) with another world size,
    ``--grad-accum`` or settings (``mine``): the steps would hold other batches, so the run would
    not be the one it continues. The message names both values."""
    fix = "run it as it was started, or use a new --out"
    if saved["world_size"] != mine["world_size"]:
        raise ValueError(f"{ckpt}: written by a world of {saved['world_size']} process(es), resumed by "
                         f"{mine['world_size']}: the ranks' data shards would differ; resume with "
                         f"{saved['world_size']} (torchrun --nnodes x --nproc-per-node), or use a new --out")
    if saved["grad_accum"] != mine["grad_accum"]:
        raise ValueError(f"{ckpt}: written with --grad-accum {saved['grad_accum']}, resumed with --grad-accum "
                         f"{mine['grad_accum']}: each step would average other micro-batches; {fix}")
    changed = [f"[{section}].{key}: {old.get(key)!r} in the checkpoint, {new.get(key)!r} now"
               for section in ("model", "train", "mask")
               for old, new in [(saved["settings"][section], mine["settings"][section])]
               for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]
    if changed:
        raise ValueError(f"{ckpt}: its run has other settings ({'; '.join(changed)}); {fix}")


def _jsonable(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in d.items()}


def _device(choice: str) -> torch.device:
    cuda = choice == "cuda" or (choice == "auto" and torch.cuda.is_available())
    if cuda:
        if not torch.cuda.is_available():
            raise ValueError("--device cuda: torch sees no CUDA device")
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def _forward(run: Run, batch: Dict[str, torch.Tensor]):
    return run.task.forward(run.model, batch, run.device, run.bf16)


def evaluate(run: Run, held_out) -> Optional[Dict[str, float]]:
    """The task's held-out metrics, as `corrflow train` logs them. Every rank evaluates the same
    batches (FSDP needs them all in the forward)."""
    if not held_out:
        return None
    run.model.eval()
    with torch.no_grad():
        metrics = run.task.evaluate(run.model, held_out, run.device, run.bf16)
    run.model.train()
    return metrics


def _reduce(values: List[float], device: torch.device) -> List[float]:
    # On the run's device: NCCL (the process group on CUDA) reduces CUDA tensors only.
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def train(args, settings: Settings) -> Dict[str, Any]:
    """Trains from the run's position (fresh, or its newest checkpoint) to ``--max-steps`` or the
    schedule's end; writes metrics, checkpoints and ``RUN/hf``; returns the summary."""
    run = Run(args, settings)
    out: Path = args.out
    if run.rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    run.resume()
    stop = min(args.max_steps, run.total) if args.max_steps else run.total
    log(f"{run.world} process(es) on {run.device.type}{' (FSDP)' if args.fsdp else ' (DDP)'}, "
        f"{run.parameters} parameters, {run.per_epoch} steps per epoch, schedule of {run.total} steps, "
        f"from step {run.step} to {stop}")
    summary = {"command": "corrflow.pretrain", "out": os.fspath(out), "world_size": run.world,
               "device": run.device.type, "fsdp": bool(args.fsdp), "bf16": run.bf16, "parameters": run.parameters,
               "total_steps": run.total, "resumed_from": run.step or None}
    if run.step >= stop:
        log(f"nothing to do: the run is at step {run.step} (stop at {stop})")
    with Logs(run, out, args.record_cells) as logs:
        _loop(run, stop, logs, summary)
    summary.update(_export(run, out))
    summary.update(steps=run.step)
    return summary


class Logs:
    """metrics.jsonl (rank 0) and the cell records (``--record-cells``, every rank), with the
    lines past the position of a resumed run dropped."""

    def __init__(self, run: Run, out: Path, record_cells: bool):
        self.metrics = self.record = None
        if run.rank == 0:
            _truncate_metrics(out / "metrics.jsonl", run.step)
            self.metrics = open(out / "metrics.jsonl", "a")
        if record_cells:
            # The corpus keys of the cells each step trained on, per rank (an audit of the sharding).
            path = out / "cells" / f"rank-{run.rank}.jsonl"
            path.parent.mkdir(exist_ok=True)
            _truncate_metrics(path, run.step)
            self.record = open(path, "a")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for f in (self.metrics, self.record):
            if f:
                f.close()

    @staticmethod
    def write(f, line: Dict[str, Any]) -> None:
        if f:
            f.write(json.dumps(line) + "\n")
            f.flush()


def _loop(run: Run, stop: int, logs: Logs, summary: Dict[str, Any]) -> None:
    t, args = run.s.train, run.args
    held_out = run.task.held_out()
    run.model.train()
    acc, t0 = [], time.perf_counter()
    for epoch, i, batch in (run.epochs() if run.step < stop else iter(())):
        acc.append(batch)
        # A step every grad_accum micro-batches; an epoch's last step takes what is left.
        if len(acc) < args.grad_accum and i + 1 < run.n_micro:
            continue
        lr = run.sched.get_last_lr()[0]
        if logs.record:
            seen = [c for b in acc for c in b["cell_index"].tolist()]
            logs.write(logs.record, {"step": run.step + 1, "epoch": epoch, "cells": seen})
        loss, masked, tokens, cells = _step(run, acc, t.grad_clip)
        acc = []
        run.step, run.epoch, run.micro = run.step + 1, epoch, i + 1
        if run.micro >= run.n_micro:
            run.epoch, run.micro = epoch + 1, 0
        elapsed = max(time.perf_counter() - t0, 1e-9)
        t0 = time.perf_counter()
        line = {"step": run.step, "epoch": epoch, "loss": loss, "lr": lr, "tokens_per_s": tokens / elapsed,
                "cells_per_s": cells / elapsed, "tokens": int(tokens), run.task.count_key: int(masked)}
        last = run.step == stop
        if run.step % t.eval_every == 0 or run.step == run.total or last:
            line.update(evaluate(run, held_out) or {})
        summary.setdefault("first_loss", loss)
        summary.update(last_loss=loss, **{k: v for k, v in line.items() if k.startswith(("eval_", "unigram_"))})
        if run.step % t.log_every == 0 or "eval_loss" in line or last:
            logs.write(logs.metrics, line)
        if run.step % t.checkpoint_every == 0 or last:
            saved = checkpoint.save(run.args.out, run.model, run.optim, run.sched, run.state(), t.keep_checkpoints)
            summary["checkpoint"] = os.fspath(saved)
        if last:
            break


def _step(run: Run, micro: List[Dict[str, torch.Tensor]], clip: float) -> Tuple[float, float, float, float]:
    """One optimizer step over the accumulated micro-batches: gradients averaged over them (and
    over ranks by DDP/FSDP), clipped by global norm, AdamW, the schedule. Returns the step's loss
    (mean over ranks and micro-batches), masked tokens, tokens and cells (summed over ranks)."""
    losses, masked, tokens, cells = 0.0, 0.0, 0.0, 0.0
    for k, b in enumerate(micro):
        # Gradients are synchronised on the last micro-batch only.
        with _gradient_sync(run.model, k == len(micro) - 1):
            loss, n, _ = _forward(run, b)
            (loss / len(micro)).backward()
        losses += float(loss.detach()) / len(micro)
        masked += float(n)
        tokens += float(b["attention_mask"].sum())
        cells += b["input_ids"].shape[0]
    if clip > 0:
        # The global norm over all ranks' shards under FSDP (DTensor parameters).
        torch.nn.utils.clip_grad_norm_(run.model.parameters(), clip)
    run.optim.step()
    run.sched.step()
    run.optim.zero_grad(set_to_none=True)
    loss_sum, masked, tokens, cells = _reduce([losses, masked, tokens, cells], run.device)
    return loss_sum / run.world, masked, tokens, cells


def _gradient_sync(model, on: bool):
    """DDP's ``no_sync`` / FSDP2's ``set_requires_gradient_sync``: no all-reduce while
    accumulating."""
    from contextlib import nullcontext

    if hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(on)
        return nullcontext()
    return nullcontext() if on else model.no_sync()


def _truncate_metrics(path: Path, step: int) -> None:
    """Drops lines past the checkpoint a resumed run continues from (a run killed after logging
    them), and a last line cut short by the kill, so no step is logged twice (metrics.jsonl, the
    cell records). Rewritten atomically."""
    if not path.exists():
        return
    lines = [l for l in path.read_text().splitlines() if l.strip()]
    keep = []
    for n, line in enumerate(lines, 1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines):
                break  # the line being written when the run was killed
            raise ValueError(f"{path}: line {n} is not JSON (damaged or edited): {line[:80]!r}") from None
        if entry["step"] <= step:
            keep.append(line)
    if len(keep) != len(lines):
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w") as f:
            f.write("".join(l + "\n" for l in keep))
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)


def _export(run: Run, out: Path) -> Dict[str, Any]:
    """The task's export of the final weights (every rank gathers, rank 0 writes): ``RUN/hf/``
    or ``RUN/values/``. Returns its summary entries."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(run.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    entries: Dict[str, Any] = {}
    if run.rank == 0:
        entries = run.task.export(state, out, run.step)
    dist.barrier()
    return entries
