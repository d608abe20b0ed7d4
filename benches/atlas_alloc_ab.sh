#!/usr/bin/env bash
# Peak RSS and time of `vocab build` and of ingest from h5ad and zarr under glibc allocator
# settings, interleaved per size, the page cache dropped before each run (root):
#
#   benches/atlas_alloc_ab.sh CORRFLOW WORK OUT.tsv "1 64" "default trim1000 arena2"
#
# WORK/x<size>/data holds the scale driver's atlases (benches/atlas_synth.py, both formats).
# Settings: default (glibc as is); trim250 / trim1000 (benches/lib/trim_every.c preloaded:
# malloc_trim(0) every 250 ms / 1 s); arena1 / arena2 (glibc.malloc.arena_max); mmap1m / mmap4m
# (glibc.malloc.mmap_threshold fixed at 1 or 4 MiB: larger blocks get mappings of their own); h5fl0
# (benches/lib/h5_free_lists_off.c preloaded: HDF5's own free lists off; needs libhdf5-dev). STAGES
# limits the stages (default "vocab ingest_h5ad ingest_zarr"). BENCHMARKS "Atlas scale", sessions 64, 69.
set -euo pipefail
bin=${1:?CORRFLOW} work=${2:?WORK} out=${3:?OUT.tsv} sizes=${4:?SIZES} settings=${5:?SETTINGS}
stages=${STAGES:-"vocab ingest_h5ad ingest_zarr"}
here=$(cd "$(dirname "$0")" && pwd)
shim=$work/libtrim.so
gcc -O2 -shared -fPIC -o "$shim" "$here/lib/trim_every.c" -lpthread
h5shim=$work/libh5fl0.so
case " $settings " in
  *" h5fl0 "*) gcc -O2 -shared -fPIC -o "$h5shim" "$here/lib/h5_free_lists_off.c" $(pkg-config --cflags --libs hdf5) ;;
esac
env_of() {
  case $1 in
    default) ;;
    arena1 | arena2) echo "GLIBC_TUNABLES=glibc.malloc.arena_max=${1#arena}" ;;
    trim250 | trim1000) echo "LD_PRELOAD=$shim TRIM_MS=${1#trim}" ;;
    mmap1m | mmap4m) echo "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=$((${1//[a-z]/} << 20))" ;;
    h5fl0) echo "LD_PRELOAD=$h5shim" ;;
    *) echo "unknown setting $1 (default, trim250, trim1000, arena1, arena2, mmap1m, mmap4m, h5fl0)" >&2; exit 2 ;;
  esac
}
[ -s "$out" ] || printf 'size\tsetting\tstage\telapsed_s\tuser_s\tsys_s\tmaxrss_kb\n' >"$out"
for s in $sizes; do
  d=$work/x$s/data
  [ -d "$work/x$s/vocab" ] || "$bin" vocab build --out "$work/x$s/vocab" "$d/kang.h5ad" "$d/cbmc.h5ad" "$d/pbmc3k.h5ad" >/dev/null
  for st in $settings; do
    e=$(env_of "$st")
    for stage in $stages; do
      o=$work/alloc-out
      rm -rf "$o"
      sync
      echo 3 >/proc/sys/vm/drop_caches
      case $stage in
        vocab) cmd=("$bin" vocab build --out "$o" "$d/kang.h5ad" "$d/cbmc.h5ad" "$d/pbmc3k.h5ad") ;;
        ingest_h5ad) cmd=("$here/lib/ingest_atlases.sh" "$bin" "$work/x$s/vocab" "$o" "$d" h5ad) ;;
        ingest_zarr) cmd=("$here/lib/ingest_atlases.sh" "$bin" "$work/x$s/vocab" "$o" "$d" zarr) ;;
        *) echo "unknown stage $stage" >&2; exit 2 ;;
      esac
      r=$(env $e /usr/bin/time -f "%e %U %S %M" "${cmd[@]}" 2>&1 >/dev/null | tail -1)
      printf '%s\t%s\t%s\t%s\n' "$s" "$st" "$stage" "$(echo "$r" | tr ' ' '\t')" | tee -a "$out"
    done
  done
done
rm -rf "$work/alloc-out"
