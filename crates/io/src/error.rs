//! The library's typed errors. Every variant names the file (or input) it is about, so a
//! message printed by `main` tells the user what to fix without a backtrace.

use std::path::{Path, PathBuf};

/// Result alias for corrflow's library code.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in corrflow's stages.
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

    #[error("vocabulary {name}: {msg}")]
    Vocab { name: String, msg: String },

    #[error("{}: {msg}", path.display())]
    Parquet { path: PathBuf, msg: String },

    #[error("config {}: {msg}", path.display())]
    Config { path: PathBuf, msg: String },

    /// A request that conflicts with what is already on disk (existing atlas, mismatched resume).
    #[error("{}: {msg}", path.display())]
    Conflict { path: PathBuf, msg: String },

    #[error("{0}")]
    Usage(String),

    /// Another worker of a dataflow (thread or process) failed; the message is its error.
    #[error("{0}")]
    Remote(String),

    /// A failure of corrflow's own machinery (a worker thread that panicked, a dataflow that
    /// would not start, a result that never arrived), as opposed to bad input or usage.
    #[error("internal error in {what}: {msg}")]
    Internal { what: &'static str, msg: String },

    /// An embedding backend (the `Encoder`s: ONNX Runtime, burn) could not load or run a model;
    /// `backend` says which, as the user knows it ("ONNX Runtime", "model").
    #[error("{backend}: {msg}")]
    Backend { backend: &'static str, msg: String },

    /// The caller cancelled the work (a Ctrl-C in the Python package); what was committed stays.
    #[error("{0}: interrupted")]
    Interrupted(String),
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

    pub fn parquet(path: impl AsRef<Path>, err: impl std::fmt::Display) -> Self {
        Self::Parquet { path: path.as_ref().to_path_buf(), msg: err.to_string() }
    }

    /// A Parquet file that cannot be decoded: a damaged footer or page surfaces as thrift or
    /// UTF-8 noise from the decoder, so the message says what that means first.
    pub fn parquet_read(path: impl AsRef<Path>, err: impl std::fmt::Display) -> Self {
        let msg = format!("cannot read this Parquet file, it is damaged or not Parquet ({err})");
        Self::Parquet { path: path.as_ref().to_path_buf(), msg }
    }

    pub fn backend(backend: &'static str, msg: impl Into<String>) -> Self {
        Self::Backend { backend, msg: msg.into() }
    }

    pub fn conflict(path: impl AsRef<Path>, msg: impl Into<String>) -> Self {
        Self::Conflict { path: path.as_ref().to_path_buf(), msg: msg.into() }
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

/// The readers' errors become the same kinds here, with the same messages.
impl From<corrflow_formats::Error> for Error {
    fn from(e: corrflow_formats::Error) -> Self {
        use corrflow_formats::Error as F;
        match e {
            F::Io { path, err } => Self::Io { path, err },
            F::Hdf5 { path, what, err } => Self::Hdf5 { path, what, err },
            F::Format { path, msg } => Self::Format { path, msg },
            F::InvalidData { path, msg } => Self::InvalidData { path, msg },
            F::Usage(msg) => Self::Usage(msg),
            F::Internal { what, msg } => Self::Internal { what, msg },
        }
    }
}

/// File handling's errors become the same kinds here, with the same messages.
impl From<corrflow_fs::Error> for Error {
    fn from(e: corrflow_fs::Error) -> Self {
        use corrflow_fs::Error as F;
        match e {
            F::Io { path, err } => Self::Io { path, err },
            F::Format { path, msg } => Self::Format { path, msg },
            F::Conflict { path, msg } => Self::Conflict { path, msg },
            F::Usage(msg) => Self::Usage(msg),
            F::Internal { what, msg } => Self::Internal { what, msg },
        }
    }
}
