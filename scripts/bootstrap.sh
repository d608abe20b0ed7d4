#!/usr/bin/env bash
# Installs what corrflow needs on a fresh Debian machine: the HDF5 C library (for the
# hdf5-metno crate), pkg-config, unzip, and a software Vulkan driver for the CubeCL kernel
# tests. Idempotent and quiet when everything is present.
set -euo pipefail
need=()
[ -e /usr/include/hdf5/serial/hdf5.h ] || [ -e /usr/include/hdf5.h ] || need+=(libhdf5-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v unzip >/dev/null || need+=(unzip)
# Mesa's software Vulkan driver (lavapipe): the CubeCL kernels' gradient checks run on it.
[ -e /usr/share/vulkan/icd.d/lvp_icd.x86_64.json ] || need+=(mesa-vulkan-drivers libvulkan1)
# iproute2's `ip netns`: the cluster tests' hosts are network namespaces (tests/cluster.rs).
command -v ip >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  echo "bootstrap: installing ${need[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
fi
