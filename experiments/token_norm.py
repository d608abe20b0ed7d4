"""What a value model's first layer can tell apart (REPORT §10, session 45): the tokens of an
exported `input = "value"` model, `[E_gene (hidden - 1); x]` through the embedding LayerNorm,
for many genes and values. Prints the decoding genes' embedding norm, and the mean cosine similarity of
the normalised tokens of two different genes at the same value x, and of one gene at x and
at x + 1. When x is far larger than the gene embedding, LayerNorm maps every detected gene at
every level to nearly one vector: neither which gene nor how much reaches the encoder.

usage: python experiments/token_norm.py MODEL.onnx [MODEL.onnx ...]
"""
import json
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def layer_norm(v, gamma, beta, eps=1e-12):
    mu = v.mean(-1, keepdims=True)
    var = ((v - mu) ** 2).mean(-1, keepdims=True)
    return (v - mu) / np.sqrt(var + eps) * gamma + beta


def cosine(a, b):
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def main():
    rng = np.random.default_rng(0)
    for path in sys.argv[1:]:
        model = onnx.load(path)
        w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        tokens, gamma, beta = w["embeddings.tokens"], w["embeddings.norm.gamma"], w["embeddings.norm.beta"]
        # The decoding genes: with `visible = "decoded"` the only genes the encoder ever saw.
        config = json.loads({p.key: p.value for p in model.metadata_props}["corrflow.config"])
        decoded = np.array(config["values"]["decode_genes"])
        genes = tokens[decoded, :-1]
        norms = np.linalg.norm(genes, axis=1)
        pairs = rng.choice(len(genes), size=(2000, 2))
        pairs = pairs[pairs[:, 0] != pairs[:, 1]]
        print(f"{path}: {len(decoded)} decoding genes, embedding norm median {np.median(norms):.3f} (p90 {np.percentile(norms, 90):.3f})")
        for x in [0.0, 1.0, 2.4, 4.6, 7.0]:
            def tok(ids, value):
                v = np.concatenate([genes[ids], np.full((len(ids), 1), value, dtype=np.float32)], axis=1)
                return layer_norm(v, gamma, beta)
            between_genes = cosine(tok(pairs[:, 0], x), tok(pairs[:, 1], x)).mean()
            between_levels = cosine(tok(pairs[:, 0], x), tok(pairs[:, 0], x + 1.0)).mean()
            print(f"  x = {x:4.1f}: cos(gene a, gene b) {between_genes:.4f}; cos(x, x + 1) same gene {between_levels:.4f}")


if __name__ == "__main__":
    main()
