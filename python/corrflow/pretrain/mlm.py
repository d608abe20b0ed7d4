"""The ``mlm`` objective of ``corrflow.pretrain``: transformers' ``BertForMaskedLM`` on corrflow's
masked batches (``MaskedBatches``), held out as ``corrflow train`` holds out, exported as
``RUN/hf/`` (``corrflow import hf`` reads it)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from corrflow import _native

from .config import Settings
from .model import MaskedLM, build, save_hf


class MlmTask:
    """One objective of the loop (``loop.Task``): BERT's masked-token prediction."""

    #: The metrics line's key for :meth:`forward`'s count.
    count_key = "masked"

    def __init__(self, settings: Settings, corpus, graph: Optional[Path], init_from: Optional[Path], attention: str,
                 rank: int, world: int):
        self.s, self.corpus, self.graph, self.rank, self.world = settings, corpus, graph, rank, world
        self.mlm = build(settings, corpus.vocab, init_from, attention)
        self.module = MaskedLM(self.mlm)

    def shard_units(self, module) -> List[torch.nn.Module]:
        """The FSDP units besides the root: each encoder layer."""
        return list(module.mlm.bert.encoder.layer)

    def batches(self, epoch: int, start: int, rank: int, world: int):
        """This rank's shard of ``epoch`` from its micro-batch ``start`` on: ``corrflow train``'s
        plan (train.seed) and masks (``[mask]``, its seed included)."""
        t = self.s.train
        return _native.MaskedBatches(
            os.fspath(self.corpus.path), None if self.graph is None else os.fspath(self.graph),
            strategy=self.s.strategy, batch_size=t.batch_size, max_len=self.s.max_len, epoch=epoch, seed=t.seed,
            rank=rank, world_size=world, group_batches=t.group_batches, shuffle_buffer=t.shuffle_buffer,
            eval_fraction=t.eval_fraction, num_threads=t.mask_workers, atlases=list(t.atlases),
            mask_params=json.dumps(self.s.mask_params), start=start)

    def micro_batches(self) -> int:
        """This rank's micro-batches per epoch."""
        b = self.batches(0, 0, self.rank, self.world)
        n = len(b)
        b.close()
        return n

    def held_out(self) -> List[Dict[str, torch.Tensor]]:
        t = self.s.train
        batches = _native.held_out_batches(
            os.fspath(self.corpus.path), None if self.graph is None else os.fspath(self.graph),
            strategy=self.s.strategy, batch_size=t.batch_size, max_len=self.s.max_len, seed=t.seed,
            eval_fraction=t.eval_fraction, eval_cells=t.eval_cells, atlases=list(t.atlases),
            mask_params=json.dumps(self.s.mask_params))
        return [{k: torch.from_numpy(v) for k, v in b.items()} for b in batches]

    @staticmethod
    def forward(model, batch: Dict[str, torch.Tensor], device: torch.device, bf16: bool):
        """(mean loss over masked tokens, masked tokens, correct predictions in eval mode)."""
        ids = batch["input_ids"].to(device, non_blocking=True)
        att = batch["attention_mask"].to(device, non_blocking=True)
        labels = batch["labels"].to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            return model(ids, att, labels)

    def evaluate(self, model, held_out, device: torch.device, bf16: bool) -> Dict[str, float]:
        """Held-out loss (per masked token), accuracy and the unigram baseline, as `corrflow train`
        logs them."""
        loss_sum, masked, correct, counts = 0.0, 0, 0, {}
        for b in held_out:
            loss, n, c = self.forward(model, b, device, bf16)
            n = int(n)
            loss_sum += float(loss) * n
            masked += n
            correct += int(c)
            for label in b["labels"][b["labels"] != -100].tolist():
                counts[label] = counts.get(label, 0) + 1
        top = max(counts.values(), default=0)
        return {"eval_loss": loss_sum / max(masked, 1), "eval_accuracy": correct / max(masked, 1),
                "unigram_accuracy": top / max(masked, 1)}

    def export(self, state: Dict[str, torch.Tensor], out: Path, step: int) -> Dict[str, Any]:
        """``RUN/hf/`` from the full model state (rank 0)."""
        bert = {k[len("mlm."):]: v for k, v in state.items() if k.startswith("mlm.")}
        save_hf(bert, self.mlm.config, self.corpus.path, self.corpus.vocab, out / "hf")
        return {"hf": os.fspath(out / "hf")}
