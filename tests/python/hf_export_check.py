#!/usr/bin/env python3
"""What transformers makes of a directory written by `corrflow export hf-model` (for
`tests/export_hf.rs`).

    hf_export_check.py DIR INPUT.json

INPUT.json holds padded `input_ids` and `attention_mask` ([batch, seq]) and the `gene` flags
(1 on gene tokens). Prints one JSON object: transformers' loading info of
`BertForMaskedLM.from_pretrained(DIR, output_loading_info=True)`, the cell embeddings (the mean
of the final hidden states over gene tokens, the attention mask honoured: corrflow embed's
pooling and layer), the pickled dictionaries as Python reads them (sizes, a few entries), and
the heads listing.
"""

import json
import pickle
import sys
from pathlib import Path

import torch
from transformers import BertForMaskedLM

model_dir, inputs = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
model, info = BertForMaskedLM.from_pretrained(model_dir, output_loading_info=True)
model.eval()
ids = torch.tensor(inputs["input_ids"], dtype=torch.long)
att = torch.tensor(inputs["attention_mask"], dtype=torch.long)
gene = torch.tensor(inputs["gene"], dtype=torch.float32)
with torch.no_grad():
    out = model(input_ids=ids, attention_mask=att, output_hidden_states=True)
states = out.hidden_states[-1]
w = (gene * att).unsqueeze(-1)
pooled = (states * w).sum(1) / w.sum(1).clamp_min(1.0)
tokens = pickle.loads((model_dir / "token_dictionary.pkl").read_bytes())
medians = pickle.loads((model_dir / "gene_median_dictionary.pkl").read_bytes())
names_path = model_dir / "gene_name_id_dict.pkl"
names = pickle.loads(names_path.read_bytes()) if names_path.exists() else {}
print(
    json.dumps(
        {
            "missing_keys": sorted(info["missing_keys"]),
            "unexpected_keys": sorted(info["unexpected_keys"]),
            "mismatched_keys": [list(map(str, k)) for k in info.get("mismatched_keys", [])],
            "hidden_act": model.config.hidden_act,
            "pad_token_id": model.config.pad_token_id,
            "cell_embedding": pooled.tolist(),
            "logits_finite": bool(torch.isfinite(out.logits).all()),
            "tokens": len(tokens),
            "token_pad": tokens.get("<pad>"),
            "token_mask": tokens.get("<mask>"),
            "medians": len(medians),
            "median_types": sorted({type(v).__name__ for v in medians.values()}),
            "names": len(names),
            "heads": json.loads((model_dir / "corrflow_heads.json").read_text())["heads"]
            if (model_dir / "corrflow_heads.json").exists()
            else [],
        }
    )
)
