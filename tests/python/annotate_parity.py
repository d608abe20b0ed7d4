"""Runs an exported corrflow model with a hierarchical cell-type head in onnxruntime on a case
written by tests/annotate.rs and prints, as one JSON line: the max abs difference of its leaf
probabilities to burn's, the number of leaves, how far the rolled-up root mass is from 1 (from
the ontology slice in the model's metadata), and the ontology release recorded there."""
import json
import sys

import numpy as np
import onnxruntime as ort

model_path, case_path = sys.argv[1], sys.argv[2]
case = json.load(open(case_path))
b, s = case["shape"]
ids = np.asarray(case["input_ids"], dtype=np.int64).reshape(b, s)
mask = np.asarray(case["attention_mask"], dtype=np.int64).reshape(b, s)

sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
(probs,) = sess.run(["probabilities"], {"input_ids": ids, "attention_mask": mask})
want = np.asarray(case["probabilities"], dtype=np.float32).reshape(probs.shape)

meta = json.loads(sess.get_modelmeta().custom_metadata_map["corrflow.meta"])
head = meta["model"]["hce"]
leaves = head["leaves"]
# Roll the leaf probabilities up the slice: a root's mass is the sum over the leaves under it.
children = {}
for t in head["terms"]:
    for parent in t["parents"]:
        children.setdefault(parent, []).append(t["id"])
roots = [t["id"] for t in head["terms"] if not t["parents"]]


def under(term, seen):
    if term in seen:
        return
    seen.add(term)
    for c in children.get(term, []):
        under(c, seen)


column = {leaf: k for k, leaf in enumerate(leaves)}
root_error = 0.0
for root in roots:
    seen = set()
    under(root, seen)
    idx = [column[t] for t in seen if t in column]
    if len(idx) == len(leaves):
        root_error = max(root_error, float(np.abs(probs[:, idx].sum(axis=1) - 1.0).max()))

print(json.dumps({
    "max_abs_diff": float(np.abs(probs - want).max()),
    "leaves": int(probs.shape[1]),
    "root_mass_error": root_error,
    "ontology_version": head["ontology_version"],
}))
