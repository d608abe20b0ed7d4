//! Editing a copy of an h5ad: the shared frame of the writers that add cell results to an
//! AnnData file (`obsm`, `obs` columns) without touching the input.

use std::path::Path;

use crate::error::{Error, IoContext, Result};

/// Refuses, before any work, an input whose copy cannot take results (`--h5ad-out`).
pub fn check_editable(input: &Path) -> Result<()> {
    let name = input.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    if input.is_dir() || name.ends_with(".mtx") || name.ends_with(".mtx.gz") {
        return Err(Error::format(
            input,
            "--h5ad-out writes obsm into a copy of an AnnData (.h5ad) file; this is a MatrixMarket matrix, which has \
             no obsm: use the Parquet of --out (cell_id is the barcode)",
        ));
    }
    let file = super::h5::open(input)?;
    // The obs index name is a string attribute: the read that crashes libhdf5 on damaged files.
    let bytes = std::fs::metadata(input).map_or(0, |m| m.len());
    super::crash_guard::probe(input, super::crash_guard::default_patience(bytes), || {
        let _ = super::h5::open(input).and_then(|f| obs_index(input, &f).map(drop));
    })?;
    obs_index(input, &file).map(drop)
}

/// The obs group and the name of its index column: AnnData ≥ 0.7 only.
fn obs_index(input: &Path, file: &hdf5::File) -> Result<(hdf5::Group, String)> {
    let legacy = || {
        if file.link_exists("matrix") && !file.link_exists("obs") {
            return Error::format(
                input,
                "--h5ad-out writes obsm into a copy of an AnnData (.h5ad) file; this is a 10x HDF5 matrix, which has \
                 no obsm: use the Parquet of --out (cell_id is the barcode), or convert the file to h5ad first",
            );
        }
        Error::format(
            input,
            "--h5ad-out needs an AnnData ≥ 0.7 file (obs as a group with an _index attribute); this one is an \
             older layout",
        )
    };
    let obs = file.group("obs").map_err(|_| legacy())?;
    let index_name = super::h5::attr_string(&obs, "_index").ok_or_else(legacy)?;
    Ok((obs, index_name))
}

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
    let tmp = corrflow_fs::atomic::temp_path(target);
    std::fs::copy(input, &tmp).at(&tmp)?;
    let result = (|| -> Result<()> {
        let h5 = |e: hdf5::Error| Error::format(&tmp, format!("writing {what}: {e}"));
        let file = hdf5::File::open_rw(&tmp).map_err(h5)?;
        let (obs, index_name) = obs_index(input, &file)?;
        let names = super::h5::read_strings(input, &obs.dataset(&index_name).map_err(h5)?, "obs index", None)?;
        edit(&file, &obs, &names, &h5)?;
        file.flush().map_err(h5)
    })();
    match result {
        Ok(()) => Ok(corrflow_fs::atomic::commit(&tmp, target)?),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}
