//! Strings read by cell ranges through the text cursor and the chunk-aligned text block, against
//! the names written.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use zarrs::array::codec::{blosc_compress_bytes, BloscCompressor, BloscShuffleMode};

use super::*;

/// How a test array's chunks are compressed.
#[derive(Clone, Copy, Debug)]
enum Compress {
    None,
    /// blosc lz4 with a type size of 1, as zarr-python writes strings, and this block size
    /// (small, so that a window of the cursor spans several blocks; 0 lets blosc choose).
    Blosc {
        blocksize: usize,
    },
    Gzip,
    Zstd,
}

impl Compress {
    fn metadata(self) -> serde_json::Value {
        match self {
            Self::None => serde_json::Value::Null,
            Self::Blosc { .. } => {
                serde_json::json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0})
            }
            Self::Gzip => serde_json::json!({"id": "gzip", "level": 1}),
            Self::Zstd => serde_json::json!({"id": "zstd", "level": 3}),
        }
    }

    fn apply(self, b: Vec<u8>) -> Vec<u8> {
        match self {
            Self::None => b,
            Self::Blosc { blocksize } => {
                let level = 5u8.try_into().unwrap();
                blosc_compress_bytes(&b, level, BloscShuffleMode::Shuffle, 1, BloscCompressor::LZ4, blocksize, 1)
                    .unwrap()
            }
            Self::Gzip => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                e.write_all(&b).unwrap();
                e.finish().unwrap()
            }
            Self::Zstd => zstd::encode_all(&b[..], 3).unwrap(),
        }
    }
}

/// A zarr format 2 array of strings at `dir/key`, as zarr-python writes `|O` with the vlen-utf8
/// filter: each chunk is a u32 count, then per element a u32 length and its bytes, compressed.
fn write_strings(dir: &Path, key: &str, items: &[Vec<u8>], chunk: usize) {
    write_compressed(dir, key, items, chunk, Compress::None)
}

fn write_compressed(dir: &Path, key: &str, items: &[Vec<u8>], chunk: usize, compress: Compress) {
    let a = dir.join(key);
    std::fs::create_dir_all(&a).unwrap();
    std::fs::write(dir.join(".zgroup"), r#"{"zarr_format": 2}"#).unwrap();
    let meta = serde_json::json!({
        "shape": [items.len()], "chunks": [chunk], "dtype": "|O", "fill_value": "", "order": "C",
        "filters": [{"id": "vlen-utf8"}], "compressor": compress.metadata(), "zarr_format": 2,
        "dimension_separator": "."
    });
    std::fs::write(a.join(".zarray"), meta.to_string()).unwrap();
    for (k, part) in items.chunks(chunk).enumerate() {
        // zarr-python pads the last chunk to the full chunk length.
        let mut b = (chunk as u32).to_le_bytes().to_vec();
        for i in 0..chunk {
            let s: &[u8] = part.get(i).map(Vec::as_slice).unwrap_or(b"");
            b.extend_from_slice(&(s.len() as u32).to_le_bytes());
            b.extend_from_slice(s);
        }
        std::fs::write(a.join(k.to_string()), compress.apply(b)).unwrap();
    }
}

fn open(dir: &Path, key: &str) -> ZArray {
    let store: Store = Arc::new(ReadStore::new(dir));
    ZArray::open(dir, &store, key).unwrap().unwrap()
}

#[test]
fn names_read_in_ranges_across_chunk_edges_are_the_names_written() {
    let dir = tempfile::tempdir().unwrap();
    // More names than one block of strings (BLOCK / 8), in chunks that do not divide it; some
    // names are not ASCII, some empty, and one longer than the cursor's window.
    let n = BLOCK / 8 * 2 + 1_234;
    let names: Vec<String> = (0..n)
        .map(|i| match i {
            _ if i % 997 == 0 => format!("célula-{i}-ß"),
            _ if i % 1_009 == 0 => String::new(),
            70_003 => "x".repeat(300_000),
            _ => format!("cell-{i}"),
        })
        .collect();
    let bytes: Vec<Vec<u8>> = names.iter().map(|s| s.clone().into_bytes()).collect();
    // Blocks of many chunks, of two with a padded last one, of one padded chunk, and (n / 2) of
    // one whole chunk, which is kept as decoded; each stored plain, with blosc as zarr-python
    // writes strings (read a window at a time), and with gzip and zstd (decompressed as a
    // stream).
    let compressions = [Compress::None, Compress::Blosc { blocksize: 4_096 }, Compress::Gzip, Compress::Zstd];
    for compress in compressions {
        for chunk in [1_000, 70_001, n + 5, n / 2] {
            let key = format!("names{chunk}");
            write_compressed(dir.path(), &key, &bytes, chunk, compress);
            let a = open(dir.path(), &key);
            assert!(a.text.is_some(), "read through the text cursor");
            // Consecutive cell chunks of 777 (straddling the chunks' edges), then ranges out of order.
            let mut ranges: Vec<Range<usize>> = (0..n).step_by(777).map(|s| s..(s + 777).min(n)).collect();
            ranges.extend([69_500..70_600, 0..1, n - 1..n, 139_990..140_010, 5..5, n..n]);
            for r in ranges {
                let got = a.read_strings(Some(r.clone())).unwrap();
                assert!(got == names[r.clone()], "{compress:?}, chunk {chunk}, rows {r:?}");
            }
            let cursor = a.text.as_ref().unwrap().lock().unwrap().as_ref().map(|t| t.windowed());
            assert_eq!(cursor, Some(!matches!(compress, Compress::None)), "{compress:?}: windowed");
            let whole = a.read_strings(None).unwrap_or_else(|e| panic!("{compress:?}, chunk {chunk}: {e}"));
            assert!(whole == names, "{compress:?}, chunk {chunk}, whole array");
        }
    }
}

/// A chunk whose strings end before its header's count is refused, naming the array and chunk.
#[test]
fn a_truncated_chunk_of_names_is_refused_naming_the_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let bytes: Vec<Vec<u8>> = (0..50).map(|i| format!("cell-{i}").into_bytes()).collect();
    let compressions = [
        ("plain", Compress::None),
        ("blosc", Compress::Blosc { blocksize: 0 }),
        ("gzip", Compress::Gzip),
        ("zstd", Compress::Zstd),
    ];
    for (key, compress) in compressions {
        write_compressed(dir.path(), key, &bytes, 10, compress);
        // Chunk 2 rewritten without its last string: its header still counts 10.
        let mut b = 10u32.to_le_bytes().to_vec();
        for s in &bytes[20..29] {
            b.extend_from_slice(&(s.len() as u32).to_le_bytes());
            b.extend_from_slice(s);
        }
        std::fs::write(dir.path().join(key).join("2"), compress.apply(b)).unwrap();
        let a = open(dir.path(), key);
        assert_eq!(a.read_strings(Some(0..25)).unwrap(), names_of(&bytes[0..25]));
        let e = a.read_strings(Some(25..30)).unwrap_err().to_string();
        assert!(e.contains(key) && e.contains("chunk 2") && e.contains("end early"), "{e}");
    }
}

