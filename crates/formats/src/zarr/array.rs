//! One zarr array of an AnnData store, read by ranges through `zarrs` (formats 2 and 3, sharded
//! or not, every codec zarr-python writes by default). A 1-d array keeps the last block it
//! decoded, so consecutive cell chunks that fall in one zarr chunk decode it once, and memory
//! stays at one block per array whatever the store's size. Blocks are whole zarr chunks
//! ([`ZArray::aligned_block`]). Strings (the cell names) are read through a [`TextCursor`] that
//! decodes a window of their chunk at a time, since zarr sizes that chunk from the array's
//! length; stores it cannot read keep a block of them as one byte buffer and its offsets
//! (BENCHMARKS "Atlas scale", sessions 57 and 65).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use zarrs::array::{Array, ArrayBytes, ArrayBytesOffsets, ArrayBytesRaw, ArraySubset};
use zarrs::plugin::ExtensionName;

use super::block::Block;
use super::chunks::{self, ChunkCheck, Omit};
use super::store::ReadStore;
use super::text::{self, TextCursor};
use crate::error::{Error, Result};
use crate::ChunkValues;

/// Entries decoded per read of a 1-d array (numbers; strings read an eighth of it).
const BLOCK: usize = 1 << 20;

pub type Store = Arc<ReadStore>;

/// How an array's elements are stored, as far as reading them goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    F32,
    F64,
    Int,
    Bool,
    Str,
}

/// An array of the store at `key` (e.g. `X/data`).
pub struct ZArray {
    path: PathBuf,
    what: String,
    // Boxed: an `Array` is ~900 bytes, and matrices and columns hold several.
    array: Box<Array<ReadStore>>,
    kind: Kind,
    dtype: String,
    shape: Vec<usize>,
    cache: std::sync::Mutex<Option<(Range<usize>, Block)>>,
    /// Strings whose chunks [`TextCursor`] reads: the cursor of the last chunk read.
    text: Option<std::sync::Mutex<Option<TextCursor>>>,
    /// Set for the arrays of a sparse matrix: chunks must be stored ([`chunks`]). Boxed: it
    /// holds the sharding codec, and columns hold arrays without one.
    chunks: Option<Box<ChunkCheck>>,
}

impl ZArray {
    /// Opens the array at `key`; `None` when there is no array there (a group, or nothing).
    pub fn open(path: &Path, store: &Store, key: &str) -> Result<Option<Self>> {
        if !is_array(path, key)? {
            return Ok(None);
        }
        let array = Array::open(store.clone(), &format!("/{key}")).map_err(|e| {
            // zarrs checks the fill value against the data type first: name the data type
            // when that is what corrflow could not read anyway.
            match declared_dtype(path, key) {
                Some(t) if !readable_dtype(&t) => unsupported(path, key, &t),
                _ => Error::format(path, format!("{key}: cannot open as a zarr array: {e}")),
            }
        })?;
        let dtype = array.data_type().name_v3().map(|n| n.to_string()).unwrap_or_else(|| array.data_type().to_string());
        let kind = match dtype.as_str() {
            "float32" => Kind::F32,
            "float64" => Kind::F64,
            "int8" | "int16" | "int32" | "int64" | "uint8" | "uint16" | "uint32" | "uint64" => Kind::Int,
            "bool" => Kind::Bool,
            "string" => Kind::Str,
            other => return Err(unsupported(path, key, other)),
        };
        let shape = array.shape().iter().map(|&n| n as usize).collect();
        let what = key.to_string();
        let text = (kind == Kind::Str && text::readable(&array)).then(Default::default);
        Ok(Some(Self {
            path: path.to_path_buf(),
            what,
            array: Box::new(array),
            kind,
            dtype,
            shape,
            cache: Default::default(),
            text,
            chunks: None,
        }))
    }

