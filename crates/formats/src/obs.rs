//! Columns of AnnData dataframes (`obs`, `var`) in both on-disk layouts, read by row slices.
//!
//! Current layout (anndata ≥ 0.8): a group with an `_index` attribute; columns are string
//! arrays, numeric arrays, `categorical` groups (codes + categories) or `nullable-*` groups.
//! anndata 0.7: categorical codes carry a `categories` attribute and the categories live in
//! `__categories/<column>`. Legacy (anndata < 0.7): one compound dataset with an `index` field,
//! byte-string columns and categorical codes whose categories are `uns/<column>_categories`.

use std::ops::Range;
use std::path::{Path, PathBuf};

use hdf5::types::CompoundField;
use hdf5::{Dataset, Group};
use serde::{Deserialize, Serialize};

use super::h5::{self, NumKind};
use crate::error::{Error, Result};

/// The type an obs column is written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ObsKind {
    Utf8,
    Float64,
    Int64,
    Boolean,
}

/// Values of one obs column for a chunk of cells; `None` = missing.
#[derive(Clone, Debug, PartialEq)]
pub enum ObsValues {
    Utf8(Vec<Option<String>>),
    Float64(Vec<Option<f64>>),
    Int64(Vec<Option<i64>>),
    Boolean(Vec<Option<bool>>),
}

