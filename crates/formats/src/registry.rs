//! Which reader a path needs. Each format is one [`CellFormat`]: how to recognise a file of it
//! and how to open it. Adding a format is its file plus one line in [`BUILTIN`] (or, from
//! outside this crate, one call to [`register`]).

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use crate::error::{Error, Result};
use crate::{crash_guard, h5, CellSource, ReadOptions};

/// A path to read, with what the formats' checks look at.
pub struct Input {
    pub path: PathBuf,
    pub is_dir: bool,
    /// The open file when the path is an HDF5 file.
    pub hdf5: Option<hdf5::File>,
}

impl Input {
    /// The file name, lower-cased (for suffix checks).
    pub fn name(&self) -> String {
        self.path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default()
    }

    /// The open HDF5 file; only called by formats whose `detect` required one.
    pub fn hdf5_file(&self) -> Result<hdf5::File> {
        self.hdf5.clone().ok_or_else(|| Error::internal("formats", "an HDF5 format chosen for a non-HDF5 input"))
    }
}

/// One input format.
pub trait CellFormat: Sync {
    /// Its name in messages.
    fn name(&self) -> &'static str;
    /// What an input of this format is, for the message listing the formats corrflow reads.
    fn looks_like(&self) -> &'static str;
    /// Whether `input` is of this format: cheap checks (a suffix, a marker file, HDF5 members).
    fn detect(&self, input: &Input) -> bool;
    /// Opens `input` (already detected as this format).
    fn open(&self, input: &Input, opts: &ReadOptions) -> Result<Box<dyn CellSource>>;
}

/// The built-in formats, in the order they are tried (the first that detects a path reads
/// it; h5ad last: it takes any other HDF5 file and names what is missing).
pub const BUILTIN: [&dyn CellFormat; 6] = [
    &crate::zarr::Zarr,
    &crate::soma::Soma,
    &crate::mtx::Mtx,
    &crate::tenx::Tenx,
    &crate::loom::Loom,
    &crate::h5ad::H5ad,
];

/// Formats registered at run time (by code outside this crate); tried before the built-in ones.
static REGISTERED: RwLock<Vec<&'static dyn CellFormat>> = RwLock::new(Vec::new());

/// Makes a format defined outside this crate readable everywhere inputs are read. Registering a
/// name twice keeps the first.
pub fn register(format: &'static dyn CellFormat) {
    let mut registered = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    if !registered.iter().chain(BUILTIN.iter()).any(|f| f.name() == format.name()) {
        registered.push(format);
    }
}

/// Every known format, registered ones first.
pub fn all() -> Vec<&'static dyn CellFormat> {
    let registered = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    registered.iter().copied().chain(BUILTIN).collect()
}

/// The formats corrflow reads, for messages.
pub fn known() -> String {
    all().iter().map(|f| format!("{} ({})", f.name(), f.looks_like())).collect::<Vec<_>>().join("; ")
}

fn dispatch(input: &Input, opts: &ReadOptions) -> Result<Option<Box<dyn CellSource>>> {
    match all().into_iter().find(|f| f.detect(input)) {
        Some(f) => f.open(input, opts).map(Some),
        None => Ok(None),
    }
}

/// Opens `path` with the reader its format needs.
pub fn open_any(path: &Path, opts: &ReadOptions) -> Result<Box<dyn CellSource>> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    let plain = Input { path: path.to_path_buf(), is_dir: meta.is_dir(), hdf5: None };
    if meta.is_dir() {
        return dispatch(&plain, opts)?
            .ok_or_else(|| Error::format(path, format!("a directory corrflow cannot read; it reads {}", known())));
    }
    // Formats recognised by name or content without HDF5 (MatrixMarket `.mtx`).
    if let Some(source) = dispatch(&plain, opts)? {
        return Ok(source);
    }
    let file = h5::open(path).map_err(|e| match e {
        Error::Format { path, msg } => Error::format(path, format!("{msg}; corrflow reads {}", known())),
        other => other,
    })?;
    // Opening reads the attributes and the obs/var tables (chunks read cell ids, which
    // `vlen_heap` checks): that is what may crash the HDF5 library on a damaged file.
    let patience = opts.open_patience.unwrap_or_else(|| crash_guard::default_patience(meta.len()));
    crash_guard::probe(path, patience, || {
        if let Ok(f) = h5::open(path) {
            let _ = dispatch(
                &Input { hdf5: Some(f), ..Input { path: path.to_path_buf(), is_dir: false, hdf5: None } },
                opts,
            );
        }
    })?;
    let input = Input { path: path.to_path_buf(), is_dir: false, hdf5: Some(file) };
    dispatch(&input, opts)?.ok_or_else(|| Error::internal("formats", "no format took an HDF5 file"))
}