/// A chunk of names that is not stored reads as the fill value (""), as zarr defines it: the
/// cursor hands such a range to the whole-chunk block read, which the other tests no longer
/// reach.
#[test]
fn a_names_chunk_that_is_not_stored_reads_as_the_fill_value() {
    let dir = tempfile::tempdir().unwrap();
    let bytes: Vec<Vec<u8>> = (0..50).map(|i| format!("cell-{i}").into_bytes()).collect();
    for (key, compress) in [("plain", Compress::None), ("blosc", Compress::Blosc { blocksize: 0 })] {
        write_compressed(dir.path(), key, &bytes, 10, compress);
        std::fs::remove_file(dir.path().join(key).join("2")).unwrap();
        let a = open(dir.path(), key);
        let mut expected = names_of(&bytes);
        expected[20..30].iter_mut().for_each(String::clear);
        let mut got = Vec::new();
        for s in (0..50).step_by(7) {
            got.extend(a.read_strings(Some(s..(s + 7).min(50))).unwrap());
        }
        assert_eq!(got, expected, "{key}: in ranges");
        assert_eq!(a.read_strings(Some(22..24)).unwrap(), ["", ""], "{key}: inside the missing chunk");
        assert_eq!(a.read_strings(None).unwrap(), expected, "{key}: whole");
    }
}

fn names_of(bytes: &[Vec<u8>]) -> Vec<String> {
    bytes.iter().map(|b| String::from_utf8(b.clone()).unwrap()).collect()
}

#[test]
fn a_name_that_is_not_utf8_is_refused_naming_the_array_and_element() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes: Vec<Vec<u8>> = (0..50).map(|i| format!("cell-{i}").into_bytes()).collect();
    bytes[23] = vec![b'c', 0xff, 0xfe];
    write_strings(dir.path(), "names", &bytes, 10);
    let a = open(dir.path(), "names");
    // Names are checked as they are read: those before the bad one read.
    assert_eq!(a.read_strings(Some(0..5)).unwrap(), names_of(&bytes[0..5]));
    let e = a.read_strings(Some(20..25)).unwrap_err().to_string();
    assert!(e.contains("names") && e.contains("element 23") && e.contains("UTF-8"), "{e}");
}
