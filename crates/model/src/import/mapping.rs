//! The one name mapping between corrflow's encoder and Hugging Face's BERT, walked both ways:
//! `import hf` fills the model's parameters from a file, `export hf-model` reads them out.
//!
//! Names are BertModel's (no `bert.` prefix) and the MLM head's `cls.predictions.*`. Linear
//! weights are PyTorch's `[out, in]` in the file and burn's `[in, out]` in the model; a slot
//! says which, and the shapes come from the model (built from the config) itself.

use burn::module::Param;
use burn::nn::{LayerNorm, Linear};
use burn::tensor::Tensor;
use corrflow_io::error::Result;

use crate::{CellEncoder, CpuBackend, WholeCellHead};

pub(crate) type Matrix = Param<Tensor<CpuBackend, 2>>;
pub(crate) type Vector = Param<Tensor<CpuBackend, 1>>;

/// One direction of the mapping: what to do with each named parameter.
pub(crate) trait Slots {
    /// A 2-D parameter; `linear`: stored transposed (a PyTorch `Linear` weight).
    fn matrix(&mut self, name: &str, p: &mut Matrix, linear: bool) -> Result<()>;
    fn vector(&mut self, name: &str, p: &mut Vector) -> Result<()>;
}

/// The BERT position embeddings' name (import folds the token-type embedding into it).
pub(crate) const POSITIONS: &str = "embeddings.position_embeddings.weight";
/// The MLM head's output bias (older files name it `cls.predictions.decoder.bias`).
pub(crate) const MLM_BIAS: &str = "cls.predictions.bias";
/// The first tensor of the MLM head: a file with it has the head.
pub(crate) const MLM_HEAD: &str = "cls.predictions.transform.dense.weight";

/// The encoder's parameters by their BERT names, and, with `mlm_head`, the MLM head's (its
/// decoder is tied to the token embeddings, in corrflow as in BERT).
pub(crate) fn walk(m: &mut CellEncoder<CpuBackend>, s: &mut impl Slots, mlm_head: bool) -> Result<()> {
    s.matrix("embeddings.word_embeddings.weight", &mut m.tokens.weight, false)?;
    s.matrix(POSITIONS, &mut m.positions.weight, false)?;
    norm(s, "embeddings.LayerNorm", &mut m.embed_norm)?;
    for (i, layer) in m.encoder.layers.iter_mut().enumerate() {
        let at = |part: &str| format!("encoder.layer.{i}.{part}");
        let mha = &mut layer.mha;
        linear(s, &at("attention.self.query"), &mut mha.query)?;
        linear(s, &at("attention.self.key"), &mut mha.key)?;
        linear(s, &at("attention.self.value"), &mut mha.value)?;
        linear(s, &at("attention.output.dense"), &mut mha.output)?;
        norm(s, &at("attention.output.LayerNorm"), &mut layer.norm_1)?;
        linear(s, &at("intermediate.dense"), &mut layer.pwff.linear_inner)?;
        linear(s, &at("output.dense"), &mut layer.pwff.linear_outer)?;
        norm(s, &at("output.LayerNorm"), &mut layer.norm_2)?;
    }
    if mlm_head {
        linear(s, "cls.predictions.transform.dense", &mut m.mlm_dense)?;
        norm(s, "cls.predictions.transform.LayerNorm", &mut m.mlm_norm)?;
        s.vector(MLM_BIAS, &mut m.mlm_bias)?;
    }
    Ok(())
}

/// The heads BERT has no slot for (the whole-cell head of WCED / Poisson, the label head of HCE
/// or a fine-tuned classifier), named `cell_head.*` / `label_head.*`, weights `[out, in]`.
pub(crate) fn walk_heads(m: &mut CellEncoder<CpuBackend>, s: &mut impl Slots) -> Result<()> {
    for (name, head) in [("cell_head", &mut m.cell_head), ("label_head", &mut m.label_head)] {
        if let Some(head) = head.as_mut() {
            whole_cell(s, name, head)?;
        }
    }
    Ok(())
}

fn whole_cell(s: &mut impl Slots, name: &str, head: &mut WholeCellHead<CpuBackend>) -> Result<()> {
    linear(s, &format!("{name}.dense"), &mut head.dense)?;
    linear(s, &format!("{name}.out"), &mut head.out)
}

pub(crate) fn linear(s: &mut impl Slots, name: &str, l: &mut Linear<CpuBackend>) -> Result<()> {
    s.matrix(&format!("{name}.weight"), &mut l.weight, true)?;
    let out = l.weight.val().dims()[1];
    let bias = l.bias.get_or_insert_with(|| Param::from_tensor(Tensor::zeros([out], &Default::default())));
    s.vector(&format!("{name}.bias"), bias)
}

fn norm(s: &mut impl Slots, name: &str, n: &mut LayerNorm<CpuBackend>) -> Result<()> {
    norm_named(s, name, n, ("weight", "bias"))
}

/// A LayerNorm whose gain and shift are `NAME.GAIN` and `NAME.SHIFT` (BERT: `weight`, `bias`;
/// corrflow's ONNX names: `gamma`, `beta`).
pub(crate) fn norm_named(
    s: &mut impl Slots,
    name: &str,
    n: &mut LayerNorm<CpuBackend>,
    (gain, shift): (&str, &str),
) -> Result<()> {
    s.vector(&format!("{name}.{gain}"), &mut n.gamma)?;
    let h = n.gamma.val().dims()[0];
    let beta = n.beta.get_or_insert_with(|| Param::from_tensor(Tensor::zeros([h], &Default::default())));
    s.vector(&format!("{name}.{shift}"), beta)
}

/// `[rows, cols]` row-major values transposed to `[cols, rows]`.
pub(crate) fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0f32; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = v[r * cols + c];
        }
    }
    t
}
