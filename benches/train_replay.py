#!/usr/bin/env python3
"""PyTorch side of the training benchmark (issue 24): replays the batches `corrflow train
--dump-batches FILE` trained on, with the same model, optimizer and clipping, and reports
tokens/s and per-phase milliseconds.

Modes:
  hf      transformers.BertForMaskedLM(input_ids, attention_mask, labels): what Geneformer's
          pretrainer runs (the decoder over every position);
  masked  the same model, decoding only the masked positions (bert → select rows → cls head →
          cross-entropy), the PyTorch equivalent of what corrflow computes.

Model (configs/paper.toml or configs/tiny.toml): post-LN BERT, ReLU FFN, eps 1e-12, dropout 0.02,
decoder tied to the token embeddings; AdamW(lr 1e-3, wd 0.001) with global-norm clipping at 1.0.
tokens/s = real (non-padding) tokens / step time; a step = forward (loss read) + backward +
clip + AdamW, as corrflow's metrics.jsonl measures it.

    train_replay.py --batches FILE --corpus CORPUS --config paper|tiny --mode hf|masked \
        [--device cpu|cuda] [--skip N] [--steps N] [--json OUT]
"""
import argparse
import json
import os
import statistics
import time

import torch
import transformers

CONFIGS = {
    "paper": dict(hidden_size=256, num_hidden_layers=6, num_attention_heads=4, intermediate_size=512),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128),
}


def vocab_size(corpus):
    path = os.path.join(corpus, "vocab", "token_dictionary.tsv")
    with open(path) as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    return sum(1 for r in rows if len(r) == 2 and r[1].isdigit())


def useful_flops(ids_mask, labels, cfg, vocab):
    """Multiply-adds × 2 of the masked-only model on the real tokens, forward + backward (3×)."""
    h, f, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    lens = ids_mask.sum(1).tolist()
    masked = int((labels != -100).sum())
    per_layer = sum(2 * n * (4 * h * h + 2 * h * f) + 4 * n * n * h for n in lens)
    decoder = 2 * masked * (h * h + vocab * h)
    return 3 * (layers * per_layer + decoder)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--config", choices=CONFIGS, default="paper")
    ap.add_argument("--mode", choices=["hf", "masked"], default="hf")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--skip", type=int, default=2, help="steps run before timing")
    ap.add_argument("--steps", type=int, default=0, help="timed steps (0: all after --skip)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    if a.device == "cpu":
        torch.set_num_threads(os.cpu_count())
    vocab = vocab_size(a.corpus)
    cfg = CONFIGS[a.config]
    config = transformers.BertConfig(
        vocab_size=vocab, hidden_act="relu", max_position_embeddings=2048, hidden_dropout_prob=0.02,
        attention_probs_dropout_prob=0.02, layer_norm_eps=1e-12, pad_token_id=0, tie_word_embeddings=True, **cfg)
    dev = torch.device(a.device)
    model = transformers.BertForMaskedLM._from_config(config, attn_implementation="sdpa").to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.001)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    with open(a.batches) as f:
        batches = [json.loads(line) for line in f]
    if a.steps:
        batches = batches[: a.skip + a.steps]
    rec = []
    for i, b in enumerate(batches):
        shape = (b["rows"], b["len"])
        ids = torch.tensor(b["input_ids"], dtype=torch.long).view(shape)
        mask = torch.tensor(b["attention_mask"], dtype=torch.long).view(shape)
        labels = torch.tensor(b["labels"], dtype=torch.long).view(shape)
        flops = useful_flops(mask, labels, cfg, vocab)
        ids, mask, labels = ids.to(dev), mask.to(dev), labels.to(dev)
        sync()
        t0 = time.perf_counter()
        if a.mode == "hf":
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        else:
            states = model.bert(input_ids=ids, attention_mask=mask).last_hidden_state
            picked = labels.view(-1) != -100
            logits = model.cls(states.view(-1, states.shape[-1])[picked])
            loss = torch.nn.functional.cross_entropy(logits, labels.view(-1)[picked])
        value = loss.item()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        t3 = time.perf_counter()
        if i >= a.skip:
            rec.append(dict(tokens=int(mask.sum()), secs=t3 - t0, fwd=t1 - t0, bwd=t2 - t1, opt=t3 - t2, flops=flops, loss=value))
    secs = sum(r["secs"] for r in rec)
    result = {
        "impl": f"pytorch-{a.mode}", "config": a.config, "device": a.device, "torch": torch.__version__,
        "transformers": transformers.__version__, "threads": torch.get_num_threads(), "steps": len(rec),
        "tokens_per_s": sum(r["tokens"] for r in rec) / secs,
        "gflops": sum(r["flops"] for r in rec) / secs / 1e9,
        "phase_ms": {k: 1000 * statistics.median(r[k] for r in rec) for k in ("fwd", "bwd", "opt")},
        "first_loss": rec[0]["loss"] if rec else None,
    }
    print(json.dumps(result))
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
