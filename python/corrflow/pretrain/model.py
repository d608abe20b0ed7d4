"""The model ``corrflow.pretrain`` trains: transformers' ``BertForMaskedLM`` of Geneformer's
architecture, its masked-only loss, and the ``hf/`` directory ``corrflow import hf`` reads."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .config import Settings

IGNORE = -100


def bert_config(settings: Settings, vocab: Dict[str, Any], attention: str):
    """Geneformer's architecture from ``[model]``: ReLU, absolute positions, post-LayerNorm, the
    corpus vocabulary and its pad id."""
    from transformers import BertConfig

    m = settings.model
    return BertConfig(
        vocab_size=vocab["vocab_size"], hidden_size=m.hidden, num_hidden_layers=m.layers,
        num_attention_heads=m.heads, intermediate_size=m.ffn, hidden_act="relu",
        hidden_dropout_prob=m.dropout, attention_probs_dropout_prob=m.dropout,
        max_position_embeddings=m.max_positions, type_vocab_size=2, layer_norm_eps=m.layer_norm_eps,
        pad_token_id=vocab["pad"], position_embedding_type="absolute", initializer_range=0.02,
        tie_word_embeddings=True, attn_implementation=attention,
    )


def build(settings: Settings, vocab: Dict[str, Any], init_from: Optional[Path], attention: str):
    """A seeded fresh model, or the weights of ``init_from`` (a Hugging Face BERT directory, e.g.
    an ``export hf-model`` or a previous run's ``hf/``), which must fit the corpus vocabulary."""
    from transformers import BertForMaskedLM

    if init_from is None:
        torch.manual_seed(settings.train.seed)
        return BertForMaskedLM(bert_config(settings, vocab, attention))
    verify_record(Path(init_from))
    model = BertForMaskedLM.from_pretrained(init_from, attn_implementation=attention)
    c = model.config
    if c.vocab_size != vocab["vocab_size"] or (c.pad_token_id is not None and c.pad_token_id != vocab["pad"]):
        raise ValueError(f"--init-from {init_from}: the model has {c.vocab_size} tokens (pad {c.pad_token_id}), "
                         f"the corpus vocabulary {vocab['vocab_size']} (pad {vocab['pad']})")
    if c.hidden_act != "relu" or getattr(c, "position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"--init-from {init_from}: hidden_act {c.hidden_act!r} / position_embedding_type "
                         f"{c.position_embedding_type!r}; Geneformer's architecture is relu / absolute")
    return model


class MaskedLM(nn.Module):
    """BERT's masked-LM loss, decoding only the masked positions: the vocabulary projection (the
    largest matrix product at Geneformer's sizes) runs on the ~15% of tokens that are predicted
    instead of all of them. The loss equals ``BertForMaskedLM(..., labels=...).loss``. DDP and FSDP
    wrap this module, so its forward is the one they hook."""

    def __init__(self, mlm):
        super().__init__()
        self.mlm = mlm

    def forward(self, input_ids, attention_mask, labels) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(mean loss over masked tokens, masked tokens, correct predictions). Predictions are
        counted in eval mode only: the arg-max over the vocabulary is work a training step does
        not need."""
        states = self.mlm.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        picked = labels != IGNORE
        targets = labels[picked]
        logits = self.mlm.cls(states[picked])
        loss = F.cross_entropy(logits.float(), targets, reduction="sum")
        n = targets.numel()
        correct = torch.zeros((), dtype=torch.long, device=loss.device) if self.training \
            else (logits.argmax(-1) == targets).sum()
        # A batch with nothing masked gives 0 (and zero gradients), not NaN.
        return loss / max(n, 1), torch.tensor(n, device=loss.device), correct


# --- the hf/ directory -------------------------------------------------------------------------

VOCAB_FILES = ("token_dictionary.tsv", "gene_median_dictionary.tsv", "gene_name_id.tsv")


def save_hf(state: Dict[str, torch.Tensor], config, corpus: Path, vocab: Dict[str, Any], out: Path) -> None:
    """``out`` (replaced whole, atomically) in ``corrflow export hf-model``'s layout: config.json,
    model.safetensors (``bert.*`` and ``cls.predictions.*``; the decoder is tied), ``vocab/`` (the
    corpus' TSV tables, with V2's ``<cls>``/``<eos>``), Geneformer's pickled dictionaries, and
    ``corrflow_sha256.txt`` (the sha256 of each, which ``import hf`` and ``--init-from`` check)."""
    from safetensors.torch import save_file

    def fill(stage: Path) -> None:
        tied = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
        tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in state.items() if k not in tied}
        save_file(tensors, os.fspath(stage / "model.safetensors"), metadata={"format": "pt"})
        cfg = config.to_dict()
        cfg["architectures"] = ["BertForMaskedLM"]
        cfg.pop("attn_implementation", None)
        cfg.pop("_attn_implementation_autoset", None)
        (stage / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
        tokens = write_vocab(Path(corpus) / "vocab", vocab, stage / "vocab")
        _write_pickles(stage / "vocab", tokens, stage)

    publish_dir(out, fill)


def publish_dir(out: Path, fill) -> None:
    """Replaces directory ``out`` whole: ``fill(stage)`` writes the files into a staging directory
    (with ``vocab/`` made), the sha256 record is added, and the stage takes ``out``'s place."""
    stage = out.with_name(f".{out.name}.partial")
    if stage.exists():
        shutil.rmtree(stage)
    (stage / "vocab").mkdir(parents=True)
    fill(stage)
    _write_record(stage)
    old = out.with_name(f".{out.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if out.exists():
        out.rename(old)
    stage.rename(out)
    if old.exists():
        shutil.rmtree(old)


#: ``corrflow export hf-model``'s sha256 record of a model directory (``sha256sum``'s format).
RECORD = "corrflow_sha256.txt"


def _write_record(stage: Path) -> None:
    """The sha256 of every file of ``stage``, which ``corrflow import hf`` checks."""
    files = sorted(p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file())
    lines = [f"{_sha256(stage / f)}  {f}\n" for f in files if f != RECORD]
    (stage / RECORD).write_text("".join(lines))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_record(model_dir: Path) -> None:
    """Checks a model directory against its sha256 record, when it has one (an ``export hf-model``
    or a run's ``hf/``); ValueError naming the file and both digests."""
    record = model_dir / RECORD
    if not record.is_file():
        return
    for n, line in enumerate(record.read_text().splitlines(), 1):
        if not line.strip():
            continue
        digest, _, name = line.partition("  ")
        path = model_dir / name
        if len(digest) != 64 or not name or ".." in Path(name).parts or Path(name).is_absolute():
            raise ValueError(f"--init-from {record}: line {n} is not `<sha256>  <file>`")
        if not path.is_file():
            raise ValueError(f"--init-from {path}: listed in {RECORD} but missing")
        actual = _sha256(path)
        if actual != digest:
            raise ValueError(f"--init-from {path}: does not match the sha256 recorded in {RECORD} (damaged or "
                             f"modified): its sha256 is {actual}, the record says {digest}")


def write_vocab(src: Path, vocab: Dict[str, Any], dst: Path) -> Dict[str, int]:
    for name in VOCAB_FILES:
        if (src / name).exists():
            shutil.copyfile(src / name, dst / name)
    tokens = {row[0]: int(row[1]) for row in _rows(dst / VOCAB_FILES[0])}
    extra = [(t, vocab[k]) for t, k in (("<cls>", "cls"), ("<eos>", "eos")) if vocab.get(k) is not None and t not in tokens]
    if extra:
        with open(dst / VOCAB_FILES[0], "a") as f:
            for t, i in extra:
                f.write(f"{t}\t{i}\n")
                tokens[t] = i
    if len(tokens) != vocab["vocab_size"]:
        raise ValueError(f"{src}: {len(tokens)} tokens, the corpus says {vocab['vocab_size']}")
    return tokens


def _rows(path: Path):
    with open(path, newline="") as f:
        return [r for r in csv.reader(f, delimiter="\t")][1:]


def _write_pickles(tables: Path, tokens: Dict[str, int], out: Path) -> None:
    """Geneformer's dictionaries as it pickles them: plain dicts of str -> int / float / str."""
    medians = {g: float(m) for g, m in _rows(tables / VOCAB_FILES[1])}
    (out / "token_dictionary.pkl").write_bytes(pickle.dumps(dict(tokens)))
    (out / "gene_median_dictionary.pkl").write_bytes(pickle.dumps(medians))
    if (tables / VOCAB_FILES[2]).exists():
        names = {s: g for s, g in _rows(tables / VOCAB_FILES[2]) if s}
        (out / "gene_name_id_dict.pkl").write_bytes(pickle.dumps(names))