    /// Refuses to read chunks that are not stored (except those `omit` allows), rather than
    /// reading them as the fill value: for the arrays of a sparse matrix.
    pub fn require_chunks(&mut self, omit: Omit) -> Result<()> {
        if self.shape.len() == 1 {
            self.chunks = Some(Box::new(ChunkCheck::new(&self.path, &self.what, &self.array, omit)?));
        }
        Ok(())
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Elements of a 1-d array.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn attributes(&self) -> &serde_json::Map<String, serde_json::Value> {
        self.array.attributes()
    }

    fn err(&self, e: impl std::fmt::Display) -> Error {
        Error::format(&self.path, format!("reading {}: {e}", self.what))
    }

    /// Decodes `ranges` (one per dimension) of the array, after checking that the chunks
    /// there are stored when that is required.
    fn retrieve(&self, ranges: &[Range<u64>]) -> Result<Block> {
        if let (Some(check), [r]) = (&self.chunks, ranges) {
            check.check(&self.array, r, |i| self.value_at(i))?;
        }
        self.retrieve_stored(ranges)
    }

    /// Element `i` of a 1-d integer array, read without the chunk check.
    fn value_at(&self, i: u64) -> Result<i64> {
        let v =
            self.retrieve_stored(std::slice::from_ref(&(i..i + 1)))?.into_i64(&self.dtype).map_err(|e| self.err(e))?;
        v.first().copied().ok_or_else(|| self.err(format!("no element {i}")))
    }

    /// The error of a failed read of `ranges`, naming the chunk that does not decode.
    fn read_err(&self, ranges: &[Range<u64>], e: impl std::fmt::Display) -> Error {
        match chunks::locate_failure(&self.array, &self.what, ranges) {
            Some(msg) => Error::format(&self.path, msg),
            None => self.err(format!("elements {ranges:?}: {e}")),
        }
    }

    /// Decodes `ranges` (one per dimension) of the array.
    fn retrieve_stored(&self, ranges: &[Range<u64>]) -> Result<Block> {
        let subset = ArraySubset::new_with_ranges(ranges);
        macro_rules! get {
            ($t:ty) => {
                chunks::decoded(|| self.array.retrieve_array_subset::<Vec<$t>>(&subset))
                    .map_err(|e| self.read_err(ranges, e))?
            };
        }
        macro_rules! wide {
            ($t:ty) => {
                get!($t).into_iter().map(i64::from).collect()
            };
        }
        Ok(match (self.kind, self.dtype.as_str()) {
            (Kind::F32, _) => Block::F32(get!(f32)),
            (Kind::F64, _) => Block::F64(get!(f64)),
            (Kind::Bool, _) => Block::Bool(get!(bool)),
            (Kind::Str, _) => Block::Str(get!(String)),
            (_, "int8") => Block::I64(wide!(i8)),
            (_, "int16") => Block::I64(wide!(i16)),
            (_, "int32") => Block::I32(get!(i32)),
            (_, "int64") => Block::I64(get!(i64)),
            (_, "uint8") => Block::I64(wide!(u8)),
            (_, "uint16") => Block::I64(wide!(u16)),
            (_, "uint32") => Block::I64(wide!(u32)),
            _ => Block::I64(
                get!(u64)
                    .into_iter()
                    .map(|v| i64::try_from(v).map_err(|_| self.err(format!("value {v} out of range"))))
                    .collect::<Result<_>>()?,
            ),
        })
    }

    /// Elements `r` of a 1-d array, through the one-block cache.
    fn read(&self, r: Range<usize>) -> Result<Block> {
        if self.shape.len() != 1 {
            return Err(Error::format(
                &self.path,
                format!("{}: expected a 1-d array, found shape {:?}", self.what, self.shape),
            ));
        }
        if r.end > self.shape[0] || r.start > r.end {
            return Err(Error::format(
                &self.path,
                format!("{}: rows {r:?} beyond its {} entries", self.what, self.shape[0]),
            ));
        }
        let block = if self.kind == Kind::Str { BLOCK / 8 } else { BLOCK };
        if r.len() >= block {
            return self.retrieve(std::slice::from_ref(&(r.start as u64..r.end as u64)));
        }
        if let Some(v) = self.read_text(&r)? {
            return Ok(Block::Str(v));
        }
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, b)) = cache.as_ref() {
            if at.start <= r.start && r.end <= at.end {
                return Ok(b.slice(r.start - at.start..r.end - at.start));
            }
        }
        // The old block goes first: holding it while the next one decodes would double the peak.
        *cache = None;
        let at = self.aligned_block(&r).unwrap_or_else(|| r.start..(r.start + block).min(self.shape[0]).max(r.end));
        let b = match self.kind {
            Kind::Str => self.retrieve_text(&at)?,
            _ => self.retrieve(std::slice::from_ref(&(at.start as u64..at.end as u64)))?,
        };
        let out = b.slice(r.start - at.start..r.end - at.start);
        *cache = Some((at, b));
        Ok(out)
    }

    /// The block to decode for `r`: whole zarr chunks from the one `r` starts in, at least
    /// `BLOCK / 8` elements and through `r`'s end, when the array is cut into chunks of at most
    /// [`BLOCK`] elements. Whole chunks, because a chunk decodes whole: a block cut inside one
    /// decodes it twice, and a string block cut across two made zarrs assemble both. And no
    /// larger, because a chunk of obs names can be large (zarr sizes it from the array's length:
    /// a 65k-cell atlas's names in one chunk, up to 314,573 a chunk in larger ones), and a block of
    /// a million codes widened to i64 is 8 MB.
    fn aligned_block(&self, r: &Range<usize>) -> Option<Range<usize>> {
        let c = self.chunk_len()?;
        if c > BLOCK {
            return None;
        }
        let start = r.start / c * c;
        let end = r.end.max(start + BLOCK / 8).div_ceil(c) * c;
        Some(start..end.min(self.shape[0]))
    }

    /// Elements per chunk of a 1-d array.
    fn chunk_len(&self) -> Option<usize> {
        Some(self.array.chunk_shape(&[0]).ok()?.first()?.get() as usize)
    }

    /// Strings `r` through the cursor over their chunks, `None` when the array's chunks are not
    /// plain strings or a chunk `r` touches is not stored (the block read takes them).
    fn read_text(&self, r: &Range<usize>) -> Result<Option<Vec<String>>> {
        let (Some(text), Some(c)) = (&self.text, self.chunk_len()) else {
            return Ok(None);
        };
        let mut cursor = text.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::with_capacity(r.len());
        for k in r.start / c..r.end.div_ceil(c) {
            let (first, chunk) = (k * c, k as u64);
            let local = r.start.max(first) - first..r.end.min(first + c) - first;
            let chunk_err = |e: String| self.err(format!("chunk {k}: {e}"));
            if cursor.as_ref().is_none_or(|t| t.chunk() != chunk || t.next() > local.start) {
                // The old chunk goes first: holding it while the next one is read doubles it.
                *cursor = None;
                *cursor = chunks::decoded(|| TextCursor::open(&self.array, chunk, first)).map_err(chunk_err)?;
            }
            let Some(t) = cursor.as_mut() else { return Ok(None) };
            chunks::decoded(|| t.read(local, &mut out)).map_err(chunk_err)?;
        }
        Ok(Some(out))
    }

    /// Strings `at` as one buffer and their ends, each checked to be UTF-8. A block of whole
    /// chunks is decoded chunk by chunk: zarrs's range read would assemble the chunks' strings
    /// into copies beside its decoder's output (~30 MB at once for a chunk of 314,573 names),
    /// and those passing buffers left the allocator's arenas fragmented (BENCHMARKS "Atlas
    /// scale", session 64).
    fn retrieve_text(&self, at: &Range<usize>) -> Result<Block> {
        let (bytes, offsets) = match self.chunk_len() {
            Some(c) if at.start % c == 0 && at.len() > 0 => self.text_by_chunks(at, c)?,
            _ => self.text_by_range(at)?,
        };
        for (i, w) in offsets.windows(2).enumerate() {
            if std::str::from_utf8(&bytes[w[0]..w[1]]).is_err() {
                return Err(self.err(format!("element {} is not UTF-8", at.start + i)));
            }
        }
        Ok(Block::Text { bytes, offsets })
    }

    /// Strings `at` through zarrs's range read.
    fn text_by_range(&self, at: &Range<usize>) -> Result<(Vec<u8>, Vec<usize>)> {
        let range = at.start as u64..at.end as u64;
        let subset = ArraySubset::new_with_ranges(std::slice::from_ref(&range));
        let decoded = chunks::decoded(|| self.array.retrieve_array_subset::<ArrayBytes<'static>>(&subset))
            .map_err(|e| self.read_err(std::slice::from_ref(&range), e))?;
        let (bytes, offsets) = self.variable(decoded)?;
        Ok((bytes.into_owned(), offsets.to_vec()))
    }

    /// The bytes and offsets of decoded variable-length strings.
    fn variable(&self, decoded: ArrayBytes<'static>) -> Result<(ArrayBytesRaw<'static>, ArrayBytesOffsets<'static>)> {
        match decoded {
            ArrayBytes::Variable(v) => Ok(v.into_parts()),
            _ => Err(self.err("expected variable-length strings")),
        }
    }

    /// Strings `at`, which starts on a chunk's first element, one chunk of `c` at a time.
    fn text_by_chunks(&self, at: &Range<usize>, c: usize) -> Result<(Vec<u8>, Vec<usize>)> {
        let (mut bytes, mut offsets) = (Vec::new(), vec![0usize]);
        for k in at.start / c..at.end.div_ceil(c) {
            let range = (k * c) as u64..((k + 1) * c).min(at.end) as u64;
            let decoded = chunks::decoded(|| self.array.retrieve_chunk::<ArrayBytes<'static>>(&[k as u64]))
                .map_err(|e| self.read_err(std::slice::from_ref(&range), e))?;
            let (chunk_bytes, chunk_offsets) = self.variable(decoded)?;
            // A chunk holds `c` elements; the array's last one may hold fewer real ones.
            let n = (range.end - range.start) as usize;
            if chunk_offsets.len() <= n {
                return Err(self.err(format!("chunk {k} holds {} strings, expected {n}", chunk_offsets.len() - 1)));
            }
            if offsets.len() == 1 && k + 1 == at.end.div_ceil(c) && n + 1 == chunk_offsets.len() {
                // The block is this one chunk, whole: keep its buffers as decoded.
                return Ok((chunk_bytes.into_owned(), chunk_offsets.to_vec()));
            }
            let (first, start) = (chunk_offsets[0], bytes.len());
            bytes.extend_from_slice(&chunk_bytes[first..chunk_offsets[n]]);
            offsets.extend(chunk_offsets[1..=n].iter().map(|o| o - first + start));
        }
        Ok((bytes, offsets))
    }

    /// All elements when `r` is `None`.
    fn read_opt(&self, r: Option<Range<usize>>) -> Result<Block> {
        let n = self.shape.first().copied().unwrap_or(0);
        self.read(r.unwrap_or(0..n))
    }

    pub fn read_f64(&self, r: Option<Range<usize>>) -> Result<Vec<f64>> {
        self.read_opt(r)?.into_f64().map_err(|e| self.err(e))
    }

    /// Stored counts: f32 as stored, anything else as f64.
    pub fn read_values(&self, r: Range<usize>) -> Result<ChunkValues> {
        Ok(match self.read(r)? {
            Block::F32(v) => ChunkValues::F32(v),
            b => ChunkValues::F64(b.into_f64().map_err(|e| self.err(e))?),
        })
    }

    pub fn read_i64(&self, r: Option<Range<usize>>) -> Result<Vec<i64>> {
        self.read_opt(r)?.into_i64(&self.dtype).map_err(|e| self.err(e))
    }

    /// Indices checked to lie in `0..bound`.
    pub fn read_indices(&self, r: Range<usize>, bound: usize) -> Result<Vec<u32>> {
        self.read(r)?.into_indices(bound, &self.dtype).map_err(|e| self.err(e))
    }

    /// Strings; numbers (gene ids or category labels written as numbers) become strings.
    pub fn read_strings(&self, r: Option<Range<usize>>) -> Result<Vec<String>> {
        Ok(self.read_opt(r)?.into_strings())
    }

    /// Rows `r` of a 2-d array, all columns, row-major, as f64.
    pub fn read_rows_f64(&self, r: Range<usize>) -> Result<Vec<f64>> {
        let cols = self.shape[1] as u64;
        self.retrieve(&[r.start as u64..r.end as u64, 0..cols])?.into_f64().map_err(|e| self.err(e))
    }
}

fn unsupported(path: &Path, key: &str, dtype: &str) -> Error {
    Error::format(path, format!("{key}: zarr data type '{dtype}' is not one AnnData writes (numbers, bool, string)"))
}

/// The data type an array's metadata declares (format 3: `data_type`, format 2: `dtype`), as
/// written there.
fn declared_dtype(path: &Path, key: &str) -> Option<String> {
    let dir = path.join(key);
    let (file, field) = if dir.join("zarr.json").is_file() {
        (dir.join("zarr.json"), "data_type")
    } else {
        (dir.join(".zarray"), "dtype")
    };
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()?;
    let t = v.get(field)?;
    Some(match t {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) => o.get("name").and_then(|n| n.as_str()).unwrap_or("?").to_string(),
        other => other.to_string(),
    })
}

