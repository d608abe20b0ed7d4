"""The value models' losses computed directly with numpy, from a JSON case on stdin:
TxFM's rectified tanh and Poisson loss (its Eqs. 1-2) and BMFM-RNA's WCED terms (detection BCE
over measured genes, level MSE over detected ones). Prints {"txfm": ..., "bce": ..., "mse": ...}."""
import json
import sys

import numpy as np

case = json.load(sys.stdin)
z = np.array(case["z"], dtype=np.float64)            # [rows, genes] TxFM logits
out = np.array(case["out"], dtype=np.float64)        # [rows, 2 genes] WCED outputs
counts = np.array(case["counts"], dtype=np.float64)  # [rows, genes]
totals = np.array(case["totals"], dtype=np.float64)  # [rows]
measured = np.array(case["measured"], dtype=np.float64)
L = case["target_sum"]

# TxFM: phi(z) = log(L + 1) * ReLU(tanh(z / 4e)); x = log1p(c / n * L);
# loss = (1/G) sum_g (exp(xhat) - xhat * exp(x)) over each cell's measured genes, then mean.
xhat = np.log(L + 1.0) * np.maximum(np.tanh(z / (4.0 * np.e)), 0.0)
x = np.log1p(counts / totals[:, None] * L)
per_gene = np.exp(xhat) - xhat * np.exp(x)
txfm = np.mean([per_gene[r][measured[r] > 0].mean() for r in range(len(z))])

# WCED: detection BCE with logits (zeros included) over measured genes; level MSE over detected.
G = counts.shape[1]
logits, level = out[:, :G], out[:, G:]
y = (counts > 0).astype(np.float64)
log_sig = lambda t: -np.logaddexp(0.0, -t)
bce = -(y * log_sig(logits) + (1 - y) * log_sig(-logits))
bce = np.mean([bce[r][measured[r] > 0].mean() for r in range(len(z))])
target = np.log1p(counts / totals[:, None] * 1e4)
on = (y * measured) > 0
mse = ((level - target) ** 2)[on].sum() / max(on.sum(), 1)
print(json.dumps({"txfm": txfm, "bce": bce, "mse": mse}))
