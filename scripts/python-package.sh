#!/usr/bin/env bash
# Builds the corrflow Python package (python/: PyO3 + maturin, an abi3 wheel) with the shared
# cargo target dir and installs it into the test venv (or the Python given as $1). Prints the
# venv's python path. `pip install ./python` does the same from a fresh checkout.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
test_py="$("$here/scripts/python-env.sh")"
py="${1:-$test_py}"
# maturin comes from the test venv (tests/python/requirements.txt).
maturin="$(dirname "$test_py")/maturin"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/corrflow/target}"
wheels="$CARGO_TARGET_DIR/wheels"
rm -f "$wheels"/corrflow-*.whl
"$maturin" build --release --quiet -m "$here/python/Cargo.toml" -o "$wheels" >&2
"$py" -m pip install -q --force-reinstall --no-deps "$wheels"/corrflow-*.whl >&2
echo "$py"
