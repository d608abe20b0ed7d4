//! The incremental state's statistics file (`stats.bin.zst`): the length of one zstd frame (u64
//! LE), then the frame, holding little-endian i64 and i128 arrays back to back. The arrays are
//! streamed straight from and into their vectors (no 224 MB intermediate copy), and a wrong
//! length, a truncated frame or a frame of another size is reported as such.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use corrflow_io::error::{Error, IoContext, Result};

#[cfg(not(target_endian = "little"))]
compile_error!("the statistics file is read and written as native little-endian arrays");

/// Writes the arrays to `path` (not atomically: the caller writes a temporary file and renames
/// it) and syncs it.
pub fn write(path: &Path, longs: &[&[i64]], wides: &[&[i128]]) -> Result<()> {
    let mut file = std::fs::File::create(path).at(path)?;
    file.write_all(&0u64.to_le_bytes()).at(path)?;
    let mut zstd = zstd::stream::Encoder::new(file, 1).at(path)?;
    for a in longs {
        zstd.write_all(bytemuck::cast_slice(a)).at(path)?;
    }
    for a in wides {
        zstd.write_all(bytemuck::cast_slice(a)).at(path)?;
    }
    let mut file = zstd.finish().at(path)?;
    let frame = file.stream_position().at(path)? - 8;
    file.seek(SeekFrom::Start(0)).at(path)?;
    file.write_all(&frame.to_le_bytes()).at(path)?;
    file.sync_all().at(path)
}

/// Reads arrays of the given lengths, in the order [`write`] wrote them.
pub fn read(path: &Path, longs: &[usize], wides: &[usize]) -> Result<(Vec<Vec<i64>>, Vec<Vec<i128>>)> {
    let mut packed = Vec::new();
    std::fs::File::open(path).at(path)?.read_to_end(&mut packed).at(path)?;
    let declared = packed.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))); // ok: invariant
    if declared != Some(packed.len() as u64 - 8) {
        return Err(Error::format(path, "statistics file is truncated"));
    }
    let mut zstd = zstd::stream::Decoder::with_buffer(&packed[8..]).at(path)?;
    let mut fill = |bytes: &mut [u8]| {
        zstd.read_exact(bytes).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => Error::format(path, "statistics are shorter than the state says"),
            _ => Error::format(path, format!("corrupt statistics: {e}")),
        })
    };
    let mut out_longs = Vec::with_capacity(longs.len());
    for &n in longs {
        let mut v = vec![0i64; n];
        fill(bytemuck::cast_slice_mut(&mut v))?;
        out_longs.push(v);
    }
    let mut out_wides = Vec::with_capacity(wides.len());
    for &n in wides {
        let mut v = vec![0i128; n];
        fill(bytemuck::cast_slice_mut(&mut v))?;
        out_wides.push(v);
    }
    let mut more = [0u8; 1];
    if zstd.read(&mut more).map_err(|e| Error::format(path, format!("corrupt statistics: {e}")))? != 0 {
        return Err(Error::format(path, "statistics are longer than the state says"));
    }
    Ok((out_longs, out_wides))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_round_trip_and_damaged_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.bin.zst");
        let (a, b): (Vec<i64>, Vec<i128>) =
            ((0..1000).map(|i| i * 7 - 300).collect(), (0..500).map(|i| -(i << 70)).collect());
        write(&p, &[&a, &[5]], &[&b]).unwrap();
        let (longs, wides) = read(&p, &[1000, 1], &[500]).unwrap();
        assert_eq!((longs, wides), (vec![a, vec![5]], vec![b]));
        let e = read(&p, &[1000, 2], &[500]).unwrap_err().to_string();
        assert!(e.contains("s.bin.zst") && e.contains("shorter"), "{e}");
        let e = read(&p, &[1000, 1], &[400]).unwrap_err().to_string();
        assert!(e.contains("longer"), "{e}");
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 10]).unwrap();
        assert!(read(&p, &[1000, 1], &[500]).unwrap_err().to_string().contains("truncated"));
    }
}
