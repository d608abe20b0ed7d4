//! Editing a copy of an h5ad: the shared frame of the writers that add cell results to an
//! AnnData file (`obsm`, `obs` columns) without touching the input.

use std::collections::{HashMap, HashSet};
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

/// For each row of the file (obs index `names`, file order), the position in `ids` (the cells
/// that have a result, in file order) of its result. The same sequence matches row for row, so
/// repeated obs names are fine when every cell has a result; otherwise rows are matched by name,
/// and a name that repeats among them is refused: its results could land on another cell's row.
fn rows_of_results(input: &Path, names: &[String], ids: &[String]) -> Result<Vec<Option<usize>>> {
    if names == ids {
        return Ok((0..names.len()).map(Some).collect());
    }
    let mut row: HashMap<&str, usize> = HashMap::with_capacity(ids.len());
    for (i, id) in ids.iter().enumerate() {
        if row.insert(id.as_str(), i).is_some() {
            return Err(repeated(input, id));
        }
    }
    let mut seen = HashSet::with_capacity(ids.len());
    let order: Vec<Option<usize>> = names.iter().map(|n| row.get(n.as_str()).copied()).collect();
    for (n, i) in names.iter().zip(&order) {
        if i.is_some() && !seen.insert(n.as_str()) {
            return Err(repeated(input, n));
        }
    }
    Ok(order)
}

fn repeated(input: &Path, name: &str) -> Error {
    Error::format(
        input,
        format!(
            "--h5ad-out matches results to rows by obs name, and '{name}' names more than one cell here (not every \
             cell has a result, so rows cannot be matched in order); make the names unique \
             (adata.obs_names_make_unique()) and run again: the Parquet of --out holds every result"
        ),
    )
}

/// Copies `input` to a hidden temporary file beside `target`, lets `edit` change the copy, and
/// renames it to `target`; a failure removes the copy. `edit` gets the open file, its `obs`
/// group, for each row of the file the position in `ids` of its result (see
/// [`rows_of_results`]), and the error of a failed HDF5 call. Needs AnnData ≥ 0.7 (obs as a
/// group with an `_index` attribute).
pub(crate) fn edit_copy(
    input: &Path,
    target: &Path,
    what: &str,
    ids: &[String],
    edit: impl FnOnce(&hdf5::File, &hdf5::Group, &[Option<usize>], &dyn Fn(hdf5::Error) -> Error) -> Result<()>,
) -> Result<()> {
    let tmp = corrflow_fs::atomic::temp_path(target);
    std::fs::copy(input, &tmp).at(&tmp)?;
    let result = (|| -> Result<()> {
        let h5 = |e: hdf5::Error| Error::format(&tmp, format!("writing {what}: {e}"));
        let file = hdf5::File::open_rw(&tmp).map_err(h5)?;
        let (obs, index_name) = obs_index(input, &file)?;
        let names = super::h5::read_strings(input, &obs.dataset(&index_name).map_err(h5)?, "obs index", None)?;
        let order = rows_of_results(input, &names, ids)?;
        edit(&file, &obs, &order, &h5)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn results_match_rows_in_order_or_by_unique_name() {
        let p = Path::new("a.h5ad");
        // Every cell has a result: row for row, repeated names included.
        let all = strings(&["a", "b", "a"]);
        assert_eq!(rows_of_results(p, &all, &all).unwrap(), [Some(0), Some(1), Some(2)]);
        // Some cells have none: by name.
        let names = strings(&["a", "b", "c"]);
        assert_eq!(rows_of_results(p, &names, &strings(&["a", "c"])).unwrap(), [Some(0), None, Some(1)]);
        // A repeated name among the rows with a result, or among the results, is refused.
        for (names, ids) in [(&["a", "b", "a"][..], &["a", "b"][..]), (&["a", "b"][..], &["a", "a"][..])] {
            let e = rows_of_results(p, &strings(names), &strings(ids)).unwrap_err().to_string();
            assert!(e.contains("a.h5ad") && e.contains("'a' names more than one cell"), "{e}");
        }
        // A repeated name without a result is no obstacle.
        assert_eq!(rows_of_results(p, &strings(&["x", "b", "x"]), &strings(&["b"])).unwrap(), [None, Some(0), None]);
    }
}