impl ObsValues {
    pub fn len(&self) -> usize {
        match self {
            Self::Utf8(v) => v.len(),
            Self::Float64(v) => v.len(),
            Self::Int64(v) => v.len(),
            Self::Boolean(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as strings (gene ids may be stored as numbers).
    pub fn into_strings(self) -> Vec<String> {
        fn s<T: ToString>(v: Vec<Option<T>>) -> Vec<String> {
            v.into_iter().map(|x| x.map(|x| x.to_string()).unwrap_or_default()).collect()
        }
        match self {
            Self::Utf8(v) => v.into_iter().map(Option::unwrap_or_default).collect(),
            Self::Float64(v) => s(v),
            Self::Int64(v) => s(v),
            Self::Boolean(v) => s(v),
        }
    }
}

/// Which column of a dataframe.
#[derive(Clone, Copy, Debug)]
pub enum Column<'a> {
    Index,
    Named(&'a str),
}

/// Reads one dataframe column by row ranges.
pub struct ColumnReader {
    path: PathBuf,
    what: String,
    len: usize,
    source: ColumnSource,
}

enum ColumnSource {
    Strings(Dataset),
    Numbers(Dataset, NumKind),
    Categorical { codes: Dataset, categories: Vec<String> },
    Nullable { values: Dataset, mask: Dataset, kind: Option<NumKind> },
    CompoundStrings(Dataset, CompoundField),
    CompoundNumbers(Dataset, CompoundField, NumKind),
    CompoundCategorical { table: Dataset, field: CompoundField, categories: Vec<String> },
}

impl ColumnReader {
    /// Opens column `col` of the dataframe at `frame` (e.g. `obs`, `var`, `raw/var`, `raw.var`).
    pub fn open(path: &Path, file: &Group, frame: &str, col: Column<'_>) -> Result<Self> {
        let fmt_err = |msg: String| Error::format(path, msg);
        if let Ok(group) = file.group(frame) {
            let name = match col {
                Column::Index => h5::attr_string(&group, "_index")
                    .ok_or_else(|| fmt_err(format!("{frame} has no _index attribute naming its index column")))?,
                Column::Named(n) => n.to_string(),
            };
            if !group.link_exists(&name) {
                return Err(fmt_err(format!("{frame} has no column '{name}' (columns: {})", member_list(&group))));
            }
            let what = format!("{frame}/{name}");
            let source = Self::open_new_layout(path, file, &group, frame, &name)?;
            let len = source_len(path, &source, &what)?;
            return Ok(Self { path: path.to_path_buf(), what, len, source });
        }
        let table = file
            .dataset(frame)
            .map_err(|_| fmt_err(format!("no '{frame}' dataframe (neither a group nor a legacy compound table)")))?;
        let fields = h5::compound_fields(path, &table, frame)?
            .ok_or_else(|| fmt_err(format!("{frame} is a dataset but not a compound (legacy) table")))?;
        let name = match col {
            Column::Index => "index",
            Column::Named(n) => n,
        };
        let field = fields.iter().find(|f| f.name == name).cloned().ok_or_else(|| {
            let names: Vec<_> = fields.iter().map(|f| f.name.as_str()).collect();
            fmt_err(format!("{frame} has no column '{name}' (columns: {})", names.join(", ")))
        })?;
        let what = format!("{frame}.{name}");
        let len = table.shape().first().copied().unwrap_or(0);
        let source = match NumKind::of(&field.ty) {
            Some(kind) => {
                let cats_name = format!("uns/{name}_categories");
                if kind.is_integer() && kind != NumKind::Bool && file.link_exists("uns") && file.link_exists(&cats_name)
                {
                    let cats = file.dataset(&cats_name).map_err(|e| Error::hdf5(path, &cats_name, e))?;
                    let categories = read_category_labels(path, &cats, &cats_name)?;
                    ColumnSource::CompoundCategorical { table, field, categories }
                } else {
                    ColumnSource::CompoundNumbers(table, field, kind)
                }
            }
            None => ColumnSource::CompoundStrings(table, field),
        };
        Ok(Self { path: path.to_path_buf(), what, len, source })
    }

    fn open_new_layout(path: &Path, file: &Group, group: &Group, frame: &str, name: &str) -> Result<ColumnSource> {
        let what = format!("{frame}/{name}");
        if let Ok(sub) = group.group(name) {
            let enc = h5::attr_string(&sub, "encoding-type").unwrap_or_default();
            let ds = |n: &str| sub.dataset(n).map_err(|_| Error::format(path, format!("{what} ({enc}) has no '{n}'")));
            return match enc.as_str() {
                "categorical" => {
                    let cats = ds("categories")?;
                    let categories = read_category_labels(path, &cats, &format!("{what}/categories"))?;
                    Ok(ColumnSource::Categorical { codes: ds("codes")?, categories })
                }
                "nullable-integer" | "nullable-boolean" | "nullable-string-array" => {
                    let values = ds("values")?;
                    let kind =
                        if enc == "nullable-string-array" { None } else { Some(h5::num_kind(path, &values, &what)?) };
                    Ok(ColumnSource::Nullable { values, mask: ds("mask")?, kind })
                }
                other => Err(Error::format(path, format!("{what}: unsupported column encoding-type '{other}'"))),
            };
        }
        let ds = group.dataset(name).map_err(|e| Error::hdf5(path, &what, e))?;
        // anndata 0.7 categoricals: integer codes with their categories in __categories/<name>.
        let cats_path = format!("__categories/{name}");
        if ds.attr("categories").is_ok() && group.link_exists("__categories") && group.link_exists(&cats_path) {
            let cats = group.dataset(&cats_path).map_err(|e| Error::hdf5(path, &cats_path, e))?;
            let categories = read_category_labels(path, &cats, &format!("{frame}/{cats_path}"))?;
            return Ok(ColumnSource::Categorical { codes: ds, categories });
        }
        let _ = file;
        match NumKind::of(&h5::descriptor(path, &ds, &what)?) {
            Some(kind) => Ok(ColumnSource::Numbers(ds, kind)),
            None => Ok(ColumnSource::Strings(ds)),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn kind(&self) -> ObsKind {
        match &self.source {
            ColumnSource::Strings(_)
            | ColumnSource::CompoundStrings(..)
            | ColumnSource::Categorical { .. }
            | ColumnSource::CompoundCategorical { .. } => ObsKind::Utf8,
            ColumnSource::Numbers(_, k) | ColumnSource::CompoundNumbers(_, _, k) => num_obs_kind(*k),
            ColumnSource::Nullable { kind: Some(k), .. } => num_obs_kind(*k),
            ColumnSource::Nullable { kind: None, .. } => ObsKind::Utf8,
        }
    }

    /// Reads rows `rows` (all rows when `None`).
    pub fn read(&self, rows: Option<Range<usize>>) -> Result<ObsValues> {
        let (path, what) = (self.path.as_path(), self.what.as_str());
        Ok(match &self.source {
            ColumnSource::Strings(ds) => {
                ObsValues::Utf8(h5::read_strings(path, ds, what, rows)?.into_iter().map(Some).collect())
            }
            ColumnSource::Numbers(ds, kind) => read_numbers(path, ds, what, *kind, rows, None)?,
            ColumnSource::Categorical { codes, categories } => {
                let codes = h5::read_i64(path, codes, what, rows)?;
                ObsValues::Utf8(decode_categories(path, what, &codes, categories)?)
            }
            ColumnSource::Nullable { values, mask, kind } => {
                let mask = h5::read_i64(path, mask, what, rows.clone())?;
                match kind {
                    Some(kind) => read_numbers(path, values, what, *kind, rows, Some(&mask))?,
                    None => ObsValues::Utf8(
                        h5::read_strings(path, values, what, rows)?
                            .into_iter()
                            .zip(&mask)
                            .map(|(s, &m)| (m == 0).then_some(s))
                            .collect(),
                    ),
                }
            }
            ColumnSource::CompoundStrings(ds, f) => {
                ObsValues::Utf8(h5::read_compound_strings(path, ds, f, rows)?.into_iter().map(Some).collect())
            }
            ColumnSource::CompoundNumbers(ds, f, kind) => {
                numbers(h5::read_compound_f64(path, ds, f, rows)?, *kind, None)
            }
            ColumnSource::CompoundCategorical { table, field, categories } => {
                let codes: Vec<i64> =
                    h5::read_compound_f64(path, table, field, rows)?.into_iter().map(|c| c as i64).collect();
                ObsValues::Utf8(decode_categories(path, what, &codes, categories)?)
            }
        })
    }
}

fn num_obs_kind(k: NumKind) -> ObsKind {
    match k {
        NumKind::F32 | NumKind::F64 => ObsKind::Float64,
        NumKind::Bool => ObsKind::Boolean,
        _ => ObsKind::Int64,
    }
}

/// A numeric column: integers read as integers (through f64, ids past 2^53 would round and
/// unsigned ones past i64::MAX clamp), the rest as f64.
fn read_numbers(
    path: &Path,
    ds: &Dataset,
    what: &str,
    kind: NumKind,
    rows: Option<Range<usize>>,
    mask: Option<&[i64]>,
) -> Result<ObsValues> {
    if num_obs_kind(kind) != ObsKind::Int64 {
        return Ok(numbers(h5::read_f64(path, ds, what, kind, rows)?, kind, mask));
    }
    let values = h5::read_i64(path, ds, what, rows)?;
    Ok(ObsValues::Int64(values.into_iter().enumerate().map(|(i, v)| (!is_missing(mask, i)).then_some(v)).collect()))
}

/// Whether a nullable column's mask marks row `i` missing (no mask: none is).
fn is_missing(mask: Option<&[i64]>, i: usize) -> bool {
    mask.is_some_and(|m| m.get(i).is_some_and(|&x| x != 0))
}

fn numbers(values: Vec<f64>, kind: NumKind, mask: Option<&[i64]>) -> ObsValues {
    let missing = |i: usize| is_missing(mask, i);
    match num_obs_kind(kind) {
        ObsKind::Float64 => {
            ObsValues::Float64(values.into_iter().enumerate().map(|(i, v)| (!missing(i)).then_some(v)).collect())
        }
        ObsKind::Boolean => {
            ObsValues::Boolean(values.into_iter().enumerate().map(|(i, v)| (!missing(i)).then_some(v != 0.0)).collect())
        }
        _ => ObsValues::Int64(values.into_iter().enumerate().map(|(i, v)| (!missing(i)).then_some(v as i64)).collect()),
    }
}

pub(crate) fn decode_categories(
    path: &Path,
    what: &str,
    codes: &[i64],
    categories: &[String],
) -> Result<Vec<Option<String>>> {
    codes
        .iter()
        .map(|&c| match c {
            // pandas writes −1 for a missing value; any other negative code is damage.
            -1 => Ok(None),
            c if c < 0 => Err(Error::format(
                path,
                format!(
                    "{what}: category code {c} is invalid (−1 marks a missing value; codes are 0..{})",
                    categories.len()
                ),
            )),
            c => categories.get(c as usize).cloned().map(Some).ok_or_else(|| {
                Error::format(path, format!("{what}: category code {c} out of range ({} categories)", categories.len()))
            }),
        })
        .collect()
}

/// Category labels may be strings or numbers; both become strings.
fn read_category_labels(path: &Path, ds: &Dataset, what: &str) -> Result<Vec<String>> {
    match NumKind::of(&h5::descriptor(path, ds, what)?) {
        Some(kind) => Ok(h5::read_f64(path, ds, what, kind, None)?.into_iter().map(|v| v.to_string()).collect()),
        None => h5::read_strings(path, ds, what, None),
    }
}

fn source_len(path: &Path, source: &ColumnSource, what: &str) -> Result<usize> {
    let ds = match source {
        ColumnSource::Strings(d) | ColumnSource::Numbers(d, _) => d,
        ColumnSource::Categorical { codes, .. } => codes,
        ColumnSource::Nullable { values, .. } => values,
        ColumnSource::CompoundStrings(d, _) | ColumnSource::CompoundNumbers(d, ..) => d,
        ColumnSource::CompoundCategorical { table, .. } => table,
    };
    let shape = ds.shape();
    if shape.len() != 1 {
        return Err(Error::format(path, format!("{what}: expected a 1-d column, found shape {shape:?}")));
    }
    if let ColumnSource::Nullable { mask, .. } = source {
        if mask.shape() != shape {
            let msg = format!("{what}: its mask has shape {:?} but its values {shape:?}", mask.shape());
            return Err(Error::format(path, msg));
        }
    }
    Ok(shape[0])
}

fn member_list(group: &Group) -> String {
    group.member_names().map(|m| m.join(", ")).unwrap_or_default()
}

impl ObsValues {
    /// Appends `other`'s values (of the same kind; another kind's are left out, which the
    /// readers never produce within one column).
    pub fn extend(&mut self, other: Self) {
        match (self, other) {
            (Self::Utf8(a), Self::Utf8(b)) => a.extend(b),
            (Self::Float64(a), Self::Float64(b)) => a.extend(b),
            (Self::Int64(a), Self::Int64(b)) => a.extend(b),
            (Self::Boolean(a), Self::Boolean(b)) => a.extend(b),
            _ => debug_assert!(false, "obs values of one column change kind"),
        }
    }

    /// The values at `rows`, in that order.
    pub fn select(&self, rows: &[usize]) -> Self {
        fn pick<T: Clone>(v: &[T], rows: &[usize]) -> Vec<T> {
            rows.iter().map(|&r| v[r].clone()).collect()
        }
        match self {
            Self::Utf8(v) => Self::Utf8(pick(v, rows)),
            Self::Float64(v) => Self::Float64(pick(v, rows)),
            Self::Int64(v) => Self::Int64(pick(v, rows)),
            Self::Boolean(v) => Self::Boolean(pick(v, rows)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{decode_categories, Column, ColumnReader, ObsValues};
    use std::path::Path;

    #[test]
    fn integer_columns_keep_every_digit_and_unsigned_ones_past_i64_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ids.h5ad");
        let file = hdf5::File::create(&path).unwrap();
        let obs = file.create_group("obs").unwrap();
        // 2^53 + 1 is the first integer an f64 cannot hold.
        let ids = [9_007_199_254_740_993i64, -3, i64::MAX];
        obs.new_dataset_builder().with_data(&ids).create("id").unwrap();
        obs.new_dataset_builder().with_data(&[7u64, u64::MAX]).create("hash").unwrap();
        let read = |name| ColumnReader::open(&path, &file, "obs", Column::Named(name))?.read(None);
        assert_eq!(read("id").unwrap(), ObsValues::Int64(ids.iter().map(|&v| Some(v)).collect()));
        let e = read("hash").unwrap_err().to_string();
        assert!(e.contains("ids.h5ad") && e.contains("obs/hash") && e.contains("out of range"), "{e}");
    }

    #[test]
    fn category_code_minus_one_is_missing_and_other_negative_or_large_codes_are_refused() {
        let cats = vec!["a".to_string(), "b".to_string()];
        let p = Path::new("x.h5ad");
        let ok = decode_categories(p, "obs/ct", &[0, -1, 1], &cats).unwrap();
        assert_eq!(ok, vec![Some("a".into()), None, Some("b".into())]);
        for bad in [-2i64, 2] {
            let e = decode_categories(p, "obs/ct", &[0, bad], &cats).unwrap_err().to_string();
            assert!(e.contains("x.h5ad") && e.contains(&format!("code {bad}")), "{e}");
        }
    }
}