/// Whether a declared data type is one [`ZArray`] reads (format 3 names, format 2 NumPy codes).
fn readable_dtype(t: &str) -> bool {
    let v3 = [
        "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool",
        "string",
    ];
    if v3.contains(&t) {
        return true;
    }
    let code = t.trim_start_matches(['<', '>', '|', '=']);
    matches!(code, "f4" | "f8" | "i1" | "i2" | "i4" | "i8" | "u1" | "u2" | "u4" | "u8" | "b1" | "O")
        || code.starts_with('U')
        || code.starts_with('S')
}

/// Whether `key` of the store is an array (zarr format 3: `zarr.json` with node_type array;
/// format 2: `.zarray`). A `zarr.json` that is not the JSON of a node is an error naming it
/// (a store cut short), not a missing array.
pub fn is_array(path: &Path, key: &str) -> Result<bool> {
    let dir = path.join(key);
    if dir.join(".zarray").is_file() {
        return Ok(true);
    }
    let file = dir.join("zarr.json");
    if !file.is_file() {
        return Ok(false);
    }
    let bad = |msg: String| Error::format(path, format!("{key}/zarr.json: {msg}"));
    let text = std::fs::read_to_string(&file).map_err(|e| bad(e.to_string()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("not valid JSON ({e}): is the store cut short?")))?;
    match v.get("node_type").and_then(|t| t.as_str()) {
        Some("array") => Ok(true),
        Some("group") => Ok(false),
        other => Err(bad(format!("node_type is {other:?}, expected \"array\" or \"group\""))),
    }
}

