//! A file that starts writing its pages to disk while it is still being written, so the final
//! `fsync` of a large output waits for the last few megabytes rather than for all of it.

use std::fs::File;
use std::io::Write;

/// Bytes written between two requests to start writeback.
const WRITEBACK_BYTES: u64 = 8 << 20;

/// [`File`] that asks the kernel to start writing back every [`WRITEBACK_BYTES`] it is given
/// (Linux `sync_file_range(SYNC_FILE_RANGE_WRITE)`: it starts the I/O and returns, and it is
/// only a hint, so durability still comes from the `sync_all` that commits the file).
pub struct WritebackFile {
    file: File,
    written: u64,
    requested: u64,
}

impl WritebackFile {
    pub fn new(file: File) -> Self {
        Self { file, written: 0, requested: 0 }
    }

    pub fn into_inner(self) -> File {
        self.file
    }

    #[cfg(target_os = "linux")]
    fn start_writeback(&mut self) {
        use std::os::fd::AsRawFd;
        let (from, len) = (self.requested, self.written - self.requested);
        // SAFETY: a plain syscall on a descriptor this struct owns; no memory is passed.
        // Its result is ignored: a failed hint changes nothing, and `sync_all` reports I/O errors.
        unsafe {
            libc::sync_file_range(self.file.as_raw_fd(), from as i64, len as i64, libc::SYNC_FILE_RANGE_WRITE);
        }
        self.requested = self.written;
    }

    #[cfg(not(target_os = "linux"))]
    fn start_writeback(&mut self) {
        self.requested = self.written;
    }
}

impl Write for WritebackFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written - self.requested >= WRITEBACK_BYTES {
            self.start_writeback();
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_byte_in_order_across_writeback_requests() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.bin");
        let mut w = WritebackFile::new(File::create(&path).unwrap());
        let mut expected = Vec::new();
        // 20 MiB in uneven pieces: several writeback requests, none on a piece boundary.
        for i in 0..700u32 {
            let piece: Vec<u8> = (0..30_011u32).map(|j| (i.wrapping_mul(31) ^ j) as u8).collect();
            w.write_all(&piece).unwrap();
            expected.extend_from_slice(&piece);
        }
        assert!(w.requested >= 2 * WRITEBACK_BYTES, "writeback was requested ({} bytes)", w.requested);
        w.into_inner().sync_all().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected);
    }
}
