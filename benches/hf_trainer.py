#!/usr/bin/env python3
"""What a Geneformer user runs to pre-train, timed the way benches/train_cpu.sh times corrflow:
transformers' `Trainer` over the corpus exported to a Hugging Face dataset (`corrflow export hf`),
with `DataCollatorForLanguageModeling` (15% masking, 80/10/10, as Geneformer's pretrainer uses
it), length-grouped batches (`group_by_length`, Geneformer's sampler does the same), and the same
`BertForMaskedLM` of the config (corrflow.pretrain's `bert_config`). Prints one JSON line:
non-pad tokens per second over the steps after the first SKIP, cells per second.

usage: benches/hf_trainer.py --dataset DIR --corpus CORPUS --config configs/tiny.toml --steps N [--skip 2]
"""
import argparse
import json
import time
from pathlib import Path

import torch
from datasets import load_from_disk
from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments

import corrflow
from corrflow.pretrain.config import load as load_settings
from corrflow.pretrain.model import bert_config


class Timer(TrainerCallback):
    """Wall time of each step, from the end of the one before: the batch's loading, padding and
    masking included, as corrflow's trainers count it."""

    def __init__(self):
        self.steps = []
        self.t0 = None

    def on_train_begin(self, args, state, control, **kw):
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        now = time.perf_counter()
        self.steps.append(now - self.t0)
        self.t0 = now


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--skip", type=int, default=2)
    a = ap.parse_args()
    settings = load_settings(Path(a.config))
    vocab = corrflow.Corpus(a.corpus).vocab
    max_len = settings.train.max_len or settings.model.max_positions
    ds = load_from_disk(a.dataset)
    ds = ds.map(lambda b: {"input_ids": [x[:max_len] for x in b["input_ids"]]}, batched=True)
    ds = ds.map(lambda b: {"length": [len(x) for x in b["input_ids"]]}, batched=True)
    ds = ds.remove_columns([c for c in ds.column_names if c not in ("input_ids", "length")])
    # The collator needs a tokenizer only for its pad and mask ids and vocabulary size.
    collator = DataCollatorForLanguageModeling(tokenizer=_Tokenizer(vocab), mlm=True, mlm_probability=0.15)
    torch.manual_seed(settings.train.seed)
    from transformers import BertForMaskedLM

    model = BertForMaskedLM(bert_config(settings, vocab, "sdpa"))
    timer = Timer()
    args = TrainingArguments(
        output_dir="/tmp/hf_trainer_bench", max_steps=a.steps, per_device_train_batch_size=settings.train.batch_size,
        learning_rate=settings.train.lr, weight_decay=0.001, warmup_steps=0, train_sampling_strategy="group_by_length",
        length_column_name="length", logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
        dataloader_num_workers=0, seed=settings.train.seed, disable_tqdm=True,
    )
    tokens = []

    def collate(features):
        batch = collator(features)
        tokens.append(int(batch["attention_mask"].sum()) if "attention_mask" in batch else int((batch["input_ids"] != vocab["pad"]).sum()))
        return batch

    trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=collate, callbacks=[timer])
    trainer.train()
    n = len(timer.steps)
    timed = slice(a.skip, n)
    secs = sum(timer.steps[timed])
    toks = sum(tokens[timed])
    cells = settings.train.batch_size * len(timer.steps[timed])
    print(json.dumps({"impl": "transformers-Trainer", "steps": len(timer.steps[timed]), "tokens_per_s": toks / secs,
                      "cells_per_s": cells / secs}))


class _Tokenizer:
    """The little of a tokenizer DataCollatorForLanguageModeling uses: pad/mask ids, vocabulary
    size, padding of lists of ids, and which ids are special."""

    def __init__(self, vocab):
        self.pad_token_id = vocab["pad"]
        self.mask_token_id = vocab["mask"]
        self.mask_token = "<mask>"
        self.pad_token = "<pad>"
        self._pad_token = "<pad>"
        self.padding_side = "right"
        self.special = {v for k, v in vocab.items() if k in ("pad", "mask", "cls", "eos") and v is not None}
        self.n = vocab["vocab_size"]

    def __len__(self):
        return self.n

    def convert_tokens_to_ids(self, token):
        return self.mask_token_id if token == self.mask_token else self.pad_token_id

    def get_special_tokens_mask(self, ids, already_has_special_tokens=True):
        return [1 if i in self.special else 0 for i in ids]

    def pad(self, features, return_tensors="pt", pad_to_multiple_of=None, **kw):
        longest = max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), longest), self.pad_token_id, dtype=torch.long)
        att = torch.zeros((len(features), longest), dtype=torch.long)
        for r, f in enumerate(features):
            x = torch.as_tensor(f["input_ids"], dtype=torch.long)
            ids[r, : len(x)] = x
            att[r, : len(x)] = 1
        return {"input_ids": ids, "attention_mask": att}


if __name__ == "__main__":
    main()
