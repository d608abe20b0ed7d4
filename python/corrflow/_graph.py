"""The gene dependency graph on disk: build, update, read (`Graph`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np
import pyarrow as pa

from . import _native
from ._corpus import Corpus
from ._native import CorrflowError
from ._types import PathLike


class Graph:
    """A gene dependency graph directory (CorrMask Algorithm 1): genes, edges with ρ_local,
    ρ_global and co-presence counts. ``vocab`` names genes by symbol in :meth:`neighbours`."""

    def __init__(self, path: PathLike, vocab: str = "geneformer-v1"):
        self.path = Path(path)
        self._vocab = vocab
        self._load()

    def _load(self) -> None:
        d = _native.graph_read(os.fspath(self.path))
        self.info: Dict[str, Any] = json.loads(d.pop("info"))
        self._d = d
        self._symbols: Optional[Dict[int, str]] = None

    @classmethod
    def open(cls, path: PathLike, vocab: str = "geneformer-v1") -> "Graph":
        return cls(path, vocab=vocab)

    @classmethod
    def build(
        cls,
        corpus: Union[PathLike, Corpus],
        out: PathLike,
        *,
        atlases: Optional[Sequence[str]] = None,
        incremental: bool = False,
        workers: int = 1,
        vocab: str = "geneformer-v1",
        **params: Any,
    ) -> "Graph":
        """``corrflow graph build``: the graph of ``corpus`` written to ``out``. ``params`` override
        the graph parameters (``n_sub``, ``l_max``, ``min_presence``, ``max_genes``, ``rho_min``,
        ``m_min``, ``n_neigh``, ``seed``, ...); ``incremental=True`` builds the rank-map graph that
        :meth:`update` and :meth:`retract` change exactly. The summary is in ``.summary``."""
        corpus_path = corpus.path if isinstance(corpus, Corpus) else Path(corpus)
        if atlases is None and isinstance(corpus, Corpus):
            atlases = corpus._atlases
        summary = _native.graph_build(
            os.fspath(corpus_path), os.fspath(out), list(atlases or []), json.dumps(params),
            incremental=incremental, workers=workers,
        )
        g = cls(out, vocab=vocab)
        g.summary = json.loads(summary)
        return g

    def update(self, add: Optional[PathLike] = None, *, retract: Optional[str] = None,
               rebase: bool = False, workers: int = 1) -> Dict[str, Any]:
        """``corrflow graph update``: add an atlas (its directory, ``corpus/atlases/NAME``), retract
        an included atlas by name, or rebase. Returns the summary; the graph is reloaded."""
        summary = _native.graph_update(
            os.fspath(self.path), add=os.fspath(add) if add is not None else None, retract=retract,
            rebase=rebase, workers=workers,
        )
        self._load()
        return json.loads(summary)

    def retract(self, name: str, workers: int = 1) -> Dict[str, Any]:
        """Retracts the included atlas ``name`` (exact: as if it had never been added)."""
        return self.update(retract=name, workers=workers)

    @property
    def n_genes(self) -> int:
        return len(self._d["token_id"])

    @property
    def n_edges(self) -> int:
        return len(self._d["u"])

    def genes(self) -> pa.Table:
        """``token_id``, ``gene_id``, ``symbol``, ``presence`` of the graph's genes."""
        symbols = self._symbol_map()
        tokens = self._d["token_id"]
        return pa.table({
            "token_id": tokens,
            "gene_id": self._d["gene_id"],
            "symbol": [symbols.get(int(t), "") for t in tokens],
            "presence": self._d["presence"],
        })

    def edges(self) -> pa.Table:
        """Every edge: ``u``, ``v`` (token ids, u < v), their gene ids, ``rho`` (ρ_local),
        ``rho_global``, ``co_count``."""
        gene_of = dict(zip(self._d["token_id"].tolist(), self._d["gene_id"]))
        u, v = self._d["u"], self._d["v"]
        return pa.table({
            "u": u,
            "v": v,
            "gene_u": [gene_of.get(int(t), "") for t in u],
            "gene_v": [gene_of.get(int(t), "") for t in v],
            "rho": self._d["rho"],
            "rho_global": self._d["rho_global"],
            "co_count": self._d["co_count"],
        })

    def neighbours(self, gene: str) -> pa.Table:
        """The partners of ``gene`` (Ensembl id or symbol), strongest |ρ_local| first:
        ``token_id``, ``gene_id``, ``symbol``, ``rho``, ``rho_global``, ``co_count``. Call
        ``.to_pandas()`` on it for a DataFrame."""
        token = self._token_of(gene)
        u, v = self._d["u"], self._d["v"]
        hit = (u == token) | (v == token)
        other = np.where(u[hit] == token, v[hit], u[hit])
        rho = self._d["rho"][hit]
        order = np.lexsort((other, -np.abs(rho)))
        gene_of = dict(zip(self._d["token_id"].tolist(), self._d["gene_id"]))
        symbols = self._symbol_map()
        other = other[order]
        return pa.table({
            "token_id": other,
            "gene_id": [gene_of.get(int(t), "") for t in other],
            "symbol": [symbols.get(int(t), "") for t in other],
            "rho": rho[order],
            "rho_global": self._d["rho_global"][hit][order],
            "co_count": self._d["co_count"][hit][order],
        })

    def _symbol_map(self) -> Dict[int, str]:
        if self._symbols is None:
            try:
                ids, _genes, names = _native.vocabulary_genes(self._vocab)
                self._symbols = {int(t): s for t, s in zip(ids, names) if s}
            except CorrflowError:
                self._symbols = {}
        return self._symbols

    def _token_of(self, gene: str) -> int:
        tokens = self._d["token_id"]
        for t, g in zip(tokens.tolist(), self._d["gene_id"]):
            if g == gene or g.split(".")[0] == gene:
                return int(t)
        wanted = gene.upper()
        for t, s in self._symbol_map().items():
            if s.upper() == wanted and t in set(tokens.tolist()):
                return t
        raise KeyError(f"gene {gene!r} is not in the graph ({self.n_genes} genes; ids or symbols of vocabulary {self._vocab!r})")

    def __repr__(self) -> str:
        return f"Graph({os.fspath(self.path)!r}, genes={self.n_genes}, edges={self.n_edges})"
