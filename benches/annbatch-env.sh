#!/usr/bin/env bash
# Creates (once) a venv with annbatch, the anchor of the atlas driver's epoch stage, and prints
# its python path. annbatch needs Python >= 3.12, newer than the test venv's, so it gets its own
# venv; the first Python >= 3.12 found (PYTHON312, python3.13, python3.12, then pyenv's) makes
# it. Exits 1 with a message when there is none: the driver then leaves the anchor out.
set -euo pipefail
venv="${ANNBATCH_VENV:-$HOME/.cache/corrflow/annbatch-venv}"
want="annbatch[zarrs]==0.3.1"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.requirement" 2>/dev/null)" != "$want" ]; then
  base=""
  for p in "${PYTHON312:-}" python3.13 python3.12 "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python; do
    [ -n "$p" ] || continue
    if "$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then base="$p"; break; fi
  done
  [ -n "$base" ] || { echo "annbatch-env: annbatch needs Python >= 3.12; none found (set PYTHON312)" >&2; exit 1; }
  echo "annbatch-env: creating $venv with $base" >&2
  "$base" -m venv "$venv"
  "$venv/bin/pip" install -q "$want" >&2
  echo "$want" >"$venv/.requirement"
fi
echo "$venv/bin/python"