/// Whether `key` is a group or an array of the store.
pub fn exists(path: &Path, key: &str) -> bool {
    let dir = path.join(key);
    dir.join(".zarray").is_file() || dir.join(".zgroup").is_file() || dir.join("zarr.json").is_file()
}

/// A group's attributes (format 3: `attributes` of `zarr.json`; format 2: `.zattrs`).
pub fn group_attrs(path: &Path, key: &str) -> Result<serde_json::Map<String, serde_json::Value>> {
    let dir = if key.is_empty() { path.to_path_buf() } else { path.join(key) };
    let (file, v3) =
        if dir.join("zarr.json").is_file() { (dir.join("zarr.json"), true) } else { (dir.join(".zattrs"), false) };
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(_) if !v3 => return Ok(Default::default()),
        Err(e) => return Err(Error::io(&file, e)),
    };
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::format(path, format!("{}: not valid JSON: {e}", file.display())))?;
    let attrs = if v3 { v.get("attributes").cloned().unwrap_or_default() } else { v };
    Ok(attrs.as_object().cloned().unwrap_or_default())
}

/// The members of a group (sub-directories that are zarr nodes), sorted.
pub fn members(path: &Path, key: &str) -> Vec<String> {
    let dir = if key.is_empty() { path.to_path_buf() } else { path.join(key) };
    let mut out: Vec<String> = std::fs::read_dir(&dir)
        .map(|it| {
            it.flatten()
                .filter(|e| exists(&dir, &e.file_name().to_string_lossy()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// A string attribute.
pub fn attr_str<'a>(attrs: &'a serde_json::Map<String, serde_json::Value>, name: &str) -> Option<&'a str> {
    attrs.get(name).and_then(|v| v.as_str())
}

#[cfg(test)]
#[path = "array_tests.rs"]
mod tests;
