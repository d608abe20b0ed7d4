//! What every fuzz target shares: the seeded mutations, catching a panic as a failure, and
//! reading a file of cells to its end. Included by `benches/fuzz.rs` and, for the short run in
//! `make test`, by `tests/zarr_loom.rs`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The generator of execution `i`: its own stream of one seeded generator, so that any range of
/// executions replays exactly.
pub fn execution_rng(i: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(28);
    rng.set_stream(i);
    rng
}

/// 1–4 mutations of `seed`: bit flips, boundary bytes, 0xFF blocks, truncation, and for text
/// also deletions and duplicated slices.
pub fn mutate(seed: &[u8], rng: &mut ChaCha8Rng, binary: bool) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        if b.is_empty() {
            b.push(rng.random());
            continue;
        }
        let at = rng.random_range(0..b.len());
        match rng.random_range(0..if binary { 4 } else { 6 }) {
            0 => b[at] ^= 1 << rng.random_range(0..8),
            1 => b[at] = [0u8, 0xff, 0x7f, 0x80, b'0', b'9'][rng.random_range(0..6)],
            2 => {
                let end = (at + rng.random_range(1..64)).min(b.len());
                b[at..end].fill(0xff);
            }
            3 => b.truncate(at),
            4 => {
                let n = rng.random_range(1..8).min(b.len() - at);
                b.drain(at..at + n);
            }
            _ => {
                let end = (at + rng.random_range(1..32)).min(b.len());
                let piece = b[at..end].to_vec();
                let to = rng.random_range(0..b.len());
                b.splice(to..to, piece);
            }
        }
    }
    b
}

/// Runs `f`, catching a panic as its message.
pub fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

/// Reads every chunk of the cells at `path`; the error's message when it is refused.
pub fn read_all(path: &Path, opts: &corrflow::formats::ReadOptions) -> Result<(), String> {
    let mut src = corrflow::formats::open(path, opts).map_err(|e| e.to_string())?;
    let n = src.n_cells();
    let mut at = 0;
    while at < n {
        let end = (at + opts.chunk_cells).min(n);
        src.read_chunk(at..end).map_err(|e| e.to_string())?;
        at = end;
    }
    Ok(())
}
