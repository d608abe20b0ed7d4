#!/usr/bin/env bash
# A value model's training step in corrflow's burn trainer (`corrflow train`) against the same
# model in PyTorch (`python -m corrflow.pretrain`, one process), on the same value batches and
# preset (issue 50, item 8), interleaved so that the machine's drift falls on both alike. The
# first SKIP steps of each run are not timed (start-up, first allocations); the rest come from
# the metrics lines' step times.
#
# usage: benches/value_engines.sh CORPUS [CONFIG] [STEPS] [ROUNDS]
#        CORPUS: ingested with counts; CONFIG: a txfm/wced preset (default configs/txfm-tiny.toml)
# env:   CORRFLOW (the binary; default the release build), TORCH_VENV (a venv with torch and the
#        corrflow wheel; default the test venv), SKIP (default 5), THREADS (default 2: both
#        engines get the same cores)
set -euo pipefail
corpus=${1:?usage: benches/value_engines.sh CORPUS [CONFIG] [STEPS] [ROUNDS]}
here=$(cd "$(dirname "$0")/.." && pwd)
config=${2:-$here/configs/txfm-tiny.toml}
steps=${3:-60}
rounds=${4:-2}
skip=${SKIP:-5}
threads=${THREADS:-2}
bin=${CORRFLOW:-${CARGO_TARGET_DIR:-$HOME/.cache/corrflow/target}/release/corrflow}
py=${TORCH_VENV:-$HOME/.cache/corrflow/test-venv}/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Every step logged, no checkpoint or held-out evaluation inside the timed steps, and a schedule
# longer than the run (both engines then stop at --max-steps on the same schedule).
cp "$config" "$work/preset.toml"
for kv in log_every=1 eval_every=100000 checkpoint_every=100000 epochs=1000 max_steps=0; do
    sed -i "s|^${kv%%=*} *=.*|${kv%%=*} = ${kv#*=}|" "$work/preset.toml"
done

# Mean seconds per step after the first $skip, from the cumulative wall time of metrics lines.
rate() {
    python3 - "$1" "$skip" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
skip = int(sys.argv[2])
# tokens_per_s × tokens gives each step's time in both schemas.
times = [l["tokens"] / l["tokens_per_s"] for l in lines if l.get("tokens_per_s")]
timed = times[skip:]
print(f"{sum(timed) / len(timed):.4f} {len(timed)}")
PY
}

printf '%-16s %6s %10s %8s\n' engine round s/step steps
for r in $(seq 1 "$rounds"); do
    out="$work/burn-$r"
    RAYON_NUM_THREADS=$threads "$bin" train --json --config "$work/preset.toml" --corpus "$corpus" \
        --max-steps "$steps" --seed 0 --out "$out" >/dev/null 2>&1
    read -r s n < <(rate "$out/metrics.jsonl")
    printf '%-16s %6s %10s %8s\n' "corrflow-train" "$r" "$s" "$n"
    out="$work/torch-$r"
    OMP_NUM_THREADS=$threads "$py" -m corrflow.pretrain --config "$work/preset.toml" --corpus "$corpus" \
        --out "$out" --max-steps "$steps" --device cpu >/dev/null 2>"$work/torch.err" || { cat "$work/torch.err"; exit 1; }
    read -r s n < <(rate "$out/metrics.jsonl")
    printf '%-16s %6s %10s %8s\n' "corrflow.pretrain" "$r" "$s" "$n"
done
