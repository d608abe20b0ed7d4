//! The structure every compressed sparse matrix must have before its entries mean anything, as
//! scipy's `check_format` states it: `indptr` has one more offset than the compressed axis has
//! rows, starts at 0, never decreases and ends at the number of stored entries (the length of
//! `data` and `indices`). A reader checks the two ends once when it opens the matrix and every
//! window of `indptr` it reads afterwards, so nothing is read twice and a matrix that breaks the
//! rules is refused, naming the file and the array, instead of shifting entries between cells.

use std::path::Path;

use crate::error::{Error, Result};

/// Checks `indptr`'s first and last offsets (`first`, `last`) of matrix `what` (e.g. `X`,
/// `raw/X`, `matrix`) with `nnz` stored entries.
pub fn check_ends(path: &Path, what: &str, first: i64, last: i64, nnz: usize) -> Result<()> {
    if first != 0 {
        return Err(Error::format(path, format!("{what}/indptr: index pointer should start with 0, found {first}")));
    }
    if last != nnz as i64 {
        return Err(Error::format(
            path,
            format!(
                "{what}/indptr: last value of index pointer should be {nnz}, the size of {what}/data and \
                 {what}/indices, found {last}"
            ),
        ));
    }
    Ok(())
}

/// Checks a window of `indptr` read from offset `at` on: no offset below 0 or above `nnz`, and
/// none smaller than the one before it.
pub fn check_window(path: &Path, what: &str, ptr: &[i64], at: usize, nnz: usize) -> Result<()> {
    if let Some((k, &p)) = ptr.iter().enumerate().find(|(_, &p)| p < 0 || p > nnz as i64) {
        return Err(Error::format(
            path,
            format!(
                "{what}/indptr: index pointer values must lie within 0..={nnz} (the size of {what}/data), entry {} is {p}",
                at + k
            ),
        ));
    }
    if let Some(k) = ptr.windows(2).position(|w| w[1] < w[0]) {
        return Err(Error::format(
            path,
            format!(
                "{what}/indptr: index pointer values must form a non-decreasing sequence, entry {} is {} but entry {} \
                 is {}",
                at + k,
                ptr[k],
                at + k + 1,
                ptr[k + 1]
            ),
        ));
    }
    Ok(())
}

/// Checks a whole `indptr` (the transposing readers read it at once).
pub fn check_all(path: &Path, what: &str, ptr: &[i64], n_major: usize, nnz: usize) -> Result<()> {
    if ptr.len() != n_major + 1 {
        return Err(Error::format(
            path,
            format!("{what}/indptr: index pointer size ({}) should be {}", ptr.len(), n_major + 1),
        ));
    }
    check_ends(path, what, ptr[0], ptr[n_major], nnz)?;
    check_window(path, what, ptr, 0, nnz)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(r: Result<()>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn each_rule_is_refused_with_scipys_words_and_the_array() {
        let p = Path::new("f.h5ad");
        assert!(check_all(p, "X", &[0, 2, 2, 5], 3, 5).is_ok());
        let e = msg(check_all(p, "X", &[5, 6, 7], 2, 7));
        assert!(e.contains("f.h5ad") && e.contains("X/indptr: index pointer should start with 0, found 5"), "{e}");
        let e = msg(check_all(p, "raw/X", &[0, 2, 3], 2, 4));
        assert!(e.contains("raw/X/indptr: last value of index pointer should be 4") && e.contains("found 3"), "{e}");
        let e = msg(check_all(p, "X", &[0, 3, 2, 4], 3, 4));
        assert!(e.contains("non-decreasing") && e.contains("entry 1 is 3 but entry 2 is 2"), "{e}");
        let e = msg(check_all(p, "X", &[0, 4], 2, 4));
        assert!(e.contains("index pointer size (2) should be 3"), "{e}");
        let e = msg(check_window(p, "matrix", &[3, -1], 10, 4));
        assert!(e.contains("matrix/indptr") && e.contains("entry 11 is -1"), "{e}");
        let e = msg(check_window(p, "X", &[3, 9], 10, 4));
        assert!(e.contains("entry 11 is 9"), "{e}");
    }
}
