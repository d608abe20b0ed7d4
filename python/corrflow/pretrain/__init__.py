"""``corrflow.pretrain``: distributed pre-training with PyTorch, under ``torchrun``, of a
Geneformer-architecture BERT (transformers' ``BertForMaskedLM``, objective ``mlm``) on corrflow's
masked batches, or of a value model (``txfm``, ``wced``; :mod:`corrflow.values`) on its value
batches::

    torchrun --nproc-per-node N [--nnodes M --node-rank R --rdzv-endpoint HOST:PORT] \\
        -m corrflow.pretrain --config configs/paper.toml --corpus CORPUS --graph GRAPH --out RUN \\
        [--max-steps N] [--init-from HF_DIR] [--fsdp] [--grad-accum K]

The ``[model]``, ``[train]`` and ``[mask]`` sections of ``corrflow train``'s presets set the model,
the schedule and the masking; ``RUN/metrics.jsonl`` follows ``corrflow train``'s schema,
``RUN/checkpoints/`` resume exactly, and ``RUN/hf/`` is ``corrflow export hf-model``'s layout
(``corrflow import hf --model RUN/hf`` takes it to ``export onnx`` / ``embed`` / ``serve``); a
value model's ``RUN/values/`` goes the same way through ``corrflow import values --model
RUN/values``. See docs/distributed.md.
"""

from .cli import main  # noqa: F401
