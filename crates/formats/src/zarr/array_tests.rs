//! Strings read by cell ranges through the chunk-aligned text block, against the names written.

use std::path::Path;
use std::sync::Arc;

use zarrs::filesystem::FilesystemStore;

use super::*;

/// A zarr format 2 array of strings at `dir/key`, as zarr-python writes `|O` with the vlen-utf8
/// filter (no compressor): each chunk is a u32 count, then per element a u32 length and its bytes.
fn write_strings(dir: &Path, key: &str, items: &[Vec<u8>], chunk: usize) {
    let a = dir.join(key);
    std::fs::create_dir_all(&a).unwrap();
    std::fs::write(dir.join(".zgroup"), r#"{"zarr_format": 2}"#).unwrap();
    let meta = serde_json::json!({
        "shape": [items.len()], "chunks": [chunk], "dtype": "|O", "fill_value": "", "order": "C",
        "filters": [{"id": "vlen-utf8"}], "compressor": null, "zarr_format": 2, "dimension_separator": "."
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
        std::fs::write(a.join(k.to_string()), b).unwrap();
    }
}

fn open(dir: &Path, key: &str) -> ZArray {
    let store: Store = Arc::new(FilesystemStore::new(dir).unwrap());
    ZArray::open(dir, &store, key).unwrap().unwrap()
}

#[test]
fn names_read_in_ranges_across_chunk_edges_are_the_names_written() {
    let dir = tempfile::tempdir().unwrap();
    // More names than one block of strings (BLOCK / 8), in chunks that do not divide it; some
    // names are not ASCII.
    let n = BLOCK / 8 * 2 + 1_234;
    let names: Vec<String> =
        (0..n).map(|i| if i % 997 == 0 { format!("célula-{i}-ß") } else { format!("cell-{i}") }).collect();
    let bytes: Vec<Vec<u8>> = names.iter().map(|s| s.clone().into_bytes()).collect();
    // Blocks of many chunks, of two with a padded last one, of one padded chunk, and (n / 2) of
    // one whole chunk, which is kept as decoded.
    for chunk in [1_000, 70_001, n + 5, n / 2] {
        let key = format!("names{chunk}");
        write_strings(dir.path(), &key, &bytes, chunk);
        let a = open(dir.path(), &key);
        // Consecutive cell chunks of 777 (straddling the chunks' edges), then ranges out of order.
        let mut ranges: Vec<Range<usize>> = (0..n).step_by(777).map(|s| s..(s + 777).min(n)).collect();
        ranges.extend([69_500..70_600, 0..1, n - 1..n, 139_990..140_010, 5..5]);
        for r in ranges {
            assert_eq!(a.read_strings(Some(r.clone())).unwrap(), names[r.clone()], "chunk {chunk}, rows {r:?}");
        }
        assert_eq!(a.read_strings(None).unwrap(), names, "chunk {chunk}, whole array");
    }
}

#[test]
fn a_name_that_is_not_utf8_is_refused_naming_the_array_and_element() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes: Vec<Vec<u8>> = (0..50).map(|i| format!("cell-{i}").into_bytes()).collect();
    bytes[23] = vec![b'c', 0xff, 0xfe];
    write_strings(dir.path(), "names", &bytes, 10);
    let a = open(dir.path(), "names");
    // The block holds all 50 names, so any range fails, not only one that holds the bad one.
    let e = a.read_strings(Some(0..5)).unwrap_err().to_string();
    assert!(e.contains("names") && e.contains("element 23") && e.contains("UTF-8"), "{e}");
}
