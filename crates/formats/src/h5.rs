//! Thin helpers over `hdf5-metno` for the shapes of data single-cell files use: attributes that
//! may be variable- or fixed-length strings, numeric datasets of any width read in slices, and
//! fields of legacy compound tables. Every error names the file and the object.

use std::ops::Range;
use std::path::Path;

use hdf5::types::{CompoundField, CompoundType, FloatSize, IntSize, TypeDescriptor, VarLenAscii, VarLenUnicode};
use hdf5::{Dataset, Datatype, H5Type, Location};

use super::ChunkValues;
use crate::error::{Error, IoContext, Result};

const HDF5_SIGNATURE: &[u8; 8] = b"\x89HDF\r\n\x1a\n";

/// Opens `path` read-only, telling an empty, truncated or non-HDF5 file apart from other errors.
pub fn open(path: &Path) -> Result<hdf5::File> {
    let meta = std::fs::metadata(path).at(path)?;
    if meta.len() == 0 {
        return Err(Error::format(path, "file is empty"));
    }
    let mut head = [0u8; 8];
    {
        use std::io::Read;
        let mut f = std::fs::File::open(path).at(path)?;
        let n = f.read(&mut head).at(path)?;
        if n < 8 || &head != HDF5_SIGNATURE {
            return Err(Error::format(path, "not an HDF5 file (no HDF5 signature at offset 0)"));
        }
    }
    hdf5::silence_errors(true);
    hdf5::File::with_options()
        .with_fapl(|p| p.mdc_config(&metadata_cache()))
        .open(path)
        .map_err(|e| Error::format(path, format!("cannot open as HDF5 (truncated or corrupt file?): {e}")))
}

/// Largest size of a file's HDF5 metadata cache (object headers, chunk B-trees, the global
/// heap collections that hold variable-length strings such as cell ids).
pub const METADATA_CACHE_MAX: usize = 1 << 20;

/// HDF5's default metadata cache grows adaptively up to 32 MiB. Streaming cell ids through it
/// grew it with the file (Kang ×8: ~7 MB more live heap than 1×), so ingest's memory was not
/// flat; reads are sequential, so a small cache loses nothing.
fn metadata_cache() -> hdf5::plist::file_access::MetadataCacheConfig {
    hdf5::plist::file_access::MetadataCacheConfig {
        initial_size: METADATA_CACHE_MAX / 2,
        min_size: METADATA_CACHE_MAX / 2,
        max_size: METADATA_CACHE_MAX,
        ..Default::default()
    }
}

/// Opens dataset `name` of `group` for a sequential pass. A chunked dataset without filters is
/// opened with no chunk cache: HDF5 then reads its chunks straight into the caller's buffer
/// instead of into the cache and out again by a copy (~4% of Kang ×8 ingest's CPU). Compressed
/// chunks must be decompressed whole, so those keep the cache, and so does anything this cannot
/// reopen.
pub fn open_sequential(group: &hdf5::Group, name: &str) -> hdf5::Result<Dataset> {
    let ds = group.dataset(name)?;
    if !ds.is_chunked() || !ds.filters().is_empty() {
        return Ok(ds);
    }
    let Ok(c_name) = std::ffi::CString::new(name) else { return Ok(ds) };
    let Ok(dapl) = hdf5::plist::DatasetAccess::build().chunk_cache(521, 0, 0.75).finish() else { return Ok(ds) };
    // Closed first: HDF5 shares an open dataset's state, cache settings included, with any
    // later open of it, so the access list would be ignored.
    drop(ds);
    let id = hdf5::sync::sync(|| unsafe { hdf5_sys::h5d::H5Dopen2(group.id(), c_name.as_ptr(), dapl.id()) });
    if id < 0 {
        return group.dataset(name);
    }
    // SAFETY: `id` is a dataset just opened by H5Dopen2, owned by nothing else.
    unsafe { hdf5::from_id(id) }
}

