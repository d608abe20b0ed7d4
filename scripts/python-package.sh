#!/usr/bin/env bash
# Builds the corrflow Python package as the wheel one would upload (scripts/wheel.sh: abi3,
# manylinux, HDF5 bundled) with the shared cargo target dir, and installs that wheel into the
# test venv (or the Python given as $1): the tests run what a user would install. Prints the
# venv's python path. `pip install ./python` builds from a fresh checkout instead.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
test_py="$("$here/scripts/python-env.sh")"
py="${1:-$test_py}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/corrflow/target}"
. "$here/scripts/build-env.sh"
wheel="$("$here/scripts/wheel.sh" "$CARGO_TARGET_DIR/wheels")"
"$py" -m pip install -q --force-reinstall --no-deps "$wheel" >&2
echo "$py"
