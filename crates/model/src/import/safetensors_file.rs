//! The tensors of a `model.safetensors` file, read with the `safetensors` crate and checked:
//! names (with or without the `bert.` prefix of task models), shapes and dtypes (F32, F16 and
//! BF16, widened to f32).

use std::path::{Path, PathBuf};

use corrflow_io::error::{Error, Result};
use safetensors::{Dtype, SafeTensors};

pub struct Weights {
    path: PathBuf,
    bytes: Vec<u8>,
    names: Vec<String>,
}

impl Weights {
    /// The tensors of `bytes`, read from `path`.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Self> {
        let names = SafeTensors::deserialize(&bytes)
            .map_err(|e| {
                let why = super::safetensors_header::explain(&bytes).unwrap_or_else(|| e.to_string());
                Error::format(path, format!("not a safetensors file: {why}"))
            })?
            .names()
            .into_iter()
            .map(String::from)
            .collect();
        Ok(Self { path: path.to_path_buf(), bytes, names })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn tensors(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).expect("checked when opened")
    }

    pub fn names(&self) -> Vec<String> {
        let mut n = self.names.clone();
        n.sort();
        n
    }

    /// The stored name of `name` (BertModel's) in this file: as is, or under `bert.`.
    pub fn resolve(&self, name: &str) -> Result<String> {
        [name.to_string(), format!("bert.{name}")]
            .into_iter()
            .find(|n| self.names.contains(n))
            .ok_or_else(|| Error::format(&self.path, format!("has no tensor '{name}' (nor 'bert.{name}')")))
    }

    pub fn shape(&self, name: &str) -> Vec<usize> {
        self.tensors().tensor(name).map(|t| t.shape().to_vec()).unwrap_or_default()
    }

    pub fn len(&self, name: &str) -> usize {
        self.shape(name).iter().product()
    }

    /// The values of tensor `name` as f32, which must have `shape`.
    pub fn f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let t = self.tensors().tensor(name).map_err(|e| Error::format(&self.path, format!("'{name}': {e}")))?;
        if t.shape() != shape {
            return Err(Error::format(
                &self.path,
                format!("'{name}' has shape {:?}, the config says {shape:?}", t.shape()),
            ));
        }
        let data = t.data();
        let values: Vec<f32> = match t.dtype() {
            Dtype::F32 => data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            Dtype::F16 => data.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            Dtype::BF16 => data.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            other => {
                return Err(Error::format(&self.path, format!("'{name}' is {other:?}; F32, F16 or BF16 expected")))
            }
        };
        if let Some(bad) = values.iter().position(|v| !v.is_finite()) {
            return Err(Error::format(&self.path, format!("'{name}' holds a non-finite value at {bad}")));
        }
        Ok(values)
    }
}
