//! The readers' typed errors. Every variant names the file it is about, so a message printed by
//! the binary tells the user what to fix. `corrflow_io::Error` takes each variant over as its
//! own (`From`), so callers above see one error type.

use std::path::{Path, PathBuf};

/// Result alias for the readers.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong reading (or editing a copy of) a single-cell file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // The underlying errors are part of the message, not a `source`, so `{:#}` prints them once.
    #[error("{}: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },

    #[error("{}: {what}: {err}", path.display())]
    Hdf5 { path: PathBuf, what: String, err: hdf5::Error },

    /// The file is readable but its structure is not what its format requires.
    #[error("{}: {msg}", path.display())]
    Format { path: PathBuf, msg: String },

    /// A value in the data is not acceptable (negative, non-finite, non-integer counts...).
    #[error("{}: {msg}", path.display())]
    InvalidData { path: PathBuf, msg: String },

    #[error("{0}")]
    Usage(String),

    /// A failure of the readers' own machinery, as opposed to bad input or usage.
    #[error("internal error in {what}: {msg}")]
    Internal { what: &'static str, msg: String },
}

impl Error {
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Self::Io { path: path.as_ref().to_path_buf(), err: source }
    }

    pub fn internal(what: &'static str, msg: impl Into<String>) -> Self {
        Self::Internal { what, msg: msg.into() }
    }

    pub fn format(path: impl AsRef<Path>, msg: impl Into<String>) -> Self {
        Self::Format { path: path.as_ref().to_path_buf(), msg: msg.into() }
    }

    pub fn invalid(path: impl AsRef<Path>, msg: impl Into<String>) -> Self {
        Self::InvalidData { path: path.as_ref().to_path_buf(), msg: msg.into() }
    }

    pub fn hdf5(path: impl AsRef<Path>, what: impl Into<String>, source: hdf5::Error) -> Self {
        Self::Hdf5 { path: path.as_ref().to_path_buf(), what: what.into(), err: source }
    }
}

/// Attaches a path to `std::io` results.
pub trait IoContext<T> {
    fn at(self, path: impl AsRef<Path>) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn at(self, path: impl AsRef<Path>) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}

/// File handling's errors become the same kinds here, with the same messages (a conflict on disk
/// is a fact about the file, as `Format` is).
impl From<corrflow_fs::Error> for Error {
    fn from(e: corrflow_fs::Error) -> Self {
        use corrflow_fs::Error as F;
        match e {
            F::Io { path, err } => Self::Io { path, err },
            F::Format { path, msg } | F::Conflict { path, msg } => Self::Format { path, msg },
            F::Usage(msg) => Self::Usage(msg),
            F::Internal { what, msg } => Self::Internal { what, msg },
        }
    }
}
