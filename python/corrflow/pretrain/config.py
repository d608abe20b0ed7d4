"""The settings of a ``corrflow.pretrain`` run: the ``[model]``, ``[train]`` and ``[mask]`` sections
of the TOML presets ``corrflow train`` reads (``configs/*.toml``), with its defaults, checked as it
checks them; other sections are ignored."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Dict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9/3.10
    import tomli as tomllib


@dataclasses.dataclass
class ModelSettings:
    """``[model]``: a Geneformer-style BERT (ReLU, absolute positions, post-LayerNorm)."""

    hidden: int = 256
    ffn: int = 512
    heads: int = 4
    layers: int = 6
    max_positions: int = 2048
    dropout: float = 0.02
    layer_norm_eps: float = 1e-12
    objective: str = "mlm"


@dataclasses.dataclass
class TrainSettings:
    """``[train]``, with ``corrflow train``'s defaults (``device`` and the corpus/graph paths are
    read and ignored: the command line and torch decide them)."""

    corpus: Any = None
    graph: Any = None
    atlases: list = dataclasses.field(default_factory=list)
    device: str = "cpu"
    batch_size: int = 12
    group_batches: int = 50
    shuffle_buffer: int = 10_000
    epochs: int = 3
    max_steps: int = 0
    max_len: int = 0
    lr: float = 1e-3
    weight_decay: float = 0.001
    warmup_steps: int = 10_000
    grad_clip: float = 1.0
    eval_fraction: float = 0.05
    eval_cells: int = 512
    eval_every: int = 500
    checkpoint_every: int = 1000
    keep_checkpoints: int = 2
    log_every: int = 10
    mask_workers: int = 1
    seed: int = 0


#: ``corrflow train``'s objectives (``crates/model/src/objective``), and the one this trainer has.
OBJECTIVES = ("mlm", "wced", "poisson")
TRAINED_HERE = ("mlm",)

MASK_KEYS = ("strategy", "p", "lambda", "k_max", "pmi_tau", "pmi_min_count", "mask_token_rate",
             "random_token_rate", "seed")


@dataclasses.dataclass
class Settings:
    path: Path
    model: ModelSettings
    train: TrainSettings
    mask: Dict[str, Any]

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
    values = raw.get(name, {})
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


def load(path: Path) -> Settings:
    """Reads and checks a preset; :class:`ConfigError` names what is wrong."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"--config {path}: not valid TOML: {e}") from None
    model = _section(path, raw, "model", ModelSettings)
    train = _section(path, raw, "train", TrainSettings)
    mask = raw.get("mask", {})
    unknown = sorted(set(mask) - set(MASK_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {unknown} in [mask] (known: {list(MASK_KEYS)})")
    _check(path, model, train)
    return Settings(Path(path), model, train, dict(mask))


def _check(path: Path, m: ModelSettings, t: TrainSettings) -> None:
    def bad(msg: str):
        raise ConfigError(f"{path}: {msg}")

    if m.objective not in OBJECTIVES:
        bad(f"[model].objective = {m.objective!r} is not an objective (corrflow's: {', '.join(OBJECTIVES)}); "
            f"corrflow.pretrain trains {', '.join(map(repr, TRAINED_HERE))}")
    if m.objective not in TRAINED_HERE:
        bad(f"[model].objective = {m.objective!r}: corrflow.pretrain trains BERT's masked-LM objective only "
            f"(allowed: {', '.join(map(repr, TRAINED_HERE))}); {m.objective!r} is trained by `corrflow train`")
    if min(m.hidden, m.ffn, m.heads, m.layers, m.max_positions) <= 0:
        bad("model.hidden, ffn, heads, layers and max_positions must be > 0")
    if m.hidden % m.heads:
        bad(f"model.hidden ({m.hidden}) must be a multiple of model.heads ({m.heads})")
    if not 0.0 <= m.dropout < 1.0:
        bad(f"model.dropout must be in [0, 1), got {m.dropout}")
    if min(t.batch_size, t.group_batches, t.epochs) <= 0:
        bad("train.batch_size, group_batches and epochs must be > 0")
    if not t.lr > 0 or t.weight_decay < 0 or t.grad_clip < 0:
        bad("train.lr must be > 0, weight_decay and grad_clip >= 0")
    if not 0.0 <= t.eval_fraction < 0.5:
        bad(f"train.eval_fraction must be in [0, 0.5), got {t.eval_fraction}")
    for key in ("max_steps", "max_len", "warmup_steps", "eval_cells"):
        if getattr(t, key) < 0:
            bad(f"[train].{key} = {getattr(t, key)} must be >= 0")
    if min(t.eval_every, t.checkpoint_every, t.log_every, t.keep_checkpoints) <= 0:
        bad("train.eval_every, checkpoint_every, log_every and keep_checkpoints must be > 0")
