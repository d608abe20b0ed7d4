//! Columns of an AnnData dataframe (`obs`, `var`, `raw/var`) in a zarr store, in every encoding
//! anndata writes: `string-array`, numeric `array`, `categorical` (codes + categories),
//! `nullable-integer`, `nullable-boolean` and `nullable-string-array` (values + mask).

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::array::{self, Kind, Store, ZArray};
use crate::error::{Error, Result};
use crate::obs::{decode_categories, Column};
use crate::{ObsKind, ObsValues};

enum Source {
    Plain(ZArray),
    Categorical { codes: ZArray, categories: Vec<String> },
    Nullable { values: ZArray, mask: ZArray },
}

/// Reads one dataframe column by row ranges.
pub struct ZColumn {
    path: PathBuf,
    what: String,
    len: usize,
    source: Source,
}

impl ZColumn {
    pub fn open(path: &Path, store: &Store, frame: &str, col: Column<'_>) -> Result<Self> {
        if !array::exists(path, frame) {
            return Err(Error::format(path, format!("AnnData zarr store without a '{frame}' dataframe")));
        }
        let attrs = array::group_attrs(path, frame)?;
        let name = match col {
            Column::Index => array::attr_str(&attrs, "_index")
                .ok_or_else(|| Error::format(path, format!("{frame} has no _index attribute naming its index column")))?
                .to_string(),
            Column::Named(n) => n.to_string(),
        };
        let key = format!("{frame}/{name}");
        let what = key.clone();
        let missing = || {
            let cols: Vec<String> = array::members(path, frame).into_iter().filter(|m| !m.starts_with("__")).collect();
            Error::format(path, format!("{frame} has no column '{name}' (columns: {})", cols.join(", ")))
        };
        let source = if let Some(a) = ZArray::open(path, store, &key)? {
            Source::Plain(a)
        } else if array::exists(path, &key) {
            let enc = array::group_attrs(path, &key)?;
            let part = |p: &str| {
                ZArray::open(path, store, &format!("{key}/{p}"))?
                    .ok_or_else(|| Error::format(path, format!("{key}: no '{p}' array")))
            };
            match array::attr_str(&enc, "encoding-type") {
                Some("categorical") => {
                    let categories = part("categories")?.read_strings(None)?;
                    Source::Categorical { codes: part("codes")?, categories }
                }
                Some("nullable-integer" | "nullable-boolean" | "nullable-string-array") => {
                    Source::Nullable { values: part("values")?, mask: part("mask")? }
                }
                other => {
                    return Err(Error::format(
                        path,
                        format!("{key}: column encoding {other:?} is not one anndata writes for a dataframe column"),
                    ))
                }
            }
        } else {
            return Err(missing());
        };
        let len = match &source {
            Source::Plain(a) => a.shape(),
            Source::Categorical { codes, .. } => codes.shape(),
            Source::Nullable { values, mask } => {
                if mask.shape() != values.shape() {
                    let msg =
                        format!("{what}: its mask has shape {:?} but its values {:?}", mask.shape(), values.shape());
                    return Err(Error::format(path, msg));
                }
                values.shape()
            }
        };
        let len = match len {
            [n] => *n,
            other => return Err(Error::format(path, format!("{what}: expected a 1-d column, found shape {other:?}"))),
        };
        Ok(Self { path: path.to_path_buf(), what, len, source })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn kind(&self) -> ObsKind {
        match &self.source {
            Source::Plain(a) | Source::Nullable { values: a, .. } => obs_kind(a.kind()),
            Source::Categorical { .. } => ObsKind::Utf8,
        }
    }

    /// Reads rows `rows` (all rows when `None`).
    pub fn read(&self, rows: Option<Range<usize>>) -> Result<ObsValues> {
        let (values, mask) = match &self.source {
            Source::Categorical { codes, categories } => {
                let codes = codes.read_i64(rows)?;
                return Ok(ObsValues::Utf8(decode_categories(&self.path, &self.what, &codes, categories)?));
            }
            Source::Plain(a) => (a, None),
            Source::Nullable { values, mask } => (values, Some(mask.read_i64(rows.clone())?)),
        };
        let missing = |i: usize| mask.as_ref().is_some_and(|m| m.get(i).is_some_and(|&x| x != 0));
        fn keep<T>(v: Vec<T>, missing: impl Fn(usize) -> bool) -> Vec<Option<T>> {
            v.into_iter().enumerate().map(|(i, x)| (!missing(i)).then_some(x)).collect()
        }
        Ok(match obs_kind(values.kind()) {
            ObsKind::Utf8 => ObsValues::Utf8(keep(values.read_strings(rows)?, missing)),
            ObsKind::Float64 => ObsValues::Float64(keep(values.read_f64(rows)?, missing)),
            ObsKind::Int64 => ObsValues::Int64(keep(values.read_i64(rows)?, missing)),
            ObsKind::Boolean => {
                ObsValues::Boolean(keep(values.read_i64(rows)?.into_iter().map(|x| x != 0).collect(), missing))
            }
        })
    }
}

fn obs_kind(k: Kind) -> ObsKind {
    match k {
        Kind::F32 | Kind::F64 => ObsKind::Float64,
        Kind::Int => ObsKind::Int64,
        Kind::Bool => ObsKind::Boolean,
        Kind::Str => ObsKind::Utf8,
    }
}
