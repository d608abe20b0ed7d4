//! Files on disk, the base every corrflow crate stands on: I/O errors that name their path
//! ([`error`]), writes that are complete or absent and directories published whole
//! ([`atomic`]), single-writer locks ([`lock`]), JSON that carries its own checksum
//! ([`sealed`]), file checksums ([`hash`]) and the check that no output is an input
//! ([`paths`]).
//!
//! It depends on no other corrflow crate and on nothing heavy (no HDF5, Arrow or burn), so the
//! single-cell readers, the plots and everything above them share one implementation. Each crate
//! above keeps its own typed error and converts this one at its border (`From`).

pub mod atomic;
pub mod error;
pub mod hash;
pub mod lock;
pub mod paths;
pub mod sealed;

pub use error::{Error, IoContext, Result};
