"""The command line of ``corrflow.pretrain`` (run under ``torchrun``; a plain ``python -m`` run is a
world of one process)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import List, Optional

from .config import ConfigError, load


def parse(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="torchrun ... -m corrflow.pretrain",
        description="Pre-trains a Geneformer-architecture BERT (transformers' BertForMaskedLM, objective mlm) on "
                    "corrflow's masked batches, or a value model (objective txfm or wced) on its value batches, "
                    "with PyTorch DDP or FSDP.")
    p.add_argument("--config", type=Path, required=True, help="a corrflow train preset (TOML): [model], [train], [mask]")
    p.add_argument("--corpus", type=Path, required=True, help="the token corpus (corrflow ingest)")
    p.add_argument("--graph", type=Path, help="the dependency graph (corrflow graph build); CorrMask needs it")
    p.add_argument("--out", type=Path, required=True, help="the run directory (created, or resumed)")
    p.add_argument("--max-steps", type=int, default=None,
                   help="stop after this many optimizer steps (> 0; left out: the schedule's end). The schedule "
                        "is the config's ([train] epochs / max_steps), so a run stopped here and run again with "
                        "a larger value continues the same run")
    p.add_argument("--init-from", type=Path, help="start from the weights of a Hugging Face BERT directory")
    p.add_argument("--fsdp", action="store_true", help="shard parameters, gradients and optimizer state (FSDP) "
                                                       "instead of replicating them (DDP)")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (default 1)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: CUDA (GPU LOCAL_RANK) when torch sees one, else CPU")
    p.add_argument("--record-cells", action="store_true",
                   help="write the corpus keys of the cells each step trained on to RUN/cells/rank-R.jsonl")
    p.add_argument("--fp32", action="store_true", help="no bf16 autocast on CUDA")
    return p.parse_args(argv)


def check_values(a: argparse.Namespace) -> None:
    """Numbers argparse cannot bound, refused naming the flag, its value and what is allowed."""
    if a.max_steps is not None and a.max_steps <= 0:
        raise ConfigError(f"--max-steps {a.max_steps}: must be a positive number of optimizer steps; leave it out "
                          "to train to the schedule's end ([train] epochs and max_steps)")
    if a.grad_accum < 1:
        raise ConfigError(f"--grad-accum {a.grad_accum}: must be >= 1 (micro-batches per optimizer step)")


def check_paths(a: argparse.Namespace) -> None:
    """Inputs must exist, and --out must be none of them nor hold one (it is written into)."""
    inputs = [("--config", a.config), ("--corpus", a.corpus), ("--graph", a.graph), ("--init-from", a.init_from)]
    for flag, path in inputs:
        if path is not None and not path.exists():
            raise ConfigError(f"{flag} {path}: no such file or directory")
    if a.graph is not None and not (a.graph / "graph.json").is_file():
        raise ConfigError(f"--graph {a.graph}: not a graph directory (no graph.json; corrflow graph build writes one)")
    out = a.out.resolve()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {a.out}: an existing file; the run directory must be a directory")
    for flag, path in inputs:
        if path is None:
            continue
        p = path.resolve()
        if p == out or p.is_relative_to(out) or out.is_relative_to(p):
            raise ConfigError(f"--out {a.out} and {flag} {path} overlap: refusing to write into an input; "
                              "choose another --out")


def check_objective(a: argparse.Namespace, settings) -> None:
    """Flags that only the masked-LM objective has."""
    if settings.is_value and a.init_from is not None:
        raise ConfigError(f"--init-from {a.init_from}: a {settings.model.objective} value model starts fresh "
                          "(--init-from takes a Hugging Face BERT, which has neither the value input nor the decoder)")
    if settings.is_value and a.record_cells:
        raise ConfigError("--record-cells records the cells of masked-LM batches; value batches do not carry "
                          "their cell keys")


def main(argv: Optional[List[str]] = None) -> int:
    import torch
    import torch.distributed as dist

    from .loop import train

    try:
        args = parse(argv)
        check_values(args)
        check_paths(args)
        settings = load(args.config)
        check_objective(args, settings)
    except ConfigError as e:
        print(f"corrflow.pretrain: {e}", file=sys.stderr)
        return 2
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if not dist.is_initialized():
        # A plain `python -m corrflow.pretrain`: a world of one.
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(minutes=30))
    if not cuda:
        # One process per core budget: torchrun's default OMP_NUM_THREADS=1 is honoured.
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads()))))
    from corrflow import CorrflowError

    rank = dist.get_rank()
    try:
        summary = train(args, settings)
    except (ValueError, OSError, CorrflowError) as e:
        print(f"corrflow.pretrain (rank {rank}): {e}", file=sys.stderr, flush=True)
        return 2
    finally:
        # Also on an error: NCCL warns of leaked resources when a process exits without it.
        if dist.is_initialized():
            dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(summary), flush=True)
    return 0
