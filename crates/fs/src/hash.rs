//! Checksums: the sha256 of a file, of bytes as they are written, and two digests shortened
//! for a message.

use std::io::{Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::{IoContext, Result};

/// Two hashes (hex digests) shortened for a message: 12 digits each, or as many as it takes
/// to show where they differ (four past the first difference), so two different hashes never
/// print the same; a hash damaged into any text is cut at a character, never mid-character.
pub fn distinct_hashes(a: &str, b: &str) -> (String, String) {
    let common = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    let n = 12.max(common + 4);
    let cut = |h: &str| {
        let s: String = h.chars().take(n).collect();
        if h.chars().count() > n {
            format!("{s}…")
        } else {
            s
        }
    };
    (cut(a), cut(b))
}

/// sha256 of a file's bytes, hex-encoded.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).at(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).at(path)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// A writer that hashes (sha256) and counts the bytes it passes on, so a file's checksum is
/// known when it is written instead of by reading it again.
pub struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
}

impl<W: Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        Self { inner, hasher: Sha256::new(), bytes: 0 }
    }

    /// The inner writer, the hex sha256 of everything written and its length.
    pub fn finish(self) -> (W, String, u64) {
        (self.inner, hex::encode(self.hasher.finalize()), self.bytes)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortened_hashes_show_where_they_differ() {
        let a = "3b450eb1fd23aa00ff";
        let pair = |x: &str, y: &str| (x.to_string(), y.to_string());
        assert_eq!(distinct_hashes(a, "3b450eb1fd23aa01ff"), pair(a, "3b450eb1fd23aa01ff"));
        assert_eq!(distinct_hashes(a, "9b450eb1fd23aa00ff").0, "3b450eb1fd23…");
        assert_eq!(distinct_hashes("3b45é0", "3b45x0"), pair("3b45é0", "3b45x0"));
    }

    #[test]
    fn hashing_writer_checksum_equals_the_written_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        let mut w = HashingWriter::new(std::io::BufWriter::new(std::fs::File::create(&path).unwrap()));
        for i in 0..1000u32 {
            w.write_all(&i.to_le_bytes().repeat(i as usize % 17)).unwrap();
        }
        let (inner, sha, bytes) = w.finish();
        drop(inner.into_inner().unwrap());
        assert_eq!(bytes, std::fs::metadata(&path).unwrap().len());
        assert_eq!(sha, sha256_file(&path).unwrap());
    }
}
