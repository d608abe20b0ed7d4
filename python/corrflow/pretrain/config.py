"""The settings of a ``corrflow.pretrain`` run: the ``[model]`` (with ``[model.values]``),
``[train]`` and ``[mask]`` sections of the TOML presets ``corrflow train`` reads
(``configs/*.toml``), with its defaults, checked as it checks them; other sections are ignored."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, Optional

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9/3.10
    import tomli as tomllib

from corrflow import _native


@dataclasses.dataclass
class ValueSettings:
    """``[model.values]`` of a value model (docs/values.md), with ``corrflow train``'s defaults."""

    target_sum: float = 1e5
    positions: bool = False
    bins: int = 51
    decoder_layers: int = 3
    decoder_width: int = 0
    decode: str = "measured"
    inference_genes: int = 2048
    visible: str = "measured"
    gene_embedding_std: float = 0.02


@dataclasses.dataclass
class ModelSettings:
    """``[model]``: a Geneformer-style BERT (ReLU, absolute positions, post-LayerNorm) for
    ``mlm``; for ``txfm`` / ``wced``, the encoder of a value model (``input`` ``value`` or
    ``bins``) and its ``[model.values]``."""

    hidden: int = 256
    ffn: int = 512
    heads: int = 4
    layers: int = 6
    max_positions: int = 2048
    dropout: float = 0.02
    layer_norm_eps: float = 1e-12
    objective: str = "mlm"
    input: str = "rank"
    values: Optional[ValueSettings] = None


@dataclasses.dataclass
class TrainSettings:
    """``[train]`` as ``corrflow train`` reads it: its keys, defaults and checks are the trainer's
    own (``corrflow_train::TrainConfig``, through ``_native.train_settings``); ``device`` and the
    corpus/graph paths are read and ignored (the command line and torch decide them)."""

    corpus: Any
    graph: Any
    atlases: list
    device: str
    batch_size: int
    group_batches: int
    shuffle_buffer: int
    epochs: int
    max_steps: int
    max_len: int
    lr: float
    weight_decay: float
    warmup_steps: int
    grad_clip: float
    eval_fraction: float
    eval_cells: int
    eval_every: int
    checkpoint_every: int
    keep_checkpoints: int
    log_every: int
    mask_workers: int
    seed: int
    visible_genes: int


#: ``corrflow train``'s objectives (``crates/model/src/objective``), and the ones this trainer has.
OBJECTIVES = ("mlm", "wced-rank", "poisson", "txfm", "wced")
TRAINED_HERE = ("mlm", "txfm", "wced")
#: The objectives of value models (``model.input`` ``value`` or ``bins``).
VALUE_OBJECTIVES = ("txfm", "wced")

MASK_KEYS = ("strategy", "p", "lambda", "k_max", "pmi_tau", "pmi_min_count", "mask_token_rate",
             "random_token_rate", "seed")


@dataclasses.dataclass
class Settings:
    path: Path
    model: ModelSettings
    train: TrainSettings
    mask: Dict[str, Any]

    @property
    def is_value(self) -> bool:
        """A value model (``txfm`` / ``wced``): expression in, the decoder's loss out."""
        return self.model.objective in VALUE_OBJECTIVES

    @property
    def strategy(self) -> str:
        return str(self.mask.get("strategy", "corrmask"))

    @property
    def mask_params(self) -> Dict[str, Any]:
        """``[mask]`` less the strategy: the overrides ``MaskedBatches`` takes."""
        return {k: v for k, v in self.mask.items() if k != "strategy"}

    @property
    def max_len(self) -> int:
        """Longest sequence trained on (specials included), as ``corrflow train`` cuts cells."""
        t = self.train.max_len
        return self.model.max_positions if t == 0 else min(t, self.model.max_positions)


class ConfigError(ValueError):
    """A config file that cannot be used: the message names the file, the key and what is allowed."""


def _section(path: Path, raw: Dict[str, Any], name: str, cls):
    return _table(path, raw.get(name, {}), name, cls)


def _table(path: Path, values: Any, name: str, cls):
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: [{name}] must be a table")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown} in [{name}] (known: {sorted(known)})")
    defaults = cls()
    for k, v in values.items():
        want = type(getattr(defaults, k))
        if want is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if getattr(defaults, k) is not None and not isinstance(v, want):
            raise ConfigError(f"{path}: [{name}].{k} = {v!r} must be a {want.__name__}")
    return cls(**{**dataclasses.asdict(defaults), **values})


def _train(path: Path, table: Any) -> TrainSettings:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [train] must be a table")
    try:
        # A TOML date has no JSON form: as text, the trainer's type refuses it by name.
        resolved = json.loads(_native.train_settings(json.dumps(table, default=str)))
    except _native.CorrflowError as e:
        raise ConfigError(f"{path}: {e}") from None
    return TrainSettings(**resolved)


