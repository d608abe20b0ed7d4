//! Checks the storage of a variable-length string dataset before HDF5 reads it. The strings
//! live in global heap collections that the dataset's elements point into; the HDF5 1.10 library
//! trusts those pointers and sizes, and a damaged heap made it crash (SIGSEGV in `H5HG_read`, the
//! malformed-input suite found 4 of 129 cases). So the elements and the collections they name
//! are parsed here first (HDF5 file format spec, "Global Heap Collection"), and a reference to a
//! missing or short heap object is a clear error. Datasets stored with filters other than deflate
//! are not checked (anndata and Cell Ranger write strings unfiltered or deflated).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use hdf5::Dataset;

use crate::error::{Error, IoContext, Result};

/// A dataset of a file as it is now: path, dataset, file length and modification time.
type Key = (PathBuf, String, u64, Option<std::time::SystemTime>);

/// Datasets already checked in this process (strings are read a chunk of cells at a time).
fn checked() -> &'static Mutex<HashSet<Key>> {
    static CHECKED: OnceLock<Mutex<HashSet<Key>>> = OnceLock::new();
    CHECKED.get_or_init(Default::default)
}

/// Errors unless every element of the variable-length string dataset `ds` of `path` points at a
/// heap object that exists and holds its length.
pub fn check(path: &Path, ds: &Dataset, what: &str) -> Result<()> {
    let file = std::fs::File::open(path).at(path)?;
    let meta = file.metadata().at(path)?;
    let len = meta.len();
    let key = (path.to_path_buf(), ds.name(), len, meta.modified().ok());
    if checked().lock().is_ok_and(|c| c.contains(&key)) {
        return Ok(());
    }
    let sizes = Sizes::of(&file, path)?;
    // On disk an element is its length, then the heap id: collection address and object index.
    let width = 4 + sizes.offsets + 4;
    let damaged = |detail: String| Error::format(path, format!("{what}: the string storage is damaged ({detail})"));
    let mut heaps = RecentCollections::default();
    let mut i = 0usize;
    let checked_all = for_each_element_block(&file, path, ds, what, len, width as u64, |raw| {
        for e in raw.chunks_exact(width) {
            let n = le(&e[..4]);
            let (addr, index) = (le(&e[4..4 + sizes.offsets]), le(&e[4 + sizes.offsets..]) as u32);
            if n > 0 {
                let objects = heaps
                    .get(addr, || collection(&file, addr, len, sizes))
                    .map_err(|d| damaged(format!("element {i}: {d}")))?;
                match objects.get(&index) {
                    Some(&size) if size >= n => {}
                    Some(&size) => {
                        return Err(damaged(format!("element {i}: {n} bytes stored in a heap object of {size}")))
                    }
                    None => return Err(damaged(format!("element {i}: heap object {index} at {addr} does not exist"))),
                }
            }
            i += 1;
        }
        Ok(())
    })?;
    if checked_all {
        if let Ok(mut c) = checked().lock() {
            c.insert(key);
        }
    }
    Ok(())
}

/// Heap collections parsed most recently. Neighbouring strings share a collection, so a few
/// serve a whole dataset, and memory does not grow with its length (keeping every collection's
/// objects took 21 MB for 629,146 cell names, and grew with the cells: BENCHMARKS "Atlas scale").
#[derive(Default)]
struct RecentCollections {
    objects: HashMap<u64, HashMap<u32, u64>>,
    order: VecDeque<u64>,
}

/// Collections kept parsed at once.
const RECENT_COLLECTIONS: usize = 16;

impl RecentCollections {
    /// The objects of the collection at `addr`, parsed by `load` unless recently seen.
    fn get(
        &mut self,
        addr: u64,
        load: impl FnOnce() -> std::result::Result<HashMap<u32, u64>, String>,
    ) -> std::result::Result<&HashMap<u32, u64>, String> {
        if !self.objects.contains_key(&addr) {
            if self.order.len() == RECENT_COLLECTIONS {
                let oldest = self.order.pop_front().expect("full");
                self.objects.remove(&oldest);
            }
            self.objects.insert(addr, load()?);
            self.order.push_back(addr);
        }
        Ok(&self.objects[&addr])
    }
}

/// The superblock's "size of offsets" and "size of lengths".
#[derive(Clone, Copy)]
struct Sizes {
    offsets: usize,
    lengths: usize,
}

impl Sizes {
    fn of(file: &std::fs::File, path: &Path) -> Result<Self> {
        let mut head = [0u8; 16];
        file.read_exact_at(&mut head, 0).at(path)?;
        let (offsets, lengths) = match head[8] {
            0 | 1 => (head[13], head[14]),
            _ => (head[9], head[10]),
        };
        if ![2, 4, 8].contains(&offsets) || ![2, 4, 8].contains(&lengths) {
            return Err(Error::format(
                path,
                format!("damaged superblock (sizes of offsets {offsets}, lengths {lengths})"),
            ));
        }
        Ok(Self { offsets: offsets as usize, lengths: lengths as usize })
    }
}

