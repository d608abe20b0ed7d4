#!/usr/bin/env python3
"""PyTorch baseline for issue 5: `transformers.BertForMaskedLM` pre-training steps/s on a GPU.

The same model as `configs/paper.toml` (Geneformer V1: 6 layers x 256, FFN 512 ReLU, 4 heads,
2,048 positions, post-LN eps 1e-12, dropout 0.02, decoder tied to the input embeddings) and the
same batches as `corrflow train`: cells read from a corrflow corpus (Parquet shards), cut to
2,048 tokens, length-grouped (windows of batch x group_batches cells sorted by length, batch
order shuffled), padded to the longest cell of the batch, 15% of positions masked 80/10/10.
One step = forward + backward + global-norm clipping + AdamW, the loss read back (a device
sync, as corrflow reads it every step). tokens/s = real (non-padding) tokens / step time,
the same measure `corrflow train` writes to metrics.jsonl.

    python benches/gpu/bert_torch.py --corpus CORPUS --steps 60 --warmup 10 [--precision fp32|tf32|bf16]
"""
import argparse
import glob
import json
import os
import statistics
import time

import numpy as np
import pyarrow.parquet as pq
import torch
import transformers


def load_cells(corpus, max_len, limit):
    cells = []
    for path in sorted(glob.glob(os.path.join(corpus, "atlases", "*", "shard-*.parquet"))):
        for ids in pq.read_table(path, columns=["input_ids"]).column("input_ids").to_pylist():
            cells.append(np.asarray(ids[:max_len], dtype=np.int64))
            if len(cells) >= limit:
                return cells
    return cells


def length_grouped_batches(cells, batch, group, rng):
    order = rng.permutation(len(cells))
    batches = []
    window = batch * group
    for w in range(0, len(order), window):
        idx = sorted(order[w:w + window], key=lambda i: len(cells[i]))
        batches += [idx[i:i + batch] for i in range(0, len(idx), batch)]
    rng.shuffle(batches)
    return batches


def make_batch(cells, idx, vocab, special, rng, p=0.15):
    rows = [cells[i] for i in idx]
    length = max(len(r) for r in rows)
    ids = np.zeros((len(rows), length), dtype=np.int64)  # <pad> = 0
    attn = np.zeros((len(rows), length), dtype=np.int64)
    for r, c in enumerate(rows):
        ids[r, :len(c)] = c
        attn[r, :len(c)] = 1
    labels = np.full_like(ids, -100)
    for r, c in enumerate(rows):
        n = len(c)
        k = max(1, int(n * p))
        pos = rng.choice(n, size=k, replace=False)
        labels[r, pos] = ids[r, pos]
        u = rng.random(k)
        ids[r, pos[u < 0.8]] = special["<mask>"]
        rnd = pos[(u >= 0.8) & (u < 0.9)]
        ids[r, rnd] = rng.integers(len(special), vocab, size=len(rnd))
    return ids, attn, labels


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10, help="steps run before timing (CUDA init, autotune)")
    ap.add_argument("--batch-size", type=int, default=12)
    ap.add_argument("--group-batches", type=int, default=50)
    ap.add_argument("--max-len", type=int, default=2048)
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    ap.add_argument("--attn", default="sdpa", help="transformers attn_implementation (sdpa, eager)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="append the result as a JSON line to this file")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    vocab_file = os.path.join(a.corpus, "vocab", "token_dictionary.tsv")
    with open(vocab_file) as f:
        tokens = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    tokens = [t for t in tokens if len(t) == 2 and t[1].isdigit()]  # drops the header
    vocab = len(tokens)
    special = {t[0]: int(t[1]) for t in tokens if t[0].startswith("<")}
    if "<mask>" not in special:
        raise SystemExit(f"{vocab_file}: no <mask> token")

    need = (a.steps + a.warmup) * a.batch_size
    cells = load_cells(a.corpus, a.max_len, max(need, a.batch_size * a.group_batches))
    batches = length_grouped_batches(cells, a.batch_size, a.group_batches, rng)
    while len(batches) < a.steps + a.warmup:
        batches += batches

    config = transformers.BertConfig(
        vocab_size=vocab, hidden_size=256, num_hidden_layers=6, num_attention_heads=4,
        intermediate_size=512, hidden_act="relu", max_position_embeddings=2048,
        hidden_dropout_prob=0.02, attention_probs_dropout_prob=0.02, layer_norm_eps=1e-12,
        pad_token_id=0, tie_word_embeddings=True,
    )
    dev = torch.device("cuda")
    model = transformers.BertForMaskedLM._from_config(config, attn_implementation=a.attn).to(dev)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.001)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10000))
    fwd = torch.compile(model) if a.compile else model

    times, toks = [], []
    for step in range(a.steps + a.warmup):
        ids, attn, labels = make_batch(cells, batches[step], vocab, special, rng)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        ids_t = torch.from_numpy(ids).to(dev, non_blocking=True)
        attn_t = torch.from_numpy(attn).to(dev, non_blocking=True)
        labels_t = torch.from_numpy(labels).to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            out = fwd(input_ids=ids_t, attention_mask=attn_t, labels=labels_t)
        loss = out.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        loss_value = loss.item()
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            times.append(dt)
            toks.append(int(attn.sum()))
    per_step = [t / s for t, s in zip(toks, times)]
    result = {
        "impl": "pytorch", "transformers": transformers.__version__, "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0), "precision": a.precision, "attn": a.attn,
        "compile": a.compile, "parameters": params, "batch_size": a.batch_size, "steps": a.steps,
        "tokens_per_s": sum(toks) / sum(times), "median_step_tokens_per_s": statistics.median(per_step),
        "mean_tokens_per_step": sum(toks) / len(toks), "median_step_ms": 1000 * statistics.median(times),
        "last_loss": loss_value, "peak_mem_mb": torch.cuda.max_memory_allocated() / 2**20,
    }
    print(json.dumps(result))
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
