"""corrflow from Python: tokenize AnnData in memory, ingest files into a corpus, build and
update the gene dependency graph, stream the trainer's CorrMask batches into a PyTorch loop,
and embed cells with an exported ONNX model.

Everything runs in corrflow's Rust library (the same code as the ``corrflow`` command line), with
the GIL released; a Ctrl-C stops a long call at its next safe point. Library errors are raised
as :class:`CorrflowError` with the library's message (it names the file and the problem).
"""

from __future__ import annotations

from ._native import CorrflowError, ValueBatches, __version__
from ._anndata import tokenize
from ._batches import MaskedBatches
from ._cells import annotate, embed, eval_cells
from ._corpus import Corpus, ingest
from ._graph import Graph
from ._progress import set_progress
from ._types import PathLike

__all__ = [
    "CorrflowError",
    "Corpus",
    "Graph",
    "MaskedBatches",
    "ValueBatches",
    "annotate",
    "embed",
    "eval_cells",
    "ingest",
    "set_progress",
    "tokenize",
    "__version__",
]
