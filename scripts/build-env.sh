# Sourced by every script that runs cargo (and mirrored in the Makefile): cargo decides that a
# workspace crate is fresh by its files' *contents* (checksum freshness) instead of their
# modification times. Every file of a fresh clone is new, so with times each CI run in a new
# clone rebuilt every workspace crate on a warm target dir (~35 min of a ~60 min run, stops
# 63–64) although nothing had changed. The option is unstable in cargo 1.95, so RUSTC_BOOTSTRAP
# lets the stable toolchain take it (cargo passes rustc `-Z checksum-hash-algorithm` for it).
# Its side effect on dependencies: the build probes of anyhow, thiserror and proc-macro2 see
# RUSTC_BOOTSTRAP and turn on the unstable APIs they compile a probe for (error backtrace
# access, span locations); version_check-based probes (ahash) still read the stable channel.
# Run cargo by hand with the same two variables (`. scripts/build-env.sh`): without them cargo
# rebuilds what these builds made, and these builds then rebuild it back.
export RUSTC_BOOTSTRAP=1
export CARGO_UNSTABLE_CHECKSUM_FRESHNESS=true
