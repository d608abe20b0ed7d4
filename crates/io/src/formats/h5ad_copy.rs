//! Editing a copy of an h5ad: the shared frame of the writers that add cell results to an
//! AnnData file (`obsm`, `obs` columns) without touching the input.

use std::path::Path;

use crate::error::{Error, IoContext, Result};

/// Copies `input` to a hidden temporary file beside `target`, lets `edit` change the copy, and
/// renames it to `target`; a failure removes the copy. `edit` gets the open file, its `obs`
/// group, the obs index (cell ids in file order) and the error of a failed HDF5 call. Needs
/// AnnData ≥ 0.7 (obs as a group with an `_index` attribute).
pub(crate) fn edit_copy(
    input: &Path,
    target: &Path,
    what: &str,
    edit: impl FnOnce(&hdf5::File, &hdf5::Group, &[String], &dyn Fn(hdf5::Error) -> Error) -> Result<()>,
) -> Result<()> {
    let tmp = crate::util::atomic::temp_path(target);
    std::fs::copy(input, &tmp).at(&tmp)?;
    let result = (|| -> Result<()> {
        let h5 = |e: hdf5::Error| Error::format(&tmp, format!("writing {what}: {e}"));
        let file = hdf5::File::open_rw(&tmp).map_err(h5)?;
        let legacy = || {
            Error::format(input, "--h5ad-out needs an AnnData ≥ 0.7 file (obs as a group with an _index attribute); this one is an older layout")
        };
        let obs = file.group("obs").map_err(|_| legacy())?;
        let index_name = super::h5::attr_string(&obs, "_index").ok_or_else(legacy)?;
        let names = super::h5::read_strings(input, &obs.dataset(&index_name).map_err(h5)?, "obs index", None)?;
        edit(&file, &obs, &names, &h5)?;
        file.flush().map_err(h5)
    })();
    match result {
        Ok(()) => crate::util::atomic::commit(&tmp, target),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}
