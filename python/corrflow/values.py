"""``corrflow.values``: the value models of ``corrflow train`` (TxFM's masked autoencoder ``txfm``,
BMFM-RNA's ``wced``; docs/values.md) as a PyTorch module, for training them in a PyTorch loop on
:class:`corrflow.ValueBatches` and for checking them against corrflow's own (``tests`` load an
exported ONNX model's weights into it and compare the outputs).

It computes what corrflow's burn model computes: token ``[E_gene (hidden - 1); x]`` (or
``E_gene + E_bin(x)``), optional positions, LayerNorm and dropout, post-LayerNorm transformer
layers with ReLU feed-forward, and the decoder MLP from the CLS state.

Importing this module imports torch; the rest of corrflow does not need it.
"""

from __future__ import annotations

import math
from typing import Dict, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ValueModel", "txfm_loss", "wced_loss", "WCED_TARGET_SUM"]

WCED_TARGET_SUM = 1e4


class ValueModel(nn.Module):
    """A value model of ``[model]`` sizes. ``decode_genes`` is the decoding set's size,
    ``outputs`` the decoder's outputs per gene (1 for txfm, 2 for wced)."""

    def __init__(self, vocab_size: int, hidden: int, ffn: int, heads: int, layers: int, decode_genes: int, *,
                 outputs: int = 1, input: str = "value", bins: int = 51, target_sum: float = 1e5,
                 positions: bool = False, max_positions: int = 2048, decoder_layers: int = 3,
                 decoder_width: int = 0, dropout: float = 0.0, layer_norm_eps: float = 1e-12):
        super().__init__()
        if input not in ("value", "bins"):
            raise ValueError(f"input must be 'value' or 'bins', got {input!r}")
        self.input, self.bins_n, self.target_sum = input, bins, target_sum
        self.tokens = nn.Embedding(vocab_size, hidden)
        self.bins = nn.Embedding(bins, hidden) if input == "bins" else None
        self.positions = nn.Embedding(max_positions, hidden) if positions else None
        self.embed_norm = nn.LayerNorm(hidden, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(hidden, heads, ffn, dropout=dropout, activation="relu", batch_first=True,
                                           norm_first=False, layer_norm_eps=layer_norm_eps)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        width = decoder_width or hidden
        self.decoder = nn.ModuleList(nn.Linear(hidden if i == 0 else width, width) for i in range(decoder_layers))
        self.decoder_out = nn.Linear(width if decoder_layers else hidden, decode_genes * outputs)

    def forward(self, input_ids: torch.Tensor, values: torch.Tensor, attention_mask: torch.Tensor):
        """(the CLS states ``[rows, hidden]``, the decoder's raw outputs ``[rows, genes × outputs]``)."""
        genes = self.tokens(input_ids)
        if self.input == "value":
            x = torch.cat([genes[..., :-1], values.unsqueeze(-1)], dim=-1)
        else:
            steps = self.bins_n - 1
            b = torch.ceil(values / math.log1p(self.target_sum) * steps).clamp(1, steps)
            b = torch.where(values <= 0, torch.zeros_like(b), b).long()
            x = genes + self.bins(b)
        if self.positions is not None:
            x = x + self.positions(torch.arange(input_ids.shape[1], device=input_ids.device)).unsqueeze(0)
        x = self.dropout(self.embed_norm(x))
        states = self.encoder(x, src_key_padding_mask=attention_mask == 0)
        cls = states[:, 0]
        z = cls
        for layer in self.decoder:
            y = F.relu(layer(z))
            z = z + y if y.shape == z.shape else y
        return cls, self.decoder_out(z)

    @classmethod
    def from_onnx(cls, path: str) -> "ValueModel":
        """The value model exported to ``path`` by ``corrflow export onnx``: its sizes from the
        file's ``corrflow.meta``, its weights from its initializers (in eval mode)."""
        import json

        import onnx

        props = {p.key: p.value for p in onnx.load(path, load_external_data=False).metadata_props}
        meta = json.loads(props["corrflow.meta"])
        m, v = meta["model"], meta["model"].get("values")
        if v is None:
            raise ValueError(f"{path} is a rank model (model.input = 'rank'); corrflow.values is for value models")
        outputs = 2 if m["objective"] == "wced" else 1
        model = cls(meta["vocab_size"], m["hidden"], m["ffn"], m["heads"], m["layers"], len(v["decode_genes"]),
                    outputs=outputs, input=m["input"], bins=v["bins"], target_sum=v["target_sum"],
                    positions=v["positions"], max_positions=m["max_positions"], decoder_layers=v["decoder_layers"],
                    decoder_width=v["decoder_width"], dropout=m["dropout"], layer_norm_eps=m["layer_norm_eps"])
        model.load_onnx_weights(path)
        return model.eval()

    def load_onnx_weights(self, path: str) -> None:
        """This module's weights from a value model exported by ``corrflow export onnx`` (its
        initializers; burn's ``[in, out]`` matrices transposed to PyTorch's ``[out, in]``)."""
        import onnx
        from onnx import numpy_helper

        w: Dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
        with torch.no_grad():
            for name, param, linear in self._corrflow_slots():
                src = torch.from_numpy(np.array(w[name], dtype=np.float32))
                src = src.T if linear else src[: param.shape[0]]
                param.copy_(src)

    def corrflow_state(self) -> Dict[str, torch.Tensor]:
        """The weights under corrflow's names (those of its ONNX export), ``Linear`` weights as
        PyTorch stores them (``[out, in]``): the ``model.safetensors`` of a value model directory,
        which ``corrflow import values`` reads."""
        return {name: p.detach().to("cpu", torch.float32).contiguous() for name, p, _ in self._corrflow_slots()}

    def _corrflow_slots(self):
        """(corrflow's name, this module's tensor or a view of it, whether it is a ``Linear``
        weight) for every weight: the one name mapping, read by both directions."""
        h = self.tokens.weight.shape[1]
        yield "embeddings.tokens", self.tokens.weight, False
        if self.positions is not None:
            yield "embeddings.positions", self.positions.weight, False
        if self.bins is not None:
            yield "embeddings.value_bins", self.bins.weight, False
        yield "embeddings.norm.gamma", self.embed_norm.weight, False
        yield "embeddings.norm.beta", self.embed_norm.bias, False
        for i, layer in enumerate(self.encoder.layers):
            p, attn = f"layer{i}", layer.self_attn
            for j, n in enumerate(("query", "key", "value")):
                # PyTorch keeps the three projections in one matrix.
                yield f"{p}.attention.{n}.weight", attn.in_proj_weight[j * h:(j + 1) * h], True
                yield f"{p}.attention.{n}.bias", attn.in_proj_bias[j * h:(j + 1) * h], False
            yield f"{p}.attention.output.weight", attn.out_proj.weight, True
            yield f"{p}.attention.output.bias", attn.out_proj.bias, False
            yield f"{p}.norm_1.gamma", layer.norm1.weight, False
            yield f"{p}.norm_1.beta", layer.norm1.bias, False
            yield f"{p}.ffn.inner.weight", layer.linear1.weight, True
            yield f"{p}.ffn.inner.bias", layer.linear1.bias, False
            yield f"{p}.ffn.outer.weight", layer.linear2.weight, True
            yield f"{p}.ffn.outer.bias", layer.linear2.bias, False
            yield f"{p}.norm_2.gamma", layer.norm2.weight, False
            yield f"{p}.norm_2.beta", layer.norm2.bias, False
        for i, layer in enumerate(self.decoder):
            yield f"decoder.{i}.weight", layer.weight, True
            yield f"decoder.{i}.bias", layer.bias, False
        yield "decoder.out.weight", self.decoder_out.weight, True
        yield "decoder.out.bias", self.decoder_out.bias, False

    def bert_init(self, std: float = 0.02, gene_std: float = 0.02) -> "ValueModel":
        """BERT's initialisation, as ``corrflow train`` starts a model: weights ~ N(0, std),
        the gene embeddings ~ N(0, gene_std) (``values.gene_embedding_std``), biases 0,
        LayerNorms 1 and 0."""
        with torch.no_grad():
            for name, p, _ in self._corrflow_slots():
                if name == "embeddings.tokens":
                    p.normal_(0.0, gene_std)
                elif name.endswith((".gamma",)):
                    p.fill_(1.0)
                elif name.endswith((".bias", ".beta")):
                    p.zero_()
                else:
                    p.normal_(0.0, std)
        return self


def _log_normalized(counts: torch.Tensor, totals: torch.Tensor, target_sum: float) -> torch.Tensor:
    return torch.log1p(counts / totals.unsqueeze(-1) * target_sum)


def _cell_mean(per_gene: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return ((per_gene * weights).sum(-1) / weights.sum(-1).clamp_min(1.0)).mean()


def txfm_loss(z: torch.Tensor, counts: torch.Tensor, totals: torch.Tensor, measured: torch.Tensor,
              target_sum: float = 1e5) -> torch.Tensor:
    """TxFM's Eq. 1-2: ``x̂ = log(L + 1)·ReLU(tanh(z / 4e))``, Poisson loss
    ``e^x̂ − x̂·e^x`` averaged over each cell's measured decoding genes, then cells."""
    xhat = math.log1p(target_sum) * F.relu(torch.tanh(z / (4 * math.e)))
    ex = torch.exp(_log_normalized(counts, totals, target_sum))
    return _cell_mean(torch.exp(xhat) - xhat * ex, measured)


def wced_loss(out: torch.Tensor, counts: torch.Tensor, totals: torch.Tensor, measured: torch.Tensor):
    """BMFM-RNA's WCED terms: (detection BCE over each cell's measured decoding genes, then
    cells; level MSE over the batch's detected measured genes)."""
    g = counts.shape[-1]
    logits, level = out[:, :g], out[:, g:]
    detected = (counts > 0).to(logits.dtype)
    bce = F.binary_cross_entropy_with_logits(logits, detected, reduction="none")
    on = detected * measured
    mse = (((level - _log_normalized(counts, totals, WCED_TARGET_SUM)) * on) ** 2).sum() / on.sum().clamp_min(1.0)
    return _cell_mean(bce, measured), mse


def batch_tensors(batch: Dict[str, np.ndarray], device: Optional[torch.device] = None) -> Dict[str, torch.Tensor]:
    """A :class:`corrflow.ValueBatches` batch as tensors."""
    keys = ("input_ids", "values", "attention_mask", "counts", "measured", "totals")
    return {k: torch.from_numpy(np.asarray(batch[k])).to(device) for k in keys}
