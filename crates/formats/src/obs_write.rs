//! Writing per-cell columns into a copy of an h5ad's `obs` (AnnData's on-disk `string-array`
//! and `array` encodings, listed in `column-order`), rows matched to the file's obs index.

use std::path::Path;

use hdf5::types::VarLenUnicode;

use crate::error::Result;

/// One new obs column, by cell id (cells without a value: empty text / NaN).
pub enum NewObsColumn {
    Text(Vec<String>),
    Number(Vec<f32>),
}

/// Copies `input` to `target` with `columns` added to `obs` (replacing columns of the same
/// name), written under a temporary name and renamed.
pub fn write_obs_columns(
    input: &Path,
    target: &Path,
    ids: &[String],
    columns: &[(String, NewObsColumn)],
) -> Result<()> {
    super::h5ad_copy::edit_copy(input, target, "obs columns", ids, |_file, obs, order, h5| {
        let text = |s: &str| -> VarLenUnicode { s.replace('\0', "").parse().expect("any text without NUL") };
        for (name, column) in columns {
            if obs.link_exists(name) {
                obs.unlink(name).map_err(h5)?;
            }
            let (ds, kind) = match column {
                NewObsColumn::Text(v) => {
                    let values: Vec<VarLenUnicode> =
                        order.iter().map(|i| text(i.map_or("", |i| v[i].as_str()))).collect();
                    (obs.new_dataset_builder().with_data(&values).create(name.as_str()).map_err(h5)?, "string-array")
                }
                NewObsColumn::Number(v) => {
                    let values: Vec<f32> = order.iter().map(|i| i.map_or(f32::NAN, |i| v[i])).collect();
                    (obs.new_dataset_builder().with_data(&values).create(name.as_str()).map_err(h5)?, "array")
                }
            };
            for (k, v) in [("encoding-type", kind), ("encoding-version", "0.2.0")] {
                ds.new_attr::<VarLenUnicode>().create(k).and_then(|a| a.write_scalar(&text(v))).map_err(h5)?;
            }
        }
        // `column-order` lists the dataframe's columns: the old ones, then the new ones.
        let mut order_names: Vec<String> = match obs.attr("column-order") {
            Ok(a) => a
                .read_raw::<VarLenUnicode>()
                .map(|v| v.iter().map(|s| s.as_str().to_string()).collect())
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        order_names.retain(|n| !columns.iter().any(|(c, _)| c == n));
        order_names.extend(columns.iter().map(|(c, _)| c.clone()));
        if obs.attr("column-order").is_ok() {
            obs.delete_attr("column-order").map_err(h5)?;
        }
        let values: Vec<VarLenUnicode> = order_names.iter().map(|s| text(s)).collect();
        obs.new_attr::<VarLenUnicode>()
            .shape(values.len())
            .create("column-order")
            .and_then(|a| a.write(&values))
            .map_err(h5)?;
        Ok(())
    })
}
