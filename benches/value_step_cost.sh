#!/usr/bin/env bash
# The cost of a training step against K, the genes a value model's encoder sees (issue 50,
# item 8): TxFM (2 x 128, batch 32) at K = 32, 128, 512 and Geneformer-style MLM on the same
# model size and cells (each cell's whole rank sequence, up to 2,048 tokens), interleaved so
# that the machine's drift falls on all of them alike.
#
# usage: benches/value_step_cost.sh CORPUS [STEPS] [ROUNDS]   (CORPUS: ingested with counts;
#        the MLM run masks at random, so no graph is needed)
# env:   CORRFLOW (the binary; default the release build)
set -euo pipefail
corpus=${1:?usage: benches/value_step_cost.sh CORPUS [STEPS] [ROUNDS]}
steps=${2:-60}
rounds=${3:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${CORRFLOW:-${CARGO_TARGET_DIR:-$HOME/.cache/corrflow/target}/release/corrflow}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The preset with `key = value` edits (each key replaced where it stands).
preset() {
    local from=$1 out=$2
    shift 2
    cp "$from" "$out"
    for kv in "$@"; do
        sed -i "s|^${kv%%=*} *=.*|${kv%%=*} = ${kv#*=}|" "$out"
    done
}
common=(hidden=128 ffn=256 batch_size=32 warmup_steps=5 eval_every=100000 checkpoint_every=100000 log_every=1000 epochs=1000)
for k in 32 128 512; do
    preset "$here/configs/txfm-tiny.toml" "$work/txfm-$k.toml" "${common[@]}" visible_genes=$k
done
preset "$here/configs/tiny.toml" "$work/mlm.toml" "${common[@]}" max_len=2048 'strategy="random"'

printf '%-10s %6s %10s %12s\n' variant round s/step tokens/step
for r in $(seq 1 "$rounds"); do
    for v in txfm-32 txfm-128 txfm-512 mlm; do
        out="$work/run-$v-$r"
        s=$("$bin" train --json --config "$work/$v.toml" --corpus "$corpus" --max-steps "$steps" --seed 0 --out "$out" 2>/dev/null | tail -1)
        python3 - "$v" "$r" "$steps" "$out/metrics.jsonl" <<'PY' "$s"
import json, sys
v, r, steps, metrics = sys.argv[1:5]
s = json.loads(sys.argv[5])
tokens = s["tokens_per_s"] * s["seconds"] / int(steps)
print(f"{v:<10} {r:>6} {s['seconds'] / int(steps):>10.3f} {tokens:>12.0f}")
PY
    done
done
