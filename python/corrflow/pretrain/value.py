"""The value objectives of ``corrflow.pretrain`` (docs/values.md): TxFM's masked autoencoder
(``txfm``) and BMFM-RNA's whole-cell expression decoding (``wced``), on the batches ``corrflow
train`` builds for them (``ValueBatches``: the same data plan, visible genes and decoding
targets), with the model and losses of :mod:`corrflow.values`. The run's model is exported as
``RUN/values/``, which ``corrflow import values`` takes to ``export onnx`` / ``embed`` / ``serve``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch
from torch import nn

from corrflow import _native
from corrflow.values import ValueModel, txfm_loss, wced_loss

from .config import Settings
from .model import publish_dir, write_vocab

#: ``config.json``'s format in a value model directory (``corrflow import values`` reads it).
FORMAT, FORMAT_VERSION = "corrflow-value-model", 1
#: ``MaskParams``' defaults in ``corrflow train`` (``crates/algorithms/src/mask/params.rs``): a
#: preset without ``[mask].p`` or ``lambda`` gets these there, so it gets them here too.
MASK_P, MASK_LAMBDA = 0.15, 0.5


class ValueLoss(nn.Module):
    """A value model with its objective's loss: the module DDP / FSDP wrap."""

    def __init__(self, model: ValueModel, objective: str, target_sum: float):
        super().__init__()
        self.model, self.objective, self.target_sum = model, objective, target_sum

    def forward(self, input_ids, values, attention_mask, counts, totals, measured) -> torch.Tensor:
        _, out = self.model(input_ids, values, attention_mask)
        out = out.float()
        if self.objective == "txfm":
            return txfm_loss(out, counts, totals, measured, self.target_sum)
        bce, mse = wced_loss(out, counts, totals, measured)
        return bce + mse