fn le(bytes: &[u8]) -> u64 {
    bytes.iter().rev().fold(0u64, |v, &b| (v << 8) | u64::from(b))
}

/// Elements read per block from contiguous storage.
const BLOCK_ELEMENTS: u64 = 1 << 16;

/// Hands `block` the dataset's stored elements (disk form) a block at a time: contiguous bytes
/// in blocks of [`BLOCK_ELEMENTS`], or each chunk (deflate undone). `false` when stored in a way
/// not checked here (then nothing, or only the chunks before the unreadable one, was handed).
fn for_each_element_block(
    file: &std::fs::File,
    path: &Path,
    ds: &Dataset,
    what: &str,
    len: u64,
    element: u64,
    mut block: impl FnMut(&[u8]) -> Result<()>,
) -> Result<bool> {
    let past_end = |addr: u64, size: u64| addr.checked_add(size).is_none_or(|end| end > len);
    let beyond = |addr: u64, size: u64| {
        Error::format(path, format!("{what}: storage at {addr} (+{size} bytes) lies past the end of the file"))
    };
    let read = |addr: u64, size: u64| -> Result<Vec<u8>> {
        if past_end(addr, size) {
            return Err(beyond(addr, size));
        }
        let mut buf = vec![0u8; size as usize];
        file.read_exact_at(&mut buf, addr).at(path)?;
        Ok(buf)
    };
    if !ds.is_chunked() {
        let Some(addr) = ds.offset() else { return Ok(true) };
        let total = ds.size() as u64 * element;
        // The whole extent is checked first, as it was read whole before.
        if past_end(addr, total) {
            return Err(beyond(addr, total));
        }
        let step = BLOCK_ELEMENTS * element;
        for start in (0..total).step_by(step as usize) {
            block(&read(addr + start, step.min(total - start))?)?;
        }
        return Ok(true);
    }
    let filters = ds.filters();
    let deflated = match filters.as_slice() {
        [] => false,
        [hdf5::filters::Filter::Deflate(_)] => true,
        _ => return Ok(false),
    };
    for i in 0..ds.num_chunks().unwrap_or(0) {
        let Some(info) = ds.chunk_info(i) else { return Ok(false) };
        let bytes = read(info.addr, info.size)?;
        if deflated && info.filter_mask & 1 == 0 {
            let mut plain = Vec::new();
            flate2::read::ZlibDecoder::new(bytes.as_slice())
                .read_to_end(&mut plain)
                .map_err(|e| Error::format(path, format!("{what}: a compressed chunk does not decompress: {e}")))?;
            block(&plain)?;
        } else {
            block(&bytes)?;
        }
    }
    Ok(true)
}

/// The objects (index → size) of the global heap collection at `addr`, or what is wrong with it.
fn collection(
    file: &std::fs::File,
    addr: u64,
    len: u64,
    sizes: Sizes,
) -> std::result::Result<HashMap<u32, u64>, String> {
    let header = 8 + sizes.lengths;
    let mut head = vec![0u8; header];
    if addr.checked_add(header as u64).is_none_or(|end| end > len) {
        return Err(format!("heap collection at {addr} lies past the end of the file"));
    }
    file.read_exact_at(&mut head, addr).map_err(|e| e.to_string())?;
    if &head[..4] != b"GCOL" || head[4] != 1 {
        return Err(format!("no heap collection at {addr}"));
    }
    let size = le(&head[8..]);
    if size < header as u64 || addr.checked_add(size).is_none_or(|end| end > len) {
        return Err(format!("heap collection at {addr} claims {size} bytes"));
    }
    let mut bytes = vec![0u8; size as usize];
    file.read_exact_at(&mut bytes, addr).map_err(|e| e.to_string())?;
    let mut objects = HashMap::new();
    let object_header = 8 + sizes.lengths;
    let mut pos = header;
    while pos + object_header <= bytes.len() {
        let index = u16::from_le_bytes([bytes[pos], bytes[pos + 1]]);
        let object = le(&bytes[pos + 8..pos + object_header]);
        if index == 0 {
            break; // free space: the rest of the collection
        }
        let padded = object.checked_add(7).map(|s| s & !7);
        let end = padded.and_then(|p| (pos as u64 + object_header as u64).checked_add(p));
        if end.is_none_or(|e| e > bytes.len() as u64) {
            return Err(format!("heap object {index} at {addr} claims {object} bytes"));
        }
        objects.insert(u32::from(index), object);
        pos = end.expect("checked") as usize;
    }
    Ok(objects)
}
