#!/usr/bin/env python3
"""Pre-trains a Hugging Face ``BertForMaskedLM`` on corrflow's CorrMask batches with PyTorch DDP.

    torchrun --nproc-per-node 2 python/examples/pretrain_ddp.py CORPUS GRAPH [--steps 5]

Each rank reads its own disjoint shard of every epoch from ``corrflow.torch.MaskedDataset``
(rank and world size come from the initialised process group); the gloo backend runs on CPUs.
It prints one JSON line per step from rank 0 and a final line with every rank's cells.
"""

import argparse
import json

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from transformers import BertConfig, BertForMaskedLM

import corrflow
from corrflow.torch import MaskedDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("corpus")
    p.add_argument("graph")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-len", type=int, default=256)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    vocab = corrflow.Corpus(args.corpus).vocab
    config = BertConfig(vocab_size=vocab["vocab_size"], hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=args.max_len, pad_token_id=vocab["pad"])
    model = DistributedDataParallel(BertForMaskedLM(config))
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)

    data = MaskedDataset(args.corpus, args.graph, batch_size=args.batch_size, max_len=args.max_len, num_threads=1)
    loader = DataLoader(data, batch_size=None)
    steps, cells = 0, []
    for epoch in range(1000):
        data.set_epoch(epoch)
        for batch in loader:
            cells.extend(batch.pop("cell_index").tolist())
            loss = model(**batch).loss
            optim.zero_grad()
            loss.backward()
            optim.step()
            steps += 1
            if rank == 0:
                print(json.dumps({"step": steps, "loss": round(loss.item(), 4), "rows": batch["input_ids"].shape[0]}),
                      flush=True)
            if steps >= args.steps:
                break
        if steps >= args.steps:
            break
    gathered = [None] * world
    dist.all_gather_object(gathered, cells)
    if rank == 0:
        overlap = set(gathered[0]).intersection(*map(set, gathered[1:])) if world > 1 else set()
        print(json.dumps({"world_size": world, "steps": steps, "cells_per_rank": [len(c) for c in gathered],
                          "cells_on_two_ranks": len(overlap)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
