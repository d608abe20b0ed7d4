#!/usr/bin/env bash
# Packs what a GPU session needs into DEST (default .gpu/, ignored by git) for a machine that
# has no Rust toolchain and no network: the binaries of `make test`'s build (features
# failpoints, wgpu and cuda, so no separate CUDA build), stripped and xz-compressed, the shared
# libraries they load that a bare machine may lack (HDF5 and what it links), and the
# benchmark's corpus and graph (Kang ctrl + stim, as in BENCHMARKS.md).
#
#   benches/gpu/pack.sh [DEST]     (after `make test`, its build is already there)
#
# Then, on the GPU machine, from the repository root (`benches/gpu/on_device.sh`):
#   checks: DEST/model-tests.xz, DEST/lib.tar.xz   (the CUDA gradient checks; ~30 MB with the repo)
#   bench:  DEST/corrflow.xz, DEST/native.xz, DEST/lib.tar.xz, DEST/corpus, DEST/graph
#   all:    all of DEST, packed with KANG=ctrl   (~60 MiB with the repo)
# Each call carries only what it needs: the device tool carries 64 MiB at most.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DEST=${1:-$ROOT/.gpu}
TARGET=${CARGO_TARGET_DIR:-$HOME/.cache/corrflow/target}
FEATURES=${TEST_FEATURES:-corrflow/failpoints corrflow/wgpu corrflow/cuda}
mkdir -p "$DEST"

# make test's build (nothing to do right after it), and the model's test binary by its report.
cd "$ROOT"
tests=$(CARGO_TARGET_DIR=$TARGET cargo test --release --workspace --features "$FEATURES" --lib --bins --tests \
    --no-run --message-format=json |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "corrflow_model" and m.get("executable"):
        print(m["executable"])')
bin=$TARGET/release/corrflow
[ -x "$bin" ] && [ -x "$tests" ] || { echo "no $bin or corrflow-model test binary after the build" >&2; exit 1; }
# The Python package's native module, as scripts/python-package.sh (make test) built it, for
# `python -m corrflow.pretrain` on the GPU (the package's Python sources travel with the tree).
native=$TARGET/release/lib_native.so
[ -f "$native" ] || { echo "no $native: run scripts/python-package.sh (make test does)" >&2; exit 1; }

for pair in "corrflow:$bin" "model-tests:$tests" "native:$native"; do
    name=${pair%%:*} path=${pair#*:}
    strip -o "$DEST/$name" "$path"
    xz -T2 -6 -f "$DEST/$name"
done

# Shared libraries outside glibc and the compiler runtime, which every Linux has.
rm -rf "$DEST/lib" && mkdir "$DEST/lib"
for lib in $(ldd "$bin" "$tests" "$native" | awk '/=> \// {print $3}' | sort -u); do
    case $(basename "$lib") in
        libc.so* | libm.so* | libgcc_s.so* | ld-linux* | libpthread.so* | libdl.so* | librt.so*) ;;
        *) cp -L "$lib" "$DEST/lib/" ;;
    esac
done
tar -C "$DEST" -cJf "$DEST/lib.tar.xz" lib && rm -rf "$DEST/lib"

# KANG=ctrl packs half the cells (~10 MB less), enough for 300 steps of 12 cells, so that
# `on_device.sh all` carries everything in one call under 64 MiB.
KANG=${KANG:-ctrl stim}
if [ -d "$DEST/corpus" ] && [ "$(cat "$DEST/corpus.kang" 2>/dev/null)" != "$KANG" ]; then
    rm -rf "$DEST/corpus" "$DEST/graph"
fi
if [ ! -d "$DEST/corpus" ]; then
    "$bin" ingest --atlas kang --out "$DEST/corpus" $(for k in $KANG; do echo "datasets/data/kang_$k.h5ad"; done)
    echo "$KANG" > "$DEST/corpus.kang"
fi
if [ ! -d "$DEST/graph" ]; then
    "$bin" graph build --corpus "$DEST/corpus" --out "$DEST/graph"
fi
du -sh "$DEST"/* | sed "s|$DEST/||"
