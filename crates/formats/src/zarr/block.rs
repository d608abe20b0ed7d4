//! A decoded run of a zarr array's elements, and what it reads as: numbers, integers, a sparse
//! matrix's column indices, strings. Errors are messages for the array to place.

use std::ops::Range;

/// Elements as decoded: integers widened to i64, except i32, the indices of a sparse matrix,
/// which keep their width so that a read of them is one buffer, not three (as read, widened,
/// narrowed to u32).
#[derive(Clone, Debug)]
pub enum Block {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    Str(Vec<String>),
    /// Strings as stored: element `i` is `bytes[offsets[i]..offsets[i + 1]]` (UTF-8, checked
    /// when decoded). Only in the cache; a slice of it is `Str`.
    Text {
        bytes: Vec<u8>,
        offsets: Vec<usize>,
    },
}

impl Block {
    pub fn slice(&self, r: Range<usize>) -> Self {
        match self {
            Self::F32(v) => Self::F32(v[r].to_vec()),
            Self::F64(v) => Self::F64(v[r].to_vec()),
            Self::I32(v) => Self::I32(v[r].to_vec()),
            Self::I64(v) => Self::I64(v[r].to_vec()),
            Self::Bool(v) => Self::Bool(v[r].to_vec()),
            Self::Str(v) => Self::Str(v[r].to_vec()),
            Self::Text { bytes, offsets } => Self::Str(text_strings(bytes, offsets, r)),
        }
    }

    /// Numbers as f64.
    pub fn into_f64(self) -> Result<Vec<f64>, String> {
        Ok(match self {
            Self::F32(v) => v.into_iter().map(f64::from).collect(),
            Self::F64(v) => v,
            Self::I32(v) => v.into_iter().map(f64::from).collect(),
            Self::I64(v) => v.into_iter().map(|x| x as f64).collect(),
            Self::Bool(v) => v.into_iter().map(|b| f64::from(u8::from(b))).collect(),
            Self::Str(_) | Self::Text { .. } => return Err("expected numbers, found strings".into()),
        })
    }

    /// Integers as i64 (`dtype` names the array's type in the error).
    pub fn into_i64(self, dtype: &str) -> Result<Vec<i64>, String> {
        match self {
            Self::I64(v) => Ok(v),
            Self::I32(v) => Ok(v.into_iter().map(i64::from).collect()),
            Self::Bool(v) => Ok(v.into_iter().map(i64::from).collect()),
            _ => Err(format!("expected integers, found {dtype}")),
        }
    }

    /// Column indices, each checked to lie in `0..bound`.
    pub fn into_indices(self, bound: usize, dtype: &str) -> Result<Vec<u32>, String> {
        match self {
            Self::I32(v) => {
                check_indices(v.iter().map(|&x| i64::from(x)), bound)?;
                // Same width: the collect reuses the buffer.
                Ok(v.into_iter().map(|x| x as u32).collect())
            }
            b => {
                let v = b.into_i64(dtype)?;
                check_indices(v.iter().copied(), bound)?;
                Ok(v.into_iter().map(|x| x as u32).collect())
            }
        }
    }

    /// Strings; numbers (gene ids or category labels written as numbers) become strings.
    pub fn into_strings(self) -> Vec<String> {
        match self {
            Self::Str(v) => v,
            Self::Text { bytes, offsets } => text_strings(&bytes, &offsets, 0..offsets.len().saturating_sub(1)),
            Self::F32(v) => v.iter().map(f32::to_string).collect(),
            Self::F64(v) => v.iter().map(f64::to_string).collect(),
            Self::I32(v) => v.iter().map(i32::to_string).collect(),
            Self::I64(v) => v.iter().map(i64::to_string).collect(),
            Self::Bool(v) => v.iter().map(bool::to_string).collect(),
        }
    }
}

/// Refuses an index outside `0..bound` (or past u32, how columns are stored), naming it.
fn check_indices(mut values: impl Iterator<Item = i64>, bound: usize) -> Result<(), String> {
    let limit = bound.min(u32::MAX as usize + 1) as i64;
    match values.find(|&x| x < 0 || x >= limit) {
        Some(bad) => Err(format!("index {bad} outside 0..{bound}")),
        None => Ok(()),
    }
}

/// Elements `r` of a `Block::Text`. Lossless: each element was checked to be UTF-8 when the
/// block was decoded.
fn text_strings(bytes: &[u8], offsets: &[usize], r: Range<usize>) -> Vec<String> {
    r.map(|i| String::from_utf8_lossy(&bytes[offsets[i]..offsets[i + 1]]).into_owned()).collect()
}
