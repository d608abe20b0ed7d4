//! Which chunks of a zarr array are stored, and which chunk a failed read came from.
//!
//! zarr reads a chunk that is not stored as the array's fill value, and zarr-python leaves out
//! chunks that hold nothing else (unless written with `write_empty_chunks`). For a dense matrix
//! or an obs column that is the definition. For the arrays of a sparse matrix it is not: a lost
//! chunk of `data` or `indices` read as zeros turns counts into explicit zeros and genes into
//! gene 0, and a lost chunk of `indptr` moves entries between cells, all without a trace. So
//! those arrays are read under a [`ChunkCheck`]: before a range is decoded, each chunk it
//! covers must be stored (a file for a chunk, an entry in the shard index for a chunk inside a
//! shard). Each chunk is looked up once (a stat, or one read of the shard's index), not decoded.
//! The one chunk zarr may omit there that can be told from a lost one is a run of `indptr`
//! zeros (cells before the first entry): an omitted `indptr` chunk is accepted when the offset
//! right after it is 0 too (`indptr` never decreases, so every offset in it is then 0) or when
//! it is the last (its end is checked against the number of entries).

use std::num::NonZeroU64;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::store::ReadStore;
use zarrs::array::codec::{ShardingCodec, ShardingCodecConfiguration, ShardingIndexLocation};
use zarrs::array::{Array, ArrayBytes, ArrayMetadata, ArraySubset, CodecOptions};
use zarrs::storage::byte_range::ByteRange;
use zarrs::storage::ReadableStorageTraits;

use crate::error::{Error, Result};

/// Which chunks an array may leave out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Omit {
    /// None (`data`, `indices`).
    Nothing,
    /// Chunks of zeros that the next offset proves to be zeros (`indptr`); the last chunk only
    /// when the matrix has no entries (`empty`), as its last offset is their number.
    LeadingZeros { empty: bool },
}

/// The chunk lookups of one 1-d array.
pub struct ChunkCheck {
    path: PathBuf,
    what: String,
    omit: Omit,
    fill_is_zero: bool,
    len: u64,
    shards: Option<Shards>,
    /// Chunks (inner chunks of a sharded array) known to be stored: reads are sequential, so
    /// one growing interval remembers them.
    known: Mutex<Range<u64>>,
}

/// How to find an inner chunk in a shard's index.
struct Shards {
    codec: ShardingCodec,
    /// Elements per inner chunk, and inner chunks per shard.
    inner: u64,
    per_shard: u64,
    index_bytes: u64,
    at_start: bool,
    /// The last shard's index (`None`: no shard stored).
    last: Mutex<Option<(u64, Option<Vec<u64>>)>>,
}

impl ChunkCheck {
    /// The check for a 1-d `array` (`what`: its key, e.g. `X/data`) of `path`.
    pub fn new(path: &Path, what: &str, array: &Array<ReadStore>, omit: Omit) -> Result<Self> {
        let fill_is_zero = array.fill_value().as_ne_bytes().iter().all(|&b| b == 0);
        let len = array.shape().first().copied().unwrap_or(0);
        let shards = sharding(path, what, array)?;
        Ok(Self {
            path: path.to_path_buf(),
            what: what.to_string(),
            omit,
            fill_is_zero,
            len,
            shards,
            known: Mutex::new(0..0),
        })
    }

    /// Checks that every chunk elements `r` lie in is stored; `value_at(i)` reads element `i`
    /// (for the `indptr` rule) without this check.
    pub fn check(&self, array: &Array<ReadStore>, r: &Range<u64>, value_at: impl Fn(u64) -> Result<i64>) -> Result<()> {
        if r.is_empty() {
            return Ok(());
        }
        let (lo, hi) = (self.chunk_of(array, r.start)?, self.chunk_of(array, r.end - 1)? + 1);
        {
            let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            if known.start <= lo && hi <= known.end {
                return Ok(());
            }
        }
        for k in lo..hi {
            let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            if known.contains(&k) {
                continue;
            }
            drop(known);
            if let Some(missing) = self.missing(array, k)? {
                if !self.may_omit(array, k, &value_at)? {
                    return Err(Error::format(&self.path, missing));
                }
            }
            known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            *known = if known.end == k {
                known.start..k + 1
            } else if known.start == k + 1 {
                k..known.end
            } else {
                k..k + 1
            };
        }
        Ok(())
    }

