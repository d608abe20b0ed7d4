"""``corrflow.pretrain``: distributed pre-training of a Geneformer-architecture BERT with PyTorch
(transformers' ``BertForMaskedLM``) on corrflow's masked batches, under ``torchrun``::

    torchrun --nproc-per-node N [--nnodes M --node-rank R --rdzv-endpoint HOST:PORT] \\
        -m corrflow.pretrain --config configs/paper.toml --corpus CORPUS --graph GRAPH --out RUN \\
        [--max-steps N] [--init-from HF_DIR] [--fsdp] [--grad-accum K]

The ``[model]``, ``[train]`` and ``[mask]`` sections of ``corrflow train``'s presets set the model,
the schedule and the masking; ``RUN/metrics.jsonl`` follows ``corrflow train``'s schema,
``RUN/checkpoints/`` resume exactly, and ``RUN/hf/`` is ``corrflow export hf-model``'s layout
(``corrflow import hf --model RUN/hf`` takes it to ``export onnx`` / ``embed`` / ``serve``). See
docs/distributed.md.
"""

from .cli import main  # noqa: F401