class ValueTask:
    """One objective of the loop (``loop.Task``): a value model's decoder loss."""

    #: The metrics line's key for :meth:`forward`'s count (the visible genes, as `corrflow train`).
    count_key = "visible"

    def __init__(self, settings: Settings, corpus, graph: Optional[Path], init_from: Optional[Path], attention: str,
                 rank: int, world: int):
        if init_from is not None:
            raise ValueError(f"--init-from {init_from}: a value model starts fresh (--init-from takes a Hugging "
                             "Face BERT, which has no value input nor decoder)")
        self.s, self.corpus, self.graph = settings, corpus, graph
        # One opening gives the decoding set, <cls> and this rank's batches per epoch (the decoding
        # set, e.g. the HVGs, takes a pass over the corpus).
        first = self.batches(0, 0, rank, world)
        self.decode_genes, self.cls, self._micro = list(first.decode_genes), int(first.cls), len(first)
        first.close()
        vocab = dict(corpus.vocab)
        if vocab.get("cls") is None:
            # As `corrflow train`: a vocabulary without <cls> gains <cls> and <eos> (V2's layout).
            n = vocab["vocab_size"]
            vocab.update(cls=n, eos=n + 1, vocab_size=n + 2)
        self.vocab = vocab
        m, v = settings.model, settings.model.values
        self.shape = ((vocab["vocab_size"], m.hidden, m.ffn, m.heads, m.layers, len(self.decode_genes)),
                      dict(outputs=2 if m.objective == "wced" else 1, input=m.input, bins=v.bins,
                           target_sum=v.target_sum, positions=v.positions, max_positions=m.max_positions,
                           decoder_layers=v.decoder_layers, decoder_width=v.decoder_width, dropout=m.dropout,
                           layer_norm_eps=m.layer_norm_eps))
        torch.manual_seed(settings.train.seed)
        self.module = ValueLoss(self._new_model().bert_init(gene_std=v.gene_embedding_std), m.objective,
                                v.target_sum)

    def _new_model(self) -> ValueModel:
        args, kwargs = self.shape
        return ValueModel(*args, **kwargs)

    def micro_batches(self) -> int:
        """This rank's micro-batches per epoch (counted when the task opened its batches)."""
        return self._micro

    def shard_units(self, module) -> List[nn.Module]:
        """The FSDP units besides the root: each encoder layer."""
        return list(module.model.encoder.layers)

    def _common(self) -> Dict[str, Any]:
        t, v = self.s.train, self.s.model.values
        mask = dict(self.s.mask_params)
        return dict(strategy=self.s.strategy, batch_size=t.batch_size, seed=t.seed, visible_genes=t.visible_genes,
                    mask_p=MASK_P, mask_lambda=MASK_LAMBDA, decode=v.decode, visible=v.visible,
                    target_sum=v.target_sum, eval_fraction=t.eval_fraction, atlases=list(t.atlases),
                    mask_params=json.dumps(mask))

    def batches(self, epoch: int, start: int, rank: int, world: int):
        """This rank's shard of ``epoch`` from its micro-batch ``start`` on."""
        t = self.s.train
        return _native.ValueBatches(
            os.fspath(self.corpus.path), None if self.graph is None else os.fspath(self.graph), epoch=epoch,
            rank=rank, world_size=world, group_batches=t.group_batches, shuffle_buffer=t.shuffle_buffer,
            start=start, **self._common())

    def held_out(self) -> List[Dict[str, torch.Tensor]]:
        batches = _native.held_out_value_batches(
            os.fspath(self.corpus.path), None if self.graph is None else os.fspath(self.graph),
            eval_cells=self.s.train.eval_cells, **self._common())
        keys = ("input_ids", "values", "attention_mask", "counts", "measured", "totals")
        return [{k: torch.from_numpy(b[k]) for k in keys} for b in batches]

    @staticmethod
    def forward(model, batch: Dict[str, Any], device: torch.device, bf16: bool):
        """(the loss, the visible genes (without `<cls>`), None)."""
        keys = ("input_ids", "values", "attention_mask", "counts", "totals", "measured")
        args = [torch.as_tensor(batch[k]).to(device, non_blocking=True) for k in keys]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(*args)
        visible = args[2].sum() - args[2].shape[0]
        return loss, visible, None

    def evaluate(self, model, held_out, device: torch.device, bf16: bool) -> Dict[str, float]:
        """The held-out loss, each batch weighed by its cells (`corrflow train`'s ``eval_loss``)."""
        total, cells = 0.0, 0
        for b in held_out:
            loss, _, _ = self.forward(model, b, device, bf16)
            rows = b["input_ids"].shape[0]
            total += float(loss) * rows
            cells += rows
        return {"eval_loss": total / max(cells, 1)}

    def export(self, state: Dict[str, torch.Tensor], out: Path, step: int) -> Dict[str, Any]:
        """``RUN/values/`` from the full model state (rank 0)."""
        from safetensors.torch import save_file

        model = self._new_model()
        model.load_state_dict({k[len("model."):]: t.to("cpu") for k, t in state.items() if k.startswith("model.")})
        m, v = self.s.model, self.s.model.values
        values = {**vars(v), "decode_genes": self.decode_genes}
        config = {
            "format": FORMAT, "format_version": FORMAT_VERSION,
            "model": {"hidden": m.hidden, "ffn": m.ffn, "heads": m.heads, "layers": m.layers,
                      "max_positions": m.max_positions, "dropout": m.dropout, "layer_norm_eps": m.layer_norm_eps,
                      "objective": m.objective, "input": m.input, "values": values},
            "layout": {"max_genes": v.inference_genes, "cls": self.cls, "eos": None},
            "max_len": self.s.train.max_len, "step": step, "written_by": "corrflow.pretrain",
        }

        def fill(stage: Path) -> None:
            save_file(model.corrflow_state(), os.fspath(stage / "model.safetensors"), metadata={"format": "pt"})
            (stage / "config.json").write_text(json.dumps(config, indent=2))
            write_vocab(Path(self.corpus.path) / "vocab", self.vocab, stage / "vocab")

        publish_dir(out / "values", fill)
        return {"values": os.fspath(out / "values")}

