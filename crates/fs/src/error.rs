//! The errors of file handling. Every variant names the path it is about, so a message printed
//! by the binary tells the user what to fix; the crates above take each over as the variant of
//! the same name in their own error type.

use std::path::{Path, PathBuf};

/// Result alias for file handling.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong writing, locking or checking a file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // The underlying errors are part of the message, not a `source`, so `{:#}` prints them once.
    #[error("{}: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },

    /// The file is readable but its content is not what it must be (a broken checksum).
    #[error("{}: {msg}", path.display())]
    Format { path: PathBuf, msg: String },

    /// Another writer holds the directory, or what is on disk conflicts with the request.
    #[error("{}: {msg}", path.display())]
    Conflict { path: PathBuf, msg: String },

    #[error("{0}")]
    Usage(String),

    /// A failure of the crate's own machinery, as opposed to bad input or usage.
    #[error("internal error in {what}: {msg}")]
    Internal { what: &'static str, msg: String },
}

impl Error {
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Self::Io { path: path.as_ref().to_path_buf(), err: source }
    }

    pub fn format(path: impl AsRef<Path>, msg: impl Into<String>) -> Self {
        Self::Format { path: path.as_ref().to_path_buf(), msg: msg.into() }
    }

    pub fn conflict(path: impl AsRef<Path>, msg: impl Into<String>) -> Self {
        Self::Conflict { path: path.as_ref().to_path_buf(), msg: msg.into() }
    }

    pub fn internal(what: &'static str, msg: impl Into<String>) -> Self {
        Self::Internal { what, msg: msg.into() }
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
