#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, over what benches/gpu/pack.sh packed
# (PACK, default .gpu/), writing logs and results to OUT:
#
#   benches/gpu/on_device.sh checks OUT
#       the CUDA gradient checks: every fused operation against its composition on burn-cuda
#       without fusion (the CubeCL kernels) and with fusion (the default bodies), the attention
#       at the paper length included (`corrflow-model`'s ignored `cuda_` tests);
#   benches/gpu/on_device.sh bench OUT [STEPS WARMUP]
#       benches/gpu/run.sh: PyTorch BertForMaskedLM against `--device cuda` (fusion) and
#       `--device cuda-kernels` (the CubeCL kernels), cold and warm kernel caches, STEPS steps
#       (default 300), the first WARMUP (default 50) untimed. TORCH=0, PROFILE=1 pass through;
#       DEADLINE_S (default 510) ends the corrflow runs in time for a 600-s device call to come
#       back with every result written so far (runs past it are cut or skipped, and say so).
#   benches/gpu/on_device.sh all OUT [STEPS WARMUP]
#       both in one call, for a session whose device time allows one machine start only (15
#       minutes, starts included): the benchmark first (STEPS default 200, WARMUP 30; PyTorch
#       fp32 and bf16, corrflow.pretrain bf16, then burn; DEADLINE_S default 400), then the
#       checks in what is left of ALL_S (default 570) seconds. It carries every packed file:
#       pack with `KANG=ctrl benches/gpu/pack.sh` (~60 MiB with the repository and the Python
#       extension; with both Kang halves it would be over the device tool's 64 MiB).
#
# The bench runs `python -m corrflow.pretrain` (issue 42) with the packed native module
# (PACK/native.xz, unpacked into python/corrflow/) on PYTHONPATH: it needs the device's torch,
# transformers, numpy and pyarrow, and is skipped, saying why, when one is missing.
#
# Each is one device call; carry only its files (pack.sh says which).
set -u
MODE=$1 OUT=$2
PACK=${PACK:-.gpu}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=/tmp/corrflow-gpu
mkdir -p "$BIN" "$OUT"

unxz_to() { # unxz_to FILE.xz DEST: xz where installed, else Python's lzma
    if command -v xz > /dev/null; then
        xz -dc "$1" > "$2"
    else
        python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
    fi
}

unxz_to "$PACK/lib.tar.xz" "$BIN/lib.tar" && tar -C "$BIN" -xf "$BIN/lib.tar"
export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d:$LD_LIBRARY_PATH"
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

START=$(date +%s)
checks() { # [TIMEOUT]
    unxz_to "$PACK/model-tests.xz" "$BIN/model-tests" && chmod +x "$BIN/model-tests"
    # One test at a time: each takes the whole GPU, and a failure names its backend.
    timeout "${1:-570}" "$BIN/model-tests" --ignored --test-threads 1 cuda_ 2>&1 | tee "$OUT/checks.log"
    return "${PIPESTATUS[0]}"
}
bench() { # DEADLINE STEPS WARMUP
    unxz_to "$PACK/corrflow.xz" "$BIN/corrflow" && chmod +x "$BIN/corrflow"
    # The Python package: its sources are in the working tree, its native module packed.
    [ -f "$PACK/native.xz" ] && unxz_to "$PACK/native.xz" "$HERE/../../python/corrflow/_native.abi3.so"
    export PYTHONPATH="$HERE/../../python${PYTHONPATH:+:$PYTHONPATH}"
    DEADLINE_S=$1 "$HERE/run.sh" "$PACK/corpus" "$PACK/graph" "$OUT" "$2" "$3" \
        fusion="$BIN/corrflow" kernels="$BIN/corrflow@cuda-kernels"
}

case $MODE in
    checks) checks ;;
    bench) bench "${DEADLINE_S:-510}" "${3:-300}" "${4:-50}" ;;
    all)
        TORCH_PRECISIONS=${TORCH_PRECISIONS:-fp32 bf16} PRETRAIN_PRECISIONS=${PRETRAIN_PRECISIONS:-bf16} \
            bench "${DEADLINE_S:-400}" "${3:-200}" "${4:-30}"
        left=$(( ${ALL_S:-570} - ($(date +%s) - START) ))
        echo "checks: $left s left" | tee "$OUT/checks-budget.txt"
        [ "$left" -ge 30 ] && checks "$left"
        ;;
    *)
        echo "usage: $0 checks|bench|all OUT [STEPS WARMUP]" >&2
        exit 2
        ;;
esac
