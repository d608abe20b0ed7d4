//! Strings of one zarr chunk read front to back, a window of decoded bytes at a time.
//!
//! AnnData stores cell names with the `vlen-utf8` codec: a chunk is a u32 count, then per
//! string a u32 length and its bytes, then compressed (blosc by default). zarr sizes that chunk
//! from the array's length (39,322 names at 65k cells, 314,573 at 2.5M), and zarrs decodes it
//! whole: the decompressed chunk, then its strings and their offsets copied out of it, ~30 MB of
//! passing buffers at 314,573 names. Ingest reads names in order, a few thousand at a time, so a
//! [`TextCursor`] keeps the chunk as stored and decompresses only the window it is reading
//! (`blosc_getitem`, through zarrs), or, for zstd (zarr-python's default in zarr format 3) and
//! gzip, decompresses the chunk as a stream as far as it has read. Memory then follows the
//! window, not the chunk (BENCHMARKS "Atlas scale", session 65). Chunks compressed otherwise are
//! decompressed whole once and parsed in place, which still saves the copies.

use std::borrow::Cow;
use std::io::{Cursor, Read};
use std::ops::Range;

use zarrs::array::codec::{blosc_decompress_bytes_partial, blosc_typesize, blosc_validate};
use zarrs::array::{Array, BytesRepresentation, CodecOptions};
use zarrs::plugin::ExtensionName;

use super::store::ReadStore;

/// Decoded bytes fetched per window of a blosc chunk. Large enough that the blocks blosc
/// decompresses around a window's edges (tens to hundreds of KB) are a small part of it.
const WINDOW: usize = 1 << 18;

/// Whether an array's chunks are `vlen-utf8` (or `vlen-bytes`, the same layout) strings behind
/// bytes-to-bytes codecs only: the layout [`TextCursor`] reads. Others (sharded arrays, zarrs's
/// own `vlen`) are read whole by zarrs.
pub fn readable(array: &Array<ReadStore>) -> bool {
    let chain = array.codecs();
    let name = chain.array_to_bytes_codec().name_v3();
    chain.array_to_array_codecs().is_empty() && matches!(name.as_deref(), Some("vlen-utf8" | "vlen-bytes"))
}

/// A chunk's decoded bytes, or the means to decode any range of them.
enum Source {
    /// Compressed by blosc alone, with a type size of 1: ranges decode on their own.
    Blosc { encoded: Vec<u8>, len: usize },
    /// Compressed by zstd (zarr-python's default for zarr format 3) or gzip alone: decoded front
    /// to back as the cursor reads.
    Stream(Box<dyn Read + Send>),
    /// Decoded whole.
    Whole(Vec<u8>),
}

/// The next strings of chunk `chunk`, read in order.
pub struct TextCursor {
    chunk: u64,
    /// The array index of the chunk's first string, to name a string in errors.
    first: usize,
    source: Source,
    /// Strings the chunk holds (its header).
    count: usize,
    /// The next string's index in the chunk, and the offset of its length prefix.
    next: usize,
    pos: usize,
    /// Decoded bytes `window_at..window_at + window.len()` (blosc and streams).
    window: Vec<u8>,
    window_at: usize,
}

impl TextCursor {
    /// The cursor at the first string of chunk `chunk`; `None` when the chunk is not stored
    /// (the caller reads the fill value). Errors are messages for the caller to place.
    pub fn open(array: &Array<ReadStore>, chunk: u64, first: usize) -> Result<Option<Self>, String> {
        let Some(encoded) = array.retrieve_encoded_chunk(&[chunk]).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let chain = array.codecs();
        let codecs = chain.bytes_to_bytes_codecs();
        let source = match codecs {
            [c] if c.name_v3().as_deref() == Some("blosc") && blosc_typesize(&encoded) == Some(1) => {
                let len = blosc_validate(&encoded).ok_or("not a valid blosc buffer")?;
                Source::Blosc { encoded, len }
            }
            [c] if c.name_v3().as_deref() == Some("zstd") => Source::Stream(Box::new(
                zstd::stream::read::Decoder::new(Cursor::new(encoded)).map_err(|e| e.to_string())?,
            )),
            [c] if c.name_v3().as_deref() == Some("gzip") => {
                Source::Stream(Box::new(flate2::read::GzDecoder::new(Cursor::new(encoded))))
            }
            _ => {
                let (options, repr) = (CodecOptions::default(), BytesRepresentation::UnboundedSize);
                let mut bytes = encoded;
                for c in codecs.iter().rev() {
                    bytes = c.decode(Cow::Owned(bytes), &repr, &options).map_err(|e| e.to_string())?.into_owned();
                }
                Source::Whole(bytes)
            }
        };
        let mut cursor = Self { chunk, first, source, count: 0, next: 0, pos: 4, window: Vec::new(), window_at: 0 };
        cursor.count = cursor.u32_at(0)? as usize;
        Ok(Some(cursor))
    }

