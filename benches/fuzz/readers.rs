//! The zarr and loom readers under mutation (issue 51). `zarr`: each execution damages one file
//! of a seed store (a chunk's bytes, or a metadata JSON as text) or deletes one, reads the store
//! to its end and puts the file back. `loom`: each execution mutates the bytes of a seed loom
//! file (HDF5), as the `h5` target does for h5ad and 10x files. Included by `benches/fuzz.rs`
//! and, for the short run in `make test`, by `tests/zarr_loom.rs`.

use std::path::{Path, PathBuf};

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::mutate::{guarded, mutate, read_all};

/// A seed store copied to scratch space, and its files (metadata first).
pub struct Store {
    pub dir: PathBuf,
    pub metadata: Vec<PathBuf>,
    pub chunks: Vec<PathBuf>,
}

impl Store {
    /// Copies `seed` to `scratch/name`.
    pub fn copy(seed: &Path, scratch: &Path, name: &str) -> Store {
        let dir = scratch.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        let mut s = Store { dir: dir.clone(), metadata: Vec::new(), chunks: Vec::new() };
        copy(seed, &dir, &mut s);
        s.metadata.sort();
        s.chunks.sort();
        s
    }
}

fn copy(from: &Path, to: &Path, s: &mut Store) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy(&e.path(), &t, s);
            continue;
        }
        std::fs::copy(e.path(), &t).unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name == "zarr.json" || name.starts_with(".z") {
            s.metadata.push(t);
        } else {
            s.chunks.push(t);
        }
    }
}

/// What one execution gave: `Ok(None)` read to the end, `Ok(Some(message))` refused cleanly,
/// `Err(message)` a panic.
pub type Outcome = Result<Option<String>, String>;

/// One execution of the `zarr` target on `stores[i % len]`.
pub fn zarr(i: u64, rng: &mut ChaCha8Rng, stores: &[Store], opts: &corrflow::formats::ReadOptions) -> Outcome {
    let s = &stores[i as usize % stores.len()];
    let meta = rng.random_bool(0.5) || s.chunks.is_empty();
    let files = if meta { &s.metadata } else { &s.chunks };
    let file = &files[rng.random_range(0..files.len())];
    let original = std::fs::read(file).unwrap();
    if rng.random_bool(0.1) {
        std::fs::remove_file(file).unwrap();
    } else {
        std::fs::write(file, mutate(&original, rng, !meta)).unwrap();
    }
    let outcome = guarded(|| read_all(&s.dir, opts).err());
    std::fs::write(file, original).unwrap();
    outcome
}

/// One execution of the `loom` target: `seeds[i % len]` mutated into `path`.
pub fn loom(
    i: u64,
    rng: &mut ChaCha8Rng,
    seeds: &[Vec<u8>],
    path: &Path,
    opts: &corrflow::formats::ReadOptions,
) -> Outcome {
    let seed = &seeds[i as usize % seeds.len()];
    let _ = std::fs::remove_file(path);
    std::fs::write(path, mutate(seed, rng, true)).unwrap();
    guarded(|| read_all(path, opts).err())
}

/// Read options of both targets: small chunks of cells, and a short patience for HDF5 files
/// libhdf5 loops on.
pub fn options(scratch: &Path) -> corrflow::formats::ReadOptions {
    corrflow::formats::ReadOptions {
        chunk_cells: 16,
        scratch_dir: scratch.to_path_buf(),
        open_patience: Some(std::time::Duration::from_secs(2)),
        ..Default::default()
    }
}
