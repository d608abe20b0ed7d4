"""A copy of an exported value model whose embeddings see at most N genes per cell
(`model.values.inference_genes` in its metadata; the graph does not depend on it, the sequence
length being dynamic). For models trained on K visible genes of a varying pool (values.visible =
"detected"): with the cap at K, each cell's embedding input is a seeded sample of K of its
detected genes, as in training, instead of all of them (REPORT §10, session 44).

The copy gets its own vocabulary sidecar (OUT.vocab/, a copy of MODEL.vocab/) recording the
copy's checksum, as `export onnx` records the original's.

usage: python experiments/with_inference_genes.py MODEL.onnx N OUT.onnx
"""
import hashlib
import json
import os
import shutil
import sys

import onnx


def main():
    src, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    m = onnx.load(src)
    for p in m.metadata_props:
        if p.key in ("corrflow.meta", "corrflow.config"):
            d = json.loads(p.value)
            config = d["model"] if p.key == "corrflow.meta" else d
            config["values"]["inference_genes"] = n
            p.value = json.dumps(d, separators=(",", ":"))
    onnx.save(m, out)
    vocab = os.path.splitext(out)[0] + ".vocab"
    shutil.rmtree(vocab, ignore_errors=True)
    shutil.copytree(os.path.splitext(src)[0] + ".vocab", vocab)
    with open(out, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(vocab, "model.sha256"), "w") as f:
        f.write(f"{digest}  {os.path.basename(out)}\n")


if __name__ == "__main__":
    main()