    /// Whether the chunk is decoded a window at a time (not held whole).
    #[cfg(test)]
    pub fn windowed(&self) -> bool {
        !matches!(self.source, Source::Whole(_))
    }

    /// The chunk it reads.
    pub fn chunk(&self) -> u64 {
        self.chunk
    }

    /// The next string's index in the chunk.
    pub fn next(&self) -> usize {
        self.next
    }

    /// Appends strings `r` of the chunk to `out` (`r.start` not before [`Self::next`]). A
    /// string that is not UTF-8 is an error naming its index in the array.
    pub fn read(&mut self, r: Range<usize>, out: &mut Vec<String>) -> Result<(), String> {
        if r.end > self.count {
            return Err(format!("holds {} strings, expected at least {}", self.count, r.end));
        }
        while self.next < r.end {
            let n = self.u32_at(self.pos)? as usize;
            let at = self.pos + 4;
            if self.next >= r.start {
                let element = self.first + self.next;
                let s = std::str::from_utf8(self.bytes(at..at + n)?)
                    .map_err(|_| format!("element {element} is not UTF-8"))?;
                out.push(s.to_string());
            }
            self.pos = at + n;
            self.next += 1;
        }
        Ok(())
    }

    fn u32_at(&mut self, at: usize) -> Result<u32, String> {
        let b = self.bytes(at..at + 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Decoded bytes `r`, from the window (refilled from `r.start` when it does not hold them;
    /// reads only move forward, so a stream is never rewound).
    fn bytes(&mut self, r: Range<usize>) -> Result<&[u8], String> {
        let held = self.window_at..self.window_at + self.window.len();
        match &mut self.source {
            Source::Whole(b) => return b.get(r.clone()).ok_or_else(|| ends_early(r.end, b.len())),
            // An empty string: nothing to decode (blosc refuses a range of no bytes).
            _ if r.is_empty() => return Ok(&[]),
            _ if r.start >= held.start && r.end <= held.end => {}
            Source::Blosc { encoded, len } => {
                if r.end > *len {
                    return Err(ends_early(r.end, *len));
                }
                let end = (r.start + WINDOW).max(r.end).min(*len);
                self.window =
                    blosc_decompress_bytes_partial(encoded, r.start, end - r.start, 1).map_err(|e| e.to_string())?;
                self.window_at = r.start;
                if self.window.len() != end - r.start {
                    return Err(format!("bytes {}..{end} decode to {} bytes", r.start, self.window.len()));
                }
            }
            Source::Stream(stream) => {
                if r.start < held.start {
                    return Err(format!("byte {} read after byte {}", r.start, held.start));
                }
                // Keep what is still ahead and read on: the window's buffer is reused.
                let behind = (r.start - held.start).min(self.window.len());
                self.window.drain(..behind);
                self.window_at = held.start + behind;
                let want = (r.end - self.window_at).max(WINDOW);
                let got = stream.take((want - self.window.len()) as u64).read_to_end(&mut self.window);
                got.map_err(|e| format!("decompressing: {e}"))?;
                if r.end > self.window_at + self.window.len() {
                    return Err(ends_early(r.end, self.window_at + self.window.len()));
                }
            }
        }
        Ok(&self.window[r.start - self.window_at..r.end - self.window_at])
    }
}

fn ends_early(at: usize, len: usize) -> String {
    format!("its strings end early (byte {at} of {len})")
}
