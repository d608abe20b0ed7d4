//! Writing cell vectors into a copy of an h5ad as `obsm["X_corrflow"]` (AnnData's on-disk
//! `array` encoding), rows matched to the file's obs index.

use std::path::Path;

use crate::error::{Error, Result};

/// Copies `input` to `target` with the embeddings as `obsm["X_corrflow"]` (rows in obs order;
/// cells without embedding are NaN), written under a temporary name and renamed.
pub fn write_obsm(input: &Path, target: &Path, ids: &[String], emb: &[f32], dim: usize) -> Result<()> {
    use hdf5::types::VarLenUnicode;
    super::h5ad_copy::edit_copy(input, target, "obsm", ids, |file, _obs, order, h5| {
        let mut matrix = vec![f32::NAN; order.len() * dim];
        for (r, i) in order.iter().enumerate() {
            if let Some(i) = *i {
                matrix[r * dim..(r + 1) * dim].copy_from_slice(&emb[i * dim..(i + 1) * dim]);
            }
        }
        let obsm = match file.group("obsm") {
            Ok(g) => g,
            Err(_) => {
                let g = file.create_group("obsm").map_err(h5)?;
                for (k, v) in [("encoding-type", "dict"), ("encoding-version", "0.1.0")] {
                    let v: VarLenUnicode = v.parse().expect("ascii");
                    g.new_attr::<VarLenUnicode>().create(k).and_then(|a| a.write_scalar(&v)).map_err(h5)?;
                }
                g
            }
        };
        if obsm.link_exists("X_corrflow") {
            obsm.unlink("X_corrflow").map_err(h5)?;
        }
        let arr = ndarray::Array2::from_shape_vec((order.len(), dim), matrix)
            .map_err(|e| Error::internal("obsm", e.to_string()))?;
        let d = obsm.new_dataset_builder().with_data(&arr).create("X_corrflow").map_err(h5)?;
        for (k, v) in [("encoding-type", "array"), ("encoding-version", "0.2.0")] {
            let v: VarLenUnicode = v.parse().expect("ascii");
            d.new_attr::<VarLenUnicode>().create(k).and_then(|a| a.write_scalar(&v)).map_err(h5)?;
        }
        Ok(())
    })
}