/// Reads a string attribute of any HDF5 string type; `None` when absent or not a string.
pub fn attr_string(obj: &Location, name: &str) -> Option<String> {
    let attr = obj.attr(name).ok()?;
    let desc = attr.dtype().ok()?.to_descriptor().ok()?;
    let is_scalar = attr.shape().iter().product::<usize>() <= 1;
    match desc {
        TypeDescriptor::VarLenUnicode if is_scalar => attr.read_scalar::<VarLenUnicode>().ok().map(|s| s.to_string()),
        TypeDescriptor::VarLenAscii if is_scalar => attr.read_scalar::<VarLenAscii>().ok().map(|s| s.to_string()),
        TypeDescriptor::VarLenUnicode => attr.read_raw::<VarLenUnicode>().ok()?.first().map(|s| s.to_string()),
        TypeDescriptor::FixedAscii(n) | TypeDescriptor::FixedUnicode(n) => {
            let dtype = attr.dtype().ok()?;
            let total = n * attr.shape().iter().product::<usize>().max(1);
            let mut buf = vec![0u8; total];
            let status =
                hdf5::sync::sync(|| unsafe { hdf5_sys::h5a::H5Aread(attr.id(), dtype.id(), buf.as_mut_ptr().cast()) });
            (status >= 0).then(|| fixed_to_string(&buf[..n]))
        }
        _ => None,
    }
}

/// Reads an integer array attribute (e.g. a sparse matrix `shape`).
pub fn attr_usizes(obj: &Location, name: &str) -> Option<Vec<usize>> {
    let attr = obj.attr(name).ok()?;
    let values = attr.read_raw::<i64>().ok()?;
    values.into_iter().map(|v| usize::try_from(v).ok()).collect()
}

fn fixed_to_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Numeric element types single-cell matrices are stored in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumKind {
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
}

impl NumKind {
    pub fn of(desc: &TypeDescriptor) -> Option<Self> {
        Some(match desc {
            TypeDescriptor::Float(FloatSize::U4) => Self::F32,
            TypeDescriptor::Float(FloatSize::U8) => Self::F64,
            TypeDescriptor::Integer(IntSize::U1) => Self::I8,
            TypeDescriptor::Integer(IntSize::U2) => Self::I16,
            TypeDescriptor::Integer(IntSize::U4) => Self::I32,
            TypeDescriptor::Integer(IntSize::U8) => Self::I64,
            TypeDescriptor::Unsigned(IntSize::U1) => Self::U8,
            TypeDescriptor::Unsigned(IntSize::U2) => Self::U16,
            TypeDescriptor::Unsigned(IntSize::U4) => Self::U32,
            TypeDescriptor::Unsigned(IntSize::U8) => Self::U64,
            TypeDescriptor::Boolean => Self::Bool,
            TypeDescriptor::Enum(e) if e.members.len() == 2 => Self::Bool,
            _ => return None,
        })
    }

    pub fn is_integer(self) -> bool {
        !matches!(self, Self::F32 | Self::F64)
    }
}

/// What a dataset holds, for choosing how to read it.
pub fn num_kind(path: &Path, ds: &Dataset, what: &str) -> Result<NumKind> {
    let desc = descriptor(path, ds, what)?;
    NumKind::of(&desc).ok_or_else(|| Error::format(path, format!("{what}: expected a numeric dataset, found {desc}")))
}

pub fn descriptor(path: &Path, ds: &Dataset, what: &str) -> Result<TypeDescriptor> {
    ds.dtype().and_then(|t| t.to_descriptor()).map_err(|e| Error::hdf5(path, format!("reading the type of {what}"), e))
}

fn read_vec<T: H5Type>(path: &Path, ds: &Dataset, what: &str, range: Option<Range<usize>>) -> Result<Vec<T>> {
    let res = match range {
        Some(r) => ds.read_slice_1d::<T, _>(r).map(|a| a.into_raw_vec_and_offset().0),
        None => ds.read_raw::<T>(),
    };
    res.map_err(|e| Error::hdf5(path, format!("reading {what}"), e))
}

/// Reads (a slice of) a 1-d numeric dataset, converting to f64 in Rust rather than through
/// HDF5's slower type-conversion path.
pub fn read_f64(path: &Path, ds: &Dataset, what: &str, kind: NumKind, range: Option<Range<usize>>) -> Result<Vec<f64>> {
    macro_rules! conv {
        ($t:ty) => {
            read_vec::<$t>(path, ds, what, range)?.into_iter().map(|v| v as f64).collect()
        };
    }
    Ok(match kind {
        NumKind::F64 => read_vec::<f64>(path, ds, what, range)?,
        NumKind::F32 => conv!(f32),
        NumKind::I8 => conv!(i8),
        NumKind::I16 => conv!(i16),
        NumKind::I32 => conv!(i32),
        NumKind::I64 => conv!(i64),
        NumKind::U8 => conv!(u8),
        NumKind::U16 => conv!(u16),
        NumKind::U32 => conv!(u32),
        NumKind::U64 => conv!(u64),
        NumKind::Bool => read_vec::<bool>(path, ds, what, range)?.into_iter().map(|b| f64::from(u8::from(b))).collect(),
    })
}

