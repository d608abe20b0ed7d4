#!/usr/bin/env bash
# `corrflow train --device wgpu` (burn's wgpu backend with the CubeCL kernels) for two or more
# binaries, interleaved rounds: compares kernel versions on whatever Vulkan device is present,
# including Mesa's software driver (lavapipe) on a machine without a GPU. Times there say how
# the kernels run on the CPU's threads, not on a GPU.
#
#   benches/train_wgpu.sh CORPUS GRAPH OUT STEPS [ROUNDS] LABEL=BIN [LABEL=BIN ...]
#
# Each BIN is built with `cargo build --release --features wgpu`. The model is configs/tiny.toml
# widened to a head width of 64 (the paper config's) at up to 512 positions, batch 4, every step
# profiled (`--profile-steps`: ms per phase, the device synchronised after each). The kernel
# cache is per label and warm after the first round; the first SKIP (default 3) steps of every
# run are not timed. Results: OUT/results.jsonl and a table on stdout.
set -eu
CORPUS=$1 GRAPH=$2 OUT=$3 STEPS=$4 ROUNDS=$5
shift 5
HERE=$(cd "$(dirname "$0")" && pwd)
SKIP=${SKIP:-3}
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
mkdir -p "$OUT"
: > "$OUT/results.jsonl"
sed -e 's/^device = .*/device = "wgpu"/' -e 's/^hidden = .*/hidden = 128/' -e 's/^ffn = .*/ffn = 256/' \
    -e 's/^heads = .*/heads = 2/' -e 's/^max_len = .*/max_len = 512/' -e 's/^batch_size = .*/batch_size = 4/' \
    -e 's/^eval_every = .*/eval_every = 100000/' -e 's/^checkpoint_every = .*/checkpoint_every = 100000/' \
    -e 's/^eval_cells = .*/eval_cells = 8/' "$HERE/../configs/tiny.toml" > "$OUT/wgpu.toml"

for round in $(seq 1 "$ROUNDS"); do
    for spec in "$@"; do
        label=${spec%%=*} bin=${spec#*=}
        rm -rf "$OUT/run-$label"
        CORRFLOW_KERNEL_CACHE="$OUT/kernel-cache-$label" "$bin" --config "$OUT/wgpu.toml" train \
            --corpus "$CORPUS" --graph "$GRAPH" --out "$OUT/run-$label" --max-steps "$STEPS" \
            --profile-steps > "$OUT/$label-$round.log" 2>&1
        python3 - "$OUT/run-$label/metrics.jsonl" "$SKIP" "$label" "$round" <<'PY' | tee -a "$OUT/results.jsonl"
import json, statistics, sys
path, skip, label, rnd = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
rows = [json.loads(l) for l in open(path) if '"tokens"' in l]
first = rows[0]["tokens"] / rows[0]["tokens_per_s"]
rows = rows[skip:]
ph = lambda k: statistics.median(r["phase_ms"].get(k, 0.0) for r in rows)
print(json.dumps({"impl": label, "round": rnd, "steps": len(rows),
    "tokens_per_s": sum(r["tokens"] for r in rows) / sum(r["tokens"] / r["tokens_per_s"] for r in rows),
    "first_step_s": first, "phase_ms": {k: ph(k) for k in ("forward", "backward", "optimizer")},
    "losses": [round(r["loss"], 6) for r in rows[:3]]}))
PY
    done
done
python3 - "$OUT/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'impl':<12} {'tokens/s':>9} {'fwd ms':>8} {'bwd ms':>8} {'opt ms':>8}  (median over rounds)")
for impl in dict.fromkeys(r["impl"] for r in rows):
    rs = [r for r in rows if r["impl"] == impl]
    m = lambda f: statistics.median(f(r) for r in rs)
    print(f"{impl:<12} {m(lambda r: r['tokens_per_s']):>9.0f} {m(lambda r: r['phase_ms']['forward']):>8.1f}"
          f" {m(lambda r: r['phase_ms']['backward']):>8.1f} {m(lambda r: r['phase_ms']['optimizer']):>8.1f}")
PY
