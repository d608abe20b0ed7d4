//! `ReadStore`: a zarr store in a directory, opened read-only.
//!
//! zarrs's `FilesystemStore` keeps a lock per key it has touched, in a map that is never pruned
//! (it guards its own writes against reads). Ingest reads every chunk of an atlas once, so that
//! map grew with the atlas: ~20,000 entries for 2.5M cells, and small long-lived allocations
//! scattered among the reader's transient chunk buffers, which kept their pages from being
//! reused (session 66, BENCHMARKS). corrflow never writes an input, so this store reads each
//! range with a seek and a read and keeps nothing per key.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use zarrs::storage::byte_range::{ByteRange, ByteRangeIterator, InvalidByteRangeError};
use zarrs::storage::{Bytes, MaybeBytesIterator, ReadableStorageTraits, StorageError, StoreKey};

/// A directory holding a zarr hierarchy, read and never written.
#[derive(Debug)]
pub struct ReadStore {
    base: PathBuf,
}

impl ReadStore {
    pub fn new(base: &Path) -> Self {
        Self { base: base.to_path_buf() }
    }

    fn path_of(&self, key: &StoreKey) -> PathBuf {
        let k = key.as_str();
        self.base.join(k.strip_prefix('/').unwrap_or(k))
    }
}

impl ReadableStorageTraits for ReadStore {
    fn get_partial_many<'a>(
        &'a self,
        key: &StoreKey,
        byte_ranges: ByteRangeIterator<'a>,
    ) -> Result<MaybeBytesIterator<'a>, StorageError> {
        let file = match File::open(self.path_of(key)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let size = file.metadata()?.len();
        let parts = byte_ranges.map(|range| read_range(&file, size, range)).collect::<Vec<_>>();
        Ok(Some(Box::new(parts.into_iter())))
    }

    fn size_key(&self, key: &StoreKey) -> Result<Option<u64>, StorageError> {
        match std::fs::metadata(self.path_of(key)) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn supports_get_partial(&self) -> bool {
        true
    }
}

/// The bytes of `range` of a file of `size` bytes; a range past the end is an error, as in
/// zarrs's own stores. (`ByteRange::to_range` subtracts from `size` unchecked, so the range is
/// resolved here.)
fn read_range(file: &File, size: u64, range: ByteRange) -> Result<Bytes, StorageError> {
    let (start, len) = match range {
        ByteRange::FromStart(start, None) => {
            (start, size.checked_sub(start).ok_or_else(|| InvalidByteRangeError::new(range, size))?)
        }
        ByteRange::FromStart(start, Some(len)) => (start, len),
        ByteRange::Suffix(len) => (size.checked_sub(len).ok_or_else(|| InvalidByteRangeError::new(range, size))?, len),
    };
    if start.checked_add(len).is_none_or(|end| end > size) {
        return Err(InvalidByteRangeError::new(range, size).into());
    }
    let len = usize::try_from(len).map_err(|_| InvalidByteRangeError::new(range, size))?;
    // `read_to_end` fills reserved capacity without zeroing it first.
    let mut buf = Vec::with_capacity(len);
    let mut reader = file;
    reader.seek(SeekFrom::Start(start))?;
    reader.take(len as u64).read_to_end(&mut buf)?;
    if buf.len() != len {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file ended while read").into());
    }
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> StoreKey {
        StoreKey::new(s).unwrap()
    }

    #[test]
    fn reads_ranges_and_reports_missing_keys_and_ranges_past_the_end() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("X/data")).unwrap();
        std::fs::write(dir.path().join("X/data/0"), b"0123456789").unwrap();
        let store = ReadStore::new(dir.path());
        let ranges = [ByteRange::FromStart(2, Some(3)), ByteRange::FromStart(7, None), ByteRange::Suffix(4)];
        let got: Vec<Bytes> = store
            .get_partial_many(&key("X/data/0"), Box::new(ranges.into_iter()))
            .unwrap()
            .unwrap()
            .map(|b| b.unwrap())
            .collect();
        assert_eq!(got, [&b"234"[..], b"789", b"6789"]);
        assert_eq!(store.size_key(&key("X/data/0")).unwrap(), Some(10));
        assert!(store.get(&key("X/data/1")).unwrap().is_none());
        assert_eq!(store.size_key(&key("X/data/1")).unwrap(), None);
        for bad in [ByteRange::FromStart(8, Some(3)), ByteRange::FromStart(11, None), ByteRange::Suffix(11)] {
            assert!(store.get_partial(&key("X/data/0"), bad).is_err(), "{bad:?}");
        }
    }
}