/// Reads (a slice of) a 1-d numeric dataset of stored counts: f32 as it is stored, anything
/// else as f64.
pub fn read_values(
    path: &Path,
    ds: &Dataset,
    what: &str,
    kind: NumKind,
    range: Option<Range<usize>>,
) -> Result<ChunkValues> {
    Ok(match kind {
        NumKind::F32 => ChunkValues::F32(read_vec::<f32>(path, ds, what, range)?),
        _ => ChunkValues::F64(read_f64(path, ds, what, kind, range)?),
    })
}

/// Reads (a slice of) a 1-d integer dataset as i64 (sparse indices, indptr, codes).
pub fn read_i64(path: &Path, ds: &Dataset, what: &str, range: Option<Range<usize>>) -> Result<Vec<i64>> {
    let kind = num_kind(path, ds, what)?;
    macro_rules! conv {
        ($t:ty) => {
            read_vec::<$t>(path, ds, what, range)?.into_iter().map(|v| v as i64).collect()
        };
    }
    Ok(match kind {
        NumKind::I64 => read_vec::<i64>(path, ds, what, range)?,
        NumKind::I32 => conv!(i32),
        NumKind::I16 => conv!(i16),
        NumKind::I8 => conv!(i8),
        NumKind::U8 => conv!(u8),
        NumKind::U16 => conv!(u16),
        NumKind::U32 => conv!(u32),
        NumKind::U64 => read_vec::<u64>(path, ds, what, range)?
            .into_iter()
            .map(|v| i64::try_from(v).map_err(|_| Error::format(path, format!("{what}: value {v} out of range"))))
            .collect::<Result<_>>()?,
        // anndata writes the masks of nullable columns as HDF5 booleans.
        NumKind::Bool => read_vec::<bool>(path, ds, what, range)?.into_iter().map(i64::from).collect(),
        other => return Err(Error::format(path, format!("{what}: expected integers, found {other:?}"))),
    })
}

/// Reads (a slice of) a 1-d integer dataset of indices, each checked to lie in `0..bound`, as
/// u32. 32-bit and narrower storage (what AnnData and 10x write) is checked and converted in
/// one pass, without widening to i64 first.
pub fn read_indices(
    path: &Path,
    ds: &Dataset,
    what: &str,
    range: Option<Range<usize>>,
    bound: usize,
) -> Result<Vec<u32>> {
    // Columns are stored as u32: indices must also fit in one.
    let limit = bound.min(u32::MAX as usize + 1) as i64;
    // `&` rather than `&&`, so the narrow pass below has no branch.
    #[allow(clippy::manual_range_contains)]
    let in_range = |v: i64| (v >= 0) & (v < limit);
    let check = |values: &[i64]| match values.iter().find(|&&v| !in_range(v)) {
        Some(bad) => Err(Error::format(path, format!("{what}: index {bad} outside 0..{bound}"))),
        None => Ok(()),
    };
    macro_rules! checked {
        ($t:ty) => {{
            let raw = read_vec::<$t>(path, ds, what, range)?;
            // A branch-free pass (it vectorizes); the offending value is looked up only on failure.
            if !raw.iter().fold(true, |ok, &v| ok & in_range(i64::from(v))) {
                check(&raw.iter().map(|&v| i64::from(v)).collect::<Vec<_>>())?;
            }
            raw
        }};
    }
    macro_rules! widened {
        ($t:ty) => {
            checked!($t).into_iter().map(|v| v as u32).collect()
        };
    }
    Ok(match num_kind(path, ds, what)? {
        // Checked non-negative, so the same bits: the buffer is reused as it is.
        NumKind::I32 => bytemuck::allocation::cast_vec(checked!(i32)),
        NumKind::U32 => checked!(u32),
        NumKind::I16 => widened!(i16),
        NumKind::U16 => widened!(u16),
        NumKind::I8 => widened!(i8),
        NumKind::U8 => widened!(u8),
        _ => {
            let wide = read_i64(path, ds, what, range)?;
            check(&wide)?;
            wide.into_iter().map(|v| v as u32).collect()
        }
    })
}