def load(path: Path) -> Settings:
    """Reads and checks a preset; :class:`ConfigError` names what is wrong."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"--config {path}: not valid TOML: {e}") from None
    model = _section(path, raw, "model", ModelSettings)
    if model.values is not None:
        model.values = _table(path, model.values, "model.values", ValueSettings)
    train = _train(path, raw.get("train", {}))
    mask = raw.get("mask", {})
    unknown = sorted(set(mask) - set(MASK_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown} in [mask] (known: {list(MASK_KEYS)})")
    _check(path, model)
    settings = Settings(Path(path), model, train, dict(mask))
    if settings.is_value and settings.strategy not in ("random", "corrmask"):
        raise ConfigError(f"{path}: [mask].strategy = {settings.strategy!r} hides spans of adjacent rank positions; "
                          "a value model's cell is a set of measured genes: use 'random' or 'corrmask'")
    return settings


def _check(path: Path, m: ModelSettings) -> None:
    def bad(msg: str):
        raise ConfigError(f"{path}: {msg}")

    if m.objective not in OBJECTIVES:
        bad(f"[model].objective = {m.objective!r} is not an objective (corrflow's: {', '.join(OBJECTIVES)}); "
            f"corrflow.pretrain trains {', '.join(map(repr, TRAINED_HERE))}")
    if m.objective not in TRAINED_HERE:
        bad(f"[model].objective = {m.objective!r}: corrflow.pretrain trains BERT's masked-LM objective and the "
            f"value models (allowed: {', '.join(map(repr, TRAINED_HERE))}); {m.objective!r} is trained by "
            "`corrflow train`")
    _check_input(bad, m)
    if min(m.hidden, m.ffn, m.heads, m.layers, m.max_positions) <= 0:
        bad("model.hidden, ffn, heads, layers and max_positions must be > 0")
    if m.hidden % m.heads:
        bad(f"model.hidden ({m.hidden}) must be a multiple of model.heads ({m.heads})")
    if not 0.0 <= m.dropout < 1.0:
        bad(f"model.dropout must be in [0, 1), got {m.dropout}")


def _check_input(bad, m: ModelSettings) -> None:
    """What tokens carry against the objective, and ``[model.values]`` as corrflow checks it
    (``crates/infer/src/model_meta/values.rs``)."""
    if m.input not in ("rank", "value", "bins"):
        bad(f"[model].input = {m.input!r} must be 'rank', 'value' or 'bins'")
    if m.objective in VALUE_OBJECTIVES and m.input == "rank":
        bad(f"[model].objective = {m.objective!r} needs model.input = 'value' or 'bins' (a value model); "
            "on ranks, 'wced-rank' is trained by `corrflow train`")
    if m.objective not in VALUE_OBJECTIVES and m.input != "rank":
        bad(f"[model].input = {m.input!r} is for the value objectives {VALUE_OBJECTIVES}, not {m.objective!r}")
    v = m.values
    if m.input == "rank":
        if v is not None:
            bad("[model.values] is for value models: set model.input = 'value' or 'bins'")
        return
    if v is None:
        bad("model.input = 'value' or 'bins' needs a [model.values] section")
    if not (v.target_sum > 0 and math.isfinite(v.target_sum)):
        bad(f"model.values.target_sum must be a finite number > 0, got {v.target_sum}")
    if m.input == "bins" and not 2 <= v.bins <= 4096:
        bad(f"model.values.bins must be in 2..=4096, got {v.bins}")
    if not 0 <= v.decoder_layers <= 64 or not 0 <= v.decoder_width <= 1 << 16:
        bad("model.values.decoder_layers must be in 0..=64 and decoder_width in 0..=65,536")
    if not 1 <= v.inference_genes <= 1 << 16:
        bad(f"model.values.inference_genes must be in 1..=65,536, got {v.inference_genes}")
    pools = ("measured", "decoded", "detected", "decoded-detected")
    if v.visible not in pools:
        bad(f"model.values.visible must be one of {', '.join(pools)}, got {v.visible!r}")
    if not 0 < v.gene_embedding_std <= 100:
        bad(f"model.values.gene_embedding_std must be in (0, 100], got {v.gene_embedding_std}")
    n = v.decode[4:] if v.decode.startswith("hvg:") else None
    if v.decode not in ("measured", "graph") and not (n is not None and n.isdigit() and int(n) >= 1):
        bad(f"model.values.decode must be 'measured', 'graph' or 'hvg:N' (N >= 1), got {v.decode!r}")
    if m.input == "value" and m.hidden < 2:
        bad("a value model's token is [E_gene (hidden - 1); x]: model.hidden must be >= 2")
