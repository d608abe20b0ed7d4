#!/usr/bin/env bash
# Creates (once) the Python venv the tests use to read corrflow's outputs with pyarrow,
# datasets and anndata, and to run the independent Geneformer reference.
# Prints the venv's python path.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="${CORRFLOW_TEST_VENV:-$HOME/.cache/corrflow/test-venv}"
req="$here/tests/python/requirements.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "python-env: creating $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip >&2
  "$venv/bin/pip" install -q -r "$req" >&2
  echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
