//! CubeCL's caches on disk for the GPU backends: compiled kernels (PTX on CUDA; SPIR-V where
//! wgpu compiles through Vulkan's SPIR-V path) and autotune results, so a second run neither
//! compiles nor tunes again what the first one did. CubeCL keeps no compiled kernels by default
//! and puts autotune results in a `target/` directory found from the working directory; a
//! trainer run from anywhere should find them in one place.
//!
//! CubeCL keys a compiled kernel by its name and launch settings, not by its source: a kernel of
//! this crate whose body changed would load the old binary. So compiled kernels live in a
//! subdirectory named by a fingerprint of this crate's kernel sources. Autotune results stay in
//! the directory itself: they time burn's own kernels (matmul, reductions), which CubeCL keys by
//! its version, the device and the shapes, so a change to this crate's kernels keeps them (cold
//! tuning was 245 s of a 280-s first step on lavapipe).

use std::path::PathBuf;

use cubecl::config::cache::CacheConfig;
use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};

/// The directory: `CORRFLOW_KERNEL_CACHE`, else `$XDG_CACHE_HOME/corrflow/cubecl`, else
/// `~/.cache/corrflow/cubecl`; `None` when `CORRFLOW_KERNEL_CACHE` is `off` or no home is known.
pub fn directory() -> Option<PathBuf> {
    match std::env::var_os("CORRFLOW_KERNEL_CACHE") {
        Some(v) if v == "off" => None,
        Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
        _ => std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .map(|c| c.join("corrflow").join("cubecl")),
    }
}

/// This crate's CubeCL kernel sources (`fused/cube/`).
const KERNEL_SOURCES: &[&str] = &[
    include_str!("fused/cube/mod.rs"),
    include_str!("fused/cube/adamw.rs"),
    include_str!("fused/cube/layer_norm.rs"),
    include_str!("fused/cube/attention.rs"),
    include_str!("fused/cube/decoder.rs"),
];

/// The first 16 hex digits of the sha256 of the sources (each followed by a 0 byte, so moving
/// text from one file to the next is a change too): the name of the cache's subdirectory.
fn fingerprint(sources: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for s in sources {
        h.update(s.as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..8])
}

/// Where this build's caches go inside `dir`: `dir/kernels-<fingerprint of the kernel sources>`.
pub fn versioned(dir: &std::path::Path) -> PathBuf {
    dir.join(format!("kernels-{}", fingerprint(KERNEL_SOURCES)))
}

/// The configuration CubeCL would load (a `cubecl.toml` or `burn.toml` above the working
/// directory, then its environment variables), with the caches this module sets where that
/// configuration leaves them at CubeCL's defaults: compiled kernels in [`versioned`]`(dir)`,
/// autotune results in `dir`.
pub fn with_caches(mut config: CubeClRuntimeConfig, dir: PathBuf) -> CubeClRuntimeConfig {
    if config.compilation.cache.is_none() {
        config.compilation.cache = Some(CacheConfig::File(versioned(&dir)));
    }
    if matches!(config.autotune.cache, CacheConfig::Target) {
        config.autotune.cache = CacheConfig::File(dir);
    }
    config
}

/// Turns the caches on for this process (see [`directory`]); `false` when they stay off, or when
/// CubeCL has already read its configuration (the first GPU call does), so call it first.
pub fn enable_from_env() -> bool {
    let Some(dir) = directory() else { return false };
    if std::fs::create_dir_all(versioned(&dir)).is_err() {
        tracing::warn!("kernel cache {} cannot be created; kernels are compiled anew", dir.display());
        return false;
    }
    if CubeClRuntimeConfig::storage().lock().is_some() {
        return false;
    }
    let config = with_caches(CubeClRuntimeConfig::from_current_dir().override_from_env(), dir.clone());
    CubeClRuntimeConfig::set(config);
    tracing::info!("CubeCL kernel cache {}, autotune cache {}", versioned(&dir).display(), dir.display());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cubecl_caches_move_to_another_directory_when_a_kernel_source_changes() {
        let a = fingerprint(&["fn k() { 1 }", "fn j() {}"]);
        assert_eq!(a, fingerprint(&["fn k() { 1 }", "fn j() {}"]));
        assert_ne!(a, fingerprint(&["fn k() { 2 }", "fn j() {}"]));
        // File boundaries count: moving text from one file to the next is a change too.
        assert_ne!(a, fingerprint(&["fn k() { 1 }fn j", "() {}"]));
        let dir = versioned(std::path::Path::new("/tmp/k"));
        assert!(dir.starts_with("/tmp/k"));
        assert_eq!(dir.file_name().unwrap().len(), "kernels-".len() + 16);
    }

    #[test]
    fn caches_go_where_the_configuration_leaves_cubecls_defaults() {
        let dir = PathBuf::from("/tmp/k");
        let c = with_caches(CubeClRuntimeConfig::default(), dir.clone());
        assert!(matches!(c.compilation.cache, Some(CacheConfig::File(ref p)) if *p == versioned(&dir)));
        // Autotune results outlive a change of this crate's kernels: they time burn's.
        assert!(matches!(c.autotune.cache, CacheConfig::File(ref p) if *p == dir));
        let mut mine = CubeClRuntimeConfig::default();
        mine.compilation.cache = Some(CacheConfig::Global);
        mine.autotune.cache = CacheConfig::Local;
        let c = with_caches(mine, dir);
        assert!(matches!(c.compilation.cache, Some(CacheConfig::Global)));
        assert!(matches!(c.autotune.cache, CacheConfig::Local));
    }
}
