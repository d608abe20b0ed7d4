#!/usr/bin/env bash
# Ingests the scale driver's three atlases (kang, cbmc, pbmc3k) one after the other into one
# corpus, as the atlas benches time it (an executable, so that `/usr/bin/time` can run it):
#
#   benches/lib/ingest_atlases.sh CORRFLOW VOCAB OUT DATA_DIR EXT
#
# reads DATA_DIR/<atlas>.EXT (h5ad or zarr) and stops at the first ingest that fails.
set -euo pipefail
bin=${1:?CORRFLOW} vocab=${2:?VOCAB} out=${3:?OUT} data=${4:?DATA_DIR} ext=${5:?EXT}
for a in kang cbmc pbmc3k; do
  "$bin" ingest --vocab "$vocab" --atlas "$a" --out "$out" "$data/$a.$ext" >/dev/null
done