/// Reads (a slice of) a 1-d string dataset of any HDF5 string type.
pub fn read_strings(path: &Path, ds: &Dataset, what: &str, range: Option<Range<usize>>) -> Result<Vec<String>> {
    let desc = descriptor(path, ds, what)?;
    if matches!(desc, TypeDescriptor::VarLenUnicode | TypeDescriptor::VarLenAscii) {
        super::vlen_heap::check(path, ds, what)?;
    }
    match desc {
        TypeDescriptor::VarLenUnicode => {
            Ok(read_vec::<VarLenUnicode>(path, ds, what, range)?.into_iter().map(|s| s.to_string()).collect())
        }
        TypeDescriptor::VarLenAscii => {
            Ok(read_vec::<VarLenAscii>(path, ds, what, range)?.into_iter().map(|s| s.to_string()).collect())
        }
        TypeDescriptor::FixedAscii(n) | TypeDescriptor::FixedUnicode(n) => {
            let dtype = ds.dtype().map_err(|e| Error::hdf5(path, what, e))?;
            let bytes = read_raw_bytes(path, ds, what, &dtype, n, range)?;
            Ok(bytes.chunks(n.max(1)).map(fixed_to_string).collect())
        }
        other => Err(Error::format(path, format!("{what}: expected strings, found {other}"))),
    }
}

/// Names and types of the fields of a compound dataset (legacy AnnData `obs`/`var` tables).
pub fn compound_fields(path: &Path, ds: &Dataset, what: &str) -> Result<Option<Vec<CompoundField>>> {
    Ok(match descriptor(path, ds, what)? {
        TypeDescriptor::Compound(c) => Some(c.fields),
        _ => None,
    })
}

/// Reads one fixed-length-string field of a compound dataset.
pub fn read_compound_strings(
    path: &Path,
    ds: &Dataset,
    field: &CompoundField,
    range: Option<Range<usize>>,
) -> Result<Vec<String>> {
    let what = format!("field '{}' of {}", field.name, ds.name());
    let n = match field.ty {
        TypeDescriptor::FixedAscii(n) | TypeDescriptor::FixedUnicode(n) => n,
        ref other => return Err(Error::format(path, format!("{what}: expected a fixed-length string, found {other}"))),
    };
    let mem = single_field_type(path, field, field.ty.clone(), n)?;
    let bytes = read_raw_bytes(path, ds, &what, &mem, n, range)?;
    Ok(bytes.chunks(n.max(1)).map(fixed_to_string).collect())
}

/// Reads one numeric field of a compound dataset as f64 (HDF5 converts the field's type).
pub fn read_compound_f64(
    path: &Path,
    ds: &Dataset,
    field: &CompoundField,
    range: Option<Range<usize>>,
) -> Result<Vec<f64>> {
    let what = format!("field '{}' of {}", field.name, ds.name());
    let mem = single_field_type(path, field, TypeDescriptor::Float(FloatSize::U8), 8)?;
    let bytes = read_raw_bytes(path, ds, &what, &mem, 8, range)?;
    Ok(bytes.chunks_exact(8).map(|b| f64::from_ne_bytes(b.try_into().expect("8-byte chunk"))).collect())
    // ok: invariant
}

fn single_field_type(path: &Path, field: &CompoundField, ty: TypeDescriptor, size: usize) -> Result<Datatype> {
    let desc = TypeDescriptor::Compound(CompoundType { fields: vec![CompoundField::new(&field.name, ty, 0, 0)], size });
    Datatype::from_descriptor(&desc)
        .map_err(|e| Error::hdf5(path, format!("memory type for field '{}'", field.name), e))
}