    /// The chunk (inner chunk when sharded) holding element `i`.
    fn chunk_of(&self, array: &Array<ReadStore>, i: u64) -> Result<u64> {
        match &self.shards {
            Some(s) => Ok(i / s.inner),
            None => array
                .chunk_grid()
                .chunk_indices(&[i])
                .ok()
                .flatten()
                .and_then(|c| c.first().copied())
                .ok_or_else(|| Error::format(&self.path, format!("{}: element {i} lies in no chunk", self.what))),
        }
    }

    /// `None` when chunk `k` is stored, else the message saying it is not.
    fn missing(&self, array: &Array<ReadStore>, k: u64) -> Result<Option<String>> {
        let store = array.storage();
        let stored = |key: &zarrs::storage::StoreKey| {
            store
                .size_key(key)
                .map_err(|e| Error::format(&self.path, format!("{}: cannot look up chunk {key}: {e}", self.what)))
        };
        let rest = "a sparse matrix's data, indices and indptr must have every chunk (read as the fill value, it \
                    would move counts between genes and cells); if the store was written with write_empty_chunks \
                    off (zarr-python's default), write it again with zarr.config.set({\"array.write_empty_chunks\": \
                    True})";
        let Some(s) = &self.shards else {
            let key = array.chunk_key(&[k]);
            return Ok(stored(&key)?
                .is_none()
                .then(|| format!("{}: chunk {k} (key {key}) is missing: {rest}", self.what)));
        };
        let (shard, inner) = (k / s.per_shard, k % s.per_shard);
        let key = array.chunk_key(&[shard]);
        let mut last = s.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_ref().is_none_or(|(at, _)| *at != shard) {
            let index = match stored(&key)? {
                None => None,
                Some(size) => Some(self.shard_index(array, s, &key, size)?),
            };
            *last = Some((shard, index));
        }
        let index = last.as_ref().and_then(|(_, i)| i.as_ref());
        Ok(match index {
            None => Some(format!("{}: chunk {shard} (key {key}) is missing: {rest}", self.what)),
            Some(ix) if ix[2 * inner as usize] == u64::MAX && ix[2 * inner as usize + 1] == u64::MAX => Some(format!(
                "{}: inner chunk {inner} of chunk {shard} (key {key}) is missing (its shard index has no entry for it): \
                 {rest}",
                self.what
            )),
            Some(_) => None,
        })
    }

    /// The decoded index of a stored shard (`size` bytes).
    fn shard_index(
        &self,
        array: &Array<ReadStore>,
        s: &Shards,
        key: &zarrs::storage::StoreKey,
        size: u64,
    ) -> Result<Vec<u64>> {
        let bad = |msg: String| Error::format(&self.path, format!("{}: shard {key}: {msg}", self.what));
        if size < s.index_bytes {
            return Err(bad(format!("{size} bytes, too short for its {}-byte index (cut short?)", s.index_bytes)));
        }
        let range =
            if s.at_start { ByteRange::FromStart(0, Some(s.index_bytes)) } else { ByteRange::Suffix(s.index_bytes) };
        let bytes = array
            .storage()
            .get_partial(key, range)
            .map_err(|e| bad(format!("cannot read its index: {e}")))?
            .ok_or_else(|| bad("vanished while being read".into()))?;
        let per = NonZeroU64::new(s.per_shard).ok_or_else(|| bad("no inner chunks".into()))?;
        let index = s
            .codec
            .decode_index(&bytes, &[per], &CodecOptions::default())
            .map_err(|e| bad(format!("damaged index: {e}")))?;
        if index.len() != 2 * s.per_shard as usize {
            return Err(bad(format!("its index has {} entries, expected {}", index.len(), 2 * s.per_shard)));
        }
        Ok(index)
    }

