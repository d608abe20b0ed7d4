#!/usr/bin/env bash
# Fetches ONNX Runtime's shared library from the pinned PyPI wheel (ort's own build would
# download it from a CDN, which this network blocks) into corrflow's cache folder, where
# corrflow finds it. Idempotent; prints the library's path.
set -euo pipefail
version="${ORT_VERSION:-1.31.1}"
dest="${CORRFLOW_CACHE:-$HOME/.cache/corrflow}/onnxruntime/$version"
lib="$dest/libonnxruntime.so"
if [ ! -e "$lib" ]; then
  echo "fetch-onnxruntime: onnxruntime $version from PyPI" >&2
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  py=python3
  # No system pip: use the test venv's (scripts/python-env.sh creates it with pip).
  "$py" -m pip --version >/dev/null 2>&1 || py="$("$(dirname "$0")/python-env.sh")"
  pyver="$("$py" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 \
    -d "$tmp" "onnxruntime==$version" >&2
  wheel="$(ls "$tmp"/onnxruntime-*.whl)"
  unzip -q -o "$wheel" 'onnxruntime/capi/libonnxruntime.so*' -d "$tmp/x"
  mkdir -p "$dest"
  so="$(ls "$tmp"/x/onnxruntime/capi/libonnxruntime.so* | head -1)"
  cp "$so" "$lib.partial"
  mv "$lib.partial" "$lib"
fi
echo "$lib"