/// Reads elements of `ds` (all, or a 1-d slice) converted to the memory type `mem` of
/// `elem_size` bytes, into a flat byte buffer.
fn read_raw_bytes(
    path: &Path,
    ds: &Dataset,
    what: &str,
    mem: &Datatype,
    elem_size: usize,
    range: Option<Range<usize>>,
) -> Result<Vec<u8>> {
    let space = ds.space().map_err(|e| Error::hdf5(path, what, e))?;
    let total = space.size();
    let range = range.unwrap_or(0..total);
    if range.end > total || range.start > range.end {
        return Err(Error::format(path, format!("{what}: rows {range:?} outside 0..{total}")));
    }
    let n = range.len();
    let mut buf = vec![0u8; n * elem_size];
    if n == 0 {
        return Ok(buf);
    }
    let fspace = space.select(range).map_err(|e| Error::hdf5(path, what, e))?;
    let mspace = hdf5::Dataspace::try_new(n).map_err(|e| Error::hdf5(path, what, e))?;
    let status = hdf5::sync::sync(|| unsafe {
        hdf5_sys::h5d::H5Dread(
            ds.id(),
            mem.id(),
            mspace.id(),
            fspace.id(),
            hdf5_sys::h5p::H5P_DEFAULT,
            buf.as_mut_ptr().cast(),
        )
    });
    if status < 0 {
        return Err(Error::format(path, format!("{what}: HDF5 read failed (truncated or corrupt data?)")));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `values` stored as `T` back through `read_indices` with `bound`.
    fn indices_of<T: H5Type + Copy>(values: &[T], bound: usize) -> Result<Vec<u32>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("i.h5");
        let file = hdf5::File::create(&path).unwrap();
        let ds = file.new_dataset_builder().with_data(values).create("indices").unwrap();
        read_indices(&path, &ds, "X/indices", None, bound)
    }

    /// The current size of `file`'s metadata cache.
    fn metadata_cache_bytes(file: &hdf5::File) -> usize {
        let (mut max, mut min_clean, mut cur, mut entries) = (0, 0, 0, 0);
        let status = hdf5::sync::sync(|| unsafe {
            hdf5_sys::h5f::H5Fget_mdc_size(file.id(), &mut max, &mut min_clean, &mut cur, &mut entries)
        });
        assert!(status >= 0, "H5Fget_mdc_size failed");
        cur
    }

    #[test]
    fn streaming_many_cell_ids_keeps_the_metadata_cache_small() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ids.h5");
        let n = 400_000;
        {
            let ids: Vec<VarLenUnicode> =
                (0..n).map(|i| format!("AAACCTGAGAAGGCCT-{i:08}-batch-7").parse().unwrap()).collect();
            let file = hdf5::File::create(&path).unwrap();
            file.new_dataset_builder().with_data(&ids).create("_index").unwrap();
        }
        let file = open(&path).unwrap();
        let ds = file.dataset("_index").unwrap();
        let mut largest = 0;
        for start in (0..n).step_by(256) {
            let ids = read_strings(&path, &ds, "obs/_index", Some(start..(start + 256).min(n))).unwrap();
            assert_eq!(ids[0], format!("AAACCTGAGAAGGCCT-{start:08}-batch-7"));
            largest = largest.max(metadata_cache_bytes(&file));
        }
        // The default configuration reaches 2 MB here (and up to 32 MB on larger files).
        assert!(largest <= METADATA_CACHE_MAX, "metadata cache grew to {largest} bytes");
    }

    #[test]
    fn sequential_datasets_skip_the_chunk_cache_only_when_unfiltered() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chunks.h5");
        let values: Vec<i64> = (0..1000).map(|i| i * 7 - 300).collect();
        {
            let file = hdf5::File::create(&path).unwrap();
            file.new_dataset_builder().chunk(100).with_data(&values).create("plain").unwrap();
            file.new_dataset_builder().chunk(100).lzf().with_data(&values).create("packed").unwrap();
            file.new_dataset_builder().with_data(&values).create("contiguous").unwrap();
        }
        let file = open(&path).unwrap();
        for (name, cached) in [("plain", false), ("packed", true), ("contiguous", true)] {
            let ds = open_sequential(&file, name).unwrap();
            let nbytes = ds.access_plist().unwrap().chunk_cache().nbytes;
            assert_eq!(nbytes > 0, cached, "{name}: chunk cache of {nbytes} bytes");
            // Windows that straddle chunk edges read the same values either way.
            for start in (0..1000).step_by(37) {
                let end = (start + 37).min(1000);
                assert_eq!(read_i64(&path, &ds, name, Some(start..end)).unwrap(), values[start..end], "{name}");
            }
        }
    }

    #[test]
    fn indices_of_every_width_are_read_and_range_checked() {
        assert_eq!(indices_of(&[0i32, 4, 2], 5).unwrap(), [0, 4, 2]);
        assert_eq!(indices_of(&[0u16, 4], 5).unwrap(), [0, 4]);
        assert_eq!(indices_of(&[3i64, 1], 5).unwrap(), [3, 1]);
        for (err, needle) in [
            (indices_of(&[0i32, -1, 2], 5).unwrap_err(), "index -1 outside 0..5"),
            (indices_of(&[0i32, 5], 5).unwrap_err(), "index 5 outside 0..5"),
            (indices_of(&[7u8], 5).unwrap_err(), "index 7 outside"),
            (indices_of(&[1i64, -9], 5).unwrap_err(), "index -9 outside"),
        ] {
            let msg = err.to_string();
            assert!(msg.contains(needle) && msg.contains("X/indices") && msg.contains("i.h5"), "{msg}");
        }
    }
}
