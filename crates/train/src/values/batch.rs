//! A value batch ([`corrflow_mask::values::ValueBatch`], built on the host) as the objectives'
//! tensors.

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor, TensorData};
use corrflow_mask::values::ValueBatch;
use corrflow_model::objective::{BatchTensors, ValueTensors};

/// The batch as the objectives' tensors.
pub(crate) fn tensors<B: Backend>(b: &ValueBatch, step: u64, device: &B::Device) -> BatchTensors<B> {
    let (rows, len, genes) = (b.rows, b.len, b.genes.max(1));
    let f2 = |v: &[f32], shape: [usize; 2]| Tensor::<B, 2>::from_data(TensorData::new(v.to_vec(), shape), device);
    let pad: Vec<bool> = b.attention_mask.iter().map(|&m| !m).collect();
    // Pooled heads (none on value models) would read the genes: every visible position.
    let weights: Vec<f32> = (0..rows * len).map(|i| f32::from(u8::from(b.attention_mask[i] && i % len != 0))).collect();
    BatchTensors {
        input_ids: Tensor::<B, 2, Int>::from_data(TensorData::new(b.input_ids.clone(), [rows, len]), device),
        pad: Tensor::<B, 2, Bool>::from_data(TensorData::new(pad, [rows, len]), device),
        gene_weights: f2(&weights, [rows, len]),
        masked_index: Tensor::<B, 1, Int>::from_data(TensorData::new(Vec::<i64>::new(), [0]), device),
        targets: Tensor::<B, 1, Int>::from_data(TensorData::new(Vec::<i64>::new(), [0]), device),
        masked_targets: Default::default(),
        masked: 0,
        detected: None,
        score: None,
        labels: b
            .label_codes
            .as_ref()
            .map(|c| Tensor::<B, 1, Int>::from_data(TensorData::new(c.clone(), [c.len()]), device)),
        label_codes: b.label_codes.clone().map(std::sync::Arc::new),
        step,
        value: Some(ValueTensors {
            values: f2(&b.values, [rows, len]),
            counts: f2(&b.counts, [rows, genes]),
            n_counts: f2(&b.totals, [rows, 1]),
            measured: f2(&b.measured, [rows, genes]),
        }),
    }
}
