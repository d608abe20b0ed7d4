//! Filling the encoder's slots from a safetensors file: the import direction of `mapping`,
//! shared by `import hf` (a BERT directory) and `import values` (corrflow's value models).

use burn::module::Param;
use burn::tensor::{Tensor, TensorData};
use corrflow_io::error::Result;

use super::mapping;
use super::safetensors_file::Weights;
use crate::CpuBackend;

/// The import direction of the mapping: each slot filled from the file, by name and shape
/// (`Linear` weights `[out, in]`, as PyTorch keeps them). The tensors taken are listed in
/// `used`, so the caller can refuse a file with tensors the model has no place for.
pub(super) struct FromFile<'a> {
    w: &'a Weights,
    pub used: Vec<String>,
    /// A Hugging Face BERT: token type 0 folded into the positions, and the MLM bias also
    /// under its older name. Off for corrflow's own files, which hold exactly the slots.
    bert: bool,
}

impl<'a> FromFile<'a> {
    pub fn bert(w: &'a Weights) -> Self {
        Self { w, used: Vec::new(), bert: true }
    }

    pub fn exact(w: &'a Weights) -> Self {
        Self { w, used: Vec::new(), bert: false }
    }
}

impl mapping::Slots for FromFile<'_> {
    fn matrix(&mut self, name: &str, p: &mut mapping::Matrix, linear: bool) -> Result<()> {
        let [rows, cols] = p.val().dims();
        let full = self.w.resolve(name)?;
        // [out, in] (PyTorch) → [in, out] (burn).
        let mut values = if linear {
            mapping::transpose(&self.w.f32(&full, &[cols, rows])?, cols, rows)
        } else {
            self.w.f32(&full, &[rows, cols])?
        };
        self.used.push(full);
        if self.bert && name == mapping::POSITIONS {
            self.fold_token_type(&mut values, cols)?;
        }
        *p = param2(values, [rows, cols]);
        Ok(())
    }

    fn vector(&mut self, name: &str, p: &mut mapping::Vector) -> Result<()> {
        let [n] = p.val().dims();
        let full = match self.w.resolve(name) {
            Err(_) if self.bert && name == mapping::MLM_BIAS => self.w.resolve("cls.predictions.decoder.bias")?,
            found => found?,
        };
        let values = self.w.f32(&full, &[n])?;
        self.used.push(full);
        *p = param1(values);
        Ok(())
    }
}

impl FromFile<'_> {
    /// Token type 0 is added to every position: it is folded into the position embeddings
    /// (exact). Zeros are skipped, so a file exported from corrflow (zero token types) gives back
    /// the very bits (-0.0 + 0.0 would be +0.0).
    fn fold_token_type(&mut self, positions: &mut [f32], h: usize) -> Result<()> {
        let Ok(types) = self.w.resolve("embeddings.token_type_embeddings.weight") else { return Ok(()) };
        let rows = self.w.shape(&types)[0];
        let tt = self.w.f32(&types, &[rows, h])?;
        self.used.push(types);
        for row in positions.chunks_mut(h) {
            row.iter_mut().zip(&tt[..h]).filter(|(_, b)| **b != 0.0).for_each(|(a, b)| *a += b);
        }
        Ok(())
    }
}

fn param1(v: Vec<f32>) -> Param<Tensor<CpuBackend, 1>> {
    let n = v.len();
    Param::from_tensor(Tensor::from_data(TensorData::new(v, [n]), &Default::default()))
}

fn param2(v: Vec<f32>, shape: [usize; 2]) -> Param<Tensor<CpuBackend, 2>> {
    Param::from_tensor(Tensor::from_data(TensorData::new(v, shape), &Default::default()))
}
