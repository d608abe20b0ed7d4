"""Runs an exported corrflow model in onnxruntime on a case written by tests/onnx_export.rs and
prints, as one JSON line, the max abs differences to burn's outputs, the vocabulary hash from the
metadata, the opset and whether the batch and sequence axes are dynamic; the
ONNX checker validates the model first."""
import json
import sys

import numpy as np
import onnx
import onnxruntime as ort

model_path, case_path = sys.argv[1], sys.argv[2]
case = json.load(open(case_path))
b, s = case["shape"]
ids = np.asarray(case["input_ids"], dtype=np.int64).reshape(b, s)
mask = np.asarray(case["attention_mask"], dtype=np.int64).reshape(b, s)

sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
hidden, emb = sess.run(["last_hidden_state", "cell_embedding"], {"input_ids": ids, "attention_mask": mask})
want_h = np.asarray(case["last_hidden_state"], dtype=np.float32).reshape(hidden.shape)
want_e = np.asarray(case["cell_embedding"], dtype=np.float32).reshape(emb.shape)

meta = sess.get_modelmeta().custom_metadata_map
inputs = {i.name: i.shape for i in sess.get_inputs()}
dynamic = all(isinstance(d, str) for shape in inputs.values() for d in shape)

# The ONNX checker validates the graph against the opset's operator schemas.
model = onnx.load(model_path)
onnx.checker.check_model(model, full_check=True)
opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))

# Token states are compared at real tokens: at padding positions neither side's states mean
# anything (burn's fused attention leaves padding rows out; the exported graph computes them).
real = mask.astype(bool)

print(json.dumps({
    "last_hidden_state": float(np.abs(hidden - want_h)[real].max()),
    "cell_embedding": float(np.abs(emb - want_e).max()),
    "vocab_hash": meta.get("corrflow.vocab_hash"),
    "opset": opset,
    "dynamic_axes": dynamic,
}))
