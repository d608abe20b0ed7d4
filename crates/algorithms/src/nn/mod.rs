//! Fused neural-network kernels for the CPU trainer, as plain functions over row-major `f32`
//! slices: they compute what a composition of tensor operations computes, in cache-sized tiles,
//! without the large intermediate tensors (the `[batch, heads, len, len]` attention scores, the
//! `[masked, vocab]` decoder logits).
//!
//! Every kernel gives the same bits for the same inputs whatever the thread count: work is split
//! into independent units (a sequence and a head), each computed by one thread in a fixed order.

pub mod adamw;
pub mod attention;
pub mod decoder;
pub mod dropout;
mod gemm_f32;
pub mod layer_norm;
pub mod linear;
mod rows;

pub use adamw::{
    adamw_update, clip_coefficient, split_spans, sum_of_squares, AdamWConstants, AdamWHyper, AdamWSegment,
};
pub use attention::{attention_backward, attention_forward, AttentionGrads, AttentionShape, AttentionStats};
pub use decoder::{decoder_nll_backward, decoder_nll_forward, DecoderForward, DecoderGrads, DecoderShape};
pub use dropout::DropoutKey;
pub use gemm_f32::GemmKernels;
pub use layer_norm::{add_layer_norm_backward, add_layer_norm_forward, LayerNormGrads, LayerNormStats};
pub use linear::{linear_backward, linear_forward, LinearGrads, LinearShape};

/// Deterministic test inputs in `[lo, hi)`: a multiplicative hash of the index, offset by
/// `seed · mix`, so each test draws its own values without a generator.
#[cfg(test)]
pub(crate) fn test_values(n: usize, seed: u32, mix: u32, lo: f32, hi: f32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let u = ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed.wrapping_mul(mix)) >> 8) as f32
                / (1u32 << 24) as f32;
            u * (hi - lo) + lo
        })
        .collect()
}