    /// Whether chunk `k`, not stored, may be read as the fill value: an `indptr` chunk with a
    /// zero fill value is, when the first stored chunk after it starts with 0 (offsets never
    /// decrease, so every offset up to there is 0), or when none follows and the matrix has no
    /// entries (its last offset is their number).
    fn may_omit(&self, array: &Array<ReadStore>, k: u64, value_at: &impl Fn(u64) -> Result<i64>) -> Result<bool> {
        let Omit::LeadingZeros { empty } = self.omit else { return Ok(false) };
        if !self.fill_is_zero {
            return Ok(false);
        }
        let mut next = k + 1;
        loop {
            let start = match &self.shards {
                Some(s) => next.saturating_mul(s.inner),
                None => array.chunk_grid().chunk_origin(&[next]).ok().flatten().map_or(u64::MAX, |o| o[0]),
            };
            if start >= self.len {
                return Ok(empty);
            }
            if self.missing(array, next)?.is_none() {
                return Ok(value_at(start)? == 0);
            }
            next += 1;
        }
    }
}

/// How to look up inner chunks, for an array whose only array-to-bytes codec is sharding with a
/// `bytes` (+ `crc32c`) index and nothing compressing whole shards after it; `None` otherwise
/// (unsharded, or sharded otherwise: then the shard files alone are looked up).
fn sharding(path: &Path, what: &str, array: &Array<ReadStore>) -> Result<Option<Shards>> {
    let ArrayMetadata::V3(meta) = array.metadata() else { return Ok(None) };
    let Some(at) = meta.codecs.iter().position(|c| c.name() == "sharding_indexed") else { return Ok(None) };
    if at + 1 != meta.codecs.len() || array.dimensionality() != 1 {
        return Ok(None);
    }
    let bad = |e: String| Error::format(path, format!("{what}: sharding codec: {e}"));
    let config: ShardingCodecConfiguration = meta.codecs[at].to_configuration().map_err(|e| bad(e.to_string()))?;
    let ShardingCodecConfiguration::V1(v1) = &config else { return Ok(None) };
    let mut index_bytes = 0;
    for c in &v1.index_codecs {
        match c.name() {
            "bytes" => {}
            "crc32c" => index_bytes += 4,
            _ => return Ok(None),
        }
    }
    let shard = array.chunk_shape(&[0]).map_err(|e| bad(e.to_string()))?[0].get();
    let inner = v1.chunk_shape.first().map_or(shard, |n| n.get());
    if inner == 0 || shard % inner != 0 {
        return Err(bad(format!("inner chunks of {inner} do not divide shards of {shard}")));
    }
    let per_shard = shard / inner;
    index_bytes = per_shard
        .checked_mul(16)
        .and_then(|b| b.checked_add(index_bytes))
        .ok_or_else(|| bad(format!("shards of {per_shard} inner chunks need an index larger than memory")))?;
    let codec = ShardingCodec::new_with_configuration(&config).map_err(|e| bad(e.to_string()))?;
    let at_start = v1.index_location == ShardingIndexLocation::Start;
    Ok(Some(Shards { codec, inner, per_shard, index_bytes, at_start, last: Mutex::new(None) }))
}

/// After a failed read of `ranges` of `array`: which chunk failed and why, found by decoding the
/// chunks there one by one (at most a few thousand). `None` when each decodes alone.
pub fn locate_failure(array: &Array<ReadStore>, what: &str, ranges: &[Range<u64>]) -> Option<String> {
    let chunks = array.chunks_in_array_subset(&ArraySubset::new_with_ranges(ranges)).ok()??;
    for idx in chunks.indices().into_iter().take(4096) {
        let key = array.chunk_key(&idx);
        let name = if idx.len() == 1 { idx[0].to_string() } else { format!("{:?}", idx.as_slice()) };
        if let Err(e) = decoded(|| array.retrieve_chunk::<ArrayBytes<'static>>(&idx)) {
            return Some(format!("{what}: chunk {name} (key {key}) cannot be decoded: {e}"));
        }
    }
    None
}

/// Runs a decode of `zarrs`, turning a panic inside it into an error: some of its decoders index
/// damaged bytes without checking them (a `vlen-utf8` length past the end of its chunk, found
/// by the fuzzer), and a damaged store must be refused, not crash the reader.
pub fn decoded<T, E: std::fmt::Display>(
    f: impl FnOnce() -> std::result::Result<T, E>,
) -> std::result::Result<T, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("damaged data the zarr decoder could not read ({msg})"))
        }
    }
}
